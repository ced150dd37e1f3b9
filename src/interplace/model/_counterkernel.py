r"""A kernel regression of pair speeds on both jobs' isolated counter readings: what the
second stage gives a job it has no co-located measurement of.

The second stage (:mod:`interplace.model._cells`) completes an unmeasured pair's effect from
the measured ones; a job never measured on one side of a pair (a cold job) has nothing to
complete from and borrows its mates' effects (:func:`~._cells.borrowed_effects`): an average
over five jobs near it in counter readings. This module is the smooth version of that
borrowing, learned over every measured pair at once. Each measured pair
:math:`c = (j, k)` (job ``j`` next to co-runner ``k`` alone on one device) has the mean
measured log speed :math:`y_c` of its :math:`n_c` measurements and the features
:math:`x_c = (z_j, z_k) \in \mathbb{R}^{2R}`, :math:`z` a job's log isolated readings per
resource, standardised over the fitted jobs. The regression is a Gaussian process with a
constant mean, a smooth function of the two jobs' readings and a level of each job's own on
each side,

.. math:: y_c = m + f(x_c) + a_{j_c} + b_{k_c} + \varepsilon_c, \quad
          f \sim \mathcal{GP}\bigl(0, s_f^2 e^{-\lVert x - x' \rVert^2 / 2\ell^2}\bigr), \quad
          a_j, b_k \sim \mathcal{N}(0, s_a^2), \quad
          \varepsilon_c \sim \mathcal{N}(0, \sigma^2 / n_c),

so its posterior mean at a pair :math:`*` is :math:`\hat g_* = m + k_*^\top (K + D)^{-1}
(y - m)` with :math:`K_{cc'} = s_f^2 e^{-\lVert x_c - x_{c'} \rVert^2 / 2\ell^2} + s_a^2
([j_c = j_{c'}] + [k_c = k_{c'}])`, :math:`D = \operatorname{diag}(\sigma^2 / n_c)` and
:math:`m` the mean of :math:`y`. A cold job's own level is unknown (zero), so its pairs are
predicted from its readings and its co-runner's level: the features and the one-hot ids of
the EBM the benchmarks compare with (Lucid's choice), in a smoother learner.
:math:`(\ell, s_f, s_a)` are chosen on :data:`GRID` (:math:`\sigma` = :data:`NOISE`) by
cross-validation *across jobs*, as the regression will be used: the jobs are dealt into
``folds`` seeded folds, and each fold's jobs lose every measured pair they are in (either
side), which the rest predict (mean absolute error of the speed :math:`e^{y}`).

The second stage does not replace its prediction of a cold pair by the regression's; it
averages the two on the log scale (``Hyper.cold_kernel_weight``, :math:`w`, default 0.5:
:math:`\log \hat v = (1 - w) \log \bar v + w \hat g`, :math:`\bar v` the posterior mean
speed the structure with its borrowed effect reports for the pair;
:func:`~._cells.speed_blended`), as two estimates of one speed from different
information: the structure and its mates from the job's fitted mechanism, the regression
from how pairs of jobs with such readings ran. Measured on Lucid's
cold-start splits in ``docs/benchmarks.md`` ("The counter kernel for cold jobs" and "The
counter kernel on the speed the model reports").

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> z = rng.standard_normal((8, 2))              # 8 jobs, 2 readings each
>>> job, co = np.divmod(np.arange(64), 8)
>>> y = -0.3 * np.tanh(z[job, 0] + z[co, 1])     # log speed, a smooth function of both
>>> kernel, info = fit_counter_kernel(job, co, y, np.ones(64), z, seed=0)
>>> pred = kernel.log_speed(job, co, y, np.ones(64), z, job[:3], co[:3])
>>> bool(np.abs(pred - y[:3]).max() < 0.05), info["cells"]
(True, 64)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from interplace.errors import InputError

__all__ = [
    "GRID",
    "NOISE",
    "READING_FLOOR",
    "CounterKernel",
    "fit_counter_kernel",
    "floored",
    "kernel_readings",
]

_FloatArray = np.ndarray[Any, np.dtype[np.float64]]
_IntArray = np.ndarray[Any, np.dtype[np.int64]]

GRID: tuple[tuple[float, float, float], ...] = tuple(
    (ell, sf, sa) for ell in (1.0, 2.0) for sf in (0.3, 0.6) for sa in (0.03, 0.1)
)
r"""The candidate :math:`(\ell, s_f, s_a)`: length scale in standardised log readings, the
smooth function's and the job levels' prior spreads in log speed."""
NOISE = 0.1
r""":math:`\sigma`, the spread of one measurement of a pair about the regression (log speed):
the structure's misfit on the public data is about 10% (:mod:`._cells`)."""
MIN_CELLS = 20
"""Fewer measured pairs between jobs with readings than this: no regression."""
READING_FLOOR = 0.005
"""The smallest isolated reading (share of full scale) the kernel tells apart: half of NVML's
1% resolution. A job whose mean isolated reading of a resource lies below it, 0 included,
reads as this floor there (:func:`floored`): a reading of 0 has no log, and the other
readings keep it out of the nearest-job search as unknown, but to the regression it is a
low reading, not a missing one (Lucid's six reinforcement-learning jobs read 0% memory
utilisation; as missing, their pairs and those of any job next to them fell outside the
regression)."""


