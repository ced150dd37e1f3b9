"""Stability properties of the FITTED model, driven by hypothesis over small synthetic data.

Every property draws a small data set with a known ground truth
(:func:`interplace.datasets.synthetic`: ``n_jobs``, ``data_seed`` and what the property
perturbs are drawn as small integers or fractions, so a failure shrinks to a small data set
and hypothesis prints its parameters; ``note()`` adds the runs table), fits it, and checks one
property of the fit.

Budget (fixed, documented): every test runs under :data:`EXACT` or :data:`STATISTICAL`
settings, ``derandomize=True`` (the same examples every run, no example database), no
deadline. The exact properties (a fit against itself, or one posterior under two prediction
seeds: bit equality, a 1e-12 rounding slack or a Bonferroni bound on prediction MC error) use
short fits (30-100 steps) and run by default: 3 examples each, 5 for extreme inputs, 25 for
monotonicity (over at most 12 distinct fits, cached). The statistical ones (two fits whose
optimisation noise differs) need converged fits of 4-5 jobs (800 steps, ~10 s each on two
shared cores) and are marked ``slow``: 3 examples each, their reference fits cached per
``(n_jobs, data_seed)``. Measured on two shared cores: 46 s by default (2026-11-27), 260 s with
``-m slow``. A failure re-runs the fits while hypothesis shrinks, so it takes minutes: a
deliberately broken copy of the relabelling property shrank to ``n_jobs=2, data_seed=0`` and
printed that 8-row runs table after 4-5 minutes on loaded cores.

Tolerances for fits that differ by optimisation noise are those of ``test_properties.py``'s
module docstring (:func:`_assert_agree` there): RMS of ``|Δmean| / sd`` over the queries at
most 0.5 and every one at most 1.75; the reasoning is repeated where each is used.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pyro
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from interplace.datasets import CoLocationData, synthetic
from interplace.model import InterferenceModel, Query, SpeedPosterior, fit

from .test_properties import _assert_agree, _queries, _relabel_data, _relabel_queries

# Shrink a failure to a small data set, but skip the "explain" phase, which refits every
# argument's alternatives after shrinking (minutes of fits for one more line of output).
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink)

EXACT = settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    database=None,
    phases=_PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Short fits compared with themselves: a few examples are enough to catch a broken
invariance (it breaks on every data set, not on rare ones)."""

