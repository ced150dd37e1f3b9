r"""Inference stability a user can check: refit under perturbations the data really suffers.

:func:`stability` fits the model once on the data (the *reference*, on a seeded training
part; the rest of the co-located runs is held out to check coverage), then refits it under
seeded perturbations, ``n`` replicates each, and measures how far the answers move **in
units of the reference fit's posterior sd**:

``drop_samples``
    drop a ``fraction`` of the counter samples (rows of the samples table);
``drop_runs``
    drop a ``fraction`` of the runs, with their samples (only runs whose loss keeps the data
    valid: co-located runs, and isolated runs of jobs with more than one; at least one
    co-located run stays);
``duplicate_runs``
    repeat a ``fraction`` of the runs, with their samples, under new run ids;
``bootstrap_runs``
    resample the co-located runs with replacement (isolated runs, the speeds' reference, stay
    once each);
``jitter``
    multiply every throughput by :math:`e^{\epsilon}`, :math:`\epsilon \sim \mathcal N(0,
    \hat\sigma_v^2)` with :math:`\hat\sigma_v` the reference's posterior median speed noise
    (with the second stage, the default, that is the structure's noise, which holds its
    misfit as well as the measurement's own: about 0.03 on Lucid and 0.10 on Gavel against a
    measurement noise of 0.026 and 0.02, so ``jitter`` perturbs more than a fresh
    measurement would, and the same scale sets how far apart two repeats must be to count as
    contradictory);
``relabel``
    permute the rows of both tables and rename the jobs by a random bijection (which
    changes their internal order), then map the answers back before comparing;
``seed``
    refit the unchanged data with another fit seed: the optimiser's own Monte Carlo error,
    the floor every other perturbation sits on.

For each refit :math:`b` and each answer :math:`x` with reference posterior mean
:math:`\mu_x` and sd :math:`\sigma_x`, the move is :math:`z_{bx} = |\hat\mu^{(b)}_x - \mu_x| /
\sigma_x`. The answers are the posterior mean speed of a fixed query set (every measured
co-location and every held-out one; ``num_samples`` joint draws, one seed) and four per-job
latents (log demand, log sensitivity and log intensity per resource, and the isolated
reference error ``iso_bias``, from ``num_samples`` joint draws). Each refit also scores the
held-out runs: its 90% interval coverage, and the share of rows the reference covered that it
still covers.

What "stable" means
-------------------
A job's move under a refit is the **root mean square** of :math:`z` over the predictions it
takes part in (as the job or as a co-runner; a job with no measured or held-out co-location
gets its pairs with every job); its move under a perturbation is the **median over the ``n``
replicates** of that. A job is *flagged* when its move under some perturbation exceeds
``threshold`` (default 2) posterior sds. Why 2: when the posterior describes its own
uncertainty, dropping a fraction :math:`f` of consistent data moves a posterior mean by about
:math:`\sqrt{f/(1-f)}` of its sd (0.5 sd at :math:`f = 0.2`), a bootstrap or a fresh draw of
the measurement noise (``jitter``) by about 1 sd, and the optimiser adds 0.1-0.5 sd RMS
(``seed``; ``tests/model/test_properties.py``), so a job's RMS move stays near
:math:`\sqrt{1 + 0.5^2} \approx 1.1` sd even under a bootstrap. Twice that, in the median of
the replicates, says the job's predictions move more than their intervals admit: they rest on
a few measurements, or on measurements that disagree. The RMS, not the largest move, makes the
rule independent of how many queries a job takes part in.

Latents are reported (per replicate their median and largest move, per job the largest) but
do not flag: they are not identified one by one (a demand and an intensity trade off; without
counters a demand is pinned only through speeds), and the mean-field guide gives each a
posterior sd far smaller than the spread of its optimum. On Gavel's V100 data, a second fit
seed moved latents by up to 54 of their sds while predictions moved by a median 0.5 sd.

A held-out coverage of ``h`` co-located runs has a binomial sd of :math:`\sqrt{0.09/h}` at 90%
(runs, not rows: the rows of one run share its conditions); a perturbation *keeps coverage*
when its median coverage is at least the reference's minus two such sds. The fit is
**stable** when no job is flagged and every perturbation keeps coverage.

Why a job is flagged, and what to do: *too few runs* when it takes part in fewer than
:data:`MIN_RUNS` co-located runs (its sensitivity and intensity then rest on the prior and a
run or two); *contradictory measurements* when repeated measurements of one co-location
differ by more than 3 noise sds (:math:`3\sqrt2\,\hat\sigma_v` in log speed) or one of its
measured speeds lies more than 3 predictive sds from the reference's prediction; otherwise
*moves beyond its posterior sd* under the worst perturbation: its posterior sds understate
how much its answers depend on the data (the mean-field guide can do that). The
suggestion is the pair involving the job (either way round) with the largest posterior sd of
the speed: measuring it is what the posterior says would teach the most.

>>> from interplace.datasets import synthetic
>>> rep = stability(synthetic(3, seed=0, samples_per_run=3), perturbations=("seed",), n=1,
...                 steps=60, workers=1)
>>> [(r.perturbation, r.replicate) for r in rep.replicates]
[('seed', 0)]
>>> rep.summary().splitlines()[0]  # doctest: +ELLIPSIS
'interplace stability: synthetic...: 2 fits (reference + 1 perturbation x 1), 60 steps, seed 0'
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from interplace._parallel import spawn_map
from interplace._plot import plain_text
from interplace.datasets.runs import CoLocationData
from interplace.errors import (
    SEED_LIMIT,
    InputError,
    atomic_write,
    check_count,
    check_seed,
    is_real,
    prepare_output_dir,
)
from interplace.model._data import FamilySpec, select_mode
from interplace.model._evaluate import colocated_rows, holdout_split, row_queries, score
from interplace.model._fit import fit
from interplace.model._fitted import InterferenceModel, Query, SpeedPosterior
from interplace.model._net import sensitivity
from interplace.topology import Topology

__all__ = [
    "MIN_RUNS",
    "PERTURBATIONS",
    "JobStability",
    "Replicate",
    "StabilityReport",
    "stability",
]

PERTURBATIONS: tuple[str, ...] = (
    "drop_samples",
    "drop_runs",
    "duplicate_runs",
    "bootstrap_runs",
    "jitter",
    "relabel",
    "seed",
)
"""The perturbations of :func:`stability`, in report order (each is described there)."""

MIN_RUNS = 3
"""A flagged job in fewer co-located runs than this is annotated "too few runs"."""

LATENTS: tuple[str, ...] = ("log_demand", "log_sensitivity", "log_intensity", "iso_bias")
"""The per-job latents compared (the first three per resource)."""

_COVER_SE = 2.0  # coverage may fall by this many binomial sds before it counts as lost
_RESIDUAL_Z = 3.0  # a measured speed this many predictive sds off is contradictory


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Replicate:
    """One refit: its perturbation, replicate number and how far its answers moved.

    ``*_z_median`` / ``*_z_max``: median and largest :math:`|z|` over the query set
    (``prediction``) or over every job's latents (``latent``); ``coverage_90`` and
    ``still_covered`` on the held-out rows (None without a holdout, or when the reference
    covered none); ``job_z``: each job's RMS :math:`|z|` over the predictions it takes part
    in (what flags a job); ``job_latent_z``: its largest latent :math:`|z|` (for information);
    ``detail``: what was done.
    """

    perturbation: str
    replicate: int
    detail: str
    prediction_z_median: float
    prediction_z_max: float
    latent_z_median: float
    latent_z_max: float
    coverage_90: float | None
    still_covered: float | None
    fit_steps: int
    job_z: Mapping[str, float]
    job_latent_z: Mapping[str, float]

    def __post_init__(self) -> None:
        if self.perturbation not in PERTURBATIONS:
            raise InputError(f"unknown perturbation {self.perturbation!r}")
        if self.replicate < 0:
            raise InputError(f"replicate must be >= 0, not {self.replicate}")


@dataclass(frozen=True)
class JobStability:
    """One job's verdict: its worst move (the median over replicates of the RMS move of its
    predictions, in posterior sds), under which perturbation, whether it is flagged and why,
    and which pair to measure next.

    ``worst_latent_z``: the median over replicates of its largest latent move, under the
    perturbation where that is largest (for information; latents do not flag);
    ``residual_z``: the largest standardised residual of its measured speeds against the
    reference's predictive (None: no measured co-located speed); ``suggestion``: the pair
    ``(job, co_runner)`` with the largest posterior sd of the speed involving the job, and
    that sd.
    """

    job: str
    worst_z: float
    worst_perturbation: str
    worst_latent_z: float
    flagged: bool
    reasons: tuple[str, ...]
    co_located_runs: int
    residual_z: float | None
    suggestion: tuple[str, str] | None
    suggestion_sd: float | None


@dataclass(frozen=True)
class StabilityReport:
    """What :func:`stability` found; :meth:`summary`, :meth:`to_json` and :meth:`plot` show it.

    ``reference``: the reference fit (jobs, queries, held-out rows, coverage, fitted speed
    noise); ``replicates``: one :class:`Replicate` per refit, in perturbation then replicate
    order; ``jobs``: one :class:`JobStability` per job, flagged ones first.
    """

    data: str
    perturbations: tuple[str, ...]
    n: int
    seed: int
    steps: int
    threshold: float
    reference: Mapping[str, Any]
    replicates: tuple[Replicate, ...]
    jobs: tuple[JobStability, ...]
    coverage_kept: Mapping[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.threshold) and self.threshold > 0):
            raise InputError(f"threshold must be a finite number > 0, not {self.threshold!r}")

    @property
    def flagged(self) -> tuple[str, ...]:
        """The flagged jobs."""
        return tuple(j.job for j in self.jobs if j.flagged)

    @property
    def stable(self) -> bool:
        """No job flagged and every perturbation keeps held-out coverage (module docstring)."""
        return not self.flagged and all(self.coverage_kept.values())

    def by_perturbation(self) -> dict[str, dict[str, float | None]]:
        """Per perturbation: the median over replicates of each replicate's median ``|z|``,
        the largest ``|z|`` of any replicate, and the median coverage figures."""
        out: dict[str, dict[str, float | None]] = {}
        for p in self.perturbations:
            reps = [r for r in self.replicates if r.perturbation == p]
            if not reps:
                continue
            cov = [r.coverage_90 for r in reps if r.coverage_90 is not None]
            still = [r.still_covered for r in reps if r.still_covered is not None]
            out[p] = {
                "prediction_z_median": float(np.median([r.prediction_z_median for r in reps])),
                "prediction_z_max": max(r.prediction_z_max for r in reps),
                "latent_z_median": float(np.median([r.latent_z_median for r in reps])),
                "latent_z_max": max(r.latent_z_max for r in reps),
                "coverage_90": float(np.median(cov)) if cov else None,
                "still_covered": float(np.median(still)) if still else None,
            }
        return out

    def summary(self) -> str:
        """A one-screen text summary: the table per perturbation, the verdict, flagged jobs."""
        ref = self.reference
        k = len(self.perturbations)
        lines = [
            f"interplace stability: {self.data}: {len(self.replicates) + 1} fits (reference + "
            f"{k} perturbation{'s' * (k != 1)} x {self.n}), {self.steps} steps, seed {self.seed}",
            f"reference: {len(ref['jobs'])} jobs, {ref['queries']} queries, "
            f"{ref['holdout_rows']} held-out rows, 90% coverage {_fmt(ref['coverage_90'])}, "
            f"speed noise {ref['speed_noise']:.3f}",
            "moves in reference posterior sds (|z|): median of replicate medians / largest",
            f"{'perturbation':<16}{'predictions':>15}{'latents (info)':>16}{'coverage':>10}"
            f"{'still':>7}",
        ]
        for p, row in self.by_perturbation().items():
            pred = f"{row['prediction_z_median']:.2f} / {row['prediction_z_max']:.2f}"
            lat = f"{row['latent_z_median']:.2f} / {row['latent_z_max']:.2f}"
            kept = "" if self.coverage_kept.get(p, True) else " !"
            lines.append(
                f"{p:<16}{pred:>15}{lat:>16}{_fmt(row['coverage_90']):>10}"
                f"{_fmt(row['still_covered']):>7}{kept}"
            )
        flagged = [j for j in self.jobs if j.flagged]
        lost = [p for p, ok in self.coverage_kept.items() if not ok]
        verdict = "STABLE" if self.stable else "UNSTABLE"
        lines.append(
            f"verdict: {verdict}: {len(flagged)} of {len(self.jobs)} jobs flagged (RMS "
            f"prediction move > {self.threshold:g} sd under some perturbation)"
            + (f"; coverage lost under {', '.join(lost)}" if lost else "")
        )
        shown = flagged[:8]
        for j in shown:
            why = "; ".join(j.reasons)
            nxt = (
                ""
                if j.suggestion is None
                else f"; measure {j.suggestion[0]} next to {j.suggestion[1]} "
                f"(posterior sd {j.suggestion_sd:.3f})"
            )
            lines.append(f"  {j.job}: {j.worst_z:.1f} sd under {j.worst_perturbation}; {why}{nxt}")
        if len(flagged) > len(shown):
            lines.append(f"  ... and {len(flagged) - len(shown)} more (see the JSON report)")
        if not flagged:
            worst = max(self.jobs, key=lambda j: j.worst_z)
            lines.append(
                f"  most moved: {worst.job}, {worst.worst_z:.2f} sd (RMS) under "
                f"{worst.worst_perturbation}"
            )
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON-ready data (with ``stable``, ``flagged`` and the table)."""
        out = asdict(self)
        out["stable"] = self.stable
        out["flagged"] = list(self.flagged)
        out["by_perturbation"] = self.by_perturbation()
        return cast("dict[str, Any]", _jsonable(out))

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON text (ends with a newline)."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"

    @plain_text
    def plot(self, directory: str | os.PathLike[str]) -> list[Path]:
        """Write ``stability_moves.png`` (each refit's median and largest ``|z|`` per
        perturbation) and ``stability_jobs.png`` (each job's move per perturbation, the
        threshold marked) into ``directory`` (created with its parents); returns their
        paths."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        out = prepare_output_dir(directory, "plot directory")
        perts = [p for p in self.perturbations if any(r.perturbation == p for r in self.replicates)]
        paths = [out / "stability_moves.png", out / "stability_jobs.png"]

        fig = Figure(figsize=(9, 4.5))
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, 2, sharey=True)
        for ax, kind in zip(axes, ("prediction", "latent"), strict=True):
            for i, p in enumerate(perts):
                reps = [r for r in self.replicates if r.perturbation == p]
                med = [getattr(r, f"{kind}_z_median") for r in reps]
                big = [getattr(r, f"{kind}_z_max") for r in reps]
                ax.scatter(
                    [i - 0.1] * len(med), med, color="C0", s=18, label="median" if i == 0 else None
                )
                ax.scatter(
                    [i + 0.1] * len(big),
                    big,
                    color="C3",
                    marker="^",
                    s=18,
                    label="largest" if i == 0 else None,
                )
            ax.axhline(
                self.threshold, color="0.4", lw=1, ls="--", label=f"threshold {self.threshold:g} sd"
            )
            ax.set_xticks(range(len(perts)))
            ax.set_xticklabels(perts, rotation=35, ha="right", fontsize=8)
            ax.set_title(f"{kind}s", fontsize=10)
            ax.set_yscale("symlog", linthresh=1.0)
        axes[0].set_ylabel("|move| / reference posterior sd")
        axes[0].legend(fontsize=8, loc="upper left")
        fig.suptitle(f"{self.data}: how far refits move", fontsize=10)
        fig.tight_layout()
        with atomic_write(paths[0], "wb") as fh:
            fig.savefig(fh, format="png", dpi=100)

        jobs = [j.job for j in self.jobs]
        grid = np.zeros((len(jobs), len(perts)))
        for a, job in enumerate(jobs):
            for b, p in enumerate(perts):
                vals = [r.job_z[job] for r in self.replicates if r.perturbation == p]
                grid[a, b] = float(np.median(vals))
        fig = Figure(figsize=(1.2 * len(perts) + 3, 0.28 * len(jobs) + 2))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        im = ax.imshow(
            grid,
            aspect="auto",
            cmap="viridis",
            vmin=0,
            vmax=max(2 * self.threshold, float(grid.max())),
        )
        for a, b in zip(*np.nonzero(grid > self.threshold), strict=True):
            ax.text(b, a, "x", ha="center", va="center", color="red", fontsize=8)
        ax.set_xticks(range(len(perts)))
        ax.set_xticklabels(perts, rotation=35, ha="right", fontsize=8)
        ax.set_yticks(range(len(jobs)))
        ax.set_yticklabels(jobs, fontsize=7)
        fig.colorbar(im, ax=ax, label="RMS |z| (median of replicates)")
        ax.set_title(
            f"RMS move of each job's predictions (x: above {self.threshold:g} sd)", fontsize=10
        )
        fig.tight_layout()
        with atomic_write(paths[1], "wb") as fh:
            fig.savefig(fh, format="png", dpi=100)
        return paths


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ------------------------------------------------------------------------ perturbations


def _positions(frame: pd.DataFrame) -> dict[str, np.ndarray[Any, Any]]:
    ids = frame["run_id"].astype(str)
    groups = ids.groupby(ids, sort=False).indices
    return {str(k): np.asarray(v, dtype=np.int64) for k, v in groups.items()}


def _copies(data: CoLocationData, counts: Mapping[str, int], tag: str) -> CoLocationData:
    """``data`` with run ``r`` present ``counts[r]`` times (default once); copy ``k >= 1``
    gets the run id ``r#<tag><k>`` (made unique), with its samples. Rows come grouped by run,
    in the order of the runs' first rows."""
    taken = set(data.runs["run_id"].astype(str))
    run_pos = _positions(data.runs)
    samp_pos = {} if data.samples is None else _positions(data.samples)
    empty = np.zeros(0, dtype=np.int64)
    rows: list[np.ndarray[Any, Any]] = []
    row_ids: list[str] = []
    srows: list[np.ndarray[Any, Any]] = []
    srow_ids: list[str] = []
    for rid in dict.fromkeys(data.runs["run_id"].astype(str)):
        for k in range(counts.get(rid, 1)):
            new = rid
            if k >= 1:
                new = f"{rid}#{tag}{k}"
                while new in taken:
                    new += "'"
                taken.add(new)
            rows.append(run_pos[rid])
            row_ids += [new] * len(run_pos[rid])
            got = samp_pos.get(rid, empty)
            srows.append(got)
            srow_ids += [new] * len(got)
    runs = data.runs.iloc[np.concatenate(rows)].assign(run_id=row_ids).reset_index(drop=True)
    samples = None
    if data.samples is not None:
        picked = data.samples.iloc[np.concatenate([empty, *srows])]
        samples = picked.assign(run_id=srow_ids).reset_index(drop=True)
    return CoLocationData(runs, samples, data.name)


