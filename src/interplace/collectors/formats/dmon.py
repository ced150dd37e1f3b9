"""Parse ``nvidia-smi dmon [-s pucvmet] [-o DT] [-d N]`` output.

The input format
----------------
Two ``#`` header lines, column names then units, then one whitespace-separated line per GPU
per sample round; the header repeats every so many lines::

    # gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk
    # Idx      W      C      C      %      %      %      %    MHz    MHz
        0     43     35      -      0      0      0      0    877    210

``-o D`` / ``-o T`` / ``-o DT`` add ``Date`` (``YYYYMMDD``) and ``Time`` (``HH:MM:SS``) columns
in front. ``-`` means the counter is not available: the value is skipped and its metric listed
in ``df.attrs["unsupported"]``. Other ``#`` lines are skipped.

Mapping
-------
``pwr`` (W, x 1000) -> ``power_mw``, ``gtemp`` -> ``temp_c``, ``sm`` -> ``gpu_util_pct``,
``mem`` -> ``mem_util_pct``, ``fb`` (MB, which dmon means as MiB, x 1048576) ->
``fb_used_bytes``, ``mclk`` -> ``mem_clock_mhz``, ``pclk`` -> ``sm_clock_mhz``, ``rxpci`` /
``txpci`` (MB/s, x 1000) -> ``pcie_rx_kbps`` / ``pcie_tx_kbps``. Other columns
(``mtemp``, ``enc``, ``dec``, ``jpg``, ``ofa``, ``pviol``, ``tviol``, ``bar1``, ``sbecc``,
``dbecc``, ``pci``...) pass through under their dmon name in dmon's unit. A units line that
contradicts the expected unit of a mapped column raises.

Time and device: ``device`` is the ``gpu`` column. With a ``Date`` and/or ``Time`` column, ``t_s``
= seconds since the first stamp (a ``Time`` that goes backwards without a date is taken to cross
midnight). Without, a sample round ends when a GPU id repeats and ``t_s`` = round index x
``interval_s`` (dmon's ``-d``, default 1 s). Either way ``t_s`` starts at 0.

>>> df = parse("# gpu   pwr  gtemp     sm  rxpci  txpci\\n"
...            "# Idx     W      C      %   MB/s   MB/s\\n"
...            "    0    43     35      -    120      8\\n"
...            "    0    44     35      3    121      9\\n")
>>> df[df.metric == "pcie_rx_kbps"][["t_s", "value"]].to_numpy().tolist()
[[0.0, 120000.0], [1.0, 121000.0]]
>>> df.attrs["unsupported"]
['gpu_util_pct']
"""

from __future__ import annotations

import math
from datetime import datetime

import numpy as np
import pandas as pd

from interplace.collectors.formats._common import lines, parse_float, samples_frame
from interplace.errors import InputError

__all__ = ["parse", "sniff"]

# dmon column -> (canonical metric, dmon's unit, factor)
_CANONICAL: dict[str, tuple[str, str, float]] = {
    "pwr": ("power_mw", "W", 1000.0),
    "gtemp": ("temp_c", "C", 1.0),
    "sm": ("gpu_util_pct", "%", 1.0),
    "mem": ("mem_util_pct", "%", 1.0),
    "fb": ("fb_used_bytes", "MB", 1048576.0),
    "mclk": ("mem_clock_mhz", "MHz", 1.0),
    "pclk": ("sm_clock_mhz", "MHz", 1.0),
    "rxpci": ("pcie_rx_kbps", "MB/s", 1000.0),
    "txpci": ("pcie_tx_kbps", "MB/s", 1000.0),
}
_KNOWN = frozenset(
    {*_CANONICAL, "mtemp", "enc", "dec", "jpg", "ofa", "pviol", "tviol", "bar1", "ccpm",
     "sbecc", "dbecc", "pci"}
)  # fmt: skip
_DAY = 86400.0


def _names(line: str) -> list[str] | None:
    """Column names when ``line`` is dmon's ``# gpu ...`` (or ``#Date Time gpu ...``) header."""
    if not line.startswith("#"):
        return None
    toks = line[1:].split()
    low = [t.lower() for t in toks]
    if "gpu" not in low or "pid" in low or not any(t in _KNOWN for t in low):
        return None  # "pid": pmon's header (per process), whose sm/mem/enc are not dmon's
    return low


def looks_pmon(text: str) -> bool:
    """True when the first non-blank line is ``nvidia-smi pmon``'s (per-process) header.

    >>> looks_pmon("# gpu   pid  type  sm  mem  enc  dec  command\\n")
    True
    """
    ls = lines(text)
    if not ls or not ls[0][1].startswith("#"):
        return False
    low = [t.lower() for t in ls[0][1][1:].split()]
    return "gpu" in low and "pid" in low


