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
of its candidate GPU classes or pending. Interchangeable GPUs are tried once, by orbits under
symmetries that fix the state. For a gang, machines in the same state (same gangs too) once,
and inside a machine one GPU set per orbit under the machine's symmetries that fix the state
(:func:`_gang_orbits`: involutions of its GPUs preserving every ring cost and contention
domain, whose swapped GPUs hold the same). Equal ring cost and holdings alone are not enough:
what two sets leave free for a later gang (its rings) or job (what it shares) may differ. For
a single-GPU job (:func:`_single_orbits`), one GPU per orbit under the share-preserving
involutions of its machine whose swapped GPUs hold the same, machines of one class in the
same state once, and GPUs sharing no domain with any other once per holdings. GPUs of equal
standing (they and each of their neighbours holding the same) are not enough on an asymmetric
topology: two can differ one step further, and which one is taken changes what later jobs
share. A gang larger than a machine (which may take any GPUs that can take it) tries every
such set, fewest machines first, with no symmetry merged (a ring across machines runs through
its GPUs in order, so the positions it takes in each machine change its cost); past
:data:`~interplace.placement._problem.SPANNING_SETS` sets the answer is not proven
(``info["spanning_capped"]``, ``info["exact"] = False``). The incumbent
starts at ``local-search``'s answer; a branch is cut when it cannot place more jobs than the
incumbent or, placing as many (so every remaining job :math:`j \in R` must be placed), an
upper bound on its objective cannot beat it.

*The bounds.* Both need a source under which a co-runner never raises a speed, draw by draw:
more co-runners, or more resources shared with one, only lower every draw of a job's speed
(the fitted model guarantees it; :func:`~interplace.placement._problem.never_faster`). A
source that cannot promise that (measured speeds with pairs above a job's speed alone, or
measured pairs over a model) gets none: the search is exhaustive, cut only by the count of
jobs placed (``info["exact_bound"]`` says which). A gang's speed is its slowest GPU's times
its communication factor :math:`\phi \le 1`, so it is monotone too.

