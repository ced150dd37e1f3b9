"""``exact`` with single-GPU jobs on an asymmetric machine: its symmetry reduction keeps the
optimum.

``exact`` once merged, for a single-GPU job, GPUs of equal standing: GPUs that, with each of
their neighbours, hold the same. On a machine loaded from a file that is not symmetric this
cuts branches holding the optimum. Here an NVSwitch machine (GPU pairs talk over NVLink, so
two GPUs share only what their routes to host memory share) whose socket 0 has GPU 0 alone on
a host bridge and GPUs 1 and 2 behind one PCIe switch, and whose socket 1 has GPUs 3, 4 and 5
each alone on a host bridge. GPUs 0 and 3 have equal standing (two socket neighbours each) but
no symmetry maps one onto the other: 0's neighbours share a switch, 3's do not. With the small
fitted model (cross-GPU contention scored) the first job went on 1 (with 0) and never on 3,
and ``exact`` returned 4.1888925 instead of 4.1888938 (``sum``) and 4.0834385 instead of
4.0834386 (``risk-averse``) while claiming optimality. Merging only GPUs that a symmetry
fixing the state maps onto each other keeps the optimum; each case is compared with the brute
force of ``test_exact_bound``.
"""

from __future__ import annotations

import numpy as np
import pytest

from interplace.model import InterferenceModel
from interplace.placement import Job, Problem
from interplace.placement.exact import _options
from interplace.topology import Topology, TopologyBuilder

from .test_exact_bound import OBJECTIVES
from .test_exact_gangs import _agrees


def _uneven() -> Topology:
    b = TopologyBuilder()
    s0, s1 = b.add_numa(0), b.add_numa(1)
    nvswitch = b.add_nvswitch()
    gpus = [b.add_gpu("0", b.add_host_bridge(s0))]
    switch = b.add_switch(b.add_host_bridge(s0))
    gpus += [b.add_gpu("1", switch), b.add_gpu("2", switch)]
    gpus += [b.add_gpu(str(k), b.add_host_bridge(s1)) for k in (3, 4, 5)]
    for g in gpus:
        b.add_nvlink(g, nvswitch, 6)
    return b.build(name="uneven")


def _singles(model: InterferenceModel, seed: int, objective: str) -> Problem:
    types = list(model.jobs)
    rng = np.random.default_rng(seed)
    jobs = [Job(f"s{k}", types[int(rng.integers(4))]) for k in range(int(rng.integers(3, 5)))]
    return Problem(_uneven(), model, jobs, objective=objective, num_samples=16, seed=seed)


def test_equal_standing_is_not_symmetry(small_model: InterferenceModel) -> None:
    problem = _singles(small_model, 5, "sum")
    assert problem.info["cross_gpu"] is True
    socket = 1 << 4  # host_cpu alone: two GPUs of one socket on different host bridges
    assert problem.nbrs[0] == [(1, socket), (2, socket)]
    assert problem.nbrs[3] == [(4, socket), (5, socket)]  # the same standing as GPU 0
    # GPUs 1 and 2 are twins, 4 and 5 too, and 3, 4, 5 all alike; 0 is like none of them
    assert _options(problem, problem.empty_state(), problem.order()[0]) == [(0,), (1,), (3,)]


@pytest.mark.parametrize(("objective", "want"), [
    ("sum", 4.188893804972691), ("risk-averse", 4.083438517305622),
])
def test_single_jobs_on_an_uneven_machine(
    small_model: InterferenceModel, objective: str, want: float
) -> None:
    # The check is _agrees: exact proven and equal to the brute force. ``want`` is the brute
    # force's optimum with the small model on the machine the bug was found on (its restarts
    # stepped together since 2026-11-30; with the restarts run one by one it was 4.188893803
    # and 4.083438645, where exact found 4.188892532 (sum) and 4.083438468 (risk-averse)
    # before its fix). It only identifies the case: the small model's fit moves in its last
    # bits between CPUs (other vector kernels, other BLAS paths; on an AVX-512 machine
    # 4.188894017 and 4.083441187), so it is held to a relative 1e-4 (4e-4): the moves seen
    # are 1,000 times smaller, and the other job mixes of this machine and model (seeds 0-11)
    # have optima 0.019 or more away (4.170 and 4.225 the nearest).
    value = _agrees(_singles(small_model, 5, objective))
    assert value == pytest.approx(want, rel=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_single_jobs_on_an_uneven_machine_sweep(
    small_model: InterferenceModel, objective: str
) -> None:
    for seed in range(12):
        _agrees(_singles(small_model, seed, objective))
