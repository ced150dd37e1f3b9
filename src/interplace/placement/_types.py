"""Domain objects of placement: jobs, what already runs, and a placement with its predictions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from interplace.errors import InputError, is_int, is_real, plain_number

__all__ = [
    "DEFAULT_COMM_SHARE",
    "OBJECTIVES",
    "ClusterState",
    "Job",
    "JobPlacement",
    "Placement",
    "Running",
]

DEFAULT_COMM_SHARE = 0.2
"""Share of a multi-GPU job's step time spent in collective communication on the best-connected
GPU set, when the jobs table does not say (``comm_share`` column). 0.2 sits in the middle of
the 5-40% that data-parallel training of the models in Gavel's and Philly's traces spends in
all-reduce on NVLink-class links (the communication model: :mod:`interplace.placement`)."""

OBJECTIVES = ("sum", "max-min", "risk-averse")
"""Objectives :func:`~interplace.placement.place` maximises: the sum of predicted speeds, the
worst job's speed, or the 10% quantile of the sum over posterior draws."""


def _check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise InputError(
            f"{what} must be a non-empty name without surrounding spaces, not {value!r}"
        )
    if any(c in value for c in "\n\r\t"):
        raise InputError(f"{what} {value!r} holds a control character")
    return value


def _plain_numbers(
    obj: object, names: tuple[str, ...], who: str, rule: str, low: float | None = None
) -> None:
    """Set each field ``names`` of the frozen ``obj`` to the Python number it holds (numpy
    numbers converted), refusing one that is no finite number (or is below ``low``), and
    the two named ``*_q05``, ``*_q95`` out of order."""
    for name in names:
        v = plain_number(getattr(obj, name))
        if not (is_real(v) and (low is None or v >= low)):
            raise InputError(f"{who}{name} must be {rule}, not {getattr(obj, name)!r}")
        object.__setattr__(obj, name, v)
    lo, hi = (n for n in names if n.endswith(("_q05", "_q95")))
    if getattr(obj, lo) > getattr(obj, hi):
        raise InputError(f"{who}{lo} {getattr(obj, lo)!r} above {hi} {getattr(obj, hi)!r}")


def _check_gpu_ids(gpus: tuple[object, ...], who: str) -> None:
    for g in gpus:
        if not isinstance(g, str) or not g:
            raise InputError(f"{who}: GPU ids must be non-empty strings, not {g!r}")


