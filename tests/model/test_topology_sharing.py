"""Topology-shaped sharing: fit data with co-runners on different GPUs of a p4d, known truth.

``synthetic(8, seed=0, topology=p4d, cross_gpu=0.5)`` places about half of the 36 pair runs
on two GPUs behind one PCIe switch (which share the PCIe link and the socket's host CPU, not
the GPU), the rest on one GPU. Half the co-located runs are held out; one plain SVI fit on the
rest (``restarts=1``, about 11 s; what is tested is the topology's shares, not the small-data
default's mixture of four restarts, which takes four times as long) is shared by every test
here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

from interplace.datasets import CoLocationData, synthetic
from interplace.errors import InputError
from interplace.model import (
    InterferenceModel,
    Query,
    fit,
    holdout_split,
    row_queries,
    score,
    shared_resources,
)
from interplace.topology import Topology, load


@dataclass
class Case:
    topo: Topology
    data: CoLocationData
    model: InterferenceModel
    held: pd.DataFrame  # held-out cross-GPU rows: run_id, job, co, device, co_device, truth


@pytest.fixture(scope="module")
def case() -> Case:
    topo = load("p4d")
    data = synthetic(8, seed=0, topology=topo, cross_gpu=0.5)
    train, test = holdout_split(data, holdout_frac=0.5, seed=0)
    model = fit(train, seed=0, topology=topo, restarts=1)
    assert data.truth is not None
    runs = data.runs.assign(truth=data.truth["speed"])
    rows: list[dict[str, Any]] = []
    for rid, g in runs.loc[runs["run_id"].isin(set(test["run_id"]))].groupby("run_id"):
        if g["device"].nunique() < 2:
            continue
        for me, other in ((0, 1), (1, 0)):
            rows.append(
                {
                    "run_id": rid,
                    "job": g["job"].iloc[me],
                    "co": g["job"].iloc[other],
                    "device": g["device"].iloc[me],
                    "co_device": g["device"].iloc[other],
                    "truth": g["truth"].iloc[me],
                }
            )
    return Case(topo, data, model, pd.DataFrame(rows))


def test_generator_and_model_agree_on_what_gpus_share(case: Case) -> None:
    # The generator's truth["shared"] (read off the domains without importing the model) is
    # what the model's shared_resources says for the same two GPUs.
    assert case.data.truth is not None
    runs = case.data.runs.assign(shared=case.data.truth["shared"])
    n_cross = 0
    for _, g in runs.groupby("run_id"):
        if len(g) == 2:
            a, b = g["device"].tolist()
            n_cross += a != b
            assert g["shared"].iloc[0] == g["shared"].iloc[1] == shared_resources(case.topo, a, b)
    assert n_cross > 0


def test_fit_needs_the_topology(case: Case) -> None:
    assert case.model.jobs == tuple(f"job{j}" for j in range(8))
    with pytest.raises(InputError, match="pass a topology so the model knows what they share"):
        fit(case.data, seed=0, steps=10, min_steps=0)


def test_cross_gpu_predictions_need_the_right_shares(case: Case) -> None:
    held = case.held
    assert held["run_id"].nunique() >= 6  # enough held-out cross-GPU runs to compare on
    right = [
        Query(j, (c,), shares=(shared_resources(case.topo, d, cd),))
        for j, c, d, cd in zip(
            held["job"], held["co"], held["device"], held["co_device"], strict=True
        )
    ]
    same_gpu = [Query(j, (c,)) for j, c in zip(held["job"], held["co"], strict=True)]
    truth = held["truth"].to_numpy()
    mae_right = float(np.abs(case.model.posterior_speed(right, seed=0).mean - truth).mean())
    mae_same = float(np.abs(case.model.posterior_speed(same_gpu, seed=0).mean - truth).mean())
    # Predictions are of the speed relative to the *measured* isolated throughput, which has
    # ~3% log-noise of its own, so even a perfect model is ~0.02 off the truth on average; the
    # fit itself adds posterior error. Seen (20 held-out rows of 10 runs): 0.050 with the
    # right shares (fit seeds 0-2: 0.048-0.051; the default four-restart mixture 0.047) vs
    # 0.28 assuming one GPU: that assumption adds GPU compute and memory
    # contention that two GPUs do not have, an error of the size of the typical same-GPU
    # slowdown (~0.3). So the right shares must be accurate in absolute terms (< 0.06, about
    # 3x the measurement floor) and at least 0.15 better than the wrong assumption (half the
    # gap seen, so a fit that recovers demands a little worse still passes).
    assert mae_right < 0.06, (mae_right, mae_same)
    assert mae_right + 0.15 < mae_same, (mae_right, mae_same)


def test_held_out_cross_gpu_rows_are_scored_with_their_shares(case: Case) -> None:
    # score() (so evaluate() and stability()) queried every held-out row as one GPU's, with
    # the topology given or not: its MAE on cross-GPU data was the wrong assumption's.
    _, test = holdout_split(case.data, holdout_frac=0.5, seed=0)
    assert {"device", "co_devices"} <= set(test.columns)
    queries = row_queries(test, case.model.jobs, topology=case.topo,
                          resources=case.model.resources)
    cross = {(r, j) for r, j in zip(case.held["run_id"], case.held["job"], strict=True)}
    for (rid, job, dev, co_devs), q in zip(
        test[["run_id", "job", "device", "co_devices"]].itertuples(index=False), queries,
        strict=True,
    ):
        if (rid, job) in cross:
            want = tuple(r for r in case.model.resources
                         if r in shared_resources(case.topo, dev, co_devs[0]))
            assert q.shares == (want,)
        else:
            assert q.shares is None and dev == co_devs[0]
    with pytest.raises(InputError, match="pass the topology so its query knows what they share"):
        score(case.model, test)
    post = case.model.posterior_speed(queries, seed=0)
    assert score(case.model, test, topology=case.topo) == score(case.model, test, posterior=post)


def test_sharing_nothing_is_running_alone(case: Case) -> None:
    assert shared_resources(case.topo, "0", "4") == ()  # different sockets and PCIe trees
    jobs = case.model.jobs
    queries = [Query(j, ()) for j in jobs] + [
        Query(j, (c,), shares=(shared_resources(case.topo, "0", "4"),))
        for j, c in zip(jobs, jobs[1:] + jobs[:1], strict=True)
    ]
    mean = case.model.posterior_speed(queries, seed=0).mean
    alone, apart = mean[: len(jobs)], mean[len(jobs) :]
    # Same posterior draws (one seed), and a co-runner that shares nothing adds no load: the
    # prediction is the job-alone one up to float rounding.
    np.testing.assert_allclose(apart, alone, rtol=1e-6)
    same_gpu = case.model.posterior_speed(
        [Query(j, (c,)) for j, c in zip(jobs, jobs[1:] + jobs[:1], strict=True)], seed=0
    ).mean
    assert (same_gpu <= alone + 1e-9).all() and (same_gpu < alone - 0.01).any()


@pytest.mark.parametrize("spec", ["pcie-8gpu*2", "dgx-a100*2", "p4d*2"])
def test_gpus_of_two_machines_share_nothing(spec: str) -> None:
    # The route between two machines' GPUs (their uplinks to the NICs) once read as a shared
    # PCIe uplink, where placement (and the generator) let them share nothing: the model was
    # asked with shares placement never sends.
    t = load(spec)
    a, b = "n0:0", "n1:0"
    assert shared_resources(t, a, b) == () == shared_resources(t, b, a)
    assert shared_resources(t, "n0:0", "n0:1") != ()  # inside a machine, as before
