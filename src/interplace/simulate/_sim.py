r"""The discrete-event loop, its ground truth and the schedulers under test.

*Ground truth* (:class:`GroundTruth`, :func:`ground_truth`) comes from measurements, never from
the model under test: a job runs at its measured co-located speed (the pair's measured
throughput over its isolated one; alone: 1) at each moment; a gang job at its slowest GPU,
times the topology's all-reduce factor for its GPU set (:mod:`interplace.placement._comm`;
placements keep gangs of at most one machine inside one machine, so no gang of the packaged
traces spreads across machines). Pairs that could not run together (Gavel's out-of-memory
pairs) are forbidden for every policy. Those are exactly :func:`interplace.placement.score`
with :class:`~interplace.placement.MeasuredSpeeds` as the source, which the loop calls.

*Events*: arrivals, completions and, optionally, a fixed interval (its ticks only while jobs
wait, and not counted against ``max_events``). Between events every
running job progresses at its current true speed (work done :math:`= \int v\,dt`); at each
event the finished jobs leave, the arrived ones queue, and the scheduler may start queued jobs
(no preemption, no migration). A job finishes when its work (its isolated duration) is done.

*The scheduler under test* (:class:`PlacementScheduler`) sees what a real one sees: its model
(fitted on a split of the measurements, never the held-out part), the topology, the queue and
what runs where. Each round it calls :func:`~interplace.placement.place` on the first
``2 x free slots`` queued jobs (a FIFO window) with the running jobs as state, and starts
what that places.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from interplace.errors import InputError, check_count, check_input_file, check_seed, is_int, is_real
from interplace.placement import (
    ClusterState,
    Job,
    MeasuredSpeeds,
    Running,
    SpeedCache,
    SpeedSource,
    place,
    score,
)
from interplace.placement._place import Policy
from interplace.simulate._workload import SimJob, check_jobs
from interplace.topology import Topology

__all__ = [
    "GroundTruth",
    "PlacementScheduler",
    "Scheduler",
    "SimResult",
    "ground_truth",
    "simulate",
    "truth_file",
]

_EPS = 1e-9
MAX_TICKS = 10_000_000
"""Most scheduling rounds an ``interval_s`` may ask for over the jobs' span (arrivals plus
every job's run, one after another): each is a scheduler call."""
_RECORD_KEYS = ("arrival_s", "start_s", "finish_s", "colocated")
"""What :meth:`SimResult.metrics` reads of each job's record."""


@dataclass(frozen=True, eq=False)
class GroundTruth:
    """Measured speeds (``speeds``), the job types to assign, and those with multi-GPU runs."""

    name: str
    speeds: MeasuredSpeeds
    types: tuple[str, ...]
    multi_gpu_types: tuple[str, ...]


def truth_file(spec: str) -> Path | None:
    """The runs table a ground-truth ``spec`` names, or None for a packaged Gavel one.

    ``gavel-<gpu>`` is packaged; a spec with a file suffix or a folder in it is a path (so
    ``gavel-runs.csv`` is a file), which must be a file; anything else must be an existing
    file, or it is no ground truth interplace knows.

    >>> truth_file("gavel-v100") is None
    True
    >>> truth_file("/nonexistent/runs.csv")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: no such file: /nonexistent/runs.csv
    >>> truth_file("nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: unknown ground truth 'nope' (gavel-v100, ... or a runs file)
    """
    if not (isinstance(spec, str) and spec):
        raise InputError(f"a ground truth is a name (gavel-v100, gavel-p100, gavel-k80) or a "
                         f"runs file's path, not {spec!r}")
    path = Path(spec)
    looks_like_path = bool(path.suffix) or "/" in spec or os.sep in spec
    if spec.startswith("gavel-") and not looks_like_path:
        return None
    if not looks_like_path and not path.exists():
        raise InputError(
            f"unknown ground truth {spec!r} (gavel-v100, gavel-p100, gavel-k80 or a runs file)"
        )
    return check_input_file(path)


