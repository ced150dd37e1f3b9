r"""Measured pairs: the second stage of a fit, which keeps what was measured.

The structure (mechanism, low-rank pair term, job biases) explains the co-located speeds only
up to a misfit of about 10% on the log scale on the public data, while a speed measured twice
in one run differs by about 1% (Lucid's replicated self-pairs: within-run standard deviation
of the log speed, median 0.007, mean 0.017). Fitted alone, the structure reads the misfit as
measurement noise and shrinks every measured pair toward its own prediction; a scheduler that
decides on those predictions loses what it measured. The second stage, run after SVI on the
structure's posterior, gives each pair its own correction.

*Effects.* Let :math:`\bar\mu_{jk}` be the structure's posterior mean log speed of job ``j``
next to ``k`` alone on one device (isolated-reference bias included) and, for each pair
measured that way, :math:`\bar y_{jk}` the mean of its :math:`n_{jk}` measured log speeds.
A pair's effect :math:`\delta_{jk}` is what the structure misses:

.. math:: \bar y_{jk} = \bar\mu_{jk} + \delta_{jk} + \bar\varepsilon_{jk}, \quad
          \delta_{jk} \sim \mathcal{N}(m_{jk}, \tau^2), \quad
          \bar\varepsilon_{jk} \sim \mathcal{N}(0, \sigma_m^2 / n_{jk}),

with :math:`\sigma_m` the measurement noise: ``Hyper.measure_noise`` (2%), or more where the
pairs measured several times spread wider (:func:`measurement_noise`). The prior mean
:math:`m_{jk}` is a completion of the measured residuals :math:`\bar y - \bar\mu` (job biases,
winsorised as the misfit is heavy-tailed; in a fit with job families a family-pair term,
:math:`F_{f(j) f(k)}`, the ridge mean of the residuals of the two families' pairs; and a
soft-impute low-rank term; which terms, the rank, shrinkage and ridge by cross-validation:
:func:`complete_effects`): the misfit has structure of its own (a victim the mechanism
under-rates against everyone, say, or a network that slows another network's jobs more than
the mechanism says, at every batch size), which carries to pairs never measured.
:math:`\tau` is the misfit left after it: the structure's fitted noise scale :math:`s` times
the completion's cross-validated error over the residuals' own, less the measurement noise,
:math:`\tau^2 = \max(s'^2 - \sigma_m^2, (s'/10)^2)`. The posterior mean of a measured pair's
effect is conjugate,

.. math:: \hat\delta_{jk} = m_{jk} + w_{jk} (\bar y_{jk} - \bar\mu_{jk} - m_{jk}), \quad
          w_{jk} = \frac{\tau^2}{\tau^2 + \sigma_m^2 / n_{jk}},

and an unmeasured pair's is :math:`m_{jk}`.

*Borrowed effects.* The completion has nothing of a job never measured as a victim (a
cold job's row, on a cold-start split) or never measured as a co-runner (its column) and
gives it the population's mean effect. Such a job borrows from *mates*: its family's members
measured on that side, in a fit with job families, or else the :data:`NEIGHBOURS` measured
jobs nearest to it by isolated counter readings (each resource's log reading standardised;
:func:`borrowed_mates`). With :math:`M_j` the mates of victim :math:`j` and :math:`N_k` those
of co-runner :math:`k`, rows first, then columns,

.. math:: m_{jk} \leftarrow \frac{1}{|M_j|} \sum_{j' \in M_j} \hat\delta_{j'k}, \qquad
          m_{jk} \leftarrow \frac{1}{|N_k|} \sum_{k' \in N_k} m_{jk'}

(:func:`borrowed_effects`). Jobs alike in family or counters fare alike against a co-runner
(the interaction a tree ensemble learns from both jobs' features); measured on Lucid's
cold-start splits, ``docs/benchmarks.md``. A job added after the fit from its counters
(:func:`~interplace.placement._cold.with_cold_jobs`) borrows the same way from the fitted
jobs' effects, rebuilt from the stage's own draws (:func:`extended_pairs`); one with
neither a family nor a reading there borrows from every measured job.

*Cold jobs' counters.* A borrowed effect reads a cold job through five neighbours. Where
the jobs have isolated counter readings, the stage also fits a *counter kernel*
(:mod:`interplace.model._counterkernel`): a Gaussian process regression of the measured
pairs' mean log speeds :math:`\bar y_{jk}` on both jobs' standardised log readings with a
level of each job's own on each side, its hyper-parameters chosen by cross-validation across
jobs (:func:`~interplace.model._counterkernel.fit_counter_kernel`). Each unmeasured pair
whose victim was never measured as a victim or whose co-runner was never measured as a
co-runner, between two jobs with every reading the kernel uses, has the speed the model
reports for it averaged with the kernel's on the log scale, :math:`w` =
``Hyper.cold_kernel_weight`` (default 0.5; 0: no kernel). With :math:`\bar v_{jk}` the pair's
posterior mean speed at the offset that meets its target :math:`\bar\mu_{jk} + \delta_{jk}`
(the structure's prediction with its borrowed effect), the offset is moved until the
posterior mean speed :math:`\bar v'_{jk}` there is

.. math:: \log \bar v'_{jk} = (1 - w) \log \bar v_{jk} + w\, \hat g_{jk}

(:func:`cold_kernel_cells`, :func:`speed_blended`), and the pair's target and effect become
the mean log speed that offset reaches. The kernel predicts a speed of :math:`e^{\hat g}`
(its hyper-parameters are chosen on that speed's error), and the model reports a pair's
posterior mean speed, which lies above :math:`e^{\bar\mu + \delta}` by the draws' spread
(about half their variance on the log scale, wide for a cold job): so the two predictions
are averaged as the speeds each reports. (Averaging the mean log speeds instead, as the
stage did from 2026-12-02 until the forty-fourth session, kept that spread term whole in
the reported speed: ``docs/benchmarks.md``, "The counter kernel on the speed the model
reports".) Jobs added after the fit get the same from the kernel, rebuilt from the stored
pairs (:func:`extended_pairs`).

*A direct completion* (``Hyper.direct_weight``, default 0.25; 0: none). An unmeasured pair
whose victim was measured as a victim and whose co-runner as a co-runner (a *warm* pair) can
have its reported speed averaged, as a cold pair's is with the kernel, with a matrix
completion of the measured pairs' speeds themselves, with no structure under it: the
matrix-completion peer's algorithm (biases and soft-impute on the speeds
:math:`e^{\bar y_{jk}}`, rank and shrinkage by cross-validation,
:func:`~interplace.model._softimpute.select_cells`), whose prediction
:math:`\hat D_{jk}` (floored at 0.01) enters as

.. math:: \log \bar v'_{jk} = (1 - w_d) \log \bar v_{jk} + w_d \log \hat D_{jk},

:math:`w_d` = ``Hyper.direct_weight`` (:func:`warm_cells`, :func:`speed_blended`;
``info["completion"]["direct"]``: its rank, shrinkage and how many pairs it moved). The two
predictions err differently, and an exact placement follows the largest misses; measured on
Gavel V100's decision benchmark, ``docs/benchmarks.md``, "A direct matrix completion averaged
into the unmeasured pairs" and "The direct completion by default". Measured pairs, cold
pairs and jobs added after the fit are unchanged by it.

*Offsets, not additions.* The effect does not enter the speed as a term: it sets a pressure
offset :math:`c_{jk}`, which scales co-runner ``k``'s pressure on ``j`` by :math:`e^{c_{jk}}`
on every resource they share (as the low-rank term does,
:func:`~interplace.model._net.log_speed`), chosen so that the posterior mean log speed of the
pair alone on one device equals :math:`\bar\mu_{jk} + \hat\delta_{jk}` (a bracketed root
search, the mean being decreasing in :math:`c`). So a measured pair's prediction follows its
measurement, the speed stays monotone in the co-runners and in what they share (an added
co-runner, or a resource more shared, only adds load), several co-runners compose through
the load as the structure's do, and a pair behind one switch is scaled as its measured
pressure says. A target faster than the job's level :math:`\beta_j` is unreachable by any
load: the offset then all but switches the co-runner's pressure off, and the job runs at that
level.

*Ceilings.* A job's speeds are relative to its recorded isolated throughput, and every speed
of the job next to a co-runner on its GPU shares the level :math:`\beta_j` (the
isolated-reference bias: the record's error and any cost of sharing,
:func:`~interplace.model._net.reference_level`). If a co-runner never speeds a job up, that
level is at least each of its co-located speeds, so a measured pair faster than the
structure's level says :math:`\beta_j` is higher than the structure put it (its prior holds it
near 0; the isolated run, a speed of exactly 1 by construction, is the reference, not an
observation). So the stage lifts (by
default; not with ``fit(lift_ceilings=False)``) each job's isolated-reference bias, in every
draw, by

.. math:: \ell_j = \max\bigl(0, \max_{k \in M_j} (\bar\mu_{jk} + \hat\delta_{jk})
          - \bar\beta_j\bigr),

the most its targets over its measured co-runners :math:`M_j` exceed its mean level
:math:`\bar\beta_j` (:func:`ceiling_lift`), before the offsets are solved: every
measured pair's target is then met, and an unmeasured pair's (the structure plus its
completed effect) up to the job's fastest measured one. Targets are unchanged; the job's level,
and so its ceiling next to anyone on its GPU, rises by :math:`e^{\ell_j}` (its speed alone
only where the level passes 0). A job never measured
as a victim is not lifted. The fit shifts the posterior's :math:`\beta_j` by :math:`\ell_j`
(``info["ceiling_lift"]``), so the stored completion and offsets are relative to the lifted
structure. Measured on Lucid, whose normalised speeds exceed 1 in a fifth of its co-located
rows (``docs/benchmarks.md``, "Ceilings lifted to the fastest measured pair"): held-out MAE
7% lower on its random splits, 1% on its cold-start ones (medians per split).

*Intervals.* A new measurement of a measured pair adds the measurement noise
:math:`\sigma_m` (Student-t with the structure's degrees of freedom); next to a co-runner
never measured with the job, also a Student-t spread of scale :math:`\tau_{jk}` for that
pair's unknown effect (one per such co-runner that shares anything with the job). (The mean
of the exponential of a Student-t draw does not exist, so that spread widens the interval of
a measurement, not the posterior of the mean speed.) Without the lift :math:`\tau_{jk} =
\tau`. The lift adds no information about a pair: its target is the one the unlifted fit
aimed at. But a lifted job must slow down further from its raised level to meet the
same target, and the structure's draws of that larger slowdown spread wider (on Lucid's
random splits the variance over the draws of a held-out pair's log speed rises by a median
of :math:`0.016^2` to :math:`0.020^2`, 40-55% of :math:`\tau^2`), so a lifted fit whose
intervals kept :math:`\tau` covered 0.956 of held-out speeds with 90% intervals. So each
pair keeps the predictive variance it had without the lift. A Student-t spread of scale
:math:`\tau` with :math:`\nu > 2` degrees of freedom has variance :math:`\tfrac{\nu}{\nu - 2}
\tau^2` (:math:`2 \tau^2` at the default :math:`\nu = 4`), so

.. math:: \tau_{jk}^2 = \max\bigl(\tau^2 - \tfrac{\nu - 2}{\nu} (v^\uparrow_{jk} - v_{jk}),
          (\tau / 10)^2\bigr),

with :math:`v_{jk}` and :math:`v^\uparrow_{jk}` the variance over the draws of the pair's log
speed at its offset, unlifted and lifted (``MeasuredPairs.spread``; equal, so
:math:`\tau_{jk} = \tau`, for a job not lifted; for :math:`\nu \le 2` the spread's variance
is infinite and :math:`\tau_{jk} = \tau`). Before 2026-12-01 the rule took
:math:`v^\uparrow_{jk} - v_{jk}` off :math:`\tau^2` whole, which took twice the lift's
variance off the spread's, so lifted jobs' intervals were narrower than without the lift;
the correction widened the mean held-out 90% interval by 1-3% on Lucid's random splits and by
under half a percent elsewhere, the MAE unchanged (``docs/benchmarks.md``, "The lift's
spread corrected: measured"). A job added at placement time
(:func:`extended_pairs`) is not lifted and keeps :math:`\tau` as the victim; a lifted
fitted job's pair with it is narrowed by the same rule.

Two ways the intervals depart from the stage's own account (found by an audit on
2026-12-01 and left as they are: the intervals' calibration is measured on held-out speeds,
``docs/benchmarks.md``, not derived from this account). A measured pair's draws are the
structure's, shifted by its offset to the target, so its posterior spread is the structure's
over the draws, not the conjugate :math:`(1 - w_{jk}) \tau^2` of its effect (Lucid, seed 0's
random split: a median sd of 0.024 in log speed against 0.016; no held-out row is a pair
measured in training, so no held-out figure reads it, but ``stability``'s moves are in these
sds). And :math:`\sigma_m` is read as a normal standard deviation (the repeats' spread, and
in :math:`w_{jk}` and :math:`\tau`) but drawn as the scale of a Student-t, whose variance
at :math:`\nu = 4` is :math:`2 \sigma_m^2`, so every interval's noise part is wider than
the repeats show.

The stage is a *cut*: the effects do not feed back into the structure. Fitting them jointly
by SVI was tried (``docs/benchmarks.md``): with the measurement-noise prior the effects
absorbed every pair and the structure stopped learning from them (held-out MAE 0.165 against
0.076 on Gavel V100), without it the noise absorbed the misfit and the effects stayed at zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from interplace.errors import InputError
from interplace.model._counterkernel import CounterKernel, fit_counter_kernel
from interplace.model._data import Observations
from interplace.model._net import KAPPA, _softplus, pressure, sensitivity
from interplace.model._softimpute import (
    LAMBDA_FRACTIONS,
    MIN_SPEED,
    RANKS,
    SUBSPACE_MIN_SIZE,
    biases,
    cells_term,
    family_means,
    fit_cells,
    robust_biases,
    select_cells,
)

__all__ = [
    "FAMILY_RIDGES",
    "NEIGHBOURS",
    "OFFSET_BOUND",
    "MeasuredPairs",
    "borrowed_effects",
    "borrowed_mates",
    "ceiling_lift",
    "cold_kernel_cells",
    "complete_effects",
    "example_draws",
    "extended_pairs",
    "lifted_draws",
    "lifted_spread",
    "measured_cells",
    "measured_pairs",
    "pair_log_speed",
    "seeded_gamma",
    "speed_blended",
    "spread_draws",
    "warm_cells",
]

_IntArray = np.ndarray[Any, np.dtype[np.int64]]
_FloatArray = np.ndarray[Any, np.dtype[np.float64]]

OFFSET_BOUND = 12.0
r"""Offsets are searched in ``[-OFFSET_BOUND, OFFSET_BOUND]`` (a pressure factor of
:math:`e^{\pm 12}`: off, or beyond any capacity)."""


@dataclass(frozen=True, eq=False)
class MeasuredPairs:
    r"""The second stage of a fit (module docstring): the pairs it measured and the offsets.

    ``job``, ``co``: ``(C,)`` job indices of each pair measured alone on one device, distinct;
    ``log_speed``: ``(C,)`` their mean measured log speed; ``n``: ``(C,)`` measurements
    (>= 1); ``scale``: :math:`\tau`, the spread of an unmeasured pair's effect; ``noise``:
    :math:`\sigma_m`, the measurement noise (both on the log scale, > 0); ``expected``:
    ``(J0, J0)`` the completion :math:`m_{jk}` among the ``J0`` jobs fitted; ``offset``:
    ``(J0, J0)`` the pressure offsets :math:`c_{jk}` in
    ``[-OFFSET_BOUND, OFFSET_BOUND]``; ``spread``: ``(J0, J0)`` each unmeasured pair's
    :math:`\tau_{jk}` (module docstring, *Intervals*; > 0), or None for :math:`\tau` on
    every pair (a fit that lifted no ceiling, and models saved before format version 8);
    ``kernel``, ``kernel_weight``: the counter kernel a cold job's pairs were averaged with,
    and :math:`w` (module docstring, *Cold jobs' counters*; None and 0 for none, as in
    models saved before format version 10). Jobs added after the fit (placement-time cold
    start) get rows and columns of their own where the fit recorded its jobs' isolated
    readings (:func:`extended_pairs`, so ``J0`` may exceed the fitted jobs), and zeros
    otherwise.
    """

    job: _IntArray
    co: _IntArray
    log_speed: _FloatArray
    n: _IntArray
    scale: float
    noise: float
    expected: _FloatArray
    offset: _FloatArray
    spread: _FloatArray | None = None
    kernel: CounterKernel | None = None
    kernel_weight: float = 0.0

    def __post_init__(self) -> None:
        c = self.job.shape
        if not (len(c) == 1 and self.co.shape == c and self.log_speed.shape == c
                and self.n.shape == c):
            raise InputError("measured pairs: job, co, log_speed and n must be (C,) arrays")
        if c[0] and (int(self.job.min()) < 0 or int(self.co.min()) < 0):
            raise InputError("measured pairs: job indices must be >= 0")
        if c[0] and int(self.n.min()) < 1:
            raise InputError("measured pairs: every pair needs at least one measurement")
        if not np.all(np.isfinite(self.log_speed)):
            raise InputError("measured pairs: log speeds must be finite")
        for name in ("scale", "noise"):
            v = getattr(self, name)
            if not (isinstance(v, float) and math.isfinite(v) and v > 0):
                raise InputError(f"measured pairs: {name} must be a finite float > 0, not {v!r}")
        if len(set(zip(self.job.tolist(), self.co.tolist(), strict=True))) != c[0]:
            raise InputError("measured pairs: a (job, co-runner) pair is listed twice")
        for name in ("expected", "offset"):
            e = getattr(self, name)
            if e.ndim != 2 or e.shape[0] != e.shape[1] or not np.all(np.isfinite(e)):
                raise InputError(f"measured pairs: {name} must be a finite square (J, J) array")
        if self.offset.shape != self.expected.shape:
            raise InputError("measured pairs: offset and expected differ in shape")
        if self.spread is not None and (
            self.spread.shape != self.expected.shape
            or not np.all(np.isfinite(self.spread)) or not np.all(self.spread > 0)
        ):
            raise InputError("measured pairs: spread must be a (J, J) array of finite scales > 0")
        if np.abs(self.offset).max(initial=0.0) > OFFSET_BOUND:
            raise InputError(f"measured pairs: offsets must lie in +-{OFFSET_BOUND}")
        if c[0] and max(int(self.job.max()), int(self.co.max())) >= self.expected.shape[0]:
            raise InputError("measured pairs: a pair's job index lies outside expected")
        if self.kernel is not None and not isinstance(self.kernel, CounterKernel):
            raise InputError("measured pairs: kernel must be a CounterKernel or None")
        w = self.kernel_weight
        if not (isinstance(w, float) and 0.0 <= w <= 1.0):
            raise InputError(f"measured pairs: kernel_weight must be a float in [0, 1], not {w!r}")

    def __len__(self) -> int:
        return int(self.job.shape[0])

    def check_jobs(self, n_jobs: int) -> None:
        """Raise unless the arrays cover at most ``n_jobs`` jobs."""
        if self.expected.shape[0] > n_jobs:
            raise InputError(f"measured pairs cover {self.expected.shape[0]} jobs, not {n_jobs}")

    def weight(self) -> _FloatArray:
        """Each pair's shrinkage weight :math:`w_{jk}`, ``(C,)``."""
        tau2 = self.scale**2
        return np.asarray(tau2 / (tau2 + self.noise**2 / self.n), dtype=float)

    def spreads(self, n_jobs: int) -> torch.Tensor:
        r"""Each pair's :math:`\tau_{jk}`, ``(n_jobs, n_jobs)``: ``spread``, and :math:`\tau`
        where there is none (and for jobs beyond it)."""
        out = torch.full((n_jobs, n_jobs), self.scale, dtype=torch.float64)
        if self.spread is not None:
            j0 = self.spread.shape[0]
            out[:j0, :j0] = torch.as_tensor(self.spread, dtype=torch.float64)
        return out

    def padded(self, name: str, n_jobs: int) -> torch.Tensor:
        """``expected`` or ``offset`` as a ``(n_jobs, n_jobs)`` tensor, zeros for later jobs."""
        arr = getattr(self, name)
        out = torch.zeros((n_jobs, n_jobs), dtype=torch.float64)
        j0 = arr.shape[0]
        out[:j0, :j0] = torch.as_tensor(arr, dtype=torch.float64)
        return out


