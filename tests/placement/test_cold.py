"""Cold start at placement time: a job type known only by its isolated counters."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from interplace.cli import main
from interplace.datasets import synthetic
from interplace.errors import InputError
from interplace.model import InterferenceModel, Nuts, Query, fit
from interplace.model._cells import OFFSET_BOUND, _solve_offsets, pair_log_speed
from interplace.model._fit import MEASURED_DRAWS
from interplace.placement import Job, MeasuredSpeeds, place, score
from interplace.placement._cold import read_demand, with_cold_jobs
from interplace.topology import builtin


def test_cold_job_is_placed(small_model: InterferenceModel) -> None:
    jobs = [Job("a", small_model.jobs[0]),
            Job("b", "brand-new", counters={"gpu_util_pct": 80.0, "mem_util_pct": 40.0})]
    p = place(builtin("pcie-8gpu"), small_model, jobs)
    assert set(p.assignment()) == {"a", "b"} and not p.pending
    again = score(builtin("pcie-8gpu"), small_model, p)
    assert again.objective == pytest.approx(p.objective)


def test_heavier_counters_slow_a_partner_more(small_model: InterferenceModel) -> None:
    # Pressure grows with the demand the counters read, and the partner's slowdown with the
    # pressure, draw by draw: the posterior means are ordered with no Monte Carlo slack.
    m = with_cold_jobs(small_model, {
        "light": {"gpu_util_pct": 10.0, "mem_util_pct": 5.0},
        "heavy": {"gpu_util_pct": 90.0, "mem_util_pct": 80.0},
    })
    partner = small_model.jobs[0]
    p = m.posterior_speed([Query(partner, ("light",)), Query(partner, ("heavy",))])
    assert p.mean[1] < p.mean[0]
    assert m.jobs[:4] == small_model.jobs and m.info["cold_jobs"] == ["light", "heavy"]
    # The fitted jobs' posterior is unchanged by adding cold ones; their predictions move only
    # by Monte Carlo error (the draws' random stream shifts with the longer per-job sites):
    # two independent 500-draw means differ by sqrt(2) sd / sqrt(500); 4 of those is a bound
    # that a correct implementation crosses with probability below 1e-4.
    q = [Query(partner, (small_model.jobs[1],))]
    a, b = m.posterior_speed(q), small_model.posterior_speed(q)
    assert abs(a.mean[0] - b.mean[0]) < 4 * (2 ** 0.5) * float(b.sd[0]) / 500**0.5


def test_cold_start_refusals(small_model: InterferenceModel, toy: MeasuredSpeeds) -> None:
    topo = builtin("pcie-8gpu")
    with pytest.raises(InputError, match="unknown counter 'gpu_temp'"):
        place(topo, small_model, [Job("b", "new", counters={"gpu_temp": 50.0})])
    with pytest.raises(InputError, match="two different counter readings"):
        place(topo, small_model, [Job("b", "new", counters={"gpu_util_pct": 50.0}),
                                  Job("c", "new", counters={"gpu_util_pct": 60.0})])
    with pytest.raises(InputError, match="already in the model"):
        with_cold_jobs(small_model, {small_model.jobs[0]: {"gpu_util_pct": 1.0}})
    # readings as a list was "'list' object has no attribute 'items'"
    with pytest.raises(InputError, match="'new': readings must map metric names to numbers"):
        with_cold_jobs(small_model, {"new": [50.0]})  # type: ignore[dict-item]
    with pytest.raises(InputError, match="no cold-start path"):
        place(topo, toy, [Job("b", "new", counters={"gpu_util_pct": 50.0})])
    with pytest.raises(InputError, match="must be a finite number"):
        Job("b", "new", counters={"gpu_util_pct": -1.0})
    # 500% utilisation was taken (ingest refuses it in a collected file)
    with pytest.raises(InputError, match=r"counter gpu_util_pct is a percentage, not 500\.0"):
        Job("b", "new", counters={"gpu_util_pct": 500.0})
    assert Job("b", "new", counters={"pcie_rx_kbps": 5e6}).counters == (("pcie_rx_kbps", 5e6),)


def test_a_model_with_as_many_jobs_as_resources_or_metrics_takes_cold_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Per-job sites are known by name, not by a first axis as long as the job list (which
    # per-resource and per-metric sites also have when the counts agree); a site the cold
    # start has no rule for (a later model format) is refused.
    import interplace.placement._cold as cold
    from interplace.datasets import synthetic
    from interplace.model import fit
    from interplace.model._net import SUPPORT

    assert set(SUPPORT) == set(cold._REVIEWED)  # a new site needs a cold-start rule first
    for n in (5, 6):
        m = fit(synthetic(n, seed=1, samples_per_run=3), seed=0, steps=50, min_steps=50,
                restarts=1)
        assert n in (len(m.resources), len(m.metrics))
        grown = with_cold_jobs(m, {"new": {"gpu_util_pct": 50.0}})
        assert grown.jobs[-1] == "new"
    monkeypatch.setattr(cold, "_REVIEWED", tuple(x for x in cold._REVIEWED if x != "iso_bias"))
    with pytest.raises(InputError, match="latent site\\(s\\) iso_bias have no cold-start"):
        with_cold_jobs(m, {"new": {"gpu_util_pct": 50.0}})


def test_cli_reads_counter_columns(
    tmp_path: Path, small_model: InterferenceModel, capsys: pytest.CaptureFixture[str]
) -> None:
    model_dir = small_model.save(tmp_path / "m")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        f"job_id,job,gpus,gpu_util_pct\na,{small_model.jobs[0]},1,\nb,new-net,1,75\n"
        "c,idle-net,1,0\n"
    )
    out = tmp_path / "p.csv"
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu",
                 "--jobs", str(jobs), "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "new-net" in out.read_text()
    # small_model's jobs are all measured on both sides: the new one borrows from the nearest.
    assert ("note: job type(s) the model was not fitted on, added from their counters: new-net "
            "(pair corrections from the 5 fitted jobs with the nearest counters)") in printed.out
    # A reading of zero has no log to find the nearest jobs by: the population's mean.
    assert ("idle-net (pair corrections from every fitted job (no counters to find the nearest "
            "by))") in printed.out
    jobs.write_text("job_id,job,gpus\nb,new-net,1\n")
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu",
                 "--jobs", str(jobs), "--out", str(out)])
    assert code == 2 and "unknown job type(s) 'new-net'" in capsys.readouterr().err


def test_cold_jobs_keep_the_measured_pairs(small_model: InterferenceModel) -> None:
    m2 = with_cold_jobs(small_model, {"new": {"gpu_util_pct": 80.0}})
    old, grown = small_model.measured, m2.measured
    assert old is not None and grown is not None
    n = len(small_model.jobs)
    for name in ("job", "co", "log_speed", "n"):
        assert np.array_equal(getattr(grown, name), getattr(old, name))
    assert (grown.scale, grown.noise) == (old.scale, old.noise)
    assert np.array_equal(grown.expected[:n, :n], old.expected)
    assert np.array_equal(grown.offset[:n, :n], old.offset)
    assert grown.expected.shape == (n + 1, n + 1)
    # The fitted pairs keep their spreads after the lift; the added job (not lifted) keeps
    # tau as the victim, and so does each fitted job not lifted next to it.
    assert old.spread is not None and grown.spread is not None
    assert np.array_equal(grown.spread[:n, :n], old.spread)
    lifted = _lifts(small_model)
    assert bool((grown.spread[n] == old.scale).all())
    assert bool((grown.spread[:n, n][lifted == 0] == old.scale).all())
    p = m2.posterior_speed([Query("new", ("job0",)), Query("job0", ("new",))], seed=0)
    assert bool(torch.isfinite(p.speed).all())


def test_a_lifted_fitted_job_next_to_an_added_one_keeps_the_unlifted_variance(
    small_model: InterferenceModel,
) -> None:
    # As the fit's own unmeasured pairs (tests/model/test_cells.py): the lift raises a fitted
    # job's speed alone, so its draws of a slowdown next to the new job spread wider, and
    # the unknown effect's Student-t spread (variance k tau^2, k = df / (df - 2)) gives that
    # back: v_up + k tau_jk^2 = v_0 + k tau^2 (unless floored at tau / 10), v_up and v_0
    # the variance of the pair's log speed over the stage's draws with the lift and with the
    # isolated-reference bias lowered back and the offset solved again for the same target
    # there.
    m2 = with_cold_jobs(small_model, {"new": {"gpu_util_pct": 80.0}})
    m = m2.measured
    assert m is not None and m.spread is not None
    n, tau, seed = len(small_model.jobs), m.scale, m2.info["seed"]
    lift = _lifts(small_model)
    rows = np.flatnonzero(lift > 0)
    assert rows.size
    plain = dataclasses.replace(m2, measured=None)
    target = pair_log_speed(plain.draws(MEASURED_DRAWS, seed), torch.as_tensor(m.offset))
    loc, scale = m2.posterior["iso_bias"]
    down = {**m2.posterior,
            "iso_bias": (loc - torch.as_tensor(np.append(lift, 0.0), dtype=loc.dtype), scale)}
    before = dataclasses.replace(plain, posterior=down).draws(MEASURED_DRAWS, seed)
    offset = m.offset.copy()
    offset[rows, n] = _solve_offsets(before, target).numpy()[rows, n]
    unlifted = dataclasses.replace(
        m2, posterior=down, measured=dataclasses.replace(m, offset=offset)
    )
    q = [Query(m2.jobs[j], ("new",)) for j in rows]

    def variance(model: InterferenceModel) -> np.ndarray:
        p = model.posterior_speed(q, num_samples=MEASURED_DRAWS, seed=seed)
        return p.speed.log().var(0).numpy()

    k = m2.hyper.speed_df / (m2.hyper.speed_df - 2)
    want = np.sqrt(np.maximum(tau**2 - (variance(m2) - variance(unlifted)) / k, (tau / 10) ** 2))
    np.testing.assert_allclose(m.spread[rows, n], want, rtol=1e-6)
    assert bool((m.spread[rows, n] < tau).any())  # some pair did narrow


@pytest.fixture(scope="module")
def eight() -> InterferenceModel:
    """Eight synthetic jobs, each measured next to every other; a two-component mixture,
    its ceilings lifted (so that what a new job borrows is checked against lifted mates)."""
    from interplace.datasets import synthetic
    from interplace.model import fit

    data = synthetic(8, seed=1, samples_per_run=4)
    model = fit(data, seed=3, steps=300, min_steps=300, restarts=2, lift_ceilings=True)
    assert model.info["ceiling_lift"]
    return model


def _lifts(model: InterferenceModel) -> np.ndarray:
    """Each fitted job's ceiling lift, ``info["ceiling_lift"]`` in job order (0: none)."""
    return np.array([model.info["ceiling_lift"].get(j, 0.0) for j in model.jobs])


