"""The scaling fixes change no result: greedy's repair pass against the straightforward scan
it replaced, and ring costs memoised per topology against a fresh computation."""

from __future__ import annotations

import functools
import itertools
import zlib

import networkx as nx
import numpy as np
import pytest

from interplace.placement import ClusterState, Job, MeasuredSpeeds, Running, place
from interplace.placement import greedy as greedy_module
from interplace.placement._comm import comm_time
from interplace.placement._problem import Problem, State
from interplace.topology import NodeKind, Topology, builtin

TYPES = [f"t{k}" for k in range(8)]


def _source(seed: int) -> MeasuredSpeeds:
    rng = np.random.default_rng(seed)
    return MeasuredSpeeds({(a, b): float(rng.uniform(0.3, 1.0)) for a in TYPES for b in TYPES})


def _forbid(a: str, b: str) -> bool:
    """``can_share``: a fixed, hash-chosen quarter of the type pairs may share a GPU."""
    return zlib.crc32("|".join(sorted((a, b))).encode()) % 4 == 0


def _reference_repair(problem: Problem, st: State) -> None:
    """The repair pass as it was: every GPU is tried as a blocker's new home."""
    for i in problem.new_instances():
        if st.where[i] is not None or problem.jobs[i].gpus != 1:
            continue
        best: dict[int, tuple[int, ...] | None] | None = None
        best_gain = -float("inf")
        for gpus in problem.candidates(st, i):
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
            for h in range(len(problem.gpus)):
                if h != g and problem.can_host(st, k, h):
                    moves: dict[int, tuple[int, ...] | None] = {k: (h,), i: (g,)}
                    gain = problem.move_gain(st, moves)
                    if gain > best_gain:
                        best, best_gain = moves, gain
        if best is not None and problem.min_gain is not None and best_gain <= problem.min_gain:
            best = None
        if best is not None:
            problem.apply(st, best)


Case = tuple[tuple[object, ...], dict[str, object]]


