r"""Cold start at placement time: a new job type known only by its isolated counters.

A scheduler often meets a job type the model was never fitted on, but can read its NVML
counters from a short isolated run (or a previous run of the same job). The model's cold-start
path gives such a job a posterior from its counters and the population: this module adds it
to a fitted model without refitting. For the new job :math:`n`, with mean isolated counter
reading :math:`u_{m}` (a share of full scale) of each metric :math:`m` on resource
:math:`r(m)` (:math:`u` below: the mean of :math:`u_m` over the metrics of one resource), the
mean-field posterior rows are

.. math::
    \log d_{nr} \sim \mathcal N\bigl(\log \max(u, 0.02) + \bar g_r,\ 0.05 / \max(u, 0.05)\bigr),
    \ \eta_{nr} \sim \mathcal N(-\bar g_r, \hat\varsigma_r^2)
    \ \text{(a counter read, below saturation)}, \qquad
    \log d_{nr} \sim \mathcal N\bigl(\hat\mu_r,\ (\hat\sigma_r^2 + s_{\mu r}^2)^{1/2}\bigr)
    \ \text{(no counter, or a saturated one)},

.. math::
    \epsilon_{nr} \sim \mathcal N(0, 1), \quad \eta_{nr} \sim \mathcal N(0, \hat\varsigma_r^2)
    \ \text{(otherwise)},
    \quad \beta_n \sim \mathcal N(0, \hat\omega^2), \quad
    u_{nl} \sim \mathcal N(0, \hat\lambda_l^2), \quad w_{nl} \sim \mathcal N(0, 1)

(the last two only for a model with a pair term of rank :math:`L`; :math:`\hat\lambda_l` its
components' spreads), with hats the posterior means of the population's latents
(:math:`\bar g_r` the fitted jobs' median of posterior log demand minus their log
reading, ``info["demand_gap"]``, which puts the new job's demand, hence its sensitivity, on
their scale while keeping its pressure :math:`d e^{\eta}` at the reading, as the fit does for
its own cold jobs (:mod:`interplace.model._coldscale`; 0 for a reading of 0 and for models
fitted without it), :math:`\hat\mu_r` the demand location, :math:`s_{\mu r}` its posterior sd,
:math:`\hat\sigma_r` the demand spread, :math:`\hat\varsigma_r` the intensity spread,
:math:`\hat\omega` the reference-error scale).
That is the model's own prior for a job given a counter reading with the fit's 5%-of-full-scale
noise, conditioned on the population but not feeding back into it (a refit would also learn
from the new job; with one isolated run it has nothing else to teach). A saturated counter
(:math:`u \ge 0.98`) says only that the demand is at least full scale, so it keeps the
population's prior. The sensitivity then follows the model's regression on demand, which is
what makes the cold prediction depend on the counters. A mixture posterior (a fit with
``restarts``) gives the new job these rows in each component, from that component's hats.

*Families.* A new job given a family the model was fitted with (``families``; a placed
job's ``family``) starts from that family's effect, as the fit's own jobs do: with
:math:`e_f` the posterior mean of the family's effect on each latent and :math:`v_f` its
posterior sd, the rows above become :math:`\log d_{nr} \sim \mathcal N(\hat\mu_r +
e^{d}_{fr}, (\hat\sigma_r^2 + s_{\mu r}^2 + v^{d\,2}_{fr})^{1/2})` (no usable counter; a
counter read still sets it), :math:`\epsilon_{nr} \sim \mathcal N(e^{\epsilon}_{fr}, (1 +
v^{\epsilon\,2}_{fr})^{1/2})`, :math:`\eta_{nr} \sim \mathcal N(e^{\eta}_{fr} - \bar g_r,
(\hat\varsigma_r^2 + v^{\eta\,2}_{fr})^{1/2})` and :math:`\beta_n \sim \mathcal
N(e^{\beta}_f, (\hat\omega^2 + v^{\beta\,2}_f)^{1/2})`, and it borrows its pair
corrections from the family's measured members (below).

*Pair corrections.* A fitted model's second stage (:mod:`interplace.model._cells`) corrects
each pair the structure misfits; a fitted job never measured co-located borrows its
corrections from its family's measured members, or else the measured jobs nearest to it
by isolated counters. A new job does the same here: with a family, from the family's
members; otherwise its row of prior mean effects is the mean of the rows of the
:data:`~interplace.model._cells.NEIGHBOURS` fitted jobs measured as victims nearest to its
readings (log shares of full scale, each resource standardised over those jobs), its column
likewise over the jobs measured as co-runners, and its pressure offsets are solved so that
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

import numpy as np
import torch

from interplace.errors import InputError
from interplace.model import METRIC_FULL_SCALE, METRIC_RESOURCE, InterferenceModel
from interplace.model._cells import extended_pairs
from interplace.model._coldscale import readings_array
from interplace.model._data import family_index
from interplace.model._fit import MEASURED_DRAWS

__all__ = ["COLD_SITES", "with_cold_jobs"]

COLD_SITES = ("log_demand", "sens_eps", "log_intensity", "iso_bias", "pair_u", "pair_w")
"""The per-job latent sites a cold job gets a row of; a model with any other per-job site
(a later model format) is refused rather than extended wrongly."""

_SATURATED = 0.98


def with_cold_jobs(
    model: InterferenceModel,
    counters: Mapping[str, Mapping[str, float]],
    families: Mapping[str, str] | None = None,
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
    n_jobs = len(model.jobs)
    lead = 1 if model.components > 1 else 0  # a mixture's sites lead with the component axis
    per_job = [
        name for name, (loc, _) in model.posterior.items()
        if loc.dim() >= 1 + lead and loc.shape[lead] == n_jobs and not name.startswith("family")
    ]
    unknown_sites = sorted(set(per_job) - set(COLD_SITES))
    if unknown_sites:
        raise InputError(
            f"cannot add cold jobs to this model: its per-job site(s) {', '.join(unknown_sites)} "
            "have no cold-start rule (refit the model with the new jobs' isolated runs)"
        )
    known = set(model.jobs)
    res_index = {r: i for i, r in enumerate(model.resources)}
    # Each new job's usable readings: (resource index, share of full scale below saturation).
    reads: dict[str, list[tuple[int, float]]] = {}
    logs: dict[str, dict[str, float]] = {}  # log readings, saturated ones too (for mates)
    for job, readings in counters.items():
        if not isinstance(job, str) or not job.strip() or job != job.strip():
            raise InputError(f"cold job names must be non-empty names, not {job!r}")
        if job in known:
            raise InputError(f"job type {job!r} is already in the model")
        shares: dict[int, list[float]] = {}
        for metric, value in _readings(job, readings):
            if metric not in METRIC_RESOURCE:
                raise InputError(
                    f"cold job {job!r}: unknown counter {metric!r} "
                    f"(known: {', '.join(sorted(METRIC_RESOURCE))})"
                )
            r = res_index.get(METRIC_RESOURCE[metric])
            if r is not None:
                shares.setdefault(r, []).append(value / _full_scale(model, metric))
        # Several metrics of one resource are averaged, as the fit's readings are
        # (interplace.model._coldscale.isolated_log_readings), then the saturation rule applies.
        means = {r: sum(u) / len(u) for r, u in shares.items()}
        reads[job] = [(r, u) for r, u in sorted(means.items()) if u < _SATURATED]
        logs[job] = {model.resources[r]: math.log(u) for r, u in sorted(means.items()) if u > 0}
    fam = _new_families(model, reads, families or {})
    gap = _demand_gap(model)
    if model.components == 1:
        post = _with_rows(model.posterior, reads, len(model.resources), gap[0], fam)
    else:
        parts = [
            _with_rows(
                {k: (loc[c], scale[c]) for k, (loc, scale) in model.posterior.items()},
                reads, len(model.resources), gap[c], fam,
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
    return _with_borrowed_effects(model, grown, logs)


def _with_borrowed_effects(
    model: InterferenceModel, grown: InterferenceModel, logs: Mapping[str, Mapping[str, float]]
) -> InterferenceModel:
    """``grown`` (``model`` with the new jobs of ``logs`` added) with the second stage's
    pairs extended to them: each borrows its effects from the five fitted jobs nearest by
    isolated readings (module docstring; :func:`~interplace.model._cells.extended_pairs`).

    ``logs``: each new job's log readings per resource name. A model without measured pairs,
    or fitted before ``info["isolated_readings"]`` was kept, is returned as ``grown`` (the new
    jobs keep the structure's prediction)."""
    recorded = model.info.get("isolated_readings")
    old = readings_array(recorded, model.jobs, model.resources)
    if model.measured is None or old is None:
        return grown
    seed = model.info.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"this model's info['seed'] is not an integer: {seed!r}")
    added = model.info.get("cold_jobs", [])
    if not isinstance(added, list) or not set(added) <= set(model.jobs):
        raise InputError("this model's info['cold_jobs'] does not name jobs of the model")
    n_fit = len(model.jobs) - len(added)
    new = readings_array(logs, list(logs), model.resources)
    assert new is not None
    family = None
    if grown.families is not None:
        idx, n_fam = family_index(grown.families)
        family = np.where(idx < n_fam, idx, -1)
    plain = dataclasses.replace(grown, measured=None)
    pairs, lent = extended_pairs(
        model.measured,
        _first_jobs(plain, n_fit).draws(MEASURED_DRAWS, seed),
        plain.draws(MEASURED_DRAWS, seed),
        family=family,
        readings=np.vstack([old, new]),
    )
    info = dict(grown.info)
    kept = dict(recorded) if isinstance(recorded, Mapping) else {}
    info["isolated_readings"] = {**kept, **{j: dict(r) for j, r in logs.items() if r}}
    info["cold_jobs_borrowing"] = [
        *info.get("cold_jobs_borrowing", []), *(grown.jobs[i] for i in lent)
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
    reads: Mapping[str, list[tuple[int, float]]],
    n_res: int,
    gap: torch.Tensor,
    fam: Mapping[str, tuple[str, int] | None],
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """One mean-field posterior with a row for each new job of ``reads`` (module docstring).

    ``gap``: ``(R,)`` the fitted jobs' median gap of log demand below log reading (0 where the
    fit recorded none); ``fam``: each new job's family (:func:`_new_families`)."""
    post = {k: (loc.clone(), scale.clone()) for k, (loc, scale) in posterior.items()}
    family_of = _family_rows(post, fam, n_res)

    def mean_of(site: str) -> torch.Tensor:
        return post[site][0]  # unconstrained location: log of a positive site

    mu_loc, mu_scale = post["demand_mu"]
    demand_sd = mean_of("demand_sd").exp()
    intensity_sd = mean_of("intensity_sd").exp()
    bias_scale = mean_of("iso_bias_scale").exp().reshape(())
    prior_scale = torch.sqrt(demand_sd**2 + mu_scale**2)
    rows: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {
        s: [] for s in COLD_SITES if s in post
    }
    pair_scale = mean_of("pair_scale").exp() if "pair_scale" in post else None
    for job, usable in reads.items():
        # The family's effect (none: zero) centres the job's prior, and its posterior
        # spread adds to the prior's.
        e_loc, e_sd = family_of[job]
        d_loc = mu_loc + e_loc[:n_res]
        d_scale = _widened(prior_scale, e_sd, slice(0, n_res))
        i_loc = e_loc[2 * n_res : 3 * n_res].clone()
        for r, u in usable:
            shift = float(gap[r]) if u > 0 else 0.0
            d_loc[r] = math.log(max(u, 0.02)) + shift
            d_scale[r] = 0.05 / max(u, 0.05)
            i_loc[r] -= shift
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


def _family_rows(
    post: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    fam: Mapping[str, tuple[str, int] | None],
    n_res: int,
) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
    """Each new job's family effect, location and sd ``(3 R + 1,)`` each: its family's row of
    ``family_effect`` (``(F, 3 R + 1)`` in a model fitted with families); without one, a
    zero location and no sd."""
    out: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
    for job, f in fam.items():
        if f is None:
            out[job] = (torch.zeros(3 * n_res + 1, dtype=torch.float64), None)
        else:
            loc, scale = post["family_effect"]
            out[job] = (loc[f[1]], scale[f[1]])
    return out


def _widened(base: torch.Tensor, sd: torch.Tensor | None, part: slice | int) -> torch.Tensor:
    """``base`` (a copy) with the family effect's sd ``sd[part]`` added in quadrature; ``base``
    itself without a family."""
    if sd is None:
        return base.clone()
    return torch.sqrt(base**2 + sd[part] ** 2)


def _demand_gap(model: InterferenceModel) -> torch.Tensor:
    """``(K, R)`` the fit's warm median gap per component and resource (``info["demand_gap"]``;
    0 where none was recorded, as in models fitted before it or with ``cold_scale=False``)."""
    gap = torch.zeros(model.components, len(model.resources), dtype=torch.float64)
    recorded = model.info.get("demand_gap") or {}
    if not isinstance(recorded, Mapping):
        raise InputError("this model's info['demand_gap'] is not a resource -> gaps map")
    for name, values in recorded.items():
        if name not in model.resources:
            continue
        if (
            not isinstance(values, list | tuple) or len(values) != model.components
            or not all(isinstance(v, int | float) and math.isfinite(v) for v in values)
        ):
            raise InputError(
                f"this model's info['demand_gap'][{name!r}] is not {model.components} number(s)"
            )
        gap[:, model.resources.index(name)] = torch.tensor(values, dtype=torch.float64)
    return gap


def _readings(job: str, readings: Mapping[str, float]) -> Iterable[tuple[str, float]]:
    if not readings:
        raise InputError(f"cold job {job!r} has no counter readings")
    for metric, value in readings.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(f"cold job {job!r}: {metric} reading {value!r} is not a number")
        if not math.isfinite(value) or value < 0:
            raise InputError(f"cold job {job!r}: {metric} reading must be finite and >= 0")
        yield metric, float(value)


def _full_scale(model: InterferenceModel, metric: str) -> float:
    if metric in model.metrics:
        return float(model.full_scale[model.metrics.index(metric)])
    return float(METRIC_FULL_SCALE.get(metric, 1.0))
