"""Workloads for the simulator: jobs with arrival times, GPU counts, work and a measured type.

A :class:`SimJob` keeps what a trace says of a job (arrival, GPUs, isolated duration, which is
its *work*: the seconds it needs at speed 1) and gets a job type with measured co-location
speeds by a seeded assignment (:func:`assign_types`): each job independently, uniformly over the
ground truth's job types that can run (for a multi-GPU job, over those with a measured
scale-out throughput at that GPU count when the truth has such a table). Traces:

- :func:`from_trace`: the first ``n`` jobs of a :class:`~interplace.datasets.JobTrace`
  (Philly-derived, Alibaba's GPU-sharing pods) with a known duration and 1 to ``max_gpus``
  GPUs (fractional GPU requests round up), arrivals measured from the first and divided by
  ``load`` (``load=2``: twice the arrival rate). A job's duration is its work, so a trace
  without durations (:func:`~interplace.datasets.load_venus`: arrival counts only) yields no
  job; none is invented;
- :func:`synthetic`: Poisson arrivals at ``rate`` jobs per hour; GPU counts 1, 2, 4, 8 with
  probabilities 0.7, 0.1, 0.1, 0.1; durations log-normal with a median of 30 minutes and
  :math:`\\sigma = 1` (so the mean is 49.5 minutes), clipped to [1 min, 24 h].
- :func:`packaged_philly`: a packaged excerpt of the Philly-derived trace (first 2,000 jobs of
  Chronus' ``trace_job_Philly_MIX1.csv``, MIT; ``interplace/data/philly/``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from interplace.datasets import JobTrace
from interplace.errors import InputError, is_int

__all__ = [
    "SimJob",
    "assign_types",
    "from_trace",
    "packaged_philly",
    "synthetic",
]

_PHILLY = Path(__file__).resolve().parents[1] / "data" / "philly" / "philly_mix1_head2000.csv"


@dataclass(frozen=True)
class SimJob:
    """One job of a simulation: ``work_s`` is its run time alone (at speed 1).

    >>> SimJob("a", 0.0, 1, 60.0, "resnet").gpus
    1
    """

    job_id: str
    arrival_s: float
    gpus: int
    work_s: float
    job_type: str = ""

    def __post_init__(self) -> None:
        if not self.job_id:
            raise InputError("a job needs an id")
        if not (math.isfinite(self.arrival_s) and self.arrival_s >= 0):
            raise InputError(f"job {self.job_id}: arrival must be finite and >= 0")
        if not is_int(self.gpus, 1):
            raise InputError(f"job {self.job_id}: gpus must be an integer >= 1")
        if not (math.isfinite(self.work_s) and self.work_s > 0):
            raise InputError(f"job {self.job_id}: work must be finite and > 0")


def from_trace(
    trace: JobTrace,
    n_jobs: int,
    *,
    load: float = 1.0,
    max_gpus: int = 8,
    what: str | None = None,
) -> list[SimJob]:
    """The first ``n_jobs`` usable jobs of ``trace`` (module docstring), untyped; too few is an
    :class:`~interplace.errors.InputError` naming ``what`` (the trace's file, say; default:
    the trace's name).

    >>> import pandas as pd
    >>> table = pd.DataFrame({"job_id": ["a", "b", "c"], "submit_s": [10.0, 20.0, 30.0],
    ...                       "duration_s": [60.0, float("nan"), 5.0], "gpus": [1.0, 1.0, 0.5]})
    >>> [(j.job_id, j.arrival_s, j.gpus) for j in from_trace(JobTrace(table, "toy"), 2, load=2)]
    [('a', 0.0, 1), ('c', 10.0, 1)]
    >>> from_trace(JobTrace(table, "toy"), 3, what="toy.csv")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: toy.csv: only 2 jobs with a duration and 1-8 GPUs, 3 asked for
    """
    if n_jobs < 1:
        raise InputError(f"--jobs must be >= 1, not {n_jobs}")
    if not (math.isfinite(load) and load > 0):
        raise InputError(f"load must be a positive number, not {load!r}")
    table = trace.jobs
    out: list[SimJob] = []
    t0: float | None = None
    columns = zip(table["job_id"].astype(str), table["submit_s"].astype(float),
                  table["duration_s"].astype(float), table["gpus"].astype(float), strict=True)
    for job_id, submit, duration, gpus in columns:
        if not (math.isfinite(duration) and duration > 0) or not (gpus > 0):
            continue
        g = math.ceil(gpus - 1e-9)
        if g > max_gpus:
            continue
        if t0 is None:
            t0 = submit
        out.append(SimJob(job_id, (submit - t0) / load, g, duration))
        if len(out) == n_jobs:
            break
    if len(out) < n_jobs:
        raise InputError(
            f"{what or trace.name}: only {len(out)} job{'' if len(out) == 1 else 's'} with a "
            f"duration and 1-{max_gpus} GPUs, "
            f"{n_jobs} asked for"
        )
    return out


def synthetic(n_jobs: int, seed: int, *, rate_per_h: float = 60.0) -> list[SimJob]:
    """``n_jobs`` jobs with Poisson arrivals (module docstring), untyped."""
    if n_jobs < 1:
        raise InputError(f"--jobs must be >= 1, not {n_jobs}")
    if not (math.isfinite(rate_per_h) and rate_per_h > 0):
        raise InputError(f"arrival rate must be a positive number, not {rate_per_h!r}")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(3600.0 / rate_per_h, size=n_jobs)
    arrivals = np.cumsum(gaps) - gaps[0]
    gpus = rng.choice([1, 2, 4, 8], size=n_jobs, p=[0.7, 0.1, 0.1, 0.1])
    work = np.clip(np.exp(rng.normal(math.log(1800.0), 1.0, size=n_jobs)), 60.0, 86400.0)
    return [
        SimJob(f"s{k}", float(arrivals[k]), int(gpus[k]), float(work[k])) for k in range(n_jobs)
    ]


def packaged_philly() -> JobTrace:
    """The packaged excerpt of the Philly-derived trace (module docstring)."""
    from interplace.datasets import load_philly

    return load_philly(_PHILLY)


def assign_types(
    jobs: Sequence[SimJob],
    types: Sequence[str],
    seed: int,
    *,
    multi_gpu_types: Sequence[str] | None = None,
) -> list[SimJob]:
    """Each job gets a job type, uniformly and independently (seeded; module docstring)."""
    if not types:
        raise InputError("no job types to assign")
    rng = np.random.default_rng(seed)
    multi = list(multi_gpu_types) if multi_gpu_types else list(types)
    out = []
    for job in jobs:
        pool = types if job.gpus == 1 else multi
        out.append(replace(job, job_type=pool[int(rng.integers(len(pool)))]))
    return out