@dataclass(frozen=True)
class CounterKernel:
    r"""A fitted regression's hyper-parameters and the standardisation of the readings
    (module docstring). The regression itself is rebuilt from the measured pairs on each
    call (one solve of a ``(C, C)`` system), so a saved model stores these numbers only.

    ``columns``: the resources (columns of the readings) used; ``centre``, ``spread``: their
    standardisation, ``(len(columns),)`` each.
    """

    length: float
    scale: float
    level: float
    noise: float
    columns: tuple[int, ...]
    centre: tuple[float, ...]
    spread: tuple[float, ...]

    def __post_init__(self) -> None:
        for name in ("length", "scale", "level", "noise"):
            v = getattr(self, name)
            if not (isinstance(v, float) and math.isfinite(v) and v > 0):
                raise InputError(f"counter kernel: {name} must be a finite float > 0, not {v!r}")
        if not (self.columns and len(self.centre) == len(self.columns) == len(self.spread)):
            raise InputError("counter kernel: columns, centre and spread must match, non-empty")
        if not all(math.isfinite(c) for c in self.centre) or not all(
            math.isfinite(s) and s > 0 for s in self.spread
        ):
            raise InputError("counter kernel: centre must be finite and spread > 0")

    def features(self, readings: _FloatArray) -> _FloatArray:
        """``(J, R')`` standardised readings of the kernel's columns (NaN: none)."""
        if readings.ndim != 2 or max(self.columns) >= readings.shape[1]:
            raise InputError("counter kernel: readings lack the kernel's columns")
        return _standardised(readings, self.columns, self.centre, self.spread)

    def readable(self, readings: _FloatArray) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """``(J,)``: the jobs with every reading the kernel uses."""
        return np.asarray(np.isfinite(self.features(readings)).all(axis=1))

    def log_speed(
        self, job: _IntArray, co: _IntArray, y: _FloatArray, n: _FloatArray,
        readings: _FloatArray, query_job: _IntArray, query_co: _IntArray,
    ) -> _FloatArray:
        r""":math:`\hat g` of each queried pair, ``(Q,)``, from the measured pairs ``job``,
        ``co``, ``y``, ``n`` (``(C,)`` each; those between jobs without every reading are
        left out). Every queried job must be :meth:`readable`."""
        z = self.features(readings)
        ok = np.asarray(np.isfinite(z).all(axis=1), dtype=bool)
        if not (ok[query_job].all() and ok[query_co].all()):
            raise InputError("counter kernel: a queried job lacks a reading")
        use = ok[job] & ok[co]
        if not use.any():
            raise InputError("counter kernel: no measured pair between jobs with readings")
        j, k, yy, nn = job[use], co[use], y[use], n[use]
        x = np.hstack([z[j], z[k]])
        xq = np.hstack([z[query_job], z[query_co]])
        mean = float(yy.mean())
        gram = _gram(x, x, j, j, k, k, self.length, self.scale, self.level)
        gram[np.diag_indices_from(gram)] += self.noise**2 / nn
        alpha = _solve_pd(gram, yy - mean)
        cross = _gram(xq, x, query_job, j, query_co, k, self.length, self.scale, self.level)
        return np.asarray(mean + cross @ alpha, dtype=float)


