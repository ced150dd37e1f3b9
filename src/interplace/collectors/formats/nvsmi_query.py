"""Parse ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -lms N`` output.

The input format
----------------
One CSV line per GPU per sample, cells separated by ``", "``. With a header, the first line
names the queried fields, with the unit in brackets where there is one::

    timestamp, index, utilization.gpu [%], memory.used [MiB], power.draw [W]
    2024/05/01 12:00:00.123, 0, 45 %, 1234 MiB, 250.00 W

``nounits`` drops the units from the values (not from the header). Field names may have
camelCase parts (``pci.baseClass``, ``encoder.stats.sessionCount``). A value nvidia-smi cannot
read is printed in brackets (``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``...): that value
is skipped and its metric listed in ``df.attrs["unsupported"]``. A repeated header line (files
concatenated) is skipped.

Without a header (``noheader``) the columns cannot be named from the file, so the caller passes
``fields`` (the ``--query-gpu`` list, e.g. ``["timestamp", "index", "memory.used"]``) and
:func:`sniff` returns False: such text is never auto-detected.

Mapping
-------
``utilization.gpu`` -> ``gpu_util_pct``, ``utilization.memory`` -> ``mem_util_pct``,
``memory.used`` (MiB, x 1048576) -> ``fb_used_bytes``, ``clocks.sm`` / ``clocks.current.sm`` ->
``sm_clock_mhz``, ``clocks.mem`` / ``clocks.current.memory`` -> ``mem_clock_mhz``,
``power.draw`` (W, x 1000) -> ``power_mw``, ``temperature.gpu`` -> ``temp_c``. The unit comes
from the value itself, else from the header, else is nvidia-smi's documented unit for the
field. Other numeric fields (``pcie.link.gen.current``, ``fan.speed``...) pass through under
their nvidia-smi name in nvidia-smi's unit; textual ones (``pstate`` = ``P0``...) are skipped and
listed in ``df.attrs["non_numeric"]``; identity fields (``name``, ``uuid``, ``serial``...) are
skipped.

Time and device: ``t_s`` = seconds since the earliest ``timestamp`` in the file (the first one,
in a well-formed file), so it starts at 0; the ``timestamp`` field is required. ``device`` is
the ``index`` field, else ``pci.bus_id``, else ``uuid``.

>>> df = parse("timestamp, index, memory.used [MiB], power.draw [W]\\n"
...            "2024/05/01 12:00:00.000, 0, 1234 MiB, [N/A]\\n"
...            "2024/05/01 12:00:00.500, 0, 1235 MiB, 250.00 W\\n", host="n1")
>>> list(df.itertuples(index=False, name=None))  # doctest: +NORMALIZE_WHITESPACE
[(0.0, 'n1', '0', 'fb_used_bytes', 1293942784.0), (0.5, 'n1', '0', 'fb_used_bytes', 1294991360.0),
 (0.5, 'n1', '0', 'power_mw', 250000.0)]
>>> df.attrs["unsupported"]
['power_mw']
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from interplace.collectors.formats._common import lines, parse_float, samples_frame
from interplace.errors import InputError

__all__ = ["looks_headerless", "parse", "sniff"]

# field -> (canonical metric, nvidia-smi's unit for it)
_CANONICAL: dict[str, tuple[str, str]] = {
    "utilization.gpu": ("gpu_util_pct", "%"),
    "utilization.memory": ("mem_util_pct", "%"),
    "memory.used": ("fb_used_bytes", "MiB"),
    "clocks.sm": ("sm_clock_mhz", "MHz"),
    "clocks.current.sm": ("sm_clock_mhz", "MHz"),
    "clocks.mem": ("mem_clock_mhz", "MHz"),
    "clocks.current.memory": ("mem_clock_mhz", "MHz"),
    "power.draw": ("power_mw", "W"),
    "temperature.gpu": ("temp_c", "C"),
}
# unit -> (dimension, factor to the canonical unit of that dimension)
_UNITS: dict[str, tuple[str, float]] = {
    "%": ("pct", 1.0),
    "B": ("bytes", 1.0),
    "KiB": ("bytes", 1024.0),
    "MiB": ("bytes", 1048576.0),
    "GiB": ("bytes", 1073741824.0),
    "mW": ("mw", 1.0),
    "W": ("mw", 1000.0),
    "kHz": ("mhz", 0.001),
    "MHz": ("mhz", 1.0),
    "GHz": ("mhz", 1000.0),
    "C": ("c", 1.0),
}
_IDENTITY = frozenset(
    {
        "timestamp", "index", "count", "name", "gpu_name", "serial", "gpu_serial", "uuid",
        "gpu_uuid", "pci.bus_id", "gpu_bus_id", "pci.domain", "pci.bus", "pci.device",
        "pci.device_id", "pci.sub_device_id", "driver_version", "vbios_version",
        "inforom.img", "inforom.oem", "inforom.ecc", "inforom.pwr", "compute_cap",
    }
)  # fmt: skip
# field names are lower-case dotted words, but some have camelCase parts
# (pci.baseClass, encoder.stats.sessionCount, fabric.cliqueId, ...)
_HEADER_CELL = re.compile(r"^([a-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)(?:\s*\[([^\]]*)\])?$")
_VALUE = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]+)?$")
_TS_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


def _header(cells: Sequence[str]) -> list[tuple[str, str | None]] | None:
    """``(field, unit)`` per cell when ``cells`` is a header line naming a known field."""
    parsed: list[tuple[str, str | None]] = []
    for c in cells:
        m = _HEADER_CELL.match(c)
        if m is None:
            return None
        parsed.append((m.group(1), m.group(2)))
    if not any(f in _IDENTITY or f in _CANONICAL for f, _ in parsed):
        return None
    return parsed


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")]


def sniff(text: str) -> bool:
    """True when the first non-blank line is an nvidia-smi ``--query-gpu`` CSV header.

    Header-less (``noheader``) output is never recognised: pass ``fields`` to :func:`parse`.

    >>> sniff("timestamp, index, utilization.gpu [%]\\n2024/05/01 12:00:00.000, 0, 3 %\\n")
    True
    >>> sniff("2024/05/01 12:00:00.000, 0, 3 %\\n")
    False
    >>> sniff("timestamp, index, encoder.stats.sessionCount\\n2024/05/01 12:00:00.000, 0, 0\\n")
    True
    """
    ls = lines(text)
    return bool(ls) and _header(_cells(ls[0][1])) is not None


def looks_headerless(text: str) -> bool:
    """True when ``text`` looks like ``--format=csv,noheader`` output (for an error hint only).

    That is: no header (:func:`sniff` is false), and its first lines (up to 5) all have the
    same number (2 or more) of non-empty cells joined by nvidia-smi's ``", "``.

    >>> looks_headerless("2024/05/01 12:00:00.000, 0, 45\\n2024/05/01 12:00:00.100, 0, 46\\n")
    True
    >>> looks_headerless("a,b,c\\n1,2,3\\n"), looks_headerless("timestamp, index\\nx, 0\\n")
    (False, False)
    """
    ls = [ln for _, ln in lines(text)[:5]]
    if not ls or sniff(text):
        return False
    counts = {len(ln.split(", ")) for ln in ls}
    return (
        len(counts) == 1
        and counts.pop() >= 2
        and all(c for ln in ls for c in _cells(ln))
        and not ls[0].startswith("#")
    )


def _timestamps(
    stamps: list[str], line_nos: list[int]
) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    """Seconds since the earliest of ``stamps`` ("2024/05/01 12:00:00.123")."""
    s = pd.Series(stamps, dtype=object)
    parsed = pd.to_datetime(s, format=_TS_FORMATS[0], errors="coerce")
    nat = parsed.isna()
    if nat.any():
        parsed[nat] = pd.to_datetime(s[nat], format=_TS_FORMATS[1], errors="coerce")
        nat = parsed.isna()
    if nat.any():
        i = int(np.flatnonzero(nat.to_numpy())[0])
        raise InputError(
            f"line {line_nos[i]}: bad timestamp {stamps[i]!r} (expected YYYY/MM/DD HH:MM:SS.mmm)"
        )
    ns = parsed.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    return np.asarray((ns - ns.min()) / 1e9, dtype=np.float64)


def parse(
    text: str, host: str = "localhost", *, fields: Sequence[str] | None = None
) -> pd.DataFrame:
    """Parse ``nvidia-smi --query-gpu`` CSV output into the long sample table.

    ``fields`` names the columns of header-less output; when the text has a header, ``fields``
    may be omitted and must otherwise match it. See the module docstring for the mapping.
    """
    ls = lines(text)
    if not ls:
        raise InputError("nvidia-smi query output is empty")
    header = _header(_cells(ls[0][1]))
    if header is not None:
        header_line = ls[0][1]
        body = ls[1:]
        if fields is not None and [f for f, _ in header] != [f.strip() for f in fields]:
            raise InputError(
                f"fields {list(fields)} do not match the header {[f for f, _ in header]}"
            )
    elif fields is not None:
        header = [(f.strip(), None) for f in fields]
        header_line = None
        body = ls
    else:
        raise InputError(
            "nvidia-smi query output has no header line: run without 'noheader' or pass "
            "fields (the --query-gpu list)"
        )
    names = [f for f, _ in header]
    twice = sorted({f for f in names if names.count(f) > 1})
    if twice:  # two readings of one field at one time, which may differ
        raise InputError(f"nvidia-smi query output names {twice[0]} twice")
    if "timestamp" not in names:
        raise InputError("nvidia-smi query output has no timestamp field (add it to --query-gpu)")
    dev_field = next((f for f in ("index", "pci.bus_id", "uuid") if f in names), None)
    if dev_field is None:
        raise InputError("nvidia-smi query output has no index, pci.bus_id or uuid field")
    i_ts, i_dev = names.index("timestamp"), names.index(dev_field)

    stamps: list[str] = []
    stamp_lines: list[int] = []
    row_of: list[int] = []
    device: list[str] = []
    metric: list[str] = []
    value: list[float] = []
    unsupported: set[str] = set()
    non_numeric: set[str] = set()
    for line_no, line in body:
        if line == header_line:
            continue
        cells = _cells(line)
        if len(cells) != len(header):
            raise InputError(f"line {line_no}: expected {len(header)} values, got {len(cells)}")
        dev = cells[i_dev]
        if not dev or dev.startswith("["):
            raise InputError(f"line {line_no}: no {dev_field} value ({dev!r})")
        stamps.append(cells[i_ts])
        stamp_lines.append(line_no)
        for (field, head_unit), cell in zip(header, cells, strict=True):
            if field in _IDENTITY:
                continue
            canon = _CANONICAL.get(field)
            name = canon[0] if canon else field
            if cell.startswith("[") or cell in ("N/A", ""):
                unsupported.add(name)
                continue
            m = _VALUE.match(cell)
            if m is None:
                if canon is not None:  # a reading interplace uses: dmon and prometheus refuse it
                    raise InputError(f"line {line_no}: {field} {cell!r} is not a number")
                non_numeric.add(field)  # a text field (pstate, name): not a reading
                continue
            number = parse_float(m.group(1))
            if number is None:  # pragma: no cover - the regex admits only numbers
                raise InputError(f"line {line_no}: bad number {cell!r} for {field}")
            if canon is not None:
                unit = m.group(2) or head_unit or canon[1]
                dim, factor = _UNITS.get(unit, ("?", 1.0))
                if dim != _UNITS[canon[1]][0]:
                    raise InputError(f"line {line_no}: unexpected unit {unit!r} for {field}")
                number *= factor
            row_of.append(len(stamps) - 1)
            device.append(dev)
            metric.append(name)
            value.append(number)
    t_row = _timestamps(stamps, stamp_lines) if stamps else np.zeros(0)
    df = samples_frame(
        "nvidia-smi query output",
        t_row[np.asarray(row_of, dtype=np.int64)],
        host,
        device,
        metric,
        value,
        unsupported=unsupported,
    )
    df.attrs["non_numeric"] = sorted(non_numeric)
    return df