def _measured_rows(obs: Observations, n_jobs: int) -> tuple[_IntArray, _FloatArray]:
    """Flat cell index ``j * J + k`` and log speed of each observation of a pair measured
    alone on one device (:func:`measured_cells`), each ``(N,)``."""
    empty = np.zeros(0, dtype=np.int64)
    if obs.job.shape[0] == 0:
        return empty, np.zeros(0)
    co = obs.co
    alone = (co[:, 1:] >= n_jobs).all(axis=1) if co.shape[1] > 1 else np.ones(len(co), bool)
    keep = alone & (co[:, 0] < n_jobs) & (obs.share[:, 0, :].min(axis=-1) > 0)
    flat = obs.job[keep].astype(np.int64) * n_jobs + co[keep, 0].astype(np.int64)
    return flat, np.log(obs.speed[keep]).astype(float)


def measured_cells(obs: Observations, n_jobs: int) -> tuple[_IntArray, _FloatArray, _IntArray]:
    """Flat indices ``j * J + k``, mean log speed and count of the pairs of ``obs`` measured
    alone on one device, each ``(C,)`` (sorted by index).

    An observation counts when it has exactly one co-runner and that co-runner shares every
    resource with the job (runs of three jobs, or across devices, stay with the structure).

    >>> from interplace.model._data import Observations
    >>> obs = Observations(np.array([0, 1, 0]), np.array([[1], [0], [1]]),
    ...                    np.ones((3, 1, 2)), np.array([0.5, 0.8, 0.6]), np.arange(3))
    >>> flat, mean, n = measured_cells(obs, 2)
    >>> flat.tolist(), n.tolist()
    ([1, 2], [2, 1])
    """
    cells, mean, counts, _ = _cell_groups(obs, n_jobs)
    return cells, mean, counts


