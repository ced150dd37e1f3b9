r"""The predictors a practitioner would reach for instead of the model, on the same splits.

Each peer learns pair speeds :math:`v_{jk}` (job :math:`j` next to one co-runner :math:`k`)
from the training data's co-located rows and predicts a job next to several co-runners as
the product of its pairwise speeds (exact for the pairs Gavel and Lucid measured). They give
point predictions only: no interval, no cross-GPU term, no counters-only cold start beyond
what their features carry.

:func:`fit_soft_impute`
    Low-rank matrix completion with biases, Gavel's own approach: with :math:`\Omega` the
    measured (job, co-runner) cells of the mean-speed matrix :math:`Y`,

    .. math:: Y_{jk} \approx \mu + a_j + b_k + Z_{jk}, \qquad
              Z = \arg\min_Z \tfrac12 \lVert P_\Omega(R - Z) \rVert_F^2
              + \lambda \lVert Z \rVert_*, \quad \operatorname{rank} Z \le r,

    biases by ridge-regularised alternating least squares (penalty 1 per bias), :math:`Z` by
    soft-impute (Mazumder, Hastie and Tibshirani, 2010: iterate
    :math:`Z \leftarrow S_\lambda(P_\Omega(R) + P_\Omega^\perp(Z))`, singular values
    soft-thresholded by :math:`\lambda` and truncated at rank :math:`r`). :math:`(r, \lambda)`
    are chosen by 5-fold cross-validation over the measured cells (MAE), on a grid of
    ranks 1, 2, 3, 5, 8 and :math:`\lambda` from 0.5 down to 0.005 times the largest singular
    value of :math:`P_\Omega(R)`. A job never measured next to anyone gets the biases only.
:func:`fit_boosted_trees`
    scikit-learn's ``HistGradientBoostingRegressor`` on the job's and the co-runner's ids
    (categorical), both jobs' isolated counters (mean of each metric over its isolated runs;
    missing where a job has none) and, when families are given, both families (categorical).
    Seeded, default settings otherwise.
:func:`fit_ebm`
    The Explainable Boosting Machine of ``interpret`` (Lucid's choice) on the same features,
    ``outer_bags=4`` (its default of 14 bags takes minutes per split on 2 cores), seeded. On
    fewer than :data:`EBM_SMALL_PAIRS` training pairs its boosting stops after at most
    :data:`EBM_SMALL_ROUNDS` rounds per stage instead of its default 50,000: each bag stops
    early on a validation split of 15% of the pairs, and a split of a few pairs can be fitted
    ever more closely, so the bag never stops (a 4-job data set of 20 pairs took 5.5 minutes).

scikit-learn and interpret are optional (``pip install interplace[peers]``); a peer whose
library is missing raises :class:`~interplace.errors.InputError` saying which extra to install,
and :func:`peer_maes` reports it as unavailable.

>>> from interplace.datasets import synthetic
>>> from interplace.model import colocated_rows
>>> data = synthetic(6, seed=0)
>>> peer = fit_soft_impute(data, seed=0)
>>> rows = colocated_rows(data)
>>> bool(abs(peer.predict(rows) - rows["speed"]).mean() < 0.1)
True
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from interplace._parallel import one_blas_thread
from interplace.datasets.runs import CoLocationData
from interplace.errors import InputError
from interplace.model._evaluate import co_runner_lists, solo_counters
from interplace.model._softimpute import MIN_SPEED, select_cells

__all__ = [
    "PEERS",
    "BoostedPeer",
    "PeerModel",
    "SoftImpute",
    "fit_boosted_trees",
    "fit_ebm",
    "fit_soft_impute",
    "pair_rows",
    "peer_maes",
    "solo_counters",
]

_FloatArray = np.ndarray[Any, np.dtype[np.float64]]
EBM_SMALL_PAIRS = 200
"""Below this many training pairs the EBM's validation split holds under 30 of them, few
enough that its boosting can fit them ever more closely and never stop early: on synthetic
data of 20-42 pairs (seeds 0-4, main effects capped at 5,000 rounds to see it) one bag in
four, sometimes two, ran to the cap; from 56 pairs on every bag stopped by itself. Gavel's
and Lucid's splits (428 pairs and more) stop by themselves and are fitted with the EBM's
defaults."""
EBM_SMALL_ROUNDS = 2000
"""The EBM's rounds per stage below :data:`EBM_SMALL_PAIRS` pairs (its default is 50,000;
the main-effect stage of a bag that does stop early ends after 600-2,200 rounds on these
data sets)."""


class PeerModel(Protocol):
    """A fitted peer: predicts the speed of rows with ``job`` and ``co_runner`` columns."""

    def predict(self, rows: pd.DataFrame) -> _FloatArray:
        """Predicted speed of each row (co-runners joined by ``+``), shape ``(N,)``."""
        ...


def pair_rows(data: CoLocationData) -> pd.DataFrame:
    """Training pairs: the co-located rows with exactly one co-runner (``job``, ``co_runner``,
    ``speed``); runs of three or more jobs are left out (the peers model pairs)."""
    from interplace.model._evaluate import colocated_rows

    rows = colocated_rows(data)
    return rows.loc[rows["co_runners"].map(len).eq(1)].reset_index(drop=True)


_PairFn = Callable[[list[str], list[str]], _FloatArray]


def _product(rows: pd.DataFrame, pair: _PairFn, known: Collection[str]) -> _FloatArray:
    """Each row's speed as the product of its pairwise speeds (co-runners as
    :func:`~interplace.model.co_runner_lists` reads them, ``known`` the fitted jobs)."""
    jobs: list[str] = []
    cos: list[str] = []
    owner: list[int] = []
    for i, (j, c) in enumerate(zip(rows["job"].astype(str), co_runner_lists(rows, known),
                                   strict=True)):
        for k in c:
            jobs.append(j)
            cos.append(k)
            owner.append(i)
    out = np.ones(len(rows))
    if jobs:
        v = np.maximum(pair(jobs, cos), MIN_SPEED)
        np.multiply.at(out, np.asarray(owner), v)
    return out


# ------------------------------------------------------------------------ soft-impute
@dataclass(frozen=True, eq=False)
class SoftImpute:
    """Fitted matrix completion: ``speed(j, k) = mu + a[j] + b[k] + Z[j, k]`` (see module)."""

    jobs: tuple[str, ...]
    mu: float
    a: _FloatArray
    b: _FloatArray
    z: _FloatArray
    rank: int
    shrinkage: float
    index: Mapping[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.jobs)
        if self.a.shape != (n,) or self.b.shape != (n,) or self.z.shape != (n, n):
            raise InputError("soft-impute state does not match its jobs")
        object.__setattr__(self, "index", {j: i for i, j in enumerate(self.jobs)})

    def pair(self, jobs: list[str], co: list[str]) -> _FloatArray:
        """Pair speeds; a job the fit never saw gets zero bias and zero interaction."""
        n = len(self.jobs)
        ji = np.asarray([self.index.get(j, n) for j in jobs])
        ki = np.asarray([self.index.get(k, n) for k in co])
        a = np.append(self.a, 0.0)[ji]
        b = np.append(self.b, 0.0)[ki]
        z = np.pad(self.z, ((0, 1), (0, 1)))[ji, ki]
        return np.asarray(self.mu + a + b + z, dtype=float)

    def predict(self, rows: pd.DataFrame) -> _FloatArray:
        """Speed of each row, shape ``(N,)``."""
        return _product(rows, self.pair, self.jobs)


def fit_soft_impute(data: CoLocationData, *, seed: int = 0, folds: int = 5) -> SoftImpute:
    """Fit :class:`SoftImpute` on ``data``'s pairs, rank and shrinkage by inner CV (seeded folds).

    The matrix holds each (job, co-runner) cell's mean measured speed; jobs are every job of
    ``data`` (isolated-only ones too).
    """
    rows = pair_rows(data)
    jobs = tuple(sorted(data.runs["job"].astype(str).unique().tolist()))
    n = len(jobs)
    if rows.empty:
        return SoftImpute(jobs, 1.0, np.zeros(n), np.zeros(n), np.zeros((n, n)), 0, 0.0)
    index = {j: i for i, j in enumerate(jobs)}
    cells = rows.groupby(["job", "co_runner"], sort=True)["speed"].mean()
    ji = np.asarray([index[j] for j, _ in cells.index])
    ki = np.asarray([index[k] for _, k in cells.index])
    y = cells.to_numpy(dtype=float)
    with one_blas_thread():  # hundreds of small SVDs (see one_blas_thread)
        mu, a, b, z, rank, lam = select_cells(y, ji, ki, n, seed=seed, folds=folds)
    return SoftImpute(jobs, mu, a, b, z, rank, lam)


# ---------------------------------------------------------------- boosted trees, EBM
@dataclass(frozen=True, eq=False)
class BoostedPeer:
    """A fitted tree ensemble on ids, isolated counters and families (see module)."""

    estimator: Any
    jobs: tuple[str, ...]
    counters: pd.DataFrame
    families: Mapping[str, str | None] | None
    family_names: tuple[str, ...]

    def features(self, jobs: list[str], co: list[str]) -> _FloatArray:
        """Feature matrix ``(N, F)``: ids, counters of both jobs, families (NaN = unknown)."""
        index = {j: float(i) for i, j in enumerate(self.jobs)}
        fam_index = {f: float(i) for i, f in enumerate(self.family_names)}
        cols: list[_FloatArray] = [
            np.asarray([index.get(j, math.nan) for j in jobs]),
            np.asarray([index.get(k, math.nan) for k in co]),
        ]
        if not self.counters.empty:
            c = self.counters
            cols.extend(c.reindex(jobs).to_numpy(dtype=float).T)
            cols.extend(c.reindex(co).to_numpy(dtype=float).T)
        if self.families is not None:
            fams = self.families

            def fam(x: str) -> float:
                f = fams.get(x)
                return math.nan if f is None else fam_index.get(f, math.nan)

            cols.append(np.asarray([fam(j) for j in jobs]))
            cols.append(np.asarray([fam(k) for k in co]))
        return np.stack(cols, axis=1)

    def pair(self, jobs: list[str], co: list[str]) -> _FloatArray:
        """Pair speeds, shape ``(N,)``."""
        return np.asarray(self.estimator.predict(self.features(jobs, co)), dtype=float)

    def predict(self, rows: pd.DataFrame) -> _FloatArray:
        """Speed of each row, shape ``(N,)``."""
        return _product(rows, self.pair, self.jobs)


def _boosted(
    data: CoLocationData, families: Mapping[str, str | None] | None,
    make: Callable[[list[bool], int], Any],
) -> BoostedPeer:
    rows = pair_rows(data)
    if rows.empty:
        raise InputError(f"{data.name}: no co-located pair to train on")
    jobs = tuple(sorted(data.runs["job"].astype(str).unique().tolist()))
    fam_names = tuple(sorted({f for f in (families or {}).values() if f is not None}))
    peer = BoostedPeer(None, jobs, solo_counters(data), families, fam_names)
    x = peer.features(rows["job"].astype(str).tolist(), rows["co_runner"].astype(str).tolist())
    n_counter = 2 * peer.counters.shape[1] if not peer.counters.empty else 0
    categorical = [True, True] + [False] * n_counter + [True, True] * (families is not None)
    est = make(categorical, len(rows))
    est.fit(x, rows["speed"].to_numpy(dtype=float))
    return BoostedPeer(est, jobs, peer.counters, families, fam_names)


def fit_boosted_trees(
    data: CoLocationData, *, families: Mapping[str, str | None] | None = None, seed: int = 0
) -> BoostedPeer:
    """scikit-learn gradient-boosted trees on ``data``'s pairs (see module)."""
    try:
        from sklearn.ensemble import HistGradientBoostingRegressor
    except ImportError:
        raise InputError(
            "the boosted-trees peer needs scikit-learn: pip install 'interplace[peers]'"
        ) from None

    def make(categorical: list[bool], n_pairs: int) -> Any:
        return HistGradientBoostingRegressor(categorical_features=categorical, random_state=seed)

    return _boosted(data, families, make)


