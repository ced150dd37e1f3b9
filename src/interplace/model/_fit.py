"""Fitting the interference model by stochastic variational inference."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.distributions.util import sum_rightmost
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.infer.autoguide.initialization import init_to_median, init_to_value
from torch.distributions import biject_to, transform_to
from tqdm.auto import tqdm

from interplace import __version__
from interplace._parallel import one_blas_thread, spawn_map
from interplace.datasets.runs import CoLocationData
from interplace.errors import InputError, check_count, check_seed, is_real
from interplace.model._cells import measured_pairs
from interplace.model._coldscale import (
    align_cold_demand,
    below_map,
    isolated_readings,
    isolated_samples,
    readings_map,
    warm_families,
)
from interplace.model._counterkernel import READING_FLOOR, floored
from interplace.model._data import (
    DEFAULT_RESOURCES,
    METRIC_RESOURCE,
    Counters,
    FamilySpec,
    Observations,
    counters_from_samples,
    family_codes,
    family_index,
    job_families,
    observations_from_runs,
    select_mode,
)
from interplace.model._fitted import InterferenceModel
from interplace.model._net import (
    _HALF_LOG_2PI,
    Hyper,
    InterferenceNet,
    member_slots,
    site_names,
)
from interplace.model._nuts import Chain, Nuts, chain_task, pooled, run_chain, start_values
from interplace.model._topo import share_table
from interplace.topology import Topology

__all__ = ["DEFAULT_RANK", "MIXTURE_MAX_SIZE", "MIXTURE_RESTARTS", "MIXTURE_TEMPER", "fit"]

DEFAULT_RANK = 5
"""Components of the low-rank pair term a fit allows by default (their shrinkage prior switches
off those the data do not support)."""

MIXTURE_RESTARTS = 4
"""Restarts of the default fit on data of at most :data:`MIXTURE_MAX_SIZE` observations and
counter groups (see :func:`fit`)."""

MIXTURE_TEMPER = 1.5
"""Likelihood power of each restart when a fit has several (see :func:`fit`)."""

MIXTURE_MAX_SIZE = 2000
"""The largest data (co-located observations plus counter groups) on which the default fit
pools :data:`MIXTURE_RESTARTS` tempered restarts; larger data gets one plain fit."""

R = TypeVar("R")

_WINDOW = 100

MEASURED_DRAWS = 200
"""Posterior draws behind the second stage's structure means and offsets."""


class _SVI:
    r"""Stochastic variational inference with Pyro's ``Trace_ELBO`` and Adam with clipped
    gradients, one step at a time.

    Each step computes what ``pyro.infer.SVI(model, guide, pyro.optim.ClippedAdam({"lr": lr,
    "clip_norm": 10.0, "lrd": lrd}), Trace_ELBO(max_plate_nesting=2)).step`` does, from the
    same draws, up to rounding (``tests/model/test_fit_options.py`` checks it), with
    :math:`\mathrm{lrd} = 0.1^{1/\mathrm{steps}}`: the learning rate :math:`\eta \leftarrow
    \eta\,\mathrm{lrd}`, then for every parameter :math:`\theta` with gradient :math:`g`
    clamped to :math:`\pm 10`,

    .. math:: m \leftarrow \beta_1 m + (1 - \beta_1) g, \quad
              v \leftarrow \beta_2 v + (1 - \beta_2) g^2, \quad
              \theta \leftarrow \theta - \eta \frac{\sqrt{1 - \beta_2^t}}{1 - \beta_1^t}
              \frac{m}{\sqrt{v} + 10^{-8}},

    :math:`\beta = (0.9, 0.999)`, :math:`t` the step. What goes is overhead. The first step
    is Pyro's :meth:`~pyro.infer.Trace_ELBO.differentiable_loss` (the autoguide creates its
    parameters then); every later one computes the same single-draw ELBO directly,

    .. math:: \log p(y, z) - \log q(z), \quad z = \mu + \sigma \odot \epsilon,

    the guide's draw (:meth:`_FlatGuide.draw`, the same normals from the same RNG) scored by
    :meth:`~interplace.model._net.InterferenceNet.log_joint`, with no tracing of the sites
    (on Lucid a step took 11-13 ms through Pyro, 5-6 directly). The guide's parameters are taken
    once, after the first step, into two flat tensors (:class:`_FlatGuide`: every site's
    location, every site's unconstrained scale), and each line of the update above is one
    ``torch._foreach_*`` call over the two (elementwise, so the same numbers as one optimiser
    per parameter). Every guide parameter enters the ELBO, so each has a gradient every step.
    """

    BETAS = (0.9, 0.999)
    EPS = 1e-8
    CLIP = 10.0
    DIRECT = True
    """Whether steps after the first compute the ELBO directly (False: through Pyro every
    step, the same numbers bit for bit as Pyro's SVI, which the tests compare)."""

    def __init__(self, model: InterferenceNet, guide: _Normal, lr: float, steps: int) -> None:
        self.model, self.guide = model, guide
        self.elbo = Trace_ELBO(max_plate_nesting=2)
        self.lr, self.lrd = lr, 0.1 ** (1 / steps)
        self.params: list[torch.Tensor] = []
        self.m: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.t = 0
        self.flat: _FlatGuide | None = None

    def step(self, *args: torch.Tensor) -> float:
        """One gradient step on the negative ELBO; returns its value (a float)."""
        if self.params and self.DIRECT:
            objective = self._direct(self.flatten(), args)
        else:
            objective = self.elbo.differentiable_loss(self.model, self.guide, *args)
            objective.backward()
        if not self.params:
            self.params = [p for p in self.guide.parameters() if p.requires_grad]
            self.m = [torch.zeros_like(p) for p in self.params]
            self.v = [torch.zeros_like(p) for p in self.params]
        self.update()
        return float(objective.detach())

    def update(self) -> None:
        """Adam's update of ``params`` (a list of tensors) by their ``.grad``, which it clears:
        the learning rate's decay, the step count and the update in the class docstring."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if len(grads) != len(self.params):
            raise RuntimeError("a guide parameter got no gradient from the ELBO")
        with torch.no_grad():
            self.lr *= self.lrd
            self.t += 1
            self.moments(grads, self.m, self.v)
            denom = torch._foreach_sqrt(self.v)
            torch._foreach_add_(denom, self.EPS)
            torch._foreach_addcdiv_(
                self.params, self.m, denom, value=-self.step_size(self.lr, self.t)
            )
        for p in self.params:
            p.grad = None

    def _direct(self, flat: _FlatGuide, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
        r"""The negative ELBO :math:`\log q(z) - \log p(y, z)` at one draw, its gradient in
        the guide's flat parameters (``.grad``); returns the value, detached.

        The log joint is taken in its two parts
        (:meth:`~interplace.model._net.InterferenceNet.log_joint_parts`, the prior in a few
        operations instead of a few per site) and differentiated as
        :func:`_minus_elbo_backward` does, so that the gradient is
        :meth:`~interplace.model._net.InterferenceNet.log_joint`'s bit for bit.
        """
        z, log_q = flat.draw()
        value = z.detach().requires_grad_()
        parts = self.model.log_joint_parts(flat.sites(value), *args)
        return _minus_elbo_backward(z, log_q, value, *parts)

    def flatten(self) -> _FlatGuide:
        """The guide's parameters and Adam's moments as :class:`_FlatGuide`'s two flat
        tensors each (made once, after the first step; the guide's own parameters become
        views of them)."""
        if self.flat is None:
            if not self.params:
                raise RuntimeError("the guide is flattened only after the first step")
            self.flat = _FlatGuide(self.guide, self.params, self.m, self.v)
            self.params, self.m, self.v = self.flat.params, self.flat.m, self.flat.v
        return self.flat

    def scale_lr(self, factor: float) -> None:
        """Multiply the current learning rate by ``factor``."""
        self.lr *= factor

    @classmethod
    def moments(
        cls, grads: list[torch.Tensor], m: list[torch.Tensor], v: list[torch.Tensor]
    ) -> None:
        """Adam's moments ``m``, ``v`` updated in place by ``grads``, clamped first (in place)."""
        beta1, beta2 = cls.BETAS
        torch._foreach_clamp_min_(grads, -cls.CLIP)
        torch._foreach_clamp_max_(grads, cls.CLIP)
        torch._foreach_mul_(m, beta1)
        torch._foreach_add_(m, grads, alpha=1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)

    @classmethod
    def step_size(cls, lr: float, t: int) -> float:
        """Adam's bias-corrected step size at learning rate ``lr`` and step ``t``."""
        beta1, beta2 = cls.BETAS
        return lr * math.sqrt(1 - beta2**t) / (1 - beta1**t)


