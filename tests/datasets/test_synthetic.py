"""The synthetic generator: determinism, shape, and that its noise is what it says it is."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

from interplace.collectors import validate_samples
from interplace.datasets import MODES, CoLocationData, contention_speed, synthetic, validate_runs
from interplace.errors import InputError
from interplace.topology import Topology, load


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
        # numpy integers are refused, not cast, as by every other integer argument (is_int).
        ({"n_jobs": np.int64(3)}, "n_jobs must be an integer >= 1, not np.int64"),
        ({"seed": np.int64(0)}, r"seed must be an integer in \[0, 2\*\*63\), not np.int64"),
        ({"seed": -1}, r"seed must be an integer in \[0, 2\*\*63\), not -1"),  # was numpy's
        ({"seed": 2**70}, r"seed must be an integer in \[0, 2\*\*63\)"),  # was taken
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


# --- Cross-GPU co-location ------------------------------------------------------------------

P4D_SHARED = ("pcie_h2d", "pcie_d2h", "host_cpu")  # GPUs behind one p4d PCIe switch share these


@pytest.fixture(scope="module")
def p4d() -> Topology:
    return load("p4d")


@pytest.fixture(scope="module")
def cross(p4d: Topology) -> CoLocationData:
    return synthetic(8, seed=0, topology=p4d, cross_gpu=0.5, missing_frac=0.0)


def _cross_runs(data: CoLocationData) -> set[str]:
    n_dev = data.runs.groupby("run_id")["device"].nunique()
    return set(n_dev[n_dev > 1].index)


# Pinned from the generator before cross_gpu existed: (devices, number of samples, and sums and
# last values of throughput, sample value, t_s and scale). cross_gpu=0 must reproduce them,
# i.e. draw the same numbers in the same order. The floats are compared to 1e-9 relative, so
# the last-ulp differences between NumPy's SIMD exp/log builds cannot fail it, while a shifted
# draw (an O(1) change) would.
_PINNED: list[tuple[dict[str, Any], tuple[Any, ...]]] = [
    (
        {"n_jobs": 6, "seed": 3},
        ("|".join(["0"] * 48), 2907, 9038.730086138916, 3026102632988.385,
         28078.815244763333, 450.75186683509264, 115.07385213591195, 4705645431.400894),
    ),
    (
        {"n_jobs": 5, "seed": 7, "gpus": 3, "pairs": "distinct", "samples_per_run": 4},
        ("2|0|0|0|0|2|2|2|2|0|0|1|1|0|0|2|2|0|0|1|1|0|0|2|2", 326, 1236.8857238832998,
         386343522302.7149, 337.3054239617275, 51.44237903632606, 54.97943984679653,
         8653705254.344484),
    ),
    (
        {"n_jobs": 4, "seed": 2, "topology": "p4d", "pairs": "random", "samples_per_run": 3},
        ("4|3|2|4|6|6|7|7|6|6|7|7|6|6", 149, 1041.3064664534834, 134680284772.76541,
         195.24895362859706, 19.706259944011457, 2.7040542005958135, 5021717459.67381),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "pinned"), _PINNED)
@pytest.mark.parametrize("explicit", [False, True])
def test_default_output_unchanged(
    kwargs: dict[str, Any], pinned: tuple[Any, ...], explicit: bool, p4d: Topology
) -> None:
    args = dict(kwargs)
    if args.get("topology") == "p4d":
        args["topology"] = p4d
    if explicit:
        args["cross_gpu"] = 0.0
    data = synthetic(**args)
    r, s = data.runs, data.samples
    assert s is not None
    got = (
        "|".join(r["device"]),
        len(s),
        float(r["throughput"].sum()),
        float(s["value"].sum()),
        float(s["t_s"].sum()),
        float(s["scale"].sum()),
        float(r["throughput"].iloc[-1]),
        float(s["value"].iloc[-1]),
    )
    assert got[:2] == pinned[:2]
    np.testing.assert_allclose(got[2:], pinned[2:], rtol=1e-9)
    assert not s["device"].isna().any()
    assert data.name == f"synthetic(n_jobs={args['n_jobs']}, seed={args['seed']})"


def test_cross_gpu_zero_is_the_plain_call(p4d: Topology) -> None:
    a = synthetic(5, seed=4, topology=p4d)
    b = synthetic(5, seed=4, topology=p4d, cross_gpu=0.0)
    assert a.samples is not None and b.samples is not None
    pd.testing.assert_frame_equal(a.runs, b.runs)
    pd.testing.assert_frame_equal(a.samples, b.samples)
    assert _cross_runs(b) == set()


def test_cross_gpu_rows_and_speeds(cross: CoLocationData) -> None:
    truth = cross.truth
    assert truth is not None
    res = truth["resources"]
    demand, sens = truth["demand"], truth["sensitivity"]
    index = {n: i for i, n in enumerate(truth["jobs"])}
    runs = cross.runs.assign(speed=truth["speed"], shared=truth["shared"])
    moved = _cross_runs(cross)
    n_pairs = int((cross.run_sizes() == 2).sum())
    assert 0 < len(moved) < n_pairs  # 20 of 36 for this seed
    for rid, g in runs.groupby("run_id"):
        if len(g) == 1:
            assert g["shared"].tolist() == [()]
            continue
        if rid not in moved:
            assert g["shared"].tolist() == [res, res]
            continue
        a, b = g["device"].tolist()
        assert a != b
        assert g["host"].nunique() == 1
        assert int(a) // 4 == int(b) // 4  # one half of p4d: one socket's PCIe tree
        assert g["shared"].tolist() == [P4D_SHARED, P4D_SHARED]
        mask = np.array([r in P4D_SHARED for r in res])
        j, k = (index[n] for n in g["job"])
        for me, other, v in ((j, k, g["speed"].iloc[0]), (k, j, g["speed"].iloc[1])):
            load_me = demand[me] + np.where(mask, demand[other], 0.0)
            assert v == contention_speed(demand[me], sens[me], load_me)
    # Sharing less can only help: a cross-GPU pair runs at least as fast as the same pair on
    # one GPU (the speed is monotone in the load).
    for rid in moved:
        g = runs.loc[runs["run_id"] == rid]
        j, k = (index[n] for n in g["job"])
        load = demand[j] + demand[k]
        assert g["speed"].iloc[0] >= contention_speed(demand[j], sens[j], load)


def test_cross_gpu_samples(cross: CoLocationData) -> None:
    truth = cross.truth
    assert truth is not None and cross.samples is not None
    t = truth["samples"]
    assert len(t) == len(cross.samples)  # missing_frac=0
    res = list(truth["resources"])
    demand = truth["demand"]
    index = {n: i for i, n in enumerate(truth["jobs"])}
    full = {"gpu_util_pct": 100.0, "mem_util_pct": 100.0, "host_cpu_busy_pct": 100.0}
    full |= {"pcie_rx_kbps": truth["pcie_link_kbps"], "pcie_tx_kbps": truth["pcie_link_kbps"]}
    full["instructions"] = truth["instructions_per_s"]
    resource_of = {
        "gpu_util_pct": "gpu_compute",
        "mem_util_pct": "gpu_membw",
        "pcie_rx_kbps": "pcie_h2d",
        "pcie_tx_kbps": "pcie_d2h",
        "host_cpu_busy_pct": "host_cpu",
        "instructions": "host_cpu",
    }
    moved = _cross_runs(cross)
    for rid in moved:
        rows = cross.runs.loc[cross.runs["run_id"] == rid]
        job_on = dict(zip(rows["device"], (index[n] for n in rows["job"]), strict=True))
        host = rows["host"].iloc[0]
        s = t.loc[t["run_id"] == rid]
        assert (s["host"] == host).all()
        for (metric, dev), grp in s.groupby(["metric", "device"], dropna=False):
            i = res.index(resource_of[str(metric)])
            assert len(grp) == 20
            if resource_of[str(metric)] == "host_cpu":
                assert dev == "host"  # machine-wide: once per run, device "host"
                u = min(1.0, sum(demand[j, i] for j in rows["job"].map(index)))
            else:
                u = min(1.0, demand[job_on[dev], i])  # this GPU's own job only
            np.testing.assert_allclose(grp["true_value"], u * full[str(metric)], rtol=1e-12)
        per_dev = s.loc[s["device"] != "host"].groupby("device")["metric"].nunique()
        assert per_dev.to_dict() == {d: 4 for d in job_on}
        assert s.loc[s["device"] == "host", "metric"].nunique() == 2
    # Observed samples carry the same device/host as the truth; no device is missing.
    obs = cross.samples.merge(t[["sample_id", "device", "host"]], on="sample_id")
    assert obs["device_x"].notna().all()
    assert (obs["device_x"] == obs["device_y"]).all()
    assert (obs["host_x"] == obs["host_y"]).all()
    same_gpu = ~cross.samples["run_id"].isin(moved)
    assert cross.samples.loc[same_gpu, "device"].notna().all()


def test_cross_gpu_leaves_same_gpu_rows_alone(p4d: Topology, cross: CoLocationData) -> None:
    # The cross placement has its own generator: every row that stays on one GPU is exactly the
    # row the plain call gives, and the jobs' truth is the same.
    plain = synthetic(8, seed=0, topology=p4d, missing_frac=0.0)
    assert plain.truth is not None and cross.truth is not None
    np.testing.assert_array_equal(plain.truth["demand"], cross.truth["demand"])
    stay = ~cross.runs["run_id"].isin(_cross_runs(cross)).to_numpy()
    pd.testing.assert_frame_equal(plain.runs.loc[stay], cross.runs.loc[stay])
    np.testing.assert_array_equal(plain.truth["speed"][stay], cross.truth["speed"][stay])


def test_cross_gpu_fraction(p4d: Topology) -> None:
    data = synthetic(20, seed=1, topology=p4d, cross_gpu=0.3, samples_per_run=0)
    n = int((data.run_sizes() == 2).sum())
    share = len(_cross_runs(data)) / n
    assert abs(share - 0.3) < 5 * np.sqrt(0.3 * 0.7 / n)  # binomial, 5 standard errors
    every = synthetic(5, seed=1, topology=p4d, cross_gpu=1.0, samples_per_run=0)
    assert len(_cross_runs(every)) == int((every.run_sizes() == 2).sum())  # self-pairs too


def test_cross_gpu_is_deterministic(p4d: Topology) -> None:
    a = synthetic(6, seed=5, topology=p4d, cross_gpu=0.5, samples_per_run=3)
    b = synthetic(6, seed=5, topology=p4d, cross_gpu=0.5, samples_per_run=3)
    c = synthetic(6, seed=6, topology=p4d, cross_gpu=0.5, samples_per_run=3)
    assert a.samples is not None and b.samples is not None
    pd.testing.assert_frame_equal(a.runs, b.runs)
    pd.testing.assert_frame_equal(a.samples, b.samples)
    assert a.truth is not None and b.truth is not None
    assert a.truth["shared"] == b.truth["shared"]
    pd.testing.assert_frame_equal(a.truth["samples"], b.truth["samples"])
    assert _cross_runs(a) != _cross_runs(c)
    assert a.name == "synthetic(n_jobs=6, seed=5, cross_gpu=0.5)"


@dataclass(frozen=True)
class _KindDomain:
    name: str
    kind: str
    gpus: tuple[str, ...]


class _OneSwitch:
    """Two GPUs behind one PCIe switch, with no socket domain: they share only the PCIe link."""

    def gpus(self) -> list[str]:
        return ["0", "1"]

    def domains(self, gpus: Iterable[str]) -> list[Any]:
        ids = tuple(gpus)
        return [_KindDomain(f"gpu:{g}", "gpu", (g,)) for g in ids] + [
            _KindDomain("uplink:sw0", "pcie_uplink", ids)
        ]


class _SocketOnly:
    """Two GPUs on one socket but under separate host bridges: nothing PCIe is shared."""

    def gpus(self) -> list[str]:
        return ["0", "1"]

    def domains(self, gpus: Iterable[str]) -> list[Any]:
        return [_KindDomain("socket:0", "socket", tuple(gpus))]


def test_pcie_only_sharing() -> None:
    data = synthetic(6, seed=2, topology=_OneSwitch(), cross_gpu=1.0, pairs="distinct")
    truth = data.truth
    assert truth is not None
    res = truth["resources"]
    pcie = [r in ("pcie_h2d", "pcie_d2h") for r in res]
    demand, sens = truth["demand"], truth["sensitivity"]
    index = {n: i for i, n in enumerate(truth["jobs"])}
    pair = data.run_sizes().reindex(data.runs["run_id"]).to_numpy() == 2
    assert all(s == ("pcie_h2d", "pcie_d2h") for s in np.array(truth["shared"], object)[pair])
    for pos in np.flatnonzero(pair):
        rid = data.runs["run_id"].iloc[pos]
        j, k = (index[n] for n in data.runs.loc[data.runs["run_id"] == rid, "job"])
        me = index[data.runs["job"].iloc[pos]]
        other = k if me == j else j
        # Only the PCIe factors of the speed are left; compute and host are not shared.
        idx = np.flatnonzero(pcie)
        expected = contention_speed(
            demand[me, idx], sens[me, idx], demand[me, idx] + demand[other, idx]
        )
        assert truth["speed"][pos] == pytest.approx(expected, rel=1e-12)


def test_compute_only_jobs_on_two_gpus_run_at_full_speed(p4d: Topology) -> None:
    # Jobs that use only the GPU itself: on one GPU they slow each other down, on two GPUs
    # behind one PCIe switch nothing they use is shared, so every speed is exactly 1.
    only = ("gpu_compute", "gpu_membw")
    apart = synthetic(6, seed=0, topology=p4d, cross_gpu=1.0, resources=only)
    together = synthetic(6, seed=0, topology=p4d, resources=only)
    assert apart.truth is not None and together.truth is not None
    assert (apart.truth["speed"] == 1.0).all()
    assert all(s == () for s in apart.truth["shared"])
    assert (together.truth["speed"] < 1.0).any()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cross_gpu": -0.1}, r"cross_gpu must be a probability in \[0, 1\]"),
        ({"cross_gpu": 1.5}, r"cross_gpu must be a probability in \[0, 1\]"),
        ({"cross_gpu": float("nan")}, r"cross_gpu must be a probability in \[0, 1\]"),
        ({"cross_gpu": True}, r"cross_gpu must be a probability in \[0, 1\]"),
        ({"cross_gpu": 0.5}, "cross_gpu > 0 needs a topology"),
        ({"cross_gpu": 0.5, "gpus": 4}, "cross_gpu > 0 needs a topology"),
        (
            {"cross_gpu": 0.5, "topology": _FakeTopology()},
            "no two GPUs of the topology share a PCIe uplink or host bridge",
        ),
        (
            {"cross_gpu": 0.5, "topology": _SocketOnly()},
            "no two GPUs of the topology share a PCIe uplink or host bridge",
        ),
    ],
)
def test_bad_cross_gpu(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        synthetic(3, seed=0, **kwargs)


def test_single_gpu_topology_has_no_cross_pair() -> None:
    class OneGpu:
        def gpus(self) -> list[str]:
            return ["0"]

        def domains(self, gpus: Iterable[str]) -> list[Any]:
            return [_KindDomain(f"gpu:{g}", "gpu", (g,)) for g in gpus]

    assert len(synthetic(3, seed=0, topology=OneGpu(), cross_gpu=0.0).runs) == 3 + 2 * 6
    with pytest.raises(InputError, match="no two GPUs"):
        synthetic(3, seed=0, topology=OneGpu(), cross_gpu=0.1)


# --- Sharing mode ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(MODES))
def test_mode_labels_every_run_and_changes_nothing_else(mode: str, p4d: Topology) -> None:
    kwargs: dict[str, Any] = {"n_jobs": 5, "seed": 3, "topology": p4d, "cross_gpu": 0.5}
    plain = synthetic(**kwargs)
    labelled = synthetic(**kwargs, mode=mode)
    assert "mode" not in plain.runs.columns
    assert labelled.runs["mode"].tolist() == [mode] * len(plain.runs)
    assert labelled.runs.columns.tolist() == [*plain.runs.columns, "mode"]
    pd.testing.assert_frame_equal(labelled.runs.drop(columns="mode"), plain.runs)
    assert labelled.samples is not None and plain.samples is not None
    pd.testing.assert_frame_equal(labelled.samples, plain.samples)
    assert labelled.truth is not None and plain.truth is not None
    np.testing.assert_array_equal(labelled.truth["speed"], plain.truth["speed"])
    validate_runs(labelled.runs, "labelled")
    assert labelled.name == f"synthetic(n_jobs=5, seed=3, cross_gpu=0.5, mode={mode!r})"
    assert synthetic(2, seed=0, mode=None).runs.equals(synthetic(2, seed=0).runs)


@pytest.mark.parametrize("mode", ["mig", "MPS", "", 1, True])
def test_bad_mode(mode: Any) -> None:
    with pytest.raises(InputError) as info:
        synthetic(3, seed=0, mode=mode)
    assert str(info.value) == f"mode must be one of mps, timeslice or None, not {mode!r}"


# --- Samples follow the collectors' long-table conventions -----------------------------------

_HOST_METRICS = {"host_cpu_busy_pct", "instructions"}


def _check_devices(data: CoLocationData) -> None:
    """Host metrics carry device "host", GPU metrics a GPU of their run; the table passes the
    collectors' validation unchanged (synthetic values are never missing)."""
    s = data.samples
    assert s is not None
    host = s["metric"].isin(_HOST_METRICS)
    assert host.any() and (~host).any()
    assert (s.loc[host, "device"] == "host").all()
    gpus_of = data.runs.groupby("run_id")["device"].agg(set).to_dict()
    gpu = s.loc[~host]
    assert all(d in gpus_of[r] for r, d in zip(gpu["run_id"], gpu["device"], strict=True))
    checked = validate_samples(s, data.name)
    assert len(checked) == len(s)
    np.testing.assert_array_equal(checked["value"], s["value"])
    assert checked["device"].tolist() == s["device"].tolist()