def ground_truth(spec: str) -> GroundTruth:
    """``gavel-v100``, ``gavel-p100``, ``gavel-k80`` (packaged) or a runs table (CSV/Parquet;
    :func:`truth_file` tells which).

    A runs table's pairs (runs of two rows) give the speeds; pairs it never measured are
    forbidden for every policy (there is no truth to run them by).
    """
    path = truth_file(spec)
    if path is None:
        from interplace.datasets import load_gavel

        gavel = load_gavel(spec.split("-", 1)[1])
        infeasible = gavel.infeasible
        bad = [(str(a), str(b)) for a, b in infeasible.dropna().values.tolist()]
        speeds = MeasuredSpeeds.from_pairs(gavel.data.pairs(), forbidden=bad)
        alone_bad = set(infeasible.loc[infeasible["co_runner"].isna(), "job"].tolist())
        types = tuple(t for t in speeds.jobs if t not in alone_bad)
        scaling = gavel.scaling
        multi = tuple(sorted(set(scaling.loc[scaling["scale_factor"] > 1, "job"]) & set(types)))
        return GroundTruth(spec, speeds, types, multi or types)
    from interplace.datasets.runs import CoLocationData, read_runs

    data = CoLocationData(read_runs(path), None, path.stem)
    pairs = data.pairs()
    if len(pairs) == 0:
        raise InputError(f"{path}: no co-located pairs to take speeds from")
    measured = {frozenset((a, b)) for a, b in zip(pairs["job"], pairs["co_runner"], strict=True)}
    jobs = sorted(set(pairs["job"].astype(str)))
    forbidden = [(a, b) for k, a in enumerate(jobs) for b in jobs[k:]
                 if frozenset((a, b)) not in measured]
    speeds = MeasuredSpeeds.from_pairs(pairs, forbidden=forbidden)
    return GroundTruth(path.stem, speeds, tuple(jobs), tuple(jobs))


class Scheduler(Protocol):
    """Decides, at an event, which queued jobs start where: job id -> the GPU ids it runs on
    (as many distinct GPUs of the topology as the job asks for; :func:`simulate` refuses any
    other answer). How many jobs share a GPU is the scheduler's choice."""

    name: str

    def decide(
        self,
        queue: Sequence[SimJob],
        running: Sequence[tuple[SimJob, tuple[str, ...]]],
        now: float,
    ) -> dict[str, tuple[str, ...]]: ...


@dataclass(eq=False)
class PlacementScheduler:
    """A scheduler that places a FIFO window of the queue with :func:`place` (module doc)."""

    name: str
    topology: Topology
    source: SpeedSource
    policy: str | Policy
    max_per_gpu: int = 2
    min_gain: float | None = None
    can_share: Callable[[str, str], bool] | None = None
    seed: int = 0
    num_samples: int = 64
    cache: SpeedCache | None = field(default=None, repr=False)
    decision_s: list[float] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise InputError(f"a scheduler's name must be a string, not {self.name!r}")
        for what, value in (("max_per_gpu", self.max_per_gpu), ("num_samples", self.num_samples)):
            check_count(value, what)
        check_seed(self.seed)
        if self.cache is None:
            self.cache = SpeedCache(self.source, num_samples=self.num_samples, seed=self.seed)

    def decide(
        self,
        queue: Sequence[SimJob],
        running: Sequence[tuple[SimJob, tuple[str, ...]]],
        now: float,
    ) -> dict[str, tuple[str, ...]]:
        """Start what ``place`` places of the first 2 x (free slots) queued jobs."""
        total = len(self.topology.gpus()) * self.max_per_gpu
        used = sum(len(g) for _, g in running)
        free = total - used
        if free <= 0 or not queue:
            return {}
        window = list(queue[: 2 * free])
        state = ClusterState(tuple(
            Running(Job(j.job_id, j.job_type, j.gpus), gpus) for j, gpus in running
        ))
        jobs = [Job(j.job_id, j.job_type, j.gpus) for j in window]
        start = time.perf_counter()
        p = place(self.topology, self.source, jobs, state, policy=self.policy,
                  max_per_gpu=self.max_per_gpu, seed=self.seed, num_samples=self.num_samples,
                  can_share=self.can_share, cache=self.cache, min_gain=self.min_gain)
        self.decision_s.append(time.perf_counter() - start)
        return {jp.job.job_id: jp.gpus for jp in p.new_jobs()}


