"""Encoding co-location data as tensors for the interference model.

Everything here is pure: tables in, NumPy arrays out. The Pyro model (:mod:`._net`) only ever
sees the arrays built here.

Observations
------------
Each row of a run with two or more rows is one *speed observation*
:math:`y_n = T_{n} / \\bar T_{j(n)}` of job :math:`j(n)` next to the other rows of its run (its
*co-runners*). Co-runners are stored padded to the largest run, as indices into the job list with
the extra index :math:`J` (a job of zero demand) as padding, together with a 0/1 *share mask*
(which resources each co-runner shares with the observed job: all of them on one GPU; the
resources of the shared topology domains otherwise).

Counters
--------
Samples of the metrics in :data:`METRIC_RESOURCE` are grouped per (run, device, metric) into the
sufficient statistics of a Gaussian: the count :math:`n`, the mean :math:`\\bar x` and the sum of
squared deviations :math:`S`, each divided by the metric's full-scale value (so 1 = the resource
saturated). A multiplexed perf counter (``scale`` < 1) is read as ``value / scale`` first.
Missing values are dropped (masked), and time stamps are not used at all, so per-host clock
offsets cannot bias anything. Metrics outside :data:`METRIC_RESOURCE` are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from interplace.datasets.runs import MODES, CoLocationData
from interplace.errors import InputError

__all__ = [
    "DEFAULT_RESOURCES",
    "METRIC_FULL_SCALE",
    "METRIC_RESOURCE",
    "Counters",
    "FamilySpec",
    "Observations",
    "counters_from_samples",
    "family_codes",
    "family_index",
    "job_families",
    "observations_from_runs",
    "select_mode",
    "subset_runs",
]

DEFAULT_RESOURCES: tuple[str, ...] = (
    "gpu_compute",
    "gpu_membw",
    "pcie_h2d",
    "pcie_d2h",
    "host_cpu",
)
"""The resource dimensions of the demand and sensitivity vectors, in order."""

METRIC_RESOURCE: dict[str, str] = {
    "gpu_util_pct": "gpu_compute",
    "sm_active_pct": "gpu_compute",
    "mem_util_pct": "gpu_membw",
    "dram_active_pct": "gpu_membw",
    "pcie_rx_kbps": "pcie_h2d",
    "pcie_tx_kbps": "pcie_d2h",
    "host_cpu_busy_pct": "host_cpu",
    "instructions": "host_cpu",
}
"""Counter metrics the model reads, and the resource whose utilisation each one measures."""

METRIC_FULL_SCALE: dict[str, float] = {
    "gpu_util_pct": 100.0,
    "sm_active_pct": 100.0,
    "mem_util_pct": 100.0,
    "dram_active_pct": 100.0,
    "pcie_rx_kbps": 16.0e6,
    "pcie_tx_kbps": 16.0e6,
    "host_cpu_busy_pct": 100.0,
}
"""The value of each metric at full utilisation. PCIe counters default to 16 GB/s (PCIe 3.0
x16, in KB/s); metrics without an entry (``instructions``) take the largest per-run mean seen
in the data as full scale, and are left out when that is 0."""

_IntArray = np.ndarray[Any, np.dtype[np.int64]]
_FloatArray = np.ndarray[Any, np.dtype[np.float64]]


@dataclass(frozen=True, eq=False)
class Observations:
    """Speed observations, shapes ``(N,)``, ``(N, K)`` and ``(N, K, R)``.

    ``job``: index of the observed job; ``co``: indices of its co-runners, padded with ``J``;
    ``share``: 1 where co-runner ``k`` shares resource ``r`` with the job; ``speed``: the
    measured speed (> 0); ``run``: the run index of each observation (for splitting).
    """

    job: _IntArray
    co: _IntArray
    share: _FloatArray
    speed: _FloatArray
    run: _IntArray

    def __post_init__(self) -> None:
        n = self.job.shape[0]
        if not (
            self.co.shape[0] == n
            and self.share.shape[:2] == self.co.shape
            and self.speed.shape == (n,)
            and self.run.shape == (n,)
        ):
            raise InputError("observation arrays disagree in shape")
        if n and not np.all(np.isfinite(self.speed) & (self.speed > 0)):
            raise InputError("speeds must be finite and > 0")

    def __len__(self) -> int:
        return int(self.job.shape[0])


@dataclass(frozen=True, eq=False)
class Counters:
    """Per (run, device, metric) Gaussian sufficient statistics, shapes ``(G,)`` / ``(G, M)``.

    ``members``: a 0/1 count matrix ``(G, J + 1)`` of the job instances that ran on the group's
    device (a job twice counts 2; the last column is unused padding); ``metric``: index into
    ``metrics``; ``n``, ``mean``, ``ssd``: count, mean and sum of squared deviations of the
    values divided by full scale. ``keys`` names each group as ``(run_id, device, metric)``.
    """

    members: _FloatArray
    metric: _IntArray
    n: _FloatArray
    mean: _FloatArray
    ssd: _FloatArray
    metrics: tuple[str, ...]
    full_scale: tuple[float, ...]
    keys: tuple[tuple[str, str, str], ...]

    def __len__(self) -> int:
        return int(self.metric.shape[0])

    def solo(self, n_jobs: int) -> list[tuple[int, int]]:
        """``(group, job)`` of every group measured on one job instance alone."""
        if not len(self):
            return []
        alone = self.members[:, :n_jobs].sum(1) == 1
        return [(int(g), int(np.argmax(self.members[g, :n_jobs]))) for g in np.flatnonzero(alone)]

    def solo_reads(self, n_jobs: int, resources: Sequence[str]) -> list[tuple[int, int, int]]:
        """``(group, job, resource index)`` of every group of :meth:`solo` whose metric reads
        one of ``resources``."""
        res_index = {r: i for i, r in enumerate(resources)}
        out = []
        for g, j in self.solo(n_jobs):
            r = res_index.get(METRIC_RESOURCE[self.metrics[int(self.metric[g])]])
            if r is not None:
                out.append((g, j, r))
        return out


FamilySpec = str | Mapping[str, str | None] | pd.Series
"""How job families are given: a runs-table column name, or a job -> family map (dict or
Series)."""


def _family_name(value: object) -> str | None:
    """A family name from a table cell or map value: None for a missing one.

    Text is stripped (empty means missing); an integral float is written as an integer, so a
    numeric family code read from a CSV with gaps (``1.0``) reads as ``1``. Anything else that
    is not a scalar is refused by the caller (None is not returned for it).
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, bool) or not pd.api.types.is_scalar(value):
        raise ValueError(value)
    if bool(pd.isna(value)):  # type: ignore[call-overload]
        return None
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    if isinstance(value, int | np.integer | float | np.floating):
        return str(value)
    raise ValueError(value)


