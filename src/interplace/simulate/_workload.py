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
  probabilities 0.7, 0.1, 0.1, 0.1 (those up to ``max_gpus``, in the same proportions, when it
  is below 8); durations log-normal with a median of 30 minutes and :math:`\\sigma = 1` (so
  the mean is 49.5 minutes), clipped to [1 min, 24 h].
- :func:`packaged_philly`: a packaged excerpt of the Philly-derived trace (first 2,000 jobs of
  Chronus' ``trace_job_Philly_MIX1.csv``, MIT; ``interplace/data/philly/``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from interplace.datasets import JobTrace
from interplace.errors import InputError, check_count, check_seed, is_real, plain_number

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
        if not isinstance(self.job_id, str):
            raise InputError(f"a job's id must be a string, not {self.job_id!r}")
        if not self.job_id:
            raise InputError("a job needs an id")
        if not (is_real(plain_number(self.arrival_s)) and self.arrival_s >= 0):
            raise InputError(f"job {self.job_id}: arrival must be finite and >= 0, "
                             f"not {self.arrival_s!r}")
        check_count(self.gpus, f"job {self.job_id}: gpus")
        if not (is_real(plain_number(self.work_s)) and self.work_s > 0):
            raise InputError(f"job {self.job_id}: work must be finite and > 0, "
                             f"not {self.work_s!r}")
        if not isinstance(self.job_type, str):
            raise InputError(f"job {self.job_id}: job type must be a string, "
                             f"not {self.job_type!r}")


def check_jobs(jobs: object) -> list[SimJob]:
    """``jobs`` as a list if it is an iterable of :class:`SimJob` (a list, a tuple, a
    generator); a single job, a string or anything else is an
    :class:`~interplace.errors.InputError`.

    >>> check_jobs(SimJob("a", 0.0, 1, 60.0))
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: jobs must be a list of SimJob, not one SimJob (write [job])
    """
    if isinstance(jobs, SimJob):
        raise InputError("jobs must be a list of SimJob, not one SimJob (write [job])")
    if isinstance(jobs, str | bytes) or not isinstance(jobs, Iterable):
        raise InputError(f"jobs must be a list of SimJob, not {type(jobs).__name__}")
    out = list(jobs)
    for job in out:
        if not isinstance(job, SimJob):
            raise InputError(f"jobs must be SimJob objects, not {type(job).__name__}")
    return out


def _check_types(name: str, types: object) -> tuple[str, ...]:
    """``types`` as a tuple if it is a non-empty sequence of distinct, non-empty strings
    (``name`` is the argument's); a bare string is no list of types."""
    if isinstance(types, str | bytes) or not isinstance(types, Iterable):
        raise InputError(f"{name} must be a list of job type names, not {types!r}")
    out = tuple(types)
    if not out:
        raise InputError(f"no job types to assign ({name} is empty)")
    for t in out:
        if not (isinstance(t, str) and t):
            raise InputError(f"{name} must be non-empty strings, not {t!r}")
    if len(set(out)) != len(out):
        twice = next(t for t in out if out.count(t) > 1)
        raise InputError(f"{name} names job type {twice!r} twice")
    return out


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
    if not isinstance(trace, JobTrace):
        raise InputError(f"trace must be a JobTrace, not {type(trace).__name__}")
    check_count(n_jobs, "n_jobs")
    check_count(max_gpus, "max_gpus")
    if not (is_real(plain_number(load)) and load > 0):
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


def synthetic(
    n_jobs: int, seed: int, *, rate_per_h: float = 60.0, max_gpus: int = 8
) -> list[SimJob]:
    """``n_jobs`` jobs with Poisson arrivals of 1 to ``max_gpus`` GPUs (module docstring),
    untyped. Below 8, ``max_gpus`` changes only the GPU counts: the arrivals and the work are
    those drawn with the same seed and 8.

    >>> [j.gpus for j in synthetic(6, 0)], [j.gpus for j in synthetic(6, 0, max_gpus=2)]
    ([1, 2, 1, 8, 4, 1], [1, 1, 1, 2, 1, 1])
    """
    check_count(n_jobs, "n_jobs")
    check_seed(seed)
    if not (is_real(plain_number(rate_per_h)) and rate_per_h > 0):
        raise InputError(f"arrival rate must be a positive number, not {rate_per_h!r}")
    check_count(max_gpus, "max_gpus")
    counts, p = [1, 2, 4, 8], [0.7, 0.1, 0.1, 0.1]
    if max_gpus < 8:  # the same draws, each count up to max_gpus in the same proportions
        keep = [k for k, g in enumerate(counts) if g <= max_gpus]
        counts = [counts[k] for k in keep]
        p = [p[k] / sum(p[k] for k in keep) for k in keep]
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(3600.0 / rate_per_h, size=n_jobs)
    arrivals = np.cumsum(gaps) - gaps[0]
    gpus = rng.choice(counts, size=n_jobs, p=p)
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
    """Each job gets a job type, uniformly and independently (seeded; module docstring).

    ``types``: the distinct job type names to draw from; ``multi_gpu_types``: those a
    multi-GPU job draws from (None: ``types``).
    """
    jobs = check_jobs(jobs)
    if types is None:
        raise InputError("no job types to assign (types is None)")
    types = _check_types("types", types)
    check_seed(seed)
    multi = list(types if multi_gpu_types is None
                 else _check_types("multi_gpu_types", multi_gpu_types))
    rng = np.random.default_rng(seed)
    out = []
    for job in jobs:
        pool = types if job.gpus == 1 else multi
        out.append(replace(job, job_type=pool[int(rng.integers(len(pool)))]))
    return out
