"""The Pyro model: priors, the contention function and the two likelihoods.

See :mod:`interplace.model` for the generative story. Every tensor function here takes leading
batch dimensions (posterior draws), so one code path serves fitting (no batch) and prediction
(``S`` draws at once).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import pyro
import pyro.distributions as dist
import torch
from pyro.nn import PyroModule

from interplace.errors import InputError, is_int, is_real

__all__ = [
    "FAMILY_SITES",
    "KAPPA",
    "PAIR_SITES",
    "SITES",
    "SUPPORT",
    "Hyper",
    "InterferenceNet",
    "cell_sum",
    "constrained",
    "counter_mean",
    "gather_pairs",
    "log_speed",
    "member_slots",
    "pressure",
    "reference_level",
    "sensitivity",
    "site_names",
    "unconstrained",
]

KAPPA = 12.0
"""Sharpness of the soft ``max(0, .)`` in the contention function (1/KAPPA is its knee width)."""

COUNTER_KNEE = 0.02
"""Half-width of the rounded corner of ``min(1, .)`` that turns load into counter utilisation.

A counter saturates at full scale exactly: below ``1 - COUNTER_KNEE`` it reads the load, above
``1 + COUNTER_KNEE`` it reads 1, and between them a quadratic joins the two with a continuous
slope. (A softplus corner never reaches 1, so a saturated run's interval could never cover
its true reading of exactly 100%.)"""

SITES: dict[str, str] = {
    "demand_mu": "real",
    "demand_sd": "positive",
    "log_demand": "real",
    "sens_eps": "real",
    "sens_loc": "real",
    "sens_slope": "real",
    "sens_scale": "positive",
    "threshold": "positive",
    "speed_noise": "positive",
    "metric_noise": "positive",
    "iso_bias": "real",
    "iso_bias_scale": "positive",
    "log_intensity": "real",
    "intensity_sd": "positive",
}
"""Latent sites and their support (``positive`` ones are exp of their unconstrained value)."""

FAMILY_SITES: dict[str, str] = {
    "family_sd": "positive",
    "family_effect": "real",
}
"""The extra latent sites of a model fitted with job families (see :func:`family_centres`)."""

PAIR_SITES: dict[str, str] = {
    "pair_scale": "positive",
    "pair_u": "real",
    "pair_w": "real",
}
"""The extra latent sites of a model with a low-rank pair term (``rank > 0``).

``pair_u``, ``pair_w``: ``(J, rank)`` victim and aggressor factors; ``pair_scale``: ``(rank,)``
the spread of each component's victim factors (its shrinkage)."""

SUPPORT: dict[str, str] = {**SITES, **FAMILY_SITES, **PAIR_SITES}
"""Every latent site's support, whichever groups a model has."""


def constrained(name: str, z: torch.Tensor) -> torch.Tensor:
    """Site ``name``'s value from its unconstrained one: ``exp(z)`` for a ``positive`` site,
    ``z`` itself otherwise (the map every posterior draw and NUTS sample goes through)."""
    return z.exp() if SUPPORT[name] == "positive" else z