@dataclass(frozen=True)
class SimResult:
    """What a simulation measured: per job, and over time.

    ``jobs``: per job id, ``arrival_s``, ``start_s``, ``finish_s``, ``work_s``, ``progress``
    (the integral of its true speed over its run: equals ``work_s`` when work is conserved),
    ``colocated`` (shared a GPU at some moment). ``timeline``: ``(t, queued, busy GPUs,
    running jobs)`` after each event.
    """

    policy: str
    jobs: dict[str, dict[str, Any]]
    timeline: list[tuple[float, int, int, int]]
    n_gpus: int
    wall_s: float
    decision_s: list[float]

    def __post_init__(self) -> None:
        check_count(self.n_gpus, "n_gpus")
        if not isinstance(self.jobs, dict):
            raise InputError(f"jobs must be a dict of job records, not {type(self.jobs).__name__}")
        for job_id, rec in self.jobs.items():
            if not isinstance(rec, dict):
                raise InputError(f"job {job_id}: its record must be a dict, not "
                                 f"{type(rec).__name__}")
            lacks = [k for k in _RECORD_KEYS if k not in rec]
            if lacks:
                raise InputError(f"job {job_id}: its record lacks {', '.join(lacks)}")

    def jct(self) -> np.ndarray:
        """Job completion times (finish - arrival), in seconds."""
        return np.asarray([j["finish_s"] - j["arrival_s"] for j in self.jobs.values()])

    def metrics(self) -> dict[str, float]:
        """``avg_jct_s``, ``p99_jct_s``, ``makespan_s``, ``avg_queue_s``, ``utilisation``
        (time-averaged share of GPUs running a job), ``colocated_share``, ``wall_s``."""
        if not self.jobs:
            raise InputError("no job was simulated: no metrics to give")
        jct = self.jct()
        queue = [j["start_s"] - j["arrival_s"] for j in self.jobs.values()]
        first = min(j["arrival_s"] for j in self.jobs.values())
        last = max(j["finish_s"] for j in self.jobs.values())
        busy = 0.0
        for (t0, _, b, _), (t1, _, _, _) in zip(self.timeline, self.timeline[1:], strict=False):
            busy += b * (t1 - t0)
        span = max(last - first, _EPS)
        return {
            "avg_jct_s": float(jct.mean()),
            "p99_jct_s": float(np.quantile(jct, 0.99)),
            "makespan_s": float(last - first),
            "avg_queue_s": float(np.mean(queue)),
            "utilisation": float(busy / (span * self.n_gpus)),
            "colocated_share": float(np.mean([j["colocated"] for j in self.jobs.values()])),
            "wall_s": self.wall_s,
            "decision_ms_median": float(np.median(self.decision_s) * 1000)
            if self.decision_s else 0.0,
        }