def test_same_gpu_samples_follow_the_collector_conventions(big: CoLocationData) -> None:
    _check_devices(big)


def test_cross_gpu_samples_follow_the_collector_conventions(cross: CoLocationData) -> None:
    _check_devices(cross)
    one_switch = synthetic(4, seed=1, topology=_OneSwitch(), cross_gpu=1.0, pairs="distinct")
    _check_devices(one_switch)
    assert _cross_runs(one_switch)  # every pair runs on two GPUs here


def test_no_pair_effect_is_the_data_without_it() -> None:
    a = synthetic(5, seed=3, samples_per_run=2)
    b = synthetic(5, seed=3, samples_per_run=2, pair_rank=0, pair_scale=2.0)
    pd.testing.assert_frame_equal(a.runs, b.runs)
    assert a.truth is not None and a.truth["pair_effect"] is None


def test_a_pair_effect_scales_each_co_runners_load() -> None:
    data = synthetic(4, seed=5, pairs="distinct", samples_per_run=0, pair_rank=2,
                     noise_speed=0.0)
    truth = data.truth
    assert truth is not None
    z = truth["pair_effect"]
    assert z.shape == (4, 4) and np.linalg.matrix_rank(z) == 2
    # Row of job0 in the run with job1: its load is its own demand plus e^{z_01} job1's.
    d, s = truth["demand"], truth["sensitivity"]
    rows = data.runs.reset_index(drop=True)
    pos = rows.index[(rows["run_id"] == "pair/job0/job1") & (rows["job"] == "job0")][0]
    expect = contention_speed(d[0], s[0], d[0] + np.exp(z[0, 1]) * d[1])
    assert truth["speed"][pos] == pytest.approx(expect)
    # Counters read the plain sum: the pair effect is not in them.
    plain = synthetic(4, seed=5, pairs="distinct", samples_per_run=0, noise_speed=0.0)
    assert plain.truth is not None
    np.testing.assert_array_equal(plain.truth["demand"], d)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"pair_rank": -1}, "pair_rank must be"), ({"pair_rank": 1.5}, "pair_rank must be"),
     ({"pair_scale": float("nan")}, "pair_scale must be")],
)
def test_bad_pair_effect_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        synthetic(3, seed=0, **kwargs)
