"""Jobs and state tables in, placement tables out (CSV or Parquet), with one-line errors.

Jobs table: ``job_id``, ``job`` (a job type the model knows), ``gpus`` (default 1), and
optional ``family`` and ``comm_share`` (default :data:`~interplace.placement.DEFAULT_COMM_SHARE`)
and counter columns named as :data:`interplace.model.METRIC_RESOURCE` (``gpu_util_pct``,
``mem_util_pct``, ...): a row's readings of an isolated run, which place a job type the model
does not know by its cold-start path, with an optional ``counter_samples``, how many samples
each reading is a mean of (default: as the model's own isolated readings); another column
named as a counter (``*_pct``, ``*_kbps``) is refused, as a misspelt one.
State table: one row per (running job, GPU): ``job_id``, ``job``, ``gpu``, optional
``comm_share``. Placement table: one row per (job, GPU): ``job_id``, ``job``, ``gpu``,
``speed_mean``, ``speed_q05``, ``speed_q95``.

>>> import pandas as pd
>>> jobs_from_frame(pd.DataFrame({"job_id": ["a", "b"], "job": ["x", "y"], "gpus": [1, 2]}))
[Job(job_id='a', job='x', gpus=1, family=None, comm_share=0.2, counters=None, counter_samples=None), Job(job_id='b', job='y', gpus=2, family=None, comm_share=0.2, counters=None, counter_samples=None)]
"""  # noqa: E501

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, cast

import pandas as pd

from interplace.errors import InputError, atomic_write, check_output_file, read_table
from interplace.placement._types import DEFAULT_COMM_SHARE, ClusterState, Job, Placement, Running

__all__ = [
    "PLACEMENT_COLUMNS",
    "check_table_path",
    "jobs_from_frame",
    "read_jobs",
    "read_state",
    "state_from_frame",
    "write_placement",
]

PLACEMENT_COLUMNS = ("job_id", "job", "gpu", "speed_mean", "speed_q05", "speed_q95")
_TEXT = ("job_id", "job", "gpu", "family")
_SUFFIXES = (".csv", ".parquet")


def _read(path: str | os.PathLike[str], what: str) -> pd.DataFrame:
    return read_table(path, what, text=_TEXT, never_missing=_TEXT)


def _need(frame: pd.DataFrame, columns: tuple[str, ...], where: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(
            f"{where} lacks column(s) {', '.join(missing)} (needs {', '.join(columns)})"
        )


def _text(value: Any, column: str, row: int, where: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise InputError(f"{where} row {row}: empty {column}")
    text = str(value).strip()
    if not text:
        raise InputError(f"{where} row {row}: empty {column}")
    return text


def _int(value: Any, column: str, row: int, where: str) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where} row {row}: {column} {value!r} is not a number") from None
    if not math.isfinite(f) or f != int(f) or f < 1:
        raise InputError(f"{where} row {row}: {column} must be a whole number >= 1, not {value!r}")
    return int(f)


def _share(value: Any, row: int, where: str) -> float:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DEFAULT_COMM_SHARE
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where} row {row}: comm_share {value!r} is not a number") from None
    if not (math.isfinite(f) and 0 <= f < 1):
        raise InputError(f"{where} row {row}: comm_share must be in [0, 1), not {value!r}")
    return f


def jobs_from_frame(frame: pd.DataFrame, where: str = "jobs table") -> list[Job]:
    """One :class:`Job` per row (see the module docstring for the columns)."""
    _need(frame, ("job_id", "job"), where)
    if len(frame) == 0:
        raise InputError(f"{where} has no rows")
    from interplace.model import METRIC_RESOURCE

    jobs: list[Job] = []
    seen: dict[str, int] = {}
    has = set(frame.columns)
    metric_columns = [c for c in frame.columns if c in METRIC_RESOURCE]
    misspelt = [c for c in frame.columns
                if str(c).endswith(("_pct", "_kbps")) and c not in METRIC_RESOURCE]
    if misspelt:  # a counter's column under a name no model reads: it would be left out
        raise InputError(f"{where}: column {misspelt[0]!r} is no counter interplace reads "
                         f"(counters: {', '.join(sorted(METRIC_RESOURCE))})")
    for row, rec in enumerate(frame.to_dict("records")):
        job_id = _text(rec["job_id"], "job_id", row, where)
        if job_id in seen:
            raise InputError(f"{where} row {row}: duplicate job_id {job_id!r} (row {seen[job_id]})")
        seen[job_id] = row
        gpus = _int(rec["gpus"], "gpus", row, where) if "gpus" in has else 1
        family = None
        if "family" in has:
            f = rec["family"]
            if f is not None and not (isinstance(f, float) and math.isnan(f)) and str(f).strip():
                family = str(f).strip()
        share = DEFAULT_COMM_SHARE
        if "comm_share" in has:
            share = _share(rec.get("comm_share"), row, where)
        counters = {}
        for metric in metric_columns:
            v = rec[metric]
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            try:
                counters[metric] = float(v)
            except (TypeError, ValueError):
                raise InputError(f"{where} row {row}: {metric} {v!r} is not a number") from None
        samples = None
        if "counter_samples" in has:
            v = rec["counter_samples"]
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                samples = _int(v, "counter_samples", row, where)
        try:
            jobs.append(
                Job(job_id, _text(rec["job"], "job", row, where), gpus, family, share,
                    tuple(sorted(counters.items())) or None, samples)
            )
        except InputError as exc:
            raise InputError(f"{where} row {row}: {exc}") from None
    return jobs