def simulate(
    jobs: Sequence[SimJob],
    topology: Topology,
    truth: GroundTruth,
    scheduler: Scheduler,
    *,
    interval_s: float | None = None,
    max_events: int | None = None,
) -> SimResult:
    """Run ``jobs`` through ``scheduler`` on ``topology`` with measured speeds (module doc).

    ``interval_s``: a finite number > 0, or None. ``max_events``: the most arrival and
    completion events to run (an integer >= 1; None: 20 a job and 1,000 more); a simulation
    that needs more is an :class:`InputError`. Raises :class:`InputError` where the jobs'
    arrivals span so long against the shortest job that float64 time cannot resolve it
    (2^40 of its run times: a load factor of 1e-30, say).
    """
    start_wall = time.perf_counter()
    jobs = check_jobs(jobs)
    if not isinstance(topology, Topology):
        raise InputError(f"topology must be a Topology, not {type(topology).__name__}")
    if not isinstance(truth, GroundTruth):
        raise InputError(f"truth must be a GroundTruth, not {type(truth).__name__}")
    if not (isinstance(getattr(scheduler, "name", None), str)
            and callable(getattr(scheduler, "decide", None))):
        raise InputError(f"scheduler must have a name (a string) and a decide method: "
                         f"{type(scheduler).__name__} has not")
    if interval_s is not None and not (is_real(interval_s) and interval_s > 0):
        raise InputError(f"interval_s must be a finite number > 0 or None, not {interval_s!r}")
    if max_events is not None and not is_int(max_events, 1):
        raise InputError(f"max_events must be an integer >= 1 or None, not {max_events!r}")
    order = sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
    ids = [j.job_id for j in order]
    if len(set(ids)) != len(ids):
        raise InputError("job ids must be distinct")
    if order:
        horizon = order[-1].arrival_s + sum(j.work_s for j in order)
        shortest = min(j.work_s for j in order)
        if horizon > shortest * 2.0**40:
            raise InputError(
                f"the jobs' arrivals span {order[-1].arrival_s:.3g} s against a shortest run "
                f"of {shortest:.3g} s: too long to simulate in float64 time (is the load "
                "factor far too small?)"
            )
        if interval_s is not None and horizon > interval_s * MAX_TICKS:
            raise InputError(
                f"an interval of {interval_s:.3g} s over the jobs' span of up to "
                f"{horizon:.3g} s could take {horizon / interval_s:.2g} scheduling rounds "
                f"(at most {MAX_TICKS:.0e}): give a longer interval"
            )
    n_gpus = len(topology.gpus())
    for j in order:
        if j.gpus > n_gpus:
            raise InputError(f"job {j.job_id} needs {j.gpus} GPUs; the cluster has {n_gpus}")
        if j.job_type not in truth.speeds.jobs:
            raise InputError(f"job {j.job_id}: type {j.job_type!r} has no measured speeds")
    truth_cache = SpeedCache(truth.speeds, num_samples=1, seed=0)
    queue: list[SimJob] = []
    running: dict[str, tuple[SimJob, tuple[str, ...]]] = {}
    done: dict[str, float] = {}
    speed: dict[str, float] = {}
    record: dict[str, dict[str, Any]] = {}
    timeline: list[tuple[float, int, int, int]] = []
    nxt, now = 0, 0.0
    next_tick = math.inf if interval_s is None else interval_s
    events = 0
    limit = max_events if max_events is not None else 20 * len(order) + 1000
    gpu_ids = set(topology.gpus())
    while nxt < len(order) or queue or running:
        t_arrival = order[nxt].arrival_s if nxt < len(order) else math.inf
        t_done = min(
            (now + (running[k][0].work_s - done[k]) / speed[k] for k in running if speed[k] > 0),
            default=math.inf,
        )
        t_next = min(t_arrival, t_done, next_tick if queue else math.inf)
        if not math.isfinite(t_next):
            raise _never_starts(queue)
        tick = t_next < min(t_arrival, t_done)  # only the interval's tick: nothing else moves
        if not tick:
            events += 1
            if events > limit:
                if max_events is not None:
                    raise InputError(f"the simulation did not finish within max_events="
                                     f"{max_events} events (give more, or None)")
                raise RuntimeError(f"simulation did not finish within {limit} events")
        dt = max(t_next - now, 0.0)
        for k in running:
            done[k] += speed[k] * dt
        now = t_next
        if interval_s is not None and next_tick <= now + _EPS:
            # the first tick after now, at once (not one interval at a time over idle time)
            next_tick = (math.floor((now + _EPS) / interval_s) + 1) * interval_s
            if next_tick <= now + _EPS:  # past float64's resolution of now
                next_tick = math.nextafter(now + _EPS, math.inf)
        changed = False
        # Done: the work left is within rounding of the job's, or takes less time than
        # float64 can add to now (else its finish event would land on now for ever).
        for k in [k for k in running if running[k][0].work_s - done[k] <= 1e-6 * max(
                running[k][0].work_s, 1.0) or (speed[k] > 0 and now + (
                    running[k][0].work_s - done[k]) / speed[k] <= now)]:
            job, _ = running.pop(k)
            record[k]["finish_s"] = now
            record[k]["progress"] = done[k]
            changed = True
        while nxt < len(order) and order[nxt].arrival_s <= now + _EPS:
            queue.append(order[nxt])
            nxt += 1
        if queue:
            decision = scheduler.decide(queue, list(running.values()), now)
            _check_decision(scheduler.name, decision, queue, gpu_ids)
            if tick and not decision and not running and nxt == len(order):
                raise _never_starts(queue)
            if decision:
                started = set(decision)
                for job in [j for j in queue if j.job_id in started]:
                    running[job.job_id] = (job, tuple(decision[job.job_id]))
                    done[job.job_id] = 0.0
                    record[job.job_id] = {
                        "arrival_s": job.arrival_s, "start_s": now, "finish_s": math.nan,
                        "work_s": job.work_s, "progress": 0.0, "colocated": False,
                        "job_type": job.job_type, "gpus": job.gpus,
                    }
                queue = [j for j in queue if j.job_id not in started]
                changed = True
        if changed:
            speed = _true_speeds(topology, truth, running, truth_cache)
            gpu_count: dict[str, int] = {}
            for _, gpus in running.values():
                for g in gpus:
                    gpu_count[g] = gpu_count.get(g, 0) + 1
            for k, (_, gpus) in running.items():
                if any(gpu_count[g] > 1 for g in gpus):
                    record[k]["colocated"] = True
        busy = len({g for _, gpus in running.values() for g in gpus})
        timeline.append((now, len(queue), busy, len(running)))
    decisions = list(getattr(scheduler, "decision_s", []))
    return SimResult(scheduler.name, record, timeline, n_gpus,
                     time.perf_counter() - start_wall, decisions)