def fit_ebm(
    data: CoLocationData, *, families: Mapping[str, str | None] | None = None, seed: int = 0,
    outer_bags: int = 4,
) -> BoostedPeer:
    """interpret's Explainable Boosting Machine on ``data``'s pairs (see module; at most
    :data:`EBM_SMALL_ROUNDS` boosting rounds per stage on fewer than :data:`EBM_SMALL_PAIRS`
    pairs)."""
    try:
        from interpret.glassbox import ExplainableBoostingRegressor
    except ImportError:
        raise InputError(
            "the EBM peer needs interpret: pip install 'interplace[peers]'"
        ) from None

    def make(categorical: list[bool], n_pairs: int) -> Any:
        types = ["nominal" if c else "continuous" for c in categorical]
        small = {"max_rounds": EBM_SMALL_ROUNDS} if n_pairs < EBM_SMALL_PAIRS else {}
        return ExplainableBoostingRegressor(
            feature_types=types, outer_bags=outer_bags, random_state=seed, n_jobs=1, **small
        )

    with warnings.catch_warnings():
        # EBM notes that its plots do not show missing values (a job without counters or
        # family): about its visualisations, not its fit.
        warnings.filterwarnings("ignore", message="Missing values detected", category=UserWarning)
        return _boosted(data, families, make)