def _repair_case(seed: int) -> Case:
    """A seeded problem where repair matters: forbidden pairs, running jobs, reserved slots,
    a few gangs, and either spare slots or more jobs than slots."""
    rng = np.random.default_rng(seed)
    spec = ["pcie-8gpu*2", "dgx-a100*2", "dgx1-v100"][seed % 3]
    topo = builtin(spec)
    gpus = topo.gpus()
    cap = 2 + seed % 2
    load = [0.8, 1.0, 1.2, 3.0][seed % 4]
    running = tuple(
        Running(Job(f"r{k}", TYPES[int(rng.integers(len(TYPES)))]), (gpus[int(g)],))
        for k, g in enumerate(rng.choice(len(gpus), size=len(gpus) // 4, replace=False))
    )
    reserved = {gpus[int(g)]: 1 for g in rng.choice(len(gpus), size=2, replace=False)}
    n_jobs = int(load * cap * len(gpus)) - len(running) - 2
    jobs = [Job(f"g{k}", TYPES[int(rng.integers(len(TYPES)))], gpus=2) for k in range(seed % 3)]
    jobs += [Job(f"s{k}", TYPES[int(rng.integers(len(TYPES)))]) for k in range(n_jobs)]
    return (topo, _source(seed), jobs, ClusterState(running)), {
        "max_per_gpu": cap, "can_share": _forbid, "reserved": reserved,
        "min_gain": None if seed % 4 else -0.5,
    }


@pytest.mark.parametrize("seed", range(16))
def test_repair_matches_the_full_scan(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    args, kw = _repair_case(seed)
    fast = greedy_module.greedy(Problem(*args, **kw))  # type: ignore[arg-type]
    fast_ls = place(*args, **kw, policy="local-search")  # type: ignore[arg-type]
    monkeypatch.setattr(greedy_module, "repair", _reference_repair)
    ref = greedy_module.greedy(Problem(*args, **kw))  # type: ignore[arg-type]
    ref_ls = place(*args, **kw, policy="local-search")  # type: ignore[arg-type]
    assert fast.where == ref.where
    assert fast.handle == ref.handle
    assert (fast_ls.jobs, fast_ls.pending) == (ref_ls.jobs, ref_ls.pending)
    assert fast_ls.objective == ref_ls.objective


def test_the_repair_cases_exercise_repair(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the repair pass some of these cases leave more jobs pending: the comparison
    # above compares repairs that move jobs, not two no-ops.
    cases = [_repair_case(s) for s in range(16)]
    with_repair = [greedy_module.greedy(Problem(*a, **kw)) for a, kw in cases]  # type: ignore[arg-type]
    monkeypatch.setattr(greedy_module, "repair", lambda problem, st: None)
    without = [greedy_module.greedy(Problem(*a, **kw)) for a, kw in cases]  # type: ignore[arg-type]
    moved = [a.where != b.where for a, b in zip(with_repair, without, strict=True)]
    assert sum(moved) >= 4


def _names(p: Problem, idx: tuple[int, ...]) -> list[str]:
    return [p.gpus[g] for g in sorted(idx)]


@pytest.mark.parametrize("spec", ["dgx-a100", "pcie-8gpu*2", "dgx1-v100*2", "p4d*2",
                                  "dgx-h100*3"])
def test_ring_costs_shared_across_problems_equal_a_fresh_computation(spec: str) -> None:
    topo = builtin(spec)
    fresh = builtin(spec)  # its own route caches: a computation from scratch
    src = _source(0)
    rng = np.random.default_rng(len(spec))
    first, second = Problem(topo, src, []), Problem(topo, src, [])
    n = len(first.gpus)
    sets = [tuple(int(g) for g in rng.choice(n, size=int(k), replace=False))
            for k in rng.integers(2, min(n, 12) + 1, size=40)]
    sets += [tuple(idx[:k]) for idx in first.machines.values() for k in (2, 4, 8)]
    for p in (first, second, Problem(topo, src, [])):
        for s in sets:
            assert p.comm_cost(s) == comm_time(fresh, _names(p, s)), s
        machine = first.machines[next(iter(first.machines))]
        for k in range(2, 9):
            if k <= len(machine):
                want = min(comm_time(fresh, _names(p, c))
                           for c in itertools.combinations(machine, k))
            else:
                want = comm_time(fresh, _names(p, tuple(range(k))))
            assert p.best_comm_cost(k) == want, k


def test_placements_on_a_warm_topology_equal_a_cold_one(toy: MeasuredSpeeds) -> None:
    jobs = [Job("a", "hog", gpus=4, comm_share=0.4), Job("b", "mid", gpus=2, comm_share=0.1),
            Job("c", "light", gpus=8, comm_share=0.3), Job("d", "x")]
    warm = builtin("dgx1-v100*2")
    for policy in ("greedy", "local-search", "exact"):
        for k in range(len(jobs)):
            batch = jobs[k:] + jobs[:k]
            a = place(warm, toy, batch, policy=policy)
            b = place(builtin("dgx1-v100*2"), toy, batch, policy=policy)
            assert (a.jobs, a.pending, a.objective) == (b.jobs, b.pending, b.objective), policy


def _kind_twins() -> Topology:
    """Two machines with the same edges; n1's switch vertex is a host bridge instead."""
    g = nx.Graph(builtin("pcie-8gpu*2").graph)
    sw = sorted(n for n, d in g.nodes(data=True)
                if d["kind"] == NodeKind.PCIE_SWITCH and d["machine"] == "n1")[0]
    g.nodes[sw]["kind"] = NodeKind.HOST_BRIDGE
    return Topology(g, name="kind-twins")


def test_machines_differing_only_in_vertex_kinds_do_not_share_ring_costs() -> None:
    topo = _kind_twins()
    p = Problem(topo, _source(0), [])
    n0, n1 = p.machines["n0"], p.machines["n1"]
    assert p.machine_signature("n0") != p.machine_signature("n1")
    for a, b in itertools.combinations(range(len(n0)), 2):
        for idx in (n0, n1):
            pair = (idx[a], idx[b])
            assert p.comm_cost(pair) == comm_time(topo, _names(p, pair))
    conn = {m: [topo.connection(*_names(p, (idx[a], idx[b])))
                for a, b in itertools.combinations(range(len(idx)), 2)]
            for m, idx in p.machines.items()}
    assert conn["n0"] != conn["n1"]  # the case is real: the twins' routes differ


def _scan_hosts(problem: Problem, st: State, i: int) -> list[int]:
    """The candidate scan the baseline policies made: can_host of every GPU."""
    return [g for g in range(len(problem.gpus)) if problem.can_host(st, i, g)]


def _reference_spread(problem: Problem, *, seed: int = 0) -> State:
    """``spread`` as it was: each candidate GPU's machine load summed anew."""
    st = problem.empty_state()

    def machine_load(g: int) -> int:
        return sum(problem.taken(st, h) for h in problem.machines[problem.machine_of[g]])

    for i in problem.order():
        n = problem.jobs[i].gpus
        if n == 1:
            options = _scan_hosts(problem, st, i)
            if options:
                g = min(options, key=lambda g: (problem.taken(st, g), machine_load(g), g))
                problem.assign(st, i, (g,))
            continue
        best: tuple[int, ...] | None = None
        best_key: tuple[int, int] | None = None
        for idx in problem.machines.values():
            free = [g for g in idx if problem.can_host(st, i, g)]
            if len(free) < n:
                continue
            load = sum(problem.taken(st, g) for g in idx)
            chosen = tuple(sorted(sorted(free, key=lambda g: (problem.taken(st, g), g))[:n]))
            key = (load, chosen[0])
            if best_key is None or key < best_key:
                best, best_key = chosen, key
        if best is None and n > problem.machine_size:
            whole = problem.gang_candidates(st, i, limit=1)
            best = whole[0] if whole else None
        if best is not None:
            problem.assign(st, i, best)
    return st


@pytest.mark.parametrize("seed", range(8))
def test_hosts_equals_can_host_on_every_gpu(seed: int) -> None:
    args, kw = _repair_case(seed)
    topo, src, jobs, state = args
    rng = np.random.default_rng(seed)
    for can_share in (_forbid, None):
        problem = Problem(topo, src, jobs, state, **{**kw, "can_share": can_share})  # type: ignore[arg-type]
        st = problem.empty_state()
        for i in problem.new_instances():
            assert problem.hosts(st, i) == _scan_hosts(problem, st, i)
            options = _scan_hosts(problem, st, i) if problem.jobs[i].gpus == 1 else []
            if options and rng.random() < 0.7:
                problem.assign(st, i, (options[int(rng.integers(len(options)))],))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("policy", ["random", "spread", "pack", "lucid", "greedy"])
def test_baseline_policies_match_the_full_scan(
    seed: int, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interplace.placement.lucid import lucid

    args, kw = _repair_case(seed)
    kw = {**kw, "can_share": None if seed % 2 else _forbid}
    util = {t: (k % 3) / 3 + 0.1 for k, t in enumerate(TYPES)}
    fn: object = functools.partial(lucid, utilisation=util) if policy == "lucid" else policy
    fast = place(*args, **kw, policy=fn, seed=seed)  # type: ignore[arg-type]
    monkeypatch.setattr(Problem, "hosts", _scan_hosts)
    ref_fn = _reference_spread if policy == "spread" else fn
    ref = place(*args, **kw, policy=ref_fn, seed=seed)  # type: ignore[arg-type]
    assert (fast.jobs, fast.pending, fast.objective) == (ref.jobs, ref.pending, ref.objective)


def test_a_ring_of_more_than_eight_gpus_runs_in_the_topologys_order() -> None:
    # Above eight GPUs the ring is not searched: it runs machine by machine in the topology's
    # order (what NCCL builds), as documented, however the GPUs are given (it ran in the
    # order given: 0.0806 or 0.1275 for the same nine GPUs of dgx1-v100*2).
    topo = builtin("dgx1-v100*2")
    given = ["n1:3", "n0:2", "n0:0", "n1:0", "n0:3", "n0:7", "n1:1", "n0:4", "n0:6"]
    assert comm_time(topo, given) == comm_time(topo, sorted(given, key=topo.gpus().index))
