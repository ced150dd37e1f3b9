"""``gandiva``: Gandiva's packing with introspection (Xiao et al., OSDI'18).

First pack (best fit, :mod:`.pack`); then look at each shared GPU as Gandiva's introspection
does after a trial period: if its jobs' summed speed (what the scheduler observes: the
source's mean speed) is below 1, packing lost throughput, so unpack: move the slowest new job
to an idle GPU if there is one, else swap it with the slowest new job of another losing GPU
when that raises both GPUs' summed speed. Complexity :math:`O(n g)`.
"""

from __future__ import annotations

from interplace.placement._problem import Problem, State
from interplace.placement.pack import pack

__all__ = ["gandiva"]


def gandiva(problem: Problem, *, seed: int = 0) -> State:
    """Pack, then unpack or swap losing pairs (deterministic)."""
    st = pack(problem, seed=seed)

    def gpu_sum(g: int) -> float:
        return sum(problem.mean(st.handle[k]) for k in st.occ[g])

    def losing() -> list[int]:
        return [g for g in range(len(problem.gpus))
                if len(st.occ[g]) > 1 and gpu_sum(g) < 1.0
                and any(k >= problem.n_running and len(st.where[k] or ()) == 1
                        for k in st.occ[g])]

    for g in losing():
        if gpu_sum(g) >= 1.0:
            continue
        movable = [k for k in st.occ[g] if k >= problem.n_running and len(st.where[k] or ()) == 1]
        if not movable:
            continue
        k = min(movable, key=lambda k: problem.mean(st.handle[k]))
        idle = [h for h in range(len(problem.gpus)) if not st.occ[h] and problem.can_host(st, k, h)]
        if idle:
            problem.unassign(st, k)
            problem.assign(st, k, (idle[0],))
            continue
        before = gpu_sum(g)
        for h in losing():
            if h == g:
                continue
            cands = [j for j in st.occ[h] if j >= problem.n_running and len(st.where[j] or ()) == 1]
            if not cands:
                continue
            j = min(cands, key=lambda j: problem.mean(st.handle[j]))
            if not all(problem.can_pair(j, x) for x in st.occ[g] if x != k):
                continue
            if not all(problem.can_pair(k, x) for x in st.occ[h] if x != j):
                continue
            other = gpu_sum(h)
            problem.unassign(st, k)
            problem.unassign(st, j)
            problem.assign(st, k, (h,))
            problem.assign(st, j, (g,))
            if gpu_sum(g) > before and gpu_sum(h) > other:
                break
            problem.unassign(st, k)
            problem.unassign(st, j)
            problem.assign(st, k, (g,))
            problem.assign(st, j, (h,))
    return st