def state_from_frame(frame: pd.DataFrame, where: str = "state table") -> ClusterState:
    """A :class:`ClusterState` from one row per (running job, GPU)."""
    _need(frame, ("job_id", "job", "gpu"), where)
    order: list[str] = []
    gpus: dict[str, list[str]] = {}
    types: dict[str, str] = {}
    shares: dict[str, float] = {}
    for row, rec in enumerate(frame.to_dict("records")):
        job_id = _text(rec["job_id"], "job_id", row, where)
        job = _text(rec["job"], "job", row, where)
        gpu = _text(rec["gpu"], "gpu", row, where)
        if job_id not in gpus:
            order.append(job_id)
            gpus[job_id] = []
            types[job_id] = job
            shares[job_id] = _share(rec.get("comm_share"), row, where)
        elif types[job_id] != job:
            raise InputError(
                f"{where} row {row}: job {job_id!r} is {job!r} here and {types[job_id]!r} above"
            )
        if gpu in gpus[job_id]:
            raise InputError(f"{where} row {row}: job {job_id!r} lists GPU {gpu!r} twice")
        gpus[job_id].append(gpu)
    try:
        running = tuple(
            Running(Job(j, types[j], len(gpus[j]), None, shares[j]), tuple(gpus[j])) for j in order
        )
        return ClusterState(running)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def read_jobs(path: str | os.PathLike[str]) -> list[Job]:
    """Jobs from a ``.csv`` or ``.parquet`` table; errors name the file and row."""
    return jobs_from_frame(_read(path, "jobs table"), str(path))


def read_state(path: str | os.PathLike[str]) -> ClusterState:
    """What runs where, from a ``.csv`` or ``.parquet`` table; errors name the file and row."""
    return state_from_frame(_read(path, "state table"), str(path))


def placement_frame(placement: Placement) -> pd.DataFrame:
    """The placement table (:data:`PLACEMENT_COLUMNS`) of the new jobs."""
    rows = placement.table()
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in PLACEMENT_COLUMNS})
    return pd.DataFrame(rows, columns=list(PLACEMENT_COLUMNS))


def check_table_path(path: str | os.PathLike[str]) -> Path:
    """Refuse a table output path that :func:`write_table` could not write (its type by
    suffix, then :func:`~interplace.errors.check_output_file`); returns it as a Path.

    >>> check_table_path("p.txt")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: p.txt: unknown output file type '.txt' (use .csv or .parquet)
    """
    return check_output_file(_known_suffix(Path(path)))


def _known_suffix(p: Path) -> Path:
    """``p`` if its suffix names a table type :func:`write_tables` writes."""
    if p.suffix.lower() not in _SUFFIXES:
        raise InputError(f"{p}: unknown output file type {p.suffix!r} (use .csv or .parquet)")
    return p


def write_table(frame: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write ``frame`` atomically as CSV or Parquet, by the file's suffix."""
    write_tables([(frame, path)])


def write_tables(tables: Sequence[tuple[pd.DataFrame, str | os.PathLike[str]]]) -> None:
    """Write each ``(frame, path)`` as :func:`write_table` does, all or none: every table is
    written to a temporary file first and renamed onto its path only once all are written, so
    a command with two outputs that fails on the second leaves the first untouched too.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> one = pd.DataFrame({"job": ["a"]})
    >>> write_tables([(one, d / "a.csv"), (one, d / "b.txt")])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: .../b.txt: unknown output file type '.txt' (use .csv or .parquet)
    >>> sorted(p.name for p in d.iterdir())
    []
    """
    paths = [_known_suffix(Path(path)) for _, path in tables]
    with contextlib.ExitStack() as stack:  # the renames happen as the stack closes
        for (frame, _), p in zip(tables, paths, strict=True):
            if p.suffix.lower() == ".csv":
                fh = stack.enter_context(atomic_write(p, "w"))
                frame.to_csv(cast("IO[str]", fh), index=False, lineterminator="\n")
            else:
                fb = stack.enter_context(atomic_write(p, "wb"))
                frame.to_parquet(cast("IO[bytes]", fb), index=False)


def write_placement(placement: Placement, path: str | os.PathLike[str]) -> None:
    """Write the placement table atomically (no partial file on failure)."""
    write_table(placement_frame(placement), path)
