"""Placement's public calls refuse what they cannot use with the project's one-line InputError
(the fiftieth session's API audit): each case below was a silent wrong answer or Python's,
numpy's or torch's own error before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest
import torch

from interplace.errors import InputError
from interplace.model import Query
from interplace.placement import (
    ClusterState,
    Job,
    JobPlacement,
    MeasuredOverModel,
    MeasuredSpeeds,
    Placement,
    Running,
    SpeedCache,
    comm_factor,
    comm_time,
    place,
    score,
)
from interplace.topology import builtin

SPEED = {("a", "a"): 0.5, ("a", "b"): 0.9, ("b", "a"): 0.8, ("b", "b"): 0.4}
PCIE = builtin("pcie-8gpu")
DGX = builtin("dgx-a100")


def _ms() -> MeasuredSpeeds:
    return MeasuredSpeeds(SPEED)


def _jobs() -> list[Job]:
    return [Job("1", "a"), Job("2", "a"), Job("3", "b")]


@pytest.mark.parametrize("forbidden", [[("a", "b")], {("b", "a")}, (["a", "b"],),
                                       frozenset({frozenset(("a", "b"))})])
def test_forbidden_pairs_in_any_form_keep_the_types_apart(forbidden: Any) -> None:
    # A set or list of tuples was kept as given, and can_share looks for frozensets:
    # every pair was allowed, and exact search put an a and a b on every GPU.
    ms = MeasuredSpeeds(SPEED, forbidden=forbidden)
    assert not ms.can_share("a", "b") and not ms.can_share("b", "a") and ms.can_share("a", "a")
    jobs = [Job(f"a{i}", "a") for i in range(8)] + [Job(f"b{i}", "b") for i in range(8)]
    p = place(PCIE, ms, jobs, policy="exact")
    by_gpu: dict[str, set[str]] = {}
    for jp in p.jobs:
        for g in jp.gpus:
            by_gpu.setdefault(g, set()).add(jp.job.job)
    assert all(len(types) == 1 for types in by_gpu.values())


def test_from_pairs_keeps_forbidden_pairs_given_as_tuples() -> None:
    table = pd.DataFrame({"job": ["a", "b"], "co_runner": ["b", "a"], "speed": [0.5, 0.7]})
    assert not MeasuredSpeeds.from_pairs(table, forbidden=[("a", "b")]).can_share("b", "a")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # MeasuredSpeeds and its table
        (lambda: MeasuredSpeeds([(("a", "b"), 0.5)]), "must map"),  # type: ignore[arg-type]
        (lambda: MeasuredSpeeds({("a", "b", "c"): 0.5}), "not a .job, co_runner. pair"),  # type: ignore[dict-item]
        (lambda: MeasuredSpeeds({"ab": 0.5}), "not a .job, co_runner. pair"),  # type: ignore[dict-item]
        (lambda: MeasuredSpeeds({(1, 2): 0.5}), "not a .job, co_runner. pair"),  # type: ignore[dict-item]
        (lambda: MeasuredSpeeds(SPEED, default="x"), "default speed"),  # type: ignore[arg-type]
        (lambda: MeasuredSpeeds(SPEED, forbidden="ab"), "forbidden must be a collection"),  # type: ignore[arg-type]
        (lambda: MeasuredSpeeds(SPEED, forbidden=[("a", "b", "c")]), "not a pair of job types"),  # type: ignore[arg-type]
        (lambda: MeasuredSpeeds.from_pairs({"job": ["a"]}), "must be a pandas DataFrame"),  # type: ignore[arg-type]
        (lambda: MeasuredSpeeds.from_pairs(pd.DataFrame(
            {"job": ["a"], "co_runner": ["b"], "speed": ["x"]})), "speed is not a numeric"),
        (lambda: MeasuredSpeeds.from_pairs(pd.DataFrame(
            {"job": [None, "b"], "co_runner": ["b", "a"], "speed": [0.5, 0.6]})),
         r"1 row\(s\) without a job"),
        (lambda: MeasuredSpeeds.from_pairs(pd.DataFrame(
            {"job": ["a", "b"], "co_runner": ["b", "a"], "speed": [float("nan"), 0.6]})),
         r"1 row\(s\) without a speed"),
        (lambda: _ms().posterior_speed([Query("a", ("b",))], num_samples=0),
         "num_samples must be an integer >= 1"),
        (lambda: _ms().posterior_speed(["a"]), "queries must be Query objects"),  # type: ignore[list-item]
        (lambda: MeasuredOverModel(_ms(), [1]), "must be a pandas DataFrame"),  # type: ignore[arg-type]
        (lambda: MeasuredOverModel("m", pd.DataFrame()), "needs a fitted model"),  # type: ignore[arg-type]
        # SpeedCache: num_samples 0 was kept, 2.7 cut to 2, seed -1 kept
        (lambda: SpeedCache(_ms(), num_samples=0), "num_samples must be an integer >= 1"),
        (lambda: SpeedCache(_ms(), num_samples=2.7), "num_samples must be an integer >= 1"),  # type: ignore[arg-type]
        (lambda: SpeedCache(_ms(), seed=-1), "seed must be an integer"),
        (lambda: SpeedCache("x"), "needs a speed source"),  # type: ignore[arg-type]
        # place: each argument of the wrong kind
        (lambda: place("pcie-8gpu", _ms(), _jobs()), "topology must be a Topology"),  # type: ignore[arg-type]
        (lambda: place(PCIE, None, _jobs()), "model must be a fitted model"),  # type: ignore[arg-type]
        (lambda: place(PCIE, _ms(), Job("1", "a")), "jobs must be a sequence of Job objects"),  # type: ignore[arg-type]
        (lambda: place(PCIE, _ms(), "ab"), "jobs must be a sequence of Job objects"),  # type: ignore[arg-type]
        (lambda: place(PCIE, _ms(), [Job("1", "a"), "x"]), "jobs must be Job objects"),  # type: ignore[list-item]
        (lambda: place(PCIE, _ms(), _jobs(), [Running(Job("9", "a"), ("0",))]),  # type: ignore[arg-type]
         "state must be a ClusterState"),
        (lambda: place(PCIE, _ms(), _jobs(), can_share="no"), "can_share must be a function"),  # type: ignore[arg-type]
        (lambda: place(PCIE, _ms(), _jobs(), cross_gpu="no"), "cross_gpu must be True, False"),  # type: ignore[arg-type]
        (lambda: place(PCIE, _ms(), _jobs(), cache="c"), "cache must be a SpeedCache"),  # type: ignore[arg-type]
        (lambda: place(PCIE, _ms(), _jobs(), reserved=[("0", 1)]), "reserved must map"),  # type: ignore[arg-type]
        # score: max_per_gpu 0 or -3 was taken as 1; GPUs "10" were GPUs "1" and "0"
        (lambda: score(PCIE, _ms(), {Job("1", "a"): ["0"]}, max_per_gpu=0),
         "max_per_gpu must be an integer >= 1 or None"),
        (lambda: score(PCIE, _ms(), {Job("1", "a"): ["0"]}, max_per_gpu="2"),  # type: ignore[arg-type]
         "max_per_gpu must be an integer >= 1 or None"),
        (lambda: score(PCIE, _ms(), {Job("1", "a", gpus=2): "10"}), "GPUs must be a sequence"),
        (lambda: score(PCIE, _ms(), {Job("1", "a"): None}), "GPUs must be a sequence"),  # type: ignore[dict-item]
        (lambda: score(PCIE, _ms(), {Job("1", "a"): ["0"]}, state="s"),  # type: ignore[arg-type]
         "state must be a ClusterState"),
        # the communication model: NaN came back as the factor, a string was read per letter
        (lambda: comm_factor(DGX, ["0", "1"], float("nan"), best=1.0), "share must be in"),
        (lambda: comm_factor(DGX, ["0", "1"], 2.0, best=1.0), "share must be in"),
        (lambda: comm_factor(DGX, ["0", "1"], 0.2, best=float("nan")), "best must be a finite"),
        (lambda: comm_time(DGX, "01"), "not the string"),
        (lambda: comm_time(DGX, ["0", "0"]), "GPU '0' given twice"),
        # domain objects
        (lambda: Job("j", "a", counters=[("gpu_util_pct", 1.0), ("gpu_util_pct", 2.0)]),  # type: ignore[arg-type]
         "counter gpu_util_pct given twice"),
        (lambda: Running(Job("1", "a"), (0,)), "GPU ids must be non-empty strings"),  # type: ignore[arg-type]
        (lambda: JobPlacement(Job("1", "a"), ("0",), 1.0, 2.0, 0.5), "above speed_q95"),
        (lambda: JobPlacement(Job("1", "a"), ["0"], 1.0, 0.9, 1.1), "must be a tuple"),  # type: ignore[arg-type]
        (lambda: JobPlacement("x", ("0",), 1.0, 0.9, 1.1), "must be a Job"),  # type: ignore[arg-type]
        (lambda: JobPlacement(Job("1", "a"), ("0",), "1", 0.9, 1.1), "speed_mean must be"),  # type: ignore[arg-type]
        (lambda: JobPlacement(Job("1", "a"), ("0",), 1.0, 0.9, 1.1, running="no"),  # type: ignore[arg-type]
         "running must be True or False"),
        (lambda: Placement(("x",), (), 0.0, 0.0, 0.0), "tuple of JobPlacement"),  # type: ignore[arg-type]
        (lambda: Placement((), (), "1", 0.0, 0.0), "objective must be a finite number"),  # type: ignore[arg-type]
        (lambda: Placement((), (), 0.0, 1.0, 0.0), "above objective_q95"),
    ],
)
def test_a_call_it_cannot_use_is_one_input_error(
    call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(InputError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_numpy_numbers_still_make_placements() -> None:
    import numpy as np

    jp = JobPlacement(Job("1", "a"), ("0",), np.float32(0.5), np.float64(0.4), np.float32(0.6))  # type: ignore[arg-type]
    assert isinstance(jp.speed_mean, float) and jp.speed_q05 == pytest.approx(0.4)
    p = Placement((jp,), (), np.float64(0.5), np.float32(0.4), np.float64(0.6))  # type: ignore[arg-type]
    assert isinstance(p.objective_q05, float)
    state = ClusterState((Running(Job("9", "a"), ("0",)),))
    assert place(PCIE, _ms(), _jobs(), state, cross_gpu=False).info["cross_gpu"] is False
    post = _ms().posterior_speed([Query("a", ("b",))], num_samples=3)
    assert post.speed.shape == (3, 1) and torch.all(post.speed == 0.9)
