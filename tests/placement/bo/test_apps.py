"""The shipped allocation problems: GPU splits, co-location by the model, MPS percentages."""

from __future__ import annotations

import itertools
import sys

import pytest

from interplace.collectors.profile import WorkloadSpec
from interplace.errors import InputError
from interplace.model import InterferenceModel
from interplace.placement.bo import (
    CoLocation,
    GpuSplit,
    MpsPair,
    Tuner,
    gavel_scaleout,
    isolated_throughputs,
    maximize,
)

GAVEL = gavel_scaleout("v100")


def test_gavel_scaleout_has_every_count_for_its_jobs() -> None:
    assert len(GAVEL) == 19
    assert all(sorted(t) == [1, 2, 4, 8] and min(t.values()) > 0 for t in GAVEL.values())
    assert "A3C" not in GAVEL  # measured on one GPU only
    assert "A3C" in gavel_scaleout("v100", scale=(1,))


@pytest.mark.parametrize(("jobs", "capacity"), [
    ((0, 1, 2, 3), 16), ((4, 9, 9, 14), 7), ((2, 5, 11, 17), 0), ((1, 3, 6, 18), 12)])
def test_the_exact_optimum_equals_brute_force(jobs: tuple[int, ...], capacity: int) -> None:
    names = sorted(GAVEL)
    split = GpuSplit(GAVEL, tuple(names[i] for i in jobs), capacity)
    space = split.space()
    brute = max(split.value(p) for p in space.grid())
    point, value = split.optimum()
    assert value == pytest.approx(brute, rel=1e-12)
    assert space.feasible(point) and sum(int(v) for v in point.values()) <= capacity  # type: ignore[call-overload]
    # the brute force covers exactly the feasible splits
    n_feasible = sum(1 for c in itertools.product(split.options, repeat=4) if sum(c) <= capacity)
    assert len(list(space.grid())) == n_feasible


def test_the_value_is_the_sum_of_speed_ups_and_refuses_overcommitment() -> None:
    split = GpuSplit(GAVEL, ("LM (batch size 10)", "ResNet-50 (batch size 64)"), 8)
    lm, rn = GAVEL["LM (batch size 10)"], GAVEL["ResNet-50 (batch size 64)"]
    assert split.value({"g0": 4, "g1": 2}) == pytest.approx(lm[4] / lm[1] + rn[2] / rn[1])
    assert split.value({"g0": 0, "g1": 1}) == pytest.approx(1.0)
    with pytest.raises(InputError, match="breaks a constraint"):
        split.value({"g0": 8, "g1": 1})
    with pytest.raises(InputError, match="no throughputs for job 'nope'"):
        GpuSplit(GAVEL, ("nope",), 8)
    with pytest.raises(InputError, match="no positive throughput on 2 GPU"):
        GpuSplit({"a": {1: 1.0}}, ("a",), 8, options=(0, 1, 2))


def test_the_tuner_never_proposes_a_split_over_capacity() -> None:
    names = sorted(GAVEL)
    split = GpuSplit(GAVEL, tuple(names[i] for i in (0, 3, 6, 9, 12, 15)), 16)
    seen = []

    def f(p: dict[str, object]) -> float:
        seen.append(sum(int(v) for v in p.values()))  # type: ignore[call-overload]
        return split.value(p)

    r = maximize(f, split.space(), 12, seed=0, n_init=6, batch=2)
    assert len(seen) == 12 and max(seen) <= 16
    _, best = split.optimum()
    assert r.best_value is not None and r.best_value <= best + 1e-9


def test_colocation_scores_and_its_exact_optimum(small_model: InterferenceModel) -> None:
    c = CoLocation(small_model, ("job0", "job1", "job2", "job3"), gpus=2)
    alone = c.value({"j0": "0", "j1": "1", "j2": "1", "j3": "1"})
    together = c.value({"j0": "0", "j1": "0", "j2": "0", "j3": "0"})
    assert together < alone <= 4.0 + 0.2  # speeds are ~1 alone, less when sharing
    # relabelling the GPUs changes nothing: the draws are common to every evaluation
    assert c.value({"j0": "1", "j1": "0", "j2": "0", "j3": "0"}) == pytest.approx(alone)
    space = c.space()
    brute = max(c.value(dict(zip(c.names, g, strict=True)))
                for g in itertools.product("01", repeat=4))
    point, value = c.optimum()
    assert value == pytest.approx(brute, rel=1e-9) and space.check(point) == point
    r = maximize(c, space, 6, seed=0, n_init=3)
    assert len(r.trials) == 6 and r.best_value is not None and r.best_value <= value + 1e-9
    with pytest.raises(InputError, match="weights"):
        CoLocation(small_model, ("job0",), gpus=1, weights=(1.0, 2.0))


