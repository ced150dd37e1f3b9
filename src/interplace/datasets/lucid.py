"""Lucid's measured co-located pairs and solo profiles, read from a directory the user supplies.

Source: Hu et al., "Lucid: A Non-intrusive, Scalable and Interpretable Scheduler for Deep
Learning Training Jobs", ASPLOS 2023, https://github.com/S-Lab-System-Group/Lucid. The data
is under the S-Lab License 1.0, which allows **non-commercial use only**: interplace never
ships, copies or caches it. Point :func:`load_lucid` at a directory holding Lucid's
``colocate_info.csv`` (``simulation/data/``) and ``single_data.csv``
(``simulation/analyzer/``).

Input
-----
``single_data.csv``: one row per job profiled alone: ``model``, ``dataset``, ``batchsize``,
``amp`` (mixed precision 0/1), ``speed`` (samples/s), ``gpu_util``, ``gmem_util`` (NVML
utilisation means, %), ``gmem`` (peak memory, MiB), ``label`` (Lucid's sensitivity class).
``colocate_info.csv``: one row per measured pair on one GPU: ``model1``, ``dataset1``,
``gpu_num1`` (must be 1), ``batchsize1``, ``amp1``, ``speed1``, the same for job 2, and
``gpu_util``, ``gmem_util``, ``gmem`` of the shared GPU. ``speed1``/``speed2`` are
*normalised*: co-located speed over isolated speed (values slightly above 1 are noise).

Conversion
----------
A job is one (model, dataset, batch size, amp) configuration, named
``"<model>/<dataset> bs<batchsize>"`` plus ``" amp"`` with mixed precision. Each solo profile
becomes an isolated run ``"lucid/iso/<job>"`` with throughput = ``speed`` (samples/s). Row
``i`` of ``colocate_info.csv`` becomes the run ``"lucid/pair/<i>"`` with two rows whose
throughputs are :math:`s_1 \\cdot T_1` and :math:`s_2 \\cdot T_2`, where :math:`s_k` is the
normalised speed and :math:`T_k` the solo throughput, so that
:meth:`~interplace.datasets.runs.CoLocationData.pairs` gives back ``speed = s_k`` (up to
rounding). A job of a pair that has no solo profile gets an isolated run of throughput 1.0
and co-located throughput :math:`s_k`: its unit is "fraction of isolated speed". The column
``unit`` says which (``samples/s`` or ``normalised``); ``model``, ``dataset``,
``batch_size``, ``amp`` and ``label`` (the solo profile's class, missing without one) are
kept as columns. ``label`` is ``int64`` when every job has a class, else ``float64`` with NaN
for the missing ones: the dtypes a CSV is read back with, so
:func:`~interplace.datasets.runs.write_runs` then :func:`~interplace.datasets.runs.read_dir`
gives back equal tables. ``mode`` is not recorded by Lucid and is left out.

Samples: the NVML summaries as a long table at ``t_s = 0`` per run: ``gpu_util_pct`` and
``mem_util_pct`` (means over ``nvidia-smi`` samples every 0.2 s, %, named like the canonical
metrics of :mod:`interplace.collectors`) and ``fb_used_max_bytes`` (peak frame-buffer use,
Lucid's MiB times 2**20), with the run's ``run_id``; a missing value is a missing row.

>>> from pathlib import Path
>>> src = Path("../shared/datasets/lucid")
>>> data = load_lucid(src) if src.is_dir() else None
>>> data is None or len(data.pairs()) == 2 * 1388
True
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from interplace.datasets.runs import CoLocationData
from interplace.errors import InputError, first_line, read_csv

__all__ = ["load_lucid", "lucid_job_name"]

_SINGLE = "single_data.csv"
_PAIRS = "colocate_info.csv"
_SINGLE_COLUMNS = ("model", "dataset", "batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem")
_PAIR_JOB_COLUMNS = ("model", "dataset", "gpu_num", "batchsize", "amp", "speed")
# (Lucid column, interplace metric, factor): names as interplace.collectors' canonical metrics.
_METRICS = (
    ("gpu_util", "gpu_util_pct", 1.0),
    ("gmem_util", "mem_util_pct", 1.0),
    ("gmem", "fb_used_max_bytes", float(2**20)),
)


def lucid_job_name(model: str, dataset: str, batch_size: int, amp: bool) -> str:
    """The job name of one Lucid configuration.

    >>> lucid_job_name("ResNet18", "CIFAR-10", 32, True)
    'ResNet18/CIFAR-10 bs32 amp'
    """
    return f"{model}/{dataset} bs{batch_size}" + (" amp" if amp else "")


def _read(path: Path, need: tuple[str, ...]) -> pd.DataFrame:
    if not path.is_file():
        raise InputError(f"no such file: {path} (expected Lucid's {path.name})")
    try:
        df = read_csv(path)
    except (OSError, ValueError, InputError, pd.errors.ParserError,
            pd.errors.EmptyDataError) as exc:
        first = first_line(exc)
        raise InputError(f"cannot read {path}: {first}") from exc
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise InputError(f"{path}: lacks column(s) {', '.join(missing)}")
    return df


def _int(value: object, where: str, column: str) -> int:
    if isinstance(value, bool):
        raise InputError(f"{where}: {column} {value!r} is not an integer")
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{where}: {column} {value!r} is not an integer") from None
    if not math.isfinite(f) or f != int(f):
        raise InputError(f"{where}: {column} {value!r} is not an integer")
    return int(f)


def _positive(value: object, where: str, column: str) -> float:
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{where}: {column} {value!r} is not a number") from None
    if not (math.isfinite(f) and f > 0):
        raise InputError(f"{where}: {column} must be finite and > 0, got {value!r}")
    return f


def _text(value: object, where: str, column: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: {column} {value!r} is not a name")
    return value.strip()


def _job(row: pd.Series, suffix: str, where: str) -> tuple[str, str, str, int, bool]:
    model = _text(row[f"model{suffix}"], where, f"model{suffix}")
    dataset = _text(row[f"dataset{suffix}"], where, f"dataset{suffix}")
    batch = _int(row[f"batchsize{suffix}"], where, f"batchsize{suffix}")
    amp = _int(row[f"amp{suffix}"], where, f"amp{suffix}")
    if amp not in (0, 1):
        raise InputError(f"{where}: amp{suffix} must be 0 or 1, got {amp}")
    return lucid_job_name(model, dataset, batch, bool(amp)), model, dataset, batch, bool(amp)


def _summary(rid: str, row: pd.Series, where: str) -> list[tuple[str, float, str, float]]:
    out = []
    for column, metric, factor in _METRICS:
        value = row[column]
        if pd.isna(value):
            continue
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise InputError(f"{where}: {column} {value!r} is not a number") from None
        if not math.isfinite(f):
            raise InputError(f"{where}: {column} {value!r} is not a finite number")
        out.append((rid, 0.0, metric, f * factor))
    return out


def load_lucid(path: str | os.PathLike[str]) -> CoLocationData:
    """Load Lucid's solo profiles and co-located pairs from the directory ``path``.

    Returns a :class:`~interplace.datasets.runs.CoLocationData` named ``"lucid"`` with one
    isolated run per solo profile, one two-row run per measured pair and the NVML means as
    samples (see the module docstring for the conversion and the units). Raises
    :class:`InputError` for a missing directory or file, a missing column, a duplicate solo
    profile, a multi-GPU job or a speed that is not a finite number > 0.

    >>> load_lucid("/nonexistent/lucid")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: no Lucid data directory /nonexistent/lucid ...
    """
    src = Path(path)
    if not src.is_dir():
        raise InputError(
            f"no Lucid data directory {src} (it is not shipped: point at a copy of Lucid's "
            f"{_PAIRS} and {_SINGLE})"
        )
    single = _read(src / _SINGLE, _SINGLE_COLUMNS)
    pair_need = tuple(f"{c}{k}" for k in ("1", "2") for c in _PAIR_JOB_COLUMNS)
    pairs = _read(src / _PAIRS, (*pair_need, "gpu_util", "gmem_util", "gmem"))
    if pairs.columns[0].startswith("Unnamed") or pairs.columns[0] == "":
        pair_ids = [str(_int(v, f"{src / _PAIRS}", "index")) for v in pairs.iloc[:, 0].tolist()]
    else:
        pair_ids = [str(i) for i in range(len(pairs))]
    if len(set(pair_ids)) != len(pair_ids):
        raise InputError(f"{src / _PAIRS}: the index column repeats a value")

    rows: list[dict[str, object]] = []
    samples: list[tuple[str, float, str, float]] = []
    solo: dict[str, float] = {}
    labels: dict[str, int | None] = {}
    for pos, (_, r) in enumerate(single.iterrows()):
        where = f"{src / _SINGLE} row {pos}"
        job, model, dataset, batch, amp = _job(r, "", where)
        if job in solo:
            raise InputError(f"{where}: job {job!r} is profiled twice")
        speed = _positive(r["speed"], where, "speed")
        solo[job] = speed
        label = r["label"] if "label" in single.columns else None
        labels[job] = None if label is None or pd.isna(label) else _int(label, where, "label")
        rid = f"lucid/iso/{job}"
        rows.append(
            {
                "run_id": rid,
                "job": job,
                "throughput": speed,
                "model": model,
                "dataset": dataset,
                "batch_size": batch,
                "amp": amp,
                "unit": "samples/s",
            }
        )
        samples.extend(_summary(rid, r, where))

    fallback: dict[str, tuple[str, str, int, bool]] = {}
    pair_rows: list[dict[str, object]] = []
    for pos, (pid, (_, r)) in enumerate(zip(pair_ids, pairs.iterrows(), strict=True)):
        where = f"{src / _PAIRS} row {pos}"
        rid = f"lucid/pair/{pid}"
        for k in ("1", "2"):
            job, model, dataset, batch, amp = _job(r, k, where)
            if _int(r[f"gpu_num{k}"], where, f"gpu_num{k}") != 1:
                raise InputError(
                    f"{where}: gpu_num{k} is {r[f'gpu_num{k}']!r}; only single-GPU jobs (1) are "
                    "supported"
                )
            speed = _positive(r[f"speed{k}"], where, f"speed{k}")
            if job not in solo:
                fallback[job] = (model, dataset, batch, amp)
            iso = solo.get(job, 1.0)
            pair_rows.append(
                {
                    "run_id": rid,
                    "job": job,
                    "throughput": speed * iso,
                    "model": model,
                    "dataset": dataset,
                    "batch_size": batch,
                    "amp": amp,
                    "unit": "samples/s" if job in solo else "normalised",
                }
            )
        samples.extend(_summary(rid, r, where))
    for job, (model, dataset, batch, amp) in sorted(fallback.items()):
        rows.append(
            {
                "run_id": f"lucid/iso/{job}",
                "job": job,
                "throughput": 1.0,
                "model": model,
                "dataset": dataset,
                "batch_size": batch,
                "amp": amp,
                "unit": "normalised",
            }
        )
    rows.extend(pair_rows)
    runs = pd.DataFrame(rows)
    label = [labels.get(j) for j in runs["job"]]
    # int64, or float64 with NaN where a class is missing: what reading a CSV gives back.
    runs["label"] = (
        np.asarray(label, dtype=np.int64)
        if all(v is not None for v in label)
        else np.asarray([math.nan if v is None else float(v) for v in label], dtype=np.float64)
    )
    runs["batch_size"] = runs["batch_size"].astype("int64")
    runs["amp"] = runs["amp"].astype(bool)
    sample_df = pd.DataFrame(samples, columns=["run_id", "t_s", "metric", "value"])
    sample_df["value"] = sample_df["value"].astype(np.float64)
    return CoLocationData(runs, sample_df, "lucid")
