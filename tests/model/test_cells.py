"""The second stage of a fit: measured pairs and their effects (interplace.model._cells)."""

from __future__ import annotations

import dataclasses
import math
import pickle
import random
import threading

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interplace.datasets import CoLocationData, synthetic
from interplace.errors import InputError
from interplace.model import Hyper, InterferenceModel, Query, fit, holdout_split
from interplace.model._cells import (
    OFFSET_BOUND,
    MeasuredPairs,
    _cells_log_mean_speed,
    _cells_variance,
    _pair_terms,
    _solve_offsets,
    borrowed_effects,
    borrowed_mates,
    ceiling_lift,
    complete_effects,
    extended_pairs,
    lifted_draws,
    lifted_spread,
    measured_cells,
    measured_pairs,
    pair_log_speed,
    warm_cells,
)
from interplace.model._data import Observations
from interplace.model._fit import MEASURED_DRAWS, stage_inputs, with_second_stage
from interplace.model._softimpute import select_cells

from .conftest import SMALL_STEPS

DRAWS = 4000


def _structure_only(model: InterferenceModel) -> InterferenceModel:
    return dataclasses.replace(model, measured=None)


def _log_speeds(model: InterferenceModel, queries: list[Query]) -> torch.Tensor:
    return model.posterior_speed(queries, num_samples=DRAWS, seed=3).speed.log()


def test_the_default_fit_keeps_its_measured_pairs(small_model: InterferenceModel) -> None:
    m = small_model.measured
    assert m is not None and len(m) == small_model.info["measured_pairs"] > 0
    # The synthetic data's self-pairs are repeats: sigma_m is read off them, floored at 2%.
    assert m.noise == small_model.info["completion"]["measure_noise"]
    assert m.noise >= small_model.hyper.measure_noise
    # tau^2 = s^2 - sigma_m^2 (floored at (s/10)^2): below the structure's noise scale s.
    s = small_model.speed_noise()
    assert 0 < m.scale <= s


def test_measured_false_leaves_the_structure_alone(small_model_rank0: InterferenceModel) -> None:
    assert small_model_rank0.measured is None
    assert small_model_rank0.info["measured_pairs"] == 0


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_a_bad_measured_flag_is_refused(small_data: CoLocationData, bad: object) -> None:
    with pytest.raises(InputError, match="measured must be True or False"):
        fit(small_data, steps=1, min_steps=0, measured=bad)  # type: ignore[arg-type]


def _mean_log_speed_check(
    model: InterferenceModel, job: np.ndarray, co: np.ndarray, target: np.ndarray
) -> None:
    # The offsets were set so that the mean log speed over MEASURED_DRAWS posterior draws
    # (seed = the fit's) meets the target; a fresh mean over DRAWS other draws differs by
    # Monte Carlo error alone, sd / sqrt(MEASURED_DRAWS) + sd / sqrt(DRAWS) with sd each
    # pair's posterior sd of the log speed. 5 of those bound it (a false alarm 1 in 10^6
    # per pair).
    jobs = model.jobs
    q = [Query(jobs[j], (jobs[k],)) for j, k in zip(job, co, strict=True)]
    log_v = _log_speeds(model, q)
    sd = log_v.std(0).numpy()
    tol = 5 * sd * (1 / math.sqrt(MEASURED_DRAWS) + 1 / math.sqrt(DRAWS)) + 1e-9
    gap = np.abs(log_v.mean(0).numpy() - target)
    assert bool((gap <= tol).all()), f"worst gap {gap.max():.4g} against {tol[gap.argmax()]:.4g}"


def test_a_measured_pair_follows_its_measurement(small_model: InterferenceModel) -> None:
    # Target of a measured pair: the structure's mean plus the effect's posterior mean,
    # mu + m + w (ybar - mu - m), which is ybar up to a shrinkage of (1 - w), under 10%
    # here (w = tau^2 / (tau^2 + sigma_m^2 / n); the synthetic self-pairs' repeats put
    # sigma_m at 2.5%).
    # A target no load meets (slower than any; faster than the job alone, without the
    # ceiling lift) leaves its offset at a bound; the others must be met. The default fit
    # lifts its ceilings: its structure (iso_bias shifted) and completion are both relative
    # to the lifted structure, so their sum, the target, is the unlifted one.
    m = small_model.measured
    assert m is not None and small_model.info["ceiling_lift"]
    # Lifted, a job's fastest measured pair is met at the lower bound (the co-runner's
    # pressure off: the job's speed alone), so only a target slower than any load is missed.
    c = m.offset[m.job, m.co]
    inside = c < OFFSET_BOUND - 1e-6
    assert int((~inside).sum()) == small_model.info["completion"]["unreachable"]
    assert inside.mean() >= 0.5 and bool((c <= -OFFSET_BOUND + 1e-6).any())
    mu = pair_log_speed(_structure_only(small_model).draws(MEASURED_DRAWS, 0)).numpy()
    mu_c, prior = mu[m.job, m.co], m.expected[m.job, m.co]
    w = m.weight()
    assert bool((w > 0.9).all())
    target = mu_c + prior + w * (m.log_speed - mu_c - prior)
    _mean_log_speed_check(small_model, m.job[inside], m.co[inside], target[inside])


