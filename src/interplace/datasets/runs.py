"""The co-location "runs" format: measured throughputs of jobs alone and sharing one GPU.

The runs table
--------------
One row per job instance per run. Required columns:

``run_id`` (str)
    Rows that share a ``run_id`` ran at the same time: on the same GPU, unless an optional
    ``device`` column puts them on different GPUs of one machine (then they share only what
    the topology's contention domains say, such as a PCIe switch uplink). A run of one row is
    the job alone (an *isolated* run); the same job may appear twice in one run (two
    instances). :meth:`CoLocationData.pairs` pairs the two rows of a two-row run whatever
    their devices.
``job`` (str)
    The job (model, batch size, ...) as a name.
``throughput`` (float)
    Finite and > 0, in any unit that is the same for every row of one job (steps/s,
    samples/s...): only ratios within a job are meaningful.

Optional columns (``device``, ``mode`` = ``timeslice`` | ``mps``, ``gpu_type``, ...) are kept
as they are. A missing ``mode`` value means "not known".

The samples table
-----------------
Optional counters observed during the runs, as a long table with the columns ``run_id``,
``t_s`` (seconds since the run started), ``metric`` and ``value``, plus the optional
``device``, ``host`` and ``scale`` (the share of the interval a multiplexed perf counter ran,
so the reading is ``value / scale``; NaN where not applicable). Metric names and units are the
canonical ones of :data:`interplace.collectors.CANONICAL_METRICS` (``gpu_util_pct``,
``mem_util_pct``, ``pcie_rx_kbps``, ``pcie_tx_kbps``, ``host_cpu_busy_pct``...; perf events
keep their perf names, such as ``instructions``). ``device`` is the GPU a sample was read on,
as in the runs table, or ``"host"`` for a machine-wide counter (the convention of
:mod:`interplace.collectors.table`); a sample whose ``device`` is missing or names no GPU of
its run describes the whole run. Every ``run_id`` must name a run of the runs table.

*Missing values.* A reading that was not obtained is either absent (no row) or a row whose
``value`` is missing (NaN, ``None`` or ``pd.NA``), and the two mean the same thing: readers and
:func:`validate_samples_for_runs` keep such rows, and consumers (the model's counter
statistics, the baselines) ignore them, so dropping them, as
:func:`interplace.collectors.validate_samples` does for the collectors' long table, changes no
result. A ``value`` that is present must be a finite number: an infinite one is an error.

Derived views
-------------
The isolated throughput of job :math:`j` is the mean over its isolated runs,
:math:`\\bar T_j = \\operatorname{mean}_{r:\\,|r| = 1} T_{r,j}`. For a run of exactly two rows
:math:`\\{j, k\\}`, the *speed* of :math:`j` next to :math:`k` is
:math:`s_{j|k} = T_{r,j} / \\bar T_j` (1 = no slowdown, 0.5 = half speed).

>>> runs = pd.DataFrame({"run_id": ["a", "b", "p", "p"], "job": ["x", "y", "x", "y"],
...                      "throughput": [10.0, 4.0, 5.0, 3.0]})
>>> data = CoLocationData(runs, None, "toy")
>>> data.isolated_throughput().to_dict()
{'x': 10.0, 'y': 4.0}
>>> data.pairs()[["job", "co_runner", "speed"]].to_dict("records")
[{'job': 'x', 'co_runner': 'y', 'speed': 0.5}, {'job': 'y', 'co_runner': 'x', 'speed': 0.75}]
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interplace.errors import InputError, atomic_write, check_input_dir, read_table

__all__ = [
    "MODES",
    "RUN_COLUMNS",
    "SAMPLE_COLUMNS",
    "CoLocationData",
    "read_dir",
    "read_runs",
    "read_samples",
    "validate_runs",
    "validate_samples_for_runs",
    "write_runs",
]

RUN_COLUMNS: tuple[str, ...] = ("run_id", "job", "throughput")
"""Required columns of a runs table."""

SAMPLE_COLUMNS: tuple[str, ...] = ("run_id", "t_s", "metric", "value")
"""Required columns of a samples table."""

MODES: frozenset[str] = frozenset({"timeslice", "mps"})
"""Allowed values of the optional ``mode`` column (how the jobs shared the GPU)."""

# Strings read as missing in columns other than run_id / job / metric (a job may be called "NA").
_NA_STRINGS = ["", "NA", "N/A", "n/a", "NaN", "nan", "null", "NULL", "None"]
_TEXT_COLUMNS = ("run_id", "job", "metric", "device", "host", "mode", "gpu_type")
_NEVER_NA = ("run_id", "job", "metric")


def _missing_columns(df: pd.DataFrame, need: Sequence[str], what: str, kind: str) -> None:
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise InputError(
            f"{what}: {kind} table lacks column(s) {', '.join(missing)} (needs {', '.join(need)})"
        )


def _check_names(df: pd.DataFrame, column: str, what: str, kind: str) -> None:
    """Every value of ``column`` is a non-empty string."""
    for pos, value in enumerate(df[column].tolist()):
        absent = value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))
        if not isinstance(value, str) and not absent:  # a Parquet column of numbers, say
            raise InputError(
                f"{what}: {kind} row {pos} has {column} {value!r}, a {type(value).__name__}; "
                f"{column} must be text (a CSV's ids are read as text)"
            )
        if absent or not value.strip():
            raise InputError(
                f"{what}: {kind} row {pos} has no {column} (got {value!r}); "
                f"{column} must be a non-empty string"
            )


def _as_float(df: pd.DataFrame, column: str, what: str, kind: str) -> np.ndarray[Any, Any]:
    """``column`` as a float array, or an InputError naming the first value that is no number."""
    values = df[column].tolist()
    out = np.empty(len(values), dtype=float)
    for pos, value in enumerate(values):
        if isinstance(value, bool | str | bytes):
            # One text cell in a file makes the whole column text: name that cell, not the
            # first row (whose number reads as text too).
            bad = next((q for q, v in enumerate(values) if isinstance(v, str | bytes)
                        and not _reads_as_number(v)), pos)
            raise InputError(
                f"{what}: {kind} row {bad} has {column} {values[bad]!r}, not a number"
            )
        try:
            out[pos] = float(value)
        except (TypeError, ValueError):
            raise InputError(
                f"{what}: {kind} row {pos} has {column} {value!r}, not a number"
            ) from None
    return out


def _reads_as_number(text: str | bytes) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def validate_runs(runs: pd.DataFrame, what: str) -> None:
    """Raise :class:`InputError` unless ``runs`` is a valid runs table.

    ``what`` names the data in the message (a file name, a data set). Checks: a DataFrame with
    at least one row and the columns ``run_id``, ``job``, ``throughput``; non-empty string ids
    and jobs; every throughput a finite number > 0; ``mode`` (when present) ``timeslice``,
    ``mps`` or missing, and the same within a run; every job that runs co-located also has an
    isolated run (otherwise its slowdown is undefined).

    >>> ok = pd.DataFrame({"run_id": ["a"], "job": ["x"], "throughput": [1.0]})
    >>> validate_runs(ok, "ok")
    >>> validate_runs(ok.assign(throughput=[0.0]), "bad.csv")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: bad.csv: throughput must be finite and > 0, but row 0 ... has 0.0
    """
    if not isinstance(runs, pd.DataFrame):
        raise InputError(f"{what}: runs must be a pandas DataFrame, not {type(runs).__name__}")
    _missing_columns(runs, RUN_COLUMNS, what, "runs")
    if len(runs) == 0:
        raise InputError(f"{what}: runs table has no rows")
    _check_names(runs, "run_id", what, "runs")
    _check_names(runs, "job", what, "runs")
    run_ids = runs["run_id"].tolist()
    throughput = _as_float(runs, "throughput", what, "runs")
    bad = np.flatnonzero(~(np.isfinite(throughput) & (throughput > 0)))
    if bad.size:
        pos = int(bad[0])
        raise InputError(
            f"{what}: throughput must be finite and > 0, but row {pos} "
            f"(run_id {run_ids[pos]!r}) has {float(throughput[pos])!r}"
        )
    if "mode" in runs.columns:
        seen: dict[str, object] = {}
        for pos, mode in enumerate(runs["mode"].tolist()):
            missing = _is_missing(mode)
            if not missing and mode not in MODES:
                raise InputError(
                    f"{what}: mode must be one of {', '.join(sorted(MODES))} or empty, but row "
                    f"{pos} (run_id {run_ids[pos]!r}) has {mode!r}"
                )
            key = None if missing else mode
            rid = run_ids[pos]
            if rid in seen and seen[rid] != key:
                raise InputError(
                    f"{what}: run_id {rid!r} mixes modes {seen[rid]!r} and {key!r} "
                    f"(row {pos}); all rows of a run share one GPU and one mode"
                )
            seen.setdefault(rid, key)
    size = runs.groupby("run_id", sort=False)["job"].transform("size")
    alone = set(runs.loc[size == 1, "job"].tolist())
    together = runs.loc[size > 1]
    for rid, job in zip(together["run_id"].tolist(), together["job"].tolist(), strict=True):
        if job not in alone:
            rows = runs.loc[runs["run_id"] == rid]
            if len(rows.drop(columns="run_id").drop_duplicates()) == 1:
                raise InputError(  # a self-pair, or its only isolated run written twice
                    f"{what}: job {job!r} has no isolated run: run_id {rid!r} holds "
                    f"{len(rows)} identical rows of it (copies of the job sharing a GPU, or "
                    "its isolated run written twice?), and no run has the job alone"
                )
            raise InputError(
                f"{what}: job {job!r} runs co-located (run_id {rid!r}) but has no isolated run, "
                "so its slowdown is undefined"
            )


def validate_samples_for_runs(samples: pd.DataFrame, runs: pd.DataFrame, what: str) -> None:
    """Raise :class:`InputError` unless ``samples`` is a valid samples table for ``runs``.

    Checks: a DataFrame with the columns ``run_id``, ``t_s``, ``metric``, ``value``;
    non-empty string ``run_id`` and ``metric``; ``t_s`` finite numbers; ``value`` finite
    numbers or missing (NaN, ``None``, ``pd.NA``: a reading not obtained, ignored by consumers,
    see the module docstring); ``scale``, where given, a number in (0, 1] or missing; every
    ``run_id`` a run of ``runs``.

    >>> runs = pd.DataFrame({"run_id": ["a"], "job": ["x"], "throughput": [1.0]})
    >>> s = pd.DataFrame({"run_id": ["a", "a"], "t_s": [0.0, 1.0],
    ...                   "metric": ["gpu_util_pct"] * 2, "value": [50.0, float("nan")]})
    >>> validate_samples_for_runs(s, runs, "s.csv")  # a missing value is allowed
    >>> validate_samples_for_runs(s.assign(value=[50.0, float("inf")]), runs, "s.csv")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: s.csv: samples row 1 has value inf, not a finite number or missing
    >>> validate_samples_for_runs(s.assign(run_id=["a", "b"]), runs, "s.csv")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: s.csv: samples row 1 has run_id 'b', not a run of the runs table
    """
    if not isinstance(samples, pd.DataFrame):
        raise InputError(
            f"{what}: samples must be a pandas DataFrame, not {type(samples).__name__}"
        )
    _missing_columns(samples, SAMPLE_COLUMNS, what, "samples")
    _check_names(samples, "run_id", what, "samples")
    _check_names(samples, "metric", what, "samples")
    t_s = _as_float(samples, "t_s", what, "samples")
    bad = np.flatnonzero(~np.isfinite(t_s))
    if bad.size:
        pos = int(bad[0])
        raise InputError(
            f"{what}: samples row {pos} has t_s {float(t_s[pos])!r}, not a finite number"
        )
    values = samples["value"].tolist()
    for pos, value in enumerate(values):  # a text cell makes the whole column text: name it
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                raise InputError(
                    f"{what}: samples row {pos} has value {value!r}, not a number"
                ) from None
    for pos, value in enumerate(values):
        if value is None or value is pd.NA:
            continue
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
            raise InputError(f"{what}: samples row {pos} has value {value!r}, not a number")
        if isinstance(value, float | np.floating) and math.isinf(value):
            raise InputError(
                f"{what}: samples row {pos} has value {float(value)!r}, not a finite number or "
                "missing"
            )
    if "scale" in samples.columns:  # the share of the interval a counter ran
        share = pd.to_numeric(samples["scale"], errors="coerce").to_numpy(dtype=float)
        for pos, (value, x) in enumerate(zip(samples["scale"].tolist(), share, strict=True)):
            if _is_missing(value):
                continue
            if isinstance(value, bool | np.bool_) or not 0.0 < x <= 1.0:
                raise InputError(
                    f"{what}: samples row {pos} has scale {value!r}, not a number in (0, 1] or "
                    "missing"
                )
    known = set(runs["run_id"].tolist())
    for pos, rid in enumerate(samples["run_id"].tolist()):
        if rid not in known:
            raise InputError(
                f"{what}: samples row {pos} has run_id {rid!r}, not a run of the runs table"
            )


@dataclass(frozen=True, eq=False)
class CoLocationData:
    """A runs table, optional counter samples, a name and, for synthetic data, the truth.

    ``truth`` holds the ground truth a synthetic generator drew the data from (``None`` for
    measured data); it is not validated. Instances compare by identity (DataFrames have no
    single truth value); the tables should be treated as read-only.

    >>> CoLocationData(pd.DataFrame({"run_id": ["p", "p"], "job": ["x", "y"],
    ...                              "throughput": [1.0, 2.0]}), None, "toy")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: toy: job 'x' runs co-located (run_id 'p') but has no isolated...
    """

    runs: pd.DataFrame
    samples: pd.DataFrame | None
    name: str
    truth: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InputError(f"data set name must be a non-empty string, not {self.name!r}")
        validate_runs(self.runs, self.name)
        if self.samples is not None:
            validate_samples_for_runs(self.samples, self.runs, self.name)
        if self.truth is not None and not isinstance(self.truth, dict):
            raise InputError(f"{self.name}: truth must be a dict or None")

    def run_sizes(self) -> pd.Series:
        """Number of rows (job instances) of each run, indexed by ``run_id``.

        >>> d = CoLocationData(pd.DataFrame({"run_id": ["a", "p", "p"], "job": ["x", "x", "x"],
        ...                                  "throughput": [2.0, 1.0, 1.0]}), None, "toy")
        >>> d.run_sizes().to_dict()
        {'a': 1, 'p': 2}
        """
        return self.runs.groupby("run_id", sort=False).size().rename("size")

    def isolated_throughput(self) -> pd.Series:
        """Per job, the mean throughput over its isolated runs (runs of one row).

        Returns a float Series named ``isolated`` indexed by job (sorted); jobs that never ran
        alone are absent.

        >>> d = CoLocationData(pd.DataFrame({"run_id": ["a", "b"], "job": ["x", "x"],
        ...                                  "throughput": [2.0, 4.0]}), None, "toy")
        >>> d.isolated_throughput().to_dict()
        {'x': 3.0}
        """
        runs = self.runs
        size = runs.groupby("run_id", sort=False)["job"].transform("size")
        alone = runs.loc[size == 1]
        tput = pd.Series(_as_float(alone, "throughput", self.name, "runs"), index=alone.index)
        jobs = alone["job"].astype(str)
        with np.errstate(over="ignore"):  # an overflow is caught below
            out = tput.groupby(jobs).mean()
        if len(out) and not np.isfinite(out.to_numpy()).all():
            # Throughputs near the float maximum (finite, validated) overflow their sum: the
            # mean on a scale of 1, scaled back.
            top = float(tput.abs().max())
            out = (tput / top).groupby(jobs).mean() * top
        out.index.name = "job"
        return out.rename("isolated")

    def pairs(self) -> pd.DataFrame:
        """One row per (run, job, co-runner) of every run of exactly two rows.

        Columns: ``run_id``, ``job``, ``co_runner``, ``throughput``, ``isolated`` (the job's
        :meth:`isolated_throughput`), ``speed`` = ``throughput / isolated``, then the optional
        columns of the runs table. Rows keep the order of the runs table. A run of two
        instances of one job gives two rows with ``job == co_runner``.

        >>> d = CoLocationData(pd.DataFrame({"run_id": ["a", "p", "p"], "job": ["x", "x", "x"],
        ...                                  "throughput": [2.0, 1.5, 0.5]}), None, "toy")
        >>> d.pairs()[["run_id", "job", "co_runner", "speed"]].values.tolist()
        [['p', 'x', 'x', 0.75], ['p', 'x', 'x', 0.25]]
        """
        runs = self.runs
        extra = [c for c in runs.columns if c not in RUN_COLUMNS]
        columns = ["run_id", "job", "co_runner", "throughput", "isolated", "speed", *extra]
        size = runs.groupby("run_id", sort=False)["job"].transform("size")
        two = runs.loc[size == 2]
        if len(two) == 0:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
        order = np.argsort(two["run_id"].astype(str).to_numpy(), kind="stable")
        jobs = two["job"].astype(str).to_numpy()[order].reshape(-1, 2)
        co = np.empty(len(two), dtype=object)
        co[order] = jobs[:, ::-1].reshape(-1)
        throughput = _as_float(two, "throughput", self.name, "runs")
        iso = self.isolated_throughput()
        job = two["job"].astype(str).to_numpy()
        isolated = iso.reindex(job).to_numpy(dtype=float)
        out = pd.DataFrame(
            {
                "run_id": two["run_id"].astype(str).to_numpy(),
                "job": job,
                "co_runner": co.astype(str),
                "throughput": throughput,
                "isolated": isolated,
                "speed": throughput / isolated,
            }
        )
        for c in extra:
            out[c] = two[c].to_numpy()
        return out[columns]


def _read_table(path: Path, what: str) -> pd.DataFrame:
    """A CSV or Parquet file as a DataFrame; text id columns stay strings."""
    return read_table(path, what, text=_TEXT_COLUMNS, missing=_NA_STRINGS, never_missing=_NEVER_NA)


def read_runs(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read and validate a runs table from a ``.csv`` or ``.parquet`` file.

    In a CSV, ``run_id`` and ``job`` are read as text exactly as written (a job called ``NA``
    stays ``"NA"``); empty cells of the other columns are missing values.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "runs.csv"
    >>> _ = p.write_text("run_id,job,throughput\\n1,x,2.5\\n")
    >>> read_runs(p).to_dict("records")
    [{'run_id': '1', 'job': 'x', 'throughput': 2.5}]
    """
    p = Path(path)
    runs = _read_table(p, "runs table")
    validate_runs(runs, str(p))
    return runs