def unconstrained(name: str, x: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`constrained`: ``log(x)`` for a ``positive`` site, else ``x``."""
    return x.log() if SUPPORT[name] == "positive" else x


def site_names(families: bool, pair: bool) -> tuple[str, ...]:
    """A model's latent sites in their fixed order: :data:`SITES`, then the family sites (a fit
    with families), then the pair sites (``rank > 0``). Appending groups keeps the draws of the
    earlier sites unchanged for a given seed."""
    return (*SITES, *(FAMILY_SITES if families else ()), *(PAIR_SITES if pair else ()))


@dataclass(frozen=True)
class Hyper:
    """Prior hyper-parameters (documented in :mod:`interplace.model`)."""

    demand_loc: float = math.log(0.3)
    demand_loc_scale: float = 1.0
    demand_scale_loc: float = 0.0
    demand_scale_scale: float = 0.5
    sens_loc_scale: float = 1.5
    sens_slope_loc: float = 0.5
    sens_slope_scale: float = 0.5
    sens_scale_loc: float = math.log(0.5)
    sens_scale_scale: float = 0.5
    threshold_scale: float = 0.3
    speed_noise_loc: float = math.log(0.05)
    speed_noise_scale: float = 1.0
    metric_noise_loc: float = math.log(0.05)
    metric_noise_scale: float = 1.0
    speed_df: float = 4.0
    iso_bias_scale_loc: float = math.log(0.03)
    iso_bias_scale_scale: float = 0.5
    intensity_sd_loc: float = math.log(0.3)
    intensity_sd_scale: float = 0.5
    family_demand_sd_loc: float = math.log(0.5)
    family_sens_sd_loc: float = math.log(0.5)
    family_intensity_sd_loc: float = math.log(0.3)
    family_bias_sd_loc: float = math.log(0.03)
    family_sd_scale: float = 0.5
    pair_scale_loc: float = math.log(0.3)
    pair_scale_scale: float = 1.0
    measure_noise: float = 0.02
    cold_kernel_weight: float = 0.5
    direct_weight: float = 0.25

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if not is_real(value):
                raise InputError(f"hyper-parameter {name} must be a finite number, not {value!r}")
            # a prior's scale (every *_scale), the measurement noise and the Student-t degrees
            # of freedom are positive (0 made the fit "diverge", a negative one torch's error)
            if (name.endswith("_scale") or name in ("measure_noise", "speed_df")) and value <= 0:
                raise InputError(f"hyper-parameter {name} must be > 0, not {value!r}")
        for name in ("cold_kernel_weight", "direct_weight"):
            if not 0 <= getattr(self, name) <= 1:
                raise InputError(
                    f"hyper-parameter {name} must lie in [0, 1], not {getattr(self, name)!r}"
                )


def family_sd_loc(hyper: Hyper, n_res: int) -> list[float]:
    """Prior median (log) of the family effects' spread, one per column of ``family_effect``.

    Columns: ``n_res`` demand, ``n_res`` sensitivity and ``n_res`` intensity offsets, then the
    isolated-throughput bias.
    """
    return (
        [hyper.family_demand_sd_loc] * n_res
        + [hyper.family_sens_sd_loc] * n_res
        + [hyper.family_intensity_sd_loc] * n_res
        + [hyper.family_bias_sd_loc]
    )


def family_centres(
    effect: torch.Tensor, family: torch.Tensor, n_res: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each job's prior centres of log demand, ``epsilon``, ``eta`` and bias from its family.

    ``effect``: ``(..., F, 3 R + 1)`` (:func:`family_sd_loc` gives the columns); ``family``:
    ``(J,)`` family index of each job in ``0..F``, where ``F`` (no family) is a zero effect.
    Returns ``(..., J, R)`` offsets of log demand, sensitivity noise and log intensity, and
    ``(..., J)`` bias offsets.
    """
    pad = effect.new_zeros(*effect.shape[:-2], 1, effect.shape[-1])
    per_job = torch.cat([effect, pad], dim=-2).index_select(-2, family)
    return (
        per_job[..., :n_res],
        per_job[..., n_res : 2 * n_res],
        per_job[..., 2 * n_res : 3 * n_res],
        per_job[..., 3 * n_res],
    )


def _softplus(x: torch.Tensor, kappa: float = KAPPA) -> torch.Tensor:
    return torch.nn.functional.softplus(kappa * x) / kappa


def sensitivity(
    log_demand: torch.Tensor,
    sens_eps: torch.Tensor,
    sens_loc: torch.Tensor,
    sens_slope: torch.Tensor,
    sens_scale: torch.Tensor,
) -> torch.Tensor:
    """Sensitivities :math:`s_{jr} = \\exp(a_r + b_r \\log d_{jr} + \\tau_r \\epsilon_{jr})`.

    Returns shape ``(..., J, R)``. ``log_demand`` and ``sens_eps`` are ``(..., J, R)``; the
    rest ``(..., R)``.
    """
    a = sens_loc.unsqueeze(-2)
    b = sens_slope.unsqueeze(-2)
    tau = sens_scale.unsqueeze(-2)
    return torch.exp(a + b * log_demand + tau * sens_eps)


def pressure(log_demand: torch.Tensor, log_intensity: torch.Tensor) -> torch.Tensor:
    """Pressure on each resource, :math:`p_{jr} = d_{jr} e^{\\eta_{jr}}`, shape ``(..., J, R)``.

    Both inputs are ``(..., J, R)``: the log demand the counters read and the log intensity.
    """
    return (log_demand + log_intensity).exp()


