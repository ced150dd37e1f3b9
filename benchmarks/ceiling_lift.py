"""The ceiling lift of the second stage, with and without, on the same fitted structures.

Run: ``python benchmarks/ceiling_lift.py [--splits lucid:random:none gavel-v100:random:none
...] [--seeds 0 1 2] [--workers 2] [--lucid PATH] [--out results.json]``

Each split is ``data:kind:family``: ``data`` is ``lucid`` or ``gavel-<gpu>``, ``kind`` is
``random`` (30% of co-located runs held out, as ``evaluate``) or ``cold`` (every co-located
run of 8 jobs held out; Lucid), ``family`` is ``none`` or a runs-table column (Lucid's
``model``). For each split and seed the structure is fitted once, as the default fit fits it
(``fit(..., measured=False)``: the mixture on Gavel-sized data, one fit on Lucid, the
cold-demand step), and the second stage is added to it twice, without and with
``lift_ceilings``, by the function :func:`fit` adds it with
(:func:`interplace.model._fit.with_second_stage`). Both are scored on the held-out rows as
``evaluate`` scores: MAE, mean error, 90% interval coverage; with the number of jobs lifted
and the mean and largest lift (log scale). Per split: medians over seeds and the median of
the per-seed ratio lifted / not.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _results import report

from interplace._parallel import spawn_map
from interplace.datasets import load_gavel, load_lucid
from interplace.model import fit
from interplace.model._evaluate import cold_split, holdout_split, row_queries
from interplace.model._fit import stage_inputs, with_second_stage


def one(task: tuple[str, str, str, int, str]) -> dict[str, Any]:
    """One split and seed (module docstring)."""
    name, kind, family, seed, lucid = task
    torch.set_num_threads(1)
    data = load_lucid(lucid) if name == "lucid" else load_gavel(name.split("-", 1)[1]).data
    if kind == "cold":
        train, test, _ = cold_split(data, cold_jobs=8, seed=seed)
    else:
        train, test = holdout_split(data, holdout_frac=0.3, seed=seed)
    fam_col = None if family == "none" else family
    start = time.perf_counter()
    structure = fit(train, seed=seed, measured=False, family=fam_col)
    fit_s = time.perf_counter() - start
    obs, fam, readings, below = stage_inputs(structure, train)
    y = test["speed"].to_numpy(float)
    row: dict[str, Any] = {"data": name, "split": kind, "family": family, "seed": seed,
                           "fit_seconds": fit_s}
    for lift in (False, True):
        model, ell, _ = with_second_stage(structure, obs, seed=seed, family=fam,
                                          readings=readings, lift_ceilings=lift, below=below)
        post = model.posterior_speed(row_queries(test), seed=seed)
        row["lifted" if lift else "not"] = {
            "mae": float(np.abs(post.mean - y).mean()),
            "bias": float((post.mean - y).mean()),
            "coverage_90": float(((y >= post.q05) & (y <= post.q95)).mean()),
            "jobs_lifted": int((ell > 0).sum()),
            "lift_mean": float(ell.mean()),
            "lift_max": float(ell.max(initial=0.0)),
        }
    row["ratio"] = row["lifted"]["mae"] / row["not"]["mae"]
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per split: medians over seeds of each figure, and of the per-seed ratio."""
    out: dict[str, Any] = {}
    for key in sorted({(r["data"], r["split"], r["family"]) for r in rows}):
        rs = [r for r in rows if (r["data"], r["split"], r["family"]) == key]
        med = {
            side: {k: float(np.median([r[side][k] for r in rs]))
                   for k in ("mae", "bias", "coverage_90", "jobs_lifted", "lift_mean")}
            for side in ("not", "lifted")
        }
        ratios = [r["ratio"] for r in rs]
        med["ratio"] = {"median": float(np.median(ratios)), "min": float(min(ratios)),
                        "max": float(max(ratios)), "better": sum(x < 1 for x in ratios),
                        "seeds": len(rs)}
        out[":".join(key)] = med
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--splits", nargs="+", default=["lucid:random:none"],
                    help="data:kind:family, e.g. lucid:cold:model or gavel-v100:random:none")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=1, help="splits in parallel processes")
    ap.add_argument("--lucid", default="../shared/datasets/lucid")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    tasks = []
    for spec in args.splits:
        parts = spec.split(":")
        if len(parts) != 3 or parts[1] not in ("random", "cold"):
            sys.exit(f"bad split {spec!r}: want data:random|cold:family")
        if parts[0] == "lucid" and not Path(args.lucid, "colocate_info.csv").is_file():
            sys.exit(f"no Lucid data at {args.lucid} (give --lucid PATH)")
        tasks += [(parts[0], parts[1], parts[2], s, args.lucid) for s in args.seeds]
    rows = spawn_map(one, tasks, args.workers)
    report(rows, summary(rows), args.out)


if __name__ == "__main__":
    main()