def test_an_unmeasured_pair_gets_its_prior_mean_and_spread(
    small_data: CoLocationData,
) -> None:
    # Leave job0's pairs out of the fit (job0 keeps its isolated runs): its pairs are not
    # measured. Its mean log speed moves by the completion's prior mean m; a new measurement
    # of it adds a Student-t(speed_df) spread of scale tau (and the measurement
    # noise, made negligible here so the spread's quartiles can be checked alone).
    runs = small_data.runs
    colocated = runs.groupby("run_id")["job"].transform("size") > 1
    drop = runs.loc[colocated & (runs["job"] == "job0"), "run_id"].unique()
    assert small_data.samples is not None
    data = dataclasses.replace(
        small_data,
        runs=runs.loc[~runs["run_id"].isin(drop)].reset_index(drop=True),
        samples=small_data.samples.loc[~small_data.samples["run_id"].isin(drop)]
        .reset_index(drop=True),
    )
    # One restart: the stage is what is checked (the mixture's is the next tests').
    model = fit(data, seed=0, steps=SMALL_STEPS, min_steps=SMALL_STEPS,
                hyper=Hyper(measure_noise=1e-6), restarts=1)
    pairs = model.measured
    assert pairs is not None
    assert 0 not in set(pairs.job.tolist()) | set(pairs.co.tolist())
    mu = pair_log_speed(_structure_only(model).draws(MEASURED_DRAWS, 0)).numpy()
    _mean_log_speed_check(model, np.array([0]), np.array([1]),
                          np.array([mu[0, 1] + pairs.expected[0, 1]]))
    p = model.posterior_speed([Query("job0", ("job1",))], num_samples=DRAWS, seed=3)
    spread = (p.measured.log() - p.speed.log())[:, 0]
    tau = float(pairs.spreads(len(model.jobs))[0, 1])  # tau: job0 is not lifted
    assert tau == pairs.scale
    # The t(4) quartiles are +-0.741 tau. Sample quartiles of 4000 draws have a standard
    # error of about 0.04 tau here, so 0.15 tau is over 3 of them.
    q25, q50, q75 = np.quantile(spread.numpy(), [0.25, 0.5, 0.75])
    assert abs(q50) <= 0.15 * tau
    assert abs(q75 - 0.741 * tau) <= 0.15 * tau
    assert abs(q25 + 0.741 * tau) <= 0.15 * tau


def test_a_co_runner_sharing_nothing_adds_neither_offset_nor_spread(
    small_model: InterferenceModel,
) -> None:
    # Offsets scale pressure on what is shared, and the unknown effect's spread comes with a
    # co-runner that shares something: a co-runner sharing nothing changes no draw.
    jobs = small_model.jobs
    alone = small_model.posterior_speed([Query(jobs[0], ())], num_samples=64, seed=5)
    apart = small_model.posterior_speed(
        [Query(jobs[0], (jobs[1],), ((),))], num_samples=64, seed=5
    )
    torch.testing.assert_close(alone.speed, apart.speed, rtol=0, atol=0)
    torch.testing.assert_close(alone.measured, apart.measured, rtol=0, atol=0)


def test_predictions_with_measured_pairs_are_reproducible(
    small_model: InterferenceModel,
) -> None:
    q = [Query(a, (b,)) for a in small_model.jobs for b in small_model.jobs]
    a = small_model.posterior_speed(q, num_samples=50, seed=7)
    b = small_model.posterior_speed(q, num_samples=50, seed=7)
    torch.testing.assert_close(a.speed, b.speed, rtol=0, atol=0)
    torch.testing.assert_close(a.measured, b.measured, rtol=0, atol=0)


def test_kept_draws_answer_as_fresh_ones(small_model: InterferenceModel) -> None:
    # posterior_speed keeps the draws of its last few (num_samples, seed): a call after
    # others with other seeds and sizes must answer exactly as a model that never kept any
    # (a fresh copy from the same posterior), and the kept ones stay bounded.
    q = [Query(a, (b,)) for a in small_model.jobs for b in small_model.jobs]
    q += [Query(small_model.jobs[0], ())]
    first = small_model.posterior_speed(q, num_samples=40, seed=11)
    small_model.posterior_speed(q[:3], num_samples=30, seed=11)
    assert small_model.posterior_speed(q[:3], num_samples=40, seed=11).speed.shape == (40, 3)
    for seed in range(6):
        small_model.posterior_speed(q[:3], num_samples=30 + seed, seed=seed)
    again = small_model.posterior_speed(q[::-1], num_samples=40, seed=11)
    fresh = dataclasses.replace(small_model).posterior_speed(q, num_samples=40, seed=11)
    torch.testing.assert_close(again.speed.flip(1), first.speed, rtol=0, atol=0)
    torch.testing.assert_close(fresh.speed, first.speed, rtol=0, atol=0)
    torch.testing.assert_close(fresh.measured, first.measured, rtol=0, atol=0)
    assert len(small_model._prepared_cache) <= 4
    # A kept entry never lets a bad draw count through: 40.0 is refused as it is uncached.
    with pytest.raises(InputError, match="num_samples must be an integer"):
        small_model.posterior_speed(q, num_samples=40.0, seed=11)  # type: ignore[arg-type]


def test_a_pickled_model_leaves_its_kept_draws_behind(small_model: InterferenceModel) -> None:
    # Models travel to worker processes by pickle (fits coming back, simulation sweeps): the
    # kept draws stay behind, and the copy answers exactly as the model (it redraws them).
    q = [Query(a, (b,)) for a in small_model.jobs for b in small_model.jobs]
    model = dataclasses.replace(small_model)
    bare = len(pickle.dumps(model))
    before = model.posterior_speed(q, num_samples=200, seed=5)
    assert model._prepared_cache  # it kept them
    copy = pickle.loads(pickle.dumps(model))
    assert not copy._prepared_cache and model._prepared_cache
    assert len(pickle.dumps(model)) == bare
    after = copy.posterior_speed(q, num_samples=200, seed=5)
    torch.testing.assert_close(after.speed, before.speed, rtol=0, atol=0)
    torch.testing.assert_close(after.measured, before.measured, rtol=0, atol=0)


def test_batches_answer_as_one(small_model: InterferenceModel) -> None:
    # Queries are scored in batches (by default a power of two, at most 1,024 queries and 2**17
    # draw-query pairs); any batching must give one batch's answers, up to the last bits
    # that a reduction's vector width can move (atol 1e-14 on speeds near 1, a hundred
    # float64 ulps; a wrong gather or a batch scored twice moves them by 1e-3 or more).
    q = [Query(a, (b, c)) for a in small_model.jobs for b in small_model.jobs
         for c in small_model.jobs]
    q += [Query(a, ()) for a in small_model.jobs]
    one = small_model.posterior_speed(q, num_samples=24, seed=3, batch_size=len(q))
    for batch in (None, 1, 7, 64):
        p = small_model.posterior_speed(q, num_samples=24, seed=3, batch_size=batch)
        torch.testing.assert_close(p.speed, one.speed, rtol=0, atol=1e-14)
        torch.testing.assert_close(p.measured, one.measured, rtol=0, atol=1e-14)
    for bad in (0, -2, 2.0, True):
        with pytest.raises(InputError, match="batch_size must be a positive integer"):
            small_model.posterior_speed(q, num_samples=24, batch_size=bad)  # type: ignore[arg-type]


