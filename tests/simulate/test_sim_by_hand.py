"""The simulator against a schedule worked by hand: jobs sharing a GPU run at their measured
co-located speed, and every metric adds up.

An audit of the suite (2026-12-01) found that the simulator's ground truth could return 1 for
every job whatever shared its GPU, utilisation could count running jobs rather than busy GPUs,
p99 could be the 0.9 quantile, the queueing delay the run time, the placement window one job,
and multi-GPU jobs could take any type, with every test still passing."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from interplace.placement import MeasuredSpeeds
from interplace.simulate import (
    GroundTruth,
    PlacementScheduler,
    SimJob,
    assign_types,
    simulate,
)
from interplace.topology import builtin

Gpus = tuple[str, ...]


class Fixed:
    """x and y share GPU 0; z runs on GPU 1, and w there once z is done."""

    name = "fixed"

    def decide(self, queue: Sequence[SimJob], running: Sequence[tuple[SimJob, Gpus]],
               now: float) -> dict[str, Gpus]:
        busy = {g for _, gpus in running for g in gpus}
        out: dict[str, Gpus] = {}
        for j in queue:
            if j.job_id in ("x", "y"):
                out[j.job_id] = ("0",)
            elif j.job_id == "z" or (j.job_id == "w" and "1" not in busy):
                out[j.job_id] = ("1",)
        return out


def test_colocated_jobs_run_at_their_measured_speed_and_metrics_add_up() -> None:
    truth = GroundTruth("toy", MeasuredSpeeds({("a", "a"): 0.5}), ("a",), ("a",))
    jobs = [SimJob("x", 0.0, 1, 100.0, "a"), SimJob("y", 0.0, 1, 60.0, "a"),
            SimJob("z", 0.0, 1, 50.0, "a"), SimJob("w", 10.0, 1, 30.0, "a")]
    r = simulate(jobs, builtin("pcie-8gpu"), truth, Fixed())
    # x and y at 0.5 each until y's 60 s of work are done at t=120; x then has 40 s left alone.
    finish = {k: v["finish_s"] for k, v in r.jobs.items()}
    assert finish == pytest.approx({"x": 160.0, "y": 120.0, "z": 50.0, "w": 80.0})
    m = r.metrics()
    assert m["avg_jct_s"] == pytest.approx((160 + 120 + 50 + 70) / 4)
    # sorted JCTs 50, 70, 120, 160: the 0.99 quantile interpolates 97% of the way to 160
    assert m["p99_jct_s"] == pytest.approx(120 + 0.97 * 40)
    assert m["avg_queue_s"] == pytest.approx(40 / 4)
    assert m["makespan_s"] == pytest.approx(160.0)
    # busy GPUs: 2 until t=80, then 1 until 160, of 8 GPUs over 160 s
    assert m["utilisation"] == pytest.approx((2 * 80 + 1 * 80) / (160 * 8))
    assert m["colocated_share"] == pytest.approx(0.5)


def test_the_scheduler_places_a_window_of_the_queue() -> None:
    speeds = MeasuredSpeeds({("a", "a"): 0.5})
    sched = PlacementScheduler("p", builtin("pcie-8gpu"), speeds, "greedy", 2)
    queue = [SimJob(f"j{k}", 0.0, 1, 10.0, "a") for k in range(5)]
    assert len(sched.decide(queue, [], 0.0)) == 5  # 16 free slots: all five start


def test_multi_gpu_jobs_get_multi_gpu_types() -> None:
    jobs = [SimJob(f"j{k}", 0.0, 1 + k % 2, 10.0) for k in range(40)]
    typed = assign_types(jobs, ("a", "b", "c"), 0, multi_gpu_types=("c",))
    assert {j.job_type for j in typed if j.gpus > 1} == {"c"}
    assert {j.job_type for j in typed if j.gpus == 1} == {"a", "b", "c"}
