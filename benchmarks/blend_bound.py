"""How far any mix of the model and its peers gets on Lucid: a bound chosen with hindsight.

Run: ``python benchmarks/blend_bound.py [--lucid PATH] [--splits random cold] [--seeds 0 1 2]
[--families none model] [--workers 2] [--step 0.05] [--out results.json]``

Issue 15 asks the model's held-out MAE to be at most 0.9 of the best peer's. On Lucid it is
ahead of every peer by less. This asks whether the information the four predictors use (ids,
the measured pairs, both jobs' isolated counters) could reach 0.9 by any combination of them:
for each split of ``evaluate`` (``random``: 30% of co-located runs held out; ``cold``: every
co-located run of 8 jobs held out; seed ``seed``; without job families, or with Lucid's
``model`` column as families given to the model and to every peer that can use them, as in
``benchmarks/accuracy.py``), the default fit and every peer of :data:`interplace.model.PEERS`
that is installed predict each held-out speed, and

- ``blends``: the MAE of :math:`(1 - w)\\,\\hat v_{\\text{model}} + w\\,\\hat v_{\\text{peer}}`
  for each peer and each :math:`w` in :data:`WEIGHTS`;
- ``hindsight``: the least MAE of any convex combination :math:`\\sum_p w_p \\hat v_p` of all
  the predictors, :math:`w` on a grid of ``--step`` over the simplex, chosen on the held-out
  rows themselves: no predictor could choose these weights, so it is an upper bound on what
  stacking these predictors can give, not a method;
- ``error_correlation``: the correlation of the model's held-out errors with each peer's;
- ``offsets``: where each predictor's error sits: its MAE after taking out the mean error of
  each held-out row's victim job (``less_victim``) and, by :func:`two_way`, of its victim and
  its co-runner together (``less_both``), an oracle per-job offset no predictor has; on
  ``cold`` also split by whether the victim is one of the cold jobs (``cold_victim``,
  ``fitted_victim``: MAE and MAE less the victim's mean error).

Ratios are to the best peer's MAE; the summary's are the target's definition, the median MAE
over the seeds (of the model, of each blend, of the hindsight combination) over the best
peer's median MAE. Lucid (non-commercial licence) is read from ``--lucid``.
"""

from __future__ import annotations

import argparse
import itertools
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
from interplace.model import PEERS, fit
from interplace.model._evaluate import row_queries

WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8)
"""Weights on the peer in the two-predictor blends."""


def simplex(n: int, step: float) -> np.ndarray[Any, Any]:
    """Every weight vector ``(n,)`` on the grid of ``step`` with sum 1, shape ``(G, n)``.

    >>> simplex(3, 0.5).tolist()  # doctest: +NORMALIZE_WHITESPACE
    [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.0, 0.5],
     [0.0, 1.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 1.0]]
    """
    k = round(1 / step)
    rows = [(k - sum(c), *c) for c in itertools.product(range(k + 1), repeat=n - 1)
            if sum(c) <= k]
    rows.sort(key=lambda r: [-x for x in r])
    return np.asarray(rows, dtype=float) / k


def hindsight(pred: np.ndarray[Any, Any], y: np.ndarray[Any, Any], step: float
              ) -> tuple[float, np.ndarray[Any, Any]]:
    """The least MAE of ``w @ pred`` over the simplex grid and its ``w``; ``pred`` ``(P, N)``.

    >>> y = np.array([1.0, 2.0]); p = np.array([[0.0, 1.0], [2.0, 3.0]])
    >>> m, w = hindsight(p, y, 0.5); round(m, 6), w.tolist()
    (0.0, [0.5, 0.5])
    """
    grid = simplex(pred.shape[0], step)
    maes = np.abs(grid @ pred - y).mean(1)
    i = int(np.argmin(maes))
    return float(maes[i]), grid[i]


def two_way(err: np.ndarray[Any, Any], job: np.ndarray[Any, Any], co: np.ndarray[Any, Any],
            rounds: int = 20) -> np.ndarray[Any, Any]:
    """``err`` ``(N,)`` less an additive offset per ``job`` and per ``co`` (alternating means,
    ``rounds`` times): what no per-job correction of either side could remove.

    >>> e = np.array([1.0, 1.0, 3.0, 3.0]); j = np.array([0, 0, 1, 1]); k = np.array([0, 1, 0, 1])
    >>> two_way(e, j, k).round(6).tolist()
    [0.0, 0.0, 0.0, 0.0]
    """
    out = np.asarray(err, dtype=float)
    groups = [_groups(job), _groups(co)]
    for _ in range(rounds):
        for inv in groups:
            out = _less_mean(out, inv)
    return out


