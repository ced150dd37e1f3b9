r"""Soft-impute matrix completion with row and column biases (numpy), shared by the
matrix-completion peer (:mod:`interplace.model._peers`) and the completion of the measured
pairs' effects (:mod:`interplace.model._cells`).

A cell ``(j, k)`` of an ``n x n`` matrix is ``mu + a[j] + b[k] + Z[j, k]``: ridge-regularised
biases by alternating means, then ``Z`` by soft-impute (Mazumder, Hastie and Tibshirani 2010):
iterate ``Z <- S_lambda(P_obs(R) + P_miss(Z))`` with ``S_lambda`` the singular values
soft-thresholded by ``lambda`` and truncated to ``rank``.

:func:`robust_biases` fits the biases by Huber-type winsorising (the completion of the
measured pairs' effects, whose residuals are heavy-tailed as the structure's Student-t noise
says): with :math:`f` the current fit of the cells :math:`y`, each round refits to

.. math:: \tilde y = f + \operatorname{clip}(y - f, -c, c), \qquad
          c = k \cdot 1.4826 \operatorname{median} |y - f|,

:math:`k` = :data:`HUBER_K` (1.345: 95% efficiency for a location at Gaussian errors), from
:math:`\tilde y = y` until the fit stops moving: the ridge-penalised Huber M-estimate, with
the scale re-read each round. A cell far off the rest pulls its job's bias by at most
:math:`c` over the job's cells (plus the ridge), not by its whole distance. The ridge's pull
is not capped, so the biases shrink more than least squares' wherever residuals pass
:math:`c`: on clean data with biases alone the fitted cells lie about 20% further from the
truth (``docs/benchmarks.md``, "Winsorised job biases in the completion").

:func:`family_means` is the family-pair term of the completion in a fit with job families:
the ridge mean of the cells of each (victim family, co-runner family) pair,

.. math:: F_{fg} = \frac{\sum_{c:\, f(j_c) = f,\, f(k_c) = g} y_c}{n_{fg} + \lambda_F},

the posterior mean of :math:`F_{fg} \sim \mathcal N(0, \sigma^2 / \lambda_F)` under cells of
noise :math:`\sigma^2`: a block of many cells keeps nearly its mean, a block of few shrinks
toward 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from interplace.errors import InputError

__all__ = [
    "HUBER_K",
    "LAMBDA_FRACTIONS",
    "MIN_SPEED",
    "RANKS",
    "ROBUST_ROUNDS",
    "ROBUST_TOL",
    "SUBSPACE_MIN_SIZE",
    "SUBSPACE_OVERSAMPLE",
    "biases",
    "cells_term",
    "family_means",
    "fit_cells",
    "robust_biases",
    "select_cells",
    "soft_impute",
]

_FloatArray = np.ndarray[Any, np.dtype[np.float64]]


def biases(
    y: _FloatArray, ji: np.ndarray[Any, Any], ki: np.ndarray[Any, Any], n: int,
    ridge: float = 1.0, iters: int = 30,
) -> tuple[float, _FloatArray, _FloatArray]:
    mu = float(y.mean())
    a = np.zeros(n)
    b = np.zeros(n)
    cnt_j = np.bincount(ji, minlength=n) + ridge
    cnt_k = np.bincount(ki, minlength=n) + ridge
    for _ in range(iters):
        a = np.bincount(ji, weights=y - mu - b[ki], minlength=n) / cnt_j
        b = np.bincount(ki, weights=y - mu - a[ji], minlength=n) / cnt_k
        mu = float(np.mean(y - a[ji] - b[ki]))
    return mu, a, b


def soft_impute(
    r: _FloatArray, mask: np.ndarray[Any, Any], lam: float, rank: int, iters: int = 200,
    tol: float = 1e-5, start: _FloatArray | None = None, subspace: bool = False,
) -> _FloatArray:
    r"""The soft-impute term ``Z`` of the cells ``r`` seen where ``mask`` (module docstring),
    ``(n, n)``, from ``start`` (zeros by default: a warm start from a nearby ``lam``'s
    solution converges in fewer rounds, as along Mazumder et al.'s path).

    Each round needs the top ``rank`` singular triplets of :math:`X = P_{obs}(R) +
    P_{miss}(Z)`. By default a full SVD gives them. With ``subspace``, only the first round
    takes a full SVD; every later one takes one step of subspace iteration from the last
    round's top :math:`k` = ``rank`` + :data:`SUBSPACE_OVERSAMPLE` right singular vectors
    :math:`V` (Rayleigh-Ritz): :math:`Q = \operatorname{orth}(X V)`, then the SVD of the
    :math:`k \times n` matrix :math:`Q^\top X`, whose triplets, their left vectors times
    :math:`Q`, stand for :math:`X`'s. :math:`X` moves little from round to round, so the
    subspace follows it; the rounds stop at the same rule, and run on, they reach the same
    fixed point. Full SVDs are still taken where they cost no more: below
    :data:`SUBSPACE_MIN_SIZE` rows or where :math:`2k \ge n`. Not the same iterates: on
    Lucid's 66 jobs the completion's choices and held-out errors are those of full SVDs to
    about 1e-5 (``docs/benchmarks.md``, "A faster completion").

    >>> rng = np.random.default_rng(0)
    >>> truth = rng.standard_normal((60, 2)) @ rng.standard_normal((2, 60))
    >>> mask = rng.random((60, 60)) < 0.5
    >>> full = soft_impute(np.where(mask, truth, 0.0), mask, 1.0, 2)
    >>> fast = soft_impute(np.where(mask, truth, 0.0), mask, 1.0, 2, subspace=True)
    >>> bool(np.abs(full - fast).max() < 1e-3 * np.abs(full).max())
    True
    """
    z = np.zeros_like(r) if start is None else start
    k = min(rank + SUBSPACE_OVERSAMPLE, *r.shape)
    subspace = subspace and min(r.shape) >= SUBSPACE_MIN_SIZE and 2 * k < min(r.shape)
    basis = None
    for _ in range(iters):
        x = np.where(mask, r, z)
        if basis is None:
            u, s, vt = np.linalg.svd(x, full_matrices=False)
        else:
            q = np.linalg.qr(x @ basis)[0]
            ub, s, vt = np.linalg.svd(q.T @ x, full_matrices=False)
            u = q @ ub
        if subspace:
            basis = vt[:k].T
        s = np.maximum(s - lam, 0.0)[:rank]
        new = (u[:, :rank] * s) @ vt[:rank]
        delta = float(np.sum((new - z) ** 2)) / max(float(np.sum(z**2)), 1e-12)
        z = new
        if delta < tol:
            break
    return z


def cells_term(
    y: _FloatArray, ji: np.ndarray[Any, Any], ki: np.ndarray[Any, Any], n: int, lam: float,
    rank: int, start: _FloatArray | None = None, subspace: bool = False,
) -> _FloatArray:
    """:func:`soft_impute` of the ``(C,)`` cells ``y`` at rows ``ji`` and columns ``ki`` of an
    ``n x n`` matrix, ``(n, n)``."""
    r = np.zeros((n, n))
    mask = np.zeros((n, n), dtype=bool)
    r[ji, ki] = y
    mask[ji, ki] = True
    return soft_impute(r, mask, lam, rank, start=start, subspace=subspace)


def fit_cells(
    y: _FloatArray, ji: np.ndarray[Any, Any], ki: np.ndarray[Any, Any], n: int, lam: float,
    rank: int,
) -> tuple[float, _FloatArray, _FloatArray, _FloatArray]:
    mu, a, b = biases(y, ji, ki, n)
    return mu, a, b, cells_term(y - mu - a[ji] - b[ki], ji, ki, n, lam, rank)


def family_means(
    y: _FloatArray, fj: np.ndarray[Any, Any], fk: np.ndarray[Any, Any], n_fam: int,
    ridge: float,
) -> _FloatArray:
    """The ridge means :math:`F` of ``y`` by family pair (module docstring), ``(n_fam + 1,
    n_fam + 1)``: the last row and column, for jobs without a family, are zero, so family
    codes of -1 index them.

    ``y``: ``(C,)`` cells; ``fj``, ``fk``: ``(C,)`` the families of their rows and columns
    (-1: none).

    >>> y = np.array([0.2, 0.4, 0.3, -0.1])
    >>> family_means(y, np.array([0, 0, -1, 1]), np.array([1, 1, 0, 1]), 2, 1.0).round(2)
    array([[ 0.  ,  0.2 ,  0.  ],
           [ 0.  , -0.05,  0.  ],
           [ 0.  ,  0.  ,  0.  ]])
    """
    if ridge <= 0:
        raise InputError(f"family means need a ridge > 0, not {ridge}")
    known = (fj >= 0) & (fk >= 0)
    key = fj[known] * n_fam + fk[known]
    total = np.bincount(key, weights=y[known], minlength=n_fam * n_fam)
    count = np.bincount(key, minlength=n_fam * n_fam)
    out = np.zeros((n_fam + 1, n_fam + 1))
    out[:n_fam, :n_fam] = (total / (count + ridge)).reshape(n_fam, n_fam)
    return out


RANKS = (1, 2, 3, 5, 8)
LAMBDA_FRACTIONS = (0.5, 0.3, 0.2, 0.1, 0.05, 0.02, 0.005)
MIN_SPEED = 0.01
"""Floor of a completed speed (a speed is positive): :func:`select_cells` scores its
candidates on speeds floored so."""


def select_cells(
    y: _FloatArray, ji: np.ndarray[Any, Any], ki: np.ndarray[Any, Any], n: int, *, seed: int,
    folds: int = 5,
) -> tuple[float, _FloatArray, _FloatArray, _FloatArray, int, float]:
    """Biases and a soft-impute term of the ``(C,)`` speeds ``y`` at rows ``ji`` and columns
    ``ki`` of an ``n x n`` matrix, the rank in :data:`RANKS` (at most ``n``) and shrinkage in
    :data:`LAMBDA_FRACTIONS` of the largest singular value of the residuals after the biases,
    chosen by ``folds``-fold cross-validation (seeded folds) on the absolute error of the
    speeds floored at :data:`MIN_SPEED` (the least rank and largest shrinkage with fewer than
    ``2 * folds`` cells). Returns ``mu``, ``a`` ``(n,)``, ``b`` ``(n,)``, ``Z`` ``(n, n)``, the
    rank and the shrinkage. The matrix-completion peer's fit
    (:func:`~interplace.model._peers.fit_soft_impute`; Gavel's approach).

    >>> rng = np.random.default_rng(0)
    >>> ji, ki = np.divmod(np.arange(64), 8)
    >>> y = 0.7 + 0.1 * rng.standard_normal(8)[ji] + 0.01 * rng.standard_normal(64)
    >>> mu, a, b, z, rank, lam = select_cells(y, ji, ki, 8, seed=0)
    >>> bool(np.abs(mu + a[ji] + b[ki] + z[ji, ki] - y).mean() < 0.01)
    True
    """
    mu, a, b = biases(y, ji, ki, n)
    r0 = np.zeros((n, n))
    r0[ji, ki] = y - mu - a[ji] - b[ki]
    smax = float(np.linalg.svd(r0, compute_uv=False)[0]) if n else 0.0
    grid = [(rank, frac * smax) for rank in RANKS if rank <= n for frac in LAMBDA_FRACTIONS]
    rng = np.random.default_rng(seed)
    fold = rng.permutation(len(y)) % max(2, min(folds, len(y)))
    best, best_err = (1, smax), math.inf
    if len(y) >= 2 * folds:
        for rank, lam in grid:
            err = 0.0
            for f in range(int(fold.max()) + 1):
                tr, te = fold != f, fold == f
                m, aa, bb, z = fit_cells(y[tr], ji[tr], ki[tr], n, lam, rank)
                pred = m + aa[ji[te]] + bb[ki[te]] + z[ji[te], ki[te]]
                err += float(np.abs(np.maximum(pred, MIN_SPEED) - y[te]).sum())
            if err < best_err - 1e-12:
                best, best_err = (rank, lam), err
    rank, lam = best
    mu, a, b, z = fit_cells(y, ji, ki, n, lam, rank)
    return mu, a, b, z, rank, lam


SUBSPACE_OVERSAMPLE = 4
"""Singular vectors kept beyond the rank by :func:`soft_impute`'s subspace iteration."""

SUBSPACE_MIN_SIZE = 40
"""The fewest rows for which :func:`soft_impute` takes subspace rounds: a round costs what a
full SVD does at 26 rows (117 us each on the 2-core machine), a quarter of it at 66."""

HUBER_K = 1.345
"""Winsorising threshold of :func:`robust_biases`, in robust standard deviations (the median
absolute residual times 1.4826)."""

ROBUST_ROUNDS = 100
"""At most this many refits of :func:`robust_biases`; it stops earlier once no fitted cell
moves by more than :data:`ROBUST_TOL`."""

ROBUST_TOL = 1e-6
"""Convergence tolerance of :func:`robust_biases`, on the fitted cells."""


def robust_biases(
    y: _FloatArray, ji: np.ndarray[Any, Any], ki: np.ndarray[Any, Any], n: int,
) -> tuple[float, _FloatArray, _FloatArray]:
    """:func:`biases` fitted by winsorising (module docstring): returns ``(mu, a, b)``,
    ``a`` and ``b`` ``(n,)``.

    ``y``: ``(C,)`` cells, ``ji`` and ``ki`` their ``(C,)`` row and column indices.

    >>> y = np.array([0.0, 0.1, 0.0, 0.1, 0.0, 5.0])  # the last cell far off the rest
    >>> ji, ki = np.array([0, 0, 1, 1, 2, 2]), np.array([1, 2, 0, 2, 1, 0])
    >>> plain, robust = biases(y, ji, ki, 3)[1][2], robust_biases(y, ji, ki, 3)[1][2]
    >>> bool(abs(robust) < abs(plain) / 3)
    True
    """
    yw, last = y, None
    for _ in range(ROBUST_ROUNDS):
        mu, a, b = biases(yw, ji, ki, n)
        fit = mu + a[ji] + b[ki]
        if last is not None and float(np.max(np.abs(fit - last), initial=0.0)) < ROBUST_TOL:
            break
        c = HUBER_K * 1.4826 * float(np.median(np.abs(y - fit))) + 1e-12
        yw, last = fit + np.clip(y - fit, -c, c), fit
    return mu, a, b
