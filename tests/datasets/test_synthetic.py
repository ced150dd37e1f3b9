"""The synthetic generator: determinism, shape, and that its noise is what it says it is."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

from interplace.datasets import CoLocationData, contention_speed, synthetic, validate_runs
from interplace.errors import InputError


@pytest.fixture(scope="module")
def big() -> CoLocationData:
    return synthetic(20, seed=7, gpus=3)


def test_same_seed_same_data_other_seed_other_data() -> None:
    a, b, c = synthetic(6, seed=3), synthetic(6, seed=3), synthetic(6, seed=4)
    assert a.samples is not None and b.samples is not None and c.samples is not None
    pd.testing.assert_frame_equal(a.runs, b.runs)
    pd.testing.assert_frame_equal(a.samples, b.samples)
    np.testing.assert_array_equal(a.truth["demand"], b.truth["demand"])  # type: ignore[index]
    assert not np.allclose(a.runs["throughput"], c.runs["throughput"])


@pytest.mark.parametrize(
    ("pairs", "n_pair_runs"), [("all", 5 * 6 // 2), ("distinct", 5 * 4 // 2), ("none", 0)]
)
def test_run_counts(pairs: str, n_pair_runs: int) -> None:
    data = synthetic(5, seed=0, pairs=pairs, samples_per_run=0)
    validate_runs(data.runs, "synthetic")
    sizes = data.run_sizes()
    assert (sizes == 1).sum() == 5
    assert (sizes == 2).sum() == n_pair_runs
    assert data.samples is None
    self_pairs = data.pairs().query("job == co_runner")
    assert len(self_pairs) == (2 * 5 if pairs == "all" else 0)


def test_random_pairs_are_a_subset() -> None:
    data = synthetic(8, seed=1, pairs="random", samples_per_run=0)
    n = int((data.run_sizes() == 2).sum())
    assert 0 < n < 8 * 9 // 2


def test_truth_speeds(big: CoLocationData) -> None:
    truth = big.truth
    assert truth is not None
    speed = truth["speed"]
    assert speed.shape == (len(big.runs),)
    assert ((speed > 0) & (speed <= 1)).all()
    alone = (big.run_sizes() == 1).reindex(big.runs["run_id"]).to_numpy()
    assert (speed[alone] == 1).all()
    assert (speed[~alone] < 1).any()  # there is interference to find
    assert truth["demand"].shape == truth["sensitivity"].shape == (20, 5)
    assert ((truth["demand"] >= 0) & (truth["demand"] <= 1)).all()
    assert (truth["sensitivity"] >= 0).all()


def test_speed_is_monotone_in_load() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        d = rng.uniform(0, 1, 5)
        s = rng.gamma(2.0, 0.5, 5)
        load = d + rng.uniform(0, 2, 5)
        more = load + rng.exponential(0.5, 5) * (rng.random(5) < 0.5)
        assert contention_speed(d, s, more) <= contention_speed(d, s, load)
        assert 0 < contention_speed(d, s, more) <= 1


def test_observed_speed_noise(big: CoLocationData) -> None:
    truth = big.truth
    assert truth is not None
    job = big.runs["job"].map({n: i for i, n in enumerate(truth["jobs"])}).to_numpy()
    log_eps = np.log(
        big.runs["throughput"].to_numpy() / (truth["isolated_throughput"][job] * truth["speed"])
    )
    # Sample sd of n normal draws has sd ~ sigma / sqrt(2 n); allow 5 of those.
    n = log_eps.size
    assert abs(log_eps.std(ddof=1) - 0.03) < 5 * 0.03 / np.sqrt(2 * n)
    assert abs(log_eps.mean()) < 5 * 0.03 / np.sqrt(n)


def test_metric_noise_matches_sigma(big: CoLocationData) -> None:
    truth = big.truth
    samples = big.samples
    assert truth is not None and samples is not None
    merged = samples.merge(truth["samples"][["sample_id", "true_value"]], on="sample_id")
    assert len(merged) == len(samples)
    scale = merged["scale"].fillna(1.0)  # non-perf metrics have scale NaN
    merged["resid"] = merged["value"] / scale - merged["true_value"]
    for metric, group in merged.groupby("metric"):
        sigma = truth["noise_metric"][metric]
        n = len(group)
        # sd of a sample sd ~ sigma / sqrt(2 n) for Gaussian noise; 5 standard errors.
        tol = 5 * sigma / np.sqrt(2 * n)
        assert abs(group["resid"].std(ddof=1) - sigma) < tol, metric
        assert abs(group["resid"].mean()) < 5 * sigma / np.sqrt(n), metric


def test_noise_metric_override() -> None:
    data = synthetic(4, seed=2, noise_metric={"gpu_util_pct": 0.0}, missing_frac=0.0)
    assert data.samples is not None and data.truth is not None
    s = data.samples.merge(data.truth["samples"], on="sample_id")
    util = s.loc[s["metric_x"] == "gpu_util_pct"]
    np.testing.assert_allclose(util["value"], util["true_value"])
    assert data.truth["noise_metric"]["gpu_util_pct"] == 0.0


def test_missing_fraction(big: CoLocationData) -> None:
    truth = big.truth
    assert truth is not None and big.samples is not None
    n = len(truth["samples"])
    p = 0.1
    dropped = 1 - len(big.samples) / n
    # Binomial: sd of the observed fraction is sqrt(p (1 - p) / n); 5 of those.
    assert abs(dropped - p) < 5 * np.sqrt(p * (1 - p) / n)
    assert truth["samples"]["dropped"].sum() == n - len(big.samples)


def test_clock_offsets_recovered(big: CoLocationData) -> None:
    truth = big.truth
    samples = big.samples
    assert truth is not None and samples is not None
    assert set(samples["host"]) == {"h0", "h1", "h2"}
    merged = samples.merge(truth["samples"][["sample_id", "t_true_s"]], on="sample_id")
    shift = (merged["t_s"] - merged["t_true_s"]).groupby(merged["host"]).agg(["median", "size"])
    jitter = truth["t_jitter_s"]
    for host, offset in truth["clock_offset_s"].items():
        # The median of n normal draws has sd ~ 1.2533 sigma / sqrt(n); 5 of those.
        tol = 5 * 1.2533 * jitter / np.sqrt(shift.loc[host, "size"])
        assert abs(shift.loc[host, "median"] - offset) < tol
    assert np.ptp(list(truth["clock_offset_s"].values())) > 0


def test_multiplexed_share(big: CoLocationData) -> None:
    truth = big.truth
    samples = big.samples
    assert truth is not None and samples is not None
    perf = samples.loc[samples["metric"] == "instructions", "scale"]
    assert perf.notna().all()
    assert ((perf > 0) & (perf <= 1)).all()
    other = samples.loc[samples["metric"] != "instructions", "scale"]
    assert other.isna().all()
    n, p = len(perf), 0.2
    share = float((perf < 1).mean())
    assert abs(share - p) < 5 * np.sqrt(p * (1 - p) / n)  # binomial, 5 standard errors


def test_utilisation_follows_load() -> None:
    data = synthetic(3, seed=5, noise_metric={"gpu_util_pct": 0.0}, missing_frac=0.0)
    truth = data.truth
    assert truth is not None
    t = truth["samples"]
    demand = truth["demand"][:, 0]  # gpu_compute
    for j, name in enumerate(truth["jobs"]):
        iso = t.loc[(t["run_id"] == f"iso/{name}") & (t["metric"] == "gpu_util_pct")]
        np.testing.assert_allclose(iso["true_value"], 100 * min(1.0, demand[j]))
    pair = t.loc[(t["run_id"] == "pair/job0/job1") & (t["metric"] == "gpu_util_pct")]
    np.testing.assert_allclose(pair["true_value"], 100 * min(1.0, demand[0] + demand[1]))


@dataclass(frozen=True)
class _Domain:
    name: str
    gpus: tuple[str, ...]


class _FakeTopology:
    def gpus(self) -> list[str]:
        return ["n0:0", "n0:1", "n1:0"]

    def domains(self, gpus: Iterable[str]) -> list[Any]:
        return [_Domain(f"gpu:{g}", (g,)) for g in gpus]


def test_topology_supplies_gpus_and_hosts() -> None:
    data = synthetic(6, seed=0, topology=_FakeTopology())
    assert set(data.runs["device"]) <= {"n0:0", "n0:1", "n1:0"}
    assert data.samples is not None
    assert set(data.samples["host"]) <= {"n0", "n1"}
    pairs = data.runs.groupby("run_id")["device"].nunique()
    assert (pairs == 1).all()  # co-runners always share one GPU


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_jobs": 0}, "n_jobs must be an integer >= 1"),
        ({"pairs": "some"}, "pairs must be one of"),
        ({"missing_frac": 1.0}, "missing_frac must be in"),
        ({"noise_speed": -1.0}, "noise_speed must be"),
        ({"resources": ()}, "resources must be"),
        ({"noise_metric": {"temp_c": 1.0}}, "noise_metric names 'temp_c'"),
        ({"topology": object()}, "topology must have"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"n_jobs": 3, "seed": 0} | kwargs
    with pytest.raises(InputError, match=message):
        synthetic(**args)
