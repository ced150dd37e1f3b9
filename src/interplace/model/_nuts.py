r"""Exact inference for offline fits: NUTS chains on the fitted network, pooled.

The mean-field SVI of :func:`~interplace.model.fit` finds one mode of the posterior per
restart and, for the bilinear pair term, a factorised approximation of a curved ridge: on
Gavel V100 its fitted speed noise is 0.10 where the model's exact posterior puts it at
0.01-0.02, and its pair effects' 90% intervals cover about 60% of the truth on synthetic data
(``docs/benchmarks.md``, "Why the guide fails"). ``fit(nuts=Nuts(...))`` replaces the SVI
posterior by draws of the exact one: :math:`C` chains of the No-U-Turn sampler (Pyro's
``NUTS``, step size and a diagonal mass matrix adapted during the warm-up) on the *same*
network, untempered (:math:`p(\theta)\,p(y \mid \theta)`, whatever ``temper`` the SVI start
used), chain :math:`c` started at the posterior medians of SVI component :math:`c \bmod K` and
seeded by :func:`~interplace.model._fit.restart_seed` ``(seed, c)``. The :math:`C \times D`
kept draws are pooled with equal weight: single chains of this model settle in different
modes, and the pooled draws average them.

The pooled draws are stored as a mixture of :math:`C D` point masses (``components`` of the
model, each site's scale zero), interleaved so that component :math:`i` is draw
:math:`\lfloor i / C \rfloor` of chain :math:`i \bmod C`: any first :math:`S` of them, which is
what :meth:`~interplace.model.InterferenceModel.draws` takes for :math:`S \le C D`, hold the
chains in equal shares. Zero scales came with model format version 7.

It is slow: each NUTS step takes up to :math:`2^{\text{depth}} - 1` gradients of the log
joint (about 150-250 at depth 8), compiled once by ``torch.jit.trace`` (:func:`potential`:
2.1 ms a leapfrog step on Gavel V100's 26 jobs; on Pyro's own compiled potential 2.5 ms, and
4.6 ms a gradient uncompiled), so a chain of 200 warm-up and 200 kept draws took 5.5-6
minutes on one core for the 12 jobs of the synthetic recovery sets and 5-6.5 minutes for
Gavel's 26 jobs on Pyro's potential (about 9 uncompiled), about a sixth less on
:func:`potential`. The chains are independent, and
``fit(workers=N)`` runs them in :math:`N` processes: four chains on two cores, about 11 minutes
a Gavel fit. What it buys
(``docs/benchmarks.md``, "NUTS as a fit option, opt-in"): on synthetic data with a known
low-rank pair effect the pooled chains find its rank and cover the true effects at the
nominal rate, where the mean-field fit covers about half; on Gavel's measured data 4-14% of
held-out accuracy on V100 (K80 1.5%, P100 -2%), from chains that settle in different modes
(their split R-hat of the speed noise, ``info["nuts"]``, is 1.6-4.1 there, and each chain's
median noise is kept beside it).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyro
import torch
from pyro.infer import MCMC, NUTS
from pyro.ops.stats import split_gelman_rubin

from interplace.errors import InputError, check_count
from interplace.model._net import InterferenceNet, constrained, unconstrained

__all__ = ["Nuts"]

_MAX_DEPTH = 12
_JIT = callable(getattr(torch.jit, "trace", None))
_TRACER_WARNING: type[Warning] = getattr(torch.jit, "TracerWarning", UserWarning)


@dataclass(frozen=True)
class Nuts:
    """How :func:`~interplace.model.fit` samples the exact posterior (module docstring).

    ``chains`` independent chains, each with ``warmup`` adaptation steps (discarded) and
    ``draws`` kept draws; ``max_tree_depth`` bounds each step's trajectory at
    :math:`2^{\\text{depth}} - 1` leapfrog steps. The model then holds ``chains * draws`` draws.

    >>> Nuts(chains=2, warmup=50, draws=50).total
    100
    >>> Nuts(chains=0)
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: NUTS chains must be an integer >= 1, not 0
    """

    chains: int = 4
    warmup: int = 200
    draws: int = 200
    max_tree_depth: int = 8

    def __post_init__(self) -> None:
        for name in ("chains", "warmup", "draws", "max_tree_depth"):
            check_count(getattr(self, name), f"NUTS {name}")
        if self.max_tree_depth > _MAX_DEPTH:
            raise InputError(
                f"NUTS max_tree_depth must be at most {_MAX_DEPTH}, not {self.max_tree_depth}"
            )
        if self.total < 2:
            raise InputError("NUTS needs at least 2 draws in all (chains x draws)")

    @property
    def total(self) -> int:
        """Draws the fitted model holds: ``chains * draws``."""
        return self.chains * self.draws


@dataclass(frozen=True)
class Chain:
    """One chain's kept draws (constrained, ``(D, *shape)`` per site) and its diagnostics."""

    samples: dict[str, torch.Tensor]
    divergences: int
    accept_prob: float
    step_size: float
    seconds: float


