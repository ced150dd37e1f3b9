r"""Cold start at placement time: a new job type known only by its isolated counters.

A scheduler often meets a job type the model was never fitted on, but can read its NVML
counters from a short isolated run (or a previous run of the same job). The model's cold-start
path gives such a job a posterior from its counters and the population: this module adds it
to a fitted model without refitting, giving the job what the fit gives its own jobs without
co-located runs. For the new job :math:`n` and each resource :math:`r` that some of its
metrics :math:`m \in M_r` read, with mean isolated readings :math:`u_m` (shares of full
scale) over :math:`k` samples each, the log demand's posterior is the model's own: its prior
times its counter likelihood of an isolated run, at the population's posterior means,

.. math::
    p(x) \propto \mathcal N\bigl(x;\ \hat\mu_r,\ \hat\sigma_r^2 + s_{\mu r}^2\bigr)
    \prod_{m \in M_r} \mathcal N\bigl(u_m;\ \mathrm{cap}(e^{x}),\ \hat\nu_m^2 / k\bigr),

integrated on a grid (:func:`read_demand`: mean :math:`m_{nr}`, sd :math:`s_{nr}`), and the
mean-field rows are

.. math::
    \log d_{nr} \sim \mathcal N(m_{nr} + \Delta_r,\ s_{nr}^2), \quad
    \eta_{nr} \sim \mathcal N(-\Delta_r, \hat\varsigma_r^2)
    \ \text{(a resource read)}, \qquad
    \log d_{nr} \sim \mathcal N\bigl(\hat\mu_r,\ \hat\sigma_r^2 + s_{\mu r}^2\bigr)
    \ \text{(none)},

.. math::
    \epsilon_{nr} \sim \mathcal N(0, 1), \quad \eta_{nr} \sim \mathcal N(0, \hat\varsigma_r^2)
    \ \text{(no reading)},
    \quad \beta_n \sim \mathcal N(0, \hat\omega^2), \quad
    u_{nl} \sim \mathcal N(0, \hat\lambda_l^2), \quad w_{nl} \sim \mathcal N(0, 1)

(the last two only for a model with a pair term of rank :math:`L`; :math:`\hat\lambda_l` its
components' spreads), with hats the posterior means of the population's latents
(:math:`\hat\mu_r` the demand location, :math:`s_{\mu r}` its posterior sd,
:math:`\hat\sigma_r` the demand spread, :math:`\hat\nu_m` metric :math:`m`'s per-sample
noise, :math:`\hat\varsigma_r` the intensity spread, :math:`\hat\omega` the reference-error
scale; ``cap`` the counters' smooth ``min(1, .)``). :math:`\Delta_r` is the shift the fit gave
its own cold jobs' demand (``info["cold_demand_shift"]``, :mod:`interplace.model._coldscale`),
which puts the demand, hence the sensitivity, on the fitted jobs' scale while keeping the
pressure :math:`d e^{\eta}`; where the fit recorded none (it had no cold job reading
:math:`r`) it is the fit's rule for a single cold job, :math:`\bar g_r - (m_{nr} - \log \bar
u_{nr})` with :math:`\bar g_r` the fitted jobs' median gap (``info["demand_gap"]``) and
:math:`\bar u_{nr}` the mean reading, for a reading of at least 5% of full scale, and 0
otherwise (and for a reading of 0, and for models fitted without the step). :math:`k`
defaults to the fit's median count per isolated reading (``info["isolated_samples"]``; 1
for a model fitted before it was kept): a new job's readings weigh as the fit's own did.
A saturated reading says only that the demand is at least about full scale, and the
likelihood says just that. The conditioning is on the population, not feeding back into it
(a refit would also learn from the new job; with one isolated run it has nothing else to
teach). The sensitivity then follows the model's regression on demand, which is what makes
the cold prediction depend on the counters. A mixture posterior (a fit with ``restarts``)
gives the new job these rows in each component, from that component's hats.

Until 2026-11-27 the read demand was :math:`\log \max(u, 0.02) + \bar g_r` with a fixed sd of
:math:`0.05 / \max(u, 0.05)`, which took every reading as exact to 5% of full scale whatever
the fit had learnt of the counters' noise; on Lucid's cold-start splits (one sample per
reading, per-sample noise near 0.07-0.10) the fit's own cold jobs sat up to 0.3 below that
on GPU compute, and the placement path trailed the fit (``docs/benchmarks.md``).

*Families.* A new job given a family the model was fitted with (``families``; a placed
job's ``family``) starts from that family's effect, as the fit's own jobs do: with
:math:`e_f` the posterior mean of the family's effect on each latent and :math:`v_f` its
posterior sd, the demand prior above becomes :math:`\mathcal N(\hat\mu_r + e^{d}_{fr},
\hat\sigma_r^2 + s_{\mu r}^2 + v^{d\,2}_{fr})` (the row itself where no counter reads
:math:`r`), :math:`\epsilon_{nr} \sim \mathcal N(e^{\epsilon}_{fr}, (1 +
v^{\epsilon\,2}_{fr})^{1/2})`, :math:`\eta_{nr} \sim \mathcal N(e^{\eta}_{fr} - (1 -
c_n)\Delta_r, (\hat\varsigma_r^2 + v^{\eta\,2}_{fr})^{1/2})` and :math:`\beta_n \sim \mathcal
N(e^{\beta}_f, (\hat\omega^2 + v^{\beta\,2}_f)^{1/2})`, and it borrows its pair
corrections from the family's measured members (below). A new job without a family the
model knows (none given, or one it was not fitted with), added to a model whose fitted jobs
all have families, belongs to *some* family, which one unknown: it takes the moment-matched
mixture of the fitted families, weighted by their numbers :math:`n_f` of fitted job types,
:math:`e = \sum_f w_f e_f` and :math:`v^2 = \sum_f w_f (v_f^2 + (e_f - e)^2)` with
:math:`w_f = n_f / \sum_g n_g`, in place of :math:`e_f, v_f` above (and borrows from its
nearest fitted jobs). The zero effect of "no family" is what the fit learnt only where some
of its jobs had none; there such a job keeps it. :math:`c_n` is the share of the job's
intensity centre that the fit's warm jobs (those measured as a victim) set: 1 for a family
with a warm member, whose effect already carries the raised intensity the shift
:math:`-\Delta_r` stands for (the fit's own rule, :mod:`interplace.model._coldscale`,
*Families*), 0 for a family without one, and for the mixture the weight of the families
with one. Measured on Lucid's family fits, a new job
added without its family: held-out MAE 0.0733 with the zero effect, 0.0666 with the mixture
(better on 7 of 10 seeds), 90% coverage 0.79 and 0.91 (``docs/benchmarks.md``).

*Pair corrections.* A fitted model's second stage (:mod:`interplace.model._cells`) corrects
each pair the structure misfits; a fitted job never measured co-located borrows its
corrections from its family's measured members, or else the measured jobs nearest to it
by isolated counters. A new job does the same here: with a family, from the family's
members; otherwise its row of prior mean effects is the mean of the rows of the
:data:`~interplace.model._cells.NEIGHBOURS` fitted jobs measured as victims nearest to its
readings (log shares of full scale, each resource standardised over those jobs), its column
likewise over the jobs measured as co-runners (a new job none of whose readings is of a
resource the model has, or all zero, takes every such job: the population's mean effect),
and its pressure offsets are solved so that
the structure's mean log speed of each new pair moves by that effect
(:func:`~interplace.model._cells.extended_pairs`). The measured jobs' effects are rebuilt from
the stage's own draws (the fit's seed), so the result is what the fit would have given the
job had it known its counters and nothing else of it, and adding jobs in one call or one at a
time borrows the same. A model fitted before ``info["isolated_readings"]`` was kept adds the
jobs without corrections. Measured on Lucid's cold-start splits with the cold jobs left out
of the fit (``benchmarks/cold_placement.py``, ``docs/benchmarks.md``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

from interplace._parallel import one_blas_thread
from interplace.errors import InputError, is_int, is_real, plain_number
from interplace.model import METRIC_FULL_SCALE, METRIC_RESOURCE, InterferenceModel
from interplace.model._cells import extended_pairs
from interplace.model._coldscale import (
    MIN_READING,
    below_array,
    readings_array,
    warm_families,
)
from interplace.model._counterkernel import READING_FLOOR, floored
from interplace.model._data import family_codes, family_index
from interplace.model._fit import MEASURED_DRAWS
from interplace.model._net import smooth_cap

__all__ = ["COLD_SITES", "read_demand", "with_cold_jobs"]

COLD_SITES = ("log_demand", "sens_eps", "log_intensity", "iso_bias", "pair_u", "pair_w")
"""The per-job latent sites a cold job gets a row of."""

_REVIEWED = (
    *COLD_SITES, "demand_mu", "demand_sd", "sens_loc", "sens_slope", "sens_scale", "threshold",
    "speed_noise", "metric_noise", "iso_bias_scale", "intensity_sd", "family_sd",
    "family_effect", "pair_scale",
)
"""Every latent site this module has a rule for (a row per new job, or kept as fitted); a
model with any other (a later model format) is refused rather than extended wrongly."""

def with_cold_jobs(
    model: InterferenceModel,
    counters: Mapping[str, Mapping[str, float]],
    families: Mapping[str, str] | None = None,
    samples: int | Mapping[str, int] | None = None,
) -> InterferenceModel:
    """``model`` with each new job type of ``counters`` (metric -> mean isolated reading) added.

    Readings are in each metric's unit (``gpu_util_pct`` in percent, ``pcie_rx_kbps`` in
    kB/s); the readings of several metrics of one resource (``gpu_util_pct`` and
    ``sm_active_pct``) are averaged as shares of full scale, as the fit averages a job's
    isolated readings. Types the model already knows are refused, so are unknown metrics and
    readings that are negative or not finite. ``families`` (new job type -> family name)
    puts a new type in one of the model's families (module docstring, *Families*); a family
    the model was not fitted with (or any, for a model without families) is not used, and
    :meth:`~interplace.model.InterferenceModel.family_map` of the result shows what was.
    ``samples`` (one count, or new job type -> count) is how many samples each mean reading
    is over, which sets its weight against the population prior; by default the fit's
    median count per isolated reading (``info["isolated_samples"]``; 1 for a model fitted
    before it was kept), i.e. a reading taken as the fit's own isolated runs were.

    >>> from interplace.datasets import synthetic
    >>> from interplace.model import Query, fit
    >>> m = fit(synthetic(3, seed=0, samples_per_run=4), steps=200, min_steps=200, restarts=1)
    >>> m2 = with_cold_jobs(m, {"new": {"gpu_util_pct": 95.0, "mem_util_pct": 60.0}})
    >>> m2.jobs[-1], len(m2.jobs)
    ('new', 4)
    >>> p = m2.posterior_speed([Query("new", ("job0",)), Query("job0", ("new",))])
    >>> bool((p.mean <= 1.1).all())
    True
    """
    if not counters:
        return model
    # Sites are known by name: a shape test mistook a per-resource or per-metric site for a
    # per-job one whenever the model had as many jobs as resources or metrics.
    unknown_sites = sorted(set(model.posterior) - set(_REVIEWED))
    if unknown_sites:
        raise InputError(
            f"cannot add cold jobs to this model: its latent site(s) {', '.join(unknown_sites)} "
            "have no cold-start rule (refit the model with the new jobs' isolated runs)"
        )
    known = set(model.jobs)
    res_index = {r: i for i, r in enumerate(model.resources)}
    # Each new job's readings per resource index: (metric, share of full scale) each.
    reads: dict[str, dict[int, list[tuple[str, float]]]] = {}
    logs: dict[str, dict[str, float]] = {}  # log mean share per resource (for mates)
    low: dict[str, list[str]] = {}  # resources read below the counter kernel's floor
    for job, readings in counters.items():
        if not isinstance(job, str) or not job.strip() or job != job.strip():
            raise InputError(f"cold job names must be non-empty names, not {job!r}")
        if job in known:
            raise InputError(f"job type {job!r} is already in the model")
        shares: dict[int, list[tuple[str, float]]] = {}
        for metric, value in _readings(job, readings):
            if metric not in METRIC_RESOURCE:
                raise InputError(
                    f"cold job {job!r}: unknown counter {metric!r} "
                    f"(known: {', '.join(sorted(METRIC_RESOURCE))})"
                )
            r = res_index.get(METRIC_RESOURCE[metric])
            if r is not None:
                shares.setdefault(r, []).append((metric, value / _full_scale(model, metric)))
        reads[job] = {r: sorted(shares[r]) for r in sorted(shares)}
        # The mean share per resource, as the fit's isolated readings are
        # (interplace.model._coldscale.isolated_log_readings).
        means = {r: sum(u for _, u in v) / len(v) for r, v in reads[job].items()}
        logs[job] = {model.resources[r]: math.log(u) for r, u in means.items() if u > 0}
        low[job] = [model.resources[r] for r, u in means.items() if u < READING_FLOOR]
    fam = _new_families(model, reads, families or {})
    weight = _sample_counts(model, reads, samples)
    gap, shift = _per_resource(model, "demand_gap"), _per_resource(model, "cold_demand_shift")
    members = _family_members(model)
    carried = _carried(model, fam, members)
    if model.components == 1:
        post = _with_rows(
            model.posterior, model.metrics, reads, weight, gap[0], shift[0], fam, members,
            carried,
        )
    else:
        parts = [
            _with_rows(
                {k: (loc[c], scale[c]) for k, (loc, scale) in model.posterior.items()},
                model.metrics, reads, weight, gap[c], shift[c], fam, members, carried,
            )
            for c in range(model.components)
        ]
        post = {
            k: (torch.stack([p[k][0] for p in parts]), torch.stack([p[k][1] for p in parts]))
            for k in parts[0]
        }
    names = list(reads)
    all_families = None if model.families is None else (
        *model.families, *(None if f is None else f[0] for f in fam.values())
    )
    info = dict(model.info)
    info["cold_jobs"] = [*info.get("cold_jobs", []), *names]
    grown = InterferenceModel(
        jobs=(*model.jobs, *names),
        resources=model.resources,
        metrics=model.metrics,
        full_scale=model.full_scale,
        hyper=model.hyper,
        posterior=post,
        info=info,
        families=all_families,
        measured=model.measured,
        components=model.components,
    )
    return _with_borrowed_effects(model, grown, logs, low)


def _with_borrowed_effects(
    model: InterferenceModel, grown: InterferenceModel, logs: Mapping[str, Mapping[str, float]],
    low: Mapping[str, list[str]],
) -> InterferenceModel:
    """``grown`` (``model`` with the new jobs of ``logs`` added) with the second stage's
    pairs extended to them: each borrows its effects from the five fitted jobs nearest by
    isolated readings (module docstring; :func:`~interplace.model._cells.extended_pairs`).

    ``logs``: each new job's log readings per resource name; ``low``: the resources each read
    below the counter kernel's floor (:data:`~interplace.model._counterkernel.READING_FLOOR`),
    which the kernel, where the model has one, reads at the floor. A model without measured pairs,
    or fitted before ``info["isolated_readings"]`` was kept, is returned as ``grown`` (the new
    jobs keep the structure's prediction)."""
    recorded = model.info.get("isolated_readings")
    old = readings_array(recorded, model.jobs, model.resources)
    if model.measured is None or old is None:
        return grown
    seed = model.info.get("seed")
    if not is_int(seed):
        raise InputError(f"this model's info['seed'] is not an integer: {seed!r}")
    added = model.info.get("cold_jobs", [])
    if not isinstance(added, list) or not set(added) <= set(model.jobs):
        raise InputError("this model's info['cold_jobs'] does not name jobs of the model")
    n_fit = len(model.jobs) - len(added)
    new = readings_array(logs, list(logs), model.resources)
    assert new is not None
    readings = np.vstack([old, new])
    below = np.vstack([
        below_array(model.info.get("isolated_below_floor"), model.jobs, model.resources),
        below_array(low, list(logs), model.resources),
    ])
    family = family_codes(grown.families)
    plain = dataclasses.replace(grown, measured=None)
    lifts = model.info.get("ceiling_lift", {})
    if not isinstance(lifts, Mapping) or not set(lifts) <= set(model.jobs[:n_fit]):
        raise InputError("this model's info['ceiling_lift'] does not name fitted jobs")
    with one_blas_thread():  # the kernel's solve beside other processes (one_blas_thread)
        pairs, lent, everyone = extended_pairs(
            model.measured,
            _first_jobs(plain, n_fit).draws(MEASURED_DRAWS, seed),
            plain.draws(MEASURED_DRAWS, seed),
            family=family,
            readings=readings,
            lift=np.array([float(lifts.get(j, 0.0)) for j in model.jobs[:n_fit]]),
            df=model.hyper.speed_df,
            kernel_readings=floored(readings, below),
        )
    info = dict(grown.info)
    kept = dict(recorded) if isinstance(recorded, Mapping) else {}
    info["isolated_readings"] = {**kept, **{j: dict(r) for j, r in logs.items() if r}}
    info["isolated_below_floor"] = {
        **dict(model.info.get("isolated_below_floor") or {}), **{j: v for j, v in low.items() if v}
    }
    info["cold_jobs_borrowing"] = [
        *info.get("cold_jobs_borrowing", []), *(grown.jobs[i] for i in lent)
    ]
    if everyone:
        info["cold_jobs_from_population"] = [
            *info.get("cold_jobs_from_population", []), *(grown.jobs[i] for i in everyone)
        ]
    return dataclasses.replace(grown, measured=pairs, info=info)


def _first_jobs(model: InterferenceModel, n: int) -> InterferenceModel:
    """``model`` cut to its first ``n`` jobs (the fitted ones, before any added later)."""
    if n == len(model.jobs):
        return model
    lead = 1 if model.components > 1 else 0
    post = {
        name: (loc.narrow(lead, 0, n), scale.narrow(lead, 0, n))
        if name in COLD_SITES else (loc, scale)
        for name, (loc, scale) in model.posterior.items()
    }
    families = None if model.families is None else model.families[:n]
    return dataclasses.replace(
        model, jobs=model.jobs[:n], posterior=post, families=families, measured=None
    )


def _new_families(
    model: InterferenceModel, reads: Mapping[str, object], families: Mapping[str, str]
) -> dict[str, tuple[str, int] | None]:
    """Each new job of ``reads``: its family's name and row of ``family_effect``, or None (no
    family given, a family the model has no effect for, or a model without families)."""
    extra = sorted(set(families) - set(reads))
    if extra:
        raise InputError(
            f"families given for job type(s) {', '.join(map(repr, extra))} that are not added"
        )
    for job, name in families.items():
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise InputError(f"cold job {job!r}: family must be a non-empty name, not {name!r}")
    row: dict[str, int] = {}
    if model.families is not None:
        idx = family_index(model.families)[0]
        row = {f: int(i) for f, i in zip(model.families, idx, strict=True) if f is not None}
    out: dict[str, tuple[str, int] | None] = {}
    for job in reads:
        given = families.get(job)
        out[job] = None if given is None or given not in row else (given, row[given])
    return out


def _with_rows(
    posterior: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    metrics: tuple[str, ...],
    reads: Mapping[str, Mapping[int, list[tuple[str, float]]]],
    samples: Mapping[str, int],
    gap: torch.Tensor,
    shift: torch.Tensor,
    fam: Mapping[str, tuple[str, int] | None],
    members: np.ndarray[Any, np.dtype[np.float64]] | None,
    carried: Mapping[str, float],
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """One mean-field posterior with a row for each new job of ``reads`` (module docstring).

    ``metrics``: the model's counter metrics (the order of ``metric_noise``); ``samples``:
    each new job's sample count per reading; ``gap``, ``shift``: ``(R,)`` the fit's warm
    median gap of log demand below log reading and the shift it gave its own cold jobs (NaN
    where it recorded none); ``fam``: each new job's family (:func:`_new_families`);
    ``members``: :func:`_family_members`; ``carried``: :func:`_carried`."""
    post = {k: (loc.clone(), scale.clone()) for k, (loc, scale) in posterior.items()}
    n_res = int(post["demand_mu"][0].shape[-1])
    family_of = _family_rows(post, fam, n_res, members)

    def mean_of(site: str) -> torch.Tensor:
        return post[site][0]  # unconstrained location: log of a positive site

    mu_loc, mu_scale = post["demand_mu"]
    demand_sd = mean_of("demand_sd").exp()
    intensity_sd = mean_of("intensity_sd").exp()
    bias_scale = mean_of("iso_bias_scale").exp().reshape(())
    noise = mean_of("metric_noise").exp()
    prior_scale = torch.sqrt(demand_sd**2 + mu_scale**2)
    rows: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {
        s: [] for s in COLD_SITES if s in post
    }
    pair_scale = mean_of("pair_scale").exp() if "pair_scale" in post else None
    for job, by_resource in reads.items():
        # The family's effect (none: zero) centres the job's prior, and its posterior
        # spread adds to the prior's.
        e_loc, e_sd = family_of[job]
        d_loc = mu_loc + e_loc[:n_res]
        d_scale = _widened(prior_scale, e_sd, slice(0, n_res))
        i_loc = e_loc[2 * n_res : 3 * n_res].clone()
        for r, shares in by_resource.items():
            sigma = [_metric_noise(noise, metrics, metric) for metric, _ in shares]
            m, sd = read_demand(
                float(d_loc[r]), float(d_scale[r]), [u for _, u in shares], sigma,
                samples[job],
            )
            mean_share = sum(u for _, u in shares) / len(shares)
            delta = 0.0
            if mean_share > 0 and not math.isnan(float(shift[r])):
                delta = float(shift[r])
            elif mean_share >= MIN_READING and not math.isnan(float(gap[r])):
                delta = float(gap[r]) - (m - math.log(mean_share))
            d_loc[r] = m + delta
            d_scale[r] = sd
            i_loc[r] -= delta * (1.0 - carried[job])
        rows["log_demand"].append((d_loc, d_scale))
        ones = torch.ones(n_res, dtype=torch.float64)
        rows["sens_eps"].append(
            (e_loc[n_res : 2 * n_res], _widened(ones, e_sd, slice(n_res, 2 * n_res)))
        )
        rows["log_intensity"].append(
            (i_loc, _widened(intensity_sd, e_sd, slice(2 * n_res, 3 * n_res)))
        )
        rows["iso_bias"].append(
            (e_loc[3 * n_res], _widened(bias_scale, e_sd, 3 * n_res))
        )
        if pair_scale is not None:
            # The pair term's prior: factors centred on zero, so the mechanism predicts.
            rows["pair_u"].append((torch.zeros_like(pair_scale), pair_scale.clone()))
            rows["pair_w"].append((torch.zeros_like(pair_scale), torch.ones_like(pair_scale)))
    for site, new in rows.items():
        old_loc, old_scale = post[site]
        post[site] = (
            torch.cat([old_loc, torch.stack([a for a, _ in new])]),
            torch.cat([old_scale, torch.stack([b for _, b in new])]),
        )
    return post


def read_demand(
    loc: float, scale: float, shares: list[float], noise: list[float], samples: int
) -> tuple[float, float]:
    r"""Posterior mean and sd of a job's log demand :math:`x` on one resource, given the mean
    readings ``shares`` :math:`u_m` (shares of full scale) of its metrics, each over
    ``samples`` :math:`n` samples with per-sample noise ``noise`` :math:`\sigma_m`, and the
    prior :math:`\mathcal N(` ``loc``, ``scale`` :math:`^2)`:

    .. math::
        p(x \mid u) \propto \mathcal N(x;\ \mathrm{loc}, \mathrm{scale}^2)
        \prod_m \mathcal N\bigl(u_m;\ \mathrm{cap}(e^{x}),\ \sigma_m^2 / n\bigr),

    the model's own counter likelihood of an isolated run (:func:`~interplace.model._net.
    counter_mean`, ``cap`` its smooth ``min(1, .)``), integrated on a grid (4,001 points over
    the prior's and the readings' range; a posterior narrower than 20 of those steps is
    integrated again over ten posterior sd either side of its mean). A saturated reading says
    only that the demand is at least about full scale; a reading of 0 that it is small.

    >>> m, sd = read_demand(-1.0, 1.0, [0.5], [0.05], 1)
    >>> round(m, 2), round(sd, 2)
    (-0.71, 0.1)
    >>> m, sd = read_demand(-1.0, 1.0, [1.0], [0.05], 1)  # saturated: at least full scale
    >>> m > -0.1 and sd > 0.3
    True
    """
    lo = min(loc - 8.0 * scale, min(math.log(max(u, 1e-4)) for u in shares) - 2.0)
    hi = max(loc + 8.0 * scale, 1.0)
    m, sd = _grid_moments(lo, hi, loc, scale, shares, noise, samples)
    step = (hi - lo) / (_GRID - 1)
    if sd < 20 * step:  # a sharp posterior: integrate again around it
        width = 10.0 * max(sd, step)
        m, sd = _grid_moments(m - width, m + width, loc, scale, shares, noise, samples)
    return m, sd


_GRID = 4001


def _grid_moments(
    lo: float, hi: float, loc: float, scale: float, shares: list[float], noise: list[float],
    samples: int,
) -> tuple[float, float]:
    x = torch.linspace(lo, hi, _GRID, dtype=torch.float64)
    cap = smooth_cap(x.exp())
    logp = -0.5 * ((x - loc) / scale) ** 2
    for u, sigma in zip(shares, noise, strict=True):
        logp = logp - 0.5 * samples * ((u - cap) / sigma) ** 2
    w = torch.softmax(logp, 0)
    m = float((w * x).sum())
    return m, math.sqrt(max(float((w * (x - m) ** 2).sum()), 0.0))


def _metric_noise(noise: torch.Tensor, metrics: tuple[str, ...], metric: str) -> float:
    """The fitted per-sample noise of ``metric`` (a share of full scale): its own, or for a
    metric the model was fitted without, the mean over the model's metrics of its resource
    (of all its metrics if none reads it; the prior's median, 0.05, without any)."""
    if metric in metrics:
        return float(noise[metrics.index(metric)])
    same = [i for i, m in enumerate(metrics) if METRIC_RESOURCE.get(m) == METRIC_RESOURCE[metric]]
    if same:
        return float(noise[same].mean())
    return float(noise[: len(metrics)].mean()) if metrics else 0.05


def _sample_counts(
    model: InterferenceModel, reads: Mapping[str, object], samples: int | Mapping[str, int] | None
) -> dict[str, int]:
    """Each new job's sample count per reading (``samples`` of :func:`with_cold_jobs`)."""
    default = model.info.get("isolated_samples", 1)
    if not is_int(default, 1):
        raise InputError(f"this model's info['isolated_samples'] is not a count: {default!r}")
    if samples is None:
        return dict.fromkeys(reads, default)
    given = samples if isinstance(samples, Mapping) else dict.fromkeys(reads, samples)
    extra = sorted(set(given) - set(reads))
    if extra:
        raise InputError(
            f"samples given for job type(s) {', '.join(map(repr, extra))} that are not added"
        )
    out = {}
    for job in reads:
        n = given.get(job, default)
        if not is_int(n, 1):
            raise InputError(f"cold job {job!r}: samples must be a whole number >= 1, not {n!r}")
        out[job] = n
    return out


def _family_rows(
    post: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    fam: Mapping[str, tuple[str, int] | None],
    n_res: int,
    members: np.ndarray[Any, np.dtype[np.float64]] | None,
) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
    """Each new job's family effect, location and sd ``(3 R + 1,)`` each: its family's row of
    ``family_effect`` (``(F, 3 R + 1)`` in a model fitted with families); without one, the
    moment-matched mixture of the fitted families weighted by ``members`` (``(F,)`` fitted
    job types per family; module docstring, *Families*), or where ``members`` is None (no
    families, or a fit with jobs of no family) a zero location and no sd."""
    out: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
    for job, f in fam.items():
        if f is not None:
            loc, scale = post["family_effect"]
            out[job] = (loc[f[1]], scale[f[1]])
        elif members is not None:
            loc, scale = post["family_effect"]
            w = torch.as_tensor(members / members.sum(), dtype=loc.dtype).unsqueeze(-1)
            centre = (w * loc).sum(0)
            out[job] = (centre, (w * (scale**2 + (loc - centre) ** 2)).sum(0).sqrt())
        else:
            out[job] = (torch.zeros(3 * n_res + 1, dtype=torch.float64), None)
    return out


def _family_members(model: InterferenceModel) -> np.ndarray[Any, np.dtype[np.float64]] | None:
    """``(F,)`` the fitted job types of each family, in ``family_effect``'s order, when every
    fitted job has a family (then a new job without a known one belongs to some family, which
    one unknown); None otherwise (no families, or jobs of no family, whose zero effect is then
    what "no family" was fitted as)."""
    if model.families is None:
        return None
    added = model.info.get("cold_jobs", [])
    fitted = model.families[: len(model.jobs) - len(added)] if isinstance(added, list) else ()
    if not fitted or any(f is None for f in fitted):
        return None
    idx, n_fam = family_index(model.families)
    counts = np.bincount(idx[: len(fitted)], minlength=n_fam)[:n_fam].astype(np.float64)
    return counts if counts.sum() > 0 else None


def _carried(
    model: InterferenceModel, fam: Mapping[str, tuple[str, int] | None],
    members: np.ndarray[Any, np.dtype[np.float64]] | None,
) -> dict[str, float]:
    """Each new job's :math:`c_n`, the share of its intensity centre that the fit's warm jobs
    set (module docstring, *Families*): 1 for a family with a fitted member measured as a
    victim (``info["jobs_with_pairs"]``), 0 for one without; for the fitted families' mixture
    the weight of those with one; 0 without a family."""
    if model.families is None:
        return dict.fromkeys(fam, 0.0)
    recorded = model.info.get("jobs_with_pairs") or []
    if not isinstance(recorded, list | tuple) or not all(isinstance(j, str) for j in recorded):
        raise InputError("this model's info['jobs_with_pairs'] is not a list of job names")
    codes = family_codes(model.families)
    assert codes is not None  # a model with families
    per_job = warm_families(codes, np.isin(model.jobs, recorded))
    assert per_job is not None
    lit = np.zeros(family_index(model.families)[1])  # (F,): the family has a warm member
    lit[codes[codes >= 0]] = per_job[codes >= 0]
    out = {}
    for job, f in fam.items():
        if f is not None:
            out[job] = float(lit[f[1]])
        elif members is not None:
            out[job] = float((members * lit).sum() / members.sum())
        else:
            out[job] = 0.0
    return out


def _widened(base: torch.Tensor, sd: torch.Tensor | None, part: slice | int) -> torch.Tensor:
    """``base`` (a copy) with the family effect's sd ``sd[part]`` added in quadrature; ``base``
    itself without a family."""
    if sd is None:
        return base.clone()
    return torch.sqrt(base**2 + sd[part] ** 2)


def _per_resource(model: InterferenceModel, key: str) -> torch.Tensor:
    """``(K, R)`` per component and resource the fit's ``info[key]``: ``"demand_gap"``, the
    warm median gap, or ``"cold_demand_shift"``, the shift it gave its cold jobs
    (:mod:`interplace.model._coldscale`); NaN where none was recorded (models fitted before
    either, with ``cold_scale=False``, or without enough readings)."""
    gap = torch.full((model.components, len(model.resources)), math.nan, dtype=torch.float64)
    recorded = model.info.get(key) or {}
    if not isinstance(recorded, Mapping):
        raise InputError(f"this model's info[{key!r}] is not a resource -> values map")
    for name, values in recorded.items():
        if name not in model.resources:
            continue
        if (
            not isinstance(values, list | tuple) or len(values) != model.components
            or not all(is_real(v) for v in values)
        ):
            raise InputError(
                f"this model's info[{key!r}][{name!r}] is not {model.components} number(s)"
            )
        gap[:, model.resources.index(name)] = torch.tensor(values, dtype=torch.float64)
    return gap


def _readings(job: str, readings: Mapping[str, float]) -> Iterable[tuple[str, float]]:
    if not isinstance(readings, Mapping):
        raise InputError(f"cold job {job!r}: readings must map metric names to numbers, not "
                         f"{type(readings).__name__}")
    if not readings:
        raise InputError(f"cold job {job!r} has no counter readings")
    for metric, given in readings.items():
        value = plain_number(given)
        if not is_real(value, finite=False):
            raise InputError(f"cold job {job!r}: {metric} reading {value!r} is not a number")
        if not math.isfinite(value) or value < 0:
            raise InputError(f"cold job {job!r}: {metric} reading must be finite and >= 0")
        yield metric, float(value)


def _full_scale(model: InterferenceModel, metric: str) -> float:
    if metric in model.metrics:
        return float(model.full_scale[model.metrics.index(metric)])
    return float(METRIC_FULL_SCALE.get(metric, 1.0))