def log_speed(
    pressure: torch.Tensor,
    sens: torch.Tensor,
    threshold: torch.Tensor,
    job: torch.Tensor,
    co: torch.Tensor,
    share: torch.Tensor,
    pair_u: torch.Tensor | None = None,
    pair_w: torch.Tensor | None = None,
    offset: torch.Tensor | None = None,
    pair_z: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log speed of each queried job next to its co-runners, shape ``(..., N)``.

    ``pressure`` (:func:`pressure`), ``sens``: ``(..., J, R)``; ``threshold``: ``(..., R)``;
    ``job``: ``(N,)``; ``co``: ``(N, K)`` indices in ``0..J`` (``J`` = padding, zero pressure);
    ``share``:
    ``(N, K, R)`` 0/1. Implements

    .. math:: \\log v_n = -\\sum_r \\log\\bigl(1 + s_{jr}\\, [\\,\\mathrm{sp}(p_{jr} + L_{nr}
              - \\theta_r) - \\mathrm{sp}(p_{jr} - \\theta_r)\\,]\\bigr),
              \\quad L_{nr} = \\sum_k \\mathrm{share}_{nkr}\\, p_{c_{nk} r}\\,
              e^{z_{j c_{nk}}},

    with the pair term :math:`z_{jk} = u_j \\cdot w_k` when ``pair_u``, ``pair_w``
    (``(..., J, rank)``) are given, and :math:`z = 0` otherwise. ``offset`` (``(J, J)``: the
    pressure offsets :math:`c_{jk}` of :mod:`interplace.model._cells`) scales each
    co-runner's pressure further by :math:`e^{c_{j c_{nk}}}`, on every resource it shares, as
    the pair term does. ``pair_z`` (``(..., J, J)``), when given, is :math:`z` itself, the
    product :math:`u w^\\top` computed by the caller (it then takes the place of ``pair_u``
    and ``pair_w``). Scaling pressure, never adding to the speed, keeps the speed monotone
    in the co-runners and in what they share.
    """
    batch = pressure.shape[:-2]
    n_res = pressure.shape[-1]
    pad = torch.zeros(*batch, 1, n_res, dtype=pressure.dtype, device=pressure.device)
    d_pad = torch.cat([pressure, pad], dim=-2)
    n, k = co.shape
    d_co = d_pad.index_select(-2, co.reshape(-1)).reshape(*batch, n, k, n_res)
    if pair_z is None and pair_u is not None and pair_w is not None:
        pair_z = pair_u @ pair_w.transpose(-1, -2)
    if pair_z is not None:
        # e^{z} for every (job, co-runner) at once, (..., J, J + 1) with a padding column,
        # then one gather: cheaper than gathering rank-vectors per query and co-runner.
        n_jobs = pair_z.shape[-1]
        factor = pair_z.exp()
        factor = torch.cat([factor, factor.new_zeros(*batch, n_jobs, 1)], dim=-1)
        flat = (job.unsqueeze(-1) * (n_jobs + 1) + co).reshape(-1)
        z = factor.reshape(*batch, -1).index_select(-1, flat).reshape(*batch, n, k)
        d_co = d_co * z.unsqueeze(-1)
    if offset is not None:
        d_co = d_co * gather_pairs(offset, job, co).exp().unsqueeze(-1)
    load = (d_co * share).sum(-2)  # (..., N, R)
    d_j = pressure.index_select(-2, job)  # (..., N, R)
    s_j = sens.index_select(-2, job)
    th = threshold.unsqueeze(-2)
    excess = _softplus(d_j + load - th) - _softplus(d_j - th)
    return -torch.log1p(s_j * excess.clamp_min(0.0)).sum(-1)


def reference_level(iso_bias: torch.Tensor, job: torch.Tensor, share: torch.Tensor) -> torch.Tensor:
    r"""Each query's log level relative to its job's recorded isolated throughput,
    ``(..., N)``: :math:`\beta_j` where a co-runner shares the job's GPU, and
    :math:`\max(\beta_j, 0)` where none does (alone, or co-runners only on other GPUs).

    ``iso_bias``: ``(..., J)``; ``job``: ``(N,)``; ``share``: ``(N, K, R)`` 0/1, a co-runner
    on the job's own GPU sharing every resource (:data:`~interplace.model.DOMAIN_RESOURCES`;
    with a model whose resources are all shared across GPUs, every co-runner counts as one).
    :math:`\beta_j` is what every co-located speed of the job shares: the record's own
    error and any cost of sharing a GPU at all, which no data set separates, since none
    measures a job alone beyond its record. A cost of sharing is never negative, so what of
    :math:`\beta_j` lies above 0 can only be the record's error and carries to the job
    alone; what lies below is read as the cost of sharing (a record's error is a
    measurement's, about 2%, where sharing costs are larger). So a job never speeds up when a
    co-runner joins it, and is predicted alone at its record unless its co-located speeds say
    the record was low.

    >>> b = torch.tensor([-0.1, 0.05])
    >>> share = torch.tensor([[[1.0, 1.0]], [[0.0, 0.0]], [[0.0, 1.0]], [[0.0, 0.0]]])
    >>> reference_level(b, torch.tensor([0, 0, 0, 1]), share).tolist()
    [-0.10000000149011612, 0.0, 0.0, 0.05000000074505806]
    """
    level = iso_bias.index_select(-1, job)
    on_gpu = share.amin(-1).amax(-1) > 0  # (N,): some co-runner shares every resource
    return torch.where(on_gpu, level, level.clamp_min(0.0))


def gather_pairs(cell: torch.Tensor, job: torch.Tensor, co: torch.Tensor) -> torch.Tensor:
    """``cell[..., job_n, co_nk]``, shape ``(..., N, K)``, zero where ``co`` is the padding
    ``J``. ``cell``: ``(..., J, J)``; ``job``: ``(N,)``; ``co``: ``(N, K)``."""
    batch = cell.shape[:-2]
    n_jobs = cell.shape[-1]
    n, k = co.shape
    padded = torch.cat([cell, cell.new_zeros(*batch, n_jobs, 1)], dim=-1)
    flat = (job.unsqueeze(-1) * (n_jobs + 1) + co).reshape(-1)
    return padded.reshape(*batch, -1).index_select(-1, flat).reshape(*batch, n, k)


def cell_sum(
    cell: torch.Tensor, job: torch.Tensor, co: torch.Tensor, share: torch.Tensor
) -> torch.Tensor:
    """:math:`\\sum_k g_{nk}\\, x_{j_n c_{nk}}`, shape ``(..., N)``: per-pair log-scale terms
    ``cell`` (``(..., J, J)``) of each query's co-runners that share anything with it
    (:math:`g_{nk} = \\max_r \\mathrm{share}_{nkr}`). ``job``: ``(N,)``; ``co``: ``(N, K)``
    (``J`` = padding, no term); ``share``: ``(N, K, R)``.
    """
    contends = share.amax(-1).to(cell.dtype)  # (N, K): shares some resource
    return (gather_pairs(cell, job, co) * contends).sum(-1)


def smooth_cap(x: torch.Tensor, knee: float = COUNTER_KNEE) -> torch.Tensor:
    """``min(1, x)`` with its corner rounded over ``[1 - knee, 1 + knee]`` (C1, exact outside).

    >>> smooth_cap(torch.tensor([0.5, 0.99, 1.0, 1.5], dtype=torch.float64)).tolist()
    [0.5, 0.98875, 0.995, 1.0]
    """
    y = x - (x - (1.0 - knee)) ** 2 / (4.0 * knee)
    return torch.where(x <= 1.0 - knee, x, torch.where(x >= 1.0 + knee, torch.ones_like(x), y))


def member_slots(members: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each counter group's members as slots: indices ``(G, M)`` into ``0..J`` (``J`` =
    padding) and their instance counts ``(G, M)``, ``M`` the most members of any group.

    ``members``: the ``(G, J + 1)`` count matrix of :class:`~interplace.model._data.Counters`
    (its last column unused). :func:`counter_mean` reads the slots: a group holds one or two
    jobs, so a gather of ``M`` of them per group replaces a ``(G, J + 1)`` by ``(J + 1, R)``
    product (on Lucid, 2,908 groups of 66 jobs, it was about a tenth of every SVI step).

    >>> idx, n = member_slots(torch.tensor([[1.0, 0.0, 0.0], [1.0, 2.0, 0.0]]))
    >>> idx.tolist(), n.tolist()
    ([[0, 2], [0, 1]], [[1.0, 0.0], [1.0, 2.0]])
    """
    n_jobs = members.shape[-1] - 1
    held = members[:, :n_jobs] != 0
    width = max(int(held.sum(1).max()), 1) if members.shape[0] else 1
    # Stable sort puts each group's members first, in job order; the rest is padding.
    order = torch.sort((~held).to(torch.int8), dim=1, stable=True).indices[:, :width]
    taken = held.gather(1, order)
    idx = torch.where(taken, order, torch.full_like(order, n_jobs))
    count = torch.where(taken, members.gather(1, order), members.new_zeros(()))
    return idx, count


def counter_mean(
    demand: torch.Tensor, idx: torch.Tensor, count: torch.Tensor, res: torch.Tensor
) -> torch.Tensor:
    """True utilisation of each counter group, ``u_g = cap(sum_j m_gj d_{j r_g})``.

    ``cap`` is :func:`smooth_cap`. ``demand``: ``(..., J, R)``; ``idx``, ``count``: ``(G, M)``
    each group's member slots (:func:`member_slots` of the ``(G, J + 1)`` instance counts
    :math:`m`); ``res``: ``(G,)`` resource of each group's metric. Returns ``(..., G)`` in
    ``[0, 1]``.
    """
    batch = demand.shape[:-2]
    n_res = demand.shape[-1]
    pad = torch.zeros(*batch, 1, n_res, dtype=demand.dtype, device=demand.device)
    d_pad = torch.cat([demand, pad], dim=-2).reshape(*batch, -1)  # (..., (J+1) R)
    flat = (idx * n_res + res.unsqueeze(-1)).reshape(-1)
    x = (d_pad.index_select(-1, flat).reshape(*batch, *idx.shape) * count).sum(-1)
    return smooth_cap(x)


class InterferenceNet(PyroModule):
    r"""The generative model over ``J`` jobs, ``R`` resources and ``M`` counter metrics.

    ``forward`` takes the encoded observations and counter groups as tensors (see
    :mod:`interplace.model._data`) and scores them; it returns nothing. ``family`` (``(J,)``
    indices in ``0..F``, ``F`` = ``n_families`` for a job without one; or None) adds the
    family level of :mod:`interplace.model`. ``temper`` :math:`\lambda` raises both
    likelihoods (speeds and counters) to that power, :math:`p(\theta)\,p(y \mid
    \theta)^{\lambda}` (a power posterior; 1, the default, is the plain model).
    """

    def __init__(
        self,
        n_jobs: int,
        n_res: int,
        n_metrics: int,
        hyper: Hyper,
        family: torch.Tensor | None = None,
        n_families: int = 0,
        rank: int = 0,
        temper: float = 1.0,
    ) -> None:
        super().__init__()
        if not is_int(rank, 0):
            raise ValueError(f"rank must be an integer >= 0, not {rank!r}")
        if not (math.isfinite(temper) and temper > 0):
            raise ValueError(f"temper must be a finite number > 0, not {temper!r}")
        self.rank = rank
        self.temper = float(temper)
        self.n_jobs = n_jobs
        self.n_res = n_res
        self.n_metrics = max(n_metrics, 1)
        self.hyper = hyper
        if family is not None and (
            family.shape != (n_jobs,)
            or n_families < 1
            or int(family.min()) < 0
            or int(family.max()) > n_families
        ):
            raise ValueError(
                f"family must be ({n_jobs},) indices in 0..{n_families} with n_families >= 1"
            )
        self.family = family
        self.n_families = n_families
        self._consts: dict[tuple[float, torch.dtype, torch.device], torch.Tensor] = {}
        self._plates: dict[tuple[str, int, int], pyro.plate] = {}

    def _plate(self, name: str, size: int, dim: int) -> pyro.plate:
        """``pyro.plate(name, size, dim=dim)``, made once per name, size and dim."""
        key = (name, size, dim)
        if key not in self._plates:
            self._plates[key] = pyro.plate(name, size, dim=dim)
        return self._plates[key]

    def forward(self, *tensors: torch.Tensor) -> None:
        """The model as Pyro sample sites in their plates; ``tensors`` as :meth:`_story`
        takes them."""
        self._story(_PyroSites(self), *tensors)

    def log_joint(
        self, latent: dict[str, torch.Tensor], *tensors: torch.Tensor
    ) -> torch.Tensor:
        r"""The model's log density at unconstrained latent values, a scalar:
        :math:`\sum_{\mathrm{sites}} \log \mathcal{N}(z;\, \mu, \sigma) + \lambda
        \log p(y \mid \theta)`.

        ``latent`` holds every site of :func:`site_names` unconstrained (a ``positive`` site's
        log), shaped as in ``forward``; ``tensors`` are ``forward``'s. A ``positive`` site's
        LogNormal prior is a Normal one on its log, so the density is taken there, without
        the Jacobian :math:`-z`: the variational density :math:`q` of :func:`fit`'s guide,
        over the same unconstrained values, carries the same term, so the ELBO
        :math:`\mathbb{E}_q[\log p - \log q]` is Pyro's ``Trace_ELBO`` up to rounding
        (checked in ``tests/model/test_fit_options.py``), computed without Pyro's tracing,
        which took half of every SVI step on Lucid.
        """
        sites = _DirectSites(self, latent)
        self._story(sites, *tensors)
        return torch.as_tensor(sites.total)

    def log_joint_parts(
        self, latent: dict[str, torch.Tensor], *tensors: torch.Tensor, batch: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        r""":meth:`log_joint` in its two parts, the sites' prior log density and the tempered
        log likelihood (scalars; their sum is :meth:`log_joint` up to rounding).

        ``batch``: of ``B`` sets of latent values at once, each part ``(B,)``: each site's
        value in ``latent`` has a leading axis of ``B`` before the shape :meth:`log_joint`
        takes (``log_demand`` ``(B, J, R)``, ``speed_noise`` ``(B,)``), and entry ``b`` is
        the part for the values at ``b``, up to rounding. :func:`fit` steps its restarts
        together so: where the tensors are small, one pass over the story for several costs
        little more than one restart's.

        The prior is one Normal log density over every site's values at once, each with its
        location and scale broadcast to its shape: the same terms as one density per site in a
        few operations rather than a few per site (most sites hold 1-5 values). Each part's
        gradient is the sum of the same terms as :meth:`log_joint`'s; taken apart, each in its
        own pass, and added, it is :meth:`log_joint`'s gradient bit for bit (:func:`fit`'s
        steps do so): one pass would add the prior's terms to a value's gradient before the
        likelihood's, where :meth:`log_joint`'s pass adds them after, and a sum of three or
        more terms rounds by its order.
        """
        sites = _BatchSites(self, latent) if batch else _DirectSites(self, latent, deferred=True)
        self._story(sites, *tensors)
        return sites.prior(), torch.as_tensor(sites.total)

    def _story(
        self,
        s: _PyroSites | _DirectSites | _BatchSites,
        job: torch.Tensor,
        co: torch.Tensor,
        share: torch.Tensor,
        log_y: torch.Tensor,
        member_idx: torch.Tensor,
        member_n: torch.Tensor,
        metric: torch.Tensor,
        metric_res: torch.Tensor,
        n: torch.Tensor,
        mean: torch.Tensor,
        ssd: torch.Tensor,
    ) -> None:
        """The generative story, once, for every reader: ``s`` samples its sites with Pyro
        (:meth:`forward`) or scores given values (:meth:`log_joint`, or a batch of them,
        :meth:`log_joint_parts` with ``batch``: every value then has a leading batch axis,
        which the story's explicit broadcasts keep apart).

        The tensors (:mod:`interplace.model._data`): ``job`` ``(N,)``, ``co`` ``(N, K)``,
        ``share`` ``(N, K, R)`` and ``log_y`` ``(N,)`` the speed observations; ``member_idx``,
        ``member_n`` ``(G, M)`` each counter group's member slots (:func:`member_slots`),
        ``metric``, ``metric_res``, ``n``, ``mean``, ``ssd`` ``(G,)`` its metric, that metric's
        resource and its sufficient statistics.
        """
        h = self.hyper
        dt = log_y.dtype
        dev = log_y.device
        consts = self._consts
        plate = s.plate

        def c(x: float) -> torch.Tensor:
            # Constants are made once and reused by every step (they are read-only), which
            # saves a tensor construction per use.
            key = (x, dt, dev)
            if key not in consts:
                consts[key] = torch.tensor(x, dtype=dt, device=dev)
            return consts[key]

        zero = c(0.0)
        demand_off, sens_off, intensity_off, bias_off = zero, zero, zero, zero
        if self.family is not None:
            n_eff = 3 * self.n_res + 1
            sd_loc = torch.tensor(family_sd_loc(h, self.n_res), dtype=dt, device=dev)
            with plate("family_effects", n_eff, -1):
                family_sd = s.latent("family_sd", sd_loc, c(h.family_sd_scale))
                with plate("families", self.n_families, -2):
                    effect = s.latent("family_effect", zero, family_sd.unsqueeze(-2))
            demand_off, sens_off, intensity_off, bias_off = family_centres(
                effect, self.family, self.n_res
            )
        with plate("resources", self.n_res, -1):
            sens_loc = s.latent("sens_loc", c(0.0), c(h.sens_loc_scale))
            sens_slope = s.latent(
                "sens_slope", c(h.sens_slope_loc), c(h.sens_slope_scale)
            )
            sens_scale = s.latent(
                "sens_scale", c(h.sens_scale_loc), c(h.sens_scale_scale)
            )
            threshold = s.latent("threshold", c(0.0), c(h.threshold_scale))
            demand_mu = s.latent(
                "demand_mu", c(h.demand_loc), c(h.demand_loc_scale)
            )
            demand_sd = s.latent(
                "demand_sd", c(h.demand_scale_loc), c(h.demand_scale_scale)
            )
            intensity_sd = s.latent(
                "intensity_sd", c(h.intensity_sd_loc), c(h.intensity_sd_scale)
            )
            with plate("jobs", self.n_jobs, -2):
                # Explicit broadcasts (a resource's value over the jobs' axis), so that the
                # story also scores a batch of latent values (:meth:`log_joint_parts`).
                log_demand = s.latent(
                    "log_demand", demand_mu.unsqueeze(-2) + demand_off, demand_sd.unsqueeze(-2)
                )
                sens_eps = s.latent("sens_eps", sens_off, c(1.0))
                # Capacity taken per unit of counter-read demand: NVML utilisation is a
                # busy-time fraction, not a capacity share, and the ratio differs by job.
                log_intensity = s.latent(
                    "log_intensity", intensity_off, intensity_sd.unsqueeze(-2)
                )
        iso_bias_scale = s.latent(
            "iso_bias_scale", c(h.iso_bias_scale_loc),
            c(h.iso_bias_scale_scale),
        )
        with plate("jobs_bias", self.n_jobs, -1):
            iso_bias = s.latent("iso_bias", bias_off, iso_bias_scale.unsqueeze(-1))
        speed_noise = s.latent(
            "speed_noise", c(h.speed_noise_loc), c(h.speed_noise_scale)
        )
        with plate("metrics", self.n_metrics, -1):
            metric_noise = s.latent(
                "metric_noise", c(h.metric_noise_loc), c(h.metric_noise_scale)
            )
        pair_z = None
        if self.rank > 0:
            with plate("pair_components", self.rank, -1):
                pair_scale = s.latent(
                    "pair_scale", c(h.pair_scale_loc), c(h.pair_scale_scale)
                )
                with plate("pair_jobs", self.n_jobs, -2):
                    pair_u = s.latent("pair_u", zero, pair_scale.unsqueeze(-2))
                    pair_w = s.latent("pair_w", zero, c(1.0))
            pair_z = s.pair_effects(pair_u, pair_w)
        demand = log_demand.exp()
        sens = sensitivity(log_demand, sens_eps, sens_loc, sens_slope, sens_scale)
        # The likelihoods, to the power temper (each reader scales their log densities).
        if job.shape[0] > 0:
            loc = log_speed(
                pressure(log_demand, log_intensity), sens, threshold, job, co, share,
                pair_z=pair_z,
            ) + reference_level(iso_bias, job, share)
            s.speeds(c(h.speed_df), loc, speed_noise.unsqueeze(-1), log_y)
        if metric.shape[0] > 0:
            mu = counter_mean(demand, member_idx, member_n, metric_res)
            sigma = metric_noise.index_select(-1, metric)
            # Gaussian likelihood of n samples from their sufficient statistics.
            s.counters(
                -n * torch.log(sigma)
                - 0.5 * n * math.log(2 * math.pi)
                - (ssd + n * (mean - mu) ** 2) / (2 * sigma**2)
            )


_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def normal_log_density(z: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    r""":math:`\sum \log \mathcal{N}(z;\, \mu, \sigma)` over every element, a scalar
    (``loc`` and ``scale`` broadcast against ``z``).

    >>> z = torch.tensor([0.0, 1.0], dtype=torch.float64)
    >>> one = torch.tensor(1.0, dtype=torch.float64)
    >>> round(float(normal_log_density(z, 0 * one, one)), 6)  # 2 log N(0) - 1/2
    -2.337877
    """
    return _normal_terms(z, loc, scale.expand(z.shape)).sum()


def _normal_terms(z: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Each entry's :math:`\\log \\mathcal{N}(z;\\, \\mu, \\sigma)`, ``scale`` already of
    ``z``'s shape: the arithmetic :func:`normal_log_density` and :func:`joint_prior` share."""
    return -0.5 * ((z - loc) / scale) ** 2 - scale.log() - _HALF_LOG_2PI


def student_t_log_prob(
    df: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor, value: torch.Tensor
) -> torch.Tensor:
    r"""The Student-t log density of each entry of ``value``,

    .. math:: \log \Gamma\big(\tfrac{\nu + 1}{2}\big) - \log \Gamma\big(\tfrac{\nu}{2}\big)
              - \tfrac12 \log(\nu\pi) - \log\sigma
              - \tfrac{\nu + 1}{2} \log\Big(1 + \frac{(y - \mu)^2}{\nu\sigma^2}\Big),

    with the degrees of freedom ``df`` a constant (a 0-dim tensor, no gradient): ``loc``,
    ``scale`` and ``value`` broadcast to one shape, the result's. It is
    ``torch.distributions.StudentT(df, loc, scale).log_prob(value)`` bit for bit, value and
    gradient (the same operations in the same order on each entry, and ``scale`` expanded to
    the shape as that distribution does, so its gradient sums the same terms), with the terms
    of ``df`` alone taken once instead of once per entry: that distribution broadcasts ``df``
    to every observation and takes two log-gamma functions of each, every step (on Lucid's
    2,776 observations the density and its gradient take 245 µs against 345 µs).

    >>> df, one = torch.tensor(4.0, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    >>> y = torch.tensor([0.0, 0.5, 3.0], dtype=torch.float64)
    >>> mine = student_t_log_prob(df, 0 * one, one[:1], y)
    >>> torch.equal(mine, torch.distributions.StudentT(df, 0 * one, one[:1]).log_prob(y))
    True
    """
    if df.requires_grad or df.dim() != 0:
        raise ValueError("student_t_log_prob takes a constant, 0-dim df")
    shape = torch.broadcast_shapes(loc.shape, scale.shape, value.shape)
    loc, scale = loc.expand(shape), scale.expand(shape)
    y = (value - loc) / scale
    z = (
        scale.log()
        + 0.5 * df.log()
        + 0.5 * math.log(math.pi)
        + torch.lgamma(0.5 * df)
        - torch.lgamma(0.5 * (df + 1.0))
    )
    return -0.5 * (df + 1.0) * torch.log1p(y**2.0 / df) - z


def joint_prior(
    sites: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], lead: int
) -> torch.Tensor:
    r""":math:`\sum \log \mathcal{N}(z;\, \mu, \sigma)` over every site's values at once,
    each ``(value, loc, scale)`` of ``sites`` with its location and scale broadcast to its
    value's shape; summed over all but the ``lead`` leading dimensions, which every value
    shares (0: a scalar; 1: ``(B,)``, one sum per batch entry).

    >>> one = torch.tensor(1.0, dtype=torch.float64)
    >>> z = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    >>> joint_prior([(z, 0 * one, one), (z[:, :1], 0 * one, one)], 1).tolist()
    [-3.256815599614018, -2.756815599614018]
    """

    def stacked(k: int) -> torch.Tensor:
        return torch.cat(
            [site[k].expand(site[0].shape).reshape(*site[0].shape[:lead], -1) for site in sites],
            dim=-1,
        )

    return _normal_terms(stacked(0), stacked(1), stacked(2)).sum(-1)


class _PyroSites:
    """:meth:`InterferenceNet.forward`'s reader of the story: Pyro sample sites in plates."""

    def __init__(self, net: InterferenceNet) -> None:
        self.net = net
        self.tempered = (
            pyro.poutine.scale(scale=net.temper) if net.temper != 1.0
            else contextlib.nullcontext()
        )

    def plate(self, name: str, size: int, dim: int) -> pyro.plate:
        return self.net._plate(name, size, dim)

    def latent(self, name: str, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        d = dist.LogNormal if SUPPORT[name] == "positive" else dist.Normal
        value: torch.Tensor = pyro.sample(name, d(loc, scale))
        return value

    @staticmethod
    def pair_effects(u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return u @ w.transpose(-1, -2)

    def speeds(
        self, df: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor, log_y: torch.Tensor
    ) -> None:
        with self.tempered, self.plate("observations", log_y.shape[0], -1):
            pyro.sample("log_speed", dist.StudentT(df, loc, scale), obs=log_y)

    def counters(self, logp: torch.Tensor) -> None:
        with self.tempered, self.plate("counter_groups", logp.shape[-1], -1):
            pyro.factor("counters", logp)


class _DirectSites:
    """:meth:`InterferenceNet.log_joint`'s reader: each site's value is given (unconstrained
    in ``latent``) and its log density summed into ``total``; ``deferred``
    (:meth:`InterferenceNet.log_joint_parts`): the sites' prior densities are left out of
    ``total``, for :meth:`prior`."""

    def __init__(
        self, net: InterferenceNet, latent: dict[str, torch.Tensor], deferred: bool = False
    ) -> None:
        self.latent_values = latent
        self.temper = net.temper
        self.total: torch.Tensor | float = 0.0
        self.deferred = deferred
        self.sites: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    @staticmethod
    def plate(name: str, size: int, dim: int) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def latent(self, name: str, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        z = self.latent_values[name]
        if self.deferred:
            self.sites.append((z, loc, scale))
        else:
            self.total = self.total + normal_log_density(z, loc, scale)
        return constrained(name, z)

    LEAD = 0
    """Leading batch dimensions every value has (:func:`joint_prior`'s ``lead``)."""

    def prior(self) -> torch.Tensor:
        """The deferred sites' prior log density, summed over all but the ``LEAD`` leading
        dimensions (:func:`joint_prior`)."""
        return joint_prior(self.sites, self.LEAD)

    @staticmethod
    def pair_effects(u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return u @ w.transpose(-1, -2)

    def speeds(
        self, df: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor, log_y: torch.Tensor
    ) -> None:
        self.total = self.total + self.temper * student_t_log_prob(df, loc, scale, log_y).sum()

    def counters(self, logp: torch.Tensor) -> None:
        self.total = self.total + self.temper * logp.sum()


class _BatchSites(_DirectSites):
    """The reader of :meth:`InterferenceNet.log_joint_parts` with ``batch``: a deferred
    :class:`_DirectSites` over a leading batch axis of every value; the likelihoods summed
    per batch entry into ``total`` ``(B,)``, the priors by :meth:`prior` (``(B,)``)."""

    LEAD = 1

    def __init__(self, net: InterferenceNet, latent: dict[str, torch.Tensor]) -> None:
        super().__init__(net, latent, deferred=True)
        first = next(iter(latent.values()))
        self.total = first.new_zeros(first.shape[0])

    @staticmethod
    def pair_effects(u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        # One product per batch entry: a batched product rounds its gradient differently
        # from the single one :meth:`InterferenceNet.log_joint` takes.
        return torch.stack([ub @ wb.transpose(-1, -2) for ub, wb in zip(u, w, strict=True)])

    def speeds(
        self, df: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor, log_y: torch.Tensor
    ) -> None:
        self.total = self.total + self.temper * student_t_log_prob(df, loc, scale, log_y).sum(-1)

    def counters(self, logp: torch.Tensor) -> None:
        self.total = self.total + self.temper * logp.sum(-1)