@dataclass(frozen=True)
class Job:
    """A job to place: its id, its job type (a job the model knows), and how many GPUs.

    ``job`` names the job type the interference model was fitted on (``"ResNet-50 (batch size
    64)"``); many jobs may share one type. ``gpus`` GPUs are gang-placed: all at once, inside
    one machine when they fit. ``comm_share`` is the share of a multi-GPU job's step time
    spent communicating on the best-connected GPU set (default :data:`DEFAULT_COMM_SHARE`).
    ``counters`` (metric -> mean reading of an isolated run, e.g. ``{"gpu_util_pct":
    85.0}``) lets a job type the model has never seen be placed through its cold-start path
    (:mod:`interplace.placement._cold`); they are kept as a sorted tuple of pairs. ``family``
    puts such a new type in one of the model's families (its prior and its borrowed pair
    corrections come from the family); for a type the model knows it is informational (the
    model already knows its jobs' families). ``counter_samples`` says how many samples each
    of the ``counters``' mean readings is over (by default, as many as the fitted model's
    own isolated readings were; more samples weigh a reading more against the population).

    >>> Job("j1", "resnet", gpus=2).gpus
    2
    >>> import numpy as np
    >>> j = Job("j1", "resnet", gpus=np.int64(2), counters={"gpu_util_pct": np.int64(85)})
    >>> j.gpus, j.counters  # numpy numbers, as a table's row gives them, become Python's
    (2, (('gpu_util_pct', 85.0),))
    >>> Job("j1", "resnet", gpus=0)
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: job j1: gpus must be an integer >= 1, not 0
    """

    job_id: str
    job: str
    gpus: int = 1
    family: str | None = None
    comm_share: float = DEFAULT_COMM_SHARE
    counters: tuple[tuple[str, float], ...] | None = None
    counter_samples: int | None = None

    def __post_init__(self) -> None:
        _check_name(self.job_id, "job_id")
        _check_name(self.job, f"job {self.job_id}: job type")
        for name in ("gpus", "comm_share", "counter_samples"):
            object.__setattr__(self, name, plain_number(getattr(self, name)))
        if not is_int(self.gpus, 1):
            raise InputError(f"job {self.job_id}: gpus must be an integer >= 1, not {self.gpus!r}")
        if self.family is not None:
            _check_name(self.family, f"job {self.job_id}: family")
        c = self.comm_share
        if not (is_real(c) and 0 <= c < 1):
            raise InputError(f"job {self.job_id}: comm_share must be in [0, 1), not {c!r}")
        if self.counters is not None:
            items = self.counters.items() if isinstance(self.counters, Mapping) else self.counters
            pairs = []
            for pair in items:
                if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
                    raise InputError(f"job {self.job_id}: counters must map metric names to values")
                name, value = pair[0], plain_number(pair[1])
                if not (is_real(value) and value >= 0):
                    raise InputError(
                        f"job {self.job_id}: counter {name} must be a finite number >= 0"
                    )
                if name.endswith("_pct") and value > 100:  # as the collectors read them
                    raise InputError(
                        f"job {self.job_id}: counter {name} is a percentage, not {value!r}"
                    )
                pairs.append((name, float(value)))
            names = [name for name, _ in pairs]
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise InputError(f"job {self.job_id}: counter {twice[0]} given twice")
            object.__setattr__(self, "counters", tuple(sorted(pairs)) or None)
        n = self.counter_samples
        if n is not None:
            if not is_int(n, 1):
                raise InputError(
                    f"job {self.job_id}: counter_samples must be a whole number >= 1, not {n!r}"
                )
            if self.counters is None:
                raise InputError(f"job {self.job_id}: counter_samples given without counters")


@dataclass(frozen=True)
class Running:
    """A job already running on ``gpus`` (GPU ids of the topology)."""

    job: Job
    gpus: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.job, Job):
            raise InputError(f"Running.job must be a Job, not {type(self.job).__name__}")
        if not isinstance(self.gpus, tuple) or not self.gpus:
            raise InputError(f"running job {self.job.job_id}: gpus must be a non-empty tuple")
        _check_gpu_ids(self.gpus, f"running job {self.job.job_id}")
        if len(set(self.gpus)) != len(self.gpus):
            raise InputError(f"running job {self.job.job_id}: a GPU is listed twice")
        if len(self.gpus) != self.job.gpus:
            raise InputError(
                f"running job {self.job.job_id} needs {self.job.gpus} GPUs but runs on "
                f"{len(self.gpus)}"
            )


@dataclass(frozen=True)
class ClusterState:
    """What already runs where: a tuple of :class:`Running` jobs with distinct ids.

    >>> s = ClusterState((Running(Job("a", "resnet"), ("0",)),))
    >>> s.job_ids()
    ('a',)
    >>> ClusterState.empty().running
    ()
    """

    running: tuple[Running, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.running, tuple):
            raise InputError("ClusterState.running must be a tuple of Running")
        seen: set[str] = set()
        for r in self.running:
            if not isinstance(r, Running):
                raise InputError(f"ClusterState holds a {type(r).__name__}, not a Running")
            if r.job.job_id in seen:
                raise InputError(f"state lists job {r.job.job_id!r} twice")
            seen.add(r.job.job_id)

    @classmethod
    def empty(cls) -> ClusterState:
        """Nothing running."""
        return cls(())

    def job_ids(self) -> tuple[str, ...]:
        """Ids of the running jobs, in order."""
        return tuple(r.job.job_id for r in self.running)