def start_values(
    posterior: dict[str, tuple[torch.Tensor, torch.Tensor]], components: int, k: int
) -> dict[str, torch.Tensor]:
    """Posterior medians (constrained) of SVI component ``k`` of ``posterior``."""
    out = {}
    for name, (loc, _) in posterior.items():
        value = loc[k] if components > 1 else loc
        out[name] = constrained(name, value)
    return out


def potential(
    net: InterferenceNet, tensors: tuple[torch.Tensor, ...], example: dict[str, torch.Tensor]
) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    r"""NUTS's potential energy, :math:`-\log p(z, y)` at unconstrained latent values ``z``
    (a dict shaped as ``example``): :meth:`~interplace.model._net.InterferenceNet.log_joint`,
    untempered when ``net`` is. A ``positive`` site's LogNormal prior is a Normal one on its
    log, and the Jacobian of the log transform cancels the density's :math:`-\log x`, so
    this is the potential Pyro derives from the model's sample sites, without Pyro's tracing:
    the same value, gradients equal to rounding (within 2e-12 where they reach 1e4;
    ``tests/model/test_nuts.py``).

    It is compiled once by ``torch.jit.trace`` with the sites as its arguments (where a torch
    has ``jit.trace``). In a chain, per leapfrog step with the sampler's own work: 2.2 ms on
    the recovery set of seed 21 and 2.1 ms on Gavel V100, against 2.6 and 2.5 ms on Pyro's
    compiled potential (``docs/benchmarks.md``, "NUTS as a fit option").
    """
    names = list(example)

    def sites_potential(*values: torch.Tensor) -> torch.Tensor:
        return -net.log_joint(dict(zip(names, values, strict=True)), *tensors)

    compiled: Callable[..., torch.Tensor] = sites_potential
    if _JIT:
        args = tuple(example[k].detach().requires_grad_() for k in names)
        with warnings.catch_warnings():
            # The network's constants (torch.tensor of Python floats) are constants of the
            # trace, as they should be; the tracer warns about every one. torch 2.13
            # deprecates jit.trace with a DeprecationWarning, 2.14 with a FutureWarning;
            # where a torch has no jit.trace, the potential runs uncompiled.
            warnings.filterwarnings("ignore", category=_TRACER_WARNING)
            for category in (DeprecationWarning, FutureWarning):
                warnings.filterwarnings(
                    "ignore", message=r"`torch\.jit\.trace` is deprecated", category=category
                )
            compiled = torch.jit.trace(  # type: ignore[no-untyped-call]
                sites_potential, args, check_trace=False
            )

    def energy(z: dict[str, torch.Tensor]) -> torch.Tensor:
        return compiled(*(z[k] for k in names))

    return energy