def test_threads_sharing_a_model_get_its_answers(small_model: InterferenceModel) -> None:
    # A scheduler may ask one model from several threads; with more seeds in flight than
    # the model keeps, entries are drawn, evicted and drawn again while other threads read
    # them. Every answer must equal the one asked alone (kept draws are never written to),
    # and no thread may fail. (Two threads evicting at the same instant is rare under the
    # GIL and not forced here; _prepare tolerates it.)
    q = [Query(a, (b,)) for a in small_model.jobs for b in small_model.jobs]
    model = dataclasses.replace(small_model)
    alone = {s: small_model.posterior_speed(q, num_samples=16, seed=s).speed for s in range(7)}
    failures: list[str] = []

    def ask(t: int) -> None:
        try:
            for r in range(30):
                s = (3 * t + r) % 7
                if not torch.equal(model.posterior_speed(q, num_samples=16, seed=s).speed,
                                   alone[s]):
                    failures.append(f"seed {s} differs")
        except Exception as exc:  # the failure is what the test reports
            failures.append(repr(exc))

    threads = [threading.Thread(target=ask, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert failures == []


def test_the_training_pairs_are_reproduced_where_the_structure_cannot_explain_them() -> None:
    # Data with a rank-2 pair effect fitted by the mechanism alone (rank 0): the structure
    # misses the pair effect, the second stage keeps it. With it the posterior mean of a
    # measured pair lies within a few measurement-noise units of the measured mean; without
    # it the misfit stays (the pair effect's spread is 0.3 on the log scale).
    data = synthetic(6, seed=4, samples_per_run=4, pair_rank=2, pair_scale=0.3)
    model = fit(data, seed=0, steps=SMALL_STEPS, min_steps=SMALL_STEPS, rank=0, restarts=1)
    m = model.measured
    assert m is not None
    jobs = model.jobs
    q = [Query(jobs[j], (jobs[k],)) for j, k in zip(m.job, m.co, strict=True)]
    ybar = m.log_speed

    def err(mod: InterferenceModel) -> float:
        return float(np.mean(np.abs(mod.posterior_speed(q, seed=1).speed.log().mean(0).numpy()
                                    - ybar)))

    with_effects, structure = err(model), err(_structure_only(model))
    assert with_effects < 0.25 * structure
    assert with_effects < 3 * m.noise


@pytest.mark.parametrize("bad", ["yes", 1])
def test_a_bad_lift_ceilings_flag_is_refused(small_data: CoLocationData, bad: object) -> None:
    with pytest.raises(InputError, match="lift_ceilings must be True, False or None"):
        fit(small_data, steps=1, min_steps=0, lift_ceilings=bad)  # type: ignore[arg-type]


def test_a_lift_without_the_second_stage_is_refused(small_data: CoLocationData) -> None:
    with pytest.raises(InputError, match=r"lift_ceilings .* needs measured=True"):
        fit(small_data, steps=1, min_steps=0, measured=False, lift_ceilings=True)


@pytest.fixture(scope="module")
def lifted_and_not(small_data: CoLocationData) -> tuple[InterferenceModel, InterferenceModel]:
    """One plain fit of the small data, with (the default) and without the ceiling lift."""
    kw = {"seed": 0, "steps": SMALL_STEPS, "min_steps": SMALL_STEPS, "restarts": 1}
    return fit(small_data, **kw), fit(small_data, lift_ceilings=False, **kw)


def test_ceilings_are_lifted_to_the_fastest_measured_pair(
    lifted_and_not: tuple[InterferenceModel, InterferenceModel],
) -> None:
    # The synthetic data's isolated throughputs are noisy, so some jobs run faster next to a
    # co-runner than their recorded isolated level: without the lift those pairs are out of
    # reach (the co-runner's pressure switched off, the prediction capped at the job's level
    # when it shares its GPU, beta_j); with it every job's level rises to its fastest
    # measured target, and the fit is otherwise the same.
    lifted, plain = lifted_and_not
    assert plain.info["ceiling_lift"] == {} and lifted.info["ceiling_lift"]
    assert plain.info["completion"]["unreachable"] > lifted.info["completion"]["unreachable"]
    lift = torch.tensor([lifted.info["ceiling_lift"].get(j, 0.0) for j in lifted.jobs],
                        dtype=torch.float64)
    assert bool((lift >= 0).all())
    for name, (loc, scale) in lifted.posterior.items():
        loc0, scale0 = plain.posterior[name]
        assert torch.equal(scale, scale0)
        torch.testing.assert_close(loc, loc0 + lift if name == "iso_bias" else loc0)
    m = lifted.measured
    assert m is not None
    jobs = lifted.jobs
    # posterior_speed's own draws (same count and seed as _log_speeds).
    level = lifted.draws(DRAWS, 3)["iso_bias"].to(torch.float64).mean(0).numpy()
    for j in np.flatnonzero(lift.numpy() > 0):
        # The job's fastest measured pair is met with the co-runner's pressure off: its
        # mean log speed there is the job's level (Monte Carlo error aside: the same draws
        # give both), which no other co-runner exceeds.
        cos = m.co[m.job == j]
        mean = _log_speeds(lifted, [Query(jobs[j], (jobs[k],)) for k in cos]).mean(0).numpy()
        assert float(mean.max()) == pytest.approx(float(level[j]), abs=1e-6)
        assert bool((mean <= level[j] + 1e-9).all())


def test_a_lifted_model_stays_monotone_in_its_co_runners(
    lifted_and_not: tuple[InterferenceModel, InterferenceModel],
) -> None:
    # Draw by draw (one call, so the same draws for every query): a job alone is at least as
    # fast as next to one co-runner, and next to one as next to that one and another.
    lifted, _ = lifted_and_not
    jobs = lifted.jobs
    q = [Query(j, ()) for j in jobs]
    q += [Query(j, (k,)) for j in jobs for k in jobs]
    q += [Query(j, (k, m)) for j in jobs for k in jobs for m in jobs]
    v = lifted.posterior_speed(q, num_samples=200, seed=5).speed.numpy()
    n = len(jobs)
    alone, one, two = v[:, :n], v[:, n : n + n * n], v[:, n + n * n :]
    one = one.reshape(-1, n, n)
    two = two.reshape(-1, n, n, n)
    assert bool((one <= alone[:, :, None] * (1 + 1e-12)).all())
    assert bool((two <= one[:, :, :, None] * (1 + 1e-12)).all())


def test_the_lift_is_the_most_a_measured_target_exceeds_the_speed_alone() -> None:
    draws = _random_draws(True, seed=2)
    target = pair_log_speed(draws) + 0.1
    job, co = np.array([0, 0, 1, 2]), np.array([1, 3, 1, 5])
    alone = draws["iso_bias"].mean(0).numpy()
    top = np.full(6, -np.inf)
    for a, b in zip(job, co, strict=True):
        top[a] = max(top[a], float(target[a, b]))
    want = np.where(np.isfinite(top), np.maximum(top - alone, 0.0), 0.0)
    lift = ceiling_lift(draws, target, job, co)
    np.testing.assert_allclose(lift, want, rtol=0, atol=1e-12)
    assert lift[[3, 4, 5]].tolist() == [0.0, 0.0, 0.0]  # never measured as a victim
    # Lifted, every measured target is within reach: the offsets meet them all.
    up = lifted_draws(draws, lift)
    offset = _solve_offsets(up, target)
    reached = pair_log_speed(up, offset)[job, co]
    torch.testing.assert_close(reached, target[job, co], rtol=0, atol=1e-8)


@pytest.mark.parametrize("df", [4.0, 7.0])
def test_the_lifted_spread_gives_back_the_lifts_variance(df: float) -> None:
    # A pair's predictive variance is the variance of its log speed over the draws plus its
    # Student-t spread's, df / (df - 2) tau^2. The lift widens the draws (v_up > v); the
    # narrowed spread gives that back, so the sum is what it was without the lift. Before,
    # the whole v_up - v came off tau^2: twice the variance at df = 4 (the sum fell by v_up -
    # v). Exact arithmetic on the same draws: a tolerance of rounding only.
    draws = _random_draws(True, seed=2)
    n = 6
    target = pair_log_speed(draws) - 0.05
    lift = np.array([0.1, 0.0, 0.05, 0.0, 0.0, 0.0])
    up = lifted_draws(draws, lift)
    offset_up, offset = _solve_offsets(up, target), _solve_offsets(draws, target)
    tau = 0.3
    spread = lifted_spread(draws, up, target, offset_up, tau, lift, df=df)
    cells = torch.arange(n * n)
    v_up = _cells_variance(_pair_terms(up), offset_up, cells, n).reshape(n, n).numpy()
    v = _cells_variance(_pair_terms(draws), offset, cells, n).reshape(n, n).numpy()
    k = df / (df - 2)
    rows = [0, 2]
    assert bool((v_up[rows] > v[rows] + 1e-6).any())  # the lift did widen some pairs
    assert bool((spread[rows] > tau / 10).all())  # none at the floor: the rule applies
    np.testing.assert_allclose(v_up[rows] + k * spread[rows] ** 2, v[rows] + k * tau**2,
                               rtol=0, atol=1e-10)
    assert bool((spread[[1, 3, 4, 5]] == tau).all())  # jobs not lifted keep tau
    # With df <= 2 the spread's variance is infinite: nothing to give back.
    assert bool((lifted_spread(draws, up, target, offset_up, tau, lift, df=2.0) == tau).all())


def test_extended_pairs_refuse_lifts_of_the_wrong_length(small_model: InterferenceModel) -> None:
    m = small_model.measured
    assert m is not None
    draws = small_model.draws(MEASURED_DRAWS, 0)
    with pytest.raises(InputError, match="ceiling lifts: 2 values for 4 fitted jobs"):
        extended_pairs(m, draws, draws, lift=np.zeros(2))
    # No job added: the pairs as they are, nothing lent.
    assert extended_pairs(m, draws, draws, lift=np.zeros(4)) == (m, [], [])


def test_the_lift_keeps_each_unmeasured_pairs_predictive_variance(
    lifted_and_not: tuple[InterferenceModel, InterferenceModel],
) -> None:
    # The lift adds no information about a pair, only a larger slowdown from a raised speed
    # alone, whose draws spread wider; the unknown effect's Student-t spread (variance
    # k tau^2, k = df / (df - 2), 2 at the default df = 4) gives that back:
    # v_up + k tau_jk^2 = v_0 + k tau^2 (unless floored at tau / 10), with v_up and v_0 the
    # variance of the pair's log speed over the stage's own draws (the fit's seed and
    # MEASURED_DRAWS), lifted and not, which the predictive's draws reproduce exactly.
    # (Before 2026-12-01 the spread gave back k times too much: v_up + tau_jk^2 = ...)
    lifted, plain = lifted_and_not
    m, m0 = lifted.measured, plain.measured
    assert m is not None and m0 is not None and m0.spread is None
    assert m.spread is not None and m.scale == m0.scale
    jobs, tau = lifted.jobs, m.scale
    lift = np.array([lifted.info["ceiling_lift"].get(j, 0.0) for j in jobs])
    assert bool((m.spread[lift == 0] == tau).all())  # a job not lifted keeps tau
    rows = np.flatnonzero(lift > 0)
    q = [Query(jobs[j], (k,)) for j in rows for k in jobs]

    def variance(model: InterferenceModel) -> np.ndarray:
        v = model.posterior_speed(q, num_samples=MEASURED_DRAWS, seed=0).speed.log().var(0)
        return v.numpy().reshape(len(rows), len(jobs))

    v_up, v_0 = variance(lifted), variance(plain)
    k = lifted.hyper.speed_df / (lifted.hyper.speed_df - 2)
    assert k == 2.0
    want = np.sqrt(np.maximum(tau**2 - (v_up - v_0) / k, (tau / 10) ** 2))
    np.testing.assert_allclose(m.spread[rows], want, rtol=1e-9)
    assert bool((m.spread[rows] < tau).any())  # some lifted pair did narrow


def _random_draws(pair: bool, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    s, j, r = 30, 6, 3

    def n(*shape: int, sd: float = 1.0) -> torch.Tensor:
        return sd * torch.randn(shape, generator=g, dtype=torch.float64)

    draws = {
        "log_demand": n(s, j, r, sd=0.7) - 1.0, "log_intensity": n(s, j, r, sd=0.3),
        "sens_eps": n(s, j, r), "sens_loc": n(s, r, sd=0.3), "sens_slope": 0.5 + n(s, r, sd=0.1),
        "sens_scale": n(s, r, sd=0.1).exp() * 0.5, "threshold": n(s, r, sd=0.1) + 0.8,
        "iso_bias": n(s, j, sd=0.02),
    }
    if pair:
        draws |= {"pair_u": n(s, j, 2, sd=0.5), "pair_w": n(s, j, 2, sd=0.5)}
    return draws


def _spread_targets(
    pair: bool, seed: int
) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """Random draws (seed 5), their pair speeds and targets spread 0.3 around them (``seed``)."""
    draws = _random_draws(pair, seed=5)
    base = pair_log_speed(draws)
    g = torch.Generator().manual_seed(seed)
    return draws, base, base + 0.3 * torch.randn(base.shape, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("pair", [False, True])
def test_the_offsets_meet_every_reachable_target(pair: bool) -> None:
    # Targets spread around the structure's own pair speeds, some beyond either bound. A
    # reachable pair's offset must meet its target to the solver's tolerance (1e-10, with
    # room for summation order); an unreachable one sits at the bound on its side.
    draws, base, target = _spread_targets(pair, seed=6)
    target[0, 1] = pair_log_speed(draws, torch.full_like(base, -OFFSET_BOUND))[0, 1] + 0.5
    target[2, 3] = pair_log_speed(draws, torch.full_like(base, OFFSET_BOUND))[2, 3] - 0.5
    offset = _solve_offsets(draws, target)
    reached = pair_log_speed(draws, offset)
    lo_speed = pair_log_speed(draws, torch.full_like(base, OFFSET_BOUND))
    hi_speed = pair_log_speed(draws, torch.full_like(base, -OFFSET_BOUND))
    ok = (target < hi_speed) & (target > lo_speed)
    assert not bool(ok[0, 1]) and not bool(ok[2, 3])
    assert int(ok.sum()) >= base.numel() - 4
    assert float((reached - target)[ok].abs().max()) < 1e-9
    assert float(offset[0, 1]) == -OFFSET_BOUND
    assert float(offset[2, 3]) == OFFSET_BOUND


@settings(max_examples=25, deadline=None)
@given(
    pair=st.booleans(), draws_seed=st.integers(0, 2**16), target_seed=st.integers(0, 2**16),
    spread=st.floats(0.01, 2.0),
)
def test_the_offsets_meet_any_reachable_target_from_any_start(
    pair: bool, draws_seed: int, target_seed: int, spread: float
) -> None:
    # The search starts every pair at offset 0 and relies on its bracket to stay safe; targets
    # from a hair to two units of log speed away from the structure's pairs (far ones
    # unreachable, near ones a Newton step away) must each end at the target (reachable: to
    # the solver's 1e-10, with room for summation order) or at the bound on its side.
    draws = _random_draws(pair, seed=draws_seed)
    base = pair_log_speed(draws)
    g = torch.Generator().manual_seed(target_seed)
    target = base + spread * torch.randn(base.shape, generator=g, dtype=torch.float64)
    offset = _solve_offsets(draws, target)
    reached = pair_log_speed(draws, offset)
    slowest = pair_log_speed(draws, torch.full_like(base, OFFSET_BOUND))
    fastest = pair_log_speed(draws, torch.full_like(base, -OFFSET_BOUND))
    ok = (target < fastest) & (target > slowest)
    gap = (reached - target)[ok].abs()
    assert gap.numel() == 0 or float(gap.max()) < 1e-9, float(gap.max())
    assert bool((offset[target >= fastest] == -OFFSET_BOUND).all())
    assert bool((offset[(target <= slowest) & (target < fastest)] == OFFSET_BOUND).all())


@pytest.mark.parametrize("pair", [False, True])
def test_offsets_solved_for_some_pairs_are_those_of_the_whole_grid(pair: bool) -> None:
    # extended_pairs solves the new jobs' pairs only: each pair's root is its own, so a
    # subset gives the whole grid's offsets there (to the solver's tolerance: each pair's
    # iterates are its own; only summation order may differ) and leaves the rest at 0.
    draws, base, target = _spread_targets(pair, seed=7)
    full = _solve_offsets(draws, target)
    cells = torch.tensor([1, 7, 8, int(base.numel()) - 1])
    some = _solve_offsets(draws, target, cells=cells)
    assert torch.allclose(some.reshape(-1)[cells], full.reshape(-1)[cells], rtol=0, atol=1e-8)
    rest = torch.ones(base.numel(), dtype=torch.bool)
    rest[cells] = False
    assert bool((some.reshape(-1)[rest] == 0).all())


def test_measured_cells_skip_runs_of_three_and_cross_device_pairs() -> None:
    n_jobs = 3
    co = np.array([[1, 3], [1, 2], [2, 3], [0, 3]])
    share = np.ones((4, 2, 2))
    share[2, 0, 1] = 0.0  # job 1 next to job 2 shares one resource only: another device
    share[:, 1, :] = np.where(co[:, 1:] < n_jobs, 1.0, 0.0)
    obs = Observations(
        np.array([0, 0, 1, 2]), co, share, np.array([0.5, 0.4, 0.7, 0.9]), np.arange(4)
    )
    flat, mean, n = measured_cells(obs, n_jobs)
    assert flat.tolist() == [0 * 3 + 1, 2 * 3 + 0] and n.tolist() == [1, 1]
    np.testing.assert_allclose(mean, np.log([0.5, 0.9]))


def _planted(seed: int, n: int = 20) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = 0.1 * rng.standard_normal(n), 0.1 * rng.standard_normal(n)
    u, v = rng.standard_normal((n, 2)), rng.standard_normal((n, 2))
    full = a[:, None] + b[None, :] + 0.05 * u @ v.T
    job, co = np.divmod(np.arange(n * n), n)
    return full, job, co, 0.01 * rng.standard_normal(n * n)


def test_the_completion_recovers_planted_biases_and_a_low_rank_term() -> None:
    # Residuals = biases + rank-2 term (mean absolute size about 0.11) + noise 0.01, 70% of
    # the cells seen: the completion's error on the unseen 30% must be well under that size
    # (the error of no completion). A third of it is a loose bound: on this data it is 0.12
    # of it, and the noise's own mean absolute size is 0.07 of it.
    full, job, co, noise = _planted(0)
    seen = np.random.default_rng(1).random(job.size) < 0.7
    y = full[job, co] + noise
    mat, info = complete_effects(y[seen], job[seen], co[seen], 20, seed=0)
    unseen = ~seen
    err = np.mean(np.abs(mat[job[unseen], co[unseen]] - full[job[unseen], co[unseen]]))
    spread = np.mean(np.abs(full[job[unseen], co[unseen]]))
    assert info["choice"] in ("biases", "low-rank")
    assert err < spread / 3


def test_the_completion_is_seed_stable_and_needs_enough_pairs() -> None:
    full, job, co, noise = _planted(2, n=6)
    y = full[job, co] + noise
    a, _ = complete_effects(y, job, co, 6, seed=3)
    b, _ = complete_effects(y, job, co, 6, seed=3)
    np.testing.assert_array_equal(a, b)
    few, info = complete_effects(y[:9], job[:9], co[:9], 6, seed=0)
    assert info["choice"] == "none" and not few.any()


def _family_blocks(seed: int, n: int = 24, n_fam: int = 6) -> tuple[np.ndarray, ...]:
    # Biases plus a family-pair block (each family pair's effect shared by its jobs' pairs),
    # noise 0.02, each cell seen with probability 1/2.
    rng = np.random.default_rng(seed)
    fam = np.arange(n) % n_fam
    a, b = 0.1 * rng.standard_normal(n), 0.1 * rng.standard_normal(n)
    full = a[:, None] + b[None, :] + (0.1 * rng.standard_normal((n_fam, n_fam)))[fam][:, fam]
    job, co = np.divmod(np.arange(n * n), n)
    y = full[job, co] + 0.02 * rng.standard_normal(n * n)
    seen = np.random.default_rng(100 + seed).random(n * n) < 0.5
    return full, job, co, y, seen, fam


def test_families_let_the_completion_carry_a_family_pair_block() -> None:
    # The block has rank up to 6 over 24 jobs, seen half: without families the soft-impute
    # term finds part of it; with them the family-pair term carries it. Deterministic data;
    # on seeds 0-7 of this generator the error on the unseen cells with families is 0.67-0.83
    # of the error without, so a median over three seeds under 0.9 fails only if the term
    # stops carrying the block (or stops being chosen).
    ratios = []
    for seed in range(3):
        full, job, co, y, seen, fam = _family_blocks(seed)
        unseen = ~seen
        err = []
        for family in (None, fam):
            mat, info = complete_effects(y[seen], job[seen], co[seen], 24, seed=0, family=family)
            miss = mat[job[unseen], co[unseen]] - full[job[unseen], co[unseen]]
            err.append(np.mean(np.abs(miss)))
            assert info["choice"].startswith("family") == (family is not None)
            assert (info["family_ridge"] > 0) == (family is not None)
        ratios.append(err[1] / err[0])
    assert float(np.median(ratios)) < 0.9


def test_jobs_without_a_family_leave_the_completion_as_it_was() -> None:
    _, job, co, y, seen, _ = _family_blocks(0)
    plain, info = complete_effects(y[seen], job[seen], co[seen], 24, seed=0)
    none, _ = complete_effects(y[seen], job[seen], co[seen], 24, seed=0,
                               family=np.full(24, -1))
    np.testing.assert_array_equal(plain, none)
    assert info["family_ridge"] == 0.0


def _pairs(**change: object) -> MeasuredPairs:
    base: dict[str, object] = {
        "job": np.array([0, 1]), "co": np.array([1, 0]), "log_speed": np.array([-0.2, -0.3]),
        "n": np.array([1, 2]), "scale": 0.1, "noise": 0.02, "expected": np.zeros((2, 2)),
        "offset": np.zeros((2, 2)),
    }
    base.update(change)
    return MeasuredPairs(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"co": np.array([1])}, r"must be \(C,\) arrays"),
        ({"job": np.array([-1, 1])}, "indices must be >= 0"),
        ({"n": np.array([0, 1])}, "at least one measurement"),
        ({"log_speed": np.array([np.nan, 0.0])}, "must be finite"),
        ({"scale": 0.0}, "scale must be a finite float > 0"),
        ({"noise": math.inf}, "noise must be a finite float > 0"),
        ({"job": np.array([0, 0]), "co": np.array([1, 1])}, "listed twice"),
        ({"expected": np.zeros((2, 3))}, "finite square"),
        ({"expected": np.full((2, 2), np.nan)}, "finite square"),
        ({"expected": np.zeros((1, 1)), "offset": np.zeros((1, 1))}, "outside expected"),
        ({"offset": np.zeros((3, 3))}, "differ in shape"),
        ({"offset": np.full((2, 2), 13.0)}, "offsets must lie in"),
    ],
)
def test_bad_measured_pairs_are_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        _pairs(**change)


def test_measured_pairs_naming_unknown_jobs_are_refused(
    small_model: InterferenceModel,
) -> None:
    bad = _pairs(job=np.array([0, 9]), expected=np.zeros((10, 10)), offset=np.zeros((10, 10)))
    with pytest.raises(InputError, match="cover 10 jobs, not 4"):
        dataclasses.replace(small_model, measured=bad)


@st.composite
def _family_case(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = draw(st.integers(2, 7))
    cells = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=12))
    job = np.array([j for j, _ in sorted(cells)], dtype=np.int64)
    co = np.array([k for _, k in sorted(cells)], dtype=np.int64)
    family = np.array(draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n)), dtype=np.int64)
    seed = draw(st.integers(0, 2**16))
    effect = np.random.default_rng(seed).normal(0.0, 0.1, (n, n))
    return effect, job, co, family