def _fitted_effects(model: InterferenceModel) -> np.ndarray:
    """The second stage's effects, rebuilt as the fit lent them: the structure's mean log
    speed of each pair from the stage's own draws, then the conjugate update, relative to
    each job's structure before its ceiling lift (the stored effects are relative to the
    lifted structure)."""
    m = model.measured
    assert m is not None
    structure = dataclasses.replace(model, measured=None)
    mu = pair_log_speed(structure.draws(MEASURED_DRAWS, model.info["seed"])).numpy()
    effect = m.expected.copy()
    effect[m.job, m.co] += m.weight() * (m.log_speed - mu[m.job, m.co] - m.expected[m.job, m.co])
    return effect + _lifts(model)[:, None]


def _nearest(model: InterferenceModel, shares: dict[str, float], k: int) -> list[int]:
    """The ``k`` fitted jobs nearest to readings ``shares`` (resource -> share of full
    scale), worked out independently of the library: log readings, each resource
    standardised over the fitted jobs, mean squared difference, ties to the lower index."""
    rec = model.info["isolated_readings"]
    res = [r for r in shares if all(r in rec[j] for j in model.jobs)]
    x = np.array([[rec[j][r] for r in res] for j in model.jobs])
    z = (x - x.mean(0)) / x.std(0)
    z_new = (np.log([shares[r] for r in res]) - x.mean(0)) / x.std(0)
    dist = ((z - z_new) ** 2).mean(1)
    return sorted(range(len(dist)), key=lambda j: (dist[j], j))[:k]


