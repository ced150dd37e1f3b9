"""``exact``'s tight bound: exact still finds the optimum a brute-force enumeration finds.

Small instances (2-5 new jobs, a gang among them, running jobs and reserved slots to make
GPUs scarce) on ``pcie-8gpu`` (every GPU contends with every other across the PCIe switch)
and ``dgx-a100``, scored by the small fitted model and by measured speeds (some above 1, for
which no bound is used), under the three objectives and several seeds. The brute force tries
every placement (every GPU for a single job, every GPU set inside a machine for a gang, or
pending) with no symmetry reduction; the bound is also checked directly against the best
completion of random partial states.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from interplace.placement import ClusterState, Job, MeasuredSpeeds, Problem
from interplace.placement._types import Running
from interplace.placement.exact import _contributions, exact, tight_bound
from interplace.topology import builtin

OBJECTIVES = ("sum", "max-min", "risk-averse")
SEEDS = (0, 1, 2)
TOL = 1e-9

# Measured pairs of three types, some above 1 (a co-runner that helps): no bound applies.
FAST = {
    (a, b): v
    for (a, b), v in {
        ("p", "p"): 0.7, ("p", "q"): 1.1, ("p", "r"): 0.5,
        ("q", "p"): 0.9, ("q", "q"): 0.6, ("q", "r"): 1.05,
        ("r", "p"): 0.8, ("r", "q"): 0.75, ("r", "r"): 0.4,
    }.items()
}
# The same types, never faster than alone.
SLOW = {k: min(v, 0.95) for k, v in FAST.items()}


def _options(problem: Problem, st, i: int) -> list[tuple[int, ...] | None]:
    n = problem.jobs[i].gpus
    out: list[tuple[int, ...] | None] = [None]
    if n == 1:
        out += [(g,) for g in range(len(problem.gpus)) if problem.can_host(st, i, g)]
        return out
    for idx in problem.machines.values():
        free = [g for g in idx if problem.can_host(st, i, g)]
        out += list(itertools.combinations(free, n))
    return out


def brute_force(problem: Problem, st, rest: list[int]) -> tuple[int, float, float]:
    """Over every completion of ``st`` placing some of ``rest``: the most jobs placed, the
    best objective among those, and the best objective of completions placing them all."""
    best = [-1, -math.inf, -math.inf]

    def walk(k: int, placed: int) -> None:
        if k == len(rest):
            value = problem.value(st)
            if placed > best[0] or (placed == best[0] and value > best[1]):
                best[0], best[1] = placed, value
            if placed == len(rest):
                best[2] = max(best[2], value)
            return
        i = rest[k]
        for gpus in _options(problem, st, i):
            if gpus is None:
                walk(k + 1, placed)
                continue
            problem.assign(st, i, gpus)
            walk(k + 1, placed + 1)
            problem.unassign(st, i)

    walk(0, 0)
    return int(best[0]), float(best[1]), float(best[2])


def _instance(topology: str, source, types: list[str], seed: int, objective: str) -> Problem:
    """A random small instance: GPUs made scarce by reserved slots and a running job."""
    rng = np.random.default_rng(seed)
    topo = builtin(topology)
    gpus = list(topo.gpus())
    free = sorted(rng.choice(len(gpus), size=4, replace=False).tolist())
    reserved = {g: 2 for k, g in enumerate(gpus) if k not in free}
    reserved[gpus[free[int(rng.integers(4))]]] = int(rng.integers(0, 2))
    run_gpu = gpus[free[int(rng.integers(4))]]
    if reserved.get(run_gpu, 0):
        reserved[run_gpu] = 0
    state = ClusterState((Running(Job("r0", types[int(rng.integers(len(types)))]), (run_gpu,)),))
    n_single = int(rng.integers(1, 5))
    jobs = [Job("g", types[int(rng.integers(len(types)))], gpus=2)]
    jobs += [Job(f"s{k}", types[int(rng.integers(len(types)))]) for k in range(n_single)]
    return Problem(topo, source, jobs, state, objective=objective, reserved=reserved,
                   num_samples=32, seed=seed)


def _check(problem: Problem) -> None:
    got = exact(problem)
    assert problem.info["exact"] is True
    placed = sum(1 for i in problem.new_instances() if got.where[i] is not None)
    st = problem.empty_state()
    want_placed, want_value, _ = brute_force(problem, st, list(problem.new_instances()))
    assert placed == want_placed
    assert problem.value(got) == pytest.approx(want_value, abs=TOL)


def _check_bound(problem: Problem, seed: int) -> None:
    """The bound is at least the best completion placing every remaining job, at the root and
    at random partial states."""
    rng = np.random.default_rng(seed)
    contrib = _contributions(problem)
    order = problem.order()
    for _ in range(3):
        st = problem.empty_state()
        cut = int(rng.integers(0, len(order)))
        for i in order[:cut]:
            opts = [o for o in _options(problem, st, i) if o is not None]
            if opts:
                problem.assign(st, i, opts[int(rng.integers(len(opts)))])
        rest = [i for i in order if st.where[i] is None]
        _, _, all_placed = brute_force(problem, st, rest)
        bound = tight_bound(problem, st, rest, contrib)
        if all_placed == -math.inf:
            continue  # no completion places them all: any bound is valid
        assert bound >= all_placed - 1e-12


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("topology", ["pcie-8gpu", "dgx-a100"])
def test_exact_matches_brute_force_model(small_model, topology, objective):
    types = list(small_model.jobs)
    for seed in SEEDS:
        problem = _instance(topology, small_model, types, seed, objective)
        assert problem.info["cross_gpu"] is True
        _check(problem)
        assert problem.info["exact_bound"] is True
        _check_bound(problem, seed)


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("table", ["slow", "fast"])
def test_exact_matches_brute_force_measured(table, objective):
    source = MeasuredSpeeds(SLOW if table == "slow" else FAST)
    for seed in SEEDS:
        problem = _instance("pcie-8gpu", source, ["p", "q", "r"], seed, objective)
        _check(problem)
        assert problem.info["exact_bound"] is (table == "slow")
        if table == "slow":
            _check_bound(problem, seed)


def test_tight_bound_cuts_in_these_tests(small_model):
    # The brute-force comparisons above test something only if the tight bound prunes.
    cuts = 0
    for seed in SEEDS:
        problem = _instance("pcie-8gpu", small_model, list(small_model.jobs), seed, "sum")
        exact(problem)
        cuts += int(problem.info["exact_tight_cuts"])  # type: ignore[call-overload]
    assert cuts > 0


def test_gang_instances_proven_within_budget(small_model):
    """The instances that used to exhaust the node budget (200,000 nodes, unproven) on a
    topology with cross-GPU contention are proven optimal in a few thousand nodes."""
    topo = builtin("pcie-8gpu")
    j = small_model.jobs
    cases = [
        [Job("g4", j[0], gpus=4), Job("g2", j[1], gpus=2), Job("a", j[2]), Job("b", j[3]),
         Job("c", j[1])],
        [Job("g2", j[0], gpus=2)] + [Job(f"j{k}", j[k % 4]) for k in range(8)],
    ]
    for jobs in cases:
        problem = Problem(topo, small_model, jobs)
        exact(problem)
        assert problem.info["exact_method"] == "branch-and-bound"
        assert problem.info["exact"] is True
        assert int(problem.info["nodes"]) < 20_000  # type: ignore[call-overload]