def _colocated_ids(data: CoLocationData) -> list[str]:
    size = data.run_sizes()
    return [str(r) for r in size.index[size >= 2]]


def _isolated_runs(data: CoLocationData) -> dict[str, list[str]]:
    """Each job's isolated run ids, in runs-table order."""
    size = data.run_sizes()
    alone = data.runs.loc[data.runs["run_id"].map(size).eq(1)]
    out: dict[str, list[str]] = {}
    for job, rid in zip(alone["job"].astype(str), alone["run_id"].astype(str), strict=True):
        out.setdefault(job, []).append(rid)
    return out


def _droppable(data: CoLocationData) -> list[str]:
    """Runs whose loss alone keeps the data valid: co-located ones, and the isolated runs of
    jobs with more than one (in runs-table order); ``drop_runs`` keeps one of those per job."""
    size = data.run_sizes()
    spare = {r for alone in _isolated_runs(data).values() if len(alone) > 1 for r in alone}
    return [str(r) for r in size.index if size[r] >= 2 or str(r) in spare]


def _perturb(
    kind: str,
    data: CoLocationData,
    rng: np.random.Generator,
    fraction: float,
    noise: float,
) -> tuple[CoLocationData, dict[str, str] | None, str]:
    """The perturbed data, the job renaming (``relabel`` only) and a description."""
    if kind == "drop_samples":
        s = data.samples
        assert s is not None  # checked by the caller
        keep = rng.random(len(s)) >= fraction
        fewer = s.loc[keep].reset_index(drop=True)
        return (
            CoLocationData(data.runs, fewer, data.name),
            None,
            f"dropped {len(s) - int(keep.sum())} of {len(s)} samples",
        )
    if kind == "drop_runs":
        cand = _droppable(data)
        coloc = set(_colocated_ids(data))
        k = min(max(1, round(fraction * len(cand))), len(cand))
        chosen = rng.permutation(cand)[:k].tolist()
        if coloc and coloc <= set(chosen):  # keep one co-located run
            chosen.remove(next(r for r in chosen if r in coloc))
        drop = set(chosen)
        for runs_alone in _isolated_runs(data).values():  # and one isolated run of each job
            if set(runs_alone) <= drop:
                drop.discard(runs_alone[0])
        keep_ids = [r for r in dict.fromkeys(data.runs["run_id"].astype(str)) if r not in drop]
        counts = {r: 0 for r in drop}
        out = _copies(data, counts, "x")
        return out, None, f"dropped {len(drop)} of {len(keep_ids) + len(drop)} runs"
    if kind == "duplicate_runs":
        ids = list(dict.fromkeys(data.runs["run_id"].astype(str)))
        k = max(1, round(fraction * len(ids)))
        chosen = rng.permutation(ids)[:k].tolist()
        return (
            _copies(data, dict.fromkeys(chosen, 2), "dup"),
            None,
            f"duplicated {k} of {len(ids)} runs",
        )
    if kind == "bootstrap_runs":
        pool = _colocated_ids(data)
        picks = rng.integers(0, len(pool), size=len(pool))
        counts = dict.fromkeys(pool, 0)
        for i in picks.tolist():
            counts[pool[i]] += 1
        distinct = sum(1 for c in counts.values() if c > 0)
        return (
            _copies(data, counts, "boot"),
            None,
            f"resampled {len(pool)} co-located runs ({distinct} distinct)",
        )
    if kind == "jitter":
        eps = rng.normal(0.0, noise, size=len(data.runs))
        runs = data.runs.assign(throughput=data.runs["throughput"].to_numpy(float) * np.exp(eps))
        return (
            CoLocationData(runs, data.samples, data.name),
            None,
            f"throughputs times exp(N(0, {noise:.3f}^2))",
        )
    if kind == "relabel":
        jobs = sorted(data.runs["job"].astype(str).unique().tolist())
        perm = rng.permutation(len(jobs))
        width = len(str(len(jobs)))
        mapping = {j: f"r{int(perm[i]):0{width}d}" for i, j in enumerate(jobs)}
        runs = data.runs.assign(job=data.runs["job"].astype(str).map(mapping))
        runs = runs.iloc[rng.permutation(len(runs))].reset_index(drop=True)
        s = data.samples
        if s is not None:
            s = s.iloc[rng.permutation(len(s))].reset_index(drop=True)
        return (
            CoLocationData(runs, s, data.name),
            mapping,
            "rows permuted, jobs renamed in another order",
        )
    raise InputError(f"unknown perturbation {kind!r}")  # pragma: no cover - checked earlier