def job_families(
    data: CoLocationData,
    jobs: Sequence[str],
    family: FamilySpec,
) -> tuple[str | None, ...]:
    """The family of each of ``jobs``: from a runs-table column, or from a job -> family map.

    ``family`` names a column of ``data.runs`` (such as Lucid's ``model``) or maps job names to
    family names (a dict or a pandas Series indexed by job). Names are stripped text; numbers
    are allowed and read as their text. A job with no family (a missing or empty cell, or
    absent from the map) gets None: its latents keep the plain prior. A job whose runs name two
    families is refused, and so are families that group nothing (no two of ``jobs`` share one),
    since they could not change the fit.

    >>> runs = pd.DataFrame({"run_id": ["a", "b", "c"], "job": ["x", "y", "z"],
    ...                      "throughput": [1.0, 2.0, 3.0], "model": ["M", "M", None]})
    >>> job_families(CoLocationData(runs, None, "toy"), ["x", "y", "z"], "model")
    ('M', 'M', None)
    """
    where = f"{data.name}: "
    out: list[str | None] = []
    if isinstance(family, str):
        runs = data.runs
        if family not in runs.columns:
            raise InputError(
                f"{where}runs table has no column {family!r} to take job families from"
            )
        if family in ("run_id", "job", "throughput"):
            raise InputError(f"{where}column {family!r} cannot name job families")
        values: dict[str, set[str]] = {}
        cells = zip(runs["job"].astype(str), runs[family], strict=True)
        for row, (job, value) in enumerate(cells):
            try:
                name = _family_name(value)
            except ValueError:
                raise InputError(
                    f"{where}runs row {row + 1}: family {value!r} in column {family!r} is not a "
                    "name"
                ) from None
            if name is not None:
                values.setdefault(job, set()).add(name)
        for job in jobs:
            names = sorted(values.get(job, ()))
            if len(names) > 1:
                raise InputError(
                    f"{where}job {job!r} has {len(names)} families in column {family!r} "
                    f"({', '.join(repr(n) for n in names[:3])})"
                )
            out.append(names[0] if names else None)
        what = f"column {family!r}"
    else:
        given: Mapping[Any, Any] | object = (
            family.to_dict() if isinstance(family, pd.Series) else family
        )
        if not isinstance(given, Mapping):
            raise InputError(
                "family must be a column name or a job -> family mapping, not "
                f"{type(given).__name__}"
            )
        for job in jobs:
            value = given.get(job)
            try:
                out.append(_family_name(value))
            except ValueError:
                raise InputError(f"family of job {job!r} is not a name: {value!r}") from None
        what = "the family map"
    counts: dict[str, int] = {}
    for name in out:
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    if not any(n >= 2 for n in counts.values()):
        raise InputError(
            f"{where}{what} gives no two jobs the same family, so families cannot inform the "
            "fit (leave the family out)"
        )
    return tuple(out)