def _cell_groups(
    obs: Observations, n_jobs: int
) -> tuple[_IntArray, _FloatArray, _IntArray, float]:
    """:func:`measured_cells`' three arrays and the sum of squares of every measured log
    speed about its pair's mean (:func:`measurement_noise`)."""
    flat, y = _measured_rows(obs, n_jobs)
    if flat.size == 0:
        return flat, y, flat, 0.0
    cells, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
    mean = np.bincount(inverse, weights=y) / counts
    squares = float(((y - mean[inverse]) ** 2).sum())
    return cells.astype(np.int64), mean.astype(float), counts.astype(np.int64), squares


NOISE_PRIOR_DF = 10.0
"""Weight of ``Hyper.measure_noise`` in :func:`measurement_noise`, in degrees of freedom."""


def measurement_noise(obs: Observations, n_jobs: int, prior: float) -> tuple[float, int]:
    r"""The measurement noise :math:`\sigma_m` of ``obs``, read off its repeated pairs, and
    the repeats' degrees of freedom.

    A pair measured :math:`n_{jk} > 1` times (alone on one device) shows the noise of a
    measurement directly: its log speeds' spread about their mean. Pooled over the pairs,
    with the prior :math:`\sigma_0` (``prior``, ``Hyper.measure_noise``) worth
    :math:`\nu_0` = :data:`NOISE_PRIOR_DF` degrees of freedom (the scale :math:`s^2` of the
    scaled-inverse-:math:`\chi^2(\nu, s^2)` posterior of a normal variance, :math:`\nu = \nu_0
    + \sum_{jk} (n_{jk} - 1)`; its mean is :math:`\nu / (\nu - 2)` times that),

    .. math:: \sigma_m^2 = \max\Bigl(\sigma_0^2,\ \frac{\nu_0 \sigma_0^2
              + \sum_{jk} \sum_r (y_{jkr} - \bar y_{jk})^2}{\nu_0 + \sum_{jk} (n_{jk} - 1)}
              \Bigr).

    :math:`\sigma_0` is a floor: repeats that agree exactly (a data set that records one
    speed for both jobs of a self-pair, as Gavel's does) do not make a measurement more
    exact than the prior says. Without repeats, :math:`\sigma_m = \sigma_0`.

    >>> from interplace.model._data import Observations
    >>> obs = Observations(np.zeros(4, int), np.ones((4, 1), int), np.ones((4, 1, 1)),
    ...                    np.exp([-0.5, -0.1, -0.5, -0.1]), np.arange(4))
    >>> sigma, df = measurement_noise(obs, 2, 0.02)  # one pair, spread 0.2 about its mean
    >>> df, round(sigma, 4), round(((10 * 0.02**2 + 4 * 0.2**2) / 13) ** 0.5, 4)
    (3, 0.1123, 0.1123)
    """
    _, _, counts, squares = _cell_groups(obs, n_jobs)
    if counts.size == 0:
        return float(prior), 0
    df = int((counts - 1).sum())
    pooled = (NOISE_PRIOR_DF * prior**2 + squares) / (NOISE_PRIOR_DF + df)
    return math.sqrt(max(prior**2, pooled)), df


FAMILY_RIDGES = (3.0, 10.0, 30.0)
r"""The ridges :math:`\lambda_F` of the completion's family-pair term
(:func:`~interplace.model._softimpute.family_means`) among which its cross-validation
chooses."""


def complete_effects(
    residual: _FloatArray, job: _IntArray, co: _IntArray, n_jobs: int, *, seed: int,
    folds: int = 5, family: _IntArray | None = None,
) -> tuple[_FloatArray, dict[str, Any]]:
    r"""The prior mean of every pair's effect, ``(J, J)``, completed from the measured ones.

    ``residual``: ``(C,)`` each measured pair's mean log speed minus the structure's;
    ``family``: ``(J,)`` each job's family index (negative: none), or None. The candidates
    are job biases alone (``mu + a_j + b_k``, ridge 1) and biases plus a soft-impute term of
    each rank in :data:`~._softimpute.RANKS` and shrinkage in
    :data:`~._softimpute.LAMBDA_FRACTIONS` of the largest singular value; with families, also
    the biases plus a family-pair term :math:`F_{f(j) f(k)}`
    (:func:`~interplace.model._softimpute.family_means` of the residuals less the biases, ridge
    in :data:`FAMILY_RIDGES`; zero where a job has no family), alone and with a soft-impute term
    of the rest (each rank and shrinkage as above). ``folds``-fold cross-validation over the
    pairs (seeded) picks the one of least absolute error (with fewer than ``2 * folds`` pairs
    there is no completion: zeros; without families the candidates and the choice are those
    of a fit before the family term). The biases are fitted by winsorising
    (:func:`~interplace.model._softimpute.robust_biases`; the low-rank candidates without the
    family term keep least-squares biases): a pair far off the rest, a run gone wrong, then
    moves its jobs' biases, and with them every pair of theirs never measured, by a bounded
    amount instead of its whole distance. The low-rank terms stay least squares (winsorised,
    the weakly shrunk low-rank term follows the far pair instead, and on clean data it fits
    worse: ``docs/benchmarks.md``, the nineteenth session's screens). The family-pair term
    carries what jobs of one family share against another family's jobs (on Lucid, jobs of
    one network at several batch sizes: a block structure of rank up to the number of
    families, which a soft-impute term of low rank over ~60 jobs does not find; measured in
    ``docs/benchmarks.md``, "Family pairs in the completion"). From
    :data:`~._softimpute.SUBSPACE_MIN_SIZE` jobs the soft-impute fits of the cross-validation
    take subspace rounds (:func:`~._softimpute.soft_impute`) and start from the last
    shrinkage's term of their rank: on Lucid the same choices and held-out errors to about
    1e-5 in a quarter of the time or less (``docs/benchmarks.md``, "A faster completion");
    below, full SVDs from zeros. Returns the completed matrix
    and ``{"choice", "rank", "shrinkage", "family_ridge", "cv_mae", "cv_mae_none"}``
    (``choice``: ``none``, ``biases``, ``low-rank``, ``family`` or ``family+low-rank``;
    ``family_ridge`` 0 without the family term).

    >>> rng = np.random.default_rng(0)
    >>> fam = np.repeat(np.arange(4), 3)  # 12 jobs, 4 families of 3
    >>> block = 0.2 * rng.standard_normal((4, 4))
    >>> job, co = np.divmod(np.arange(144), 12)
    >>> y = block[fam[job], fam[co]] + 0.01 * rng.standard_normal(144)
    >>> mat, info = complete_effects(y, job, co, 12, seed=0, family=fam)
    >>> info["choice"].startswith("family"), bool(np.abs(mat[job, co] - y).mean() < 0.02)
    (True, True)
    """
    c = residual.shape[0]
    zero = np.zeros((n_jobs, n_jobs))
    none_mae = float(np.mean(np.abs(residual))) if c else 0.0
    info: dict[str, Any] = {
        "choice": "none", "rank": 0, "shrinkage": 0.0, "family_ridge": 0.0, "cv_mae": none_mae,
        "cv_mae_none": none_mae,
    }
    if c < 2 * folds:
        return zero, info
    r0 = np.zeros((n_jobs, n_jobs))
    mu, a, b = robust_biases(residual, job, co, n_jobs)  # also the biases candidate's full fit
    r0[job, co] = residual - mu - a[job] - b[co]
    smax = float(np.linalg.svd(r0, compute_uv=False)[0])
    # No completion is not a candidate: the residuals are in-sample for the structure (it was
    # fitted to these pairs), so cross-validating on them understates what the completion
    # gains on pairs never measured (docs/benchmarks.md: with "none" among the candidates it
    # won on Gavel V100 seed 0 while the completion cut the held-out error by 13%).
    low_rank = [(rank, frac * smax) for rank in RANKS if rank < n_jobs for frac in LAMBDA_FRACTIONS]
    grid: list[tuple[str, int, float, float]] = [("biases", 0, 0.0, 0.0)]
    grid += [("low-rank", rank, lam, 0.0) for rank, lam in low_rank]
    fam = None if family is None else np.where(np.asarray(family) >= 0, family, -1)
    n_fam = 0 if fam is None else int(fam.max()) + 1
    fold = np.random.default_rng(seed).permutation(c) % folds
    train = [np.flatnonzero(fold != f) for f in range(folds)] + [np.arange(c)]
    # Each training part's biases, winsorised (True) or least squares (False), fitted once.
    bases: dict[tuple[bool, int], _FloatArray] = {(True, folds): mu + a[:, None] + b[None, :]}
    blocks: dict[tuple[int, float], _FloatArray] = {}
    warm: dict[tuple[str, int, int], _FloatArray] = {}  # the last term per kind, fold, rank
    fast = n_jobs >= SUBSPACE_MIN_SIZE

    def base_of(part: int, robust: bool = True) -> _FloatArray:
        if (robust, part) not in bases:
            idx = train[part]
            fit_biases = robust_biases if robust else biases
            m, aa, bb = fit_biases(residual[idx], job[idx], co[idx], n_jobs)
            bases[robust, part] = m + aa[:, None] + bb[None, :]
        return bases[robust, part]

    def fitted(kind: str, rank: int, lam: float, ridge: float, part: int) -> _FloatArray:
        idx = train[part]
        y, j, k = residual[idx], job[idx], co[idx]
        if kind == "low-rank" and not fast:
            m, aa, bb, z = fit_cells(y, j, k, n_jobs, lam, rank)
            return np.asarray(m + aa[:, None] + bb[None, :] + z, dtype=float)
        if kind == "low-rank":
            full = base_of(part, robust=False)
        else:
            base = base_of(part)
            if kind == "biases" or fam is None:
                return base
            if (part, ridge) not in blocks:
                f = family_means(y - base[j, k], fam[j], fam[k], n_fam, ridge)
                blocks[part, ridge] = base + f[fam][:, fam]
            full = blocks[part, ridge]
            if kind == "family":
                return full
        # The cross-validation walks each rank's shrinkages from the largest down, each fit
        # started at the last one's term (on a Lucid split 44% fewer rounds than from zeros,
        # the same choice); the final fit starts from zeros. The low-rank candidates do so,
        # and take subspace rounds (soft_impute), only where those pay (SUBSPACE_MIN_SIZE
        # jobs): below, they are the fits before, bit for bit (above).
        z = cells_term(y - full[j, k], j, k, n_jobs, lam, rank,
                       start=warm.get((kind, part, rank)), subspace=True)
        if part < folds:
            warm[kind, part, rank] = z
        return np.asarray(full + z, dtype=float)

    def cv_error(option: tuple[str, int, float, float]) -> float:
        err = 0.0
        for f in range(folds):
            test = fold == f
            mat = fitted(*option, f)
            err += float(np.abs(residual[test] - mat[job[test], co[test]]).sum())
        return err

    errors = [cv_error(option) for option in grid]
    if fam is not None and n_fam > 0:
        # The family term's ridge is chosen on the family term alone, then the soft-impute
        # grid is searched on what that term leaves (a third of the cost of every ridge).
        family_grid = [("family", 0, 0.0, ridge) for ridge in FAMILY_RIDGES]
        family_errors = [cv_error(option) for option in family_grid]
        ridge = family_grid[int(np.argmin(family_errors))][3]
        joint = [("family+low-rank", rank, lam, ridge) for rank, lam in low_rank]
        grid += family_grid + joint
        errors += family_errors + [cv_error(option) for option in joint]
    best, best_err = grid[0], math.inf
    for option, err in zip(grid, errors, strict=True):
        if err < best_err - 1e-12:
            best, best_err = option, err
    info.update(choice=best[0], rank=best[1], shrinkage=best[2], family_ridge=best[3],
                cv_mae=best_err / c)
    return fitted(*best, folds), info


