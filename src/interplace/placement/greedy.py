"""``greedy``: each new job, gangs first, takes the candidate GPUs that raise the objective most.

Complexity: one pass over the jobs; per job, one candidate per class of interchangeable GPUs
(:meth:`Problem.single_candidates`; gangs: the cheapest-ring sets of each machine state), each
scored on the memoised queries of the instances it affects. With :math:`n` jobs and :math:`c`
candidate classes, :math:`O(n c a)` memo look-ups for :math:`a` affected instances per move.

>>> from interplace.placement import Job, place
>>> from interplace.placement import MeasuredSpeeds
>>> from interplace.topology import builtin
>>> m = MeasuredSpeeds({("a", "b"): 0.9, ("b", "a"): 0.9, ("a", "a"): 0.5})
>>> jobs = [Job("1", "a"), Job("2", "a"), Job("3", "b")]
>>> p = place(builtin("pcie-8gpu"), m, jobs, policy="greedy", max_per_gpu=2)
>>> len(p.pending), round(p.objective, 2)
(0, 3.0)
"""

from __future__ import annotations

import time

from interplace.placement._problem import Problem, State

__all__ = ["greedy"]


def greedy(problem: Problem, *, seed: int = 0) -> State:
    """Place the new jobs one at a time, each where the objective gains most (see module)."""
    del seed  # deterministic: ties go to the first candidate
    st = problem.empty_state()
    times: list[float] = []
    for i in problem.order():
        start = time.perf_counter()
        best, best_gain = None, -float("inf")
        options = problem.candidates(st, i)
        gains = problem.move_gains(st, [{i: gpus} for gpus in options])
        for gpus, gain in zip(options, gains, strict=True):
            if gain > best_gain + 1e-12:
                best, best_gain = gpus, gain
        if best is not None and (problem.min_gain is None or best_gain > problem.min_gain):
            problem.assign(st, i, best)
        times.append(time.perf_counter() - start)
    problem.info["job_seconds"] = times
    repair(problem, st)
    return st


def repair(problem: Problem, st: State) -> None:
    """Make room for pending single-GPU jobs by moving one job each (an ejection chain of one).

    A job placed early can block a later one: a GPU's only free slot sits next to a job the
    later one may not share with. For each pending job, every move of one blocking new job to
    another GPU that frees a slot is tried, and the best (by objective) is taken.

    Complexity: a blocker can only move to a GPU with a free slot, so only those are tried
    (their index is rebuilt after each repair that moves jobs), and once no GPU has a free
    slot nothing can move: the pass stops. With :math:`p` pending jobs, :math:`G` GPUs,
    :math:`b` GPUs blocked for a pending job by one job and :math:`f` GPUs with a free slot,
    :math:`O(p (G + b f))` share checks, not :math:`O(p b G)`.
    """
    free = _free_gpus(problem, st)
    for i in problem.new_instances():
        if not free:
            break  # no free slot anywhere: no job can be placed or moved, now or later
        if st.where[i] is not None or problem.jobs[i].gpus != 1:
            continue
        best: dict[int, tuple[int, ...] | None] | None = None
        best_gain = -float("inf")
        for gpus in problem.candidates(st, i):  # a slot freed by an earlier repair
            gain = problem.gain(st, i, gpus)
            if gain > best_gain:
                best, best_gain = {i: gpus}, gain
        for g, occ in enumerate(st.occ):
            if best is not None and len(best) == 1:
                break
            if len(occ) > problem.max_per_gpu or i in occ:
                continue
            blockers = [k for k in occ if not problem.can_pair(i, k)]
            if len(occ) - len(blockers) >= problem.max_per_gpu or len(blockers) != 1:
                continue
            k = blockers[0]
            if k < problem.n_running or problem.jobs[k].gpus != 1:
                continue
            for h in free:  # can_host needs a free slot: the other GPUs cannot take k
                if h != g and problem.can_host(st, k, h):
                    moves: dict[int, tuple[int, ...] | None] = {k: (h,), i: (g,)}
                    gain = problem.move_gain(st, moves)
                    if gain > best_gain:
                        best, best_gain = moves, gain
        if best is not None and problem.min_gain is not None and best_gain <= problem.min_gain:
            best = None  # placing it would not pay: it waits
        if best is not None:
            problem.apply(st, best)
            free = _free_gpus(problem, st)


def _free_gpus(problem: Problem, st: State) -> list[int]:
    """GPU indices with a free slot (jobs and reserved slots below ``max_per_gpu``), in order."""
    cap = problem.max_per_gpu
    return [h for h, occ in enumerate(st.occ) if len(occ) + problem.reserved[h] < cap]