@settings(max_examples=60, deadline=None)
@given(_family_case(), st.randoms(use_true_random=False))
def test_borrowed_effects_fill_only_the_sides_never_measured(
    case: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], rnd: random.Random
) -> None:
    effect, job, co, family = case
    before = effect.copy()
    out, rows, cols = borrowed_effects(effect, job, co, family)
    np.testing.assert_array_equal(effect, before)  # the input is not changed
    np.testing.assert_array_equal(out[job, co], effect[job, co])  # measured pairs kept
    victim, runner = np.isin(np.arange(len(family)), job), np.isin(np.arange(len(family)), co)
    row_filled = np.array([
        not victim[j] and family[j] >= 0 and bool((victim & (family == family[j])).any())
        for j in range(len(family))
    ])
    col_filled = np.array([
        not runner[k] and family[k] >= 0 and bool((runner & (family == family[k])).any())
        for k in range(len(family))
    ])
    assert (rows, cols) == (int(row_filled.sum()), int(col_filled.sum()))
    # Outside the filled columns, a filled row is its family's measured victims' mean, and
    # every other row is as it was.
    for j in range(len(family)):
        mates = victim & (family == family[j])
        want = effect[mates].mean(0) if row_filled[j] else effect[j]
        np.testing.assert_allclose(out[j, ~col_filled], want[~col_filled], rtol=0, atol=1e-12)
    # Relabelling the jobs relabels the result.
    perm = np.array(rnd.sample(range(len(family)), len(family)))
    inv = np.argsort(perm)
    p_out, p_rows, p_cols = borrowed_effects(
        effect[np.ix_(perm, perm)], inv[job], inv[co], family[perm]
    )
    assert (p_rows, p_cols) == (rows, cols)
    np.testing.assert_allclose(p_out, out[np.ix_(perm, perm)], rtol=0, atol=1e-12)