STATISTICAL = settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    database=None,
    phases=_PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Converged fits compared across optimisation noise: each example costs two fits."""

STEPS = 800  # converged enough on 4-5 jobs that optimisation error is ~0.1-0.5 sd (see above)
WORKERS = 2  # the STEPS fits' four restarts in two processes: the same models bit for bit
# (tests/model/test_restarts.py), in about 0.6 of the wall time on two cores
SHORT = 30  # exact properties: the fit need not converge, only be deterministic
MONO_STEPS = 40  # fits behind the monotonicity property (cached, at most 12)
EXTREME_STEPS = 100  # see the extreme-input property
S = 4000  # posterior draws: prediction MC error sqrt(2 / S) = 0.02 sd on a difference

n_jobs_st = st.integers(4, 5)
data_seed_st = st.integers(0, 3)


@functools.cache
def _data(n_jobs: int, data_seed: int, samples_per_run: int = 6) -> CoLocationData:
    return synthetic(n_jobs, seed=data_seed, samples_per_run=samples_per_run)


@functools.cache
def _reference(n_jobs: int, data_seed: int, seed: int = 0) -> InterferenceModel:
    """The converged reference fit of a drawn data set (cached: examples share data sets)."""
    return fit(_data(n_jobs, data_seed), seed=seed, steps=STEPS, min_steps=STEPS,
               workers=WORKERS)


@functools.cache
def _short(n_jobs: int, data_seed: int, pairs: str) -> tuple[CoLocationData, InterferenceModel]:
    data = synthetic(n_jobs, seed=data_seed, samples_per_run=3, pairs=pairs)
    # One plain fit (restarts=1): monotonicity holds draw by draw, and a mixture's draws are
    # its components' (the small-data default's four restarts would take four times as long).
    return data, fit(data, seed=0, steps=MONO_STEPS, min_steps=MONO_STEPS, restarts=1)


def _show(data: CoLocationData) -> None:
    """Print the data set with a failing example (hypothesis shows notes on failure)."""
    note(f"runs ({len(data.runs)} rows):\n{data.runs.to_string()}")
    if data.samples is not None:
        note(f"samples: {len(data.samples)} rows over {data.samples['run_id'].nunique()} runs")


def _predict(model: InterferenceModel, queries: list[Query]) -> SpeedPosterior:
    return model.posterior_speed(queries, num_samples=S, seed=0)


# ------------------------------------------------- 1. relabelling and permuting (exact)


@EXACT
@given(n_jobs=st.integers(2, 4), data_seed=st.integers(0, 50), prefix=st.sampled_from("wxz"))
def test_an_order_keeping_relabelling_gives_the_same_fit_bit_for_bit(
    n_jobs: int, data_seed: int, prefix: str
) -> None:
    # fit sorts jobs by name: a renaming that keeps their order keeps every index, tensor and
    # random number, so the posterior is identical bit for bit, whatever the data.
    data = synthetic(n_jobs, seed=data_seed, samples_per_run=3)
    _show(data)
    jobs = sorted(data.runs["job"].unique())
    mapping = {j: f"{prefix}-{j}" for j in jobs}
    a = fit(data, seed=0, steps=SHORT, min_steps=SHORT)
    b = fit(_relabel_data(data, mapping), seed=0, steps=SHORT, min_steps=SHORT)
    assert b.jobs == tuple(mapping[j] for j in a.jobs)
    for name, (loc, scale) in a.posterior.items():
        assert torch.equal(b.posterior[name][0], loc), name
        assert torch.equal(b.posterior[name][1], scale), name
    q = _queries(a.jobs)
    pa = a.posterior_speed(q, num_samples=64, seed=1)
    pb = b.posterior_speed(_relabel_queries(q, mapping), num_samples=64, seed=1)
    assert torch.equal(pa.speed, pb.speed) and torch.equal(pa.measured, pb.measured)


@pytest.mark.slow
@STATISTICAL
@given(n_jobs=n_jobs_st, data_seed=data_seed_st, perm_seed=st.integers(0, 2**16))
def test_permuting_rows_and_relabelling_jobs_moves_predictions_only_by_optimisation_noise(
    n_jobs: int, data_seed: int, perm_seed: int
) -> None:
    # A random renaming changes the jobs' internal order and a row permutation the order of
    # the observations, so each latent sees other gradient noise: the fits differ by
    # optimisation error only, which _assert_agree bounds (RMS <= 0.5 sd: each fit's own
    # error <= 0.35 sd; every query <= 1.75 sd: Bonferroni over ~100 queries at 5%).
    data = _data(n_jobs, data_seed)
    _show(data)
    rng = np.random.default_rng(perm_seed)
    jobs = sorted(data.runs["job"].unique())
    names = [f"q{k}" for k in rng.permutation(len(jobs))]
    mapping = dict(zip(jobs, names, strict=True))
    note(f"mapping {mapping}")
    shuffled = _relabel_data(data, mapping)
    runs = shuffled.runs.iloc[rng.permutation(len(shuffled.runs))].reset_index(drop=True)
    assert shuffled.samples is not None
    samples = shuffled.samples.iloc[rng.permutation(len(shuffled.samples))]
    other = fit(
        CoLocationData(runs, samples.reset_index(drop=True), "shuffled"),
        seed=0,
        steps=STEPS,
        min_steps=STEPS,
        workers=WORKERS,
    )
    ref = _reference(n_jobs, data_seed)
    q = _queries(ref.jobs)
    _assert_agree(_predict(ref, q), _predict(other, _relabel_queries(q, mapping)), "permuted")


# --------------------------------------------- 2. dropped samples, duplicated runs (stat)


@pytest.mark.slow
@STATISTICAL
@given(
    n_jobs=n_jobs_st,
    data_seed=data_seed_st,
    drop=st.sampled_from([0.05, 0.1, 0.2, 0.3]),
    drop_seed=st.integers(0, 2**16),
)
def test_dropping_counter_samples_moves_demands_by_about_sqrt_f_over_1_minus_f_sd(
    n_jobs: int, data_seed: int, drop: float, drop_seed: int
) -> None:
    data = _data(n_jobs, data_seed)
    _show(data)
    assert data.samples is not None
    keep = np.random.default_rng(drop_seed).random(len(data.samples)) >= drop
    note(f"kept {int(keep.sum())} of {len(data.samples)} samples")
    fewer = CoLocationData(data.runs, data.samples.loc[keep].reset_index(drop=True), "fewer")
    other = fit(fewer, seed=0, steps=STEPS, min_steps=STEPS, workers=WORKERS)
    full = _reference(n_jobs, data_seed).draws(S, seed=0)["log_demand"]
    part = other.draws(S, seed=0)["log_demand"]
    z = ((part.mean(0) - full.mean(0)) / full.std(0)).abs()
    # Were the posterior a Gaussian mean of n samples, dropping a fraction f of them moves it
    # by N(0, f / (1 - f)) of its sd: 0.23-0.65 sd for f = 0.05-0.3. RMS of z <= 1 leaves room
    # for the optimisation error (<= 0.5 sd RMS between two fits, module docstring of
    # test_properties); no single demand of the 20-25 beyond 3 sd (Bonferroni with RMS 1:
    # 25 x P(|N(0,1)| > 3) = 0.07). MC error of each mean: sd / sqrt(4000), negligible.
    rms = float(z.pow(2).mean().sqrt())
    note(f"z:\n{z.numpy().round(2)}")
    assert rms <= 1.0, f"RMS shift {rms:.3f} posterior sd"
    assert float(z.max()) <= 3.0, f"a demand moved by {float(z.max()):.2f} posterior sd"


def _duplicate(data: CoLocationData, runs: list[str]) -> CoLocationData:
    extra = [data.runs.loc[data.runs["run_id"] == r].assign(run_id=f"{r}#again") for r in runs]
    samples = data.samples
    if samples is not None:
        more = [samples.loc[samples["run_id"] == r].assign(run_id=f"{r}#again") for r in runs]
        samples = pd.concat([samples, *more], ignore_index=True)
    return CoLocationData(pd.concat([data.runs, *extra], ignore_index=True), samples, "dup")


@pytest.mark.slow
@STATISTICAL
@given(n_jobs=n_jobs_st, data_seed=data_seed_st, k=st.integers(1, 4), pick=st.integers(0, 2**16))
def test_duplicating_whole_runs_moves_predictions_within_their_sd(
    n_jobs: int, data_seed: int, k: int, pick: int
) -> None:
    data = _data(n_jobs, data_seed)
    _show(data)
    size = data.run_sizes()
    pairs = sorted(str(r) for r in size.index[size >= 2])
    chosen = np.random.default_rng(pick).permutation(pairs)[:k].tolist()
    note(f"duplicated runs {chosen}")
    other = fit(_duplicate(data, chosen), seed=0, steps=STEPS, min_steps=STEPS,
                workers=WORKERS)
    ref = _reference(n_jobs, data_seed)
    q = _queries(ref.jobs)
    a, b = _predict(ref, q), _predict(other, q)
    # A duplicated run counts twice: its k of ~15 runs get weight 2, which moves a posterior
    # mean like a partial bootstrap, by about sqrt(k / n_runs) <= 0.5 sd, beside the
    # optimisation error (<= 0.5 sd RMS). So RMS z <= 1 and, Bonferroni over ~100 correlated
    # queries at RMS 1 (100 x P(|N(0,1)| > 3.5) = 0.05), every z <= 3.5.
    z = np.abs(a.mean - b.mean) / np.sqrt((a.sd**2 + b.sd**2) / 2)
    rms = float(np.sqrt(np.mean(z**2)))
    note(f"RMS z {rms:.3f}, max z {float(z.max()):.3f}")
    assert rms <= 1.0 and float(z.max()) <= 3.5
    # ... and the duplicated runs' own predictions do not get less certain: a 90% width may
    # grow by at most the 20% that MC (8%) and optimisation error (11%) allow (the fixed-case
    # reasoning of test_properties' more-runs test).
    own = [Query(j, (c,)) for r in chosen for j, c in _pair_of(data, r)]
    w0, w1 = _predict(ref, own), _predict(other, own)
    ratio = (w1.q95 - w1.q05) / (w0.q95 - w0.q05)
    assert (ratio <= 1.2).all(), f"90% widths grew: ratios {ratio.round(3)}"


def _pair_of(data: CoLocationData, run: str) -> list[tuple[str, str]]:
    jobs = data.runs.loc[data.runs["run_id"] == run, "job"].astype(str).tolist()
    return [(jobs[0], jobs[1]), (jobs[1], jobs[0])]


# -------------------------------------------------- 3. monotone in co-runner load (exact)

resources_st = st.lists(
    st.sampled_from(("gpu_compute", "gpu_membw", "pcie_h2d", "pcie_d2h", "host_cpu")),
    unique=True,
).map(lambda x: tuple(sorted(x)))


@settings(EXACT, max_examples=25)
@given(
    n_jobs=st.integers(2, 4),
    data_seed=st.integers(0, 1),  # with pairs: at most 12 distinct (cached) fits
    pairs=st.sampled_from(["all", "distinct"]),
    data=st.data(),
)
def test_predictions_never_rise_with_co_runner_load_on_any_fitted_data(
    n_jobs: int, data_seed: int, pairs: str, data: st.DataObject
) -> None:
    # The fitted contention function is monotone in the load: adding a co-runner (load on
    # the resources it shares goes up) lowers every posterior draw of the true speed, and
    # sharing more resources with the same co-runners does too. One call, one seed: the draws
    # are paired, so only rounding separates the sides (1e-12).
    ds, model = _short(n_jobs, data_seed, pairs)
    _show(ds)
    jobs = model.jobs
    job = data.draw(st.sampled_from(jobs), label="job")
    base = data.draw(st.lists(st.sampled_from(jobs), max_size=3), label="co-runners")
    extra = data.draw(st.sampled_from(jobs), label="added co-runner")
    shares = [data.draw(resources_st, label=f"shares {k}") for k in range(len(base) + 1)]
    more_shares = [
        tuple(sorted(set(s) | set(data.draw(resources_st, label=f"more {k}"))))
        for k, s in enumerate(shares)
    ]
    q0 = Query(job, tuple(base), tuple(shares[:-1]))
    q1 = Query(job, (*base, extra), tuple(shares))
    q2 = Query(job, (*base, extra), tuple(more_shares))
    p = model.posterior_speed([q0, q1, q2], num_samples=64, seed=data.draw(st.integers(0, 99)))
    assert torch.isfinite(p.speed).all()
    assert float((p.speed[:, 1] - p.speed[:, 0]).max()) <= 1e-12, f"{q0} -> {q1}"
    assert float((p.speed[:, 2] - p.speed[:, 1]).max()) <= 1e-12, f"{q1} -> {q2}"


# --------------------------------------------------------------- 4. seeds (statistical)


@pytest.mark.slow
@STATISTICAL
@given(n_jobs=n_jobs_st, data_seed=data_seed_st, seed=st.integers(1, 2**16))
def test_two_fit_seeds_agree_within_the_optimisation_error(
    n_jobs: int, data_seed: int, seed: int
) -> None:
    # Two seeds differ by optimisation noise only: _assert_agree's tolerances (RMS <= 0.5 sd,
    # each query <= 1.75 sd), reasoned in test_properties' module docstring.
    data = _data(n_jobs, data_seed)
    _show(data)
    other = fit(data, seed=seed, steps=STEPS, min_steps=STEPS, workers=WORKERS)
    ref = _reference(n_jobs, data_seed)
    assert not torch.equal(other.posterior["sens_eps"][0], ref.posterior["sens_eps"][0])
    q = _queries(ref.jobs)
    _assert_agree(_predict(ref, q), _predict(other, q), f"seeds 0 and {seed}")


@EXACT
@given(n_jobs=st.integers(2, 4), data_seed=st.integers(0, 50), seed=st.integers(0, 2**16))
def test_one_posterior_two_prediction_seeds_agree_within_prediction_mc_error(
    n_jobs: int, data_seed: int, seed: int
) -> None:
    # One posterior, two prediction seeds: only prediction MC error separates the means; their
    # difference has sd sd_q * sqrt(2 / S). Over <= 60 queries the largest |z| exceeds 4.5
    # with probability 60 x P(|N(0,1)| > 4.5) < 0.1%.
    ds, model = _short(n_jobs, data_seed % 3, "all")
    _show(ds)
    q = _queries(model.jobs)
    a = model.posterior_speed(q, num_samples=2000, seed=seed)
    b = model.posterior_speed(q, num_samples=2000, seed=seed + 1)
    z = np.abs(a.mean - b.mean) / np.sqrt((a.sd**2 + b.sd**2) / 2000)
    assert float(z.max()) <= 4.5, float(z.max())


# ------------------------------------------------------ 5. extreme but valid inputs (exact)


@st.composite
def extreme_data(draw: st.DrawFn) -> CoLocationData:
    """Small data sets at the edges of what is valid: speeds from 0.001 to 1.5, throughputs
    from 1e-12 to 1e15, counters at 0, at full scale or constant, one sample per run, runs
    of one job with itself, isolated runs only, no counters at all."""
    n = draw(st.integers(1, 3), label="n_jobs")
    jobs = [f"j{i}" for i in range(n)]
    iso = draw(st.sampled_from([1e-12, 1.0, 1e15]), label="isolated throughput")
    speed = draw(st.sampled_from([1e-3, 0.01, 0.5, 1.0, 1.5]), label="speed")
    shape = draw(st.sampled_from(["all-pairs", "one-pair", "self-pair", "isolated", "triple"]))
    rows = [(f"iso/{j}", j, iso) for j in jobs]
    if shape == "all-pairs":
        for i, a in enumerate(jobs):
            for b in jobs[i:]:
                rows += [(f"p/{a}/{b}", a, iso * speed), (f"p/{a}/{b}", b, iso * speed)]
    elif shape == "one-pair" or (shape == "triple" and n < 3):
        rows += [("p", jobs[0], iso * speed), ("p", jobs[-1], iso * speed)]
    elif shape == "self-pair":
        rows += [("p", jobs[0], iso * speed), ("p", jobs[0], iso * speed)]
    elif shape == "triple":
        rows += [("t", j, iso * speed) for j in jobs]
    runs = pd.DataFrame(rows, columns=["run_id", "job", "throughput"])
    util = draw(st.sampled_from([None, 0.0, 0.5, 1.0]), label="utilisation")
    if util is None:
        return CoLocationData(runs, None, "extreme")
    per_run = draw(st.integers(1, 3), label="samples per run")
    ramp = draw(st.sampled_from([0.0, 0.01]), label="ramp")
    full = {"gpu_util_pct": 100.0, "mem_util_pct": 100.0, "pcie_rx_kbps": 16e6}
    samples = pd.DataFrame(
        [
            (rid, float(k), m, min(util + ramp * k, 1.0) * scale)
            for rid in runs["run_id"].unique()
            for m, scale in full.items()
            for k in range(per_run)
        ],
        columns=["run_id", "t_s", "metric", "value"],
    )
    return CoLocationData(runs, samples, "extreme")


@settings(EXACT, max_examples=5)
@given(data=extreme_data())
def test_extreme_but_valid_inputs_fit_to_finite_positive_predictions(
    data: CoLocationData,
) -> None:
    # 100 steps span the high-learning-rate start, where an input the model cannot take blows
    # up first (fit raises as soon as a loss is not finite), and the whole learning-rate
    # decay (it spans `steps`). Finite-ness is exact: no tolerance. (The fixed extreme cases
    # of test_properties.py run 200 steps under -m slow.)
    _show(data)
    model = fit(data, seed=0, steps=EXTREME_STEPS, min_steps=EXTREME_STEPS)
    for name, (loc, scale) in model.posterior.items():
        assert torch.isfinite(loc).all() and torch.isfinite(scale).all(), name
    q = [Query(j, ()) for j in model.jobs] + _queries(model.jobs)
    p = model.posterior_speed(q, num_samples=100)
    assert torch.isfinite(p.speed).all() and torch.isfinite(p.measured).all()
    assert (p.speed > 0).all() and (p.measured > 0).all()
    util = model.utilisation(data, num_samples=20)
    assert np.isfinite(util[["mean", "q05", "q95"]].to_numpy(dtype=float)).all()


# ------------------------------------------------- 6. two models in one process (exact)


@EXACT
@given(
    first=st.tuples(st.integers(2, 4), st.integers(0, 50)),
    second=st.tuples(st.integers(2, 4), st.integers(0, 50)),
    global_seed=st.integers(0, 2**16),
)
def test_two_models_fitted_in_one_process_stay_independent(
    first: tuple[int, int], second: tuple[int, int], global_seed: int
) -> None:
    # Fitting B between two fits of A changes nothing of A (bit for bit), and neither fit nor
    # prediction touches torch's global RNG, Pyro's parameter store or its settings.
    da = synthetic(first[0], seed=first[1], samples_per_run=2)
    db = synthetic(second[0], seed=second[1], samples_per_run=2, pairs="distinct")
    _show(da)
    store = pyro.get_param_store()
    keys = sorted(store.keys())
    local = pyro.settings.get("module_local_params")
    torch.manual_seed(global_seed)
    rng = torch.get_rng_state()
    a1 = fit(da, seed=0, steps=SHORT, min_steps=SHORT)
    snapshot = {k: (v[0].clone(), v[1].clone()) for k, v in a1.posterior.items()}
    b = fit(db, seed=0, steps=SHORT, min_steps=SHORT)
    b.posterior_speed([Query(b.jobs[0], (b.jobs[-1],))], num_samples=10)
    a2 = fit(da, seed=0, steps=SHORT, min_steps=SHORT)
    assert torch.equal(torch.get_rng_state(), rng)
    assert sorted(store.keys()) == keys == []
    assert pyro.settings.get("module_local_params") == local
    for name, (loc, scale) in a1.posterior.items():
        assert torch.equal(loc, snapshot[name][0]) and torch.equal(scale, snapshot[name][1])
        assert torch.equal(a2.posterior[name][0], loc), name
        assert torch.equal(a2.posterior[name][1], scale), name
