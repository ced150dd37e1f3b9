"""The fitted interference model: posterior predictions, denoised counters, save and load."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch

from interplace.datasets.runs import CoLocationData
from interplace.errors import (
    InputError,
    check_count,
    check_digest,
    check_output_parent,
    check_replaceable_dir,
    check_seed,
    is_int,
    is_real,
    open_saved_dir,
    plain_number,
    save_dir,
)
from interplace.model._cells import MeasuredPairs, seeded_gamma, spread_draws
from interplace.model._counterkernel import CounterKernel
from interplace.model._data import METRIC_RESOURCE, counters_from_samples, family_index
from interplace.model._net import (
    FAMILY_SITES,
    PAIR_SITES,
    SITES,
    SUPPORT,
    Hyper,
    cell_sum,
    constrained,
    counter_mean,
    log_speed,
    member_slots,
    pressure,
    reference_level,
    sensitivity,
    site_names,
)

__all__ = [
    "FORMAT_VERSION",
    "InterferenceModel",
    "Query",
    "SpeedPosterior",
]

FORMAT_VERSION = 11
r"""Version of the saved model directory layout (``model.json`` + ``posterior.safetensors``).

Version 2 added the intensity sites (``log_intensity``, ``intensity_sd``); version 1 models
are refused (refit them). Version 3 added job families (the ``families`` list, the family
sites and their hyper-parameters); version 2 models, which have none, load unchanged.
Version 4 added the low-rank pair term (the sites of :data:`~interplace.model._net.PAIR_SITES`
and their hyper-parameters); version 2 and 3 models, which have none, load as rank 0.
Version 5 added the measured pairs of the second stage (:mod:`interplace.model._cells`: the
``measured.*`` tensors and ``measured`` in ``model.json``); older models load without them.
Version 6 added mixture posteriors (``components`` in ``model.json``; a model of ``K > 1``
components stores each site's locations and scales with a leading axis of ``K``); older models
load as one component. Version 7 allows components of scale zero, point masses: the pooled
draws of an exact-inference fit (:class:`~interplace.model.Nuts`); version 6 models load
unchanged. Version 8 added each unmeasured pair's interval spread after the ceiling lift
(the ``measured.spread`` tensor, :class:`~interplace.model._cells.MeasuredPairs`), absent
where no ceiling was lifted; older models load without it, their intervals as saved.
Version 9 changed what the isolated-reference bias means, not how it is stored: it applies in
full only where a co-runner shares the job's GPU, and alone (or next to co-runners on other
GPUs) only its part above 0 (:func:`~interplace.model._net.reference_level`). Older models
load and answer that way too (a job alone at its record where its co-located level is below
it, where they answered :math:`e^{\beta_j}`); an older interplace refuses version 9, whose
jobs alone it would predict low. Since version 9, ``model.json`` also records the SHA-256 of
itself and the weights (:func:`~interplace.errors.files_digest`, key ``sha256``), which
:meth:`InterferenceModel.load` checks; a file without it (saved earlier) loads unchecked, and
an interplace that does not know the key ignores it, so the version stays 9.
Version 10 added the counter kernel a cold job's pairs are averaged with
(:mod:`interplace.model._counterkernel`: ``kernel`` and ``kernel_weight`` in ``measured`` in
``model.json``, the kernel's hyper-parameters and standardisation; the regression itself is
rebuilt from the measured pairs). Older models load without it and answer as saved (a job
added to them later from its counters borrows its mates' effects alone); an older
interplace refuses version 10, whose added jobs it would predict without the kernel.
Version 11 added the weight of the direct completion averaged into the unmeasured pairs of
measured jobs (``Hyper.direct_weight`` among the hyper-parameters;
:mod:`interplace.model._cells`, *A direct completion*); its effect is stored in the pairs'
offsets as before, and older models load with the weight 0, as they were fitted; an older
interplace refuses version 11, whose hyper-parameters it does not know."""

_READS = (2, 3, 4, 5, 6, 7, 8, 9, 10, 11)

_MEASURED = "measured"
_MEASURED_KEYS = ("job", "co", "log_speed", "n", "expected", "offset")
_MEASURED_OPTIONAL = ("spread",)
_META = "model.json"
_WEIGHTS = "posterior.safetensors"
MODEL_FILES = (_META, _WEIGHTS)
"""What :meth:`InterferenceModel.save` writes into its directory."""
_FORMAT_NAME = "interplace-interference-model"
_FloatArray = np.ndarray[Any, np.dtype[np.float64]]


@dataclass(frozen=True)
class Query:
    """One proposed co-location: ``job`` running next to ``co_runners``.

    ``shares`` says, per co-runner, which resources it shares with ``job``; ``None`` (the
    default) means every co-runner is on the same GPU and shares them all. Build it from a
    topology with :func:`interplace.model.shared_resources`. An empty ``co_runners`` is the job
    alone: about 1, above it where the job's co-located speeds say its recorded isolated
    throughput was low (:math:`e^{\\max(\\beta_j, 0)}`, :mod:`interplace.model`).

    >>> Query("a", ("b", "c")).co_runners
    ('b', 'c')
    >>> Query("a", ("b",), shares=(("pcie_h2d", "pcie_d2h"),)).shares
    (('pcie_h2d', 'pcie_d2h'),)
    >>> Query("", ())
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: query job must be a non-empty string, not ''
    """

    job: str
    co_runners: tuple[str, ...] = ()
    shares: tuple[tuple[str, ...], ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.job, str) or not self.job:
            raise InputError(f"query job must be a non-empty string, not {self.job!r}")
        if not isinstance(self.co_runners, tuple):
            raise InputError(f"co_runners must be a tuple of job names, not {self.co_runners!r}")
        for c in self.co_runners:
            if not isinstance(c, str) or not c:
                raise InputError(f"co-runner names must be non-empty strings, not {c!r}")
        if self.shares is not None and not isinstance(self.shares, tuple):
            raise InputError(f"shares must be a tuple (one per co-runner) of tuples of resource "
                             f"names, not {self.shares!r}")
        if self.shares is not None and len(self.shares) != len(self.co_runners):
            raise InputError(
                f"shares has {len(self.shares)} entries for {len(self.co_runners)} co-runners"
            )
        for entry in self.shares or ():
            if not isinstance(entry, tuple) or not all(isinstance(r, str) for r in entry):
                raise InputError(
                    f"each shares entry must be a tuple of resource names, not {entry!r}"
                )


@dataclass(frozen=True, eq=False)
class SpeedPosterior:
    """Posterior predictive of the speed of ``Q`` queries from ``S`` posterior draws.

    ``speed``: ``(S, Q)`` draws of the true speed (co-located throughput over the job's
    recorded isolated throughput, so including the posterior of that record's error
    :math:`\beta_j`; free of measurement noise); ``measured``: ``(S, Q)`` draws of a new
    measurement of it (true speed times the fitted measurement noise). :attr:`mean` is the
    posterior mean of the true speed; the quantiles are of a new measurement, so a 90%
    interval ``[q05, q95]`` should cover 90% of measured speeds. Both must be ``(S, Q)`` tensors
    (numpy arrays are taken as such) of finite speeds >= 0 (a custom speed source's answer is
    checked here, before placement reads it).

    >>> SpeedPosterior(torch.ones(4, 2), torch.ones(4, 3))
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: SpeedPosterior: speed (4, 2) and measured (4, 3) differ in shape
    """

    speed: torch.Tensor
    measured: torch.Tensor

    def __post_init__(self) -> None:
        for name in ("speed", "measured"):
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                value = torch.from_numpy(value)
                object.__setattr__(self, name, value)
            if not isinstance(value, torch.Tensor):
                raise InputError(f"SpeedPosterior: {name} must be a tensor, not a "
                                 f"{type(value).__name__}")
            if value.dim() != 2 or not value.is_floating_point():
                raise InputError(f"SpeedPosterior: {name} must be an (S, Q) tensor of floats, "
                                 f"not {value.dtype} of shape {tuple(value.shape)}")
            if not bool((value >= 0).all()):  # NaN fails >= 0 too
                raise InputError(f"SpeedPosterior: {name} holds a speed that is negative or NaN")
            if bool(torch.isinf(value).any()):
                raise InputError(f"SpeedPosterior: {name} holds an infinite speed")
        if self.speed.shape != self.measured.shape:
            raise InputError(f"SpeedPosterior: speed {tuple(self.speed.shape)} and measured "
                             f"{tuple(self.measured.shape)} differ in shape")

    @property
    def mean(self) -> _FloatArray:
        """Posterior mean of the true speed, shape ``(Q,)``."""
        return self.speed.mean(0).numpy()

    @property
    def sd(self) -> _FloatArray:
        """Posterior standard deviation of the true speed, shape ``(Q,)``."""
        if self.speed.shape[-1] == 0:  # no queries: torch warns of zero degrees of freedom
            return np.zeros(0)
        return self.speed.std(0).numpy()

    def quantile(self, q: float) -> _FloatArray:
        """The ``q`` quantile of a new measured speed, shape ``(Q,)``."""
        level = plain_number(q)  # a numpy float32 is a number too
        if not (is_real(level) and 0 <= level <= 1):
            raise InputError(f"quantile must be in [0, 1], not {level!r}")
        q = level
        if self.measured.shape[-1] == 0:  # no queries (torch refuses an empty quantile)
            return np.zeros(0)
        return torch.quantile(self.measured, float(q), dim=0).numpy()

    @property
    def q05(self) -> _FloatArray:
        """5% quantile of a new measured speed, shape ``(Q,)``."""
        return self.quantile(0.05)

    @property
    def q95(self) -> _FloatArray:
        """95% quantile of a new measured speed, shape ``(Q,)``."""
        return self.quantile(0.95)


# By default a batch of InterferenceModel.posterior_speed holds at most this many queries and
# draw-query pairs.
_BATCH_QUERIES = 1024
_BATCH_DRAW_QUERIES = 2**17


def _check_num_samples(num_samples: object) -> None:
    check_count(num_samples, "num_samples", low=2)


class _Prepared(NamedTuple):
    """What the queries of one ``(num_samples, seed)`` share (``InterferenceModel._prepare``):
    the draws ``{site: (S, *shape)}``, pressure and sensitivity ``(S, J, R)``, the noise
    ``(S, 1)``, the measured pairs' offsets ``(J, J)`` and the unmeasured pairs' spread
    ``(S, J, J)`` (both None without a second stage)."""

    draws: dict[str, torch.Tensor]
    pressure: torch.Tensor
    sensitivity: torch.Tensor
    noise: torch.Tensor
    offset: torch.Tensor | None
    spread: torch.Tensor | None


@dataclass(frozen=True, eq=False)
class InterferenceModel:
    r"""A fitted model: its jobs, resources and counter metrics, and the variational posterior.

    ``posterior`` maps each latent site of :data:`interplace.model._net.SITES` (and, for a
    model fitted with job families, :data:`~interplace.model._net.FAMILY_SITES`; with a pair
    term, ``rank > 0`` as by default, :data:`~interplace.model._net.PAIR_SITES`) to the
    ``(loc, scale)`` of its normal guide in unconstrained space (positive sites are the exp of
    it). ``info`` records how the model was fitted. ``families`` is each job's family (None:
    none, the plain prior), or None for a model fitted without families. Predictions draw from
    this posterior with a private RNG seeded per call, so they are reproducible and
    thread-free of global state.

    ``components`` :math:`K` > 1 makes the posterior an equal-weight mixture of :math:`K`
    mean-field normals (the fits of :func:`~interplace.model.fit` ``restarts``): every site's
    location and scale then has a leading axis of :math:`K`, ``(K, *shape)``, and draw
    :math:`s` comes from component :math:`s \bmod K`.
    """

    jobs: tuple[str, ...]
    resources: tuple[str, ...]
    metrics: tuple[str, ...]
    full_scale: tuple[float, ...]
    hyper: Hyper
    posterior: Mapping[str, tuple[torch.Tensor, torch.Tensor]]
    info: Mapping[str, Any] = field(default_factory=dict)
    families: tuple[str | None, ...] | None = None
    measured: MeasuredPairs | None = None
    components: int = 1
    _prepared_cache: dict[tuple[int, int], _Prepared] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __getstate__(self) -> dict[str, Any]:
        # Pickled (to worker processes) without the kept draws: they are redrawn on demand,
        # and with many jobs they outweigh the posterior (an S x J x J spread per entry).
        state = dict(self.__dict__)
        state["_prepared_cache"] = {}
        return state

    def __post_init__(self) -> None:
        for name in ("jobs", "resources", "metrics"):
            value = getattr(self, name)
            if not (isinstance(value, tuple) and all(isinstance(x, str) and x for x in value)):
                raise InputError(f"a model's {name} must be a tuple of names, not {value!r}")
        if not self.jobs or len(set(self.jobs)) != len(self.jobs):
            raise InputError("a model needs distinct job names")
        if not self.resources or len(set(self.resources)) != len(self.resources):
            raise InputError("a model needs at least one resource, each named once")
        if not isinstance(self.hyper, Hyper):
            raise InputError(f"a model's hyper must be a Hyper, not {self.hyper!r}")
        if not (isinstance(self.full_scale, tuple)
                and all(is_real(v) and v > 0 for v in self.full_scale)):
            raise InputError(
                f"a model's full_scale must be a tuple of numbers > 0, not {self.full_scale!r}"
            )
        k = check_count(self.components, "components")
        lead = (k,) if k > 1 else ()
        if len(self.metrics) != len(self.full_scale):
            raise InputError("metrics and full_scale differ in length")
        n_jobs, n_res, n_met = len(self.jobs), len(self.resources), max(len(self.metrics), 1)
        shapes = {
            "demand_mu": (n_res,),
            "demand_sd": (n_res,),
            "log_demand": (n_jobs, n_res),
            "sens_eps": (n_jobs, n_res),
            "sens_loc": (n_res,),
            "sens_slope": (n_res,),
            "sens_scale": (n_res,),
            "threshold": (n_res,),
            "speed_noise": (),
            "metric_noise": (n_met,),
            "iso_bias": (n_jobs,),
            "iso_bias_scale": (),
            "log_intensity": (n_jobs, n_res),
            "intensity_sd": (n_res,),
        }
        expected = set(SITES)
        if self.families is not None:
            if not isinstance(self.families, tuple) or len(self.families) != n_jobs:
                raise InputError(f"families must be a tuple of one entry for each of {n_jobs} jobs")
            for j, f in enumerate(self.families):
                if f is not None and (not isinstance(f, str) or not f or f != f.strip()):
                    raise InputError(
                        f"family of job {self.jobs[j]!r} must be None or a non-empty name "
                        f"without surrounding spaces, not {f!r}"
                    )
            n_fam = family_index(self.families)[1]
            if n_fam == 0:
                raise InputError("families name no family (use families=None)")
            shapes["family_sd"] = (3 * n_res + 1,)
            shapes["family_effect"] = (n_fam, 3 * n_res + 1)
            expected |= set(FAMILY_SITES)
        if "pair_u" in self.posterior:
            rank = int(self.posterior["pair_u"][0].shape[-1])
            if rank < 1:
                raise InputError("posterior site pair_u has rank 0 (leave the pair sites out)")
            shapes["pair_scale"] = (rank,)
            shapes["pair_u"] = (n_jobs, rank)
            shapes["pair_w"] = (n_jobs, rank)
            expected |= set(PAIR_SITES)
        if set(self.posterior) != expected:
            raise InputError(
                f"posterior has sites {sorted(self.posterior)}, expected {sorted(expected)}"
            )
        for name, shape in shapes.items():
            loc, scale = self.posterior[name]
            shape = (*lead, *shape)
            if tuple(loc.shape) != shape or tuple(scale.shape) != shape:
                raise InputError(
                    f"posterior site {name} has shape {tuple(loc.shape)}/{tuple(scale.shape)}, "
                    f"expected {shape}"
                )
            if not (torch.isfinite(loc).all() and torch.isfinite(scale).all()):
                raise InputError(f"posterior site {name} holds non-finite values")
            if not bool((scale >= 0).all()):
                raise InputError(f"posterior site {name} has a negative scale")
        if self.measured is not None:
            if not isinstance(self.measured, MeasuredPairs):
                raise InputError("measured must be MeasuredPairs or None")
            self.measured.check_jobs(n_jobs)

    # ------------------------------------------------------------------ draws
    def draws(self, num_samples: int = 500, seed: int = 0) -> dict[str, torch.Tensor]:
        """``num_samples`` joint draws of every latent (constrained), each ``(S, *shape)``.

        >>> from interplace.datasets import synthetic
        >>> from interplace.model import fit
        >>> m = fit(synthetic(3, seed=0, samples_per_run=2), steps=200, min_steps=200, restarts=1)
        >>> m.draws(10)["log_demand"].shape
        torch.Size([10, 3, 5])
        """
        _check_num_samples(num_samples)
        gen = torch.Generator().manual_seed(check_seed(seed))
        out = {}
        # Draw s from mixture component s mod K (stratified: each component's share is exact
        # when num_samples is a multiple of K, within one draw otherwise).
        comp = torch.arange(num_samples) % self.components if self.components > 1 else None
        for name in self._site_names():  # fixed order: the same seed gives the same draws
            loc, scale = self.posterior[name]
            if comp is not None:
                loc, scale = loc[comp], scale[comp]
            else:
                loc, scale = loc.expand(num_samples, *loc.shape), scale
            eps = torch.randn(loc.shape, generator=gen, dtype=torch.float64)
            z = loc + scale * eps
            out[name] = constrained(name, z)
        return out

    def speed_noise(self) -> float:
        """The structure's speed noise scale: the posterior median of ``speed_noise`` (the mean
        of the components' medians for a mixture)."""
        return float(self.posterior["speed_noise"][0].exp().mean())

    def family_map(self) -> dict[str, str | None]:
        """Each job's family (None: none, or a model fitted without families).

        >>> from interplace.datasets import synthetic
        >>> from interplace.model import fit
        >>> m = fit(synthetic(3, seed=0, samples_per_run=2), steps=50, min_steps=50, restarts=1,
        ...         family={"job0": "A", "job1": "A"})
        >>> m.family_map()
        {'job0': 'A', 'job1': 'A', 'job2': None}
        """
        families = self.families or (None,) * len(self.jobs)
        return dict(zip(self.jobs, families, strict=True))

    @property
    def rank(self) -> int:
        """Rank of the model's low-rank pair term (0: the mechanism alone)."""
        return int(self.posterior["pair_u"][0].shape[-1]) if "pair_u" in self.posterior else 0

    def _site_names(self) -> tuple[str, ...]:
        """The model's latent sites in their fixed order (family, then pair sites last)."""
        return site_names(self.families is not None, self.rank > 0)

    def demand(self, num_samples: int = 500, seed: int = 0) -> pd.DataFrame:
        """Posterior median demand of each job (rows) on each resource (columns)."""
        d = self.draws(num_samples, seed)["log_demand"].exp().median(0).values
        return pd.DataFrame(d.numpy(), index=list(self.jobs), columns=list(self.resources))

    def sensitivity(self, num_samples: int = 500, seed: int = 0) -> pd.DataFrame:
        """Posterior mean sensitivity of each job (rows) to each resource (columns)."""
        d = self.draws(num_samples, seed)
        s = sensitivity(
            d["log_demand"], d["sens_eps"], d["sens_loc"], d["sens_slope"], d["sens_scale"]
        )
        return pd.DataFrame(s.mean(0).numpy(), index=list(self.jobs), columns=list(self.resources))

    # ------------------------------------------------------------- prediction
    def _encode(self, queries: Sequence[Query]) -> tuple[torch.Tensor, ...]:
        index = {j: i for i, j in enumerate(self.jobs)}
        res_index = {r: i for i, r in enumerate(self.resources)}
        for i, q in enumerate(queries):
            if not isinstance(q, Query):
                raise InputError(f"query {i} is a {type(q).__name__}, not a Query")
        width = max((len(q.co_runners) for q in queries), default=0)
        width = max(width, 1)
        n, r = len(queries), len(self.resources)
        job = np.empty(n, dtype=np.int64)
        co = np.full((n, width), len(self.jobs), dtype=np.int64)
        share = np.zeros((n, width, r))
        for i, q in enumerate(queries):
            for name in (q.job, *q.co_runners):
                if name not in index:
                    raise InputError(
                        f"unknown job {name!r}: the model knows only the jobs it was fitted on "
                        "(give a new job an isolated run with counters in the fit data)"
                    )
            job[i] = index[q.job]
            for k, c in enumerate(q.co_runners):
                co[i, k] = index[c]
                if q.shares is None:
                    share[i, k] = 1.0
                else:
                    for name in q.shares[k]:
                        if name not in res_index:
                            raise InputError(
                                f"query {i}: unknown resource {name!r} "
                                f"(the model's: {', '.join(self.resources)})"
                            )
                        share[i, k, res_index[name]] = 1.0
        return torch.as_tensor(job), torch.as_tensor(co), torch.as_tensor(share)

    def posterior_speed(
        self,
        queries: Iterable[Query],
        *,
        num_samples: int = 500,
        seed: int = 0,
        batch_size: int | None = None,
    ) -> SpeedPosterior:
        """Posterior predictive speed of many proposed co-locations at once.

        One set of ``num_samples`` posterior draws serves every query, so predictions for
        different queries are jointly consistent (comparisons between candidates are not
        blurred by independent Monte Carlo noise). Queries are evaluated in batches of
        ``batch_size``; the work is one vectorised tensor expression per batch (the batch
        size can move an answer's last bit, no more). By default a batch is a power of two of
        at most 1,024 queries and :math:`2^{17}` draw-query pairs (1,024 queries at 128
        draws, 256 at 500): a larger batch's intermediate ``(S, batch, K, R)`` tensors cost
        more to allocate and stream than the work they hold (at 500 draws, batches of 1,024
        queries took 1.6-1.9 times as long a query as batches of 256).

        >>> from interplace.datasets import synthetic
        >>> from interplace.model import fit
        >>> m = fit(synthetic(3, seed=0, samples_per_run=2), steps=200, min_steps=200, restarts=1)
        >>> p = m.posterior_speed([Query("job0", ("job1",)), Query("job0", ())])
        >>> p.speed.shape, round(float(p.mean[1]), 1)  # alone: 1 up to the reference's error
        (torch.Size([500, 2]), 1.0)
        """
        if isinstance(queries, Query) or not isinstance(queries, Iterable):
            raise InputError(f"queries must be a list of Query, not {type(queries).__name__}")
        qs = list(queries)
        if batch_size is not None and not is_int(batch_size, 1):  # refused before any drawing
            raise InputError(f"batch_size must be a positive integer, not {batch_size!r}")
        d, press, sens, noise, offset, spread = self._prepare(num_samples, seed)
        if batch_size is None:
            fit_in = max(1, _BATCH_DRAW_QUERIES // num_samples)
            batch_size = min(_BATCH_QUERIES, 1 << (fit_in.bit_length() - 1))
        # The answer is written batch by batch into its two (S, Q) tensors: a call holds them
        # (16 bytes a draw-query pair) and one batch's intermediates, not every batch's log
        # speeds, noise and their sums beside them (four times as much before).
        speed = torch.empty(num_samples, len(qs), dtype=torch.float64)
        measured = torch.empty(num_samples, len(qs), dtype=torch.float64)
        for lo in range(0, len(qs), batch_size):
            part = qs[lo : lo + batch_size]
            job, co, share = self._encode(part)
            share = share.to(torch.float64)
            ls = log_speed(
                press, sens, d["threshold"], job, co, share,
                d.get("pair_u"), d.get("pair_w"), offset,
            )
            # Speeds are relative to the job's recorded isolated throughput: beta_j where a
            # co-runner shares the GPU, only its part above 0 elsewhere (reference_level).
            log_v = ls + reference_level(d["iso_bias"], job, share)
            new = noise if spread is None else noise + cell_sum(spread, job, co, share)
            hi = lo + len(part)
            torch.exp(log_v, out=speed[:, lo:hi])
            torch.exp(log_v + new, out=measured[:, lo:hi])
        return SpeedPosterior(speed, measured)

    def _prepare(self, num_samples: int, seed: int) -> _Prepared:
        """What every query of one ``(num_samples, seed)`` shares: the posterior draws, each
        job's pressure and sensitivity per draw, the noise draws and the second stage's
        offsets and unmeasured pairs' spread (:func:`~._cells.spread_draws`). The last few
        are kept: a scheduler asks again and again with the same ones, and drawing them
        (a Gaussian per site, an ``S x J x J`` spread) costs more than a small call."""
        _check_num_samples(num_samples)  # before the lookup: 64.0 must not hit 64's entry
        key = (num_samples, check_seed(seed))
        cached = self._prepared_cache.get(key)
        if cached is not None:
            return cached
        d = self.draws(num_samples, seed)
        press = pressure(d["log_demand"], d["log_intensity"])
        sens = sensitivity(
            d["log_demand"], d["sens_eps"], d["sens_loc"], d["sens_slope"], d["sens_scale"]
        )
        gen = torch.Generator().manual_seed(int(seed) + 1)
        df = torch.tensor(self.hyper.speed_df, dtype=torch.float64)
        # Student-t measurement noise on the log scale, one draw per posterior draw shared by
        # every query: each query's predictive is exact, and equal queries get equal answers.
        z = torch.randn((num_samples, 1), generator=gen, dtype=torch.float64)
        g = seeded_gamma(df / 2, torch.Size((num_samples, 1)), gen) / (df / 2)
        offset, spread = None, None
        if self.measured is None:
            noise = d["speed_noise"].unsqueeze(-1) * z / torch.sqrt(g)
        else:
            # The second stage (interplace.model._cells): measured pairs' pressure offsets,
            # the measurement's own noise, and an unmeasured pair's unknown effect.
            noise = self.measured.noise * z / torch.sqrt(g)
            offset = self.measured.padded("offset", len(self.jobs))
            spread = spread_draws(
                self.measured, num_samples, len(self.jobs), self.hyper.speed_df,
                torch.Generator().manual_seed(int(seed) + 2),
            )
        prepared = _Prepared(d, press, sens, noise, offset, spread)
        cache = self._prepared_cache
        # Threads may share a model: at worst two compute the same entry, or evict one twice.
        while len(cache) >= 4:
            try:
                cache.pop(next(iter(cache)), None)
            except (RuntimeError, StopIteration):  # another thread changed it meanwhile
                break
        cache[key] = prepared
        return prepared

    def predict(
        self,
        job: str,
        co_runners: Sequence[str],
        *,
        shares: Sequence[Sequence[str]] | None = None,
        num_samples: int = 500,
        seed: int = 0,
    ) -> dict[str, float]:
        """Speed of ``job`` next to ``co_runners``: ``mean``, ``sd``, ``q05``, ``q95``.

        >>> from interplace.datasets import synthetic
        >>> from interplace.model import fit
        >>> m = fit(synthetic(3, seed=0, samples_per_run=2), steps=200, min_steps=200, restarts=1)
        >>> sorted(m.predict("job0", ["job1", "job2"]))
        ['mean', 'q05', 'q95', 'sd']
        """
        for name, value in (("co_runners", co_runners), ("shares", shares)):
            if isinstance(value, str):  # tuple("job1") would be its letters
                raise InputError(f"{name} must be a sequence of names, not the string {value!r}")
        if not isinstance(co_runners, Iterable):
            raise InputError(f"co_runners must be a sequence of names, not {co_runners!r}")
        if shares is not None and (not isinstance(shares, Iterable) or any(
            isinstance(s, str | bytes) or not isinstance(s, Iterable) for s in shares
        )):
            raise InputError("shares must be a sequence (one per co-runner) of sequences of "
                             f"resource names, not {shares!r}")
        q = Query(
            job,
            tuple(co_runners),
            None if shares is None else tuple(tuple(s) for s in shares),
        )
        p = self.posterior_speed([q], num_samples=num_samples, seed=seed)
        return {
            "mean": float(p.mean[0]),
            "sd": float(p.sd[0]),
            "q05": float(p.q05[0]),
            "q95": float(p.q95[0]),
        }

    def queries_from_frame(self, pairs: pd.DataFrame) -> list[Query]:
        """One :class:`Query` per row of a table with ``job`` and ``co_runner`` columns.

        ``co_runner`` holds one job or several joined by ``+`` (a job whose own name holds a
        ``+`` is read as that job; names are matched as written, else without the spaces
        around them). A missing column, an empty
        cell or name, or a job the model does not know raises :class:`InputError` naming the
        row (rows count from 0).

        >>> from interplace.datasets import synthetic
        >>> from interplace.model import fit
        >>> m = fit(synthetic(3, seed=0, samples_per_run=2), steps=200, min_steps=200, restarts=1)
        >>> m.queries_from_frame(pd.DataFrame({"job": ["job0"], "co_runner": ["job1+job2"]}))
        [Query(job='job0', co_runners=('job1', 'job2'), shares=None)]
        >>> m.queries_from_frame(pd.DataFrame({"job": ["job0"], "co_runner": ["job7"]}))
        Traceback (most recent call last):
        ...
        interplace.errors.InputError: pairs row 0: unknown job 'job7' (the model was fitted on 3 jobs: job0, job1, job2; a new job needs an isolated run, with counters, in the fit data)
        """  # noqa: E501
        if not isinstance(pairs, pd.DataFrame):
            raise InputError(f"pairs must be a pandas DataFrame, not {type(pairs).__name__}")
        missing = [c for c in ("job", "co_runner") if c not in pairs.columns]
        if missing:
            raise InputError(
                f"pairs table lacks column(s) {', '.join(missing)} (needs job, co_runner)"
            )
        known = set(self.jobs)
        queries = []
        for pos, (job, co) in enumerate(
            zip(pairs["job"].tolist(), pairs["co_runner"].tolist(), strict=True)
        ):
            for column, value in (("job", job), ("co_runner", co)):
                absent = value is None or value is pd.NA or (
                    isinstance(value, float) and math.isnan(value))
                if not isinstance(value, str) and not absent:
                    raise InputError(f"pairs row {pos}: {column} {value!r} is not a job name "
                                     "(text)")
                if absent or not value.strip():
                    raise InputError(f"pairs row {pos} has no {column} (got {value!r})")
            # A name as written if the model has it, else without the spaces around it.
            job = job if job in known else job.strip()
            whole = co if co in known else co.strip()
            parts = tuple(p.strip() for p in co.split("+"))
            if whole in known:  # a job whose own name holds a "+" is that job
                if len(parts) > 1 and all(p in known for p in parts):
                    raise InputError(
                        f"pairs row {pos}: co_runner {co!r} names a job and also the jobs "
                        f"{', '.join(map(repr, parts))}; query it through the Python API "
                        "(Query), which takes co-runners as a list"
                    )
                parts = (whole,)
            if any(not p for p in parts):
                raise InputError(f"pairs row {pos}: co_runner {co!r} has an empty name")
            for name in (job, *parts):
                if name not in known:
                    shown = ", ".join(self.jobs[:8]) + (", ..." if len(self.jobs) > 8 else "")
                    raise InputError(
                        f"pairs row {pos}: unknown job {name!r} (the model was fitted on "
                        f"{len(self.jobs)} jobs: {shown}; a new job needs an isolated run, "
                        "with counters, in the fit data)"
                    )
            queries.append(Query(job, parts))
        return queries

    def predict_frame(
        self, pairs: pd.DataFrame, *, num_samples: int = 500, seed: int = 0
    ) -> pd.DataFrame:
        """Predictions for a table with ``job`` and ``co_runner`` columns, in row order.

        Rows are read by :meth:`queries_from_frame`. The result has the columns ``job``,
        ``co_runner``, ``speed_mean``, ``speed_q05``, ``speed_q95``.
        """
        p = self.posterior_speed(
            self.queries_from_frame(pairs), num_samples=num_samples, seed=seed
        )
        return pd.DataFrame(
            {
                "job": pairs["job"].astype(str).tolist(),
                "co_runner": pairs["co_runner"].astype(str).tolist(),
                "speed_mean": p.mean,
                "speed_q05": p.q05,
                "speed_q95": p.q95,
            }
        )

    # --------------------------------------------------------------- counters
    def utilisation(
        self,
        data: CoLocationData,
        *,
        num_samples: int = 500,
        seed: int = 0,
    ) -> pd.DataFrame:
        """Posterior of each run's true utilisation behind its counters (denoised counters).

        One row per (``run_id``, ``device``, ``metric``) group of ``data.samples`` with a metric
        the model knows: ``n`` samples, ``observed_mean`` (their plain mean), and the posterior
        ``mean``, ``q05`` and ``q95`` of the true value in the metric's unit. For the data the
        model was fitted on this is the posterior given every counter and speed; for new runs
        of known jobs it is the model's prediction of their counters.
        """
        counters = counters_from_samples(
            data, self.jobs, dict(zip(self.metrics, self.full_scale, strict=True))
        )
        columns = ["run_id", "device", "metric", "n", "observed_mean", "mean", "q05", "q95"]
        keep = [i for i, m in enumerate(counters.metrics) if m in self.metrics]
        if not len(counters) or not keep:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
        res_index = {r: i for i, r in enumerate(self.resources)}
        metric_names = [counters.metrics[int(m)] for m in counters.metric.tolist()]
        rows = np.asarray([m in self.metrics for m in metric_names])
        res = torch.as_tensor(
            [res_index[METRIC_RESOURCE[m]] for m, r in zip(metric_names, rows, strict=True) if r],
            dtype=torch.int64,
        )
        members = torch.as_tensor(counters.members[rows], dtype=torch.float64)
        d = self.draws(num_samples, seed)
        mu = counter_mean(d["log_demand"].exp(), *member_slots(members), res)  # (S, G)
        fs = torch.as_tensor(
            [
                self.full_scale[self.metrics.index(m)]
                for m, r in zip(metric_names, rows, strict=True)
                if r
            ],
            dtype=torch.float64,
        )
        value = mu * fs
        keys = [k for k, r in zip(counters.keys, rows.tolist(), strict=True) if r]
        return pd.DataFrame(
            {
                "run_id": [k[0] for k in keys],
                "device": [k[1] for k in keys],
                "metric": [k[2] for k in keys],
                "n": counters.n[rows].astype(int),
                "observed_mean": counters.mean[rows] * fs.numpy(),
                "mean": value.mean(0).numpy(),
                "q05": torch.quantile(value, 0.05, dim=0).numpy(),
                "q95": torch.quantile(value, 0.95, dim=0).numpy(),
            }
        )

    # ------------------------------------------------------------------- I/O
    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``model.json`` and ``posterior.safetensors`` into ``directory`` (created).

        The directory is built beside the target and renamed into place, so a failure leaves
        no half-written model; ``model.json`` records the digest of both files
        (:func:`~interplace.errors.files_digest`), which :meth:`load` checks. An existing
        model directory (or an empty one) is replaced; a directory holding anything else,
        any other existing path, and the current directory are refused
        (:func:`~interplace.errors.check_replaceable_dir`).
        """
        from safetensors.torch import save_file

        target = check_replaceable_dir(directory, MODEL_FILES, "an interplace model")
        parent = target.parent
        check_output_parent(parent)
        meta = {
            "format": _FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "jobs": list(self.jobs),
            "resources": list(self.resources),
            "metrics": list(self.metrics),
            "full_scale": list(self.full_scale),
            "hyper": dict(self.hyper.__dict__),
            "sites": {n: SUPPORT[n] for n in self._site_names()},
            "families": None if self.families is None else list(self.families),
            "info": _jsonable(dict(self.info)),
            "components": self.components,
            "measured": None if self.measured is None else _measured_meta(self.measured),
        }
        tensors = {}
        for name, (loc, scale) in self.posterior.items():
            tensors[f"{name}.loc"] = loc.detach().contiguous()
            tensors[f"{name}.scale"] = scale.detach().contiguous()
        if self.measured is not None:
            m = self.measured
            for key, arr in (("job", m.job), ("co", m.co), ("log_speed", m.log_speed),
                             ("n", m.n), ("expected", m.expected), ("offset", m.offset),
                             ("spread", m.spread)):
                if arr is not None:
                    tensors[f"{_MEASURED}.{key}"] = torch.as_tensor(np.ascontiguousarray(arr))
        def write(folder: Path) -> list[Path]:
            save_file(tensors, str(folder / _WEIGHTS), metadata={"format": _FORMAT_NAME})
            return [folder / _WEIGHTS]

        save_dir(target, meta, _META, write)
        return target

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> InterferenceModel:
        """Read a model directory written by :meth:`save`; never unpickles anything.

        A missing, foreign, tampered or newer-format directory raises :class:`InputError`
        naming the problem; so do files that do not match the digest ``model.json`` records
        (a damaged weight, an edited number), checked after everything else.
        """
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        meta_path, meta, weights = open_saved_dir(
            directory, _META, _WEIGHTS, format_name=_FORMAT_NAME, what="model",
            made_by="fit writes a directory",
        )
        d = meta_path.parent
        version = meta.get("format_version")
        if version not in _READS:
            raise InputError(
                f"{meta_path}: model format version {version!r}; this interplace reads "
                f"versions {', '.join(str(v) for v in _READS)}"
            )
        try:
            tensors = load_file(str(weights))
        except (SafetensorError, OSError, ValueError) as exc:
            raise InputError(f"{weights}: not a readable safetensors file ({exc})") from None
        try:
            raw_hyper = dict(meta["hyper"])
            if version < 11:  # fitted before the direct completion: without it
                raw_hyper.setdefault("direct_weight", 0.0)
            hyper = Hyper(**{k: float(v) for k, v in raw_hyper.items()})
            raw_families = meta.get("families")
            families = None
            if raw_families is not None:
                if version == 2:
                    raise InputError(f"{meta_path}: a version 2 model has no families")
                if not isinstance(raw_families, list):
                    raise InputError(f"{meta_path}: families must be a list")
                for i, f in enumerate(raw_families):
                    if f is not None and not isinstance(f, str):
                        raise InputError(
                            f"{meta_path}: families[{i}] must be a name or null, not {f!r}"
                        )
                families = tuple(raw_families)
            has_pair = any(k.split(".")[0] in PAIR_SITES for k in tensors)
            if has_pair and version < 4:
                raise InputError(f"{meta_path}: a version {version} model has no pair term")
            names = site_names(families is not None, has_pair)
            posterior = {}
            for name in names:
                posterior[name] = (
                    tensors[f"{name}.loc"].to(torch.float64),
                    tensors[f"{name}.scale"].to(torch.float64),
                )
            try:
                measured = _load_measured(meta.get("measured"), tensors, version, meta_path)
            except InputError as exc:  # MeasuredPairs' own checks name no file: say which
                if str(exc).startswith(str(meta_path)):
                    raise
                raise InputError(f"{d}: {exc}") from None
            extra = sorted(
                set(tensors)
                - {f"{n}.{p}" for n in names for p in ("loc", "scale")}
                - {f"{_MEASURED}.{k}" for k in _MEASURED_KEYS + _MEASURED_OPTIONAL}
            )
            if extra:
                raise InputError(f"{weights}: unexpected tensor {extra[0]!r}")
            jobs = tuple(str(j) for j in meta["jobs"])
            resources = tuple(str(r) for r in meta["resources"])
            metrics = tuple(str(m) for m in meta["metrics"])
            full_scale = tuple(float(f) for f in meta["full_scale"])
            info = dict(meta.get("info", {}))
            components = meta.get("components", 1) if version >= 6 else 1
            if not is_int(components):
                raise InputError(f"{meta_path}: components must be an integer, not {components!r}")
            try:
                model = cls(
                    jobs=jobs,
                    resources=resources,
                    metrics=metrics,
                    full_scale=full_scale,
                    hyper=hyper,
                    posterior=posterior,
                    info=info,
                    families=families,
                    measured=measured,
                    components=components,
                )
            except InputError as exc:  # the object's own checks: say which directory
                raise InputError(f"{d}: {exc}") from None
        except InputError:
            raise
        except KeyError as exc:
            raise InputError(f"{d}: model lacks {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"{d}: malformed model ({exc})") from None
        # Last, so that what is malformed is named as such; what is well formed but not as
        # saved (a flipped bit in a weight, an edited number) is caught here.
        check_digest(meta, [weights], meta_path, "model")
        return model


def _load_measured(
    raw: Any, tensors: Mapping[str, torch.Tensor], version: int, meta_path: Path
) -> MeasuredPairs | None:
    """The measured pairs of a saved model (``measured`` in ``model.json`` and its tensors)."""
    present = [k for k in _MEASURED_KEYS + _MEASURED_OPTIONAL if f"{_MEASURED}.{k}" in tensors]
    if raw is None:
        if present:
            raise InputError(f"{meta_path}: measured-pair tensors without their description")
        return None
    if version < 5:
        raise InputError(f"{meta_path}: a version {version} model has no measured pairs")
    keys = {"scale", "noise"} | ({"kernel", "kernel_weight"} if version >= 10 else set())
    if not isinstance(raw, dict) or set(raw) != keys:
        raise InputError(f"{meta_path}: measured must hold {', '.join(sorted(keys))}")
    kernel, weight = _load_kernel(raw, meta_path) if version >= 10 else (None, 0.0)
    arr = {k: tensors[f"{_MEASURED}.{k}"].numpy() for k in _MEASURED_KEYS}  # KeyError: lacks
    spread = tensors.get(f"{_MEASURED}.spread")
    if spread is not None and version < 8:
        raise InputError(f"{meta_path}: a version {version} model has no measured-pair spread")
    if arr["job"].dtype != np.int64 or arr["co"].dtype != np.int64 or arr["n"].dtype != np.int64:
        raise InputError(f"{meta_path}: measured-pair indices must be int64")
    return MeasuredPairs(
        job=arr["job"], co=arr["co"], log_speed=arr["log_speed"].astype(np.float64),
        n=arr["n"], scale=float(raw["scale"]), noise=float(raw["noise"]),
        expected=arr["expected"].astype(np.float64), offset=arr["offset"].astype(np.float64),
        spread=None if spread is None else spread.numpy().astype(np.float64),
        kernel=kernel, kernel_weight=weight,
    )


_KERNEL_KEYS = ("length", "scale", "level", "noise", "columns", "centre", "spread")


def _measured_meta(m: MeasuredPairs) -> dict[str, Any]:
    """``measured`` of ``model.json``: the scales and the counter kernel (None: none)."""
    kernel = None if m.kernel is None else {
        k: list(v) if isinstance(v, tuple) else v for k, v in m.kernel.__dict__.items()
    }
    return {"scale": m.scale, "noise": m.noise, "kernel": kernel, "kernel_weight": m.kernel_weight}


def _load_kernel(raw: Mapping[str, Any], meta_path: Path) -> tuple[CounterKernel | None, float]:
    """The counter kernel and its weight of a saved model's ``measured`` description."""
    weight = raw["kernel_weight"]
    if not is_real(weight):
        raise InputError(f"{meta_path}: measured kernel_weight must be a number")
    k = raw["kernel"]
    if k is None:
        return None, float(weight)
    if not isinstance(k, dict) or set(k) != set(_KERNEL_KEYS):
        raise InputError(f"{meta_path}: measured kernel must hold {', '.join(_KERNEL_KEYS)}")
    try:
        columns = tuple(int(c) for c in k["columns"])
        kernel = CounterKernel(
            length=float(k["length"]), scale=float(k["scale"]), level=float(k["level"]),
            noise=float(k["noise"]), columns=columns,
            centre=tuple(float(c) for c in k["centre"]),
            spread=tuple(float(c) for c in k["spread"]),
        )
    except (TypeError, ValueError) as exc:
        raise InputError(f"{meta_path}: measured kernel: {exc}") from None
    return kernel, float(weight)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value