The cheap bound scores the jobs already placed as they run now and every :math:`j \in R` at
its speed alone. When it cannot cut, the tight bound (:func:`tight_bound`) is tried. With
:math:`f_g` the free slots of GPU :math:`g` now, :math:`n_j` the GPUs of job :math:`j` and
:math:`H_j` the GPUs that can take :math:`j` now (a slot, no forbidden pair: a superset of
where it can ever go), a completion leaves exactly :math:`E = \sum_g f_g - \sum_{j \in R} n_j`
slots empty (:math:`E < 0`, or some :math:`|H_j| < n_j`: no completion places all, the bound
is :math:`-\infty`). Wherever :math:`j` lands, a job on :math:`g` shares with it at least
:math:`\mu_j(g) = \bigcap_{h \in H_j} c(g, h)`, where :math:`c(g, g)` is every resource and
:math:`c(g, h)` what GPUs :math:`g` and :math:`h` share (:math:`\emptyset` for none). The
speed of a job :math:`k` on GPU :math:`g` is then at most :math:`u_{k,g}`: its speed with
the co-runners it has now plus every :math:`j \in R \setminus \{k\}` sharing
:math:`\mu_j(g)`; and if more than :math:`E` slots of :math:`g` stay free besides :math:`k`
(:math:`f_g > E` for a placed :math:`k`, :math:`f_g - 1 > E` for :math:`k` tried on
:math:`g`), one of those :math:`j` that :math:`g` can take (and may share with :math:`k`)
lands on :math:`g`: :math:`u_{k,g}` is the largest, over them, of that speed with that
:math:`j` sharing every resource. A placed job :math:`k` on GPUs :math:`G_k` runs at most at
:math:`u_k = \phi_k \min_{g \in G_k} u_{k,g}`; a job :math:`j \in R` at most at
:math:`u_j = \max_L \phi_j(L) \min_{g \in L} u_{j,g}` over every GPU it can take now (a
single job) or every candidate set (a gang; a gang larger than a machine: its speed alone).
With ``sum`` the bound is :math:`\sum_k \bar u_k + \sum_{j \in R} \bar u_j`, each
:math:`\bar u` computed as above on posterior means (the largest mean over the cases is at
least the mean of the case that happens, and the mean of a gang's per-draw minimum is at most
each GPU's mean); with
``max-min`` and ``risk-averse``, :math:`u` is computed draw by draw and the bound is the
objective of those draws (the mean of the per-draw minimum, the 10% quantile of the per-draw
sum: both only grow when every draw does). Every final speed is at most its :math:`u` because
the final co-runners of each job contain those :math:`u` assumed, sharing at least as much.

Placing more jobs comes first, then the objective. ``info["nodes"]`` counts the nodes,
``info["exact_tight_cuts"]`` the branches the tight bound cut. The search stops after
``node_budget`` nodes and returns the best placement found, with ``info["exact"] = False``:
then the answer is not proven optimal.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence

import networkx as nx
import torch

from interplace.placement._problem import (
    _FULL,
    RISK_QUANTILE,
    Key,
    Problem,
    State,
    never_faster,
)
from interplace.placement.local_search import local_search
from interplace.topology import Topology

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
    nodes = tight_cuts = 0
    st = problem.empty_state()
    contrib = _contributions(problem)

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
        nonlocal nodes, tight_cuts
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
        if use_bound and placed + remaining == best_placed:
            if bound(pos) <= best_value + 1e-12:
                return
            if tight_bound(problem, st, order[pos:], contrib) <= best_value + 1e-12:
                tight_cuts += 1
                return
        i = order[pos]
        options = _options(problem, st, i)
        problem.prefetch(st, ({i: gpus} for gpus in options))
        scored = sorted(options, key=lambda gpus: -problem.gain(st, i, gpus))
        for gpus in scored:
            problem.assign(st, i, gpus)
            dfs(pos + 1, placed + 1)
            problem.unassign(st, i)
        dfs(pos + 1, placed)

    problem.info.pop("spanning_capped", None)
    try:
        dfs(0, 0)
        # A gang larger than a machine with more GPU sets than the search tries: not proven.
        problem.info["exact"] = not problem.info.get("spanning_capped", False)
    except _Budget:
        problem.info["exact"] = False
    problem.info["nodes"] = nodes
    problem.info["exact_tight_cuts"] = tight_cuts
    state = best["state"]
    assert isinstance(state, State)
    return state


def _options(problem: Problem, st: State, i: int) -> list[tuple[int, ...]]:
    """The GPUs the search tries for instance ``i``: one GPU set per class of interchangeable
    sets for a gang, one GPU per class of interchangeable GPUs for a single-GPU job.

    A gang: :meth:`~interplace.placement._problem.Problem.candidates` (every set inside a
    machine, machines in the same state once), then one set per orbit under the symmetries
    of its machine that fix the current state (:func:`_gang_orbits`): two sets of equal ring
    cost and equal holdings are not enough, since what they leave free (the rings a later
    gang gets, what a later job shares) may differ.

    A single-GPU job: one GPU per orbit under the symmetries that fix the current state
    (:func:`_single_orbits`), not one per class of equal standing (GPUs that, with each of
    their neighbours, hold the same), which merged GPUs of asymmetric topologies that differ
    one step further.
    """
    if problem.jobs[i].gpus > 1:
        return _gang_orbits(problem, st, problem.candidates(st, i, exhaustive=True))
    return _single_orbits(problem, st, problem.hosts(st, i))


def _single_orbits(problem: Problem, st: State, hosts: list[int]) -> list[tuple[int, ...]]:
    r"""One GPU of ``hosts`` per orbit under the symmetries of the cluster that fix ``st``, for
    a single-GPU job (every gang is placed before it: :meth:`Problem.order`).

    Two GPUs are merged only when a relabelling of GPUs maps the state onto itself (up to
    swapping single jobs of one type, or alike gangs) and one GPU onto the other, and keeps
    every share mask: then placing the job on either gives states of equal value whose
    completions by single jobs correspond one to one. The relabellings used:

    * a GPU that shares no domain with any other (no cross-GPU contention) with any such
      GPU of the same holdings, in any machine: their transposition keeps every mask (0);
    * inside a machine, the involutions of :func:`_machine_symmetries` that keep the share
      masks (ring costs no longer matter: no gang follows) and whose swapped GPUs hold the
      same (:func:`_gang_orbits`' test), so one GPU per orbit of the group they generate;
    * across machines, swapping two whole machines of one class whose GPUs hold the same,
      position by position (:meth:`Problem._gang_holds`: gangs inside the machine by type,
      size, communication share and local positions; a gang reaching outside by its
      instance): their graphs, hence masks and ring costs, coincide.

    Equal standing alone (a GPU and its neighbours holding the same) is not enough: on an
    asymmetric machine, GPUs whose neighbourhoods look alike can differ one step further
    (a neighbour on a shared switch in one, alone on its bridge in the other), and which is
    taken changes what later jobs share.
    """
    holds = _holdings(problem, st)
    several = len(problem.machines) > 1
    machine_keys: dict[str, tuple[object, ...]] = {}
    orbit_reps: dict[tuple[object, ...], list[int]] = {}
    seen: set[tuple[object, ...]] = set()
    out: list[tuple[int, ...]] = []
    pos = problem._local_pos
    for g in hosts:
        if not problem.nbrs[g]:
            key: tuple[object, ...] = ("alone", holds(g))
        else:
            machine = problem.machine_of[g]
            mk = machine_keys.get(machine)
            idx = problem.machines[machine]
            if mk is None:
                if several:
                    mk = (problem.machine_class(machine),
                          tuple(problem._gang_holds(st, h) for h in idx))
                else:
                    mk = (machine,)
                machine_keys[machine] = mk
            reps = orbit_reps.get(mk)
            if reps is None:
                reps = orbit_reps[mk] = _local_orbits(problem, idx, [holds(h) for h in idx])
            key = ("machine", mk, reps[pos[g]])
        if key not in seen:
            seen.add(key)
            out.append((g,))
    return out


def _holdings(problem: Problem, st: State) -> Callable[[int], tuple[object, ...]]:
    """What a GPU holds in ``st``, as the orbit rules compare it: its reserved slots, its
    single-GPU job types and its multi-GPU instances (a gang is alike only to itself)."""
    t, where, res = problem.inst_type, st.where, problem.reserved

    def holds(g: int) -> tuple[object, ...]:
        occ = st.occ[g]
        gangs = tuple(sorted(k for k in occ if len(where[k] or ()) > 1))
        return (res[g], tuple(sorted(t[k] for k in occ if len(where[k] or ()) <= 1)), gangs)

    return holds


_Symmetry = tuple[list[int], list[int]]


def _fixing(symmetries: list[_Symmetry], held: list[tuple[object, ...]]) -> list[_Symmetry]:
    """The ``symmetries`` (:func:`_machine_symmetries`) that fix a machine's state: every
    position and its image hold the same (``held``, per local position)."""
    return [s for s in symmetries if all(held[a] == held[b] for a, b in enumerate(s[0]))]


def _local_orbits(problem: Problem, idx: list[int], held: list[tuple[object, ...]]) -> list[int]:
    """Per local position of a machine (``idx``), the smallest position of its orbit under the
    share-mask symmetries of the machine whose swapped GPUs hold the same (``held``)."""
    rep = list(range(len(idx)))

    def find(a: int) -> int:
        while rep[a] != a:
            rep[a] = rep[rep[a]]
            a = rep[a]
        return a

    for perm, _ in _fixing(_machine_symmetries(problem, idx, sizes=()), held):
        for a, b in enumerate(perm):
            ra, rb = find(a), find(b)
            if ra != rb:
                rep[max(ra, rb)] = min(ra, rb)
    return [find(a) for a in range(len(idx))]


_MAX_SYMMETRIC_MACHINE = 8  # larger machines: only twin swaps (:func:`_machine_symmetries`)
_SymKey = tuple[int, bool, tuple[int, ...]]
_SYMMETRIES: weakref.WeakKeyDictionary[Topology, dict[_SymKey, list[_Symmetry]]]
_SYMMETRIES = weakref.WeakKeyDictionary()


def _machine_symmetries(
    problem: Problem, idx: list[int], sizes: tuple[int, ...] | None = None
) -> list[_Symmetry]:
    r"""Involutions :math:`\pi` of a machine's local GPU positions (``idx``) that preserve
    everything a placement's value reads inside the machine: the ring cost of every GPU set
    a gang of the problem can hold there (every size of its multi-GPU jobs that fit a
    machine), and the share mask of every GPU pair (the contention domains scored when
    ``problem.cross_gpu``). Each comes as ``(perm, image)``: ``perm[a]`` is :math:`\pi(a)`
    and ``image[mask]`` the image of a set of local positions as a bit mask. Identity
    excluded. ``sizes``: the gang sizes whose ring costs must be kept (default: those of the
    problem's gangs that fit a machine; ``()`` for single-GPU jobs once every gang is
    placed). Machines over :data:`_MAX_SYMMETRIC_MACHINE` GPUs: none when ``sizes``, else
    only the transpositions of twins (GPUs that share the same with every other GPU), with
    an empty ``image``. Memoised per topology, machine class and gang sizes.

    Any set of true symmetries generates a group of them, so involutions alone (GPU twins,
    swapped switches or sockets) are sound; one that only swaps pairs already swapped by
    kept transpositions is left out (the transpositions fix every state it fixes).
    """
    n = len(idx)
    if sizes is None:
        sizes = tuple(sorted({j.gpus for j in problem.jobs if 1 < j.gpus <= n}))
    if n < 2 or (n > _MAX_SYMMETRIC_MACHINE and sizes):
        return []
    key = (problem.machine_class(problem.machine_of[idx[0]]), bool(problem.cross_gpu), sizes)
    per = _SYMMETRIES.get(problem.topology)
    if per is None:
        per = _SYMMETRIES.setdefault(problem.topology, {})
    hit = per.get(key)
    if hit is not None:
        return hit
    local = {g: a for a, g in enumerate(idx)}
    share = [[0] * n for _ in range(n)]
    for a, g in enumerate(idx):
        for h, m in problem.nbrs[g]:
            if h in local:
                share[a][local[h]] = m
    if n > _MAX_SYMMETRIC_MACHINE:  # twins only: (a b) keeps every mask
        twin_swaps: list[_Symmetry] = []
        for a in range(n):
            for b in range(a + 1, n):
                if all(share[a][c] == share[b][c] for c in range(n) if c not in (a, b)):
                    swap = list(range(n))
                    swap[a], swap[b] = b, a
                    twin_swaps.append((swap, []))
        per[key] = twin_swaps
        return twin_swaps
    masks = [m for m in range(1 << n) if m.bit_count() in sizes]
    cost = {m: round(problem.comm_cost([idx[b] for b in range(n) if m >> b & 1]), 12)
            for m in masks}
    found: list[_Symmetry] = []
    perm = list(range(n))

    def check() -> None:
        if any(share[perm[a]][perm[b]] != share[a][b] for a in range(n) for b in range(n)):
            return
        image = [0] * (1 << n)
        for mask in range(1, 1 << n):
            low = mask & -mask
            image[mask] = image[mask ^ low] | (1 << perm[low.bit_length() - 1])
        if all(cost[image[m]] == cost[m] for m in masks):
            found.append((list(perm), image))

    def pair_up(a: int) -> None:  # every involution: each position fixed or swapped once
        while a < n and perm[a] != a:
            a += 1
        if a == n:
            if perm != list(range(n)):
                check()
            return
        pair_up(a + 1)
        for b in range(a + 1, n):
            if perm[b] == b:
                perm[a], perm[b] = b, a
                pair_up(a + 1)
                perm[a], perm[b] = a, b

    pair_up(0)
    found.sort(key=lambda f: sum(1 for a, b in enumerate(f[0]) if a < b))
    twins: set[tuple[int, int]] = set()
    kept: list[_Symmetry] = []
    for p, image in found:
        pairs = {(a, b) for a, b in enumerate(p) if a < b}
        if len(pairs) == 1:
            twins |= pairs
        elif pairs <= twins:
            continue
        kept.append((p, image))
    per[key] = kept
    return kept


def _gang_orbits(
    problem: Problem, st: State, options: list[tuple[int, ...]]
) -> list[tuple[int, ...]]:
    r"""``options`` less the GPU sets that a symmetry of their machine fixing ``st`` maps onto
    a set kept before (the first of each orbit is kept, in the given order).

    A symmetry :math:`\pi` (:func:`_machine_symmetries`) fixes ``st`` when every GPU
    :math:`g` of the machine and :math:`\pi(g)` hold the same reserved slots, the same
    single-GPU job types and the same multi-GPU instances (so :math:`\pi` maps each gang's
    GPUs onto themselves). Then placing the gang on :math:`\pi(c)` gives the image under
    :math:`\pi` of placing it on :math:`c` (up to swapping single jobs of one type): every
    completion of one has a completion of the other with the same value, so one is enough.
    """
    holds = _holdings(problem, st)
    gens: dict[str, list[list[int]]] = {}
    seen: set[tuple[str, int]] = set()
    out: list[tuple[int, ...]] = []
    pos = problem._local_pos
    for c in options:
        machine = problem.machine_of[c[0]]
        if any(problem.machine_of[g] != machine for g in c):
            out.append(c)
            continue
        mask = sum(1 << pos[g] for g in c)
        if (machine, mask) in seen:
            continue
        out.append(c)
        maps = gens.get(machine)
        if maps is None:
            idx = problem.machines[machine]
            held = [holds(g) for g in idx]
            maps = gens[machine] = [
                image for _, image in _fixing(_machine_symmetries(problem, idx), held)
            ]
        orbit = {mask}
        todo = [mask]
        while todo:
            x = todo.pop()
            for image in maps:
                y = image[x]
                if y not in orbit:
                    orbit.add(y)
                    todo.append(y)
        seen.update((machine, y) for y in orbit)
    return out


def _placed(problem: Problem, st: State) -> int:
    return sum(1 for i in problem.new_instances() if st.where[i] is not None)


def _contributions(problem: Problem) -> list[list[int]]:
    """``c[g][h]``: the share mask a job on GPU ``h`` is a co-runner with, for a job on ``g``
    (every resource on ``g`` itself, the shared ones on a neighbour, 0 elsewhere)."""
    n = len(problem.gpus)
    c = [[0] * n for _ in range(n)]
    for g in range(n):
        c[g][g] = _FULL
        for h, m in problem.nbrs[g]:
            c[g][h] |= m
    return c


def tight_bound(
    problem: Problem, st: State, rest: Sequence[int], contrib: list[list[int]]
) -> float:
    """An upper bound on the objective of every completion of ``st`` that places every
    instance of ``rest`` (the module docstring's tight bound); ``-inf`` when none can.

    Valid only when no co-runner, and no resource shared with one, raises a speed in any
    draw (:func:`~interplace.placement._problem.never_faster`). ``st`` is left unchanged;
    the queries it asks are memoised like any other.
    """
    cap, t, jobs = problem.max_per_gpu, problem.inst_type, problem.jobs
    n_gpus = len(st.occ)
    free = [max(0, cap - problem.reserved[g] - len(occ)) for g, occ in enumerate(st.occ)]
    spare = sum(free) - sum(jobs[j].gpus for j in rest)  # slots left empty at the end
    if spare < 0:
        return -math.inf
    hosts = {j: problem.hosts(st, j) for j in rest}
    if any(len(hosts[j]) < jobs[j].gpus for j in rest):
        return -math.inf
    # least[j][g]: the least share mask instance j will have with a job on GPU g, wherever
    # it lands (the intersection over every GPU that can still take it).
    extra: list[list[tuple[int, int, int]]] = [[] for _ in range(n_gpus)]
    for j in rest:
        hs = hosts[j]
        for g in range(n_gpus):
            row = contrib[g]
            m = _FULL
            for h in hs:
                m &= row[h]
                if not m:
                    break
            if m:
                extra[g].append((j, t[j], m))

    def key_on(i: int, g: int, filler: int | None) -> Key:
        base = problem.key(st, i, g)[1] if st.where[i] is not None else problem._key(st, i, g)[1]
        co = [*base]
        for j, tj, m in extra[g]:
            if j != i:
                co.append((tj, _FULL if j == filler else m))
        if filler is not None and all(j != filler for j, _, _ in extra[g]):
            co.append((t[filler], _FULL))
        return (t[i], tuple(sorted(co)))

    def gpu_keys(i: int, g: int, left: int) -> list[Key]:
        # ``left`` free slots of g stay besides i; more than ``spare`` of them: one more
        # instance of ``rest`` lands on g, next to i with every resource.
        if left > spare:
            ok = [f for f in rest if f != i and problem.can_host(st, f, g)
                  and (st.where[i] is not None or problem.can_pair(i, f))]
            if ok:
                return list(dict.fromkeys(key_on(i, g, f) for f in ok))
        return [key_on(i, g, None)]

    # plans[i]: the alternatives (factor, keys per GPU) of instance i
    plans: list[list[tuple[float, list[list[Key]]]]] = []
    for i, where in enumerate(st.where):
        if where is None or st.handle[i] < 0:
            continue
        factor = problem.comm_factor(i, where) if len(where) > 1 else 1.0
        plans.append([(factor, [gpu_keys(i, g, free[g]) for g in where])])
    for i in rest:
        alts: list[tuple[float, list[list[Key]]]] = []
        if jobs[i].gpus == 1:
            seen: set[tuple[Key, ...]] = set()
            for g in hosts[i]:
                ks = gpu_keys(i, g, free[g] - 1)
                sig = tuple(ks)
                if sig not in seen:
                    seen.add(sig)
                    alts.append((1.0, [ks]))
        elif jobs[i].gpus <= problem.machine_size:
            for gpus in _options(problem, st, i):  # one per orbit: symmetric sets score alike
                alts.append((problem.comm_factor(i, gpus),
                             [gpu_keys(i, g, free[g] - 1) for g in gpus]))
        else:  # whole machines: its speed alone
            alts.append((1.0, [[(t[i], ())]]))
        if not alts:
            return -math.inf
        plans.append(alts)
    memo = problem.cache.memo
    missing = {k: None for alts in plans for _, per in alts for ks in per for k in ks
               if k not in memo}
    if missing:
        problem._answer(list(missing))
    if problem.objective == "sum":
        total = 0.0
        for alts in plans:
            total += max(
                f * min(max(problem.mean(memo[k]) for k in ks) for ks in per) for f, per in alts
            )
        return total
    vecs = []
    for alts in plans:
        best = None
        for f, per in alts:
            v = None
            for ks in per:
                w = problem.draws(memo[ks[0]])
                for k in ks[1:]:
                    w = torch.maximum(w, problem.draws(memo[k]))
                v = w if v is None else torch.minimum(v, w)
            assert v is not None
            v = v * f
            best = v if best is None else torch.maximum(best, v)
        assert best is not None
        vecs.append(best)
    if not vecs:
        return 0.0
    stacked = torch.stack(vecs)
    if problem.objective == "max-min":
        return float(stacked.min(0).values.mean())
    return float(torch.quantile(stacked.sum(0), RISK_QUANTILE))