# ---------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class _Task:
    data: CoLocationData
    seed: int
    steps: int
    family: FamilySpec | None
    topology: Topology | None


def _fit_task(task: _Task) -> InterferenceModel:
    """One fit (a module-level function, so that a spawned worker process can run it)."""
    return fit(
        task.data,
        seed=task.seed,
        steps=task.steps,
        min_steps=min(600, task.steps),
        family=task.family,
        topology=task.topology,
    )


def _run_all(tasks: Sequence[_Task], workers: int, progress: bool) -> list[InterferenceModel]:
    bar = tqdm(total=len(tasks), desc="stability", unit="fit", disable=not progress, leave=False)
    try:
        return spawn_map(_fit_task, tasks, workers, done=lambda: bar.update(1))
    finally:
        bar.close()


# --------------------------------------------------------------------------- measuring


def _latents(model: InterferenceModel, num_samples: int) -> torch.Tensor:
    """Draws of every job's latents, ``(S, J, 3R + 1)``: log demand, log sensitivity, log
    intensity per resource, then ``iso_bias``."""
    d = model.draws(num_samples, seed=0)
    log_sens = sensitivity(
        d["log_demand"], d["sens_eps"], d["sens_loc"], d["sens_slope"], d["sens_scale"]
    ).log()
    return torch.cat(
        [d["log_demand"], log_sens, d["log_intensity"], d["iso_bias"].unsqueeze(-1)], dim=-1
    )