# A job of the profile protocol whose work per 10 ms step is its MPS percentage / 100, so its
# throughput is proportional to the percentage the objective sets for it.
PCT_JOB = """
import os, sys, time
share = float(os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) / 100
print("INTERPLACE_UNIT steps", flush=True)
if os.environ.get("INTERPLACE_WAIT_GO") == "1":
    sys.stdin.readline()
end = time.monotonic() + float(sys.argv[1])
n = 0.0
print(f"INTERPLACE_PROGRESS {time.monotonic()!r} 0", flush=True)
while time.monotonic() < end:
    time.sleep(0.01)
    n += share
    print(f"INTERPLACE_PROGRESS {time.monotonic()!r} {n!r}", flush=True)
"""


def _job(name: str) -> WorkloadSpec:
    return WorkloadSpec(name, (sys.executable, "-c", PCT_JOB, "{seconds}"))


def test_mps_pair_sets_each_jobs_percentage_and_reads_its_throughput() -> None:
    # On the CPU in timeslice mode: the plumbing up to the GPU (MPS itself is not exercised).
    kw = {"mode": "timeslice", "device": "cpu", "warmup_s": 0.05, "measure_s": 0.4}
    only_a = MpsPair(_job("a"), _job("b"), reference=(1.0, 1e12), **kw)  # type: ignore[arg-type]
    hi = only_a.value({"mps_a": 100, "mps_b": 50})
    lo = only_a.value({"mps_a": 20, "mps_b": 50})
    # throughput = steps/s x share; steps/s is ~90 on an idle core and varies by a few tens of
    # percent between runs on a loaded one, so the 5x share ratio shows up within [3.5, 7]
    assert hi > 10 and 3.5 < hi / lo < 7
    with pytest.raises(InputError, match="outside"):
        only_a.value({"mps_a": 5, "mps_b": 50})


def test_mps_pair_commands_keep_a_builtin_workload_builtin() -> None:
    # the profiler checks CUDA up front for built-in workloads; the percentage must not hide them
    a = WorkloadSpec("a", (sys.executable, "-c", "pass"), builtin=True)
    pair = MpsPair(a, _job("b"), reference=(1.0, 1.0))
    ca, cb = pair.commands({"mps_a": 30, "mps_b": 70})
    assert (ca.builtin, cb.builtin) == (True, False)
    assert ca.argv[:2] == ("env", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30")


def test_isolated_references_and_mps_needs_its_daemon() -> None:
    a = WorkloadSpec("a", (sys.executable, "-c", PCT_JOB.replace(
        'os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]', '"100"'), "{seconds}"))
    b = WorkloadSpec("b", a.argv)
    ra, rb = isolated_throughputs(a, b, mode="timeslice", device="cpu", warmup_s=0.05,
                                  measure_s=0.3)
    assert ra > 10 and rb > 10
    pair = MpsPair(a, b, reference=(ra, rb))  # the default: mode "mps" on the GPU
    with pytest.raises(InputError, match="mps"):  # no GPU, no MPS daemon here
        pair.value({"mps_a": 50, "mps_b": 50})
    with pytest.raises(InputError, match="different names"):
        MpsPair(a, a, reference=(1.0, 1.0))


def test_a_tuner_over_a_split_reads_back_from_its_space() -> None:
    split = GpuSplit(GAVEL, tuple(sorted(GAVEL)[:3]), 8)
    t = Tuner(split.space(), maximize=True, seed=1, n_init=3)
    for p in t.ask(3):
        t.tell(p, split(p))
    assert all(split.space().feasible(tr.params) for tr in t.trials)


def test_a_split_with_no_feasible_point_is_one_line() -> None:
    # Three jobs needing at least one GPU each on two: optimum() raised a bare ValueError.
    speeds = {"a": {1: 1.0, 2: 1.9}, "b": {1: 2.0, 2: 3.0}, "c": {1: 1.0, 2: 1.5}}
    with pytest.raises(InputError, match="no split of 2 GPUs gives every job one of"):
        GpuSplit(speeds, ("a", "b", "c"), capacity=2, options=(1, 2)).optimum()