def _groups(key: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Each row's group index ``(N,)`` for the labels ``key`` ``(N,)``."""
    _, inv = np.unique(key, return_inverse=True)
    return np.asarray(inv)


def _less_mean(err: np.ndarray[Any, Any], inv: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``err`` ``(N,)`` less the mean of its group (``inv``: :func:`_groups`)."""
    return np.asarray(err - (np.bincount(inv, weights=err) / np.bincount(inv))[inv], dtype=float)


def _less_victim(err: np.ndarray[Any, Any], job: np.ndarray[Any, Any]) -> float:
    return float(np.abs(_less_mean(err, _groups(job))).mean())


def _split(path: str, kind: str, seed: int, family: str | None, step: float
           ) -> dict[str, Any]:
    torch.set_num_threads(1)
    train, test, cold = lucid_split(path, kind, seed)
    start = time.perf_counter()
    model = fit(train, seed=seed, family=family)
    families = model.family_map() if family is not None else None
    fit_s = time.perf_counter() - start
    y = test["speed"].to_numpy(float)
    pred = {"model": np.asarray(model.posterior_speed(row_queries(test), seed=seed).mean)}
    for name, make in PEERS.items():
        try:
            pred[name] = np.asarray(make(train, families, seed).predict(test), dtype=float)
        except InputError as exc:  # an optional extra that is missing: say so, go on
            print(f"{kind} seed {seed}: {name} unavailable ({exc})", file=sys.stderr)
    job = test["job"].astype(str).to_numpy()
    co = test["co_runner"].astype(str).to_numpy()
    return {"split": kind, "family": family, "seed": seed, "fit_seconds": fit_s,
            **score(pred, y, job, co, cold, step)}


def score(pred: dict[str, np.ndarray[Any, Any]], y: np.ndarray[Any, Any],
          job: np.ndarray[Any, Any], co: np.ndarray[Any, Any], cold: set[str], step: float
          ) -> dict[str, Any]:
    """One split's figures (module docstring) from each predictor's held-out speeds ``(N,)``
    (``pred["model"]`` and the peers'), the measured ``y``, each row's victim ``job`` and
    ``co``-runner, and the ``cold`` jobs (empty on ``random``)."""
    peers = [n for n in pred if n != "model"]
    mae = {n: float(np.abs(p - y).mean()) for n, p in pred.items()}
    err = pred["model"] - y
    names = list(pred)
    best_mae, w = hindsight(np.stack([pred[n] for n in names]), y, step)
    offsets: dict[str, Any] = {}
    for n, p in pred.items():
        e = p - y
        offsets[n] = {"mae": mae[n], "less_victim": _less_victim(e, job),
                      "less_both": float(np.abs(two_way(e, job, co)).mean())}
        if cold:
            is_cold = np.isin(job, sorted(cold))
            for side, sel in (("cold_victim", is_cold), ("fitted_victim", ~is_cold)):
                offsets[n][side] = {
                    "share": float(sel.mean()), "mae": float(np.abs(e[sel]).mean()),
                    "less_victim": _less_victim(e[sel], job[sel]),
                } if sel.any() else None
    return {
        "rows": len(y), "mae": mae,
        "best_peer": min(peers, key=mae.__getitem__) if peers else None,
        "error_correlation": {n: float(np.corrcoef(err, pred[n] - y)[0, 1]) for n in peers},
        "blends": {n: {str(wt): float(np.abs((1 - wt) * pred["model"] + wt * pred[n] - y)
                                      .mean()) for wt in WEIGHTS} for n in peers},
        "hindsight": {"mae": best_mae, "weights": dict(zip(names, w.tolist(), strict=True))},
        "offsets": offsets,
    }


def _split_task(job: tuple[str, str, int, str | None, float]) -> dict[str, Any]:
    """:func:`_split` on one ``(path, kind, seed, family, step)``, for :func:`spawn_map`."""
    return _split(*job)


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted({(r["split"], r["family"] or "none") for r in rows}):
        kind = key[0] if key[1] == "none" else f"{key[0]}, families {key[1]}"
        rs = [r for r in rows if (r["split"], r["family"] or "none") == key]
        peers = [n for n in rs[0]["mae"] if n != "model" and all(n in r["mae"] for r in rs)]
        if not peers:
            continue
        med = {n: float(np.median([r["mae"][n] for r in rs])) for n in ["model", *peers]}
        best = min(peers, key=med.__getitem__)
        blends = {n: {wt: float(np.median([r["blends"][n][wt] for r in rs])) / med[best]
                      for wt in rs[0]["blends"][n]} for n in peers}
        out[kind] = {
            "seeds": len(rs), "median_mae": med, "best_peer": best,
            "model_ratio": med["model"] / med[best],
            "blend_ratio": blends,
            "best_blend": min(((n, wt, v) for n, b in blends.items() for wt, v in b.items()),
                              key=lambda t: t[2]),
            "hindsight_ratio": float(np.median([r["hindsight"]["mae"] for r in rs])) / med[best],
            "hindsight_ratio_per_seed": [r["hindsight"]["mae"] / r["mae"][r["best_peer"]]
                                         for r in rs],  # to the seed's own best peer
            "model_weight_range": [min(r["hindsight"]["weights"]["model"] for r in rs),
                                   max(r["hindsight"]["weights"]["model"] for r in rs)],
            "offsets": {n: {k: float(np.median([r["offsets"][n][k] for r in rs]))
                            for k in ("mae", "less_victim", "less_both")}
                        | {side: {k: float(np.median([r["offsets"][n][side][k] for r in rs
                                                      if r["offsets"][n].get(side)]))
                                  for k in ("share", "mae", "less_victim")}
                           for side in ("cold_victim", "fitted_victim")
                           if all(r["offsets"][n].get(side) for r in rs)}
                        for n in ["model", *peers]},
            "error_correlation_range": {
                n: [min(r["error_correlation"][n] for r in rs),
                    max(r["error_correlation"][n] for r in rs)] for n in peers},
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_lucid_options(ap)
    ap.add_argument("--families", nargs="+", choices=("none", "model"), default=["none"],
                    help="without families, with Lucid's model column as families, or both")
    ap.add_argument("--step", type=float, default=0.05, help="grid step over the simplex")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    require_lucid(args.lucid)
    if not 0 < args.step <= 0.5 or abs(1 / args.step - round(1 / args.step)) > 1e-9:
        sys.exit(f"--step {args.step}: give 1/k for a whole k >= 2 (0.05, 0.1, ...)")
    jobs = [(args.lucid, kind, s, None if f == "none" else f, args.step)
            for f in args.families for kind in args.splits for s in args.seeds]
    rows = spawn_map(_split_task, jobs, args.workers)
    report(rows, _summary(rows), args.out, rows_key="splits", summary_key="summary")


if __name__ == "__main__":
    main()
