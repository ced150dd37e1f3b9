"""Encoding runs and samples for the model, topology shares, and the evaluation splits."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from interplace.datasets import CoLocationData, synthetic
from interplace.errors import InputError
from interplace.model import (
    DEFAULT_RESOURCES,
    InterferenceModel,
    Query,
    baselines,
    best_baseline,
    cold_split,
    colocated_rows,
    holdout_split,
    row_queries,
    score,
    shared_resources,
)
from interplace.model._data import counters_from_samples, observations_from_runs
from interplace.model._net import KAPPA, counter_mean, log_speed, member_slots
from interplace.model._peers import pair_rows
from interplace.topology import load


def _runs(rows: list[tuple[str, str, float]], **extra: list[object]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["run_id", "job", "throughput"])
    for k, v in extra.items():
        df[k] = v
    return df


def test_observations_three_way_run_pads_and_shares() -> None:
    runs = _runs(
        [
            *[("a", "x", 4.0), ("b", "y", 2.0), ("c", "z", 1.0), ("p", "x", 2.0), ("p", "y", 1.0)],
            *[("q", "x", 1.0), ("q", "y", 0.5), ("q", "z", 0.5)],
        ]
    )
    obs = observations_from_runs(CoLocationData(runs, None, "t"), ["x", "y", "z"], ["g", "m"])
    assert obs.co.shape == (5, 2)
    # Pair rows are padded with J = 3 and share nothing through the padding column.
    assert obs.co[0].tolist() == [1, 3]
    assert obs.share[0].tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert obs.speed.tolist() == [0.5, 0.5, 0.25, 0.25, 0.5]
    assert obs.run.tolist() == [0, 0, 1, 1, 1]


def test_observations_across_devices_need_a_topology() -> None:
    runs = pd.DataFrame(
        {
            "run_id": ["a", "b", "p", "p"],
            "job": ["x", "y", "x", "y"],
            "throughput": [4.0, 2.0, 2.0, 1.0],
            "device": ["0", "0", "0", "1"],
        }
    )
    data = CoLocationData(runs, None, "t")
    with pytest.raises(InputError, match="pass a topology"):
        observations_from_runs(data, ["x", "y"], DEFAULT_RESOURCES)
    topo = load("p4d")
    share = {("0", "1"): shared_resources(topo, "0", "1"), ("1", "0"): ("pcie_h2d",)}
    obs = observations_from_runs(data, ["x", "y"], DEFAULT_RESOURCES, share)
    assert obs.share[0, 0].tolist() == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert obs.share[1, 0].tolist() == [0.0, 0.0, 1.0, 0.0, 0.0]


def test_counters_sufficient_statistics_scale_and_multiplexing() -> None:
    runs = _runs([("a", "x", 1.0), ("p", "x", 1.0), ("p", "x", 1.0)])
    samples = pd.DataFrame(
        {
            "run_id": ["a", "a", "a", "p", "p", "a"],
            "t_s": [0.0, 1.0, 2.0, 0.0, 1.0, 0.0],
            "metric": ["gpu_util_pct"] * 3 + ["instructions", "instructions", "fb_used_bytes"],
            "value": [20.0, 40.0, np.nan, 50.0, 100.0, 7.0],
            "scale": [np.nan, np.nan, np.nan, 0.5, 1.0, np.nan],
        }
    )
    c = counters_from_samples(CoLocationData(runs, samples, "t"), ["x"])
    assert c.metrics == ("gpu_util_pct", "instructions")  # unknown metric ignored
    by_key = dict(zip(c.keys, range(len(c)), strict=True))
    g = by_key[("a", "", "gpu_util_pct")]
    assert c.n[g] == 2 and c.mean[g] == pytest.approx(0.3)
    assert c.ssd[g] == pytest.approx(2 * 0.1**2)
    assert c.members[g].tolist() == [1.0, 0.0]
    h = by_key[("p", "", "instructions")]
    # 50 at scale 0.5 reads as 100; full scale is the largest run mean (100).
    assert c.mean[h] == pytest.approx(1.0) and c.full_scale[1] == 100.0
    assert c.members[h].tolist() == [2.0, 0.0]  # the same job twice


def test_counters_refuse_bad_scale() -> None:
    runs = _runs([("a", "x", 1.0)])
    samples = pd.DataFrame(
        {"run_id": ["a"], "t_s": [0.0], "metric": ["instructions"], "value": [1.0], "scale": [0.0]}
    )
    # The table itself refuses it (since the samples' scale is checked with the table) ...
    with pytest.raises(InputError, match=r"samples row 0 has scale 0\.0, not a number in"):
        CoLocationData(runs, samples, "t")
    # ... and the counters refuse a table changed after it was checked.
    data = CoLocationData(runs, samples.assign(scale=[0.5]), "t")
    assert data.samples is not None
    data.samples["scale"] = 0.0
    with pytest.raises(InputError, match="scale <= 0"):
        counters_from_samples(data, ["x"])


def test_contention_function_edge_cases() -> None:
    # Two saturating jobs with s = theta = 1 halve; three get a third; a co-runner that
    # shares nothing does nothing.
    d = torch.ones(3, 1, dtype=torch.float64)
    s = torch.ones(3, 1, dtype=torch.float64)
    th = torch.ones(1, dtype=torch.float64)
    job = torch.tensor([0, 0, 0])
    co = torch.tensor([[1, 3], [1, 2], [1, 3]])
    share = torch.tensor([[[1.0], [0.0]], [[1.0], [1.0]], [[0.0], [0.0]]], dtype=torch.float64)
    v = log_speed(d, s, th, job, co, share).exp()
    # The knee is smooth: at d = theta it gives up log(2)/KAPPA of the excess load.
    knee = math.log(2) / KAPPA
    assert v.tolist() == pytest.approx([1 / (2 - knee), 1 / (3 - knee), 1.0], abs=1e-6)
    # Counters saturate at full scale and are near the load below it.
    members = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    slots = member_slots(members)
    u = counter_mean(d * 0.4, *slots, torch.tensor([0, 0]))
    assert u.tolist() == pytest.approx([0.4, 0.8], abs=1e-3)
    assert float(counter_mean(d * 3, *slots, torch.tensor([0, 0]))[1]) == pytest.approx(1.0)


def test_counter_mean_reads_member_slots_as_the_dense_product() -> None:
    # The slots are a gather standing in for the (G, J + 1) @ (J + 1, R) product over each
    # group's members: the same load on every group, for a job counted twice, a group whose
    # only member is the last job, a group with none (load 0) and a batch of draws.
    members = torch.tensor(
        [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 2.0, 1.0, 0.0],
         [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
        dtype=torch.float64,
    )
    idx, count = member_slots(members)
    assert idx.shape == count.shape == (5, 2)
    assert idx.tolist() == [[0, 3], [0, 1], [1, 2], [2, 3], [3, 3]]
    assert count.tolist() == [[1.0, 0.0], [1.0, 1.0], [2.0, 1.0], [1.0, 0.0], [0.0, 0.0]]
    demand = torch.rand(4, 3, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    res = torch.tensor([0, 1, 0, 1, 0])
    pad = torch.cat([demand, torch.zeros(4, 1, 2, dtype=torch.float64)], dim=-2)
    dense = torch.einsum("gj,sjr->sgr", members, pad).gather(
        -1, res.expand(4, -1).unsqueeze(-1)
    ).squeeze(-1)
    got = counter_mean(demand * 0.3, idx, count, res)
    # Below the counter's knee the mean is the load itself.
    torch.testing.assert_close(got, 0.3 * dense, rtol=1e-12, atol=1e-12)


def test_shared_resources_follow_domains() -> None:
    topo = load("dgx-a100")
    gpus = topo.gpus()
    assert shared_resources(topo, gpus[0], gpus[0]) == DEFAULT_RESOURCES
    with pytest.raises(InputError, match="not in the topology"):
        shared_resources(topo, gpus[0], "nope")


def test_holdout_keeps_isolated_runs_and_is_seeded() -> None:
    data = synthetic(6, seed=0, samples_per_run=2)
    train, test = holdout_split(data, holdout_frac=0.3, seed=3)
    _, test2 = holdout_split(data, holdout_frac=0.3, seed=3)
    assert test.equals(test2)
    iso = set(data.runs.loc[data.runs["run_id"].str.startswith("iso/"), "run_id"])
    assert iso <= set(train.runs["run_id"])
    assert not set(test["run_id"]) & set(train.runs["run_id"])
    assert train.samples is not None and set(train.samples["run_id"]) <= set(train.runs["run_id"])
    n_pairs = data.run_sizes().eq(2).sum()
    assert test["run_id"].nunique() == round(0.3 * n_pairs)


def test_cold_split_removes_every_run_of_cold_jobs() -> None:
    data = synthetic(6, seed=0, samples_per_run=2)
    train, _, cold = cold_split(data, cold_jobs=2, seed=0)
    assert len(cold) == 2
    rows = colocated_rows(train)
    assert not rows["job"].isin(cold).any()
    assert set(cold) <= set(train.runs["job"])  # their isolated runs stay
    with pytest.raises(InputError, match="must stay warm"):
        cold_split(data, cold_jobs=6, seed=0)


def test_baselines_on_a_toy_split() -> None:
    runs = _runs(
        [
            *[("a", "x", 1.0), ("b", "y", 1.0), ("p", "x", 0.5), ("p", "y", 0.7)],
            *[("q", "x", 0.6), ("q", "y", 0.9)],
        ]
    )
    samples = pd.DataFrame(
        {
            "run_id": ["a", "b"],
            "t_s": [0.0, 0.0],
            "metric": ["gpu_util_pct"] * 2,
            "value": [80.0, 40.0],
        }
    )
    data = CoLocationData(runs, samples, "t")
    train = CoLocationData(runs.iloc[:4], samples, "train")
    test = colocated_rows(data).query("run_id == 'q'")
    b = baselines(train, test)
    assert b["no_interference"]["mae"] == pytest.approx((0.4 + 0.1) / 2)
    assert b["global_mean"]["mae"] == pytest.approx((0.0 + 0.3) / 2)
    assert b["per_job_mean"]["mae"] == pytest.approx((0.1 + 0.2) / 2)
    # util sum 120 -> 100/120 for both.
    assert b["util_sum"]["mae"] == pytest.approx((abs(0.6 - 5 / 6) + abs(0.9 - 5 / 6)) / 2)


def test_fit_leaves_torch_thread_count_as_it_was() -> None:
    from interplace.model import fit

    before = torch.get_num_threads()
    fit(synthetic(3, seed=0, samples_per_run=2), seed=0, steps=50, min_steps=50)
    assert torch.get_num_threads() == before


def test_score_reuses_a_given_posterior_and_checks_its_length(
    small_data: CoLocationData, small_model: InterferenceModel
) -> None:
    test = colocated_rows(small_data)
    post = small_model.posterior_speed(row_queries(test), seed=7)
    # The same draws, handed over or drawn again with the same seed, give the same score.
    assert score(small_model, test, posterior=post) == score(small_model, test, seed=7)
    assert score(small_model, test, seed=8) != score(small_model, test, seed=7)
    with pytest.raises(InputError, match=r"posterior has \d+ queries for \d+ rows"):
        score(small_model, test.iloc[:3], posterior=post)


def test_best_baseline_skips_missing_and_exact_baselines() -> None:
    base = {"a": {"mae": 0.3}, "b": {"mae": None}, "c": {"mae": 0.1}}
    assert best_baseline(base, 0.05) == ("c", pytest.approx(0.5))
    assert best_baseline({"a": {"mae": 0.0}}, 0.05) == ("a", None)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        ({"job": ["job0"]}, r"lacks column\(s\) co_runner"),
        ({"job": ["job0", " "], "co_runner": ["job1", "job2"]}, "pairs row 1 has no job"),
        ({"job": ["job0"], "co_runner": [None]}, "pairs row 0 has no co_runner"),
        ({"job": ["job0"], "co_runner": ["job1+ "]}, "pairs row 0: co_runner 'job1\\+ ' has an"),
        ({"job": ["job0", "job1"], "co_runner": ["job1", "job0+x"]}, "row 1: unknown job 'x'"),
    ],
)
def test_pairs_tables_are_checked_row_by_row(
    small_model: InterferenceModel, frame: dict[str, list[object]], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        small_model.predict_frame(pd.DataFrame(frame))


def test_pairs_table_rows_become_queries_in_order(small_model: InterferenceModel) -> None:
    a, b, c = small_model.jobs[:3]
    pairs = pd.DataFrame({"job": [b, a], "co_runner": [f"{a} + {c}", b]})
    assert small_model.queries_from_frame(pairs) == [Query(b, (a, c)), Query(a, (b,))]
    assert small_model.predict_frame(pairs)["job"].tolist() == [b, a]


def test_a_job_named_with_a_plus_is_one_co_runner_in_every_evaluation_path() -> None:
    # A job's own name may hold a "+" (fit and queries_from_frame take it); the evaluation
    # helpers once split the joined co_runner text again, so "job1+job2", a job of its own
    # next to job0, was scored as job0 next to job1 and job2 (MAE 0.26 against 0.012), and a
    # name whose parts are not jobs ("gemm+memcpy") made evaluate refuse data fit accepts.
    d = synthetic(4, seed=0, samples_per_run=2)
    data = CoLocationData(d.runs.assign(job=d.runs["job"].replace({"job3": "job1+job2"})),
                          d.samples, "plus")
    rows = colocated_rows(data)
    plus = rows.loc[rows["co_runner"] == "job1+job2"]
    assert len(plus) > 0 and all(c == ("job1+job2",) for c in plus["co_runners"])
    assert {q.co_runners for q in row_queries(plus)} == {("job1+job2",)}
    # Every pair run: no row has two co-runners, and the peers train on all of them.
    assert rows["co_runners"].map(len).eq(1).all()
    assert len(pair_rows(data)) == len(rows)
    train, test = holdout_split(data, seed=0)
    b = baselines(train, test)
    assert b["per_job_mean"]["mae"] is not None
    # A table with only the joined text reads a known whole name as one job.
    text = plus[["job", "co_runner", "speed"]]
    assert row_queries(text, {"job0", "job1", "job2", "job1+job2"}) == row_queries(plus)
    # cold start keeps the runs of a cold "job1+job2" out of training, and only those.
    tr, held, cold = cold_split(data, cold_jobs=1, seed=0)
    for name in cold:
        assert not colocated_rows(tr)["co_runners"].map(lambda c, n=name: n in c).any()
        assert all(j == name or name in c
                   for j, c in zip(held["job"], held["co_runners"], strict=True))