NEIGHBOURS = 5
"""How many measured jobs, nearest by isolated counters, a job without a family to borrow from
takes its effects from (:func:`borrowed_effects`)."""


def borrowed_mates(
    measured: np.ndarray[Any, np.dtype[np.bool_]],
    family: _IntArray | None = None,
    readings: _FloatArray | None = None,
    k: int = NEIGHBOURS,
) -> list[_IntArray | None]:
    r"""For each job not ``measured`` (on one side of the pairs), the measured jobs it borrows
    its effects from (module docstring, *Borrowed effects*): its family's measured members,
    or else the ``k`` nearest measured jobs by isolated counter readings; None for a measured
    job and for one with neither.

    ``measured``: ``(J,)``; ``family``: ``(J,)`` family indices, negative for none;
    ``readings``: ``(J, R)`` log isolated readings (NaN: none; :func:`~interplace.model.
    _coldscale.isolated_log_readings`). Each resource is standardised by the measured jobs'
    readings (one with fewer than two, or no spread, is left out), and the distance is the
    mean squared difference over the resources both jobs read; ties go to the lower index.

    >>> import numpy as np
    >>> measured = np.array([True, True, True, False, False])
    >>> x = np.array([[0.0], [1.0], [2.0], [1.9], [np.nan]])
    >>> [m if m is None else m.tolist() for m in borrowed_mates(measured, readings=x, k=2)]
    [None, None, None, [2, 1], None]
    >>> fam = np.array([0, 1, -1, 0, 1])
    >>> [m if m is None else m.tolist() for m in borrowed_mates(measured, fam, x, k=2)]
    [None, None, None, [0], [1]]
    """
    n = measured.shape[0]
    out: list[_IntArray | None] = [None] * n
    z = None
    if readings is not None:
        known = readings[measured]
        use = np.array([
            int(np.isfinite(col).sum()) >= 2 and float(np.nanstd(col)) > 0 for col in known.T
        ], dtype=bool)
        if use.any():
            centre = np.nanmean(known[:, use], axis=0)
            z = (readings[:, use] - centre) / np.nanstd(known[:, use], axis=0)
    donors = np.flatnonzero(measured)
    for j in np.flatnonzero(~measured):
        if family is not None and family[j] >= 0:
            mates = np.flatnonzero(measured & (family == family[j]))
            if mates.size:
                out[j] = mates
                continue
        if z is None or not np.isfinite(z[j]).any() or not donors.size:
            continue
        diff = (z[donors] - z[j]) ** 2
        both = np.isfinite(diff)
        count = both.sum(1)
        dist = np.where(both, diff, 0.0).sum(1) / np.maximum(count, 1)
        ok = count > 0
        if ok.any():
            order = np.argsort(np.where(ok, dist, np.inf), kind="stable")[: min(k, int(ok.sum()))]
            out[j] = donors[order]
    return out


def borrowed_effects(
    effect: _FloatArray, job: _IntArray, co: _IntArray, family: _IntArray | None = None,
    readings: _FloatArray | None = None, k: int = NEIGHBOURS,
) -> tuple[_FloatArray, int, int]:
    r"""``effect`` (``(J, J)``) with the row of each job never measured as a victim and the
    column of each never measured as a co-runner borrowed from its mates
    (:func:`borrowed_mates`; module docstring, *Borrowed effects*).

    ``job``, ``co``: ``(C,)`` the measured pairs; ``family``, ``readings``, ``k``: as
    :func:`borrowed_mates`. Returns the new matrix (the input is not changed) and the number
    of rows and of columns borrowed.

    >>> import numpy as np
    >>> effect = np.array([[0.0, 0.2, 0.0], [0.1, 0.0, 0.0], [0.0, 0.0, 0.0]])
    >>> job, co = np.array([0, 1]), np.array([1, 0])
    >>> out, rows, cols = borrowed_effects(effect, job, co, np.array([0, 1, 0]))
    >>> out.tolist(), rows, cols
    ([[0.0, 0.2, 0.0], [0.1, 0.0, 0.1], [0.0, 0.2, 0.0]], 1, 1)
    """
    out, row_mates, col_mates, _ = _borrow(effect, job, co, family, readings, k)
    rows = sum(m is not None for m in row_mates)
    return out, rows, sum(m is not None for m in col_mates)


def _borrow(
    effect: _FloatArray, job: _IntArray, co: _IntArray, family: _IntArray | None,
    readings: _FloatArray | None, k: int, population: _IntArray | None = None,
) -> tuple[_FloatArray, list[_IntArray | None], list[_IntArray | None], set[int]]:
    """:func:`borrowed_effects`'s matrix with each job's mates as victim and as co-runner
    (:func:`borrowed_mates`; None: nothing borrowed on that side), and the jobs that
    borrowed from the population on either side. ``population``: jobs that, with neither
    family nor reading to find mates by, borrow from every measured job on that side (the
    population's mean effect; None: none do)."""
    n = effect.shape[0]
    victims = np.zeros(n, dtype=bool)
    victims[job] = True
    runners = np.zeros(n, dtype=bool)
    runners[co] = True
    out = effect.copy()
    row_mates, everyone = _or_everyone(
        borrowed_mates(victims, family, readings, k), victims, population
    )
    for j, mates in enumerate(row_mates):
        if mates is not None:
            out[j] = effect[mates].mean(0)
    filled = out.copy()
    col_mates, more = _or_everyone(
        borrowed_mates(runners, family, readings, k), runners, population
    )
    for c, mates in enumerate(col_mates):
        if mates is not None:
            out[:, c] = filled[:, mates].mean(1)
    return out, row_mates, col_mates, everyone | more


def cold_kernel_cells(
    n_jobs: int, pairs: tuple[_IntArray, _IntArray, _FloatArray, np.ndarray[Any, Any]],
    readings: _FloatArray, kernel: CounterKernel,
    cells: np.ndarray[Any, np.dtype[np.bool_]] | None = None,
) -> tuple[_IntArray, _FloatArray]:
    r"""The cold pairs among ``n_jobs`` jobs and the counter kernel's prediction of each
    (module docstring, *Cold jobs' counters*): flat indices ``j * J + k`` and :math:`\hat
    g_{jk}`, ``(A,)`` each.

    ``pairs``: the measured pairs' ``(job, co, log_speed, n)``, ``(C,)`` each; ``readings``:
    ``(J, R)`` log isolated readings (NaN: none). A cold pair is one not measured whose victim
    was never measured as a victim or whose co-runner was never measured as a co-runner,
    between two jobs with every reading the kernel uses; ``cells`` (``(J, J)``), when given,
    limits them to those cells. Empty where no measured pair lies between jobs with
    readings (a model saved without them)."""
    job, co, y, n = pairs
    victim = np.zeros(n_jobs, dtype=bool)
    victim[job] = True
    runner = np.zeros(n_jobs, dtype=bool)
    runner[co] = True
    measured = np.zeros((n_jobs, n_jobs), dtype=bool)
    measured[job, co] = True
    ok = kernel.readable(readings)
    if not (ok[job] & ok[co]).any():
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    cold = (~victim[:, None] | ~runner[None, :]) & ~measured & ok[:, None] & ok[None, :]
    if cells is not None:
        cold &= cells
    qj, qk = np.nonzero(cold)
    if qj.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    g = kernel.log_speed(job, co, y, n.astype(float), readings, qj, qk)
    return np.asarray(qj * n_jobs + qk, dtype=np.int64), g