def read_samples(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a samples table from a ``.csv`` or ``.parquet`` file (checked for its columns).

    Whether its run ids exist is checked against a runs table by
    :func:`validate_samples_for_runs` (as :class:`CoLocationData` does).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "samples.csv"
    >>> _ = p.write_text("run_id,t_s,metric,value\\na,0,gpu_util_pct,\\n")
    >>> read_samples(p)["value"].isna().tolist()
    [True]
    """
    p = Path(path)
    samples = _read_table(p, "samples table")
    _missing_columns(samples, SAMPLE_COLUMNS, str(p), "samples")
    return samples


def _one_of(directory: Path, stem: str) -> Path | None:
    found = [directory / f"{stem}{ext}" for ext in (".csv", ".parquet")]
    found = [p for p in found if p.exists()]
    if len(found) > 1:
        raise InputError(
            f"{directory}: both {found[0].name} and {found[1].name} exist; keep one of them"
        )
    return found[0] if found else None


def read_dir(directory: str | os.PathLike[str]) -> CoLocationData:
    """Load ``runs.csv`` or ``runs.parquet`` and, if present, ``samples.{csv,parquet}``.

    The data set is named after the directory. Ground truth (``truth``) is not part of the
    runs format, so it is ``None``; :func:`~interplace.datasets.truth.read_truth` reads a
    ``truth.json`` that :func:`~interplace.datasets.truth.write_truth` put beside the tables.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "toy"
    >>> d.mkdir()
    >>> _ = (d / "runs.csv").write_text("run_id,job,throughput\\na,x,2.0\\n")
    >>> data = read_dir(d)
    >>> data.name, len(data.runs), data.samples
    ('toy', 1, None)
    """
    d = check_input_dir(directory)
    runs_path = _one_of(d, "runs")
    if runs_path is None:
        raise InputError(f"{d}: no runs.csv or runs.parquet")
    runs = read_runs(runs_path)
    samples_path = _one_of(d, "samples")
    samples = None if samples_path is None else read_samples(samples_path)
    name = d.resolve().name or str(d)
    if samples is not None:
        validate_samples_for_runs(samples, runs, str(samples_path))
    return CoLocationData(runs, samples, name)


def write_runs(data: CoLocationData, directory: str | os.PathLike[str]) -> list[Path]:
    """Write ``runs.csv`` (and ``samples.csv`` when there are samples) into ``directory``.

    Both files are written to temporary files first and renamed into place only when both are
    complete, so a failure leaves the directory as it was. A ``samples.csv`` left from earlier
    data is removed when ``data`` has no samples (it would not belong to the new runs). A
    directory holding ``runs.parquet`` or ``samples.parquet`` is refused, since
    :func:`read_dir` could not tell which copy to read. ``truth`` is not written here:
    :func:`~interplace.datasets.truth.write_truth` stores it in the same directory. Returns
    the paths written.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> data = CoLocationData(pd.DataFrame({"run_id": ["a"], "job": ["x"],
    ...                                     "throughput": [2.0]}), None, "toy")
    >>> [p.name for p in write_runs(data, d)]
    ['runs.csv']
    >>> read_dir(d).runs.equals(data.runs)
    True
    """
    d = Path(directory)
    if not d.is_dir():
        raise InputError(f"output directory does not exist: {d}")
    for stale in ("runs.parquet", "samples.parquet"):
        if (d / stale).exists():
            raise InputError(
                f"{d}: holds {stale}; writing CSV beside it would make the data ambiguous"
            )
    runs_path = d / "runs.csv"
    samples_path = d / "samples.csv"
    written = [runs_path]
    # Nested: the inner file is renamed into place only after both bodies succeeded.
    with atomic_write(runs_path) as fr:
        data.runs.to_csv(fr, index=False)
        if data.samples is not None:
            with atomic_write(samples_path) as fs:
                data.samples.to_csv(fs, index=False)
            written.append(samples_path)
    if data.samples is None and samples_path.exists():
        samples_path.unlink()
    return written
