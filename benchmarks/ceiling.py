"""Where the model loses to its peers: held-out speeds above the model's own ceiling.

Run: ``python benchmarks/ceiling.py [--lucid PATH] [--splits random cold] [--seeds 0 1 2]
[--workers 2] [--no-lift-ceilings] [--no-ebm] [--out results.json]``

The model's speed of a job never rises with a co-runner (the contention term only adds load,
and the pair term and the second stage only scale a co-runner's pressure), so its prediction
of job ``j`` next to anyone on its GPU is at most its level there: the *ceiling*
:math:`c_j = \\mathbb E[e^{b_j}]`, the posterior mean of the exponential of its
isolated-reference bias (its speed alone until model format 9; since then a job alone is
predicted at :math:`e^{\\max(b_j, 0)}`, its record unless that level is above it). A
measured co-located speed above :math:`c_j` is one the model cannot reach by construction:
it is at least :math:`y - c_j` off there, whatever it learns. Lucid's normalised speeds
exceed 1 in about a fifth of its co-located rows (its ``SOURCE.md`` calls them measurement
noise); the peers (matrix completion, boosted trees, the
EBM) have no such ceiling and follow the part of it that job and co-runner explain.

For each split of ``evaluate`` (``random``: 30% of co-located runs held out; ``cold``: every
co-located run of 8 jobs held out; seed ``seed``), the default fit (seed ``seed``) and the
peers that are best on Lucid in ``docs/benchmarks.md`` (soft-impute matrix completion on
``random``, the EBM on ``cold``; both are fitted on both, the EBM where ``interpret`` is
installed) are scored on the held-out speeds: MAE and mean signed error (prediction less
measurement) overall and in three bands of the model's *headroom*, its prediction over its
ceiling (:data:`BANDS`: near the ceiling, 0.97 and above, where the model predicts almost no
slowdown; mild, 0.85-0.97; strong, below 0.85). The bands condition on the model's
prediction, not on the measurement, so the predictors' errors in a band compare fairly
(selecting the rows *above* the ceiling would select the model's large errors). Also: the
share of held-out speeds above the model's ceiling and above 1, and the *floor*, the mean of
:math:`\\max(0, y - c_j)` over all held-out rows: a lower bound on the model's MAE from those
rows alone, which any fit of this model keeps (a peer, unbounded, need not).

Two monotone versions of matrix completion say what the ceiling costs: soft-impute capped at
the model's ceilings, and capped at each job's fastest measured co-located speed in training
(the highest ceiling a monotone model of the training data can justify). The default fit
lifts each job's level to its fastest measured pair's target (since the fifteenth
session); ``--no-lift-ceilings`` fits with ``fit(lift_ceilings=False)``, the model this
account was first run on; ``--no-ebm`` leaves the EBM out.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _lucid import add_lucid_options, lucid_split, require_lucid
from _results import report

from interplace._parallel import spawn_map
from interplace.errors import InputError
from interplace.model import fit
from interplace.model._evaluate import colocated_rows, row_queries
from interplace.model._peers import fit_ebm, fit_soft_impute

BANDS = {"near_ceiling": (0.97, np.inf), "mild": (0.85, 0.97), "strong": (0.0, 0.85)}
"""Bands of the model's predicted headroom, its prediction over its ceiling (1: no slowdown
predicted). They condition on the model's prediction, not on the measured speed, so each
predictor's error in a band is a fair comparison."""


