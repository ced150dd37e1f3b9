"""Tests of :mod:`interplace.model._softimpute`'s winsorised biases and family means."""

from __future__ import annotations

import numpy as np
import pytest

from interplace.errors import InputError
from interplace.model import _softimpute
from interplace.model._softimpute import biases, family_means, robust_biases


def _cells(seed: int, n: int = 20) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Biases of size 0.1 plus Gaussian noise 0.01 on 70% of an ``n x n`` matrix."""
    rng = np.random.default_rng(seed)
    a, b = 0.1 * rng.standard_normal(n), 0.1 * rng.standard_normal(n)
    job, co = np.divmod(np.arange(n * n), n)
    seen = rng.random(job.size) < 0.7
    job, co = job[seen], co[seen]
    return a[job] + b[co] + 0.01 * rng.standard_normal(job.size), job, co, a


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_wild_cell_barely_moves_its_jobs_bias(seed: int) -> None:
    # One cell 2.0 off (a run gone wrong) among about 14 of its victim's. Least squares moves
    # the victim's bias by about 2.0 / (14 cells + ridge 1) = 0.13; winsorised, the cell
    # pulls by at most c = 1.345 robust sd (about 0.013 here), so by about 0.013 / 15 = 0.001
    # (median 0.002 over 40 seeds of this data in a scratch run, at most 0.015 where the
    # refits converge slowly; least squares 0.11-0.15). On these three seeds 0.003-0.007
    # against 0.11-0.15: 0.01 and 0.1 keep them apart without resting on the exact figures.
    y, job, co, _ = _cells(seed)
    wild = y.copy()
    wild[int(np.flatnonzero(job == 3)[0])] += 2.0
    robust = abs(robust_biases(wild, job, co, 20)[1][3] - robust_biases(y, job, co, 20)[1][3])
    plain = abs(biases(wild, job, co, 20)[1][3] - biases(y, job, co, 20)[1][3])
    assert robust < 0.01 < 0.1 < plain, (robust, plain)


def test_without_a_cell_past_the_threshold_it_is_least_squares(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With the threshold far beyond every residual nothing is clipped: the first refit is the
    # fixed point and the result is least squares', to rounding.
    monkeypatch.setattr(_softimpute, "HUBER_K", 1e6)
    y, job, co, _ = _cells(3)
    got, want = robust_biases(y, job, co, 20), biases(y, job, co, 20)
    assert abs(got[0] - want[0]) < 1e-12
    np.testing.assert_allclose(got[1], want[1], atol=1e-12)
    np.testing.assert_allclose(got[2], want[2], atol=1e-12)


def test_the_order_of_the_cells_does_not_matter() -> None:
    y, job, co, _ = _cells(4)
    order = np.random.default_rng(5).permutation(y.size)
    got = robust_biases(y[order], job[order], co[order], 20)
    want = robust_biases(y, job, co, 20)
    assert abs(got[0] - want[0]) < 1e-10
    np.testing.assert_allclose(got[1], want[1], atol=1e-10)
    np.testing.assert_allclose(got[2], want[2], atol=1e-10)


def test_it_converges() -> None:
    # At the fixed point, or near it: one more refit moves no cell by more than 1e-5 (the
    # tolerance, 1e-6, or after 100 refits a step of a few 1e-6 where it converges slowly;
    # the noise is 0.01).
    y, job, co, _ = _cells(6)
    mu, a, b = robust_biases(y, job, co, 20)
    fit = mu + a[job] + b[co]
    c = _softimpute.HUBER_K * 1.4826 * float(np.median(np.abs(y - fit)))
    m2, a2, b2 = biases(fit + np.clip(y - fit, -c, c), job, co, 20)
    assert float(np.max(np.abs(m2 + a2[job] + b2[co] - fit))) < 1e-5


def test_family_means_are_ridge_means_of_each_family_pair() -> None:
    # Family pair (0, 1): three cells of mean 0.3 -> 0.9 / (3 + 2); (1, 0): one cell -> 0.1 / 3.
    # Cells with a job of no family (-1) count nowhere, and its row and column are zero.
    y = np.array([0.2, 0.3, 0.4, 0.1, 5.0, 5.0])
    fj = np.array([0, 0, 0, 1, -1, 0])
    fk = np.array([1, 1, 1, 0, 1, -1])
    f = family_means(y, fj, fk, 2, 2.0)
    np.testing.assert_allclose(f, [[0.0, 0.18, 0.0], [0.1 / 3, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert f[fj, fk][4:].tolist() == [0.0, 0.0]
    with pytest.raises(InputError, match="ridge"):
        family_means(y, fj, fk, 2, 0.0)


def _low_rank_problem(seed: int, n: int = 60, rank: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = rng.standard_normal((n, rank)) @ rng.standard_normal((rank, n))
    mask = rng.random((n, n)) < 0.4
    return np.where(mask, truth + 0.1 * rng.standard_normal((n, n)), 0.0), mask


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("rank", "frac"), [(1, 0.3), (2, 0.1), (3, 0.02)])
def test_subspace_iteration_has_the_fixed_point_of_full_svds(
    seed: int, rank: int, frac: float
) -> None:
    r, mask = _low_rank_problem(seed)
    lam = frac * float(np.linalg.svd(r, compute_uv=False)[0])
    # Run to convergence, both reach the same term: measured within 6e-7 of its largest
    # entry on these nine cases (rounding and the last rounds' 1e-14 tolerance), so 1e-5.
    limit = _softimpute.soft_impute(r, mask, lam, rank, iters=20000, tol=1e-14)
    fast = _softimpute.soft_impute(r, mask, lam, rank, iters=20000, tol=1e-14, subspace=True)
    scale = np.abs(limit).max()
    assert np.abs(fast - limit).max() < 1e-5 * scale
    assert np.linalg.matrix_rank(fast, tol=1e-8) <= rank
    # At the default stopping rule (a round moving the term by under 1e-5 of its squared
    # norm, or 200 rounds) both stop short of that limit, by 0.8-59% of its largest entry
    # here, and within 0.8% of the full iterate's largest entry of each other (measured):
    # the subspace rounds follow the full ones' path, not only their end.
    full = _softimpute.soft_impute(r, mask, lam, rank)
    fast_stop = _softimpute.soft_impute(r, mask, lam, rank, subspace=True)
    assert np.abs(fast_stop - full).max() < 0.02 * np.abs(full).max()


@pytest.mark.parametrize(("n", "rank"), [(12, 3), (40, 16)])
def test_subspace_iteration_takes_full_svds_where_they_cost_no_more(n: int, rank: int) -> None:
    # n = 12 is below SUBSPACE_MIN_SIZE; at n = 40, rank 16 keeps k = 20 vectors, half the
    # rows: either way every round is a full SVD, so the term is the plain one bit for bit.
    assert n < _softimpute.SUBSPACE_MIN_SIZE or 2 * (rank + _softimpute.SUBSPACE_OVERSAMPLE) >= n
    r, mask = _low_rank_problem(0, n=n)
    lam = 0.1 * float(np.linalg.svd(r, compute_uv=False)[0])
    full = _softimpute.soft_impute(r, mask, lam, rank)
    assert np.array_equal(_softimpute.soft_impute(r, mask, lam, rank, subspace=True), full)


def test_subspace_iteration_is_taken_from_the_size_on() -> None:
    # At SUBSPACE_MIN_SIZE rows and a small rank the rounds are subspace ones: not the plain
    # iterates bit for bit (so the size gate of the test above is what keeps those equal).
    r, mask = _low_rank_problem(0, n=_softimpute.SUBSPACE_MIN_SIZE)
    lam = 0.1 * float(np.linalg.svd(r, compute_uv=False)[0])
    full = _softimpute.soft_impute(r, mask, lam, 2)
    assert not np.array_equal(_softimpute.soft_impute(r, mask, lam, 2, subspace=True), full)


@pytest.mark.parametrize("seed", range(3))
def test_biases_leave_residuals_of_mean_zero(seed: int) -> None:
    # mu is the intercept refitted after the row and column effects: the residuals of the
    # fit average to zero on unbalanced cells with effects far from zero (an audit found no
    # test noticing the refit dropped). Least squares: exact up to rounding.
    rng = np.random.default_rng(seed)
    n = 6
    ji = rng.integers(0, n, 40)
    ki = rng.integers(0, n, 40)
    y = 0.5 + rng.normal(0, 1, n)[ji] * 2 + rng.normal(0, 1, n)[ki] + rng.normal(0, 0.1, 40)
    mu, a, b = biases(y, ji, ki, n)
    assert float(np.mean(y - mu - a[ji] - b[ki])) == pytest.approx(0.0, abs=1e-9)


def test_robust_biases_winsorise_a_cell_far_below_the_rest() -> None:
    # The doctest's wild cell, mirrored: 5 below instead of above.
    y = np.array([0.0, 0.1, 0.0, 0.1, 0.0, -5.0])
    ji, ki = np.array([0, 0, 1, 1, 2, 2]), np.array([1, 2, 0, 2, 1, 0])
    plain, robust = biases(y, ji, ki, 3)[1][2], robust_biases(y, ji, ki, 3)[1][2]
    assert abs(robust) < abs(plain) / 3