def floored(
    readings: _FloatArray, below: np.ndarray[Any, np.dtype[np.bool_]] | None
) -> _FloatArray:
    """``readings`` (``(J, R)`` log readings, NaN: none) with each reading ``below`` (``(J,
    R)``: the job read the resource, below :data:`READING_FLOOR`) at the floor's log.

    >>> floored(np.array([[np.nan, -1.0]]), np.array([[True, False]])).round(2).tolist()
    [[-5.3, -1.0]]
    """
    out = np.array(readings, dtype=float, copy=True)
    if below is not None:
        out[below] = math.log(READING_FLOOR)
    return out


def _standardised(
    readings: _FloatArray, columns: tuple[int, ...], centre: Any, spread: Any
) -> _FloatArray:
    """``(J, R')``: the ``columns`` of ``readings`` less ``centre``, over ``spread``."""
    z = (readings[:, list(columns)] - np.asarray(centre)) / np.asarray(spread)
    return np.asarray(z, dtype=float)


def _solve_pd(a: _FloatArray, b: _FloatArray) -> _FloatArray:
    """``a^{-1} b`` for a symmetric positive definite ``a`` (Cholesky: half an LU's work)."""
    import torch

    chol = torch.linalg.cholesky(torch.from_numpy(a))
    x = torch.cholesky_solve(torch.from_numpy(b).unsqueeze(-1), chol)
    return np.asarray(x.squeeze(-1).numpy(), dtype=float)


def _sq_dist(a: _FloatArray, b: _FloatArray) -> _FloatArray:
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.asarray(np.maximum(d, 0.0), dtype=float)


def _gram(
    xa: _FloatArray, xb: _FloatArray, ja: _IntArray, jb: _IntArray, ka: _IntArray,
    kb: _IntArray, length: float, scale: float, level: float,
) -> _FloatArray:
    smooth = scale**2 * np.exp(-0.5 * _sq_dist(xa, xb) / length**2)
    return np.asarray(smooth + level**2 * _same_jobs(ja, jb, ka, kb), dtype=float)


def _same_jobs(ja: _IntArray, jb: _IntArray, ka: _IntArray, kb: _IntArray) -> _FloatArray:
    """``(A, B)``: how many of the two pairs' sides (victim, co-runner) name the same job."""
    same = (ja[:, None] == jb[None, :]).astype(float) + (ka[:, None] == kb[None, :])
    return np.asarray(same, dtype=float)


def kernel_readings(
    readings: _FloatArray,
) -> tuple[tuple[int, ...], _FloatArray, _FloatArray]:
    """The columns of ``readings`` (``(J, R)``, NaN: none) a kernel can use, those read by at
    least two jobs with some spread, and their centre and spread over the jobs."""
    cols, centre, spread = [], [], []
    for r in range(readings.shape[1]):
        col = readings[:, r]
        col = col[np.isfinite(col)]
        if col.size >= 2 and float(col.std()) > 0:
            cols.append(r)
            centre.append(float(col.mean()))
            spread.append(float(col.std()))
    return tuple(cols), np.asarray(centre), np.asarray(spread)