def sniff(text: str) -> bool:
    """True when the first non-blank line is a ``nvidia-smi dmon`` column header.

    >>> sniff("# gpu   pwr  gtemp\\n# Idx     W      C\\n    0    43     35\\n")
    True
    >>> sniff("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\\n")
    False
    """
    ls = lines(text)
    return bool(ls) and _names(ls[0][1]) is not None


_EPOCH = datetime(1970, 1, 1)


def _clock(date: str | None, time: str | None, line_no: int) -> float:
    """Seconds since 1970-01-01 of the naive stamp (with a date) or since midnight (time only)."""
    fmt = " ".join(f for f, v in (("%Y%m%d", date), ("%H:%M:%S", time)) if v is not None)
    stamp = " ".join(v for v in (date, time) if v is not None)
    try:
        dt = datetime.strptime(stamp, fmt)
    except ValueError as e:
        raise InputError(f"line {line_no}: bad dmon date/time {stamp!r}") from e
    if date is None:
        return dt.hour * 3600.0 + dt.minute * 60.0 + dt.second
    return (dt - _EPOCH).total_seconds()


def parse(text: str, host: str = "localhost", *, interval_s: float = 1.0) -> pd.DataFrame:
    """Parse ``nvidia-smi dmon`` output into the long sample table (see the module docstring).

    ``interval_s`` is the sampling interval, used only when the output has no time columns.
    """
    if not (interval_s > 0 and np.isfinite(interval_s)):
        raise InputError(f"interval_s must be a positive number of seconds, got {interval_s}")
    if looks_pmon(text):
        raise InputError("this is nvidia-smi pmon output (per process), not dmon: record "
                         "nvidia-smi dmon (per GPU)")
    names: list[str] | None = None
    round_t: list[float] = []  # time of each sample row
    row_of: list[int] = []
    device: list[str] = []
    metric: list[str] = []
    value: list[float] = []
    unsupported: set[str] = set()
    timed: bool | None = None
    round_idx, seen = -1, set[str]()
    last_clock: float | None = None
    day_offset = 0.0
    for line_no, line in lines(text):
        if line.startswith("#"):
            new = _names(line)
            if new is not None:
                names = new
                continue
            if names is not None:
                units = line[1:].split()
                if len(units) == len(names):
                    for col, unit in zip(names, units, strict=True):
                        want = _CANONICAL.get(col)
                        if want is not None and unit != want[1]:
                            raise InputError(
                                f"line {line_no}: dmon column {col!r} has unit {unit!r}, "
                                f"expected {want[1]!r}"
                            )
            continue
        if names is None:
            raise InputError(f"line {line_no}: data before the dmon header line ('# gpu ...')")
        toks = line.split()
        if len(toks) != len(names):
            raise InputError(f"line {line_no}: expected {len(names)} columns, got {len(toks)}")
        row = dict(zip(names, toks, strict=True))
        dev = row["gpu"]
        has_time = "date" in row or "time" in row
        if timed is not None and has_time != timed:
            raise InputError(f"line {line_no}: dmon time columns appear or vanish mid-file")
        timed = has_time
        if has_time:
            clock = _clock(row.get("date"), row.get("time"), line_no)
            if "date" not in row and last_clock is not None and clock + day_offset < last_clock:
                day_offset += _DAY
            last_clock = clock + day_offset
            round_t.append(last_clock)
        else:
            if round_idx < 0 or dev in seen:
                round_idx, seen = round_idx + 1, set()
            seen.add(dev)
            round_t.append(round_idx * interval_s)
        for col, tok in row.items():
            if col in ("gpu", "date", "time"):
                continue
            canon = _CANONICAL.get(col)
            name = canon[0] if canon else col
            if tok == "-":
                unsupported.add(name)
                continue
            number = parse_float(tok)
            if number is None or not math.isfinite(number):  # dmon marks a gap '-', not nan
                raise InputError(f"line {line_no}: {col} value {tok!r} is not a number")
            row_of.append(len(round_t) - 1)
            device.append(dev)
            metric.append(name)
            value.append(number * (canon[2] if canon else 1.0))
    if names is None:
        raise InputError("no dmon header line ('# gpu ...') found")
    t = np.asarray(round_t, dtype=np.float64)
    if timed and len(t):
        t = t - t.min()
    return samples_frame(
        "nvidia-smi dmon output",
        t[np.asarray(row_of, dtype=np.int64)],
        host,
        device,
        metric,
        value,
        unsupported=unsupported,
    )
