"""Soft-impute matrix completion with row and column biases (numpy), shared by the
matrix-completion peer (:mod:`interplace.model._peers`) and the completion of the measured
pairs' effects (:mod:`interplace.model._cells`).

A cell ``(j, k)`` of an ``n x n`` matrix is ``mu + a[j] + b[k] + Z[j, k]``: ridge-regularised
biases by alternating means, then ``Z`` by soft-impute (Mazumder, Hastie and Tibshirani 2010):
iterate ``Z <- S_lambda(P_obs(R) + P_miss(Z))`` with ``S_lambda`` the singular values
soft-thresholded by ``lambda`` and truncated to ``rank``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["LAMBDA_FRACTIONS", "RANKS", "biases", "fit_cells", "soft_impute"]

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
    tol: float = 1e-5,
) -> _FloatArray:
    z = np.zeros_like(r)
    for _ in range(iters):
        x = np.where(mask, r, z)
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        s = np.maximum(s - lam, 0.0)[:rank]
        new = (u[:, :rank] * s) @ vt[:rank]
        delta = float(np.sum((new - z) ** 2)) / max(float(np.sum(z**2)), 1e-12)
        z = new
        if delta < tol:
            break
    return z


def fit_cells(
    y: _FloatArray, ji: np.ndarray[Any, Any], ki: np.ndarray[Any, Any], n: int, lam: float,
    rank: int,
) -> tuple[float, _FloatArray, _FloatArray, _FloatArray]:
    mu, a, b = biases(y, ji, ki, n)
    r = np.zeros((n, n))
    mask = np.zeros((n, n), dtype=bool)
    r[ji, ki] = y - mu - a[ji] - b[ki]
    mask[ji, ki] = True
    return mu, a, b, soft_impute(r, mask, lam, rank)


RANKS = (1, 2, 3, 5, 8)
LAMBDA_FRACTIONS = (0.5, 0.3, 0.2, 0.1, 0.05, 0.02, 0.005)