def family_index(families: Sequence[str | None]) -> tuple[np.ndarray[Any, Any], int]:
    """Index each job's family by sorted name; a job without one gets the extra index ``F``.

    Returns the ``(J,)`` integer index and the number ``F`` of named families (index ``F``
    is the fixed zero effect of :func:`~interplace.model._net.family_centres`).

    >>> idx, n = family_index(["b", None, "a", "b"])
    >>> idx.tolist(), n
    ([1, 2, 0, 1], 2)
    """
    names = sorted({f for f in families if f is not None})
    index = {n: i for i, n in enumerate(names)}
    out = np.asarray([len(names) if f is None else index[f] for f in families], dtype=np.int64)
    return out, len(names)


def family_codes(families: Sequence[str | None] | None) -> np.ndarray[Any, Any] | None:
    """Each job's :func:`family_index`, ``-1`` for a job without a family, as the second
    stage of :mod:`interplace.model._cells` takes it; None for a fit without families.

    >>> family_codes(["b", None, "a", "b"]).tolist(), family_codes(None)
    ([1, -1, 0, 1], None)
    """
    if families is None:
        return None
    idx, n_fam = family_index(families)
    return np.where(idx < n_fam, idx, -1)


def subset_runs(data: CoLocationData, keep_runs: set[str], name: str) -> CoLocationData:
    """The runs (and their samples) of ``data`` whose ``run_id`` is in ``keep_runs``."""
    runs = data.runs.loc[data.runs["run_id"].astype(str).isin(keep_runs)].reset_index(drop=True)
    samples = None
    if data.samples is not None:
        s = data.samples
        samples = s.loc[s["run_id"].astype(str).isin(keep_runs)].reset_index(drop=True)
    return CoLocationData(runs, samples, name)


def select_mode(data: CoLocationData, mode: str | None) -> CoLocationData:
    """The runs of one sharing ``mode`` (``timeslice`` or ``mps``), or ``data`` unchanged.

    Time slicing and MPS contend so differently that one model must not mix them: data whose
    ``mode`` column holds both is refused unless ``mode`` picks one. Runs with no recorded
    mode are kept either way.

    >>> runs = pd.DataFrame({"run_id": ["a", "b"], "job": ["x", "x"], "throughput": [1.0, 1.0],
    ...                      "mode": ["mps", "timeslice"]})
    >>> select_mode(CoLocationData(runs, None, "t"), "mps").runs["run_id"].tolist()
    ['a']
    >>> select_mode(CoLocationData(runs, None, "t"), None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: t: runs mix sharing modes (mps, timeslice); fit one model ...
    """
    if mode is not None and mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(sorted(MODES))}, not {mode!r}")
    if "mode" not in data.runs.columns:
        if mode is not None:
            raise InputError(f"{data.name}: runs have no mode column to select {mode!r} from")
        return data
    col = data.runs["mode"]
    present = sorted({str(m) for m in col.dropna().tolist()})
    if mode is None:
        if len(present) > 1:
            raise InputError(
                f"{data.name}: runs mix sharing modes ({', '.join(present)}); fit one model "
                "per mode (--mode)"
            )
        return data
    if mode not in present:
        raise InputError(
            f"{data.name}: no run has mode {mode!r} (modes present: {', '.join(present) or 'none'})"
        )
    keep = set(data.runs.loc[col.isna() | col.eq(mode), "run_id"].astype(str))
    return subset_runs(data, keep, f"{data.name} ({mode})")