@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.booleans(), min_size=2, max_size=8),
    st.data(),
)
def test_borrowed_mates_are_the_family_or_the_nearest_measured_jobs(
    flags: list[bool], data: st.DataObject
) -> None:
    n = len(flags)
    measured = np.array(flags)
    family = np.array(data.draw(st.lists(st.integers(-1, 1), min_size=n, max_size=n)))
    cell = st.one_of(st.just(math.nan), st.floats(-3.0, 0.0, allow_nan=False))
    x = np.array(data.draw(st.lists(st.tuples(cell, cell), min_size=n, max_size=n)))
    k = data.draw(st.integers(1, 4))
    mates = borrowed_mates(measured, family, x, k)
    plain = borrowed_mates(measured, None, x, k)
    for j in range(n):
        if measured[j]:
            assert mates[j] is None
            continue
        kin = np.flatnonzero(measured & (family == family[j])) if family[j] >= 0 else []
        got = mates[j]
        if len(kin):
            assert got is not None and got.tolist() == list(kin)
            continue
        # Without family mates, the family-less rule: the k (or fewer) measured jobs nearest
        # over the resources both read, each resource standardised by the measured jobs.
        want = plain[j]
        assert (got is None) == (want is None)
        dist = np.full(n, np.inf)
        cols = [
            r for r in range(2)
            if np.isfinite(x[measured, r]).sum() >= 2 and np.nanstd(x[measured, r]) > 0
        ]
        for i in np.flatnonzero(measured):
            sq = [
                ((x[i, r] - x[j, r]) / np.nanstd(x[measured, r])) ** 2
                for r in cols if np.isfinite(x[i, r]) and np.isfinite(x[j, r])
            ]
            if sq:
                dist[i] = float(np.mean(sq))
        reachable = int(np.isfinite(dist).sum())
        if got is None:
            assert reachable == 0
            continue
        assert got.tolist() == want.tolist() and len(got) == min(k, reachable)
        assert measured[got].all() and np.isfinite(dist[got]).all()
        left = np.setdiff1d(np.flatnonzero(np.isfinite(dist)), got)
        if left.size:
            assert dist[got].max() <= dist[left].min() + 1e-12


