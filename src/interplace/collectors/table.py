"""The long counter table every collector and parser produces, and its CSV / Parquet files.

One row is one sample of one counter::

    t_s     float  seconds on the clock of the file it came from (each parser documents its origin)
    host    str    machine name
    device  str    GPU id ("0", "1", ... or "<gpu>/mig<k>" for a MIG slice), a CPU ("cpu3",
                   a perf aggregation id like "s0-d0-c1") or "host" for machine-wide counters
    metric  str    counter name, canonical where interplace knows it (:data:`CANONICAL_METRICS`)
    value   float  the reading, in the unit :data:`CANONICAL_METRICS` gives for the name

Optional columns: ``run_id`` (str) tags the run a sample belongs to, and ``scale`` (float in
(0, 1], NaN where not applicable) is the fraction of the interval a multiplexed perf counter was
actually running. Any other column is kept unchanged after these.

Canonical names use NVML's own units (KB = 1000 bytes, as NVML's PCIe throughput). perf events
keep their perf names (``instructions``, ``cycles:u``, ``LLC-load-misses``); a name interplace
does not know passes through unchanged.

A missing reading is a *missing row*: :func:`validate_samples` drops rows whose ``value`` is
NaN, and parsers never emit one (they report unavailable counters in ``df.attrs`` instead).

>>> import pandas as pd
>>> df = validate_samples(pd.DataFrame({
...     "t_s": [0, 1], "host": ["n1", "n1"], "device": ["0", "0"],
...     "metric": ["gpu_util_pct", "gpu_util_pct"], "value": [45, float("nan")]}), "example")
>>> len(df), df["t_s"].dtype.name, df["value"].tolist()
(1, 'float64', [45.0])
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]

from interplace.errors import (
    InputError,
    atomic_write,
    check_input_file,
    check_output_file,
    first_line,
    read_csv,
)

__all__ = [
    "CANONICAL_METRICS",
    "OPTIONAL_COLUMNS",
    "SAMPLE_COLUMNS",
    "check_ranges",
    "read_samples",
    "validate_samples",
    "write_samples",
]

#: The columns every sample table has, in this order.
SAMPLE_COLUMNS: tuple[str, ...] = ("t_s", "host", "device", "metric", "value")
#: Columns a sample table may have; they follow the required ones when present.
OPTIONAL_COLUMNS: tuple[str, ...] = ("run_id", "scale")

_STRING_COLUMNS = ("host", "device", "metric")

#: Canonical metric name -> unit and meaning. Units are NVML's own.
CANONICAL_METRICS: dict[str, str] = {
    "gpu_util_pct": "% of time one or more kernels ran on the GPU (NVML utilization.gpu)",
    "mem_util_pct": "% of time device memory was read or written (NVML utilization.memory)",
    "fb_used_bytes": "bytes of framebuffer (device) memory in use",
    "sm_clock_mhz": "SM clock, MHz",
    "mem_clock_mhz": "memory clock, MHz",
    "power_mw": "board power draw, milliwatts",
    "temp_c": "GPU core temperature, degrees Celsius",
    "pcie_tx_kbps": "PCIe transmit throughput, KB/s (1 KB = 1000 bytes)",
    "pcie_rx_kbps": "PCIe receive throughput, KB/s (1 KB = 1000 bytes)",
    "pcie_tx_bytes_total": "PCIe bytes transmitted since an arbitrary origin (monotone counter)",
    "pcie_rx_bytes_total": "PCIe bytes received since an arbitrary origin (monotone counter)",
    "nvlink_tx_kbps": "NVLink transmit throughput over all links, KB/s (1 KB = 1000 bytes)",
    "nvlink_rx_kbps": "NVLink receive throughput over all links, KB/s (1 KB = 1000 bytes)",
    "host_cpu_busy_pct": "% of CPU time not idle, over all CPUs of the host",
    "host_mem_used_bytes": "bytes of host memory in use",
}

_EXTENSIONS = (".csv", ".parquet")
_NA_STRINGS = ["", "nan", "NaN", "NA", "N/A"]


def _first(mask: np.ndarray[tuple[int], np.dtype[np.bool_]]) -> int:
    return int(np.flatnonzero(mask)[0])


def _numeric(s: pd.Series, col: str, what: str) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    """Column ``col`` as float64; NaN where missing. Non-numbers raise naming the first row."""
    if pd.api.types.is_bool_dtype(s.dtype):
        raise InputError(f"{what}: column '{col}' has dtype bool, expected numbers")
    if pd.api.types.is_numeric_dtype(s.dtype):
        return np.asarray(s.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
    if not (pd.api.types.is_object_dtype(s.dtype) or pd.api.types.is_string_dtype(s.dtype)):
        raise InputError(f"{what}: column '{col}' has dtype {s.dtype}, expected numbers")
    raw = s.astype(object)
    conv = np.asarray(pd.to_numeric(raw, errors="coerce"), dtype=np.float64)
    blank = raw.map(lambda v: v is None or (isinstance(v, str) and v.strip() in _NA_STRINGS))
    isnan = raw.map(lambda v: isinstance(v, float) and np.isnan(v))
    bad = np.isnan(conv) & ~np.asarray(blank, dtype=bool) & ~np.asarray(isnan, dtype=bool)
    if bad.any():
        i = _first(bad)
        v = raw.iloc[i]
        shown = v.item() if isinstance(v, np.generic) else v
        raise InputError(f"{what}: column '{col}' row {i}: {shown!r} is not a number")
    return conv


def _strings(s: pd.Series, col: str, what: str) -> pd.Series:
    """Column ``col`` as strings; a missing, non-string or empty entry raises naming its row."""
    is_str = np.asarray(s.map(lambda v: isinstance(v, str)), dtype=bool)
    if not is_str.all():
        i = _first(~is_str)
        v = s.iloc[i]
        shown = v.item() if isinstance(v, np.generic) else v
        raise InputError(
            f"{what}: column '{col}' row {i}: expected a string, got {shown!r} ({type(v).__name__})"
        )
    empty = np.asarray(s.map(lambda v: v == ""), dtype=bool)
    if empty.any():
        raise InputError(f"{what}: column '{col}' row {_first(empty)} is empty")
    return s.astype(str)


def check_ranges(metric: Any, value: Any, what: str) -> None:
    """Raise :class:`~interplace.errors.InputError` where a canonical metric is out of its
    unit's range: below 0 (but a temperature), or a percentage above 100. Other metric names
    are taken as they come. ``metric`` and ``value``: equally long sequences (rows numbered
    from 0).

    The readers of collected counters (``ingest``'s parsers, :func:`read_samples`) check
    them; :func:`validate_samples` does where asked (``ranges=True``). A runs format's samples
    table is not checked: simulated counters (``datasets.synthetic``, measured = true +
    noise) dip below 0 near 0, as a noisy reading of a real one may after processing.

    >>> check_ranges(["gpu_util_pct", "temp_c"], [50.0, -2.0], "x.csv")
    >>> check_ranges(["gpu_util_pct", "mem_util_pct"], [50.0, -12.0], "x.csv")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: x.csv: row 1: mem_util_pct is -12, below 0 (% of time ...)
    """
    names = np.asarray(metric, dtype=object)
    value = np.asarray(value, dtype=np.float64)
    for name in set(names) & set(CANONICAL_METRICS):
        rows = names == name
        v = value[rows]
        low = v < 0 if name != "temp_c" else np.zeros(len(v), dtype=bool)
        high = v > 100 + 1e-9 if name.endswith("_pct") else np.zeros(len(v), dtype=bool)
        bad = low | high
        if bad.any():
            i = int(np.flatnonzero(rows)[_first(bad)])
            limit = "below 0" if low.any() and low[_first(bad)] else "above 100"
            raise InputError(
                f"{what}: row {i}: {name} is {value[i]:g}, {limit} ({CANONICAL_METRICS[name]})"
            )


def validate_samples(df: pd.DataFrame, what: str, *, ranges: bool = False) -> pd.DataFrame:
    """Check a long sample table and return a normalised copy.

    ``what`` names the table in error messages (a file name, say). Rows are numbered from 0 in
    the order of ``df``. The copy has a fresh 0..n-1 index, ``t_s``/``value``/``scale`` as
    float64, ``host``/``device``/``metric``/``run_id`` as pandas' string type, the required
    columns first, and no row whose ``value`` is NaN (a missing sample). ``df.attrs`` is kept.

    Raises :class:`~interplace.errors.InputError` for a missing column, a non-finite ``t_s``,
    an infinite ``value``, with ``ranges`` a canonical metric out of its unit's range
    (:func:`check_ranges`), a ``scale`` outside (0, 1], a non-number in a numeric column or a
    missing, empty or non-string entry in a string column.

    >>> import pandas as pd
    >>> validate_samples(pd.DataFrame({"t_s": [0.0], "host": ["a"], "device": ["0"],
    ...                                "metric": ["temp_c"]}), "x.csv")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: x.csv: missing column value (a sample table needs ...)
    >>> validate_samples(pd.DataFrame({"t_s": [0.0, float("inf")], "host": "a", "device": "0",
    ...                                "metric": "temp_c", "value": 40.0}), "x.csv")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: x.csv: column 't_s' row 1: inf is not a finite time
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    dup = df.columns[df.columns.duplicated()]
    if len(dup):
        raise InputError(f"{what}: duplicate column {dup[0]!r}")
    missing = [c for c in SAMPLE_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(
            f"{what}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"(a sample table needs {', '.join(SAMPLE_COLUMNS)})"
        )
    src = df.reset_index(drop=True)
    cols: dict[str, object] = {}
    t = _numeric(src["t_s"], "t_s", what)
    bad = ~np.isfinite(t)
    if bad.any():
        i = _first(bad)
        raise InputError(f"{what}: column 't_s' row {i}: {t[i]} is not a finite time")
    cols["t_s"] = t
    for c in _STRING_COLUMNS:
        cols[c] = _strings(src[c], c, what)
    value = _numeric(src["value"], "value", what)
    if np.isinf(value).any():
        i = _first(np.isinf(value))
        raise InputError(f"{what}: column 'value' row {i}: {value[i]} is not a finite number")
    if ranges:
        check_ranges(cols["metric"], value, what)
    cols["value"] = value
    if "run_id" in src.columns:
        cols["run_id"] = _strings(src["run_id"], "run_id", what)
    if "scale" in src.columns:
        scale = _numeric(src["scale"], "scale", what)
        out_of_range = ~np.isnan(scale) & ~((scale > 0.0) & (scale <= 1.0))
        if out_of_range.any():
            i = _first(out_of_range)
            raise InputError(f"{what}: column 'scale' row {i}: {scale[i]} is not in (0, 1]")
        cols["scale"] = scale
    for c in src.columns:
        if c not in cols:
            cols[c] = src[c]
    out = pd.DataFrame(cols, index=src.index)
    out = out.loc[~np.isnan(value)].reset_index(drop=True)
    out.attrs = dict(df.attrs)
    return out


def _extension(path: Path) -> str:
    ext = path.suffix.lower()
    if ext not in _EXTENSIONS:
        raise InputError(
            f"{path}: unknown sample-table extension {ext or '(none)'!r} "
            f"(expected {' or '.join(_EXTENSIONS)})"
        )
    return ext


def read_samples(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a sample table from a ``.csv`` or ``.parquet`` file and validate it.

    Strings in CSV files are taken literally (a host called ``NA`` stays ``"NA"``); an empty
    ``value`` cell is a missing sample and is dropped.

    >>> import tempfile, pathlib, pandas as pd
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "s.csv"
    >>> _ = p.write_text("t_s,host,device,metric,value\\n0.5,NA,0,power_mw,250000\\n")
    >>> list(read_samples(p).itertuples(index=False, name=None))
    [(0.5, 'NA', '0', 'power_mw', 250000.0)]
    """
    p = check_input_file(path)  # first: a directory has no extension to complain about
    ext = _extension(p)
    if p.stat().st_size == 0:
        raise InputError(f"{p}: file is empty")
    df = _read_csv(p, str(p)) if ext == ".csv" else _read_parquet(p, str(p))
    return validate_samples(df, str(p), ranges=True)


def _read_csv(source: Path | IO[bytes], what: str) -> pd.DataFrame:
    """A sample table's CSV text as read (not yet validated); errors name ``what``.

    Strings are taken literally, only the numeric columns have missing values.
    """
    strings = {c: str for c in (*_STRING_COLUMNS, "run_id")}
    numbers = {c: _NA_STRINGS for c in ("t_s", "value", "scale")}
    try:
        return read_csv(source, dtype=strings, keep_default_na=False, na_values=numbers)
    except pd.errors.EmptyDataError as e:
        raise InputError(f"{what}: file is empty (no header line)") from e
    except (pd.errors.ParserError, InputError) as e:
        raise InputError(f"{what}: malformed CSV: {first_line(e)}") from e
    except UnicodeDecodeError as e:
        raise InputError(f"{what}: not UTF-8 text ({e.reason} at byte {e.start})") from e


def _read_parquet(path: Path, what: str) -> pd.DataFrame:
    """A sample table's Parquet file as read (not yet validated); errors name ``what``."""
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError, TypeError, pa.ArrowException) as e:
        msg = first_line(e)
        raise InputError(f"{what}: cannot read as Parquet: {msg}") from e


def write_samples(df: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Validate ``df`` and write it to a ``.csv`` or ``.parquet`` file, atomically.

    The file is written beside ``path`` and renamed onto it only when complete, so a failure
    leaves no partial file (and an existing ``path`` untouched). :func:`read_samples` gives back
    an equal frame.

    >>> import tempfile, pathlib, pandas as pd
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "s.parquet"
    >>> df = pd.DataFrame({"t_s": [0.0], "host": ["n1"], "device": ["0"],
    ...                    "metric": ["temp_c"], "value": [41.0]})
    >>> write_samples(df, p)
    >>> read_samples(p).equals(validate_samples(df, "df"))
    True
    """
    p = check_output_file(path)  # first: a directory has no extension to complain about
    ext = _extension(p)
    out = validate_samples(df, f"samples for {p}")
    try:
        if ext == ".csv":
            with atomic_write(p, "w") as fh:
                out.to_csv(cast(IO[str], fh), index=False, lineterminator="\n")
        else:
            with atomic_write(p, "wb") as fh:
                out.to_parquet(cast(IO[bytes], fh), index=False)
    except InputError:
        raise
    except (ValueError, TypeError) as e:
        msg = first_line(e)
        raise InputError(f"{p}: cannot write as {ext[1:]}: {msg}") from e
