r"""Bayesian optimisation of allocations: GPUs per job, MPS percentages, any costly knob.

Placement decides *where* jobs run; this decides *how much* each gets, when every trial is
expensive (minutes of a real job). The tuner is a Gaussian process with (log) Expected
Improvement, built on BoTorch and GPyTorch, with an ask/tell interface for a scheduler that runs
real trials (:class:`Tuner`), :func:`minimize` / :func:`maximize` for a Python callable, and the
``interplace tune`` command for any program.

Method
------
*Space.* Integer, real (optionally log-scaled) and choice parameters, and linear constraints
:math:`\sum_i w_i x_i \le c` (:mod:`._space`: how each is encoded for the GP). Numeric choices
are ordinal, string choices categorical.

*Initial design.* The first ``n_init`` points (default :math:`\max(5, 2d)`) are the
feasible points of a scrambled Sobol sequence seeded with ``seed``, mapped so that each
parameter's values are equally likely, without repeats. The design also continues until two
trials have succeeded.

*Model.* Finished trials (failed ones are recorded but left out) are fitted by an exact GP:
BoTorch's ``SingleTaskGP`` (Matérn-5/2 ARD kernel, inferred Gaussian noise) or, when a
parameter is categorical, ``MixedSingleTaskGP`` (a categorical kernel on those columns).
Inputs are normalised to the unit cube (``Normalize``, categorical columns left alone),
outcomes standardised (``Standardize``), all in double precision; hyperparameters by maximum
marginal likelihood (``fit_gpytorch_mll``, L-BFGS-B, at most 100 iterations). Minimisation
fits :math:`-y`.

*Acquisition* (BoTorch's log forms, which it recommends over the legacy EI):

=====================================================  =======================================
mode                                                   acquisition
=====================================================  =======================================
one point, nothing pending, ``noisy=False``            ``LogExpectedImprovement`` (analytic;
                                                       incumbent: the best value observed)
a batch (``ask(n > 1)``), points still pending, or     ``qLogNoisyExpectedImprovement``
``noisy=True``                                         (128 scrambled Sobol QMC samples seeded
                                                       per step; pending points as
                                                       ``X_pending``; baseline = the finished
                                                       trials, pruned)
=====================================================  =======================================

*Maximising the acquisition.* A space without real parameters and at most
:data:`~._botorch.ENUMERATE_LIMIT` points is enumerated: every feasible point not yet tried
(or pending) is scored and the best taken (``optimize_acqf_discrete``; a batch is picked
greedily, each point conditioned on those before it). Otherwise
``optimize_acqf_mixed_alternating`` alternates local search over the integer/choice columns
with L-BFGS over the real ones (10 restarts from 512 raw samples), under the linear
constraints; an integer (or numeric choice) with more than 20 values is relaxed to a real and
rounded by BoTorch (beyond 1,000 values by the tuner, which then never lists them). A
candidate that rounding pushes out of the constraints, or that repeats a tried point, gives
way to the next unused Sobol point (counted in :attr:`Tuner.notes`).

*Determinism.* Each step seeds torch's RNG (forked, so the caller's is untouched) from
``(seed, number of trials issued)`` and runs on one thread: the same seed and the same
values give the same trials, and a tuner resumed from its trials file continues exactly where
the uninterrupted one would be. BoTorch's numerical and optimiser warnings (jitter added to a
kernel matrix, L-BFGS stopping early) are counted in :attr:`Tuner.notes` rather than raised
(their libraries handle them); every other warning passes through.

Applications
------------
- :class:`GpuSplit`: split a machine's GPUs among jobs from measured scale-out throughputs
  (Gavel's, packaged), with its exact optimum by dynamic programming.
- :class:`CoLocation`: which jobs share a GPU, scored by the interference model's predicted
  total speed (no hardware).
- :class:`MpsPair`: MPS active-thread percentages of a co-located pair, each trial a real
  run through :func:`interplace.collectors.profile.profile` (needs a GPU with MPS).

>>> space = parse_space({"params": [{"name": "g", "type": "choice", "values": [0, 1, 2, 4, 8]},
...                                 {"name": "x", "type": "float", "low": 0.0, "high": 1.0}]})
>>> tuner = Tuner(space, maximize=True, seed=0, budget=6)
>>> batch = tuner.ask(2)
>>> [sorted(p) for p in batch]
[['g', 'x'], ['g', 'x']]
>>> for p in batch:
...     _ = tuner.tell(p, p["g"] * p["x"])
>>> len(tuner.trials), tuner.remaining
(2, 4)
"""

from interplace.placement.bo._apps import (
    CoLocation,
    GpuSplit,
    MpsPair,
    gavel_scaleout,
    isolated_throughputs,
)
from interplace.placement.bo._space import (
    Choice,
    Constraint,
    Float,
    Int,
    Param,
    Point,
    Space,
    load_space,
    parse_space,
)
from interplace.placement.bo._trials import Trial, TrialsFile
from interplace.placement.bo._tuner import Result, Tuner, maximize, minimize

__all__ = [
    "Choice",
    "CoLocation",
    "Constraint",
    "Float",
    "GpuSplit",
    "Int",
    "MpsPair",
    "Param",
    "Point",
    "Result",
    "Space",
    "Trial",
    "TrialsFile",
    "Tuner",
    "gavel_scaleout",
    "isolated_throughputs",
    "load_space",
    "maximize",
    "minimize",
    "parse_space",
]