def warm_cells(n_jobs: int, job: _IntArray, co: _IntArray) -> _IntArray:
    """Flat indices ``j * J + k`` (sorted) of the unmeasured pairs whose victim ``j`` was
    measured as a victim and whose co-runner ``k`` as a co-runner (module docstring, *A
    direct completion*); ``job``, ``co``: ``(C,)`` the measured pairs.

    >>> warm_cells(3, np.array([0, 1]), np.array([1, 2])).tolist()
    [2, 4]
    """
    warm = np.zeros((n_jobs, n_jobs), dtype=bool)
    warm[np.ix_(np.unique(job), np.unique(co))] = True
    warm[job, co] = False
    return np.flatnonzero(warm).astype(np.int64)


def speed_blended(
    draws: Mapping[str, torch.Tensor], target: torch.Tensor, offset: torch.Tensor,
    cells: _IntArray, g: _FloatArray, weight: float, *,
    terms: tuple[torch.Tensor, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``target`` and ``offset`` (``(J, J)`` each; ``offset`` meets ``target`` under
    ``draws``) with the pairs at flat indices ``cells`` (``(A,)``) moved so that the speed the
    model reports for each, its posterior mean over the draws, is the weighted geometric mean
    of the speed it reported and :math:`e^{\hat g}` (``g``, ``(A,)``: module docstring, *Cold
    jobs' counters*):

    .. math:: \log \tfrac{1}{S} \textstyle\sum_s e^{\ell_{s}(c')} = (1 - w) \log
              \tfrac{1}{S} \sum_s e^{\ell_{s}(c)} + w \hat g,

    :math:`\ell_s(c)` the pair's log speed in draw ``s`` at offset :math:`c`: one offset
    solve on the log of the mean speed (:func:`_solve_offsets` with ``mean_speed``, to
    1e-10). Each moved pair's target is then the mean log speed its offset reaches (a pair
    whose blend lies beyond the job's level stays at that level, as any target does).
    ``terms``: :func:`_pair_terms` of ``draws``.

    >>> import torch, numpy as np
    >>> d = example_draws(2, seed=0)
    >>> target = pair_log_speed(d) - 0.05
    >>> offset = _solve_offsets(d, target)
    >>> speed = lambda c: _cells_log_mean_speed(_pair_terms(d), c, torch.tensor([1]), 2)
    >>> t, c = speed_blended(d, target, offset, np.array([1]), np.array([-0.3]), 0.5)
    >>> bool(abs(speed(c) - (0.5 * speed(offset) - 0.15)) < 1e-9), bool(t[0, 0] == target[0, 0])
    (True, True)
    """
    n_jobs = target.shape[-1]
    terms = _pair_terms(draws) if terms is None else terms
    at = torch.as_tensor(cells, dtype=torch.int64)
    t = target.clone().reshape(-1)
    c = offset.clone().reshape(-1)
    if at.numel() == 0 or weight == 0:
        return t.reshape(target.shape), c.reshape(offset.shape)
    now = _cells_log_mean_speed(terms, c.reshape(offset.shape), at, n_jobs)
    want = torch.zeros_like(t)
    want[at] = (1 - weight) * now + weight * torch.as_tensor(g, dtype=now.dtype)
    c[at] = _solve_offsets(
        draws, want.reshape(target.shape), terms=terms, cells=at, mean_speed=True
    ).reshape(-1)[at]
    t[at] = _cells_draws(terms, c.reshape(offset.shape), at, n_jobs).mean(0)
    return t.reshape(target.shape), c.reshape(offset.shape)


def _or_everyone(
    mates: list[_IntArray | None], measured: np.ndarray[Any, np.dtype[np.bool_]],
    population: _IntArray | None,
) -> tuple[list[_IntArray | None], set[int]]:
    """``mates`` with each job of ``population`` that is not ``measured`` and has none
    given every measured job, and those jobs."""
    out, given = list(mates), set[int]()
    if population is None or not measured.any():
        return out, given
    for j in population:
        if not measured[j] and out[j] is None:
            out[j] = np.flatnonzero(measured)
            given.add(int(j))
    return out, given


def _pair_terms(draws: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    r"""What :func:`pair_log_speed` computes before the offset enters, each with draws first:
    the job's pressure ``(S, J, 1, R)``, the co-runner's pressure times :math:`e^{z_{jk}}`
    ``(S, J, J, R)`` (``(S, 1, J, R)`` without a pair term, :math:`z = 0`), the job's
    sensitivity ``(S, J, 1, R)``, the threshold ``(S, 1, 1, R)``, the isolated-reference bias
    ``(S, J, 1)`` and the job's own excess over the threshold, :math:`\mathrm{sp}(p_{jr} -
    \theta_r)`, ``(S, J, 1, R)``."""
    press = pressure(draws["log_demand"], draws["log_intensity"])
    sens = sensitivity(
        draws["log_demand"], draws["sens_eps"], draws["sens_loc"], draws["sens_slope"],
        draws["sens_scale"],
    )
    co_press = press.unsqueeze(-3)  # (S, 1, J, R): co-runner k's pressure
    u, w = draws.get("pair_u"), draws.get("pair_w")
    if u is not None and w is not None:
        co_press = co_press * (u @ w.transpose(-1, -2)).exp().unsqueeze(-1)
    press_j = press.unsqueeze(-2)
    th = draws["threshold"].unsqueeze(-2).unsqueeze(-2)
    return (
        press_j, co_press, sens.unsqueeze(-2), th, draws["iso_bias"].unsqueeze(-1),
        _softplus(press_j - th),
    )


def pair_log_speed(
    draws: Mapping[str, torch.Tensor],
    offset: torch.Tensor | None = None,
    *,
    terms: tuple[torch.Tensor, ...] | None = None,
) -> torch.Tensor:
    """Posterior mean log speed of every job next to every other alone on one device,
    ``(J, J)`` (isolated-reference bias included), from posterior ``draws`` (``(S, ...)``
    each, as :meth:`~interplace.model.InterferenceModel.draws` gives) and pressure offsets
    ``offset`` (``(J, J)``; None: none). It is :func:`~interplace.model._net.log_speed`
    for one co-runner sharing every resource, evaluated for all ``J * J`` pairs at once;
    ``terms`` (:func:`_pair_terms` of ``draws``) saves recomputing what the offset does
    not change."""
    press_j, co_press, sens_j, th, bias, base = _pair_terms(draws) if terms is None else terms
    if offset is not None:
        co_press = co_press * offset.exp().unsqueeze(-1)
    return _mean_log_speed(press_j, co_press, th, sens_j, base, bias)[0]


def _mean_log_speed(
    press_j: torch.Tensor, load: torch.Tensor, th: torch.Tensor, sens_j: torch.Tensor,
    base: torch.Tensor, bias: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The pair curve's posterior mean log speed over the draws (the first dimension),
    :math:`\frac{1}{S} \sum_s [\beta_j - \sum_r \log(1 + s_{jr} e_r)]` with the excess
    :math:`e_r = \max(0, \mathrm{sp}(x_r) - \mathrm{sp}(p_{jr} - \theta_r))` and
    :math:`x_r = p_{jr} + \text{load}_r - \theta_r`, returned with :math:`x` and :math:`e`
    (the offset search's slope reuses them). Shapes broadcast as :func:`_pair_terms` gives
    them, or gathered to ``(S, A, R)`` for ``A`` pairs."""
    value, arg, excess = _log_speed_draws(press_j, load, th, sens_j, base, bias)
    return value.mean(0), arg, excess


def _log_speed_draws(
    press_j: torch.Tensor, load: torch.Tensor, th: torch.Tensor, sens_j: torch.Tensor,
    base: torch.Tensor, bias: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`_mean_log_speed` draw by draw (the first dimension kept)."""
    arg = press_j + load - th
    excess = (_softplus(arg) - base).clamp_min(0.0)
    return -torch.log1p(sens_j * excess).sum(-1) + bias, arg, excess


def _gather(
    terms: tuple[torch.Tensor, ...], cells: torch.Tensor, n_jobs: int
) -> tuple[torch.Tensor, ...]:
    """:func:`_pair_terms` gathered to ``A`` pairs, flat indices ``cells`` (``(A,)``,
    ``j * J + k``), in :func:`_mean_log_speed`'s argument order (less the load): the job's
    pressure, the co-runner's (times :math:`e^{z_{jk}}`), the threshold, the job's
    sensitivity and own excess, each ``(S, A, R)`` (the threshold ``(S, 1, R)``), and the
    bias ``(S, A)``. Only the pairs asked for are built, never the whole grid."""
    press_j, co_press, sens_j, th, bias, base = terms
    j_of = torch.div(cells, n_jobs, rounding_mode="floor")
    k_of = cells - j_of * n_jobs
    row = j_of if co_press.shape[-3] > 1 else torch.zeros_like(j_of)  # pair term or not
    return (
        press_j.squeeze(-2).index_select(1, j_of),
        co_press[:, row, k_of, :],
        th.reshape(th.shape[0], 1, th.shape[-1]),
        sens_j.squeeze(-2).index_select(1, j_of),
        base.squeeze(-2).index_select(1, j_of),
        bias.squeeze(-1).index_select(1, j_of),
    )


def _solve_offsets(
    draws: Mapping[str, torch.Tensor], target: torch.Tensor, *, tol: float = 1e-10,
    max_iters: int = 60, terms: tuple[torch.Tensor, ...] | None = None,
    cells: torch.Tensor | None = None, mean_speed: bool = False,
) -> torch.Tensor:
    r"""Offsets ``(J, J)`` at which :func:`pair_log_speed` meets ``target`` (the bound where it
    cannot: above the job's level, ``-OFFSET_BOUND``; below the fully loaded speed,
    ``+OFFSET_BOUND``); ``cells``: the flat indices ``j * J + k`` of the pairs to solve
    (``(A,)``; None: every pair), the others left at 0.

    The mean log speed :math:`f(c)` is smooth and decreasing in the offset, so the root is
    bracketed in ``[-OFFSET_BOUND, OFFSET_BOUND]``: Newton steps from :math:`c = 0` on the
    analytic slope,

    .. math:: f'(c) = -\frac{1}{S} \sum_{s, r} \frac{s_{jr}\, \sigma(\kappa x_r)\,
              q_r e^{c}}{1 + s_{jr}\, [\mathrm{sp}(x_r) - \mathrm{sp}(p_{jr} - \theta_r)]},
              \quad x_r = p_{jr} + q_r e^{c} - \theta_r,

    (:math:`q_r`: the co-runner's pressure times :math:`e^{z_{jk}}`), each step narrowing the
    bracket and falling back to bisection whenever it would leave it, until
    :math:`|f - \text{target}| \le` ``tol`` on every reachable pair. A plain bisection to the
    same accuracy took 40 evaluations of :func:`pair_log_speed`; 8 bisection steps before
    Newton's took 10 plus Newton steps on the pairs not yet met; this takes 2 (the bounds) plus
    Newton steps, 6-9 in all per pair on Gavel and Lucid, about half the time. ``terms``: as
    for :func:`pair_log_speed`. With ``mean_speed`` the offsets meet ``target`` in the log of
    the posterior mean *speed* instead, :math:`\log \frac{1}{S} \sum_s e^{\ell_s(c)}` with
    :math:`\ell_s(c)` draw ``s``'s log speed (:func:`speed_blended`), whose slope is the
    draws' slopes weighted by their shares of the mean speed, :math:`\sum_s
    \mathrm{softmax}(\ell(c))_s\, \ell_s'(c)`: also smooth and decreasing in :math:`c`.
    """
    terms = _pair_terms(draws) if terms is None else terms
    n_jobs = target.shape[-1]
    cells = torch.arange(n_jobs * n_jobs) if cells is None else cells.to(torch.int64)
    p_j, q, th_r, s_j, b_j, bias_j = _gather(terms, cells, n_jobs)
    t = target.reshape(-1).index_select(0, cells)

    def over_draws(value: torch.Tensor) -> torch.Tensor:
        # The objective from each draw's log speed, (S, A) -> (A,).
        return _log_mean_exp(value) if mean_speed else value.mean(0)

    def f(c: torch.Tensor) -> torch.Tensor:
        load = q * c.exp().unsqueeze(-1)
        return over_draws(_log_speed_draws(p_j, load, th_r, s_j, b_j, bias_j)[0]) - t

    lo = torch.full_like(t, -OFFSET_BOUND)
    hi = torch.full_like(t, OFFSET_BOUND)
    below = f(lo) <= 0  # even with the co-runner's pressure off: too slow (or exactly met)
    above = f(hi) >= 0  # even with it beyond any capacity: too fast
    x = torch.zeros_like(t)  # the structure's own pair: the targets lie near it
    # Newton steps on the pairs still open only: each pair's iterates are its own, so pairs
    # that have met the target leave the set and the rest cost what they are, not every pair
    # asked for.
    active = torch.nonzero(~(below | above)).squeeze(-1)
    q, p_j, s_j, b_j, bias_j = (v.index_select(1, active) for v in (q, p_j, s_j, b_j, bias_j))
    xa, loa, hia, ta = x[active], lo[active], hi[active], t[active]
    for _ in range(max_iters):
        if active.numel() == 0:
            break
        load = q * xa.exp().unsqueeze(-1)
        draw, arg, excess = _log_speed_draws(p_j, load, th_r, s_j, b_j, bias_j)
        d = -(s_j * torch.sigmoid(KAPPA * arg) * load / (1.0 + s_j * excess)).sum(-1)
        slope = (torch.softmax(draw, 0) * d).sum(0) if mean_speed else d.mean(0)
        value = over_draws(draw) - ta
        done = value.abs() <= tol
        x[active] = xa
        if bool(done.all()):
            break
        keep = ~done
        active, xa, loa, hia, ta = active[keep], xa[keep], loa[keep], hia[keep], ta[keep]
        value, slope = value[keep], slope[keep]
        q, p_j, s_j = q[:, keep], p_j[:, keep], s_j[:, keep]
        b_j, bias_j = b_j[:, keep], bias_j[:, keep]
        slow = value < 0
        hia = torch.where(slow, xa, hia)
        loa = torch.where(slow, loa, xa)
        step = xa - value / slope
        inside = torch.isfinite(step) & (step > loa) & (step < hia)
        xa = torch.where(inside, step, 0.5 * (loa + hia))
    else:
        x[active] = xa
    x = torch.where(below, -OFFSET_BOUND, x)
    x = torch.where(above & ~below, OFFSET_BOUND, x)
    out = torch.zeros(n_jobs * n_jobs, dtype=x.dtype)
    out[cells] = x
    return out.reshape(target.shape)


def _cells_log_speed(
    draws: Mapping[str, torch.Tensor], cells: torch.Tensor, n_jobs: int, *,
    terms: tuple[torch.Tensor, ...] | None = None,
) -> torch.Tensor:
    """:func:`pair_log_speed` without offsets at flat indices ``cells`` only, ``(A,)``
    (``terms``: :func:`_pair_terms` of ``draws``, where the caller has them)."""
    terms = _pair_terms(draws) if terms is None else terms
    p_j, q, th_r, s_j, b_j, bias_j = _gather(terms, cells, n_jobs)
    return _mean_log_speed(p_j, q, th_r, s_j, b_j, bias_j)[0]


def _cells_draws(
    terms: tuple[torch.Tensor, ...], offset: torch.Tensor, cells: torch.Tensor, n_jobs: int
) -> torch.Tensor:
    """Each draw's log speed of the pairs at flat indices ``cells`` under pressure offsets
    ``offset`` (``(J, J)``), ``(S, A)`` (``terms``: :func:`_pair_terms`)."""
    p_j, q, th_r, s_j, b_j, bias_j = _gather(terms, cells, n_jobs)
    load = q * offset.reshape(-1)[cells].exp().unsqueeze(-1)
    return _log_speed_draws(p_j, load, th_r, s_j, b_j, bias_j)[0]


def _cells_variance(
    terms: tuple[torch.Tensor, ...], offset: torch.Tensor, cells: torch.Tensor, n_jobs: int
) -> torch.Tensor:
    """The variance over the draws of each pair's log speed at flat indices ``cells`` under
    pressure offsets ``offset`` (``(J, J)``), ``(A,)`` (``terms``: :func:`_pair_terms`)."""
    return _cells_draws(terms, offset, cells, n_jobs).var(0)


def _cells_log_mean_speed(
    terms: tuple[torch.Tensor, ...], offset: torch.Tensor, cells: torch.Tensor, n_jobs: int
) -> torch.Tensor:
    """The log of the posterior mean speed (over the draws) of the pairs at flat indices
    ``cells`` under pressure offsets ``offset`` (``(J, J)``), ``(A,)``."""
    return _log_mean_exp(_cells_draws(terms, offset, cells, n_jobs))


def _log_mean_exp(value: torch.Tensor) -> torch.Tensor:
    r""":math:`\log \frac{1}{S} \sum_s e^{v_s}` over the first dimension (the draws)."""
    return torch.logsumexp(value, 0) - math.log(value.shape[0])


def lifted_spread(
    draws: Mapping[str, torch.Tensor], lifted: Mapping[str, torch.Tensor], target: torch.Tensor,
    offset: torch.Tensor, tau: float, lift: _FloatArray, *,
    terms: tuple[torch.Tensor, ...] | None = None,
    lifted_terms: tuple[torch.Tensor, ...] | None = None,
    columns: _IntArray | None = None,
    df: float = 4.0,
) -> _FloatArray:
    r"""Each pair's :math:`\tau_{jk}` after the ceiling lift (module docstring,
    *Intervals*), ``(J, J)``: :math:`\tau` narrowed by what the lift added to the variance
    of the pair's log speed over the draws, :math:`\max(\tau^2 - \tfrac{\nu - 2}{\nu}
    (v^\uparrow_{jk} - v_{jk}), (\tau/10)^2)^{1/2}`, where a Student-t spread of scale
    :math:`\tau` and ``df`` :math:`\nu > 2` has variance :math:`\tfrac{\nu}{\nu - 2}
    \tau^2` (for :math:`\nu \le 2` its variance is infinite and :math:`\tau` is kept).
    ``draws``, ``lifted``: the draws before and after the lift
    (:func:`lifted_draws`); ``target``: ``(J, J)`` the pairs' targets; ``offset``: ``(J, J)``
    the offsets that meet them under ``lifted``; ``lift``: ``(J,)``. Rows of jobs not lifted
    are :math:`\tau` (their draws and offsets are the same either way); the others' unlifted
    offsets are solved here. ``terms``, ``lifted_terms``: :func:`_pair_terms` of ``draws``
    and ``lifted``, where the caller has them. ``columns``: the co-runners whose pairs are
    narrowed (default: all; the rest stay :math:`\tau`, and only these columns of
    ``target`` and ``offset`` are read).

    >>> import torch, numpy as np
    >>> d = example_draws(2, seed=0)
    >>> lift = np.array([0.1, 0.0])
    >>> up = lifted_draws(d, lift)
    >>> target = pair_log_speed(d) - 0.02
    >>> tau_jk = lifted_spread(d, up, target, _solve_offsets(up, target), 0.05, lift)
    >>> bool(tau_jk[0, 1] < 0.05), tau_jk[1].tolist()  # the lifted row narrows; not the other
    (True, [0.05, 0.05])
    """
    n_jobs = target.shape[0]
    out = np.full((n_jobs, n_jobs), float(tau))
    rows = np.flatnonzero(lift > 0)
    if rows.size == 0 or df <= 2:
        return out
    cols = np.arange(n_jobs) if columns is None else np.asarray(columns)
    cells = torch.as_tensor((rows[:, None] * n_jobs + cols[None, :]).reshape(-1))
    terms = _pair_terms(draws) if terms is None else terms
    lifted_terms = _pair_terms(lifted) if lifted_terms is None else lifted_terms
    before = _solve_offsets(draws, target, terms=terms, cells=cells)
    v0 = _cells_variance(terms, before, cells, n_jobs)
    v1 = _cells_variance(lifted_terms, offset, cells, n_jobs)
    # The spread's variance is df / (df - 2) tau^2 (2 tau^2 at the default 4): giving back
    # the lift's extra variance takes (df - 2) / df of it off tau^2.
    narrowed = np.sqrt(np.maximum(tau**2 - (df - 2) / df * (v1 - v0).numpy(), (tau / 10) ** 2))
    out.reshape(-1)[cells.numpy()] = narrowed
    return out


def measured_pairs(
    obs: Observations,
    draws: Mapping[str, torch.Tensor],
    structure_noise: float,
    measure_noise: float,
    *,
    seed: int = 0,
    family: _IntArray | None = None,
    readings: _FloatArray | None = None,
    lift_ceilings: bool = False,
    df: float = 4.0,
    kernel_weight: float = 0.0,
    kernel_readings: _FloatArray | None = None,
    direct_weight: float = 0.0,
) -> tuple[MeasuredPairs | None, dict[str, Any]]:
    r"""The second stage for ``obs`` (module docstring), or None without a measured pair.

    ``draws``: posterior draws of the structure (``(S, ...)`` each); ``structure_noise``: its fitted
    noise scale :math:`s`; ``family``: ``(J,)`` each job's family index (negative: none), or None
    for a fit without families; ``readings``: ``(J, R)`` the jobs' log isolated counter readings
    (NaN: none), or None; ``kernel_weight``: :math:`w` of the counter kernel (module docstring,
    *Cold jobs' counters*; 0: none), fitted on ``kernel_readings`` (``readings`` with those below
    the floor at it, :func:`~._counterkernel.floored`; None: ``readings``) and summarised in
    ``counter_kernel``. Returns the pairs and the completion's summary (:func:`complete_effects`)
    with ``unreachable``, the number of measured pairs whose target no offset meets,
    ``borrowed_rows`` and ``borrowed_columns``, how many jobs' effects :func:`borrowed_effects`
    filled, and ``ceiling_lift``, each job's lift (a list, zeros unless ``lift_ceilings``: module
    docstring, *Ceilings*); the returned pairs are then relative to ``draws`` lifted so
    (:func:`lifted_draws`), which the caller's posterior must match, with each pair's interval
    spread (:func:`lifted_spread`; its median as ``spread_median``), and ``measure_noise`` and
    ``repeats_df``, the measurement noise :math:`\sigma_m` used and the degrees of freedom of the
    repeats it was read from (:func:`measurement_noise`, with ``measure_noise`` the prior). ``df``:
    the degrees of freedom of the spreads' Student-t (``Hyper.speed_df``). ``direct_weight``:
    :math:`w_d` of the direct completion averaged into the warm pairs (module docstring, *A
    direct completion*; 0: none), summarised in ``direct`` (its ``rank``, ``shrinkage`` and
    ``pairs``, how many pairs it moved).
    """
    if not (structure_noise > 0 and measure_noise > 0):
        raise InputError("measured pairs: noise scales must be > 0")
    n_jobs = draws["log_demand"].shape[-2]
    flat, mean, counts = measured_cells(obs, n_jobs)
    if flat.size == 0:
        return None, {"choice": "none"}
    measure_noise, repeats = measurement_noise(obs, n_jobs, measure_noise)
    job, co = flat // n_jobs, flat % n_jobs
    terms = _pair_terms(draws)
    mu = pair_log_speed(draws, terms=terms)
    residual = mean - mu.numpy()[job, co]
    expected, info = complete_effects(residual, job, co, n_jobs, seed=seed, family=family)
    # The completion explains part of the misfit: the spread left to a pair's own effect
    # shrinks by the ratio of cross-validated errors (an absolute error is the scale of a
    # Student-t with 4 degrees of freedom, so the ratio carries over to the scale).
    ratio = info["cv_mae"] / info["cv_mae_none"] if info["cv_mae_none"] > 0 else 1.0
    s = structure_noise * min(ratio, 1.0)
    tau = math.sqrt(max(s**2 - measure_noise**2, (s / 10) ** 2))
    effect = expected.copy()
    w = tau**2 / (tau**2 + measure_noise**2 / counts)
    effect[job, co] = expected[job, co] + w * (residual - expected[job, co])
    effect, info["borrowed_rows"], info["borrowed_columns"] = borrowed_effects(
        effect, job, co, family, readings
    )
    kernel, cold, cold_g = None, np.zeros(0, dtype=np.int64), np.zeros(0)
    features = readings if kernel_readings is None else kernel_readings
    if features is not None and kernel_weight > 0:
        kernel, info["counter_kernel"] = fit_counter_kernel(
            job, co, mean, counts.astype(float), features, seed=seed
        )
        if kernel is not None:
            cold, cold_g = cold_kernel_cells(n_jobs, (job, co, mean, counts), features, kernel)
            info["counter_kernel"]["pairs"] = int(cold.size)
    # A borrowed pair is unmeasured: its effect is its prior mean.
    unmeasured = np.ones_like(effect, dtype=bool)
    unmeasured[job, co] = False
    expected = np.where(unmeasured, effect, expected)
    target = mu + torch.as_tensor(effect)
    lift = ceiling_lift(draws, target, job, co) if lift_ceilings else np.zeros(n_jobs)
    unlifted, unlifted_terms = draws, terms
    if lift.any():
        draws = lifted_draws(draws, lift)
        terms = _lifted_terms(terms, lift)
        # The stored completion is relative to the lifted structure, as everything is.
        expected = expected - lift[:, None]
    info["ceiling_lift"] = lift.tolist()
    info["measure_noise"], info["repeats_df"] = measure_noise, repeats
    offset = _solve_offsets(draws, target, terms=terms)
    # Each blend: the pairs (flat cells), the log speeds averaged into them, the weight.
    blends: list[tuple[_IntArray, _FloatArray, float]] = []
    if cold.size:
        blends.append((cold, cold_g, kernel_weight))
    warm = warm_cells(n_jobs, job, co) if direct_weight > 0 else np.zeros(0, dtype=np.int64)
    if warm.size:
        wj, wk = np.divmod(warm, n_jobs)
        d_mu, d_a, d_b, d_z, rank, lam = select_cells(np.exp(mean), job, co, n_jobs, seed=seed)
        direct = np.log(np.maximum(d_mu + d_a[wj] + d_b[wk] + d_z[wj, wk], MIN_SPEED))
        info["direct"] = {"rank": rank, "shrinkage": lam, "pairs": int(warm.size)}
        blends.append((warm, direct, direct_weight))
    for cells, blended, weight in blends:
        target, offset = speed_blended(
            draws, target, offset, cells, blended, weight, terms=terms
        )
        # The blended pairs' completion is what their targets now say (relative to the
        # lifted structure, as everything stored is).
        bj, bk = np.divmod(cells, n_jobs)
        expected[bj, bk] = (target - mu).numpy()[bj, bk] - lift[bj]
    reached = pair_log_speed(draws, offset, terms=terms)[job, co]
    info["unreachable"] = int(((reached - target[job, co]).abs() > 1e-6).sum())
    spread = None
    if lift.any():
        spread = lifted_spread(unlifted, draws, target, offset, tau, lift,
                               terms=unlifted_terms, lifted_terms=terms, df=df)
        info["spread_median"] = float(np.median(spread))
    pairs = MeasuredPairs(
        job=job, co=co, log_speed=mean, n=counts, scale=float(tau),
        noise=float(measure_noise), expected=expected, offset=offset.numpy(), spread=spread,
        kernel=kernel, kernel_weight=float(kernel_weight) if kernel is not None else 0.0,
    )
    return pairs, info


def ceiling_lift(
    draws: Mapping[str, torch.Tensor], target: torch.Tensor, job: _IntArray, co: _IntArray
) -> _FloatArray:
    r"""How far each job's level next to a co-runner on its GPU must rise so that every
    measured pair of it is reachable (module docstring, *Ceilings*), ``(J,)``, zero for a job
    whose measured targets all lie at or below that level (and for one without a measured
    pair):
    :math:`\ell_j = \max(0, \max_{k \in M_j} t_{jk} - \bar\beta_j)` with :math:`t` the
    targets ``(J, J)`` (log scale), :math:`M_j` the co-runners measured with ``j`` (``job``,
    ``co``: ``(C,)``) and :math:`\bar\beta_j` the mean over ``draws`` of its
    isolated-reference bias, the structure's mean log level of ``j`` next to a co-runner
    whose pressure is off (:func:`~interplace.model._net.reference_level`).

    >>> import torch, numpy as np
    >>> draws = {"iso_bias": torch.tensor([[0.0, 0.1], [0.2, 0.1]])}
    >>> t = torch.tensor([[0.15, -0.3], [0.05, 0.3]])
    >>> ceiling_lift(draws, t, np.array([0, 0, 1]), np.array([0, 1, 0])).round(6).tolist()
    [0.05, 0.0]
    """
    n_jobs = target.shape[0]
    top = np.full(n_jobs, -np.inf)
    np.maximum.at(top, job, target[job, co].numpy())
    alone = draws["iso_bias"].to(torch.float64).mean(0).numpy()
    return np.asarray(np.where(np.isfinite(top), np.maximum(top - alone, 0.0), 0.0), dtype=float)


def example_draws(n_jobs: int, *, seed: int, samples: int = 64) -> dict[str, torch.Tensor]:
    """Toy posterior draws of ``n_jobs`` jobs on one resource, ``samples`` of each site (as
    :meth:`~interplace.model.InterferenceModel.draws` gives them, without a pair term), for
    examples and tests of this module's functions: each site normal about a plausible
    centre.

    >>> d = example_draws(3, seed=0)
    >>> d["log_demand"].shape, d["threshold"].shape
    (torch.Size([64, 3, 1]), torch.Size([64, 1]))
    """
    gen = torch.Generator().manual_seed(seed)
    sites = [  # name, shape after the draws, sd, centre
        ("log_demand", (n_jobs, 1), 0.5, -1.0), ("log_intensity", (n_jobs, 1), 0.3, 0.0),
        ("sens_eps", (n_jobs, 1), 1.0, 0.0), ("sens_loc", (1,), 0.3, 0.0),
        ("sens_slope", (1,), 0.1, 0.5), ("sens_scale", (1,), 0.1, 0.5),
        ("threshold", (1,), 0.1, 0.8), ("iso_bias", (n_jobs,), 0.02, 0.0),
    ]
    return {
        name: torch.randn((samples, *shape), generator=gen, dtype=torch.float64) * sd + centre
        for name, shape, sd, centre in sites
    }


def lifted_draws(
    draws: Mapping[str, torch.Tensor], lift: _FloatArray
) -> dict[str, torch.Tensor]:
    """``draws`` with each job's isolated-reference bias raised by ``lift`` (``(J,)``)."""
    bias = draws["iso_bias"]
    return {**draws, "iso_bias": bias + torch.as_tensor(lift, dtype=bias.dtype)}


def _lifted_terms(terms: tuple[torch.Tensor, ...], lift: _FloatArray) -> tuple[torch.Tensor, ...]:
    """:func:`_pair_terms` of :func:`lifted_draws` from those of the draws before: the lift
    moves the isolated-reference bias alone (the same values, without the pairs' pressures
    computed again)."""
    bias = terms[4]
    up = torch.as_tensor(lift, dtype=bias.dtype).unsqueeze(-1)
    return (*terms[:4], bias + up, *terms[5:])


def extended_pairs(
    pairs: MeasuredPairs,
    fit_draws: Mapping[str, torch.Tensor],
    draws: Mapping[str, torch.Tensor],
    *,
    family: _IntArray | None = None,
    readings: _FloatArray | None = None,
    lift: _FloatArray | None = None,
    df: float = 4.0,
    kernel_readings: _FloatArray | None = None,
) -> tuple[MeasuredPairs, list[int], list[int]]:
    r"""``pairs`` extended to jobs added after the fit (placement-time cold start): each added
    job borrows its row and column of effects as the fit's own cold jobs do (module docstring,
    *Borrowed effects*), and its offsets are solved against ``draws``.

    ``fit_draws``: the second stage's draws of the ``J0`` fitted jobs (``(S, ...)`` each, as
    the fit took them), from which the measured pairs' effects :math:`\hat\delta_{jk}` are
    rebuilt (the structure's mean log speed of each pair and the conjugate update);
    ``draws``: draws of all ``J`` jobs, the added ones last. ``family``: ``(J,)`` family
    indices (negative: none); ``readings``: ``(J, R)`` log isolated readings (NaN: none);
    ``kernel_readings``: the same with those below the floor at it (None: ``readings``), for
    the counter kernel ``pairs`` carries, whose average the added jobs' pairs take as the
    fit's cold jobs' did (module docstring, *Cold jobs' counters*). The ``J1 x J1`` block
    ``pairs`` already holds (``J0 <= J1 <= J``) keeps its completion
    and offsets; the rows and columns of jobs ``J1..J-1`` get the borrowed effects
    (:func:`borrowed_effects`) as their completion and the offsets that meet the structure's
    mean log speed under ``draws`` plus that effect. Returns the pairs, ``(J, J)``, and the
    indices of the added jobs that borrowed, and of those among them that borrowed from
    the population: a job with neither a family nor a reading borrows from every measured
    job, the population's mean effect, as the completion gives a fitted job it has nothing
    of (zero effect would put its pairs at the *lifted* structure next to a lifted job).
    ``lift``: ``(J0,)``
    the fit's ceiling lifts (:func:`ceiling_lift`; None: none): the effects are lent as the
    fit lent them, relative to the structure before the lift (an added job is not lifted).
    Spreads (where ``pairs`` has them): the ``J1 x J1`` block's are kept, an added job's row
    is :math:`\tau`, and a lifted fitted job's pair with an added job gets
    :func:`lifted_spread`'s :math:`\tau_{jk}` (``draws`` hold the fitted jobs lifted; ``df``:
    the spreads' degrees of freedom, ``Hyper.speed_df``).
    """
    n_fit = fit_draws["log_demand"].shape[-2]
    n_all = draws["log_demand"].shape[-2]
    n_old = pairs.expected.shape[0]
    if not n_fit <= n_old <= n_all:
        raise InputError(
            f"measured pairs cover {n_old} jobs: not between the fit's {n_fit} and {n_all}"
        )
    if lift is not None and lift.shape != (n_fit,):
        raise InputError(f"ceiling lifts: {lift.shape[0]} values for {n_fit} fitted jobs")
    if n_old == n_all:
        return pairs, [], []
    effect = np.zeros((n_all, n_all))
    effect[:n_fit, :n_fit] = pairs.expected[:n_fit, :n_fit]
    if len(pairs):
        j, k = pairs.job, pairs.co
        mu = _cells_log_speed(fit_draws, torch.as_tensor(j * n_fit + k), n_fit).numpy()
        effect[j, k] += pairs.weight() * (pairs.log_speed - mu - effect[j, k])
    up = np.zeros(n_all)
    if lift is not None:
        up[:n_fit] = lift
    borrowed, row_mates, col_mates, everyone = _borrow(
        effect + up[:, None], pairs.job, pairs.co, family, readings, NEIGHBOURS,
        population=np.arange(n_old, n_all),
    )
    borrowed -= up[:, None]
    lent = [
        i for i in range(n_old, n_all) if row_mates[i] is not None or col_mates[i] is not None
    ]
    expected = borrowed.copy()
    expected[:n_old, :n_old] = pairs.expected
    grid = np.arange(n_all * n_all).reshape(n_all, n_all)
    cells = torch.as_tensor(np.setdiff1d(grid, grid[:n_old, :n_old]))  # new rows, columns
    terms = _pair_terms(draws)
    base = torch.zeros(n_all * n_all, dtype=torch.float64)
    base[cells] = _cells_log_speed(draws, cells, n_all, terms=terms)
    target = torch.zeros(n_all * n_all, dtype=torch.float64)
    target[cells] = base[cells] + torch.as_tensor(expected).reshape(-1)[cells]
    solved = _solve_offsets(draws, target.reshape(n_all, n_all), terms=terms, cells=cells)
    features = readings if kernel_readings is None else kernel_readings
    if pairs.kernel is not None and features is not None and pairs.kernel_weight > 0:
        new_cells = np.zeros(n_all * n_all, dtype=bool)
        new_cells[cells.numpy()] = True
        cold, g = cold_kernel_cells(
            n_all, (pairs.job, pairs.co, pairs.log_speed, pairs.n), features, pairs.kernel,
            cells=new_cells.reshape(n_all, n_all),
        )
        blended, solved = speed_blended(
            draws, target.reshape(n_all, n_all), solved, cold, g, pairs.kernel_weight,
            terms=terms,
        )
        target = blended.reshape(-1)
        vj, vk = np.divmod(cold, n_all)
        expected[vj, vk] = (target - base).numpy()[cold]
    offset = solved.numpy()
    offset[:n_old, :n_old] = pairs.offset
    # An added job is not lifted, so its own row keeps tau; a lifted fitted job's pair with
    # it gives back what the lift added to its variance, as the fit's own unmeasured pairs do
    # (module docstring, *Intervals*): ``draws`` hold the fitted jobs lifted.
    spread = None if pairs.spread is None else pairs.spreads(n_all).numpy()
    if spread is not None and up.any():
        lifted_rows = np.flatnonzero(up > 0)
        new = np.arange(n_old, n_all)
        narrowed = lifted_spread(
            lifted_draws(draws, -up), draws, target.reshape(n_all, n_all),
            torch.as_tensor(offset), pairs.scale, up, columns=new,
            terms=_lifted_terms(terms, -up), lifted_terms=terms, df=df,
        )
        spread[np.ix_(lifted_rows, new)] = narrowed[np.ix_(lifted_rows, new)]
    return MeasuredPairs(
        job=pairs.job, co=pairs.co, log_speed=pairs.log_speed, n=pairs.n, scale=pairs.scale,
        noise=pairs.noise, expected=expected, offset=offset, spread=spread,
        kernel=pairs.kernel, kernel_weight=pairs.kernel_weight,
    ), lent, sorted(everyone)


def spread_draws(
    pairs: MeasuredPairs, num_samples: int, n_jobs: int, df: float, gen: torch.Generator
) -> torch.Tensor:
    r"""Draws of the unknown effect of every pair never measured, ``(S, J, J)``:
    Student-t(``df``) of scale :math:`\tau_{jk}` (``pairs.spreads``), zero for the measured
    pairs (module docstring, *Intervals*)."""
    shape = torch.Size((num_samples, n_jobs * n_jobs))
    z = torch.randn(shape, generator=gen, dtype=torch.float64)
    if float(df).is_integer() and 2 <= df <= 10 and int(df) % 2 == 0:
        # chi^2 with an even number 2h of degrees of freedom is -2 log of h uniforms'
        # product: exact, and ten times faster than the rejection sampler.
        u = torch.rand((int(df) // 2, *shape), generator=gen, dtype=torch.float64)
        chi = -2.0 * torch.log(u.clamp_min(1e-300)).sum(0) / df
    else:
        chi = seeded_gamma(torch.tensor(df / 2, dtype=torch.float64), shape, gen) / (df / 2)
    spread = pairs.spreads(n_jobs).reshape(-1) * z / torch.sqrt(chi)
    if len(pairs):
        spread = spread.index_fill(-1, torch.as_tensor(pairs.job * n_jobs + pairs.co), 0.0)
    return spread.reshape(num_samples, n_jobs, n_jobs)


def seeded_gamma(
    concentration: torch.Tensor, shape: torch.Size, gen: torch.Generator
) -> torch.Tensor:
    """Gamma(concentration, 1) draws from a private generator (torch's sampler has none).

    Marsaglia and Tsang's method, vectorised with rejection rounds; needs concentration >= 1,
    and uses the boost :math:`G_a = G_{a+1} U^{1/a}` below that.
    """
    a = float(concentration)
    boost = a < 1
    a1 = a + 1 if boost else a
    d = a1 - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    out = torch.empty(shape, dtype=torch.float64)
    todo = torch.ones(shape, dtype=torch.bool)
    while bool(todo.any()):
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        u = torch.rand(shape, generator=gen, dtype=torch.float64)
        v = (1 + c * x) ** 3
        ok = (v > 0) & (
            torch.log(u.clamp_min(1e-300))
            < 0.5 * x**2 + d - d * v + d * torch.log(v.clamp_min(1e-300))
        )
        take = todo & ok
        out = torch.where(take, d * v, out)
        todo = todo & ~ok
    if boost:
        u = torch.rand(shape, generator=gen, dtype=torch.float64)
        out = out * u.pow(1.0 / a)
    return out
