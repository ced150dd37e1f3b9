"""Cluster job traces for simulation: one canonical job table from three public traces.

A :class:`JobTrace` is a table of jobs, one row each, sorted by submission time:

``job_id`` (str)
    Unique, non-empty.
``submit_s`` (float)
    Submission time in seconds from the start of the trace (finite, non-decreasing).
``duration_s`` (float)
    Run time in seconds, > 0, or NaN where the trace does not know it.
``gpus`` (float)
    GPUs the job asks for, >= 0; fractional for GPU sharing (0.46 = 46 % of one GPU), 0 for a
    CPU-only job.

Every other column of the source is kept after these (model name, user, cpu, memory...).

Loaders (each reads the file you point it at, CSV, or Parquet if its name ends in
``.parquet``; nothing is shipped or cached):

- :func:`load_philly`: Chronus' Philly-derived trace ``trace_job_Philly_MIX1.csv`` (MIT).
- :func:`load_alibaba_openb`: Alibaba's 2023 GPU-sharing trace ``openb_pod_list_*.csv``.
- :func:`load_venus`: the Venus cluster's 10-minute arrival counts as packaged by Lucid
  (``cluster_throughput.csv``; non-commercial licence, read from the user's path only).

Malformed input (a missing column, a value that is no number, a negative duration, a missing
submission time) raises :class:`~interplace.errors.InputError` naming the column and the data
row (counted from 0, in file order).

>>> jobs = pd.DataFrame({"job_id": ["a", "b"], "submit_s": [0.0, 5.0],
...                      "duration_s": [10.0, float("nan")], "gpus": [1.0, 0.5]})
>>> JobTrace(jobs, "toy").jobs["gpus"].sum()
np.float64(1.5)
>>> JobTrace(jobs.assign(submit_s=[5.0, 0.0]), "toy")
Traceback (most recent call last):
...
interplace.errors.InputError: toy: submit_s must be sorted, but row 1 (job_id 'b') has 0.0 < 5.0
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interplace.errors import InputError, check_input_file, read_table

__all__ = [
    "TRACE_COLUMNS",
    "JobTrace",
    "load_alibaba_openb",
    "load_philly",
    "load_venus",
]

TRACE_COLUMNS: tuple[str, ...] = ("job_id", "submit_s", "duration_s", "gpus")
"""The canonical columns of :attr:`JobTrace.jobs`, first and in this order."""

_FloatArray = np.ndarray[Any, np.dtype[np.float64]]


@dataclass(frozen=True, eq=False)
class JobTrace:
    """A validated job table (see the module docstring for its columns) and a name.

    Instances compare by identity; treat the table as read-only.
    """

    jobs: pd.DataFrame
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InputError(f"trace name must be a non-empty string, not {self.name!r}")
        what = self.name
        jobs = self.jobs
        if not isinstance(jobs, pd.DataFrame):
            raise InputError(f"{what}: jobs must be a pandas DataFrame, not {type(jobs).__name__}")
        missing = [c for c in TRACE_COLUMNS if c not in jobs.columns]
        if missing:
            raise InputError(f"{what}: job table lacks column(s) {', '.join(missing)}")
        ids = jobs["job_id"].tolist()
        for pos, value in enumerate(ids):
            if not isinstance(value, str) or not value:
                raise InputError(f"{what}: row {pos} has job_id {value!r}, not a non-empty string")
        dup = jobs["job_id"].duplicated()
        if dup.any():
            pos = int(np.flatnonzero(dup.to_numpy())[0])
            raise InputError(f"{what}: row {pos} repeats job_id {ids[pos]!r}")
        submit = _numbers(jobs["submit_s"], "submit_s", what)
        duration = _numbers(jobs["duration_s"], "duration_s", what)
        gpus = _numbers(jobs["gpus"], "gpus", what)
        _first_bad(~np.isfinite(submit), submit, "submit_s", "a finite number", ids, what)
        order = np.flatnonzero(np.diff(submit) < 0)
        if order.size:
            pos = int(order[0]) + 1
            raise InputError(
                f"{what}: submit_s must be sorted, but row {pos} (job_id {ids[pos]!r}) has "
                f"{float(submit[pos])!r} < {float(submit[pos - 1])!r}"
            )
        bad_duration = ~np.isnan(duration) & ~(np.isfinite(duration) & (duration > 0))
        _first_bad(bad_duration, duration, "duration_s", "> 0 or missing", ids, what)
        _first_bad(~(np.isfinite(gpus) & (gpus >= 0)), gpus, "gpus", "finite and >= 0", ids, what)

    def __len__(self) -> int:
        return len(self.jobs)


def _first_bad(
    bad: np.ndarray[Any, np.dtype[np.bool_]],
    values: _FloatArray,
    column: str,
    rule: str,
    ids: Sequence[object],
    what: str,
) -> None:
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{what}: {column} must be {rule}, but row {pos} (job_id {ids[pos]!r}) has "
            f"{float(values[pos])!r}"
        )


def _numbers(s: pd.Series, column: str, what: str) -> _FloatArray:
    """``s`` as float64 with NaN for blanks; a value that is no number raises naming its row."""
    if pd.api.types.is_bool_dtype(s.dtype):
        raise InputError(f"{what}: column '{column}' holds booleans, not numbers")
    if pd.api.types.is_numeric_dtype(s.dtype):
        return np.asarray(s.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
    raw = s.astype(object).tolist()
    out = np.empty(len(raw), dtype=np.float64)
    for pos, value in enumerate(raw):
        blank = isinstance(value, str) and not value.strip()
        if (
            blank
            or value is None
            or value is pd.NA
            or (isinstance(value, float) and math.isnan(value))
        ):
            out[pos] = np.nan
        else:
            try:
                out[pos] = float(value)
            except (TypeError, ValueError):
                raise InputError(
                    f"{what}: column '{column}' row {pos}: {value!r} is not a number"
                ) from None
    return out


def _read_trace(
    path: str | os.PathLike[str], need: Sequence[str], text: Sequence[str]
) -> pd.DataFrame:
    """The trace file ``path``: Parquet if its name ends in ``.parquet``, else CSV whatever
    its name ("job_id, user, ..." as written by hand reads as without spaces); the columns
    ``text`` as text either way (a Parquet job id stored as a number reads as a CSV one
    does), a missing value as missing."""
    p = check_input_file(path)
    if p.suffix.lower() == ".parquet":
        df = read_table(p, "trace", suffixes=(".parquet",))
        for c in text:
            if c in df.columns:
                absent = df[c].isna().tolist()
                df[c] = pd.Series([None if m else str(v) for v, m in
                                   zip(df[c].tolist(), absent, strict=True)],
                                  index=df.index, dtype=str)  # as read_table reads CSV text
    else:
        with p.open("rb") as fh:
            magic = fh.read(4)
        if magic == b"PAR1":  # read as CSV, it would fail on bytes that are no UTF-8
            raise InputError(f"{p}: a Parquet file; name it *.parquet to read it as Parquet "
                             "(any other name is read as CSV)")
        df = read_table(p, "trace", text=text, suffixes=None)
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise InputError(f"{p}: lacks column(s) {', '.join(missing)} (needs {', '.join(need)})")
    if len(df) == 0:
        raise InputError(f"{p}: no rows")
    return df


def _require(
    values: _FloatArray, bad: np.ndarray[Any, np.dtype[np.bool_]], column: str, rule: str, what: str
) -> None:
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise InputError(f"{what}: column '{column}' row {pos} has {float(values[pos])!r}; {rule}")


def _finish(
    df: pd.DataFrame, canonical: dict[str, Any], drop: Sequence[str], name: str, what: str
) -> JobTrace:
    """Canonical columns first, then the source's other columns; stably sorted by submit_s.
    A problem is named by the file ``what`` and the row in it (the trace checks its rows
    after the sort, under its ``name``)."""
    extra = df.drop(columns=[c for c in drop if c in df.columns])
    extra = extra.drop(columns=[c for c in TRACE_COLUMNS if c in extra.columns])
    out = pd.concat([pd.DataFrame(canonical, index=df.index), extra], axis=1)
    dup = out["job_id"].duplicated()
    if dup.any():  # named here, in file order: the trace checks after the sort
        pos = int(np.flatnonzero(dup.to_numpy())[0])
        raise InputError(f"{what}: row {pos} repeats job_id {out['job_id'].iloc[pos]!r}")
    order = np.argsort(out["submit_s"].to_numpy(dtype=np.float64), kind="stable")
    try:
        return JobTrace(out.iloc[order].reset_index(drop=True), name)
    except InputError as exc:
        text = str(exc).removeprefix(f"{name}: ")
        m = re.search(r"row (\d+) \(job_id", text)
        if m is not None:  # the sorted row back to the file's
            text = text[: m.start(1)] + str(int(order[int(m.group(1))])) + text[m.end(1):]
        raise InputError(f"{what}: {text}") from None


_PHILLY = ("job_id", "user", "num_gpu", "submit_time", "model_name", "duration")


def load_philly(path: str | os.PathLike[str]) -> JobTrace:
    """Chronus' Philly-derived job trace (``trace_job_Philly_MIX1.csv``, 30,940 jobs, MIT).

    Source: https://github.com/S-Lab-System-Group/ChronusArtifact (``code/data/exp/``).
    ``job_id`` -> ``job_id`` (as text), ``submit_time`` (s) -> ``submit_s``, ``duration`` (s)
    -> ``duration_s`` (0 -> NaN: unknown), ``num_gpu`` -> ``gpus`` (the trace has jobs with 0
    GPUs; they are kept). ``user`` (the Philly VC), ``model_name``, ``iterations`` and
    Chronus' deadline columns are kept. Rows are sorted by submission time (the file is not).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "philly.csv"
    >>> _ = p.write_text("job_id,user,num_gpu,submit_time,model_name,duration\\n"
    ...                  "0,vc_a,2,30,vgg16,100\\n1,vc_b,1,10,alexnet,5\\n")
    >>> load_philly(p).jobs[["job_id", "submit_s", "gpus", "model_name"]].values.tolist()
    [['1', 10.0, 1.0, 'alexnet'], ['0', 30.0, 2.0, 'vgg16']]
    """
    p = Path(path)
    what = str(p)
    df = _read_trace(p, _PHILLY, ("job_id", "user", "model_name"))
    submit = _numbers(df["submit_time"], "submit_time", what)
    _require(submit, ~np.isfinite(submit), "submit_time", "a finite time is needed", what)
    duration = _numbers(df["duration"], "duration", what)
    _require(duration, duration < 0, "duration", "durations must be >= 0", what)
    gpus = _numbers(df["num_gpu"], "num_gpu", what)
    _require(gpus, ~(np.isfinite(gpus) & (gpus >= 0)), "num_gpu", "must be a number >= 0", what)
    ids = df["job_id"].tolist()
    for pos, value in enumerate(ids):
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{what}: column 'job_id' row {pos} is empty")
    canonical = {
        "job_id": df["job_id"].astype(str),
        "submit_s": submit,
        "duration_s": np.where(duration > 0, duration, np.nan),
        "gpus": gpus,
    }
    return _finish(df, canonical, ("submit_time", "duration", "num_gpu"), "philly", what)


_OPENB = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "creation_time",
    "deletion_time",
    "scheduled_time",
    "pod_phase",
)


def load_alibaba_openb(path: str | os.PathLike[str], *, drop_unscheduled: bool = False) -> JobTrace:
    """Alibaba's GPU-sharing trace of 2023 (``openb_pod_list_*.csv``, 8,152 pods each).

    Source: https://github.com/alibaba/clusterdata ``cluster-trace-gpu-v2023`` (Weng et al.,
    ATC 2023); no licence is stated, so interplace ships none of it.

    Mapping: ``name`` -> ``job_id``; ``creation_time`` -> ``submit_s``; ``deletion_time -
    creation_time`` -> ``duration_s`` (the pod's lifetime, the arrival-to-departure interval
    the trace's own simulator replays; 0 -> NaN); ``gpus = num_gpu * gpu_milli / 1000``
    (``gpu_milli`` is the share of one GPU a sharing pod gets, 1000 = whole GPU; CPU-only pods
    have 0 GPUs). ``scheduled_time`` becomes ``scheduled_s``.

    Pods never scheduled (no ``scheduled_time``, phase ``Pending``) arrived but never ran, so
    their run time is unknown: they are kept with ``duration_s`` = NaN (a simulator still sees
    their demand arrive), or dropped with ``drop_unscheduled=True``. ``cpu_milli``,
    ``memory_mib``, ``num_gpu``, ``gpu_milli``, ``gpu_spec``, ``qos`` and ``pod_phase`` are kept.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "pods.csv"
    >>> _ = p.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    ...                  "creation_time,deletion_time,scheduled_time\\n"
    ...                  "a,6000,1024,1,460,,LS,Running,0,100,0\\n"
    ...                  "b,6000,1024,2,1000,,LS,Pending,5,50,\\n")
    >>> load_alibaba_openb(p).jobs[["job_id", "duration_s", "gpus"]].values.tolist()
    [['a', 100.0, 0.46], ['b', nan, 2.0]]
    >>> len(load_alibaba_openb(p, drop_unscheduled=True))
    1
    """
    p = Path(path)
    what = str(p)
    df = _read_trace(p, _OPENB, ("name", "gpu_spec", "qos", "pod_phase"))
    created = _numbers(df["creation_time"], "creation_time", what)
    _require(created, ~np.isfinite(created), "creation_time", "a finite time is needed", what)
    deleted = _numbers(df["deletion_time"], "deletion_time", what)
    _require(deleted, ~np.isfinite(deleted), "deletion_time", "a finite time is needed", what)
    duration = deleted - created
    _require(
        duration,
        duration < 0,
        "deletion_time",
        "it is before creation_time (negative duration)",
        what,
    )
    scheduled = _numbers(df["scheduled_time"], "scheduled_time", what)
    num_gpu = _numbers(df["num_gpu"], "num_gpu", what)
    _require(
        num_gpu, ~(np.isfinite(num_gpu) & (num_gpu >= 0)), "num_gpu", "must be a number >= 0", what
    )
    milli = _numbers(df["gpu_milli"], "gpu_milli", what)
    _require(
        milli,
        ~(np.isfinite(milli) & (milli >= 0) & (milli <= 1000)),
        "gpu_milli",
        "must be in [0, 1000]",
        what,
    )
    for c in ("cpu_milli", "memory_mib"):
        df[c] = _numbers(df[c], c, what)
    names = df["name"].tolist()
    for pos, value in enumerate(names):
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{what}: column 'name' row {pos} is empty")
    ran = np.isfinite(scheduled)
    canonical = {
        "job_id": df["name"].astype(str),
        "submit_s": created,
        "duration_s": np.where(ran & (duration > 0), duration, np.nan),
        "gpus": num_gpu * milli / 1000.0,
        "scheduled_s": scheduled,
    }
    if drop_unscheduled:
        df = df.loc[ran]
        canonical = {k: np.asarray(v)[ran] for k, v in canonical.items()}
        canonical = {k: pd.Series(v, index=df.index) for k, v in canonical.items()}
    drop = ("name", "creation_time", "deletion_time", "scheduled_time")
    return _finish(df, canonical, drop, f"alibaba-openb:{p.stem}", str(p))


_VENUS = ("time", "submit_gpu_job", "submit_gpu_num")


def _bin_times(col: pd.Series, what: str) -> pd.Series:
    """``col`` as times: each row's own format where the rows differ in format (pandas infers
    one from the first row), in UTC where their UTC offsets differ (a daylight-saving change,
    another zone); a row without an offset among rows with one is refused (which zone?)."""
    try:
        times = pd.to_datetime(col, errors="coerce")
    except ValueError:  # offsets differ
        times = None
    if times is None or times.isna().any():
        try:
            times = pd.to_datetime(col, errors="coerce", format="mixed")
        except ValueError:
            stamps = enumerate(pd.to_datetime(v, errors="coerce") for v in col.astype(str))
            known = [(pos, v.tzinfo is None) for pos, v in stamps if isinstance(v, pd.Timestamp)]
            naive = [pos for pos, no_zone in known if no_zone]
            aware = [pos for pos, no_zone in known if not no_zone]
            if naive and aware:
                raise InputError(
                    f"{what}: column 'time' row {naive[0]}: {col.iloc[naive[0]]!r} has no UTC "
                    f"offset, row {aware[0]}: {col.iloc[aware[0]]!r} has one"
                ) from None
            times = pd.to_datetime(col, errors="coerce", format="mixed", utc=True)
    bad = times.isna().to_numpy()
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise InputError(f"{what}: column 'time' row {pos}: {col.iloc[pos]!r} is not a time")
    return times


def load_venus(path: str | os.PathLike[str]) -> JobTrace:
    """GPU-job arrivals of SenseTime's Venus cluster, expanded into jobs.

    Reads Lucid's ``simulation/data/Venus/cluster_throughput.csv`` (Hu et al., ASPLOS 2023;
    **S-Lab License 1.0, non-commercial use only**: interplace reads it from your path and
    never copies it). The file is a series of 10-minute bins (``time`` = bin start) with counts:
    ``submit_gpu_job`` GPU jobs submitted, ``submit_gpu_num`` GPUs they asked for, and the
    same for starts, ends and all jobs.

    Bin :math:`b` with start :math:`t_b`, width :math:`w_b` (the gap to the next bin; the last
    bin takes the median gap), :math:`n_b` GPU jobs and :math:`G_b` GPUs becomes :math:`n_b`
    jobs ``"venus-<b>-<i>"`` submitted evenly inside the bin at
    :math:`t_b - t_0 + (i + 1/2)\\, w_b / n_b` with :math:`G_b / n_b` GPUs each (the trace
    gives only the bin's total, so every job gets the mean: fractional) and unknown duration.
    Only GPU jobs become rows. Kept columns: ``bin`` (row of the file) and ``bin_time``.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "venus.csv"
    >>> _ = p.write_text("time,submit_gpu_job,submit_gpu_num\\n2020-04-01 00:00:00,2,3\\n"
    ...                  "2020-04-01 00:10:00,0,0\\n")
    >>> load_venus(p).jobs[["job_id", "submit_s", "gpus"]].values.tolist()
    [['venus-0-0', 150.0, 1.5], ['venus-0-1', 450.0, 1.5]]
    """
    p = Path(path)
    what = str(p)
    df = _read_trace(p, _VENUS, ("time",))
    times = _bin_times(df["time"], what)
    t = (times - times.iloc[0]).dt.total_seconds().to_numpy(dtype=np.float64)
    gaps = np.diff(t)
    if (gaps <= 0).any():
        pos = int(np.flatnonzero(gaps <= 0)[0]) + 1
        raise InputError(f"{what}: column 'time' row {pos} is not after row {pos - 1}")
    width = np.append(gaps, np.median(gaps) if gaps.size else 600.0)
    n = _numbers(df["submit_gpu_job"], "submit_gpu_job", what)
    _require(
        n,
        ~(np.isfinite(n) & (n >= 0) & (n == np.round(n))),
        "submit_gpu_job",
        "job counts must be whole numbers >= 0",
        what,
    )
    g = _numbers(df["submit_gpu_num"], "submit_gpu_num", what)
    _require(g, ~(np.isfinite(g) & (g >= 0)), "submit_gpu_num", "must be a number >= 0", what)
    _require(g, (n == 0) & (g > 0), "submit_gpu_num", "GPUs submitted in a bin without jobs", what)
    counts = n.astype(np.int64)
    bins = np.repeat(np.arange(len(df)), counts)
    if bins.size == 0:
        raise InputError(f"{what}: no GPU job was submitted (submit_gpu_job is 0 everywhere)")
    starts = np.cumsum(counts) - counts
    i = np.arange(bins.size) - starts[bins]
    per_bin = counts[bins].astype(np.float64)
    jobs = pd.DataFrame(
        {
            "job_id": [f"venus-{b}-{k}" for b, k in zip(bins.tolist(), i.tolist(), strict=True)],
            "submit_s": t[bins] + (i + 0.5) * width[bins] / per_bin,
            "duration_s": np.full(bins.size, np.nan),
            "gpus": g[bins] / per_bin,
            "bin": bins,
            "bin_time": times.to_numpy()[bins],
        }
    )
    return JobTrace(jobs, "venus")