def _mae(pred: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> float:
    return float(np.abs(pred - y).mean()) if len(y) else float("nan")


def _split(path: str, kind: str, seed: int, lift: bool = True, ebm: bool = True
           ) -> dict[str, Any]:
    torch.set_num_threads(1)
    train, test, _ = lucid_split(path, kind, seed)
    start = time.perf_counter()
    model = fit(train, seed=seed, lift_ceilings=lift)
    fit_s = time.perf_counter() - start
    y = test["speed"].to_numpy(float)
    pred = {"model": model.posterior_speed(row_queries(test), num_samples=500,
                                           seed=seed).mean}
    # The ceiling next to any co-runner on the job's GPU: e^beta_j, averaged over the draws
    # posterior_speed uses (the job's speed alone until model format 9, which predicts a job
    # alone at e^max(beta_j, 0)).
    level = model.draws(500, seed)["iso_bias"].to(torch.float64).exp().mean(0)
    alone_of = dict(zip(model.jobs, level.tolist(), strict=True))
    ceiling = test["job"].astype(str).map(alone_of).to_numpy(float)
    peers = [("soft_impute", fit_soft_impute)] + ([("ebm", fit_ebm)] if ebm else [])
    for name, make in peers:
        try:
            pred[name] = make(train, seed=seed).predict(test)
        except InputError as exc:  # an optional extra that is missing: say so, go on
            print(f"{kind} seed {seed}: {name} unavailable ({exc})", file=sys.stderr)
    # Matrix completion made monotone: capped at the model's ceilings, and at each job's
    # fastest measured co-located speed in training (the highest ceiling a monotone model of
    # the training data can justify). If the cap at the fastest speed costs soft-impute
    # nothing, a co-runner's speed-up is not what the model misses; where its ceiling sits is.
    if "soft_impute" in pred:
        rows = colocated_rows(train)
        fastest = rows.groupby(rows["job"].astype(str))["speed"].max()
        cap = test["job"].astype(str).map(fastest).fillna(np.inf).to_numpy(float)
        pred["soft_impute_capped_at_ceiling"] = np.minimum(pred["soft_impute"], ceiling)
        pred["soft_impute_capped_at_fastest"] = np.minimum(pred["soft_impute"], cap)
    above = y > ceiling
    headroom = pred["model"] / ceiling
    row: dict[str, Any] = {
        "split": kind, "seed": seed, "rows": len(y), "fit_seconds": fit_s,
        "share_above_ceiling": float(above.mean()),
        "share_above_1": float((y > 1).mean()),
        "floor": float(np.maximum(y - ceiling, 0).mean()),
    }
    for name, p in pred.items():
        row[name] = {"mae": _mae(p, y), "bias": float((p - y).mean())}
        for band, (lo, hi) in BANDS.items():
            sel = (headroom >= lo) & (headroom < hi)
            row[name][band] = {"share": float(sel.mean()), "mae": _mae(p[sel], y[sel]),
                               "bias": float((p[sel] - y[sel]).mean()) if sel.any() else None}
    return row


def _split_task(job: tuple[str, str, int, bool, bool]) -> dict[str, Any]:
    """:func:`_split` on one ``(path, kind, seed, lift, ebm)``, for :func:`spawn_map`."""
    return _split(*job)


def _med(values: list[Any]) -> float | None:
    vals = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.median(vals)) if vals else None


def _medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in sorted({r["split"] for r in rows}):
        rs = [r for r in rows if r["split"] == kind]
        med: dict[str, Any] = {k: _med([r[k] for r in rs])
                               for k in ("share_above_ceiling", "share_above_1", "floor")}
        names = [n for n in ("model", "soft_impute", "ebm", "soft_impute_capped_at_ceiling",
                             "soft_impute_capped_at_fastest") if all(n in r for r in rs)]
        for name in names:
            med[name] = {"mae": _med([r[name]["mae"] for r in rs]),
                         "bias": _med([r[name]["bias"] for r in rs])}
            for band in BANDS:
                med[name][band] = {k: _med([r[name][band][k] for r in rs])
                                   for k in ("share", "mae", "bias")}
        for peer in names[1:]:
            ratio = {"mae": _med([r["model"]["mae"] / r[peer]["mae"] for r in rs])}
            for band in BANDS:
                ratio[band] = _med([r["model"][band]["mae"] / r[peer][band]["mae"] for r in rs
                                    if r[peer][band]["share"] > 0])
            med[f"model_over_{peer}"] = ratio
        out[kind] = med
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_lucid_options(ap)
    ap.add_argument("--no-lift-ceilings", action="store_true",
                    help="fit the model with fit(lift_ceilings=False)")
    ap.add_argument("--no-ebm", action="store_true", help="leave the EBM peer out (faster)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    require_lucid(args.lucid)
    jobs = [(args.lucid, kind, s, not args.no_lift_ceilings, not args.no_ebm)
            for kind in args.splits for s in args.seeds]
    rows = spawn_map(_split_task, jobs, args.workers)
    report(rows, _medians(rows), args.out, rows_key="splits", summary_key="medians")


if __name__ == "__main__":
    main()
