"""The one module that talks to BoTorch and GPyTorch (imported lazily by the tuner).

:func:`suggest` fits the GP to the finished trials and maximises the acquisition function;
the choices it makes are documented in :mod:`interplace.placement.bo`.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import torch

from interplace.placement.bo._space import Space

__all__ = ["ENUMERATE_LIMIT", "Suggestion", "suggest"]

_FloatArray: TypeAlias = "np.ndarray[Any, np.dtype[np.float64]]"

ENUMERATE_LIMIT = 20_000
"""A space without floats of at most this many points (before constraints) has its
acquisition maximised exactly, over every feasible point."""

RELAX_ABOVE = 1_000
"""An integer (or numeric choice) with more values is optimised as a real and rounded."""

FIT_MAXITER = 100
"""L-BFGS-B iterations of the GP's hyperparameter fit (the mixed GP's likelihood is flat enough
that an unbounded fit takes ~400 iterations for no better suggestions)."""

# Half BoTorch's defaults (20, 1024): on the benchmark, 20 restarts from 1,024 samples were
# no better (docs/benchmarks.md) and cost twice the acquisition time.
NUM_RESTARTS = 10
RAW_SAMPLES = 512
MC_SAMPLES = 128

# Warnings BoTorch and GPyTorch raise about numerics and optimiser convergence: expected now
# and then on real data (a nearly singular kernel matrix gets jitter, L-BFGS stops early), and
# handled by those libraries. They are counted in Tuner.notes instead of reaching the user's
# warning filters (where "error" would turn a routine jitter into a crash). Any other warning
# is re-issued unchanged.
_HANDLED = ("NumericalWarning", "OptimizationWarning", "BadInitialCandidatesWarning",
            "InputDataWarning")
_LIBS = ("botorch", "gpytorch", "linear_operator")
_LINALG_ERROR: type[Exception] = torch.linalg.LinAlgError  # type: ignore[attr-defined]


def _handled(w: warnings.WarningMessage) -> bool:
    if w.category.__name__ in _HANDLED:
        return True
    # botorch.generation.gen reports an L-BFGS run that stopped abnormally as a RuntimeWarning
    # and goes on with the best point found (its own retry logic decides what to do).
    return (issubclass(w.category, RuntimeWarning)
            and str(w.message).startswith("Optimization failed")
            and any(f"{os.sep}{lib}{os.sep}" in w.filename for lib in _LIBS))


def _import_botorch() -> None:
    # linear_operator decorates functions with torch.jit.script at import time, which torch
    # 2.13 deprecates (a DeprecationWarning; 2.14 issues it as a FutureWarning); the warning
    # concerns that library, not the caller.
    with warnings.catch_warnings():
        for category in (DeprecationWarning, FutureWarning):
            warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated",
                                    category=category)
        import botorch
        import botorch.acquisition.analytic
        import botorch.acquisition.logei
        import botorch.models
        import botorch.optim.optimize_mixed  # noqa: F401
        import gpytorch  # noqa: F401


@dataclass(frozen=True)
class Suggestion:
    """``rows``: ``(q, d)`` encoded candidates; ``acquisition``: the function's name;
    ``warnings``: counts of handled warnings by category name."""

    rows: _FloatArray
    acquisition: str
    warnings: dict[str, int]


def _constraints(space: Space) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    names = space.names
    out = []
    for c in space.constraints:
        idx = torch.tensor([names.index(n) for n, _ in c.terms], dtype=torch.long)
        coef = torch.tensor([-float(w) for _, w in c.terms], dtype=torch.float64)
        out.append((idx, coef, -float(c.max)))
    return out


def _fit(space: Space, x: torch.Tensor, y: torch.Tensor) -> Any:
    from botorch.fit import fit_gpytorch_mll
    from botorch.models.gp_regression import SingleTaskGP
    from botorch.models.gp_regression_mixed import MixedSingleTaskGP
    from botorch.models.transforms.input import Normalize
    from botorch.models.transforms.outcome import Standardize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    d = space.dim
    b = torch.tensor(space.bounds, dtype=torch.float64)
    b[1] = torch.where(b[1] > b[0], b[1], b[0] + 1.0)  # a single-valued column: unit width
    cat = list(space.categorical)
    cont = [i for i in range(d) if i not in cat]
    tf = None
    if cont:
        tf = Normalize(d=d, bounds=b, indices=cont if cat else None)
    model: Any
    if cat:
        model = MixedSingleTaskGP(x, y, cat_dims=cat, input_transform=tf,
                                  outcome_transform=Standardize(m=1))
    else:
        model = SingleTaskGP(x, y, input_transform=tf, outcome_transform=Standardize(m=1))
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": FIT_MAXITER}})
    model.eval()
    return model


def suggest(space: Space, x_ok: _FloatArray, y_ok: _FloatArray, x_pending: _FloatArray,
            x_avoid: _FloatArray, q: int, *, noisy: bool, seed: int) -> Suggestion:
    """``q`` encoded candidates to evaluate next, the best first.

    ``x_ok`` ``(n, d)`` and ``y_ok`` ``(n,)``: the finished trials (``y`` is to be
    *maximised*); ``x_pending`` ``(p, d)``: suggested, not yet finished; ``x_avoid`` ``(m, d)``:
    points not to suggest again when the space is enumerated (finished or failed, unless
    ``noisy``, and pending). Randomness: torch's global RNG, which the caller seeds and
    restores.
    """
    _import_botorch()
    from botorch.exceptions.errors import BotorchError, ModelFittingError
    from linear_operator.utils.errors import NotPSDError

    caught: Counter[str] = Counter()
    # The objective's scale changes no suggestion (improvement is relative), but squares of
    # values near 1e160 overflow the GP's standardisation: fit such y over its largest size;
    # and a spread below 1e-8 it leaves unscaled (the GP then reads the signal as noise, and
    # 1e-9 times an objective was tuned no better than at random): standardise such y here.
    size = float(np.max(np.abs(y_ok))) if len(y_ok) else 0.0
    y_ok = y_ok / size if size > 1e100 else y_ok
    spread = float(np.std(y_ok)) if len(y_ok) > 1 else 0.0
    if 0 < spread < 1e-6:
        y_ok = (y_ok - np.mean(y_ok)) / spread
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            cand, name = _suggest(space, x_ok, y_ok, x_pending, x_avoid, q, noisy=noisy,
                                  seed=seed)
    except (BotorchError, ModelFittingError, NotPSDError, _LINALG_ERROR) as exc:
        # The GP could not be fitted or conditioned (e.g. a singular kernel matrix): no
        # suggestion this step; the tuner falls back to its Sobol points.
        return Suggestion(np.empty((0, space.dim)), f"gp-failed ({type(exc).__name__})", {})
    for w in seen:
        if _handled(w):
            caught[w.category.__name__] += 1
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno,
                                   source=w.source)
    rows = cand.detach().numpy().astype(np.float64)
    return Suggestion(rows.reshape(-1, space.dim), name, dict(caught))


def _suggest(space: Space, x_ok: _FloatArray, y_ok: _FloatArray, x_pending: _FloatArray,
             x_avoid: _FloatArray, q: int, *, noisy: bool, seed: int) -> tuple[Any, str]:
    from botorch.acquisition.analytic import LogExpectedImprovement
    from botorch.acquisition.logei import qLogNoisyExpectedImprovement
    from botorch.optim.optimize import optimize_acqf_discrete
    from botorch.optim.optimize_mixed import optimize_acqf_mixed_alternating
    from botorch.sampling.normal import SobolQMCNormalSampler

    x = torch.tensor(x_ok, dtype=torch.float64)
    y = torch.tensor(y_ok, dtype=torch.float64).unsqueeze(-1)
    model = _fit(space, x, y)
    pending = torch.tensor(x_pending, dtype=torch.float64) if len(x_pending) else None
    acq: Any
    if q == 1 and pending is None and not noisy:
        acq = LogExpectedImprovement(model, best_f=y.max())
        name = "LogExpectedImprovement"
    else:
        sampler = SobolQMCNormalSampler(sample_shape=torch.Size([MC_SAMPLES]), seed=seed)
        acq = qLogNoisyExpectedImprovement(model, X_baseline=x, sampler=sampler,
                                           X_pending=pending, prune_baseline=True)
        name = "qLogNoisyExpectedImprovement"
    cons = _constraints(space) or None
    if space.size() <= ENUMERATE_LIMIT:
        grid = torch.tensor([space.encode(p) for p in space.grid()], dtype=torch.float64)
        avoid = torch.tensor(x_avoid, dtype=torch.float64) if len(x_avoid) else None
        keep = grid
        if avoid is not None:
            hit = (grid.unsqueeze(1) == avoid.unsqueeze(0)).all(-1).any(-1)
            keep = grid[~hit]
        unique = True
        if len(keep) < q:  # every point tried: repeats are all that is left
            keep, unique = grid, len(grid) >= q
        cand, _ = optimize_acqf_discrete(acq, q=q, choices=keep, unique=unique,
                                         max_batch_size=4096)
    else:
        b = torch.tensor(space.bounds, dtype=torch.float64)
        discrete: dict[int, list[float]] = {}
        cats: dict[int, list[float]] = {}
        fixed: dict[int, float] = {}
        for i, vals in space.discrete_values(most=RELAX_ABOVE).items():
            if len(vals) == 1:
                fixed[i] = vals[0]
            elif i in space.categorical:
                cats[i] = list(vals)
            elif len(vals) <= RELAX_ABOVE:
                discrete[i] = list(vals)
        cand, _ = optimize_acqf_mixed_alternating(
            acq, bounds=b, discrete_dims=discrete or None, cat_dims=cats or None, q=q,
            num_restarts=NUM_RESTARTS, raw_samples=RAW_SAMPLES,
            fixed_features=fixed or None, inequality_constraints=cons)
    return cand, name
