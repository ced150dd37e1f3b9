"""Parse ``perf stat -x, -I <ms> -e ... -a [-A | --per-core | --per-socket]`` output.

The input format
----------------
perf's CSV (documented in perf-stat(1), "CSV FORMAT"; commas are never quoted, so a raw PMU
event's terms, ``cpu/event=0x3c,umask=0x00/``, span fields and are joined back), one line per
counter per interval::

    time,[aggr-id,[cpus,]]counter-value,unit,event-name,run-time,pct-running,metric-value,metric-unit
         1.001234567,12345678,,instructions,1000890123,100.00,,

``-A`` (``--no-aggr``) puts a ``CPU<n>`` id after the time; ``--per-core`` / ``--per-socket`` /
``--per-die`` / ``--per-node`` put an id like ``S0-D0-C1`` / ``S0`` / ``N0`` and the number of
CPUs aggregated. Counter
values ``<not counted>`` and ``<not supported>`` are skipped and the event listed in
``df.attrs["unsupported"]``; a counter multiplexed out of the interval (pct-running printed
as ``0.00``) gives no reading; lines starting with ``#`` (``# started on ...``), and the extra
derived-metric lines whose counter fields are empty, are skipped; so are the ``--summary``
lines (time field ``summary``: whole-run totals, not an interval). Only ``-x,`` is read, and
only with ``-I`` (the first field must be the interval time stamp).

Mapping
-------
``metric`` is the event name exactly as perf prints it (``cycles:u``, ``LLC-load-misses``,
``cpu/event=0x3c/``). ``value`` is the count perf printed: for a multiplexed counter perf has
already extrapolated it to the whole interval (count x enabled / running), so it is an
estimate. ``scale`` = pct-running / 100 is the fraction of the interval the counter really
ran (1.0 = not multiplexed; NaN if perf printed none), so multiplexed counters stay visible.
``device`` is ``"host"`` for system-wide counts, ``"cpu<n>"`` with ``-A``, and the lower-cased
aggregation id (``"s0-d0-c1"``) with ``--per-*``. ``t_s`` is perf's own time stamp: seconds since
perf started, at the *end* of each interval (so it starts near the interval, not at 0).

>>> df = parse("     1.000512,12345678,,instructions,1000890123,100.00,1.21,insn per cycle\\n"
...            "     1.000512,10203040,,cycles,1000890123,50.00,,\\n"
...            "     1.000512,<not counted>,,LLC-load-misses,0,0.00,,\\n")
>>> list(df.itertuples(index=False, name=None))  # doctest: +NORMALIZE_WHITESPACE
[(1.000512, 'localhost', 'host', 'instructions', 12345678.0, 1.0),
 (1.000512, 'localhost', 'host', 'cycles', 10203040.0, 0.5)]
>>> df.attrs["unsupported"]
['LLC-load-misses']
"""

from __future__ import annotations

import math
import re

import pandas as pd

from interplace.collectors.formats._common import lines, parse_float, samples_frame
from interplace.errors import InputError

__all__ = ["parse", "sniff"]

_CPU = re.compile(r"^CPU\d+$")
_AGGR = re.compile(r"^(?:S\d+(?:-[A-Z]+\d+)*|N\d+)$")  # S0, S0-D0, S0-D0-C1, S0-D0-L3-ID0, N0
_NOT_COUNTED = ("<not counted>", "<not supported>")


def _split(line: str) -> tuple[float, str, list[str]] | None:
    """``(time, device, [value, unit, event, run-time, pct, ...])`` or None if not perf CSV."""
    f = [c.strip() for c in line.split(",")]
    t = parse_float(f[0])
    if t is None or not math.isfinite(t) or len(f) < 4:
        return None
    if _CPU.match(f[1]):
        dev, rest = f[1].lower(), f[2:]
    elif _AGGR.match(f[1]) and len(f) > 2 and f[2].isdigit():
        dev, rest = f[1].lower(), f[3:]
    else:
        dev, rest = "host", f[1:]
    if len(rest) < 3:
        return None
    # perf does not quote a raw PMU event's terms: cpu/event=0x3c,umask=0x00/ spans fields.
    if rest[2].count("/") == 1:
        end = next((k for k in range(3, len(rest)) if "/" in rest[k]), None)
        if end is not None:
            rest = [*rest[:2], ",".join(rest[2 : end + 1]), *rest[end + 1 :]]
    return t, dev, rest