def _minus_elbo_backward(
    z: torch.Tensor, log_q: torch.Tensor, value: torch.Tensor, prior: torch.Tensor,
    likelihood: torch.Tensor,
) -> torch.Tensor:
    r"""Differentiate the negative ELBO :math:`\log q(z) - \log p(y, z)` into the guide's
    parameters (their ``.grad``) and return its value, detached (``(B,)`` for a batch).

    ``z`` is the guide's draw and ``value`` a detached copy of it at which ``prior`` and
    ``likelihood`` (:meth:`~interplace.model._net.InterferenceNet.log_joint_parts`) were
    taken. Their gradients in ``value`` are taken in two passes and added, then carried to
    the parameters with :math:`\log q`'s own: so each entry sums the same terms in the same
    order as one pass through the per-site log joint, where the prior's terms come last.
    """
    minus = torch.full_like(prior, -1.0)
    grad = torch.autograd.grad(prior, value, minus, retain_graph=True)[0]
    if likelihood.requires_grad:
        grad = torch.autograd.grad(likelihood, value, minus)[0] + grad
    torch.autograd.backward((z, log_q), (grad, torch.ones_like(log_q)))
    return (log_q - (prior + likelihood)).detach()


def _reparametrised(
    loc: torch.Tensor, raw: torch.Tensor, eps: torch.Tensor, sizes: list[int],
    to_scale: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""A flat guide's draw :math:`z = \mu + \sigma\epsilon` from its flat location ``loc``,
    unconstrained scale ``raw`` and normals ``eps`` (``(P,)`` each, the sites end to end,
    ``sizes`` entries each), and each entry's log density under the guide, :math:`-\tfrac12
    \epsilon^2 - \log\sigma - \tfrac12\log 2\pi` (``(P,)``). The scales' transform
    ``to_scale`` is taken site by site: over one tensor an entry could take the other
    (vectorised or not) of the CPU kernel's paths and round differently."""
    scale = torch.cat([to_scale(r) for r in raw.split(sizes)])
    return loc + eps * scale, -0.5 * eps**2 - scale.log() - _HALF_LOG_2PI


def _site_views(
    z: torch.Tensor, names: list[str], sizes: list[int], shapes: Sequence[tuple[int, ...]]
) -> dict[str, torch.Tensor]:
    """Each site's value in a flat draw ``z`` (the sites end to end), a view of its shape."""
    return {
        name: piece.view(shape)
        for name, piece, shape in zip(names, z.split(sizes), shapes, strict=True)
    }


class _FlatGuide:
    r"""A :class:`_Normal` guide's parameters in two flat tensors, every site's location in
    one and every site's unconstrained scale in the other, for :class:`_SVI`'s direct steps.

    A step then costs a handful of tensor operations for the whole guide (the draw
    :math:`z = \mu + \sigma \odot \epsilon`, :math:`\log q`, their gradients and Adam's
    update) where it cost that many per site: on Lucid, 17 sites and 34 parameters, most of
    them of 1-5 entries, whose per-operation overhead was a third of a step. The guide's own
    parameters become views of the flat tensors (so the guide reads the current values) and
    Adam's moments are flattened alike. The normals are drawn site by site into views of one
    buffer, in site order, each of its site's size, as :meth:`_Normal.forward` draws them, so
    a seeded RNG gives the same :math:`\epsilon`; and the scales' transform, a softplus, is
    taken site by site, since over one tensor an entry could take the other (vectorised or
    not) of the CPU kernel's paths and round differently. So a fit is the same bit for bit as
    with one tensor per parameter (checked on Lucid's two fits of seed 0, with and without
    families).

    ``locs``, ``scales``: the guide's parameters in site order; ``params``: the flat
    ``(P,)`` location and unconstrained scale, ``P`` the sites' total size.
    """

    def __init__(
        self,
        guide: _Normal,
        params: list[torch.Tensor],
        m: list[torch.Tensor],
        v: list[torch.Tensor],
    ) -> None:
        if guide._sites is None:
            raise RuntimeError("the guide is flattened only after its first forward call")
        index = {id(p): i for i, p in enumerate(params)}
        locs = [getattr(guide.locs, name + "_unconstrained") for name, *_ in guide._sites]
        scales = [getattr(guide.scales, name + "_unconstrained") for name, *_ in guide._sites]
        if sorted(index[id(p)] for p in locs + scales) != list(range(len(params))):
            raise RuntimeError("the guide's parameters are not its sites' locations and scales")
        self.locs, self.scales = locs, scales
        self.names = [name for name, *_ in guide._sites]
        self.shapes = [p.shape for p in locs]
        self.sizes = [p.numel() for p in locs]
        self.to_scale = transform_to(guide.scale_constraint)
        order = [index[id(p)] for p in locs], [index[id(p)] for p in scales]
        with torch.no_grad():
            self.params = [
                torch.cat([params[i].reshape(-1) for i in part]).requires_grad_()
                for part in order
            ]
            self.m = [torch.cat([m[i].reshape(-1) for i in part]) for part in order]
            self.v = [torch.cat([v[i].reshape(-1) for i in part]) for part in order]
            for flat, group in zip(self.params, (locs, scales), strict=True):
                for p, piece in zip(group, flat.detach().split(self.sizes), strict=True):
                    p.data = piece.view(p.shape)
        self.eps = torch.empty_like(self.params[0]).detach()
        self.eps_sites = [e.view(shape) for e, shape in zip(
            self.eps.split(self.sizes), self.shapes, strict=True)]

    def draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        r"""One reparametrised draw of every site, unconstrained, :math:`z = \mu +
        \sigma\epsilon` (``(P,)``; :meth:`sites` gives each site's part), and its log density
        under the guide, :math:`\log q(z) = \sum -\tfrac12 \epsilon^2 - \log\sigma -
        \tfrac12\log 2\pi` (a scalar)."""
        loc, raw = self.params
        for e in self.eps_sites:
            e.normal_()
        z, density = _reparametrised(loc, raw, self.eps, self.sizes, self.to_scale)
        return z, density.sum()

    def sites(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each site's value in a flat draw ``z`` (``(P,)``), a view of its ``(*shape)``."""
        return _site_views(z, self.names, self.sizes, self.shapes)


class _Normal(AutoNormal):
    """Pyro's ``AutoNormal`` with less of Pyro's machinery around each of its sample sites.

    The same distributions, drawn in the same order from the same RNG, so the same numbers
    (checked bit for bit on Lucid with and without families); what goes is overhead:

    - Under ``module_local_params`` each read of a guide parameter issues a stand-in ``param``
      statement (for handlers such as SVI's parameter trace); the fit needs none (:class:`_SVI`
      steps the guide's parameters directly and differentiates
      :meth:`~pyro.infer.Trace_ELBO.differentiable_loss`), so the unconstrained tensors are
      read and given the same transforms.
    - After the first call the sites are not entered into their plates: every location and scale
      has its site's full shape already, so the plates' broadcasting changes nothing (the model's
      own plates still scope its sites), and each site's support transform is built once.
    """

    _sites: list[tuple[str, Any, int, int]] | None = None

    def _get_loc_and_scale(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        loc = getattr(self.locs, name + "_unconstrained")
        scale = getattr(self.scales, name + "_unconstrained")
        return transform_to(constraints.real)(loc), transform_to(self.scale_constraint)(scale)

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        if self._sites is None:
            result: dict[str, torch.Tensor] = super().forward(*args, **kwargs)
            assert self.prototype_trace is not None  # set up by the first call
            self._sites = [
                (name, biject_to(site["fn"].support), self._event_dims[name],
                 site["fn"].event_dim)
                for name, site in self.prototype_trace.iter_stochastic_nodes()
            ]
            return result
        result = {}
        for name, transform, event_dim, fn_event_dim in self._sites:
            loc, scale = self._get_loc_and_scale(name)
            latent = pyro.sample(
                name + "_unconstrained",
                dist.Normal(loc, scale).to_event(event_dim),
                infer={"is_auxiliary": True},
            )
            value = transform(latent)
            log_density = transform.inv.log_abs_det_jacobian(value, latent)
            log_density = sum_rightmost(log_density, log_density.dim() - value.dim() + fn_event_dim)
            result[name] = pyro.sample(
                name, dist.Delta(value, log_density=log_density, event_dim=fn_event_dim)
            )
        return result


def _tensors(
    obs: Observations, counters: Counters, resources: Sequence[str], device: torch.device
) -> tuple[torch.Tensor, ...]:
    dt = torch.float64
    res_index = {r: i for i, r in enumerate(resources)}
    metric_res = [res_index[METRIC_RESOURCE[m]] for m in counters.metrics]
    group_res = np.asarray([metric_res[m] for m in counters.metric.tolist()], dtype=np.int64)
    return (
        torch.as_tensor(obs.job, device=device),
        torch.as_tensor(obs.co, device=device),
        torch.as_tensor(obs.share, dtype=dt, device=device),
        torch.as_tensor(np.log(obs.speed), dtype=dt, device=device),
        *member_slots(torch.as_tensor(counters.members, dtype=dt, device=device)),
        torch.as_tensor(counters.metric, device=device),
        torch.as_tensor(group_res, device=device),
        torch.as_tensor(counters.n, dtype=dt, device=device),
        torch.as_tensor(counters.mean, dtype=dt, device=device),
        torch.as_tensor(counters.ssd, dtype=dt, device=device),
    )


def _initial_demand(
    counters: Counters, n_jobs: int, resources: Sequence[str], hyper: Hyper, seed: int
) -> torch.Tensor:
    """Log demand at the isolated counters where a job has them, scattered elsewhere.

    Entries without counters start at the prior centre plus seeded noise (sd 0.5): identical
    starting points would make the resource dimensions exchangeable, and their gradients
    identical, so the fit could never tell them apart.
    """
    rng = np.random.default_rng(seed)
    init = hyper.demand_loc + 0.5 * rng.standard_normal((n_jobs, len(resources)))
    for g, j, r in counters.solo_reads(n_jobs, resources):
        init[j, r] = math.log(min(max(float(counters.mean[g]), 0.02), 0.95))
    return torch.as_tensor(init, dtype=torch.float64)


def _check_device(device: object) -> torch.device:
    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str):
        raise InputError(f"device must be 'cpu' or 'cuda' (or a torch.device), not {device!r}")
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise InputError(f"device must be cpu or cuda, not {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device {device!r} asked for, but torch sees no CUDA GPU")
    return torch.device(device)


@dataclasses.dataclass(frozen=True)
class _Run:
    """One SVI run: its guide's ``(loc, scale)`` per site, its losses, whether it converged."""

    posterior: dict[str, tuple[torch.Tensor, torch.Tensor]]
    losses: list[float]
    stopped_early: bool


def restart_seed(seed: int, k: int) -> int:
    """The seed of restart ``k`` of a fit seeded ``seed``: ``seed`` itself for the first (one
    restart is the plain fit), then a hash of ``(seed, k)``.

    >>> restart_seed(7, 0)
    7
    >>> restart_seed(7, 1) == restart_seed(7, 1) != restart_seed(8, 1)
    True
    """
    if k == 0:
        return seed
    return int(np.random.SeedSequence([seed, k]).generate_state(1, np.uint32)[0])


@contextlib.contextmanager
def _svi_settings(dev: torch.device) -> Iterator[None]:
    """What every SVI run here runs under: the RNG of the CPU and of ``dev`` forked (restored
    after), module-local parameters (the net and guide built inside keep theirs), Pyro's
    validation off, and Pyro's NaN warning silenced.

    Validation is off because Pyro's and torch's per-sample support and argument checks cost a
    quarter of every step on Lucid (measured: 150 steps 3.6-4.1 s against 5.0-5.2 s, the same
    losses), and guard nothing here: the inputs are checked when the observations are built,
    and a non-finite loss raises (:class:`_Schedule`), so Pyro's own "Encountered NaN" warning
    (issued whatever the validation setting) would only print a second line.
    """
    with (
        torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []),
        pyro.settings.context(module_local_params=True),
        pyro.validation_enabled(False),
        warnings.catch_warnings(),
    ):
        warnings.filterwarnings("ignore", message="Encountered NaN", category=UserWarning)
        yield


def _start(
    net_args: tuple[Any, ...], init_demand: torch.Tensor, seed: int, lr: float, steps: int
) -> tuple[InterferenceNet, _Normal, _SVI]:
    """The net, guide and optimiser of one SVI run from a start seeded by ``seed``, before
    its first step; under :func:`_svi_settings`, with the RNG seeded by the caller."""
    dev = init_demand.device
    net = InterferenceNet(*net_args)
    hyper, rank = net.hyper, net.rank
    pair_init: dict[str, torch.Tensor] = {}
    if rank > 0:
        # Bilinear factors at zero are a saddle (each one's gradient is the other): start
        # them small and scattered, seeded.
        rng = np.random.default_rng([seed, 1])
        pair_init = {
            "pair_u": torch.as_tensor(
                0.05 * rng.standard_normal((net.n_jobs, rank)), dtype=torch.float64, device=dev
            ),
            "pair_w": torch.as_tensor(
                0.5 * rng.standard_normal((net.n_jobs, rank)), dtype=torch.float64, device=dev
            ),
            "pair_scale": torch.full(
                (rank,), math.exp(hyper.pair_scale_loc), dtype=torch.float64, device=dev
            ),
        }
    guide = _Normal(
        net,
        init_loc_fn=init_to_value(
            values={
                "log_demand": init_demand,
                "demand_mu": torch.full_like(init_demand[0], hyper.demand_loc),
                "demand_sd": torch.full_like(init_demand[0], math.exp(hyper.demand_scale_loc)),
                "sens_eps": torch.zeros_like(init_demand),
                "log_intensity": torch.zeros_like(init_demand),
                **pair_init,
            },
            fallback=init_to_median(num_samples=15),
        ),
        init_scale=0.05,
    )
    # JitTrace_ELBO reads parameters from the global store, which module-local parameters
    # bypass, so the plain ELBO it is.
    return net, guide, _SVI(net, guide, lr, steps)


def _svi(
    net_args: tuple[Any, ...],
    tensors: tuple[torch.Tensor, ...],
    init_demand: torch.Tensor,
    *,
    seed: int,
    steps: int,
    lr: float,
    min_steps: int,
    rel_tol: float,
    scale: int,
    name: str,
    bar: Any,
) -> _Run:
    """One SVI run of :func:`fit` from a start seeded by ``seed`` (see there for the schedule).

    ``net_args`` are :class:`InterferenceNet`'s arguments (the net is built here, under
    ``module_local_params``); ``init_demand`` the log demand it starts from.
    """
    dev = tensors[0].device
    with _svi_settings(dev):
        torch.manual_seed(seed)
        net, guide, svi = _start(net_args, init_demand, seed, lr, steps)
        rule = _Schedule(steps, min_steps, rel_tol, scale, name)
        for step in range(steps):
            action = rule.record(step, svi.step(*tensors), bar)
            if action == "anneal":
                svi.scale_lr(0.1)
            elif action == "stop":
                break
        posterior = _guide_posterior(guide, net)
    return _Run(posterior, rule.losses, rule.stopped_early)


def _svi_batch(
    net_args: tuple[Any, ...],
    tensors: tuple[torch.Tensor, ...],
    init_demands: Sequence[torch.Tensor],
    *,
    seeds: Sequence[int],
    steps: int,
    lr: float,
    min_steps: int,
    rel_tol: float,
    scale: int,
    name: str,
    bar: Any,
) -> list[_Run]:
    """The SVI runs of :func:`_svi` from ``seeds`` (with ``init_demands``), stepped together.

    Each run's first step is its own, through Pyro as in :func:`_svi` (it creates the guide's
    parameters); from the second on, :class:`_BatchSVI` steps every run still going in one
    pass (each with its own normals, learning rate and stopping rule), which costs little
    more than one run's step where the tensors are small (four on Gavel's data: the log
    joint and its gradient 1.3 times one run's). Each run is then :func:`_svi`'s
    from its seed up to rounding: the same draws and updates, with sums and products over
    the batch summed in another order.
    """
    dev = tensors[0].device
    with _svi_settings(dev):
        starts = []
        for seed, init_demand in zip(seeds, init_demands, strict=True):
            torch.manual_seed(seed)
            net, guide, svi = _start(net_args, init_demand, seed, lr, steps)
            rule = _Schedule(steps, min_steps, rel_tol, scale, name)
            rule.record(0, svi.step(*tensors), bar)
            gen = torch.Generator(device=dev)
            gen.set_state(
                torch.cuda.get_rng_state(dev) if dev.type == "cuda" else torch.get_rng_state()
            )
            starts.append((net, guide, svi, rule, gen))
        batch = _BatchSVI([svi for _, _, svi, _, _ in starts], [g for *_, g in starts])
        going = list(range(len(starts)))
        for step in range(1, steps):
            if not going:
                break
            losses = batch.step(*tensors)
            for k in list(going):
                action = starts[k][3].record(step, losses[k], bar)
                if action == "anneal":
                    batch.scale_lr(k, 0.1)
                elif action == "stop":
                    batch.store(k)
                    going.remove(k)
        for k in going:
            batch.store(k)
        return [
            _Run(_guide_posterior(guide, net), rule.losses, rule.stopped_early)
            for net, guide, _, rule, _ in starts
        ]


class _BatchSVI:
    r"""Several :class:`_SVI` runs of one net stepped together, after each one's first step.

    Every site's location is stacked over the runs (``(B, *shape)``) and the sites' stacks are
    laid end to end in one flat tensor, as :class:`_FlatGuide` lays one run's; the same for
    the unconstrained scales and for Adam's moments. A step draws each run's normals from its
    own generator (site by site, as :meth:`_FlatGuide.draw` draws them from the global one),
    scores all runs' draws in one pass of the story
    (:meth:`~interplace.model._net.InterferenceNet.log_joint_parts` with ``batch``),
    differentiates the sum of the runs' negative ELBOs as :func:`_minus_elbo_backward`
    does (each run's parameters get their own run's gradient) and applies
    :class:`_SVI`'s update with each run's learning rate: the update's last line,
    :math:`\theta \leftarrow \theta + (-\eta_t\, m) / (\sqrt{v} + 10^{-8})` with
    :math:`\eta_t` the run's step size, is taken over the flat tensors as ``torch.addcdiv``
    takes it per run (a product, a quotient, a sum: the same numbers), with each entry's
    run's step size. So a fit is the same bit for bit as with one stacked tensor per
    parameter, and a step costs a few operations for the guide where it cost a few per site
    and per run (checked on Gavel V100 and K80 fits). :meth:`store` writes a run's
    parameters back into its own guide.
    """

    def __init__(self, runs: Sequence[_SVI], generators: Sequence[torch.Generator]) -> None:
        first = runs[0]
        if any(not r.params or r.t != first.t for r in runs):
            raise RuntimeError("batched SVI runs must each have taken their first step")
        self.runs, self.generators = list(runs), list(generators)
        self.model = first.model
        self.lr = [r.lr for r in runs]
        self.lrd, self.t = first.lrd, first.t
        index = {id(p): i for i, p in enumerate(first.params)}
        guide = first.guide
        if guide._sites is None:
            raise RuntimeError("the guide has not run")
        self.names = [name for name, *_ in guide._sites]
        # Each site's location's and scale's index in a run's parameters.
        self.parts = (
            [index[id(getattr(guide.locs, name + "_unconstrained"))] for name in self.names],
            [index[id(getattr(guide.scales, name + "_unconstrained"))] for name in self.names],
        )
        self.to_scale = transform_to(guide.scale_constraint)
        n = len(runs)
        self.shapes = [(n, *first.params[i].shape) for i in self.parts[0]]
        self.sizes = [n * first.params[i].numel() for i in self.parts[0]]

        def flat(of: Callable[[_SVI], list[torch.Tensor]], part: list[int]) -> torch.Tensor:
            # Each site's stack over the runs, the sites end to end.
            return torch.cat([torch.stack([of(r)[i] for r in runs]).reshape(-1) for i in part])

        with torch.no_grad():
            self.params = [flat(lambda r: r.params, part).requires_grad_() for part in self.parts]
            self.m = [flat(lambda r: r.m, part) for part in self.parts]
            self.v = [flat(lambda r: r.v, part) for part in self.parts]
        # Buffers and views made once (the updates below are in place): the normals, each
        # site's run by run, and each entry's run (for its step size).
        self.eps = torch.empty_like(self.params[0]).detach()
        self.eps_runs = [
            list(zip(e.view(shape).unbind(0), self.generators, strict=True))
            for e, shape in zip(self.eps.split(self.sizes), self.shapes, strict=True)
        ]
        self.run_of = torch.cat([
            torch.arange(n, device=self.eps.device).repeat_interleave(size // n)
            for size in self.sizes
        ])

    def step(self, *args: torch.Tensor) -> list[float]:
        """One gradient step of every run; returns each run's negative ELBO."""
        n = len(self.runs)
        loc, raw = self.params
        for eps_runs in self.eps_runs:
            for one, g in eps_runs:  # each run's normals from its own generator, site by site
                one.normal_(generator=g)
        z, density = _reparametrised(loc, raw, self.eps, self.sizes, self.to_scale)
        log_q = torch.zeros(n, dtype=z.dtype, device=z.device).index_add(0, self.run_of, density)
        value = z.detach().requires_grad_()
        latent = _site_views(value, self.names, self.sizes, self.shapes)
        parts = self.model.log_joint_parts(latent, *args, batch=True)
        objective = _minus_elbo_backward(z, log_q, value, *parts)
        grads = [p.grad for p in self.params if p.grad is not None]
        if len(grads) != len(self.params):
            raise RuntimeError("a guide parameter got no gradient from the ELBO")
        with torch.no_grad():
            self.lr = [lr * self.lrd for lr in self.lr]
            self.t += 1
            _SVI.moments(grads, self.m, self.v)
            sizes = torch.tensor([-_SVI.step_size(lr, self.t) for lr in self.lr],
                                 dtype=loc.dtype, device=loc.device).index_select(0, self.run_of)
            for p, m, v in zip(self.params, self.m, self.v, strict=True):
                denom = v.sqrt().add_(_SVI.EPS)
                p.add_((sizes * m).div_(denom))  # addcdiv's p + size * m / denom
        for p in self.params:
            p.grad = None
        out: list[float] = objective.tolist()
        return out

    def scale_lr(self, k: int, factor: float) -> None:
        """Multiply run ``k``'s current learning rate by ``factor``."""
        self.lr[k] *= factor

    def store(self, k: int) -> None:
        """Write run ``k``'s parameters into its own guide."""
        mine = self.runs[k].params
        with torch.no_grad():
            for flat, part in zip(self.params, self.parts, strict=True):
                for i, piece, shape in zip(part, flat.split(self.sizes), self.shapes,
                                           strict=True):
                    mine[i].copy_(piece.view(shape)[k])


def _guide_posterior(
    guide: _Normal, net: InterferenceNet
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The guide's ``(loc, scale)`` per site, on the CPU in float64."""
    return {
        site: (
            getattr(guide.locs, site).detach().to("cpu", torch.float64).clone(),
            getattr(guide.scales, site).detach().to("cpu", torch.float64).clone(),
        )
        for site in site_names(net.family is not None, net.rank > 0)
    }


class _Schedule:
    """The stopping rule of one SVI run (:func:`fit`): every :data:`_WINDOW` steps, once
    ``min_steps`` have run, a window's mean loss that fell by less than ``rel_tol`` times
    ``scale`` is a plateau; at the first the learning rate drops to a tenth for two more
    windows (settling the noisy iterates), then the run stops."""

    def __init__(self, steps: int, min_steps: int, rel_tol: float, scale: int, name: str) -> None:
        self.steps, self.min_steps, self.rel_tol, self.scale = steps, min_steps, rel_tol, scale
        self.name = name
        self.losses: list[float] = []
        self.prev = math.inf
        self.annealed = False
        self.anneal_until = steps
        self.stopped_early = False

    def record(self, step: int, loss: float, bar: Any) -> str | None:
        """Take step ``step``'s loss (0-based); ``"anneal"`` when the learning rate is to drop,
        ``"stop"`` when the run is done, else None. A non-finite loss raises InputError."""
        if not math.isfinite(loss):
            raise InputError(
                f"{self.name}: the fit diverged (ELBO loss {loss}) at step {step}; "
                "check the data for extreme values, or lower the learning rate (--lr, fit(lr=...))"
            )
        self.losses.append(loss)
        bar.update(1)
        if (step + 1) % _WINDOW:
            return None
        cur = float(np.mean(self.losses[-_WINDOW:]))
        bar.set_postfix(loss=f"{cur / self.scale:.4f}")
        action = None
        if step + 1 >= self.min_steps and self.prev - cur < self.rel_tol * self.scale:
            if not self.annealed:
                self.annealed = True
                self.anneal_until = step + 1 + 2 * _WINDOW
                action = "anneal"
            elif step + 1 >= self.anneal_until:
                self.stopped_early = step + 1 < self.steps
                bar.update(self.steps - step - 1)
                return "stop"
        self.prev = cur
        return action


def _run_all(
    tasks: Sequence[Any],
    run_here: Callable[[Any, Any], R],
    run_task: Callable[[Any], R],
    workers: int,
    on_cpu: bool,
    steps: int,
    desc: str,
    progress: bool,
) -> list[R]:
    """``tasks`` run one after another here (``run_here(task, bar)``) or, with ``workers`` >
    1 on the CPU, in that many spawned processes (``run_task(task)``), torch on one intra-op
    thread either way; a tqdm bar of ``steps`` per task."""
    with _one_thread_bar(steps * len(tasks), desc, progress) as bar:
        if min(workers, len(tasks)) <= 1 or not on_cpu:
            return [run_here(task, bar) for task in tasks]
        return spawn_map(run_task, tasks, workers, done=lambda: bar.update(steps))


@contextlib.contextmanager
def _one_thread_bar(total: int, desc: str, progress: bool) -> Iterator[Any]:
    """torch on one intra-op thread (restored after) and a tqdm bar of ``total`` steps."""
    threads = torch.get_num_threads()
    # The tensors are small: one intra-op thread is over 10x faster than a contended pool
    # (measured: a 67x5 @ 5x5 matmul takes 16 ms with 2 busy threads, 2 us with one).
    torch.set_num_threads(1)
    try:
        with tqdm(total=total, desc=desc, unit="step", disable=not progress,
                  leave=False) as bar:
            yield bar
    finally:
        torch.set_num_threads(threads)


def _sample(
    net_args: tuple[Any, ...],
    tensors: tuple[torch.Tensor, ...],
    posterior: dict[str, tuple[torch.Tensor, torch.Tensor]],
    components: int,
    settings: Nuts,
    seed: int,
    workers: int,
    progress: bool,
    name: str,
) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], dict[str, Any]]:
    """:func:`fit`'s NUTS part: the chains of ``settings`` on ``InterferenceNet(*net_args)``
    from the SVI ``posterior``'s components, pooled (:mod:`interplace.model._nuts`)."""
    tasks = [
        (net_args, tensors, start_values(posterior, components, c % components), settings,
         restart_seed(seed, c), name)
        for c in range(settings.chains)
    ]

    def here(
        task: tuple[tuple[Any, ...], tuple[torch.Tensor, ...], dict[str, torch.Tensor], Nuts,
                    int, str],
        bar: Any,
    ) -> Chain:
        return run_chain(*task, bar=bar)

    chains = _run_all(
        tasks, here, chain_task, workers,
        tensors[0].device.type == "cpu", settings.warmup + settings.draws, "nuts", progress,
    )
    out, info = pooled(chains)
    info = {**dataclasses.asdict(settings), **info}
    return out, info


def fit(
    data: CoLocationData,
    *,
    seed: int = 0,
    steps: int = 3000,
    topology: Topology | None = None,
    device: str = "cpu",
    lr: float = 0.03,
    resources: Sequence[str] = DEFAULT_RESOURCES,
    full_scale: Mapping[str, float] | None = None,
    hyper: Hyper | None = None,
    min_steps: int = 600,
    rel_tol: float = 1e-3,
    progress: bool = False,
    mode: str | None = None,
    family: FamilySpec | None = None,
    rank: int = DEFAULT_RANK,
    measured: bool = True,
    restarts: int | None = None,
    temper: float | None = None,
    workers: int = 1,
    cold_scale: bool = True,
    nuts: Nuts | None = None,
    lift_ceilings: bool | None = None,
) -> InterferenceModel:
    r"""Fit the interference model of :mod:`interplace.model` to ``data`` by SVI.

    The guide is a mean-field normal (Pyro's ``AutoNormal``) over every latent, initialised at
    the demands that the isolated-run counters suggest. Optimisation is Adam with gradient
    clipping, at most ``steps`` steps. After ``min_steps``, the first time the mean ELBO loss
    of the last 100 steps improves on the previous 100 by less than ``rel_tol`` times the
    number of observations and counter groups, the learning rate drops tenfold (to settle the
    noisy iterates), and the fit stops at the next such plateau at least 200 steps later.
    Pyro parameters live in the guide module (``module_local_params``), never in Pyro's
    global store, and all randomness comes from a private torch RNG state seeded by
    ``seed``: the same data and seed give the same model on the same machine and build (on a
    CPU whose vectorised or BLAS kernels round otherwise, SVI carries the last-bit differences
    into another fit, as another seed would; ``info["build"]`` records what decides it,
    :func:`build_info`). SVI runs with Pyro's validation switched off (and restored after):
    the inputs are checked before, and a non-finite loss raises :class:`InputError`. Each step
    computes what Pyro's ``SVI`` with ``AutoNormal``, ``ClippedAdam`` and ``Trace_ELBO`` would,
    from the same draws, with none of Pyro's per-site tracing after the first step: the ELBO
    is the guide's draw scored by the model's
    :meth:`~interplace.model._net.InterferenceNet.log_joint` (``_SVI``, ``_Normal``; equal to
    Pyro's up to rounding, and half the time a step).

    ``mode`` picks the runs of one sharing mode (:func:`~interplace.model._data.select_mode`):
    data that mixes ``timeslice`` and ``mps`` runs is refused without it.

    ``family`` groups jobs into families (the same network at other batch sizes, with or
    without mixed precision): a column of the runs table, such as Lucid's ``model``, or a map
    from job to family name (:func:`~interplace.model._data.job_families`). Jobs of one family
    then share prior centres of their latents (the family level in :mod:`interplace.model`),
    which is what lets a job with only an isolated run borrow from its relatives; a job
    without a family keeps the plain prior. ``info["family"]`` records the column, or
    ``"mapping"``.

    ``rank`` is the largest rank of the low-rank pair term (:mod:`interplace.model`); 0 fits
    the mechanism alone. Each component has its own shrinkage scale, so components the data do
    not support shrink towards zero.

    ``measured`` (default) adds the second stage of :mod:`interplace.model._cells`: each pair
    measured alone on one device gets its own effect, so the model's prediction of a measured
    pair follows the measurement (up to the measurement noise: ``hyper.measure_noise``, or the
    spread of repeated pairs where wider) instead of being shrunk to what the structure
    explains, and a pair never measured carries the structure's misfit in its interval, its
    expected part completed from the measured pairs (with ``family``, from what the two jobs'
    families' measured pairs share too: ``info["completion"]["choice"]``). A job never
    measured on one side of a pair (as victim, as co-runner) borrows that side's effects from
    its family's measured members, or else from the five measured jobs nearest by isolated
    counters (``info["completion"]["borrowed_rows"]`` and ``["borrowed_columns"]`` count
    them). ``info["isolated_readings"]`` keeps each job's log
    isolated readings per resource, so that a job added later from its counters
    (:func:`~interplace.placement._cold.with_cold_jobs`) finds its nearest fitted jobs and
    borrows the same way. False keeps the structure alone (the model before version 5).
    ``lift_ceilings`` (default ``None``: with ``measured``) raises the speed alone of a job
    measured faster next to a co-runner than the structure puts it alone, to its fastest
    measured pair's target, so that no measured pair is out of the model's reach while a
    co-runner still never speeds a job up (*Ceilings* in :mod:`interplace.model._cells`; the
    lifts, on the log scale, in ``info["ceiling_lift"]``, by job), each pair never measured
    keeping the predictive variance it had without the lift (*Intervals* there). Measured on
    Lucid's ten random splits (``docs/benchmarks.md``, "Ceilings lifted to the fastest
    measured pair"): held-out MAE 7% lower (median per split). False keeps the stage of
    before (every ceiling at the structure's speed alone).

    ``restarts`` :math:`K` runs the SVI above :math:`K` times, the first from ``seed`` and the
    others from seeds hashed from ``(seed, k)`` (:func:`restart_seed`; each its own
    initial scatter of demands and pair factors), and keeps the equal-weight mixture of the
    :math:`K` mean-field posteriors (``components`` of the model; the second stage is computed
    from the mixture's draws). Mean-field SVI finds one mode, and on Gavel's data different
    seeds find different ones (a split's held-out MAE moves by up to a fifth with the seed
    alone); the mixture averages them, as pooled NUTS chains do. The restarts are stepped
    together (after each one's first step, one pass over the network scores every restart's
    draw, each with its own normals, learning rate and stopping rule): on Gavel's data the
    log joint and its gradient for four cost 1.3 times one restart's, and the demo's fit of
    four restarts takes 0.42 of their time run one by one on one core (``docs/benchmarks.md``,
    "Restarts stepped together"). Each is the restart run alone up to rounding, which SVI's
    steps amplify: the same fit in law, not bit for bit.
    ``temper`` :math:`\lambda` fits the power posterior :math:`p(\theta)\,p(y \mid
    \theta)^{\lambda}`: both likelihoods, speeds and counters, count :math:`\lambda` times,
    which narrows each component (:math:`\lambda > 1`) so that the mixture of several is not
    wider than the data allow. ``restarts=1, temper=1`` is the plain fit, bit for bit.

    By default (``None``) a fit on data of at most :data:`MIXTURE_MAX_SIZE` co-located
    observations plus counter groups pools :data:`MIXTURE_RESTARTS` restarts at ``temper``
    :data:`MIXTURE_TEMPER`, and larger data gets one plain fit (``temper`` 1 unless given).
    Measured (``docs/benchmarks.md``): on Gavel (about 450 observations) the mixture's held-out
    MAE is 8-19% lower than one fit's (medians over ten splits per GPU, with and without
    families; lower on 58 of 60 splits) and its 90% intervals are calibrated (one fit
    over-covers K80); a single tempered fit under-covers. On Lucid (about 4,000)
    neither the mixture nor tempering changed the accuracy, and one fit keeps its fit time
    under 30 s on two cores. ``info["restarts"]`` and ``info["temper"]`` record what ran.
    ``workers`` > 1 runs NUTS chains (``nuts``, below) in that many processes (at most one per
    chain; spawned interpreters, each on one torch thread as the fit itself): the same draws,
    bit for bit, in about ``1 / workers`` of the wall time on as many free cores, plus a few
    seconds to start each worker. A script that calls it so must guard its top level with
    ``if __name__ == "__main__":`` (Python's rule for spawned processes). The SVI restarts
    always run together in this process, so ``workers`` never changes the model; with
    ``device`` ``cuda`` the chains run one after another.

    ``cold_scale`` (default) moves the demand of each job without co-located runs onto the
    scale the fitted jobs' demand has against their counters, keeping its pressure
    (:mod:`interplace.model._coldscale`; a cut after SVI, before the second stage), so that a
    cold job's sensitivity is read as a fitted job's with its counters would be; with
    families, a cold job whose family has a job with co-located runs keeps its intensity, the
    family's centre, which is already on that scale. Measured on Lucid's cold-start splits
    (``docs/benchmarks.md``, ten seeds): median MAE 0.0678 -> 0.0639 without families, 0.0651
    -> 0.0607 with them (and with the lift since, 0.0581 -> 0.0535 for leaving the family's
    intensity alone); random splits unchanged.
    ``info["demand_gap"]`` and ``info["cold_demand_shift"]`` record the warm median gaps and
    the shifts per resource (and component); False leaves the posterior as SVI found it. A
    job added later from its counters is given the same shift, and its readings weigh as
    ``info["isolated_samples"]`` samples (the median count of the fit's isolated counter
    groups) unless the caller says otherwise.

    ``nuts`` (a :class:`~interplace.model.Nuts`) replaces the SVI posterior by draws of the
    model's exact posterior, for offline fits that can afford it: ``nuts.chains`` NUTS chains
    on the same network, untempered, started at the SVI components' medians (chain :math:`c`
    at component :math:`c \bmod K`) and seeded from ``(seed, c)``, their kept draws pooled
    into a model of ``chains * draws`` point-mass components (:mod:`interplace.model._nuts`);
    the cold-demand step and the second stage then run on those draws as on SVI's. Unless
    ``restarts`` or ``temper`` is given, the SVI start is then one untempered restart per
    chain. ``workers`` runs the chains in parallel too. ``info["nuts"]`` records the settings,
    each chain's divergent transitions, mean acceptance probability, step size, time and
    median speed noise, and the chains' split R-hat of the speed noise (near 1 when they
    agree). On the synthetic recovery sets the pooled chains cover the true pair effects at the
    nominal rate (0.88 and 0.94 of 90% intervals, where SVI covers 0.40 and 0.55); on Gavel
    V100 the held-out MAE is 4-14% below the SVI fit's (three splits; K80 1.5% below, P100 2%
    above, one split each) at 12-17 times its time, and the chains disagree (R-hat of the
    speed noise 1.6-4.1): ``docs/benchmarks.md``, "NUTS as a fit option, opt-in".

    ``resources`` names the model's resource dimensions (default
    :data:`~interplace.model.DEFAULT_RESOURCES`); a name outside them is a resource of the
    user's own, which no counter measures (:data:`~interplace.model.METRIC_RESOURCE`) and no
    topology shares across GPUs: its demands are learned from co-located speeds alone (and a
    misspelt default name drops that resource's counters: ``model.metrics`` lists the ones
    read). ``topology`` is needed only when a run places its jobs on different devices (its
    :meth:`~interplace.topology.Topology.domains` decide which resources they share). ``device``
    is ``cpu`` or ``cuda``; the returned model always lives on the CPU. ``progress`` shows a
    tqdm bar on stderr.

    >>> from interplace.datasets import synthetic
    >>> m = fit(synthetic(4, seed=0, samples_per_run=4), seed=0, steps=100, min_steps=100)
    >>> m.jobs
    ('job0', 'job1', 'job2', 'job3')
    >>> m2 = fit(synthetic(4, seed=0, samples_per_run=4), seed=0, steps=100, min_steps=100,
    ...          restarts=2, temper=1.5)
    >>> m2.components, m2.posterior["log_demand"][0].shape
    (2, torch.Size([2, 4, 5]))
    """
    if not isinstance(data, CoLocationData):
        raise InputError(f"fit needs CoLocationData, not {type(data).__name__}")
    check_seed(seed)
    check_count(steps, "steps")
    check_count(min_steps, "min_steps", low=0)
    if not (is_real(lr) and lr > 0):
        raise InputError(f"lr must be a finite number > 0, not {lr!r}")
    if not (is_real(rel_tol) and rel_tol >= 0):
        raise InputError(f"rel_tol must be a finite number >= 0, not {rel_tol!r}")
    if hyper is not None and not isinstance(hyper, Hyper):
        raise InputError(f"hyper must be a Hyper, not {type(hyper).__name__}")
    if topology is not None and not isinstance(topology, Topology):
        raise InputError(f"topology must be a Topology (interplace.topology.load gives one), "
                         f"not {type(topology).__name__}")
    if full_scale is not None and not isinstance(full_scale, Mapping):
        raise InputError(f"full_scale must map metric names to numbers, not {full_scale!r}")
    for metric, scale in (full_scale or {}).items():
        if not (is_real(scale) and scale > 0):
            raise InputError(f"full_scale of {metric!r} must be a finite number > 0, "
                             f"not {scale!r}")
    if isinstance(resources, str) or not isinstance(resources, Sequence):
        raise InputError(f"resources must be a sequence of resource names, not {resources!r}")
    resources = tuple(resources)
    if not resources or len(set(resources)) != len(resources):
        raise InputError(f"resources must be distinct and at least one, not {resources!r}")
    bad = [r for r in resources if not isinstance(r, str) or not r.strip() or r != r.strip()]
    if bad:  # a name is saved as text and named in Query.shares: 1 came back as "1"
        raise InputError(f"resource names must be non-empty text, not {bad[0]!r}")
    check_count(rank, "rank", low=0)
    if not isinstance(measured, bool):
        raise InputError(f"measured must be True or False, not {measured!r}")
    if restarts is not None:
        check_count(restarts, "restarts")
    if temper is not None and not (is_real(temper) and temper > 0):
        raise InputError(f"temper must be a finite number > 0, not {temper!r}")
    check_count(workers, "workers")
    if not isinstance(cold_scale, bool):
        raise InputError(f"cold_scale must be True or False, not {cold_scale!r}")
    if lift_ceilings is not None and not isinstance(lift_ceilings, bool):
        raise InputError(f"lift_ceilings must be True, False or None, not {lift_ceilings!r}")
    if lift_ceilings and measured is False:
        raise InputError("lift_ceilings lifts the second stage's ceilings: it needs measured=True")
    lift_ceilings = measured if lift_ceilings is None else lift_ceilings
    if nuts is not None and not isinstance(nuts, Nuts):
        raise InputError(f"nuts must be a Nuts (or None), not {type(nuts).__name__}")
    hyper = hyper or Hyper()
    dev = _check_device(device)
    data = select_mode(data, mode)
    jobs = tuple(sorted(data.runs["job"].astype(str).unique().tolist()))
    obs = observations_from_runs(data, jobs, resources, _share_of(data, topology))
    counters = counters_from_samples(data, jobs, full_scale, resources)
    if len(obs) == 0 and len(counters) == 0:
        raise InputError(f"{data.name}: nothing to fit: no co-located run and no counter samples")
    families = None if family is None else job_families(data, jobs, family)
    if restarts is None:
        if nuts is not None:
            restarts = nuts.chains
        else:
            restarts = MIXTURE_RESTARTS if len(obs) + len(counters) <= MIXTURE_MAX_SIZE else 1
    if temper is None:
        temper = 1.0 if nuts is not None or restarts == 1 else MIXTURE_TEMPER
    temper = float(temper)
    tensors = _tensors(obs, counters, resources, dev)
    fam_t, n_fam, fam_idx = None, 0, family_codes(families)
    if families is not None:
        idx, n_fam = family_index(families)
        fam_t = torch.as_tensor(idx, device=dev)
    start = time.perf_counter()
    net_args = (len(jobs), len(resources), len(counters.metrics), hyper, fam_t, n_fam, rank,
                temper)
    seeds = [restart_seed(seed, k) for k in range(restarts)]
    init_demands = [
        _initial_demand(counters, len(jobs), resources, hyper, seed_k).to(dev) for seed_k in seeds
    ]
    schedule: dict[str, Any] = {
        "steps": steps, "lr": lr, "min_steps": min_steps, "rel_tol": rel_tol,
        "scale": max(len(obs) + len(counters), 1), "name": data.name,
    }
    with _one_thread_bar(steps * restarts, "fit", progress) as bar:
        if restarts == 1:
            runs = [_svi(net_args, tensors, init_demands[0], seed=seeds[0], bar=bar,
                         **schedule)]
        else:
            runs = _svi_batch(net_args, tensors, init_demands, seeds=seeds, bar=bar, **schedule)
    if restarts == 1:
        posterior = runs[0].posterior
    else:
        posterior = {
            name: (
                torch.stack([r.posterior[name][0] for r in runs]),
                torch.stack([r.posterior[name][1] for r in runs]),
            )
            for name in runs[0].posterior
        }
    svi_seconds = time.perf_counter() - start
    components = restarts
    nuts_info: dict[str, Any] | None = None
    if nuts is not None:
        posterior, nuts_info = _sample(
            (*net_args[:-1], 1.0), tensors, posterior, restarts, nuts, seed, workers,
            progress, data.name,
        )
        components = nuts.total
    seconds = time.perf_counter() - start
    final_losses = [float(np.mean(r.losses[-_WINDOW:])) for r in runs]
    with_pairs = sorted({jobs[j] for j in obs.job.tolist()})
    gaps: dict[str, list[float]] = {}
    shifts: dict[str, list[float]] = {}
    readings, below = isolated_readings(counters, len(jobs), resources, READING_FLOOR)
    if cold_scale:
        warm = np.zeros(len(jobs), dtype=bool)
        warm[np.unique(obs.job)] = True
        posterior, gaps, shifts = align_cold_demand(
            posterior, readings, warm, resources, components,
            warm_families(fam_idx, warm),
        )
    with_counters = sorted({jobs[j] for _, j in counters.solo(len(jobs))})
    cross_device = 0
    if "device" in data.runs.columns:
        spans = data.runs.dropna(subset=["device"]).groupby("run_id")["device"].nunique()
        cross_device = int((spans > 1).sum())
    info = {
        "data": data.name,
        "seed": seed,
        "steps": sum(len(r.losses) for r in runs),
        "max_steps": steps,
        "stopped_early": all(r.stopped_early for r in runs),
        "final_loss": float(np.mean(final_losses)),
        "restarts": restarts,
        "temper": temper,
        "lr": lr,
        "fit_seconds": seconds,
        "observations": len(obs),
        "counter_groups": len(counters),
        "jobs_with_pairs": with_pairs,
        "jobs_with_isolated_counters": with_counters,
        "device": str(dev),
        "mode": mode,
        "rank": rank,
        "cross_device_runs": cross_device,
        "family": None if family is None else family if isinstance(family, str) else "mapping",
        "cold_scale": cold_scale,
        "lift_ceilings": lift_ceilings,
        "ceiling_lift": {},
        "demand_gap": gaps,
        "cold_demand_shift": shifts,
        "isolated_readings": readings_map(readings, jobs, resources),
        "isolated_below_floor": below_map(below, jobs, resources),
        "isolated_samples": isolated_samples(counters, len(jobs)),
        "build": build_info(),
    }
    structure = InterferenceModel(
        jobs=jobs,
        resources=resources,
        metrics=counters.metrics,
        full_scale=counters.full_scale,
        hyper=hyper,
        posterior=posterior,
        info=info,
        families=families,
        components=components,
    )
    if nuts_info is not None:
        info["nuts"] = nuts_info
        info["svi_seconds"] = svi_seconds
    if restarts > 1:
        info["restart_steps"] = [len(r.losses) for r in runs]
        info["restart_final_loss"] = final_losses
    if not measured:
        info["measured_pairs"] = 0
        return structure

    stage2 = time.perf_counter()
    model, lift, completion = with_second_stage(
        structure, obs, seed=seed, family=fam_idx, readings=readings,
        lift_ceilings=lift_ceilings, below=below,
    )
    info["ceiling_lift"] = {jobs[j]: float(lift[j]) for j in np.flatnonzero(lift > 0)}
    info["measured_pairs"] = 0 if model.measured is None else len(model.measured)
    info["completion"] = completion
    stage2_seconds = time.perf_counter() - stage2
    info["measured_seconds"] = stage2_seconds
    info["fit_seconds"] = seconds + stage2_seconds
    return model


_KERNEL_SETTINGS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")
"""Environment variables that choose the CPU kernels' code paths, and so a fit's last bits."""


def build_info() -> dict[str, Any]:
    """What a fit's numbers depend on beyond its data, seed and options: the versions of
    interplace, torch, Pyro and NumPy, the CPU instruction level torch's kernels run at
    (``cpu_capability``: ``AVX512``, ``AVX2``, ``DEFAULT``...), whether torch's BLAS is MKL,
    and any of :data:`_KERNEL_SETTINGS` that is set. Two fits with the same data, seed and
    options are the same bit for bit where these agree on the same CPU model; where the
    instruction level or the BLAS differs, vectorised functions and products round their
    last bit otherwise and SVI carries that into another fit (``docs/benchmarks.md``, "Fits
    differ by CPU"). :func:`fit` records it as ``info["build"]``.

    >>> sorted(build_info())
    ['cpu_capability', 'interplace', 'kernel_settings', 'mkl', 'numpy', 'pyro', 'torch']
    """
    return {
        "interplace": __version__,
        "torch": torch.__version__,
        "pyro": pyro.__version__,
        "numpy": np.__version__,
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "mkl": bool(torch.backends.mkl.is_available()),
        "kernel_settings": {k: os.environ[k] for k in _KERNEL_SETTINGS if k in os.environ},
    }


def _share_of(
    data: CoLocationData, topology: Topology | None
) -> dict[tuple[str, str], Sequence[str]] | None:
    """What each pair of ``data``'s devices shares on ``topology`` (None without either)."""
    if topology is None or "device" not in data.runs.columns:
        return None
    devices = [str(d) for d in data.runs["device"].dropna().unique().tolist()]
    return share_table(topology, devices)


def stage_inputs(
    structure: InterferenceModel, data: CoLocationData, *, topology: Topology | None = None,
) -> tuple[
    Observations, np.ndarray[Any, Any] | None, np.ndarray[Any, Any], np.ndarray[Any, Any]
]:
    """What :func:`fit` hands :func:`with_second_stage` for ``structure``, a fit of ``data``
    without measured pairs (``fit(data, ..., measured=False)``, with the same ``topology``):
    the co-located observations, the ``(J,)`` family indices (negative: none; None for a fit
    without families), the ``(J, R)`` log isolated readings and which of them lie below the
    counter kernel's floor (:func:`~interplace.model._coldscale.isolated_readings`). So the second
    stage can be added to one fitted structure in several ways, as :func:`fit` adds it:

    >>> from interplace.datasets import synthetic
    >>> data = synthetic(5, seed=0)
    >>> structure = fit(data, seed=0, steps=30, min_steps=30, restarts=1, measured=False)
    >>> obs, family, readings, below = stage_inputs(structure, data)
    >>> model, lift, _ = with_second_stage(structure, obs, seed=0, family=family,
    ...                                    readings=readings, below=below)
    >>> model.measured is not None and readings.shape == (5, len(structure.resources))
    True
    """
    data = select_mode(data, structure.info.get("mode"))
    jobs, resources = structure.jobs, structure.resources
    if sorted(data.runs["job"].astype(str).unique().tolist()) != list(jobs):
        raise InputError(f"{data.name}: not the jobs this structure was fitted on")
    obs = observations_from_runs(data, jobs, resources, _share_of(data, topology))
    counters = counters_from_samples(
        data, jobs, dict(zip(structure.metrics, structure.full_scale, strict=True)), resources
    )
    readings, below = isolated_readings(counters, len(jobs), resources, READING_FLOOR)
    return obs, family_codes(structure.families), readings, below


def with_second_stage(
    structure: InterferenceModel,
    obs: Observations,
    *,
    seed: int,
    family: np.ndarray[Any, Any] | None = None,
    readings: np.ndarray[Any, Any] | None = None,
    lift_ceilings: bool = True,
    below: np.ndarray[Any, Any] | None = None,
) -> tuple[InterferenceModel, np.ndarray[Any, Any], dict[str, Any]]:
    """``structure`` (a fit without measured pairs) with the second stage of
    :mod:`interplace.model._cells` computed from its ``MEASURED_DRAWS`` draws (seed ``seed``)
    for the observations ``obs`` it was fitted on, as :func:`fit` adds it: with
    ``lift_ceilings`` (the default, as :func:`fit`'s) the posterior's isolated-reference bias
    is shifted by each job's lift.
    Returns the model, the lifts ``(J,)`` (zeros without) and the completion's summary
    (:func:`~interplace.model._cells.measured_pairs`, less ``ceiling_lift``). ``family``:
    ``(J,)`` family indices (negative: none); ``readings``: ``(J, R)`` log isolated readings;
    ``below``: ``(J, R)`` the readings below the counter kernel's floor
    (:func:`~interplace.model._coldscale.isolated_readings`; None: none).
    """
    with one_blas_thread():
        pairs, completion = measured_pairs(
            obs, structure.draws(MEASURED_DRAWS, seed), structure.speed_noise(),
            structure.hyper.measure_noise, seed=seed, family=family, readings=readings,
            lift_ceilings=lift_ceilings, df=structure.hyper.speed_df,
            kernel_weight=structure.hyper.cold_kernel_weight,
            direct_weight=structure.hyper.direct_weight,
            kernel_readings=None if readings is None else floored(readings, below),
        )
    lift = np.asarray(completion.pop("ceiling_lift", np.zeros(len(structure.jobs))), dtype=float)
    if lift.any():
        loc, scale = structure.posterior["iso_bias"]
        shift = torch.as_tensor(lift, dtype=loc.dtype)
        posterior = {**structure.posterior, "iso_bias": (loc + shift, scale)}
        structure = dataclasses.replace(structure, posterior=posterior)
    return dataclasses.replace(structure, measured=pairs), lift, completion