def test_a_new_job_borrows_the_effects_of_its_nearest_fitted_jobs(
    eight: InterferenceModel,
) -> None:
    # Every fitted job is measured on both sides, so the new job's row is the mean of its
    # five nearest jobs' rows of effects, its column the mean of their columns, and its
    # effect on itself the mean of the block between them (rows first, then columns):
    # interplace.model._cells.borrowed_effects, as the fit's own cold jobs get. The effects
    # lent are the fit's, relative to each fitted job's structure before its ceiling lift
    # (the stored ones are relative to the lifted structure; the new job is not lifted).
    grown = with_cold_jobs(eight, {"new": {"gpu_util_pct": 55.0, "mem_util_pct": 20.0}})
    m = grown.measured
    assert m is not None and grown.info["cold_jobs_borrowing"] == ["new"]
    assert "cold_jobs_from_population" not in grown.info
    lift = _lifts(eight)
    effect = _fitted_effects(eight)
    near = _nearest(eight, {"gpu_compute": 0.55, "gpu_membw": 0.20}, 5)
    n = len(eight.jobs)
    np.testing.assert_allclose(m.expected[n, :n], effect[near].mean(0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        m.expected[:n, n], effect[:, near].mean(1) - lift, rtol=0, atol=1e-12
    )
    assert m.expected[n, n] == pytest.approx(effect[np.ix_(near, near)].mean(), abs=1e-12)
    # The offsets put the structure's mean log speed of each new pair, under the grown
    # model's own stage draws, at its prediction plus that effect (the bracketed solve).
    draws = dataclasses.replace(grown, measured=None).draws(MEASURED_DRAWS, eight.info["seed"])
    target = pair_log_speed(draws) + torch.as_tensor(m.expected)
    met = pair_log_speed(draws, torch.as_tensor(m.offset)) - target
    reachable = m.offset[n].__abs__() < OFFSET_BOUND
    assert float(met[n][torch.as_tensor(reachable)].abs().max()) < 1e-8
    assert grown.info["isolated_readings"]["new"] == pytest.approx(
        {"gpu_compute": math.log(0.55), "gpu_membw": math.log(0.20)}
    )


def test_a_new_job_with_nothing_to_find_mates_by_borrows_from_every_fitted_job(
    eight: InterferenceModel,
) -> None:
    # A reading of zero gives no log reading to find the nearest jobs by, and the model has
    # no families: the new job borrows the population's mean effect (every fitted job is
    # measured on both sides here). Zero effect, as before, would sit the new job's pairs
    # with a lifted job at the *lifted* structure, where the fit's own pairs sit at their
    # effect relative to the structure before the lift.
    grown = with_cold_jobs(eight, {"blank": {"gpu_util_pct": 0.0}})
    m = grown.measured
    assert m is not None and grown.info["cold_jobs_borrowing"] == ["blank"]
    assert grown.info["cold_jobs_from_population"] == ["blank"]
    assert "blank" not in grown.info["isolated_readings"]
    lift = _lifts(eight)
    assert lift.any()
    effect = _fitted_effects(eight)
    n = len(eight.jobs)
    np.testing.assert_allclose(m.expected[n, :n], effect.mean(0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(m.expected[:n, n], effect.mean(1) - lift, rtol=0, atol=1e-12)
    assert m.expected[n, n] == pytest.approx(effect.mean(), abs=1e-12)


def test_jobs_added_one_call_at_a_time_borrow_what_they_would_together(
    eight: InterferenceModel, tmp_path: Path,
) -> None:
    a = {"gpu_util_pct": 90.0, "mem_util_pct": 70.0}
    b = {"gpu_util_pct": 10.0}
    both = with_cold_jobs(eight, {"a": a, "b": b})
    # Saved and loaded in between: the grown pairs and the added readings travel with it.
    first = InterferenceModel.load(with_cold_jobs(eight, {"a": a}).save(tmp_path / "m"))
    again = with_cold_jobs(first, {"b": b})
    assert again.jobs == both.jobs and again.info["cold_jobs_borrowing"] == ["a", "b"]
    assert again.measured is not None and both.measured is not None
    # The completion depends only on the fit and the readings; the offsets of the later job
    # are solved under other draws (the grown model's), so they agree to Monte Carlo error.
    np.testing.assert_allclose(again.measured.expected, both.measured.expected, atol=1e-12)


def test_a_model_without_recorded_readings_adds_jobs_without_borrowing(
    eight: InterferenceModel,
) -> None:
    info = {k: v for k, v in eight.info.items() if k != "isolated_readings"}
    old = dataclasses.replace(eight, info=info)
    grown = with_cold_jobs(old, {"new": {"gpu_util_pct": 55.0}})
    assert grown.measured is eight.measured  # padded with zeros when predicting
    assert "cold_jobs_borrowing" not in grown.info
    for bad, message in (
        ("x", "is not a job -> readings map"),
        ({"job0": [1.0]}, r"\['job0'\] is not a map"),
        ({"job0": {"gpu_compute": "1"}}, r"\['gpu_compute'\] is not a number"),
    ):
        broken = dataclasses.replace(eight, info={**info, "isolated_readings": bad})
        with pytest.raises(InputError, match=message):
            with_cold_jobs(broken, {"new": {"gpu_util_pct": 55.0}})


@pytest.mark.parametrize("bad", [[0.1], {"nope": 0.1}])
def test_a_model_whose_ceiling_lifts_name_no_fitted_job_is_refused(
    eight: InterferenceModel, bad: object,
) -> None:
    broken = dataclasses.replace(eight, info={**eight.info, "ceiling_lift": bad})
    with pytest.raises(InputError, match=r"info\['ceiling_lift'\] does not name fitted jobs"):
        with_cold_jobs(broken, {"new": {"gpu_util_pct": 55.0}})


def _quad_moments(
    loc: float, scale: float, shares: list[float], noise: list[float], samples: int
) -> tuple[float, float]:
    """Mean and sd of log demand under the prior N(loc, scale^2) and the counter likelihood
    N(u | cap(e^x), noise^2 / samples) per reading, by adaptive quadrature (scipy), with the
    counters' rounded min(1, .) written out here: independent of the library's grid."""
    from scipy.integrate import quad

    def cap(v: float) -> float:
        knee = 0.02
        if v <= 1 - knee:
            return v
        return 1.0 if v >= 1 + knee else v - (v - (1 - knee)) ** 2 / (4 * knee)

    def logp(x: float) -> float:
        out = -0.5 * ((x - loc) / scale) ** 2
        for u, s in zip(shares, noise, strict=True):
            out -= 0.5 * samples * ((u - cap(math.exp(x))) / s) ** 2
        return out

    lo, hi = loc - 12 * scale, max(loc + 12 * scale, 2.0)
    xs = np.linspace(lo, hi, 20001)
    values = [logp(float(x)) for x in xs]
    # The mode, found coarsely, tells quad where the mass is; quad does the integral.
    peak, mode = max(values), float(xs[int(np.argmax(values))])

    def moment(k: int) -> float:
        value, _ = quad(lambda x: x**k * math.exp(logp(x) - peak), lo, hi, limit=400,
                        points=[mode])
        return float(value)

    z = moment(0)
    mean = moment(1) / z
    return mean, math.sqrt(moment(2) / z - mean**2)


@pytest.mark.parametrize(
    ("loc", "scale", "shares", "noise", "samples"),
    [
        (-1.0, 1.0, [0.5], [0.05], 1),  # a clear reading: near log 0.5, sd about 0.1
        (-1.1, 0.9, [0.45], [0.095], 1),  # Lucid-like: the prior pulls the reading
        (-2.0, 1.4, [0.02], [0.07], 1),  # a low, loose reading
        (-1.0, 1.0, [0.0], [0.05], 4),  # nothing read: demand small
        (-0.5, 0.8, [1.0, 0.995], [0.05, 0.08], 1),  # saturated: at least full scale
        (-1.0, 1.0, [0.6, 0.4], [0.05, 0.05], 100),  # two metrics, many samples: sharp
    ],
)
def test_read_demand_is_the_model_posterior_of_a_reading(
    loc: float, scale: float, shares: list[float], noise: list[float], samples: int
) -> None:
    # The grid of 4,001 points (refined around a sharp posterior) against adaptive
    # quadrature: its error is far below 1e-3 of the posterior sd.
    m, sd = read_demand(loc, scale, shares, noise, samples)
    qm, qsd = _quad_moments(loc, scale, shares, noise, samples)
    assert m == pytest.approx(qm, abs=1e-3 * qsd)
    assert sd == pytest.approx(qsd, rel=1e-3)


def test_read_demand_moves_with_the_reading_and_its_weight() -> None:
    # More demand read, more demand; more samples, a tighter posterior closer to the reading.
    lows = [read_demand(-1.0, 1.0, [u], [0.08], 1)[0] for u in (0.1, 0.3, 0.6, 0.9)]
    assert lows == sorted(lows)
    one, many = read_demand(-2.0, 1.0, [0.5], [0.1], 1), read_demand(-2.0, 1.0, [0.5], [0.1], 50)
    assert many[1] < one[1] and abs(many[0] - math.log(0.5)) < abs(one[0] - math.log(0.5))


def _new_row(m: InterferenceModel, site: str) -> torch.Tensor:
    """The last job's row of ``site``'s location, ``(K, R)`` (one row for a single fit)."""
    loc = m.posterior[site][0]
    return loc.reshape(-1, *loc.shape[-2:])[:, -1]


def _hats(m: InterferenceModel, c: int) -> dict[str, torch.Tensor]:
    """Component ``c``'s posterior locations of the population sites a new job's rows use."""
    def loc(site: str) -> torch.Tensor:
        value = m.posterior[site][0]
        return value[c] if m.components > 1 else value

    def scale(site: str) -> torch.Tensor:
        value = m.posterior[site][1]
        return value[c] if m.components > 1 else value

    return {
        "mu": loc("demand_mu"), "mu_sd": scale("demand_mu"), "sd": loc("demand_sd").exp(),
        "noise": loc("metric_noise").exp(),
    }


def _expected_demand(
    m: InterferenceModel, c: int, r: int, shares: dict[str, float], samples: int,
    centre: float = 0.0, widen: float = 0.0,
) -> float:
    """The new job's log demand on resource ``r`` in component ``c``: the exact posterior of
    its readings ``shares`` (metric -> share) plus the fit's cold-demand shift (or the
    single-job rule where the fit recorded none), from the model's own hats."""
    h = _hats(m, c)
    loc = float(h["mu"][r]) + centre
    scale = math.sqrt(float(h["sd"][r]) ** 2 + float(h["mu_sd"][r]) ** 2 + widen**2)
    noise = []
    for metric in shares:
        if metric in m.metrics:
            noise.append(float(h["noise"][m.metrics.index(metric)]))
        else:  # a metric the model lacks: the mean of its metrics on the same resource
            same = [i for i, x in enumerate(m.metrics) if x in ("gpu_util_pct", "sm_active_pct")]
            noise.append(float(h["noise"][same].mean()))
    mean, _ = _quad_moments(loc, scale, list(shares.values()), noise, samples)
    name = m.resources[r]
    shift = m.info.get("cold_demand_shift", {}).get(name)
    if shift is not None:
        return mean + shift[c]
    gap = m.info.get("demand_gap", {}).get(name)
    u = sum(shares.values()) / len(shares)
    if gap is not None and u >= 0.05:
        return math.log(u) + gap[c]
    return mean


def test_each_metric_of_a_resource_is_one_reading_in_the_likelihood(
    small_model: InterferenceModel,
) -> None:
    # Two metrics that read GPU compute each enter the counter likelihood with their own
    # noise (one the model lacks: its resource's mean noise), whichever order they come in.
    gpu = small_model.resources.index("gpu_compute")
    shares = {"gpu_util_pct": 0.8, "sm_active_pct": 0.4}
    a = with_cold_jobs(small_model, {"new": {"gpu_util_pct": 80.0, "sm_active_pct": 40.0}})
    b = with_cold_jobs(small_model, {"new": {"sm_active_pct": 40.0, "gpu_util_pct": 80.0}})
    assert torch.equal(a.posterior["log_demand"][0], b.posterior["log_demand"][0])
    k = small_model.info["isolated_samples"]
    for c in range(small_model.components):
        want = _expected_demand(small_model, c, gpu, shares, k)
        assert float(_new_row(a, "log_demand")[c, gpu]) == pytest.approx(want, abs=1e-3)
    # A saturated reading puts demand at about full scale or above; a lower one below it.
    full = with_cold_jobs(small_model, {"new": {"gpu_util_pct": 99.0, "sm_active_pct": 99.5}})
    assert bool((_new_row(full, "log_demand")[:, gpu] > _new_row(a, "log_demand")[:, gpu]).all())


def test_a_reading_weighs_as_many_samples_as_the_fits_own_or_as_given(
    small_model: InterferenceModel,
) -> None:
    k = small_model.info["isolated_samples"]
    assert isinstance(k, int) and k >= 1
    reading = {"new": {"gpu_util_pct": 30.0}}
    gpu = small_model.resources.index("gpu_compute")
    default = with_cold_jobs(small_model, reading)
    same = with_cold_jobs(small_model, reading, samples=k)
    assert torch.equal(default.posterior["log_demand"][1], same.posterior["log_demand"][1])
    one = with_cold_jobs(small_model, reading, samples={"new": 1})
    many = with_cold_jobs(small_model, reading, samples=1000)
    sd = [float(m.posterior["log_demand"][1].reshape(-1, *m.posterior["log_demand"][1].shape[
        -2:])[0, -1, gpu]) for m in (one, many)]
    assert sd[1] < sd[0]
    with pytest.raises(InputError, match="samples must be a whole number >= 1"):
        with_cold_jobs(small_model, reading, samples=0)
    with pytest.raises(InputError, match="samples given for job type\\(s\\) 'other'"):
        with_cold_jobs(small_model, reading, samples={"other": 2})
    broken = dataclasses.replace(small_model, info={**small_model.info, "isolated_samples": 0.5})
    with pytest.raises(InputError, match="isolated_samples'\\] is not a count"):
        with_cold_jobs(broken, reading)


def test_a_new_job_is_moved_as_the_fit_moved_its_own_cold_jobs(
    small_model: InterferenceModel,
) -> None:
    # Where the fit shifted its cold jobs' demand (info["cold_demand_shift"]), a new job's
    # read demand moves by the same, and its intensity back by as much (its pressure kept);
    # a resource it does not read keeps the prior.
    k = small_model.components
    info = {**small_model.info, "cold_demand_shift": {"gpu_compute": [0.3] * k}}
    shifted = dataclasses.replace(small_model, info=info)
    reading = {"new": {"gpu_util_pct": 40.0}}
    a, b = with_cold_jobs(small_model, reading), with_cold_jobs(shifted, reading)
    gpu = small_model.resources.index("gpu_compute")
    n = small_model.info["isolated_samples"]
    for c in range(k):
        want = _expected_demand(shifted, c, gpu, {"gpu_util_pct": 0.4}, n)
        assert float(_new_row(b, "log_demand")[c, gpu]) == pytest.approx(want, abs=1e-3)
        read = want - 0.3
        moved = float(_new_row(b, "log_demand")[c, gpu]) + float(
            _new_row(b, "log_intensity")[c, gpu])
        assert moved == pytest.approx(read, abs=1e-3)  # pressure d e^eta at the read demand
    others = [r for r in range(len(small_model.resources)) if r != gpu]
    assert torch.equal(_new_row(a, "log_demand")[:, others], _new_row(b, "log_demand")[:, others])


def test_a_jobs_counter_samples_reach_the_cold_start_path(
    small_model: InterferenceModel, tmp_path: Path,
) -> None:
    from interplace.placement._place import with_counters
    from interplace.placement.io import jobs_from_frame

    reading = {"gpu_util_pct": 30.0}
    want = with_cold_jobs(small_model, {"new": reading}, samples=50)
    grown = with_counters(small_model, [Job("a", "new", counters=reading, counter_samples=50)],
                          None)
    assert isinstance(grown, InterferenceModel)
    assert torch.equal(grown.posterior["log_demand"][1], want.posterior["log_demand"][1])
    with pytest.raises(InputError, match="'new' is given two different counter_samples"):
        with_counters(small_model, [Job("a", "new", counters=reading, counter_samples=50),
                                    Job("b", "new", counters=reading)], None)
    with pytest.raises(InputError, match="counter_samples given without counters"):
        Job("a", "new", counter_samples=5)
    with pytest.raises(InputError, match="counter_samples must be a whole number >= 1"):
        Job("a", "new", counters=reading, counter_samples=0)
    # The jobs table's column: blank is the default, a bad count is refused by row.
    frame = pd.DataFrame({"job_id": ["a", "b"], "job": ["new", "x"],
                          "gpu_util_pct": [30.0, None], "counter_samples": [50, None]})
    jobs = jobs_from_frame(frame)
    assert jobs[0].counter_samples == 50 and jobs[1].counter_samples is None
    frame.loc[0, "counter_samples"] = 2.5
    with pytest.raises(InputError, match="row 0: counter_samples must be a whole number"):
        jobs_from_frame(frame)


def test_cold_jobs_join_every_component_of_a_mixture() -> None:
    from interplace.datasets import synthetic
    from interplace.model import fit

    data = synthetic(4, seed=2, samples_per_run=8)
    mixture = fit(data, seed=0, steps=100, min_steps=100, restarts=3)
    m = with_cold_jobs(mixture, {"new": {"gpu_util_pct": 50.0}})
    assert m.components == 3 and m.jobs[-1] == "new"
    loc = m.posterior["log_demand"][0]
    assert loc.shape == (3, len(mixture.jobs) + 1, len(mixture.resources))
    gpu = mixture.resources.index("gpu_compute")
    # Each component reads the counter with its own hats (prior, noise, shift).
    k = mixture.info["isolated_samples"]
    for c in range(3):
        want = _expected_demand(mixture, c, gpu, {"gpu_util_pct": 0.5}, k)
        assert float(loc[c, -1, gpu]) == pytest.approx(want, abs=1e-3)
    p = m.posterior_speed([Query("new", ("job0",))], num_samples=30)
    assert bool((p.mean > 0).all())


@pytest.fixture(scope="module")
def families_model() -> InterferenceModel:
    """Eight synthetic jobs in two families of four (A: job0-job3, B: job4-job7), one fit."""
    from interplace.datasets import synthetic
    from interplace.model import fit

    data = synthetic(8, seed=1, samples_per_run=4)
    family = {f"job{i}": "A" if i < 4 else "B" for i in range(8)}
    return fit(data, seed=3, steps=300, min_steps=300, restarts=1, family=family)


def test_a_new_job_in_a_family_starts_from_it_and_borrows_from_its_members(
    families_model: InterferenceModel,
) -> None:
    # The family's posterior effect centres the new job's prior latents (sensitivity noise,
    # intensity, bias; demand where no counter reads it), its sd widens them, and the
    # job's pair corrections are the means of family A's measured members' effects.
    m = families_model
    counters = {"new": {"gpu_util_pct": 55.0}}
    grown = with_cold_jobs(m, counters, {"new": "A"})
    assert grown.family_map()["new"] == "A" and grown.families is not None
    n_res = len(m.resources)
    gpu = m.resources.index("gpu_compute")
    effect_loc, effect_sd = m.posterior["family_effect"]
    a = sorted(set(f for f in m.families if f is not None)).index("A")  # family_index order
    e, v = effect_loc[a], effect_sd[a]
    eps_loc, eps_sd = (t[-1] for t in grown.posterior["sens_eps"])
    torch.testing.assert_close(eps_loc, e[n_res : 2 * n_res])
    torch.testing.assert_close(eps_sd, torch.sqrt(1 + v[n_res : 2 * n_res] ** 2))
    bias_loc, _ = (t[-1] for t in grown.posterior["iso_bias"])
    torch.testing.assert_close(bias_loc, e[3 * n_res])
    unread = [r for r in range(n_res) if r != gpu]
    d_loc = grown.posterior["log_demand"][0][-1]
    mu = m.posterior["demand_mu"][0]
    torch.testing.assert_close(d_loc[unread], (mu + e[:n_res])[unread])
    # The read demand: the family-centred, widened prior times the reading's likelihood,
    # moved as the fit moved its cold jobs; the intensity stays at the family's centre, which
    # the family's members with co-located runs set on the fitted jobs' scale already
    # (interplace.model._coldscale, *Families*).
    want = _expected_demand(
        m, 0, gpu, {"gpu_util_pct": 0.55}, m.info["isolated_samples"],
        centre=float(e[gpu]), widen=float(v[gpu]),
    )
    assert float(d_loc[gpu]) == pytest.approx(want, abs=1e-3)
    i_loc = grown.posterior["log_intensity"][0][-1]
    noise = float(m.posterior["metric_noise"][0].exp()[m.metrics.index("gpu_util_pct")])
    prior_sd = math.sqrt(float(m.posterior["demand_sd"][0][gpu].exp()) ** 2
                         + float(m.posterior["demand_mu"][1][gpu]) ** 2 + float(v[gpu]) ** 2)
    read, _ = _quad_moments(
        float(mu[gpu] + e[gpu]), prior_sd, [0.55], [noise], m.info["isolated_samples"]
    )
    assert float(d_loc[gpu]) != pytest.approx(read, abs=1e-3)  # the demand did move
    assert float(i_loc[gpu]) == pytest.approx(float(e[2 * n_res + gpu]), abs=1e-12)
    # Borrowed from family A's members (all measured on both sides), not the nearest jobs.
    pairs = grown.measured
    assert pairs is not None and grown.info["cold_jobs_borrowing"] == ["new"]
    effect = _fitted_effects(m)
    members = [m.jobs.index(f"job{i}") for i in range(4)]
    n = len(m.jobs)
    np.testing.assert_allclose(pairs.expected[n, :n], effect[members].mean(0), atol=1e-12)
    np.testing.assert_allclose(
        pairs.expected[:n, n], effect[:, members].mean(1) - _lifts(m), atol=1e-12
    )


def test_a_family_the_model_does_not_know_is_not_used(
    families_model: InterferenceModel, eight: InterferenceModel,
) -> None:
    counters = {"new": {"gpu_util_pct": 55.0}}
    plain = with_cold_jobs(families_model, counters)
    unknown = with_cold_jobs(families_model, counters, {"new": "C"})
    assert unknown.family_map()["new"] is None
    for site in ("log_demand", "sens_eps", "log_intensity", "iso_bias"):
        for i in (0, 1):
            assert torch.equal(unknown.posterior[site][i], plain.posterior[site][i])
    assert unknown.measured is not None and plain.measured is not None
    assert np.array_equal(unknown.measured.expected, plain.measured.expected)
    # A model fitted without families has none to put a new job in.
    assert with_cold_jobs(eight, counters, {"new": "A"}).families is None
    with pytest.raises(InputError, match="families given for job type\\(s\\) 'other'"):
        with_cold_jobs(families_model, counters, {"other": "A"})
    with pytest.raises(InputError, match="family must be a non-empty name"):
        with_cold_jobs(families_model, counters, {"new": " A"})


def test_a_new_job_of_unknown_family_takes_the_mixture_of_the_fitted_families(
    families_model: InterferenceModel,
) -> None:
    # Every fitted job has a family (four in A, four in B): a new job without a known one
    # belongs to one of them, which unknown, and starts from their moment-matched mixture,
    # weighted by the families' sizes (here equal).
    m = families_model
    n_res = len(m.resources)
    grown = with_cold_jobs(m, {"new": {"gpu_util_pct": 55.0}})
    assert grown.family_map()["new"] is None
    loc, sd = m.posterior["family_effect"]
    centre = loc.mean(0)
    spread = ((sd**2 + (loc - centre) ** 2).mean(0)).sqrt()
    eps_loc, eps_sd = (t[-1] for t in grown.posterior["sens_eps"])
    torch.testing.assert_close(eps_loc, centre[n_res : 2 * n_res])
    torch.testing.assert_close(eps_sd, torch.sqrt(1 + spread[n_res : 2 * n_res] ** 2))
    bias_loc, bias_sd = (t[-1] for t in grown.posterior["iso_bias"])
    torch.testing.assert_close(bias_loc, centre[3 * n_res])
    omega = m.posterior["iso_bias_scale"][0].exp().reshape(())
    torch.testing.assert_close(bias_sd, torch.sqrt(omega**2 + spread[3 * n_res] ** 2))


def test_where_some_fitted_jobs_have_no_family_a_new_one_without_is_like_them() -> None:
    # A fit whose jobs include some of no family learnt what "no family" is (the zero
    # effect); a new job without a family takes it, as those jobs do.
    from interplace.datasets import synthetic
    from interplace.model import fit

    data = synthetic(6, seed=1, samples_per_run=4)
    family = {f"job{i}": "A" if i < 3 else None for i in range(6)}
    m = fit(data, seed=3, steps=200, min_steps=200, restarts=1, family=family)
    grown = with_cold_jobs(m, {"new": {"gpu_util_pct": 55.0}})
    n_res = len(m.resources)
    eps_loc, eps_sd = (t[-1] for t in grown.posterior["sens_eps"])
    assert torch.equal(eps_loc, torch.zeros(n_res, dtype=eps_loc.dtype))
    assert torch.equal(eps_sd, torch.ones(n_res, dtype=eps_sd.dtype))


def test_placement_passes_a_new_jobs_family(families_model: InterferenceModel) -> None:
    from interplace.placement._place import with_counters

    reading = {"gpu_util_pct": 55.0}
    jobs = [Job("a", "new", counters=reading, family="A"),
            Job("b", "new", counters=reading, family="A")]
    grown = with_counters(families_model, jobs, None)
    assert isinstance(grown, InterferenceModel) and grown.family_map()["new"] == "A"
    with pytest.raises(InputError, match="'new' is given two different families"):
        with_counters(families_model, [*jobs, Job("c", "new", counters=reading)], None)
    # The same input gives the same model, kept rather than grown again; another family or
    # reading is another model.
    assert with_counters(families_model, jobs[:1], None) is grown
    other = with_counters(families_model, [Job("c", "new", counters=reading, family="B")], None)
    assert other is not grown and other.family_map()["new"] == "B"
    assert with_counters(families_model, [Job("c", "new", counters=reading)], None) is not grown


def test_cli_place_names_a_new_types_family(
    tmp_path: Path, families_model: InterferenceModel, capsys: pytest.CaptureFixture[str]
) -> None:
    model_dir = families_model.save(tmp_path / "m")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,job,gpus,family,gpu_util_pct\na,job0,1,,\nb,new-net,1,B,75\n")
    out = tmp_path / "p.csv"
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu",
                 "--jobs", str(jobs), "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "new-net (pair corrections from family B)" in printed.out
    jobs.write_text("job_id,job,gpus,gpu_util_pct\nb,other-net,1,75\n")
    assert main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu",
                 "--jobs", str(jobs), "--out", str(out)]) == 0
    assert ("other-net (family unknown: started from the mixture of the fitted families; pair "
            "corrections from the 5 fitted jobs with the nearest counters)"
            ) in capsys.readouterr().out
    jobs.write_text("job_id,job,gpus\na,job0,1\n")
    assert main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu",
                 "--jobs", str(jobs), "--out", str(out)]) == 0
    assert "not fitted on" not in capsys.readouterr().out