def _is_summary(line: str) -> bool:
    """A ``perf stat --summary`` line: ``summary`` in the time field, the whole-run totals.

    >>> _is_summary("   summary,218,,context-switches,8012753271,100.00,0.027,K/sec")
    True
    >>> _is_summary("1.001196053,218,,context-switches,8012753271,100.00,0.027,K/sec")
    False
    """
    return line.split(",", 1)[0].strip() == "summary"


def _is_counter(rest: list[str]) -> bool:
    return (
        (rest[0] in _NOT_COUNTED or parse_float(rest[0]) is not None)
        and bool(rest[2])
        and (parse_float(rest[2]) is None)
    )


def sniff(text: str) -> bool:
    """True when the first (up to five) data lines read as ``perf stat -x, -I`` counter lines.

    >>> sniff("# started on Wed May  1 12:00:00 2024\\n\\n1.001,123,,cycles,1000,100.00,,\\n")
    True
    >>> sniff("123,,cycles,1000,100.00,,\\n")  # no -I time stamp
    False
    """
    data = [ln for _, ln in lines(text) if not ln.startswith("#") and not _is_summary(ln)][:5]
    if not data:
        return False
    for ln in data:
        parts = _split(ln)
        if parts is None or not (_is_counter(parts[2]) or not any(parts[2][:3])):
            return False
    return any((p := _split(ln)) is not None and _is_counter(p[2]) for ln in data)


def parse(text: str, host: str = "localhost") -> pd.DataFrame:
    """Parse ``perf stat -x, -I`` output into the long sample table (see the module docstring).

    The table has the extra column ``scale`` (fraction of the interval the counter ran).
    """
    t_s: list[float] = []
    device: list[str] = []
    metric: list[str] = []
    value: list[float] = []
    scale: list[float] = []
    unsupported: set[str] = set()
    data = [(n, ln) for n, ln in lines(text) if not ln.startswith("#")]
    if not data:
        raise InputError("perf stat output has no counter lines")
    for line_no, line in data:
        if _is_summary(line):
            continue  # not an interval: the totals perf prints after the last one
        parts = _split(line)
        if parts is not None and not any(parts[2][:3]):
            continue  # an extra derived-metric line: all counter fields empty
        if parts is None or not _is_counter(parts[2]):
            raise InputError(
                f"line {line_no}: not a perf stat -x, -I counter line "
                f"(time,value,unit,event,...): {line[:60]!r}"
            )
        t, dev, rest = parts
        event = rest[2]
        if rest[0] in _NOT_COUNTED:
            unsupported.add(event)
            continue
        count = parse_float(rest[0])
        assert count is not None  # _is_counter checked it
        if not (math.isfinite(count) and count >= 0):  # an event count (per interval)
            raise InputError(f"line {line_no}: {event} count {rest[0]!r} is not a number >= 0")
        pct = parse_float(rest[4]) if len(rest) > 4 else None
        if pct is not None and not 0.0 <= pct <= 100.0:
            raise InputError(f"line {line_no}: running percentage {rest[4]!r} not in [0, 100]")
        if pct == 0.0:
            continue  # multiplexed out of the interval (perf rounds to 0.00): no reading
        t_s.append(t)
        device.append(dev)
        metric.append(event)
        value.append(count)
        scale.append(math.nan if pct is None else pct / 100.0)
    return samples_frame(
        "perf stat output", t_s, host, device, metric, value, scale=scale, unsupported=unsupported
    )
