"""Reference posteriors of a fitted model's own network: NUTS draws and the posterior mode.

Imported by the scripts beside it (``pair_calibration.py``, ``inference_gap.py``). Both work
on the network :func:`interplace.model.fit` built for the model (its jobs, resources, hyper-
parameters and rank; fitted without families) and start from the SVI posterior medians, so
they show what the same model gives under another inference than the mean-field SVI fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from interplace.datasets import CoLocationData
from interplace.model import InterferenceModel
from interplace.model._net import SUPPORT, constrained


def medians(model: InterferenceModel) -> dict[str, torch.Tensor]:
    """Each latent's posterior median, constrained (the guide's location, exponentiated for
    the positive sites); of a mixture posterior's first component (the fit from the model's
    own seed)."""
    return {k: constrained(k, loc) for k, loc in _locations(model).items()}


def _locations(model: InterferenceModel) -> dict[str, torch.Tensor]:
    """Each latent's guide location (unconstrained); a mixture's first component's."""
    return {k: (loc[0] if model.components > 1 else loc)
            for k, (loc, _) in model.posterior.items()}


def _tensors(model: InterferenceModel, data: CoLocationData) -> tuple[torch.Tensor, ...]:
    from interplace.model import _fit
    from interplace.model._data import counters_from_samples, observations_from_runs

    if model.families is not None:
        raise SystemExit("reference posteriors: models fitted with families are not supported")
    obs = observations_from_runs(data, model.jobs, model.resources, None)
    counters = counters_from_samples(data, model.jobs, None, model.resources)
    return _fit._tensors(obs, counters, model.resources, torch.device("cpu"))


def nuts(model: InterferenceModel, data: CoLocationData, n: int,
         seed: int = 0, jit: bool = True) -> dict[str, torch.Tensor]:
    """``n`` NUTS draws (after ``n`` warm-up steps) of every latent of ``model``'s network on
    ``data``: ``pyro.infer.NUTS``, one chain, tree depth up to 8, started at the SVI posterior
    medians, one thread. Returns ``(n, *shape)`` tensors by site (float64).

    With ``jit`` (the default since 2026-11-27) the log joint and its gradient are compiled
    once by ``torch.jit.trace`` (NUTS's ``jit_compile``) and Pyro's validation is off: on
    Gavel V100's network 2.1 ms a gradient against 6.1 ms (4.6 ms with validation off alone).
    The chain is then the same in law, not bit for bit (the compiled graph sums in another
    order)."""
    import warnings

    import pyro
    from pyro.infer import MCMC, NUTS
    from pyro.infer.autoguide.initialization import init_to_value

    from interplace.model._net import InterferenceNet

    tensors = _tensors(model, data)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with (
            pyro.settings.context(module_local_params=True),
            pyro.validation_enabled(not jit),
            warnings.catch_warnings(),
        ):
            # torch.jit.trace warns about every Python scalar it freezes into the graph.
            warnings.simplefilter("ignore")
            net = InterferenceNet(len(model.jobs), len(model.resources),
                                  max(len(model.metrics), 1), model.hyper, None, 0, model.rank)
            kernel = NUTS(  # type: ignore[no-untyped-call]
                net, init_strategy=init_to_value(values=medians(model)), max_tree_depth=8,
                jit_compile=jit, ignore_jit_warnings=True,
            )
            mcmc = MCMC(  # type: ignore[no-untyped-call]
                kernel, num_samples=n, warmup_steps=n, disable_progbar=True
            )
            torch.manual_seed(seed)
            mcmc.run(*tensors)
            samples: dict[str, torch.Tensor] = mcmc.get_samples()  # type: ignore[no-untyped-call]
    finally:
        torch.set_num_threads(threads)
    return {k: v.to(torch.float64) for k, v in samples.items()}


def posterior_mode(model: InterferenceModel, data: CoLocationData,
                   steps: int) -> dict[str, torch.Tensor]:
    """The posterior mode of ``model``'s network on ``data`` in the unconstrained space (the
    space NUTS samples): ``steps`` Adam steps (learning rate 0.01) on the log joint plus the
    positive sites' log Jacobian, from the SVI posterior medians. Returns one draw per site,
    ``(1, *shape)``."""
    import pyro
    from pyro import poutine

    from interplace.model._net import InterferenceNet

    tensors = _tensors(model, data)
    free = {k: loc.clone().requires_grad_() for k, loc in _locations(model).items()}

    def values() -> dict[str, torch.Tensor]:
        return {k: constrained(k, v) for k, v in free.items()}

    with pyro.settings.context(module_local_params=True), pyro.validation_enabled(False):
        net = InterferenceNet(len(model.jobs), len(model.resources),
                              max(len(model.metrics), 1), model.hyper, None, 0, model.rank)
        opt = torch.optim.Adam(list(free.values()), lr=0.01)
        for _ in range(steps):
            opt.zero_grad()
            trace = poutine.trace(poutine.condition(net, data=values())).get_trace(*tensors)
            jacobian = torch.stack(
                [v.sum() for k, v in free.items() if SUPPORT[k] == "positive"]
            ).sum()
            log_joint = trace.log_prob_sum()
            assert isinstance(log_joint, torch.Tensor)
            loss = -(log_joint + jacobian)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
    return {k: v.detach().unsqueeze(0) for k, v in values().items()}


@dataclass(frozen=True)
class SampledModel(InterferenceModel):
    """An :class:`InterferenceModel` whose posterior is a fixed set of draws (NUTS's, say)
    instead of its guide: :meth:`draws` returns them, so every prediction uses them. Ask for
    exactly as many draws as it holds."""

    samples: Mapping[str, torch.Tensor] = field(default_factory=dict)

    def draws(self, num_samples: int = 500, seed: int = 0) -> dict[str, torch.Tensor]:
        held = next(iter(self.samples.values())).shape[0]
        if num_samples != held:
            raise ValueError(f"this model holds {held} draws, not {num_samples}")
        return dict(self.samples)