def test_a_model_of_nuts_draws_takes_cold_jobs() -> None:
    # Point-mass components (scale zero): each new job gets a row per draw, read as for SVI's.
    model = fit(synthetic(4, seed=2, samples_per_run=8), steps=100, min_steps=100, restarts=1,
                nuts=Nuts(chains=2, warmup=4, draws=3, max_tree_depth=2))
    grown = with_cold_jobs(model, {"newjob": {"gpu_util_pct": 60.0}})
    assert grown.jobs[-1] == "newjob" and grown.components == model.components == 6
    loc, scale = grown.posterior["log_demand"]
    assert loc.shape[:2] == (6, 5) and torch.isfinite(loc).all() and (scale >= 0).all()
    speed = grown.posterior_speed([Query("newjob", (model.jobs[0],))], num_samples=6, seed=0)
    assert 0 < float(speed.mean[0]) <= 1.5


def test_a_job_built_from_a_pandas_row_keeps_its_numbers(small_model: InterferenceModel) -> None:
    # A scheduler reading its queue with pandas hands over numpy scalars: an integer column's
    # gpus or reading (np.int64) was refused as "must be an integer >= 1, not 2" or "must be a
    # finite number"; they are the Python numbers they hold now. A numpy bool is no number.
    row = pd.DataFrame({"job_id": ["a"], "job": ["new"], "gpus": [2], "gpu_util_pct": [85],
                        "counter_samples": [5], "comm_share": [np.float32(0.25)]}).iloc[0]
    job = Job(row["job_id"], row["job"], gpus=row["gpus"], comm_share=row["comm_share"],
              counters={"gpu_util_pct": row["gpu_util_pct"]},
              counter_samples=row["counter_samples"])
    assert isinstance(row["gpus"], np.integer)
    assert (job.gpus, job.counter_samples, job.counters) == (2, 5, (("gpu_util_pct", 85.0),))
    assert type(job.gpus) is int and type(job.comm_share) is float
    with pytest.raises(InputError, match="gpus must be an integer >= 1"):
        Job("a", "new", gpus=np.True_)
    # The same for readings handed to with_cold_jobs directly.
    got = with_cold_jobs(small_model, {"new": {"gpu_util_pct": np.int64(30)}})
    want = with_cold_jobs(small_model, {"new": {"gpu_util_pct": 30.0}})
    assert torch.equal(got.posterior["log_demand"][0], want.posterior["log_demand"][0])