def _fit_boosted(
    data: CoLocationData, families: Mapping[str, str | None] | None, seed: int
) -> PeerModel:
    return fit_boosted_trees(data, families=families, seed=seed)


def _fit_ebm(
    data: CoLocationData, families: Mapping[str, str | None] | None, seed: int
) -> PeerModel:
    return fit_ebm(data, families=families, seed=seed)


def _fit_si(
    data: CoLocationData, families: Mapping[str, str | None] | None, seed: int
) -> PeerModel:
    return fit_soft_impute(data, seed=seed)


PEERS: dict[str, Callable[[CoLocationData, Mapping[str, str | None] | None, int], PeerModel]] = {
    "soft_impute": _fit_si,
    "boosted_trees": _fit_boosted,
    "ebm": _fit_ebm,
}
"""Every peer by name: ``fit(train, families, seed) -> PeerModel``. Soft-impute ignores
families (it has no use for them)."""


def peer_maes(
    train: CoLocationData,
    test: pd.DataFrame,
    *,
    families: Mapping[str, str | None] | None = None,
    seed: int = 0,
    peers: Mapping[str, Callable[..., PeerModel]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Held-out MAE of each peer on ``test`` (rows of :func:`colocated_rows`).

    A peer whose optional library is missing gets ``{"mae": None, "unavailable": why}``.
    """
    out: dict[str, dict[str, Any]] = {}
    y = test["speed"].to_numpy(dtype=float)
    for name, make in (peers or PEERS).items():
        try:
            model = make(train, families, seed)
        except InputError as exc:
            if "pip install" not in str(exc):
                raise
            out[name] = {"mae": None, "unavailable": str(exc)}
            continue
        pred = model.predict(test)
        out[name] = {"mae": float(np.mean(np.abs(pred - y)))}
    return out
