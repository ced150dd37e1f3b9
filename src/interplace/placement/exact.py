r"""``exact``: the optimal placement of small instances; the oracle of the tests.

Two algorithms, chosen by the instance:

*Matching.* With the ``sum`` objective, single-GPU jobs, at most two jobs per GPU, nothing
running and no contention across GPUs (no two GPUs share a domain, or the source has
``cross_gpu = False``, as measured pairwise speeds do), the best co-location of :math:`n` jobs
on :math:`m` GPUs is a maximum-weight perfect matching: one vertex per job, :math:`2m - (n -
q)` idle-slot vertices and :math:`q` pending vertices; a job-job edge weighs the pair's summed
speed on one GPU, a job-slot edge the job's speed alone, a job-pending edge 0 (the job waits),
a slot-slot edge 0 (an idle GPU), and every job's edges gain a constant larger than any
objective. A perfect matching has exactly :math:`m` GPU edges; the smallest :math:`q` for which
one exists places the most jobs (forbidden pairs can strand some), and its maximum weight is
the best objective (networkx's blossom algorithm, :math:`O(V^3)` per :math:`q`).

*Branch and bound* otherwise: depth-first over the new jobs (gangs first), each either on one
of its candidate GPU classes (interchangeable GPUs tried once: GPUs that hold the same job
types, and, for a gang, GPU sets with the same ring cost whose GPUs hold the same job types;
exact when GPUs of equal standing are symmetric in the topology, as in every built-in) or
pending; the incumbent starts
at ``local-search``'s answer; a branch is cut when it cannot place more jobs than the incumbent
or, placing as many, its bound cannot beat it. Because a co-runner never raises a job's speed
(the model guarantees it), the bound is the objective of the jobs already placed, as they run
now, with every unplaced job at its speed alone. A source that cannot promise that
(:func:`~interplace.placement._problem.never_faster`: measured speeds with pairs above a job's
speed alone, or measured pairs over a model) gets no bound: the search is exhaustive, cut
only by the count of jobs placed (``info["exact_bound"]`` says which). Placing more jobs comes
first, then the objective. The search stops after ``node_budget`` nodes and returns the best
placement found, with ``info["exact"] = False``: then the answer is not proven optimal.
"""

from __future__ import annotations

import networkx as nx
import torch

from interplace.placement._problem import RISK_QUANTILE, Problem, State, never_faster
from interplace.placement.local_search import local_search

__all__ = ["NODE_BUDGET", "exact"]

NODE_BUDGET = 200_000
"""Search nodes the branch and bound may visit before it gives up proving optimality."""


class _Budget(Exception):
    pass


def exact(problem: Problem, *, seed: int = 0, node_budget: int = NODE_BUDGET) -> State:
    """Optimal placement (see the module docstring for when it is proven optimal)."""
    if matching_applies(problem):
        problem.info["exact_method"] = "matching"
        problem.info["exact"] = True
        return _matching(problem)
    problem.info["exact_method"] = "branch-and-bound"
    return _branch_and_bound(problem, seed, node_budget)


def matching_applies(problem: Problem) -> bool:
    """Whether the matching formulation is exact for ``problem``."""
    new = list(problem.new_instances())
    no_cross = all(not n for n in problem.nbrs) or not getattr(problem.source, "cross_gpu", True)
    return (
        problem.objective == "sum"
        and problem.n_running == 0
        and not any(problem.reserved)
        and problem.max_per_gpu <= 2
        and all(problem.jobs[i].gpus == 1 for i in new)
        and no_cross
    )


def _matching(problem: Problem) -> State:
    st = problem.empty_state()
    new = list(problem.new_instances())
    units = pair_units(problem, st, new, len(problem.gpus))
    for gpu, members in enumerate(units):
        for i in members:
            problem.assign(st, i, (gpu,))
    return st