@dataclass(frozen=True)
class JobPlacement:
    """One job's GPUs and its predicted speed (co-located over isolated throughput).

    ``speed_mean`` is the posterior mean of the true speed; ``[speed_q05, speed_q95]`` is a
    90% interval of a measured one. A gang job runs at its slowest GPU times its
    communication factor ``comm_factor`` (1 for a single GPU). ``running`` marks a job that
    was already running (its speed is charged for the co-runners placed next to it).
    """

    job: Job
    gpus: tuple[str, ...]
    speed_mean: float
    speed_q05: float
    speed_q95: float
    comm_factor: float = 1.0
    running: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.job, Job):
            raise InputError(f"JobPlacement.job must be a Job, not {type(self.job).__name__}")
        if not isinstance(self.gpus, tuple):
            raise InputError(f"job {self.job.job_id}: gpus must be a tuple of GPU ids")
        _check_gpu_ids(self.gpus, f"job {self.job.job_id}")
        if len(self.gpus) != self.job.gpus:
            raise InputError(f"job {self.job.job_id}: placed on {len(self.gpus)} GPUs")
        _plain_numbers(self, ("speed_mean", "speed_q05", "speed_q95", "comm_factor"),
                       f"job {self.job.job_id}: ", "finite and >= 0", low=0.0)
        if not isinstance(self.running, bool):
            raise InputError(f"job {self.job.job_id}: running must be True or False")


@dataclass(frozen=True)
class Placement:
    """The result of :func:`~interplace.placement.place` or :func:`~interplace.placement.score`.

    ``jobs``: one :class:`JobPlacement` per placed new job and per running job (``running``
    set); ``pending``: the jobs that could not be placed; ``objective`` with its 90% interval
    over posterior draws (``objective_q05``, ``objective_q95``); ``decision_s``: the policy's
    wall-clock time; ``policy`` and ``objective_name`` say what produced it.
    """

    jobs: tuple[JobPlacement, ...]
    pending: tuple[Job, ...]
    objective: float
    objective_q05: float
    objective_q95: float
    objective_name: str = "sum"
    policy: str = ""
    decision_s: float = 0.0
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.objective_name not in OBJECTIVES:
            raise InputError(f"unknown objective {self.objective_name!r}")
        if not (isinstance(self.jobs, tuple) and all(isinstance(p, JobPlacement)
                                                      for p in self.jobs)):
            raise InputError("Placement.jobs must be a tuple of JobPlacement")
        if not (isinstance(self.pending, tuple) and all(isinstance(j, Job)
                                                         for j in self.pending)):
            raise InputError("Placement.pending must be a tuple of Job")
        ids = [p.job.job_id for p in self.jobs] + [j.job_id for j in self.pending]
        if len(set(ids)) != len(ids):
            raise InputError("a job appears twice in a placement")
        _plain_numbers(self, ("objective", "objective_q05", "objective_q95"), "placement ",
                       "a finite number")

    def assignment(self) -> dict[str, tuple[str, ...]]:
        """``job_id -> GPU ids`` of every placed job, running ones included."""
        return {p.job.job_id: p.gpus for p in self.jobs}

    def new_jobs(self) -> tuple[JobPlacement, ...]:
        """The placements of the jobs that were not already running."""
        return tuple(p for p in self.jobs if not p.running)

    def table(self) -> list[dict[str, Any]]:
        """One row per (new job, GPU): ``job_id, job, gpu, speed_mean, speed_q05, speed_q95``."""
        rows = []
        for p in self.new_jobs():
            for g in p.gpus:
                rows.append(
                    {
                        "job_id": p.job.job_id,
                        "job": p.job.job,
                        "gpu": g,
                        "speed_mean": p.speed_mean,
                        "speed_q05": p.speed_q05,
                        "speed_q95": p.speed_q95,
                    }
                )
        return rows