def _map_queries(queries: Iterable[Query], mapping: Mapping[str, str] | None) -> list[Query]:
    if mapping is None:
        return list(queries)
    return [
        Query(mapping[q.job], tuple(mapping[c] for c in q.co_runners), q.shares) for q in queries
    ]


def _unique_queries(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` less repeats of a query: the same jobs (on the same devices, where placed)."""
    placed = ["device", "co_devices"] if "co_devices" in rows.columns else []
    return rows.drop_duplicates(["job", "co_runners", *placed]).reset_index(drop=True)


def _covered(post: SpeedPosterior, test: pd.DataFrame) -> np.ndarray[Any, Any]:
    y = test["speed"].to_numpy(dtype=float)
    return (y >= post.q05) & (y <= post.q95)


def _check_options(
    perturbations: Sequence[str] | None,
    data: CoLocationData,
    n: int,
    seed: int,
    steps: int,
    fraction: float,
    threshold: float,
    num_samples: int,
    holdout_frac: float | None,
    workers: int | None,
) -> tuple[str, ...]:
    for name, value, low in (
        ("n", n, 1),
        ("seed", seed, 0),
        ("steps", steps, 1),
        ("num_samples", num_samples, 10),
    ):
        check_count(value, name, low=low)
    check_seed(seed)
    if workers is not None:
        check_count(workers, "workers")
    if not (is_real(fraction) and 0 < fraction < 1):
        raise InputError(f"fraction must be in (0, 1), not {fraction!r}")
    if not (is_real(threshold) and threshold > 0):
        raise InputError(f"threshold must be a finite number > 0, not {threshold!r}")
    if holdout_frac is not None and not (is_real(holdout_frac) and 0 < holdout_frac < 1):
        raise InputError(f"holdout fraction must be in (0, 1), not {holdout_frac!r}")
    if perturbations is None:
        chosen = tuple(
            p for p in PERTURBATIONS if not (p == "drop_samples" and data.samples is None)
        )
    else:
        if isinstance(perturbations, str):
            raise InputError("perturbations must be a sequence of names, not a string")
        chosen = tuple(perturbations)
        if not chosen:
            raise InputError("no perturbation chosen")
        for p in chosen:
            if p not in PERTURBATIONS:
                raise InputError(f"unknown perturbation {p!r} (known: {', '.join(PERTURBATIONS)})")
        if len(set(chosen)) != len(chosen):
            raise InputError(f"perturbations repeat a name: {', '.join(chosen)}")
        if "drop_samples" in chosen and data.samples is None:
            raise InputError(f"{data.name}: drop_samples needs counter samples, and there are none")
        chosen = tuple(p for p in PERTURBATIONS if p in chosen)
    if ("drop_runs" in chosen or "bootstrap_runs" in chosen) and not _colocated_ids(data):
        raise InputError(f"{data.name}: dropping or bootstrapping runs needs co-located runs")
    return chosen


def stability(
    data: CoLocationData,
    *,
    perturbations: Sequence[str] | None = None,
    n: int = 3,
    seed: int = 0,
    family: FamilySpec | None = None,
    steps: int = 3000,
    progress: bool = False,
    workers: int | None = None,
    mode: str | None = None,
    topology: Topology | None = None,
    fraction: float = 0.2,
    holdout_frac: float | None = 0.2,
    threshold: float = 2.0,
    num_samples: int = 1000,
) -> StabilityReport:
    """Refit ``data`` under seeded perturbations and report how far the answers move.

    ``perturbations``: names of :data:`PERTURBATIONS` (default: all, less ``drop_samples``
    when there are no samples), each refitted ``n`` times; replicate ``k`` of perturbation
    ``p`` draws from ``np.random.default_rng([seed, i_p, k])`` with ``i_p`` its position in
    :data:`PERTURBATIONS`, so choosing fewer perturbations changes none of the others. Every
    fit uses ``seed`` (``seed + 1 + k``, modulo :math:`2^{63}`, for the ``seed`` perturbation),
    at most ``steps`` steps (``min_steps = min(600, steps)``), ``family`` and ``topology`` as
    :func:`fit` does;
    ``mode`` selects one sharing mode first. ``fraction`` is the share dropped or duplicated;
    ``holdout_frac`` the share of co-located runs held out (seeded by ``seed``) to measure
    coverage (None: fit on all, no coverage); ``threshold`` the flag level in posterior sds;
    ``num_samples`` the posterior draws behind every mean and sd (Monte Carlo error of a
    mean: ``sd / sqrt(num_samples)``, 0.03 sd at 1000).

    The refits run in ``workers`` processes (spawned; default ``min(cpu_count, fits)``); with
    ``workers=1`` everything runs in this process. ``progress`` shows a tqdm bar of fits.
    The meaning of the figures and of "stable" is in :mod:`interplace.model._stability`.
    """
    if not isinstance(data, CoLocationData):
        raise InputError(f"stability needs CoLocationData, not {type(data).__name__}")
    data = select_mode(data, mode)
    chosen = _check_options(
        perturbations,
        data,
        n,
        seed,
        steps,
        fraction,
        threshold,
        num_samples,
        holdout_frac,
        workers,
    )
    if holdout_frac is not None:
        if len(_colocated_ids(data)) < 2:  # no coverage to keep: "STABLE" would say nothing
            raise InputError(f"{data.name}: needs at least two co-located runs to hold some out "
                             "and measure coverage (holdout_frac=None checks without it)")
        train, test = holdout_split(data, holdout_frac=holdout_frac, seed=seed)
    else:
        train = data
        test = colocated_rows(data).iloc[0:0]
    if "bootstrap_runs" in chosen and not _colocated_ids(train):
        raise InputError(f"{data.name}: no co-located run left to bootstrap after the holdout")

    def task(d: CoLocationData, s: int) -> _Task:
        return _Task(d, s, steps, family, topology)

    reference = _run_all([task(train, seed)], 1, False)[0]
    noise = reference.speed_noise()

    plan: list[tuple[str, int, str, dict[str, str] | None]] = []
    tasks: list[_Task] = []
    for p in chosen:
        for k in range(n):
            if p == "seed":
                other = (seed + 1 + k) % SEED_LIMIT  # a seed, however close to the limit
                plan.append((p, k, f"fit seed {other}", None))
                tasks.append(task(train, other))
                continue
            rng = np.random.default_rng([seed, PERTURBATIONS.index(p), k])
            d, mapping, detail = _perturb(p, train, rng, fraction, noise)
            fam = family
            if mapping is not None and family is not None and not isinstance(family, str):
                given = family.to_dict() if isinstance(family, pd.Series) else dict(family)
                fam = {mapping.get(str(j), str(j)): f for j, f in given.items()}
            plan.append((p, k, detail, mapping))
            tasks.append(_Task(d, seed, steps, fam, topology))
    n_workers = min(os.cpu_count() or 1, len(tasks)) if workers is None else workers
    models = _run_all(tasks, n_workers, progress)

    jobs = reference.jobs
    measured = _unique_queries(colocated_rows(train))
    held = _unique_queries(test)
    qrows = _unique_queries(pd.concat([measured, held], ignore_index=True))
    # what co-runners on other devices share (row_queries)
    queries = row_queries(qrows, topology=topology, resources=reference.resources)
    # A job in no measured or held-out co-location gets its pairs with every job, so that
    # every job's move is measured on predictions.
    present = {n for q in queries for n in (q.job, *q.co_runners)}
    for j in jobs:
        if j not in present:
            queries += [Query(j, (c,)) for c in jobs]
    involves = np.array(
        [[q.job == j or j in q.co_runners for q in queries] for j in jobs], dtype=bool
    ).reshape(len(jobs), len(queries))
    ref_pred = reference.posterior_speed(queries, num_samples=num_samples, seed=0)
    ref_mean, ref_sd = ref_pred.mean, np.maximum(ref_pred.sd, 1e-12)
    ref_lat = _latents(reference, num_samples)
    lat_mean, lat_sd = ref_lat.mean(0).numpy(), ref_lat.std(0).clamp_min(1e-12).numpy()
    test_queries = row_queries(test, topology=topology, resources=reference.resources)
    ref_cover = None
    ref_covered = np.zeros(0, dtype=bool)
    if len(test):
        ref_test = reference.posterior_speed(test_queries, num_samples=num_samples, seed=0)
        ref_cover = score(reference, test, posterior=ref_test)["coverage_90"]
        ref_covered = _covered(ref_test, test)

    replicates = []
    for (p, k, detail, mapping), model in zip(plan, models, strict=True):
        post = model.posterior_speed(_map_queries(queries, mapping), num_samples=num_samples)
        zp = np.abs(post.mean - ref_mean) / ref_sd
        lat = _latents(model, num_samples)
        order = [model.jobs.index(mapping[j] if mapping else j) for j in jobs]
        zl = np.abs(lat.mean(0).numpy()[order] - lat_mean) / lat_sd
        job_z = {j: float(np.sqrt(np.mean(zp[involves[a]] ** 2))) for a, j in enumerate(jobs)}
        job_latent_z = {j: float(zl[a].max()) for a, j in enumerate(jobs)}
        cover = still = None
        if len(test):
            tpost = model.posterior_speed(
                _map_queries(test_queries, mapping), num_samples=num_samples
            )
            cover = float(score(model, test, posterior=tpost)["coverage_90"])
            if ref_covered.any():
                still = float(_covered(tpost, test)[ref_covered].mean())
        replicates.append(
            Replicate(
                perturbation=p,
                replicate=k,
                detail=detail,
                prediction_z_median=float(np.median(zp)) if zp.size else 0.0,
                prediction_z_max=float(zp.max()) if zp.size else 0.0,
                latent_z_median=float(np.median(zl)),
                latent_z_max=float(zl.max()),
                coverage_90=cover,
                still_covered=still,
                fit_steps=int(model.info["steps"]),
                job_z=job_z,
                job_latent_z=job_latent_z,
            )
        )

    coverage_kept: dict[str, bool] = {}
    if ref_cover is not None:
        floor = ref_cover - _COVER_SE * math.sqrt(0.09 / test["run_id"].nunique())
        for p in chosen:
            cov = [r.coverage_90 for r in replicates if r.perturbation == p]
            coverage_kept[p] = float(np.median([c for c in cov if c is not None])) >= floor

    job_reports = _judge_jobs(reference, train, replicates, chosen, threshold, noise, num_samples,
                              topology)
    ref_info = {
        "jobs": list(jobs),
        "queries": len(queries),
        "measured_queries": len(measured),
        "holdout_rows": len(test),
        "holdout_runs": int(test["run_id"].nunique()) if len(test) else 0,
        "coverage_90": ref_cover,
        "speed_noise": noise,
        "fit_steps": int(reference.info["steps"]),
        "fraction": fraction,
        "num_samples": num_samples,
        "details": {f"{p}/{k}": detail for p, k, detail, _ in plan},
    }
    return StabilityReport(
        data=data.name,
        perturbations=chosen,
        n=n,
        seed=seed,
        steps=steps,
        threshold=float(threshold),
        reference=ref_info,
        replicates=tuple(replicates),
        jobs=job_reports,
        coverage_kept=coverage_kept,
    )


def _judge_jobs(
    reference: InterferenceModel,
    train: CoLocationData,
    replicates: Sequence[Replicate],
    chosen: Sequence[str],
    threshold: float,
    noise: float,
    num_samples: int,
    topology: Topology | None = None,
) -> tuple[JobStability, ...]:
    """Flag, annotate and give a next measurement for every job (module docstring)."""
    jobs = reference.jobs
    rows = colocated_rows(train)
    runs_of = {j: 0 for j in jobs}
    for _rid, group in rows.groupby("run_id"):
        for j in set(group["job"].astype(str)):
            runs_of[j] += 1
    # Residuals of every measured speed against the reference's predictive of a new
    # measurement, on the log scale: (log y - mean) / sd of log measured.
    resid: dict[str, float] = {}
    if len(rows):
        queries = row_queries(rows, topology=topology, resources=reference.resources)
        post = reference.posterior_speed(queries, num_samples=num_samples, seed=0)
        log_m = post.measured.log()
        r = (np.log(rows["speed"].to_numpy(float)) - log_m.mean(0).numpy()) / log_m.std(
            0
        ).clamp_min(1e-12).numpy()
        for j, v in zip(rows["job"].astype(str), np.abs(r), strict=True):
            resid[j] = max(resid.get(j, 0.0), float(v))
    # Repeated measurements of one co-location that disagree beyond the noise.
    spread: dict[str, float] = {}
    logs = rows.assign(log_speed=np.log(rows["speed"].to_numpy(float)))
    for key, g in logs.groupby(["job", "co_runners"]):
        if len(g) >= 2:
            j = str(cast("tuple[str, str]", key)[0])
            gap = float(g["log_speed"].max() - g["log_speed"].min())
            spread[j] = max(spread.get(j, 0.0), gap / (math.sqrt(2) * noise))
    # The most uncertain pair of each job, either way round.
    pairs = [Query(a, (b,)) for a in jobs for b in jobs]
    sd = reference.posterior_speed(pairs, num_samples=num_samples, seed=0).sd.reshape(
        len(jobs), len(jobs)
    )
    out = []
    for a, j in enumerate(jobs):
        moves = {
            p: float(np.median([r.job_z[j] for r in replicates if r.perturbation == p]))
            for p in chosen
        }
        worst = max(moves, key=lambda p: moves[p])
        flagged = moves[worst] > threshold
        latent = {
            p: float(np.median([r.job_latent_z[j] for r in replicates if r.perturbation == p]))
            for p in chosen
        }
        reasons: list[str] = []
        if flagged:
            if runs_of[j] < MIN_RUNS:
                reasons.append(f"too few runs ({runs_of[j]} co-located)")
            why = []
            if resid.get(j, 0.0) > _RESIDUAL_Z:
                why.append(f"a measured speed {resid[j]:.1f} predictive sd off the fit")
            if spread.get(j, 0.0) > _RESIDUAL_Z:
                why.append(f"repeats {spread[j]:.1f} noise sd apart")
            if why:
                reasons.append(f"contradictory measurements ({', '.join(why)})")
            if not reasons:
                reasons.append(f"moves beyond its posterior sd under {worst}")
        both = np.maximum(sd[a, :], sd[:, a])
        b = int(np.argmax(both))
        first, second = (j, jobs[b]) if sd[a, b] >= sd[b, a] else (jobs[b], j)
        out.append(
            JobStability(
                job=j,
                worst_z=moves[worst],
                worst_perturbation=worst,
                worst_latent_z=max(latent.values()),
                flagged=flagged,
                reasons=tuple(reasons),
                co_located_runs=runs_of[j],
                residual_z=resid.get(j),
                suggestion=(first, second),
                suggestion_sd=float(both[b]),
            )
        )
    out.sort(key=lambda s: (not s.flagged, -s.worst_z, s.job))
    return tuple(out)