def pair_units(
    problem: Problem, st: State, instances: list[int], n_gpus: int
) -> list[tuple[int, ...]]:
    """The best split of single-GPU ``instances`` into at most ``n_gpus`` GPUs of one or two.

    Exact for the ``sum`` objective when a job's speed depends only on its GPU partner (no
    cross-GPU contention scored): a maximum-weight perfect matching on the jobs and
    ``2 n_gpus - n`` idle slots (module docstring). Jobs it cannot place (forbidden pairs
    only) are left out. ``st`` is only borrowed to score pairs and left as it was.
    """
    if problem.max_per_gpu == 1 or len(instances) <= 1:
        order = sorted(instances, key=lambda i: -problem.alone_mean(i))
        return [(i,) for i in order[:n_gpus]]
    alone = {i: problem.alone_mean(i) for i in instances}
    pair_value: dict[tuple[int, int], float] = {}
    g0 = next((g for g, occ in enumerate(st.occ) if not occ), None)
    table = _pair_means(problem, instances) if g0 is None else None
    for a_pos, a in enumerate(instances):
        for b in instances[a_pos + 1 :]:
            if not problem.can_pair(a, b):
                continue
            if table is not None:
                pair_value[(a, b)] = table[(a, b)]
                continue
            assert g0 is not None
            st.occ[g0] += [a, b]
            saved = st.where[a], st.where[b]
            version = st.ver[g0]
            st.ver[g0] = problem.tick()
            st.where[a] = st.where[b] = (g0,)
            ha, hb = problem.handles(st, [a, b])
            st.occ[g0] = []
            st.where[a], st.where[b] = saved
            st.ver[g0] = version
            pair_value[(a, b)] = problem.mean(ha) + problem.mean(hb)
    big = 4.0 * (1.0 + sum(alone.values()) + sum(max(v, 0.0) for v in pair_value.values()))
    n = len(instances)
    for q in range(max(0, n - 2 * n_gpus), n + 1):
        # q jobs pending: 2 n_gpus - (n - q) idle slots, and q pending vertices that only a
        # job may take; a perfect matching then has exactly n_gpus GPU edges. The first q
        # with a perfect matching places the most jobs; its weight, the best objective.
        g = nx.Graph()
        dummies = [("slot", k) for k in range(2 * n_gpus - (n - q))]
        pend = [("pending", k) for k in range(q)]
        g.add_nodes_from([*instances, *dummies, *pend])
        for (a, b), v in pair_value.items():
            g.add_edge(a, b, weight=2 * big + v)
        for i in instances:
            for d in dummies:
                g.add_edge(i, d, weight=big + alone[i])
            for p in pend:
                g.add_edge(i, p, weight=big)
        for x in range(len(dummies)):
            for y in range(x + 1, len(dummies)):
                g.add_edge(dummies[x], dummies[y], weight=0.0)
        matched = nx.max_weight_matching(g, maxcardinality=True, weight="weight")
        if 2 * len(matched) != g.number_of_nodes():
            continue
        units: list[tuple[int, ...]] = []
        for u, v in matched:
            if _pending(u) or _pending(v):
                continue
            members = tuple(sorted(x for x in (u, v) if isinstance(x, int)))
            if members:
                units.append(members)
        units.sort()
        return units
    return []


def _pending(node: object) -> bool:
    return isinstance(node, tuple) and node[0] == "pending"


def _pair_means(problem: Problem, instances: list[int]) -> dict[tuple[int, int], float]:
    """Summed mean speed of each pair on one GPU, from the memo (no free GPU to borrow)."""
    from interplace.placement._problem import _FULL, Key

    t = problem.inst_type
    keys = {(t[a], ((t[b], _FULL),)) for a in instances for b in instances
            if problem.can_pair(a, b)}
    missing: list[Key] = [k for k in keys if k not in problem.cache.memo]
    if missing:
        problem._answer(missing)
    memo = problem.cache.memo
    return {
        (a, b): problem.mean(memo[(t[a], ((t[b], _FULL),))])
        + problem.mean(memo[(t[b], ((t[a], _FULL),))])
        for a in instances for b in instances if a != b and problem.can_pair(a, b)
    }


def _branch_and_bound(problem: Problem, seed: int, node_budget: int) -> State:
    order = problem.order()
    incumbent = local_search(problem, seed=seed)
    best: dict[str, object] = {
        "state": incumbent.copy(),
        "placed": _placed(problem, incumbent),
        "value": problem.value(incumbent),
    }
    alone = {i: problem.alone_handle(i) for i in order}
    use_bound = never_faster(problem.source)
    problem.info["exact_bound"] = use_bound
    nodes = 0
    st = problem.empty_state()

    def bound(pos: int) -> float:
        rest = [alone[i] for i in order[pos:]]
        placed = [h for h in st.handle if h >= 0]
        if problem.objective == "sum":
            return sum(problem.mean(h) for h in placed) + sum(problem.mean(h) for h in rest)
        handles = placed + rest
        if not handles:
            return 0.0
        per_draw = problem.per_draw(handles)
        if problem.objective == "max-min":
            return float(per_draw.mean())
        return float(torch.quantile(per_draw, RISK_QUANTILE))

    def dfs(pos: int, placed: int) -> None:
        nonlocal nodes
        nodes += 1
        if nodes > node_budget:
            raise _Budget
        remaining = len(order) - pos
        best_placed = int(best["placed"])  # type: ignore[call-overload]
        best_value = float(best["value"])  # type: ignore[arg-type]
        if placed + remaining < best_placed:
            return
        if remaining == 0:
            value = problem.value(st)
            if placed > best_placed or value > best_value + 1e-12:
                best.update(state=st.copy(), placed=placed, value=value)
            return
        if use_bound and placed + remaining == best_placed and bound(pos) <= best_value + 1e-12:
            return
        i = order[pos]
        options = problem.candidates(st, i, exhaustive=True)
        problem.prefetch(st, ({i: gpus} for gpus in options))
        scored = sorted(options, key=lambda gpus: -problem.gain(st, i, gpus))
        for gpus in scored:
            problem.assign(st, i, gpus)
            dfs(pos + 1, placed + 1)
            problem.unassign(st, i)
        dfs(pos + 1, placed)

    try:
        dfs(0, 0)
        problem.info["exact"] = True
    except _Budget:
        problem.info["exact"] = False
    problem.info["nodes"] = nodes
    state = best["state"]
    assert isinstance(state, State)
    return state


def _placed(problem: Problem, st: State) -> int:
    return sum(1 for i in problem.new_instances() if st.where[i] is not None)
