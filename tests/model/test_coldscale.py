"""Cold jobs' demand read on the fitted jobs' scale (interplace.model._coldscale)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interplace.datasets import synthetic
from interplace.errors import InputError
from interplace.model import cold_split, fit
from interplace.model._coldscale import (
    MIN_READING,
    MIN_WARM_JOBS,
    align_cold_demand,
    isolated_log_readings,
    warm_families,
)
from interplace.model._data import Counters, counters_from_samples
from interplace.placement._cold import with_cold_jobs

RES = ("gpu_compute", "gpu_membw")


def _posterior(
    demand: torch.Tensor, intensity: torch.Tensor
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    return {
        "log_demand": (demand, torch.full_like(demand, 0.1)),
        "log_intensity": (intensity, torch.full_like(intensity, 0.2)),
        "sens_loc": (torch.zeros(demand.shape[:-2] + demand.shape[-1:]),) * 2,
    }


def test_cold_rows_move_by_the_gap_difference_in_each_component() -> None:
    # Two components, 6 warm jobs and 2 cold ones, gpu_compute read by all, gpu_membw by none.
    x = np.full((8, 2), np.nan)
    x[:, 0] = np.log(np.linspace(0.1, 0.8, 8))
    warm = np.array([True] * 6 + [False] * 2)
    gap_warm = torch.tensor([-0.2, -0.1], dtype=torch.float64)  # per component
    gap_cold = torch.tensor([0.05, 0.15], dtype=torch.float64)
    demand = torch.as_tensor(np.nan_to_num(x), dtype=torch.float64).expand(2, 8, 2).clone()
    demand[:, :6, 0] += gap_warm.unsqueeze(1)
    demand[:, 6:, 0] += gap_cold.unsqueeze(1)
    demand[:, :, 1] = -1.0
    intensity = torch.zeros(2, 8, 2, dtype=torch.float64)
    post = _posterior(demand, intensity)
    before = {k: (a.clone(), b.clone()) for k, (a, b) in post.items()}
    new, gaps, shifts = align_cold_demand(post, x, warm, RES, 2)
    assert gaps["gpu_compute"] == pytest.approx(gap_warm.tolist())
    assert shifts["gpu_compute"] == pytest.approx((gap_warm - gap_cold).tolist())
    assert "gpu_membw" not in gaps and "gpu_membw" not in shifts  # nothing reads it
    d, i = new["log_demand"][0], new["log_intensity"][0]
    # Cold jobs now sit on the warm jobs' gap; warm jobs and the unread resource do not move.
    assert torch.allclose(d[:, 6:, 0] - torch.as_tensor(x[6:, 0]), gap_warm.unsqueeze(1))
    assert torch.equal(d[:, :6], demand[:, :6]) and torch.equal(d[:, :, 1], demand[:, :, 1])
    # Pressure (log demand + log intensity) is kept exactly; spreads are kept.
    assert torch.allclose(d + i, demand + intensity)
    assert torch.equal(new["log_demand"][1], post["log_demand"][1])
    assert new["sens_loc"] is post["sens_loc"]
    for k, (a, b) in before.items():  # the input posterior is not changed
        assert torch.equal(a, post[k][0]) and torch.equal(b, post[k][1])


def test_too_few_warm_readings_leave_a_resource_alone() -> None:
    n = MIN_WARM_JOBS  # MIN_WARM_JOBS - 1 warm readers and one cold job
    x = np.log(np.full((n, 2), 0.5))
    warm = np.array([True] * (n - 1) + [False])
    demand = torch.zeros(n, 2, dtype=torch.float64)
    post = _posterior(demand, torch.zeros_like(demand))
    new, gaps, shifts = align_cold_demand(post, x, warm, RES, 1)
    assert gaps == {} and shifts == {}
    assert new["log_demand"] is post["log_demand"]


def test_low_readings_do_not_count_but_move_and_no_reading_neither() -> None:
    # Warm: one reading 0 (no log), one reading 1% (gap +2: a loosely pinned demand), then
    # MIN_WARM_JOBS at 50% with gap 0. Cold: one at 50% (gap +0.3), one at 1% (gap +1), one 0.
    n_warm = MIN_WARM_JOBS + 2
    u = [np.nan, 0.01] + [0.5] * MIN_WARM_JOBS + [0.5, 0.01, np.nan]
    x = np.log(np.array(u))[:, None]
    warm = np.arange(len(u)) < n_warm
    demand = torch.as_tensor(np.nan_to_num(x, nan=5.0), dtype=torch.float64)
    demand[1, 0] += 2.0
    demand[n_warm, 0] += 0.3
    demand[n_warm + 1, 0] += 1.0
    post = _posterior(demand, torch.zeros_like(demand))
    new, gaps, shifts = align_cold_demand(post, x, warm, RES[:1], 1)
    assert gaps["gpu_compute"] == pytest.approx([0.0])  # neither the 5.0 nor the +2 count
    assert shifts["gpu_compute"] == pytest.approx([-0.3])  # nor the cold +1
    d = new["log_demand"][0][:, 0]
    assert float(d[n_warm]) == pytest.approx(math.log(0.5))
    assert float(d[n_warm + 1]) == pytest.approx(math.log(0.01) + 0.7)  # moved all the same
    assert float(d[-1]) == 5.0  # no reading: not moved
    assert torch.equal(d[:n_warm], demand[:n_warm, 0])


@settings(max_examples=40, deadline=None)
@given(
    st.integers(MIN_WARM_JOBS, 9), st.integers(1, 4), st.integers(0, 2**31 - 1),
)
def test_shift_properties(n_warm: int, n_cold: int, seed: int) -> None:
    # For any posterior and readings at or above MIN_READING: after the shift the cold jobs'
    # median gap equals the warm jobs', pressure is unchanged, and relabelling the jobs
    # relabels the result.
    rng = np.random.default_rng(seed)
    n = n_warm + n_cold
    x = np.log(rng.uniform(MIN_READING, 1.0, (n, 2)))
    demand = torch.as_tensor(x + rng.normal(0, 0.3, (n, 2)))
    intensity = torch.as_tensor(rng.normal(0, 0.3, (n, 2)))
    warm = np.arange(n) < n_warm
    new, gaps, _ = align_cold_demand(_posterior(demand, intensity), x, warm, RES, 1)
    d = new["log_demand"][0].numpy()
    for r, name in enumerate(RES):
        assert np.median(d[~warm, r] - x[~warm, r]) == pytest.approx(gaps[name][0], abs=1e-12)
        assert np.median(d[warm, r] - x[warm, r]) == pytest.approx(gaps[name][0], abs=1e-12)
    assert np.allclose(d + new["log_intensity"][0].numpy(), (demand + intensity).numpy())
    perm = rng.permutation(n)
    pnew, pgaps, _ = align_cold_demand(
        _posterior(demand[perm], intensity[perm]), x[perm], warm[perm], RES, 1
    )
    assert np.allclose(pnew["log_demand"][0].numpy(), d[perm])
    assert pgaps.keys() == gaps.keys()
    assert all(pgaps[k] == pytest.approx(gaps[k], abs=1e-12) for k in gaps)


def test_isolated_readings_average_a_jobs_groups_and_drop_zeros() -> None:
    # Job 0: two isolated gpu_util groups (0.2 and 0.4) and one mem_util of 0; job 1: shares
    # a group with job 0 (not isolated) and has one isolated gpu_util of 0.5.
    members = np.array([[1, 0, 0], [1, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=float)
    c = Counters(
        members=members, metric=np.array([0, 0, 1, 0, 0]), n=np.full(5, 4.0),
        mean=np.array([0.2, 0.4, 0.0, 0.9, 0.5]), ssd=np.zeros(5),
        metrics=("gpu_util_pct", "mem_util_pct"), full_scale=(100.0, 100.0),
        keys=tuple((f"r{g}", "0", "m") for g in range(5)),
    )
    x = isolated_log_readings(c, 2, ("gpu_compute", "gpu_membw", "host_cpu"))
    assert x[0, 0] == pytest.approx(math.log(0.3)) and x[1, 0] == pytest.approx(math.log(0.5))
    assert np.isnan(x[0, 1]) and np.isnan(x[1, 1]) and np.isnan(x[:, 2]).all()


def test_fit_moves_only_the_cold_jobs_and_records_it() -> None:
    data = synthetic(8, seed=1, samples_per_run=6)
    train, _, cold = cold_split(data, cold_jobs=2, seed=0)
    kw = {"seed": 0, "steps": 150, "min_steps": 150, "restarts": 2, "measured": False}
    on, off = fit(train, **kw), fit(train, cold_scale=False, **kw)  # type: ignore[arg-type]
    assert off.info["demand_gap"] == {} and off.info["cold_demand_shift"] == {}
    assert on.info["cold_scale"] is True and off.info["cold_scale"] is False
    shifts = on.info["cold_demand_shift"]
    ci = [on.jobs.index(j) for j in cold]
    wi = [j for j in range(len(on.jobs)) if j not in ci]
    # A resource moves where at least MIN_WARM_JOBS of the six warm jobs read it at
    # MIN_READING or more (here two read 0 GPU utilisation, so gpu_compute stays) and a cold
    # job does too.
    jobs = tuple(on.jobs)
    x = isolated_log_readings(counters_from_samples(train, jobs), len(jobs), on.resources)
    well = np.nan_to_num(x, nan=-np.inf) >= math.log(MIN_READING)
    expect = {
        r for k, r in enumerate(on.resources)
        if well[wi, k].sum() >= MIN_WARM_JOBS and well[ci, k].any()
    }
    assert set(shifts) == expect and expect
    assert set(shifts) <= set(on.info["demand_gap"])
    d_on, d_off = on.posterior["log_demand"][0], off.posterior["log_demand"][0]
    i_on, i_off = on.posterior["log_intensity"][0], off.posterior["log_intensity"][0]
    delta = torch.tensor(
        [shifts.get(r, [0.0, 0.0]) for r in on.resources], dtype=d_on.dtype
    ).T  # (K, R)
    assert torch.allclose(d_on[:, ci] - d_off[:, ci], delta.unsqueeze(1).expand(2, 2, -1))
    assert torch.allclose(d_on + i_on, d_off + i_off)
    assert torch.equal(d_on[:, wi], d_off[:, wi])
    for name, (loc, scale) in off.posterior.items():  # every other site as SVI left it
        if name not in ("log_demand", "log_intensity"):
            assert torch.equal(on.posterior[name][0], loc), name
        assert torch.equal(on.posterior[name][1], scale), name
    with pytest.raises(InputError, match="cold_scale must be True or False"):
        fit(train, steps=5, min_steps=0, cold_scale=1)  # type: ignore[arg-type]


def test_a_new_cold_job_gets_the_fits_gap() -> None:
    # A fit that shifted no cold job of its own (every job here is warm) gives a new job the
    # fit's rule for a single cold one: its read demand moved to the warm gap above its log
    # reading, its intensity back by as much (the pressure at the read demand).
    from interplace.placement._cold import read_demand

    data = synthetic(4, seed=2, samples_per_run=4)
    m = fit(data, seed=0, steps=100, min_steps=100, restarts=1, measured=False)
    gpu, mem = m.resources.index("gpu_compute"), m.resources.index("gpu_membw")
    info = {**m.info, "demand_gap": {"gpu_compute": [-0.25]}, "cold_demand_shift": {}}
    m = dataclasses.replace(m, info=info)
    m2 = with_cold_jobs(m, {"new": {"gpu_util_pct": 40.0, "mem_util_pct": 30.0},
                            "idle": {"gpu_util_pct": 0.0}})
    d, i = m2.posterior["log_demand"][0], m2.posterior["log_intensity"][0]

    def read(r: int, metric: str, u: float) -> float:
        prior_sd = math.hypot(float(m.posterior["demand_sd"][0][r].exp()),
                              float(m.posterior["demand_mu"][1][r]))
        noise = float(m.posterior["metric_noise"][0][m.metrics.index(metric)].exp())
        return read_demand(float(m.posterior["demand_mu"][0][r]), prior_sd, [u], [noise],
                           m.info["isolated_samples"])[0]

    assert float(d[-2, gpu]) == pytest.approx(math.log(0.4) - 0.25)
    assert float(d[-2, gpu] + i[-2, gpu]) == pytest.approx(read(gpu, "gpu_util_pct", 0.4))
    # No gap recorded for memory bandwidth: the read demand itself, intensity 0.
    assert float(d[-2, mem]) == pytest.approx(read(mem, "mem_util_pct", 0.3))
    assert float(i[-2, mem]) == 0.0
    # A reading of 0 is not moved (the fit does not move a cold job without a reading).
    assert float(d[-1, gpu]) == pytest.approx(read(gpu, "gpu_util_pct", 0.0))
    assert float(d[-1, gpu]) < math.log(0.05) and float(i[-1, gpu]) == 0.0
    bad = dataclasses.replace(m, info={**m.info, "demand_gap": {"gpu_compute": [0.1, 0.2]}})
    with pytest.raises(InputError, match=r"demand_gap'\]\['gpu_compute'\] is not 1 number"):
        with_cold_jobs(bad, {"new": {"gpu_util_pct": 40.0}})
    bad = dataclasses.replace(m, info={**m.info, "cold_demand_shift": {"gpu_compute": ["x"]}})
    with pytest.raises(InputError, match=r"cold_demand_shift'\]\['gpu_compute'\] is not 1"):
        with_cold_jobs(bad, {"new": {"gpu_util_pct": 40.0}})


def test_a_cold_job_whose_family_sets_its_intensity_keeps_it() -> None:
    # Six warm jobs, two cold: job 6's family has a warm member (its intensity centre carries
    # the warm scale already), job 7's has none. Both demands move; only job 7's intensity.
    x = np.full((8, 2), np.nan)
    x[:, 0] = np.log(np.linspace(0.1, 0.8, 8))
    warm = np.array([True] * 6 + [False] * 2)
    demand = torch.as_tensor(np.nan_to_num(x), dtype=torch.float64).clone()
    demand[:6, 0] -= 0.2
    intensity = torch.full((8, 2), 0.3, dtype=torch.float64)
    carried = warm_families(np.array([0, 0, 1, 1, 2, -1, 0, 3]), warm)
    assert carried is not None and carried.tolist() == [1.0] * 5 + [0.0, 1.0, 0.0]
    new, _, shifts = align_cold_demand(_posterior(demand, intensity), x, warm, RES, 1, carried)
    d, i = new["log_demand"][0], new["log_intensity"][0]
    assert shifts["gpu_compute"] == pytest.approx([-0.2])
    assert torch.allclose(d[6:, 0], demand[6:, 0] - 0.2)
    assert float(i[6, 0]) == pytest.approx(0.3)  # its family's centre, as fitted
    assert float(i[7, 0]) == pytest.approx(0.5)  # pressure kept: no warm mate set it
    assert warm_families(None, warm) is None


def test_fit_with_families_leaves_a_cold_members_intensity_to_its_family() -> None:
    data = synthetic(8, seed=1, samples_per_run=6)
    train, _, cold = cold_split(data, cold_jobs=2, seed=0)
    warm_job = next(j for j in sorted(data.runs["job"].unique()) if j not in cold)
    family = {cold[0]: "shared", warm_job: "shared", cold[1]: "alone"}
    kw = {"seed": 0, "steps": 150, "min_steps": 150, "restarts": 1, "measured": False,
          "family": family}
    on, off = fit(train, **kw), fit(train, cold_scale=False, **kw)  # type: ignore[arg-type]
    shifts = on.info["cold_demand_shift"]
    assert shifts
    delta = torch.tensor([shifts.get(r, [0.0])[0] for r in on.resources], dtype=torch.float64)
    (a, b) = (on.jobs.index(c) for c in cold)
    d_on, d_off = on.posterior["log_demand"][0], off.posterior["log_demand"][0]
    i_on, i_off = on.posterior["log_intensity"][0], off.posterior["log_intensity"][0]
    assert torch.allclose(d_on[[a, b]] - d_off[[a, b]], delta.expand(2, -1))
    assert torch.equal(i_on[a], i_off[a])  # the shared family's centre sets it
    assert torch.allclose(i_on[b], i_off[b] - delta)  # no warm member: pressure kept


def test_a_new_job_of_a_family_with_a_warm_member_takes_its_intensity_unshifted() -> None:
    from interplace.model._data import family_index

    data = synthetic(8, seed=1, samples_per_run=6)
    train, _, cold = cold_split(data, cold_jobs=2, seed=0)
    warm_job = next(j for j in sorted(data.runs["job"].unique()) if j not in cold)
    # Every job has a family ("rest" for the other six), so a new job without one takes the
    # families' mixture, of which the families with a warm member weigh 7 of 8 job types.
    family = {j: "rest" for j in data.runs["job"].unique()}
    family.update({cold[0]: "shared", warm_job: "shared", cold[1]: "alone"})
    m = fit(train, seed=0, steps=150, min_steps=150, restarts=1, measured=False, family=family)
    shifts = m.info["cold_demand_shift"]
    assert shifts
    reading = {"gpu_util_pct": 50.0, "mem_util_pct": 40.0}
    m2 = with_cold_jobs(
        m, {"n1": reading, "n2": reading, "n3": reading}, {"n1": "shared", "n2": "alone"}
    )
    assert m.families is not None
    idx = family_index(m.families)[0]
    effect = m.posterior["family_effect"][0]
    n_res = len(m.resources)
    rows = {f: idx[m.jobs.index(j)] for f, j in (("shared", warm_job), ("alone", cold[1]))}
    rows["rest"] = idx[m.jobs.index(next(j for j in m.jobs if family[j] == "rest"))]
    weight = {"shared": 2 / 8, "alone": 1 / 8, "rest": 5 / 8}
    i = m2.posterior["log_intensity"][0]
    for name, (delta,) in shifts.items():
        r = m.resources.index(name)
        e = {f: float(effect[row, 2 * n_res + r]) for f, row in rows.items()}
        assert float(i[-3, r]) == pytest.approx(e["shared"])  # as the fit's cold member
        assert float(i[-2, r]) == pytest.approx(e["alone"] - delta)
        mixture = sum(weight[f] * e[f] for f in e)
        assert float(i[-1, r]) == pytest.approx(mixture - delta / 8)


def test_a_malformed_record_of_warm_jobs_is_refused() -> None:
    data = synthetic(4, seed=2, samples_per_run=4)
    m = fit(data, seed=0, steps=50, min_steps=50, restarts=1, measured=False,
            family={"job0": "A", "job1": "A"})
    bad = dataclasses.replace(m, info={**m.info, "jobs_with_pairs": 3})
    with pytest.raises(InputError, match=r"info\['jobs_with_pairs'\] is not a list"):
        with_cold_jobs(bad, {"new": {"gpu_util_pct": 40.0}}, {"new": "A"})
