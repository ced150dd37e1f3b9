"""``place`` and ``score``: the calls a scheduler makes."""

from __future__ import annotations

import contextlib
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import torch

from interplace.errors import InputError, is_int
from interplace.placement._problem import (
    RISK_QUANTILE,
    Problem,
    SpeedCache,
    State,
    check_arguments,
)
from interplace.placement._sources import SpeedSource
from interplace.placement._types import ClusterState, Job, JobPlacement, Placement, Running
from interplace.topology import Topology

__all__ = ["POLICIES", "Policy", "place", "resolve_policy", "score"]


class Policy(Protocol):
    """The one signature every placement policy has: a :class:`Problem` and a seed in, the
    final :class:`State` out (built with ``problem.assign``)."""

    def __call__(self, problem: Problem, *, seed: int = ...) -> State: ...


POLICIES: dict[str, Policy] = {}
"""Policies by name (filled by :mod:`interplace.placement`): ``place(..., policy=NAME)``."""


def resolve_policy(policy: str | Policy) -> tuple[str, Policy]:
    """The (name, function) of a policy given by name or as a function."""
    if isinstance(policy, str):
        fn = POLICIES.get(policy)
        if fn is None:
            raise InputError(f"unknown policy {policy!r} (choose from {', '.join(POLICIES)})")
        return policy, fn
    if not callable(policy):
        raise InputError(f"policy must be a name or a function, not {type(policy).__name__}")
    return getattr(policy, "__name__", "custom"), policy