def fit_counter_kernel(
    job: _IntArray, co: _IntArray, y: _FloatArray, n: _FloatArray, readings: _FloatArray, *,
    seed: int, folds: int = 5,
) -> tuple[CounterKernel | None, dict[str, Any]]:
    r"""The regression of the module docstring, hyper-parameters by cross-validation across
    jobs, or None where it cannot be fitted.

    ``job``, ``co``, ``y``, ``n``: ``(C,)`` the measured pairs' jobs, mean log speeds and
    counts; ``readings``: ``(J, R)`` the jobs' log isolated readings (NaN: none). None (and
    ``info["cells"]`` saying how many pairs it had) where no reading is usable, fewer than
    :data:`MIN_CELLS` pairs lie between jobs with every usable reading, or those pairs hold
    fewer than ``folds`` jobs. Returns the kernel and ``{"cells", "length", "scale",
    "level", "cv_mae"}``.
    """
    info: dict[str, Any] = {"cells": 0}
    cols, centre, spread = kernel_readings(readings)
    if not cols:
        return None, info
    z = _standardised(readings, cols, centre, spread)
    ok = np.asarray(np.isfinite(z).all(axis=1), dtype=bool)
    use = ok[job] & ok[co]
    j, k, yy, nn = job[use], co[use], y[use], n[use]
    info["cells"] = int(use.sum())
    jobs = np.unique(np.concatenate([j, k]))
    if info["cells"] < MIN_CELLS or jobs.size < folds:
        return None, info
    x = np.hstack([z[j], z[k]])
    dist = _sq_dist(x, x)
    same = _same_jobs(j, j, k, k)
    fold_of = np.full(readings.shape[0], -1)
    fold_of[jobs] = np.random.default_rng(seed).permutation(jobs.size) % folds
    parts = []
    for f in range(folds):
        test = (fold_of[j] == f) | (fold_of[k] == f)
        train = ~test
        if test.any() and train.sum() >= 2:
            parts.append((np.flatnonzero(train), np.flatnonzero(test)))
    best, best_err = GRID[0], math.inf
    lengths = sorted({g[0] for g in GRID})
    # Each fold's blocks of the shared-jobs counts once (no length scale in them), and of the
    # smooth part's correlations once per length scale; the grid's spreads only rescale them.
    same_blocks = [(same[np.ix_(tr, tr)], same[np.ix_(te, tr)]) for tr, te in parts]
    for length in lengths:
        smooth = np.exp(-0.5 * dist / length**2)
        blocks = [
            (smooth[np.ix_(tr, tr)], s_tr, smooth[np.ix_(te, tr)], s_te, tr, te)
            for (tr, te), (s_tr, s_te) in zip(parts, same_blocks, strict=True)
        ]
        del smooth
        for scale, level in [(g[1], g[2]) for g in GRID if g[0] == length]:
            err, count = 0.0, 0
            for e_tr, s_tr, e_te, s_te, tr, te in blocks:
                mean = float(yy[tr].mean())
                gram = scale**2 * e_tr  # the same sum as scale**2 * e_tr + level**2 * s_tr,
                gram += level**2 * s_tr  # without a third (C, C) array
                gram[np.diag_indices_from(gram)] += NOISE**2 / nn[tr]
                alpha = _solve_pd(gram, yy[tr] - mean)
                pred = mean + (scale**2 * e_te + level**2 * s_te) @ alpha
                err += float(np.abs(np.exp(pred) - np.exp(yy[te])).sum())
                count += te.size
            if count and err / count < best_err - 1e-12:
                best, best_err = (length, scale, level), err / count
    length, scale, level = best
    info.update(length=length, scale=scale, level=level, cv_mae=best_err)
    kernel = CounterKernel(
        length=float(length), scale=float(scale), level=float(level), noise=NOISE,
        columns=cols, centre=tuple(float(c) for c in centre),
        spread=tuple(float(s) for s in spread),
    )
    return kernel, info