def run_chain(
    net_args: tuple[Any, ...],
    tensors: tuple[torch.Tensor, ...],
    start: dict[str, torch.Tensor],
    settings: Nuts,
    seed: int,
    name: str,
    bar: Any = None,
) -> Chain:
    """One NUTS chain of ``InterferenceNet(*net_args)`` on ``tensors`` from ``start``.

    All randomness comes from a private torch RNG state seeded by ``seed`` (the global one is
    restored after), so the same arguments give the same draws. ``bar`` (a tqdm bar) advances
    by one per warm-up or kept step. Raises :class:`InputError` when the chain's draws are not
    finite.
    """
    dev = tensors[0].device
    begin = time.perf_counter()
    diag: dict[str, Any] = {}

    def hook(kernel: Any, params: Any, stage: str, i: int) -> None:
        if bar is not None:
            bar.update(1)
        if stage.startswith("Sample") and i == settings.draws - 1:
            # The kernel's own record, read before MCMC's cleanup resets it (MCMC.diagnostics()
            # adds R-hat and effective sizes, which need at least 4 draws a chain).
            diag.update(kernel.diagnostics())
            # The mean Metropolis acceptance probability over the kept draws' trajectories,
            # the statistic the step-size adaptation aims at 0.8 (the kernel's "acceptance
            # rate" counts the draws that moved, nearly all of them in long trajectories).
            diag["accept_prob"] = float(kernel._mean_accept_prob)

    with (
        torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []),
        pyro.settings.context(module_local_params=True),
        pyro.validation_enabled(False),
    ):
        torch.manual_seed(seed)
        net = InterferenceNet(*net_args)
        init = {k: unconstrained(k, v).to(dev) for k, v in start.items()}
        kernel = NUTS(  # type: ignore[no-untyped-call]
            potential_fn=potential(net, tensors, init),
            max_tree_depth=settings.max_tree_depth,
        )
        mcmc = MCMC(  # type: ignore[no-untyped-call]
            kernel,
            num_samples=settings.draws,
            warmup_steps=settings.warmup,
            initial_params=init,
            disable_progbar=True,
            hook_fn=hook,
        )
        mcmc.run()
        raw: dict[str, torch.Tensor] = mcmc.get_samples()  # type: ignore[no-untyped-call]
    samples = {
        k: constrained(k, v).detach().to("cpu", torch.float64)
        for k, v in raw.items()
    }
    if not all(bool(torch.isfinite(v).all()) for v in samples.values()):
        raise InputError(f"{name}: a NUTS chain (seed {seed}) drew non-finite values")
    divergences = len(diag.get("divergences", []))
    accept_prob = float(diag.get("accept_prob", math.nan))
    step_size = float(kernel.step_size)
    return Chain(samples, divergences, accept_prob, step_size, time.perf_counter() - begin)


def chain_task(task: tuple[Any, ...]) -> Chain:
    """:func:`run_chain` in a worker process, on one intra-op thread and without a bar;
    module level, so that a spawned worker can run it."""
    torch.set_num_threads(1)
    return run_chain(*task)


def pooled(
    chains: list[Chain],
) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], dict[str, Any]]:
    """The chains' draws as a posterior of point masses (module docstring: interleaved,
    unconstrained locations, zero scales) and the fit's ``info["nuts"]`` diagnostics.

    Its ``rhat_speed_noise`` is the split Gelman-Rubin statistic of the speed noise over the
    chains (near 1 when they agree; None with one draw a chain), and ``chain_speed_noise`` each
    chain's median speed noise, which says which chains the R-hat separates.
    """
    posterior = {}
    for name in chains[0].samples:
        stacked = torch.stack([c.samples[name] for c in chains], dim=1)  # (D, C, *shape)
        flat = stacked.reshape(-1, *stacked.shape[2:])
        loc = unconstrained(name, flat)
        posterior[name] = (loc, torch.zeros_like(loc))
    noise = torch.stack([c.samples["speed_noise"] for c in chains])  # (C, D)
    rhat = None
    if noise.shape[1] >= 4:
        rhat = float(split_gelman_rubin(noise, chain_dim=0, sample_dim=1))  # type: ignore[no-untyped-call]
    info = {
        "chains": len(chains),
        "divergences": [c.divergences for c in chains],
        "accept_prob": [c.accept_prob for c in chains],
        "step_size": [c.step_size for c in chains],
        "chain_seconds": [c.seconds for c in chains],
        "chain_speed_noise": [float(c.samples["speed_noise"].median()) for c in chains],
        "rhat_speed_noise": rhat,
    }
    return posterior, info