def device_of(runs: pd.DataFrame) -> list[str]:
    """Each row's ``device`` as text (empty where the table has none, or the cell is empty)."""
    if "device" not in runs.columns:
        return [""] * len(runs)
    out = []
    for v in runs["device"].tolist():
        out.append("" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    return out


def observations_from_runs(
    data: CoLocationData,
    jobs: Sequence[str],
    resources: Sequence[str],
    share_of: Mapping[tuple[str, str], Sequence[str]] | None = None,
) -> Observations:
    """Speed observations of every run with two or more rows of ``data``.

    ``jobs`` fixes the job indices (every job of ``data`` must be in it). Rows of one run on the
    same ``device`` (or without a ``device`` column) share every resource; rows on different
    devices share what ``share_of[(device_a, device_b)]`` lists, and without ``share_of`` such a
    run is an error (the model cannot know what the two GPUs share without a topology).

    >>> runs = pd.DataFrame({"run_id": ["a", "b", "p", "p"], "job": ["x", "y", "x", "y"],
    ...                      "throughput": [10.0, 4.0, 5.0, 3.0]})
    >>> obs = observations_from_runs(CoLocationData(runs, None, "toy"), ["x", "y"], ["gpu"])
    >>> obs.job.tolist(), obs.co.tolist(), obs.speed.tolist()
    ([0, 1], [[1], [0]], [0.5, 0.75])
    """
    index = {j: i for i, j in enumerate(jobs)}
    n_jobs = len(jobs)
    runs = data.runs
    iso = data.isolated_throughput()
    job_col = runs["job"].astype(str).tolist()
    unknown = sorted({j for j in job_col if j not in index})
    if unknown:
        raise InputError(f"{data.name}: job {unknown[0]!r} is not one of the model's jobs")
    device = device_of(runs)
    throughput = runs["throughput"].to_numpy(dtype=float)
    groups: dict[str, list[int]] = {}
    for pos, rid in enumerate(runs["run_id"].astype(str).tolist()):
        groups.setdefault(rid, []).append(pos)
    multi = [(rid, rows) for rid, rows in groups.items() if len(rows) > 1]
    width = max((len(rows) - 1 for _, rows in multi), default=1)
    n_res = len(resources)
    res_index = {r: i for i, r in enumerate(resources)}
    job_idx: list[int] = []
    co_idx: list[list[int]] = []
    shares: list[_FloatArray] = []
    speed: list[float] = []
    run_idx: list[int] = []
    for r, (rid, rows) in enumerate(multi):
        for pos in rows:
            co = [q for q in rows if q != pos]
            mask = np.zeros((width, n_res))
            for k, q in enumerate(co):
                if device[q] == device[pos]:
                    mask[k] = 1.0
                    continue
                key = (device[pos], device[q])
                if share_of is None or key not in share_of:
                    raise InputError(
                        f"{data.name}: run {rid!r} places its jobs on devices {device[pos]!r} "
                        f"and {device[q]!r}; pass a topology so the model knows what they share"
                    )
                for name in share_of[key]:
                    if name in res_index:
                        mask[k, res_index[name]] = 1.0
            job_idx.append(index[job_col[pos]])
            co_idx.append([index[job_col[q]] for q in co] + [n_jobs] * (width - len(co)))
            shares.append(mask)
            speed.append(throughput[pos] / float(iso[job_col[pos]]))
            run_idx.append(r)
    return Observations(
        job=np.asarray(job_idx, dtype=np.int64),
        co=np.asarray(co_idx, dtype=np.int64).reshape(len(job_idx), width),
        share=np.asarray(shares, dtype=np.float64).reshape(len(job_idx), width, n_res),
        speed=np.asarray(speed, dtype=np.float64),
        run=np.asarray(run_idx, dtype=np.int64),
    )


def counters_from_samples(
    data: CoLocationData,
    jobs: Sequence[str],
    full_scale: Mapping[str, float] | None = None,
    resources: Sequence[str] | None = None,
) -> Counters:
    """Group ``data.samples`` into per (run, device, metric) sufficient statistics.

    Only metrics of :data:`METRIC_RESOURCE` whose resource is in ``resources`` (default: any)
    are read.

    ``full_scale`` overrides :data:`METRIC_FULL_SCALE` per metric. Runs whose jobs are not all
    in ``jobs`` are an error. Without samples (or without any known metric) the result is empty.

    >>> runs = pd.DataFrame({"run_id": ["a"], "job": ["x"], "throughput": [1.0]})
    >>> s = pd.DataFrame({"run_id": ["a", "a", "a"], "t_s": [0.0, 1.0, 2.0],
    ...                   "metric": ["gpu_util_pct"] * 3, "value": [40.0, 60.0, None]})
    >>> c = counters_from_samples(CoLocationData(runs, s, "toy"), ["x"])
    >>> c.metrics, c.n.tolist(), c.mean.tolist(), round(float(c.ssd[0]), 6)
    (('gpu_util_pct',), [2.0], [0.5], 0.02)
    """
    index = {j: i for i, j in enumerate(jobs)}
    n_jobs = len(jobs)
    empty = Counters(
        members=np.zeros((0, n_jobs + 1)),
        metric=np.zeros(0, dtype=np.int64),
        n=np.zeros(0),
        mean=np.zeros(0),
        ssd=np.zeros(0),
        metrics=(),
        full_scale=(),
        keys=(),
    )
    samples = data.samples
    if samples is None or len(samples) == 0:
        return empty
    known = [m for m, r in METRIC_RESOURCE.items() if resources is None or r in resources]
    s = samples.loc[samples["metric"].isin(known)]
    value = pd.to_numeric(s["value"], errors="coerce").to_numpy(dtype=float)
    if "scale" in s.columns:
        scale = pd.to_numeric(s["scale"], errors="coerce").to_numpy(dtype=float)
        bad = np.isfinite(scale) & (scale <= 0)
        if bad.any():
            raise InputError(f"{data.name}: samples have a multiplexing scale <= 0")
        value = np.where(
            np.isfinite(scale), value / np.where(np.isfinite(scale), scale, 1.0), value
        )
    keep = np.isfinite(value)
    s = s.loc[keep]
    value = value[keep]
    if len(s) == 0:
        return empty
    dev = (
        s["device"].astype(object).where(s["device"].notna(), "").astype(str).to_numpy()
        if "device" in s.columns
        else np.full(len(s), "", dtype=object)
    )
    frame = pd.DataFrame(
        {
            "run_id": s["run_id"].astype(str).to_numpy(),
            "device": dev,
            "metric": s["metric"].astype(str).to_numpy(),
            "value": value,
        }
    )
    metrics = tuple(sorted(frame["metric"].unique().tolist()))
    stats = frame.groupby(["run_id", "device", "metric"], sort=True)["value"].agg(
        ["count", "mean", "var"]
    )
    stats["var"] = stats["var"].fillna(0.0)
    scales: dict[str, float] = {}
    for m in metrics:
        given = (full_scale or {}).get(m, METRIC_FULL_SCALE.get(m))
        if given is None:
            means = stats.xs(m, level="metric")["mean"]
            given = float(means.max())
            if given == 0.0:
                # Never above zero: no scale to learn from and nothing to say about demand.
                continue
        if not (math.isfinite(given) and given > 0):
            raise InputError(
                f"{data.name}: cannot scale metric {m!r} (full scale {given!r}); its values "
                "must have a positive maximum, or pass its full scale"
            )
        scales[m] = float(given)

    runs = data.runs
    run_dev = device_of(runs)
    members_of: dict[tuple[str, str], list[int]] = {}
    for rid, job, d in zip(
        runs["run_id"].astype(str).tolist(), runs["job"].astype(str).tolist(), run_dev, strict=True
    ):
        if job not in index:
            raise InputError(f"{data.name}: job {job!r} is not one of the model's jobs")
        members_of.setdefault((rid, d), []).append(index[job])
        members_of.setdefault((rid, "*"), []).append(index[job])
    metrics = tuple(m for m in metrics if m in scales)
    rows = []
    keys = []
    for key, st in stats.iterrows():
        rid, d, m = key  # type: ignore[misc]
        if m not in scales:
            continue
        jobs_here = members_of.get((rid, d))
        if jobs_here is None:
            # Samples from a device no row names (or rows without devices): the whole run.
            jobs_here = members_of.get((rid, "*"), [])
        if not jobs_here:
            continue
        vec = np.zeros(n_jobs + 1)
        for j in jobs_here:
            vec[j] += 1.0
        f = scales[str(m)]
        count = float(st["count"])
        rows.append(
            # var / f / f: f**2 of a Python float overflows (an OverflowError) above ~1e154
            (vec, metrics.index(str(m)), count, st["mean"] / f, st["var"] / f / f * (count - 1))
        )
        keys.append((str(rid), str(d), str(m)))
    if not rows:
        return empty
    return Counters(
        members=np.stack([r[0] for r in rows]),
        metric=np.asarray([r[1] for r in rows], dtype=np.int64),
        n=np.asarray([r[2] for r in rows], dtype=np.float64),
        mean=np.asarray([r[3] for r in rows], dtype=np.float64),
        ssd=np.asarray([r[4] for r in rows], dtype=np.float64),
        metrics=metrics,
        full_scale=tuple(scales[m] for m in metrics),
        keys=tuple(keys),
    )
