"""The peer predictors: matrix completion, boosted trees and EBM, on the same splits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from interplace.datasets import CoLocationData, synthetic
from interplace.errors import InputError
from interplace.model import (
    PEERS,
    colocated_rows,
    evaluate,
    fit_boosted_trees,
    fit_ebm,
    fit_soft_impute,
    holdout_split,
    peer_maes,
)
from interplace.model._peers import pair_rows, solo_counters


def _matrix_data(y: np.ndarray[Any, Any]) -> CoLocationData:
    """Runs whose pair speeds are exactly ``y[j, k]`` (isolated throughput 1 for every job)."""
    n = y.shape[0]
    rows = [(f"iso{j}", f"j{j}", 1.0) for j in range(n)]
    for j in range(n):
        for k in range(j + 1, n):
            rows.append((f"p{j}-{k}", f"j{j}", float(y[j, k])))
            rows.append((f"p{j}-{k}", f"j{k}", float(y[k, j])))
    runs = pd.DataFrame(rows, columns=["run_id", "job", "throughput"])
    return CoLocationData(runs, None, "matrix")


def test_soft_impute_completes_a_low_rank_matrix() -> None:
    # A rank-1 interaction plus biases, with a quarter of the off-diagonal cells unmeasured.
    # Noise-free, so matrix completion should get the held-out cells to within a few hundredths
    # (the nuclear-norm shrinkage biases them slightly; the per-job mean misses by ~0.1).
    rng = np.random.default_rng(0)
    n = 12
    a, b = rng.normal(0, 0.1, n), rng.normal(0, 0.1, n)
    u, w = rng.normal(0, 0.15, n), rng.normal(0, 1.0, n)
    y = 0.6 + a[:, None] + b[None, :] + np.outer(u, w)
    data = _matrix_data(y)
    train, test = holdout_split(data, holdout_frac=0.25, seed=0)
    peer = fit_soft_impute(train, seed=0)
    held = test
    err = np.abs(peer.predict(held) - held["speed"]).mean()
    per_job = held["job"].map(colocated_rows(train).groupby("job")["speed"].mean())
    assert err < 0.05
    assert err < 0.5 * np.abs(per_job - held["speed"]).mean()


def test_several_co_runners_multiply_their_pair_speeds() -> None:
    peer = fit_soft_impute(synthetic(5, seed=0), seed=0)
    rows = pd.DataFrame({"job": ["job0", "job0", "job0"],
                         "co_runner": ["job1", "job2", "job1+job2"]})
    p = peer.predict(rows)
    assert p[2] == pytest.approx(p[0] * p[1])


def test_a_job_never_measured_gets_the_biases_only() -> None:
    peer = fit_soft_impute(synthetic(5, seed=0), seed=0)
    p = peer.predict(pd.DataFrame({"job": ["new"], "co_runner": ["alsonew"]}))
    assert p[0] == pytest.approx(max(peer.mu, 0.01))


def test_pair_rows_leave_out_runs_of_three() -> None:
    runs = pd.DataFrame({"run_id": ["a", "b", "c", "t", "t", "t", "p", "p"],
                         "job": ["x", "y", "z", "x", "y", "z", "x", "y"],
                         "throughput": [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.7, 0.8]})
    rows = pair_rows(CoLocationData(runs, None, "toy"))
    assert rows["run_id"].tolist() == ["p", "p"]


def test_solo_counters_are_the_isolated_runs_means() -> None:
    data = synthetic(3, seed=0, samples_per_run=5)
    c = solo_counters(data)
    assert sorted(c.index) == ["job0", "job1", "job2"]
    assert "gpu_util_pct" in c.columns
    s = data.samples
    assert s is not None
    iso = s.loc[s["run_id"].eq("iso/job0") & s["metric"].eq("gpu_util_pct"), "value"]
    assert c.loc["job0", "gpu_util_pct"] == pytest.approx(float(iso.mean()))


@pytest.mark.parametrize("make", [fit_boosted_trees, fit_ebm], ids=["trees", "ebm"])
def test_tree_peers_use_ids_counters_and_families(make: Any) -> None:
    data = synthetic(6, seed=1, samples_per_run=5)
    families = {"job0": "A", "job1": "A", "job2": "B"}
    peer = make(data, families=families, seed=0)
    x = peer.features(["job0", "unknown"], ["job1", "job2"])
    # ids (2), counters of both jobs (2 x metrics), families (2)
    assert x.shape == (2, 2 + 2 * peer.counters.shape[1] + 2)
    assert np.isnan(x[1, 0])  # an unknown job has no id
    rows = colocated_rows(data)
    pred = peer.predict(rows)
    assert pred.shape == (len(rows),) and np.isfinite(pred).all()
    assert np.abs(pred - rows["speed"]).mean() < np.abs(rows["speed"].mean() - rows["speed"]).mean()


def test_tree_peers_are_seeded() -> None:
    data = synthetic(6, seed=1, samples_per_run=5)
    rows = colocated_rows(data)
    a = fit_ebm(data, seed=3).predict(rows)
    b = fit_ebm(data, seed=3).predict(rows)
    np.testing.assert_array_equal(a, b)


def test_the_ebm_is_bounded_on_few_pairs_and_left_at_its_defaults_on_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On a few pairs the EBM's early stopping can fail to stop (a 4-job synthetic set of 20
    # pairs ran one bag to its 50,000-round cap, 5.5 minutes): fewer than EBM_SMALL_PAIRS
    # pairs get EBM_SMALL_ROUNDS rounds; more keep interpret's defaults, so Gavel's and
    # Lucid's figures are the EBM's own. The estimator is recorded, not fitted.
    import interpret.glassbox

    from interplace.model import _peers

    made: list[dict[str, Any]] = []

    class Recorder:
        def __init__(self, **kwargs: Any) -> None:
            made.append(kwargs)

        def fit(self, x: Any, y: Any) -> None:
            pass

    monkeypatch.setattr(interpret.glassbox, "ExplainableBoostingRegressor", Recorder)
    small = synthetic(4, seed=0, samples_per_run=2)
    assert len(pair_rows(small)) < _peers.EBM_SMALL_PAIRS
    fit_ebm(small, seed=0)
    monkeypatch.setattr(_peers, "EBM_SMALL_PAIRS", len(pair_rows(small)))
    fit_ebm(small, seed=0)
    assert made[0]["max_rounds"] == _peers.EBM_SMALL_ROUNDS
    assert "max_rounds" not in made[1]
    assert {k: v for k, v in made[0].items() if k != "max_rounds"} == made[1]


def test_a_missing_extra_is_reported_not_raised() -> None:
    def missing(train: CoLocationData, families: Any, seed: int) -> Any:
        raise InputError("the X peer needs x: pip install 'interplace[peers]'")

    data = synthetic(4, seed=0, samples_per_run=2)
    train, test = holdout_split(data, holdout_frac=0.3, seed=0)
    out = peer_maes(train, test, peers={"x": missing, "soft_impute": PEERS["soft_impute"]})
    assert out["x"]["mae"] is None and "pip install" in out["x"]["unavailable"]
    assert out["soft_impute"]["mae"] is not None


def test_evaluate_reports_the_peers_beside_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    data = synthetic(5, seed=0, samples_per_run=4)
    # What is checked is the report beside the model, not the model: one restart (the
    # default mixture's restarts are test_restarts.py's), and one outer bag for the EBM (its
    # four bags take about 20 s on this data on 2 cores; the EBM itself is tested above).
    monkeypatch.setitem(PEERS, "ebm", lambda d, f, s: fit_ebm(d, families=f, seed=s,
                                                             outer_bags=1))
    r = evaluate(data, seed=0, steps=200, fit_kwargs={"min_steps": 200, "restarts": 1})
    assert set(r["peers"]) == set(PEERS)
    assert r["best_peer"] in PEERS
    best = r["peers"][r["best_peer"]]["mae"]
    assert r["mae_ratio_to_best_peer"] == pytest.approx(r["model"]["mae"] / best)
    r2 = evaluate(data, seed=0, steps=200, fit_kwargs={"min_steps": 200, "restarts": 1},
                  peers=False)
    assert "peers" not in r2