def place(
    topology: Topology,
    model: SpeedSource,
    jobs: Sequence[Job],
    state: ClusterState | None = None,
    *,
    policy: str | Policy = "local-search",
    max_per_gpu: int = 2,
    objective: str = "sum",
    seed: int = 0,
    num_samples: int = 128,
    can_share: Callable[[str, str], bool] | None = None,
    cross_gpu: bool | None = None,
    cache: SpeedCache | None = None,
    min_gain: float | None = None,
    reserved: Mapping[str, int] | None = None,
) -> Placement:
    """Place ``jobs`` on ``topology`` next to what ``state`` runs, maximising ``objective``.

    ``model`` is a fitted :class:`~interplace.model.InterferenceModel` (or any
    :class:`SpeedSource`, e.g. :class:`MeasuredSpeeds`). Every candidate is scored on the same
    ``num_samples`` posterior draws (``seed``), so comparisons are free of Monte Carlo noise
    between candidates. Jobs that find no slot come back in ``pending``. ``can_share(a, b)``
    forbids job-type pairs from one GPU (default: the source's own ``can_share``, if any).
    The returned placement includes the running jobs, rescored next to their new co-runners.
    ``cross_gpu`` scores contention between jobs on different GPUs that share a PCIe switch
    or socket; the default (None) does so when the model has evidence of it
    (:func:`~interplace.placement._problem.cross_gpu_evidence`), and ``info["cross_gpu"]``
    says which was used. ``cache`` (a :class:`SpeedCache` of this model, seed and
    ``num_samples``) keeps answered queries across calls. ``min_gain`` (``greedy``,
    ``local-search``): a job is placed only where it raises the objective by more than this,
    else it waits in ``pending`` (0: share a GPU only when that raises the total predicted
    speed; with an idle queue, waiting for a free GPU beats a co-location that slows both).
    ``reserved`` maps GPU ids to slots taken by jobs the model cannot see (no job type): they
    count against ``max_per_gpu`` and are not scored.

    >>> from interplace.placement import MeasuredSpeeds
    >>> from interplace.topology import builtin
    >>> m = MeasuredSpeeds({("a", "a"): 0.5, ("a", "b"): 0.9, ("b", "a"): 0.8, ("b", "b"): 0.4})
    >>> jobs = [Job("1", "a"), Job("2", "a"), Job("3", "b"), Job("4", "b")]
    >>> p = place(builtin("pcie-8gpu"), m, jobs, policy="exact")
    >>> round(p.objective, 2), p.pending   # eight idle GPUs: nobody shares
    (4.0, ())
    """
    start = time.perf_counter()
    name, fn = resolve_policy(policy)
    with one_thread():
        return _place(topology, model, jobs, state, name, fn, max_per_gpu, objective, seed,
                      num_samples, can_share, cross_gpu, cache, min_gain, reserved, start)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """One torch intra-op thread for the duration: placement's tensors are small, and on a
    busy machine torch's thread pool costs more than it saves (10x here, measured)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _place(
    topology: Topology,
    model: SpeedSource,
    jobs: Sequence[Job],
    state: ClusterState | None,
    name: str,
    fn: Policy,
    max_per_gpu: int,
    objective: str,
    seed: int,
    num_samples: int,
    can_share: Callable[[str, str], bool] | None,
    cross_gpu: bool | None,
    cache: SpeedCache | None,
    min_gain: float | None,
    reserved: Mapping[str, int] | None,
    start: float,
) -> Placement:
    # read twice below (a list: an iterator would be spent by the first)
    jobs = check_arguments(topology, model, jobs, state, can_share=can_share,
                           cross_gpu=cross_gpu, cache=cache, reserved=reserved)
    extended = with_counters(model, jobs, state)
    if extended is not model:
        model, cache = extended, None  # a new model: the cache answered for the old one
    problem = Problem(
        topology,
        model,
        jobs,
        state,
        max_per_gpu=max_per_gpu,
        objective=objective,
        num_samples=num_samples,
        seed=seed,
        can_share=can_share,
        cross_gpu=cross_gpu,
        cache=cache,
        min_gain=min_gain,
        reserved=reserved,
    )
    st = fn(problem, seed=seed)
    check_state(problem, st)
    elapsed = time.perf_counter() - start
    return to_placement(problem, st, policy=name, decision_s=elapsed)


def score(
    topology: Topology,
    model: SpeedSource,
    placement: Placement | Mapping[Job, Sequence[str]],
    state: ClusterState | None = None,
    *,
    objective: str = "sum",
    max_per_gpu: int | None = None,
    seed: int = 0,
    num_samples: int = 128,
    cache: SpeedCache | None = None,
) -> Placement:
    """Score any placement (one made by a scheduler, or by :func:`place`) with ``model``.

    ``placement`` is a :class:`Placement` (its running jobs stay running) or a mapping of
    :class:`Job` to GPU ids; ``state`` adds jobs already running. ``max_per_gpu`` (default:
    no limit) is checked when given. Returns the placement with every job's predicted speed.
    ``cache``: as for :func:`place`.

    >>> from interplace.placement import MeasuredSpeeds
    >>> from interplace.topology import builtin
    >>> m = MeasuredSpeeds({("a", "b"): 0.5, ("b", "a"): 0.8})
    >>> p = score(builtin("pcie-8gpu"), m, {Job("1", "a"): ["0"], Job("2", "b"): ["0"]})
    >>> [round(j.speed_mean, 2) for j in p.jobs], round(p.objective, 2)
    ([0.5, 0.8], 1.3)
    """
    start = time.perf_counter()
    check_arguments(topology, model, [], state, cache=cache)
    if max_per_gpu is not None and not is_int(max_per_gpu, 1):
        raise InputError(f"max_per_gpu must be an integer >= 1 or None, not {max_per_gpu!r}")
    running: list[Running] = list(state.running) if state is not None else []
    new: list[tuple[Job, tuple[str, ...]]] = []
    name = "score"
    if isinstance(placement, Placement):
        name = placement.policy or name
        for p in placement.jobs:
            if p.running:
                running.append(Running(p.job, p.gpus))
            else:
                new.append((p.job, p.gpus))
        pending = list(placement.pending)
    elif isinstance(placement, Mapping):
        for job, gpus in placement.items():
            if not isinstance(job, Job):
                raise InputError(f"placement keys must be Job objects, not {type(job).__name__}")
            if isinstance(gpus, str | bytes) or not isinstance(gpus, Iterable):
                raise InputError(
                    f"job {job.job_id}: GPUs must be a sequence of GPU ids, not {gpus!r}"
                )
            new.append((job, tuple(str(g) for g in gpus)))
        pending = []
    else:
        raise InputError(f"cannot score a {type(placement).__name__}")
    occupancy: dict[str, int] = {}
    for _, gpus in [(r.job, r.gpus) for r in running] + new:
        for g in gpus:
            occupancy[g] = occupancy.get(g, 0) + 1
    limit = max(occupancy.values(), default=1) if max_per_gpu is None else max_per_gpu
    source = model
    model = with_counters(model, [j for j, _ in new] + pending, ClusterState(tuple(running)))
    problem = Problem(
        topology,
        model,
        [j for j, _ in new] + pending,
        ClusterState(tuple(running)),
        max_per_gpu=limit,
        objective=objective,
        num_samples=num_samples,
        seed=seed,
        can_share=lambda a, b: True,
        cache=None if model is not source else cache,
    )
    st = problem.empty_state()
    for k, (job, gpus) in enumerate(new):
        i = problem.n_running + k
        idx = []
        for g in gpus:
            if g not in problem.gpu_index:
                raise InputError(f"job {job.job_id} is placed on GPU {g!r}, not in the topology")
            idx.append(problem.gpu_index[g])
        if len(set(idx)) != len(idx) or len(idx) != job.gpus:
            raise InputError(f"job {job.job_id} needs {job.gpus} distinct GPUs, given {list(gpus)}")
        for gi in idx:
            if len(st.occ[gi]) >= problem.max_per_gpu:
                raise InputError(
                    f"GPU {problem.gpus[gi]} holds more than max_per_gpu={problem.max_per_gpu} jobs"
                )
        problem.assign(st, i, idx)
    return to_placement(problem, st, policy=name, decision_s=time.perf_counter() - start)


def with_counters(
    model: SpeedSource, jobs: Sequence[Job], state: ClusterState | None
) -> SpeedSource:
    """``model`` with the job types it lacks added from their jobs' counters (cold start).

    Types without counters are left for :class:`Problem` to refuse by name. A new type's
    jobs' ``family`` puts it in that family of the model, their ``counter_samples`` weigh its
    readings. Two jobs giving one new type different readings, families or sample counts are
    refused. Only a fitted
    :class:`~interplace.model.InterferenceModel` has a cold-start path.
    """
    from interplace.model import InterferenceModel
    from interplace.placement._cold import with_cold_jobs

    known = set(model.jobs)
    readings: dict[str, dict[str, float]] = {}
    families: dict[str, str | None] = {}
    samples: dict[str, int | None] = {}
    all_jobs = list(jobs) + ([r.job for r in state.running] if state is not None else [])
    for j in all_jobs:
        if j.job in known or j.counters is None:
            continue
        given = dict(j.counters)
        if readings.setdefault(j.job, given) != given:
            raise InputError(f"job type {j.job!r} is given two different counter readings")
        if families.setdefault(j.job, j.family) != j.family:
            raise InputError(f"job type {j.job!r} is given two different families")
        if samples.setdefault(j.job, j.counter_samples) != j.counter_samples:
            raise InputError(f"job type {j.job!r} is given two different counter_samples")
    if not readings:
        return model
    if not isinstance(model, InterferenceModel):
        raise InputError(
            f"job type(s) {', '.join(sorted(readings))} are unknown and this speed source has "
            "no cold-start path (a fitted model has)"
        )
    named = {job: f for job, f in families.items() if f is not None}
    counts = {job: n for job, n in samples.items() if n is not None}
    # Adding jobs costs about 0.17 s for one job and 0.5-0.8 s for eight on a model of
    # Lucid's size (the second stage's draws and offsets for the new pairs; 2026-11-28, one
    # core) and gives the same model for the same input, so
    # each model keeps what it grew into for the inputs seen last (a scheduler asks again
    # and again about one pending job).
    key = tuple(sorted(
        (job, tuple(sorted(r.items())), named.get(job), counts.get(job))
        for job, r in readings.items()
    ))
    with _GROWN_LOCK:
        memo = _GROWN.setdefault(model, {})
        hit = memo.get(key)
    if hit is None:
        hit = with_cold_jobs(model, readings, named, counts)
        with _GROWN_LOCK:
            if len(memo) >= _GROWN_SIZE:
                memo.clear()
            memo[key] = hit
    return hit


_GROWN: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()
"""Each fitted model's cold-start results by input (:func:`with_counters`); weak, so a model
no longer used takes its entries with it."""
_GROWN_SIZE = 64
_GROWN_LOCK = threading.Lock()


def check_state(problem: Problem, st: State) -> None:
    """Raise :class:`RuntimeError` if a policy broke a rule (a bug, not bad input).

    Two running jobs on one GPU that may not share it are the cluster's state, not the
    policy's choice (the forbidden pairs changed since they started, say): left as they are.
    """
    for g, occ in enumerate(st.occ):
        if len(occ) + problem.reserved[g] > problem.max_per_gpu:
            raise RuntimeError(f"policy put {len(occ)} jobs on GPU {problem.gpus[g]}")
        for a_pos, a in enumerate(occ):
            for b in occ[a_pos + 1 :]:
                new = max(a, b) >= problem.n_running
                if a == b or (new and not problem.can_pair(a, b)):
                    raise RuntimeError(f"policy co-located a forbidden pair on {problem.gpus[g]}")
    for i, where in enumerate(st.where):
        if where is None:
            if i < problem.n_running:
                raise RuntimeError("policy removed a running job")
            continue
        job = problem.jobs[i]
        if len(where) != job.gpus or len(set(where)) != len(where):
            raise RuntimeError(f"policy gave job {job.job_id} GPUs {where}")
        machines = {problem.machine_of[g] for g in where}
        if job.gpus <= problem.machine_size and len(machines) > 1 and i >= problem.n_running:
            raise RuntimeError(f"policy split gang job {job.job_id} across machines")
        for g in where:
            if i not in st.occ[g]:
                raise RuntimeError("policy state is inconsistent")


def _interval(x: torch.Tensor, dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The 5% and 95% quantiles of ``x`` along ``dim`` (all of it by default): the 90%
    interval every :class:`Placement` reports."""
    q = torch.quantile(x, torch.tensor([0.05, 0.95], dtype=x.dtype), dim=dim)
    return q[0], q[1]