def test_a_fit_borrows_nothing_where_every_job_is_measured(
    small_model: InterferenceModel,
) -> None:
    info = small_model.info["completion"]
    assert (info["borrowed_rows"], info["borrowed_columns"]) == (0, 0)


@pytest.mark.parametrize("family", [None, {"job0": "A", "job1": "A", "job2": "B", "job3": "B"}])
def test_the_stage_added_to_a_fitted_structure_is_fit_s_own(
    small_data: CoLocationData, family: dict[str, str] | None
) -> None:
    # Benchmarks fit a structure once and add the second stage to it in several ways; what
    # stage_inputs hands with_second_stage must be what fit hands it, or they would measure
    # another model than the default: the same offsets, completion, spreads and lifted
    # posterior, bit for bit, with families and without.
    kw = {"seed": 0, "steps": 60, "min_steps": 60, "restarts": 1, "family": family}
    default = fit(small_data, **kw)  # type: ignore[arg-type]
    structure = fit(small_data, measured=False, **kw)  # type: ignore[arg-type]
    obs, fam, readings, below = stage_inputs(structure, small_data)
    assert (fam is None) == (family is None)
    added, lift, completion = with_second_stage(
        structure, obs, seed=0, family=fam, readings=readings, below=below
    )
    assert default.info["ceiling_lift"] == {
        structure.jobs[j]: float(lift[j]) for j in np.flatnonzero(lift > 0)
    }
    assert completion == default.info["completion"]
    for name, (loc, scale) in default.posterior.items():
        assert torch.equal(loc, added.posterior[name][0])
        assert torch.equal(scale, added.posterior[name][1])
    a, b = default.measured, added.measured
    assert a is not None and b is not None
    for f in ("job", "co", "log_speed", "n", "expected", "offset"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert (a.scale, a.noise) == (b.scale, b.noise)
    if a.spread is None:
        assert b.spread is None
    else:
        np.testing.assert_array_equal(a.spread, b.spread)


def test_stage_inputs_refuse_data_of_other_jobs(small_data: CoLocationData) -> None:
    structure = fit(small_data, seed=0, steps=2, min_steps=0, restarts=1, measured=False)
    with pytest.raises(InputError, match="not the jobs this structure was fitted on"):
        stage_inputs(structure, synthetic(5, seed=0))


def test_a_new_measurement_of_a_noisy_pair_is_covered_at_its_own_noise() -> None:
    # Two pairs measured 40 times each with log-normal noise of sd 0.3. The interval of a
    # new measurement took the measurement noise as the fixed 2% of Hyper.measure_noise and
    # covered 0.42-0.55 of the pairs' own repeats (default fit); the noise is now read off
    # the repeats (pooled, the 2% prior worth NOISE_PRIOR_DF degrees of freedom).
    rng = np.random.default_rng(7)
    rows = [("a", "x", 5.0), ("b", "y", 3.0), ("c", "z", 4.0)]
    for r in range(40):
        rows += [(f"p{r}", "x", 5.0 * math.exp(rng.normal(math.log(0.5), 0.3))),
                 (f"p{r}", "y", 3.0 * math.exp(rng.normal(math.log(0.7), 0.3))),
                 (f"q{r}", "x", 5.0 * math.exp(rng.normal(math.log(0.8), 0.3))),
                 (f"q{r}", "z", 4.0 * math.exp(rng.normal(math.log(0.75), 0.3)))]
    runs = pd.DataFrame(rows, columns=["run_id", "job", "throughput"])
    data = CoLocationData(runs, None, "noisy")
    model = fit(data, seed=0, steps=SMALL_STEPS, min_steps=SMALL_STEPS, restarts=1)
    pairs = data.pairs()
    logs = np.log(pairs["speed"].to_numpy())
    cell = pairs["job"] + "|" + pairs["co_runner"]
    squares = sum(((g - g.mean()) ** 2).sum() for _, g in pd.Series(logs).groupby(cell.values))
    expected = math.sqrt((10 * 0.02**2 + squares) / (10 + len(pairs) - cell.nunique()))
    assert model.measured is not None and model.measured.noise == pytest.approx(expected)
    assert 0.25 < model.measured.noise < 0.35  # the sd the data were drawn with, 0.3
    covered = []
    for (job, co), g in pairs.groupby(["job", "co_runner"]):
        p = model.predict(job, [co], num_samples=2000, seed=1)
        covered += ((g["speed"] >= p["q05"]) & (g["speed"] <= p["q95"])).tolist()
    # 160 repeats; a calibrated 90% interval covers 0.90 +- 0.024 (binomial sd), and the
    # Student-t tails of the measurement noise make it wider, so 0.8 is four sd below
    # nominal and far above the 0.42-0.55 of the fixed 2%.
    assert np.mean(covered) >= 0.8


@pytest.fixture(scope="module")
def warm_structure() -> tuple[InterferenceModel, CoLocationData]:
    """A structure (no second stage) of six jobs with 30% of the co-located runs held out:
    pairs between measured jobs that were never measured together (warm pairs)."""
    train, _ = holdout_split(synthetic(6, seed=4, samples_per_run=8), holdout_frac=0.3, seed=0)
    kw = {"seed": 0, "steps": 60, "min_steps": 60, "restarts": 1}
    return fit(train, measured=False, **kw), train  # type: ignore[arg-type]


def test_the_direct_completion_moves_only_the_warm_pairs(
    warm_structure: tuple[InterferenceModel, CoLocationData],
) -> None:
    # Hyper.direct_weight: each warm pair's reported speed (its posterior mean over the
    # stage's draws) becomes the weighted geometric mean of the structure's and of a direct
    # completion of the measured pairs' mean log speeds, to the offset solver's 1e-10 (1e-9
    # allowed) wherever the blend lies below the job's level (there the co-runner's pressure
    # is all but off); every other pair keeps its offset bit for bit.
    structure, train = warm_structure
    obs, _, _, _ = stage_inputs(structure, train)
    draws = structure.draws(MEASURED_DRAWS, 0)
    args = (obs, draws, structure.speed_noise(), structure.hyper.measure_noise)
    base, _ = measured_pairs(*args, seed=0)
    moved, info = measured_pairs(*args, seed=0, direct_weight=0.5)
    assert base is not None and moved is not None
    n = len(structure.jobs)
    warm = warm_cells(n, base.job, base.co)
    assert warm.size > 0 and info["direct"]["pairs"] == warm.size
    rest = np.setdiff1d(np.arange(n * n), warm)
    np.testing.assert_array_equal(moved.offset.reshape(-1)[rest], base.offset.reshape(-1)[rest])
    # the matrix-completion peer's prediction of each warm pair, on the same cells
    wj, wk = np.divmod(warm, n)
    mu_d, a, b, z, rank, _ = select_cells(np.exp(base.log_speed), base.job, base.co, n, seed=0)
    assert info["direct"]["rank"] == rank
    direct = np.log(np.maximum(mu_d + a[wj] + b[wk] + z[wj, wk], 0.01))
    terms, at = _pair_terms(draws), torch.as_tensor(warm)
    before = _cells_log_mean_speed(terms, torch.as_tensor(base.offset), at, n)
    after = _cells_log_mean_speed(terms, torch.as_tensor(moved.offset), at, n)
    want = 0.5 * before + 0.5 * torch.as_tensor(direct)
    free = torch.as_tensor(moved.offset.reshape(-1)[warm] > -OFFSET_BOUND)
    assert bool(free.any())
    assert float((after - want)[free].abs().max()) <= 1e-9
    assert bool((after[~free] <= want[~free] + 1e-9).all())
    # and the completion stored for a warm pair is what its new target says
    reached = pair_log_speed(draws, torch.as_tensor(moved.offset)).numpy()[wj, wk]
    mu = pair_log_speed(draws).numpy()[wj, wk]
    np.testing.assert_allclose(moved.expected[wj, wk], reached - mu, atol=1e-9)


def test_a_fit_with_a_direct_weight_records_it_and_keeps_its_measured_pairs(
    warm_structure: tuple[InterferenceModel, CoLocationData],
) -> None:
    # The weight (0.25 by default) enters the second stage only (the structure is the same
    # fit) and moves no measured pair: each still follows its measurement as without it.
    _, train = warm_structure
    kw = {"seed": 0, "steps": 60, "min_steps": 60, "restarts": 1}
    default = fit(train, hyper=Hyper(direct_weight=0.0), **kw)  # type: ignore[arg-type]
    direct = fit(train, **kw)  # type: ignore[arg-type]
    assert "direct" not in default.info["completion"]
    assert direct.info["completion"]["direct"]["pairs"] > 0
    assert direct.hyper.direct_weight == 0.25 == Hyper().direct_weight
    for name, (loc, scale) in default.posterior.items():
        assert torch.equal(loc, direct.posterior[name][0])
        assert torch.equal(scale, direct.posterior[name][1])
    a, b = default.measured, direct.measured
    assert a is not None and b is not None
    measured = a.job * len(default.jobs) + a.co
    np.testing.assert_array_equal(a.offset.reshape(-1)[measured], b.offset.reshape(-1)[measured])
    assert not np.array_equal(a.offset, b.offset)