def _never_starts(queue: Sequence[SimJob]) -> InputError:
    """The scheduler starts none of ``queue`` with nothing left to change its mind: its
    answer, or the cluster, is at fault (an :class:`InputError`, as the scheduler and the
    jobs are what the caller gave)."""
    stuck = ", ".join(j.job_id for j in queue[:5])
    return InputError(f"no job can ever start: {stuck} (does the cluster fit them?)")


def _check_decision(
    name: str, decision: Any, queue: Sequence[SimJob], gpu_ids: set[str]
) -> None:
    """Refuse a scheduler's answer that starts a job not waiting, or on GPUs that are not
    as many distinct GPUs of the topology as the job asks for."""
    if not isinstance(decision, dict):
        raise InputError(f"scheduler {name}: decide must return a dict, not "
                         f"{type(decision).__name__}")
    waiting = {j.job_id: j for j in queue}
    for job_id, gpus in decision.items():
        job = waiting.get(job_id)
        if job is None:
            raise InputError(f"scheduler {name} started job {job_id!r}, which is not waiting")
        if isinstance(gpus, bytes) or not isinstance(gpus, Iterable):
            raise InputError(f"scheduler {name} put job {job_id} on {gpus!r}: GPUs must be a "
                             "tuple of GPU ids")
        gpus = tuple(gpus)
        if len(gpus) != job.gpus or len(set(gpus)) != len(gpus) or not set(gpus) <= gpu_ids:
            raise InputError(
                f"scheduler {name} put job {job_id} on GPUs {list(gpus)}: it needs {job.gpus} "
                "distinct GPUs of the topology"
            )


def _true_speeds(
    topology: Topology,
    truth: GroundTruth,
    running: dict[str, tuple[SimJob, tuple[str, ...]]],
    cache: SpeedCache,
) -> dict[str, float]:
    if not running:
        return {}
    mapping = {Job(k, job.job_type, job.gpus): gpus for k, (job, gpus) in running.items()}
    from interplace.placement._place import one_thread

    with one_thread():
        p = score(topology, truth.speeds, mapping, num_samples=1, cache=cache)
    return {jp.job.job_id: max(jp.speed_mean, 1e-6) for jp in p.jobs}