def to_placement(problem: Problem, st: State, *, policy: str, decision_s: float) -> Placement:
    """The :class:`Placement` of state ``st``: per-job predictions and the objective."""
    jobs: list[JobPlacement] = []
    placed = [(i, where) for i, where in enumerate(st.where) if where is not None]
    handles = [st.handle[i] for i, _ in placed]
    # Every placed job's 5% and 95% quantiles in one call over the distinct memo rows.
    rows = sorted(set(handles))
    bounds: dict[int, tuple[float, float]] = {}
    if rows:
        meas = torch.stack([problem.measured_draws(h) for h in rows])
        q05s, q95s = _interval(meas, dim=1)
        bounds = dict(zip(rows, zip(q05s.tolist(), q95s.tolist(), strict=True), strict=True))
    for (i, where), h in zip(placed, handles, strict=True):
        q05, q95 = bounds[h]
        jobs.append(
            JobPlacement(
                job=problem.jobs[i],
                gpus=tuple(problem.gpus[g] for g in where),
                speed_mean=problem.mean(h),
                speed_q05=float(q05),
                speed_q95=float(q95),
                comm_factor=problem.comm_factor(i, where),
                running=i < problem.n_running,
            )
        )
    pending = tuple(
        problem.jobs[i] for i in problem.new_instances() if st.where[i] is None
    )
    if handles:
        lo_t, hi_t = _interval(problem.per_draw(handles))
        lo, hi = float(lo_t), float(hi_t)
        value = problem.value(st)
    else:
        value = lo = hi = 0.0
    info: dict[str, Any] = dict(problem.info)
    info["queries"] = problem.queries_answered
    info["num_samples"] = problem.num_samples
    info["risk_quantile"] = RISK_QUANTILE
    return Placement(
        jobs=tuple(jobs),
        pending=pending,
        objective=float(value) if math.isfinite(value) else 0.0,
        objective_q05=float(lo),
        objective_q95=float(hi),
        objective_name=problem.objective,
        policy=policy,
        decision_s=decision_s,
        info=info,
    )
