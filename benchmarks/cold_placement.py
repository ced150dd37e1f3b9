"""Cold start at placement time on Lucid: jobs the fit never saw, added from their counters.

Run: ``python benchmarks/cold_placement.py [--lucid ../shared/datasets/lucid] [--seeds 0 1 2]
[--cold-jobs 8] [--family model] [--workers 2] [--in-fit] [--out results.json]``

A scheduler meets job types its model was never fitted on and reads their counters from a
short isolated run; ``interplace.placement`` adds them to the fitted model without a refit
(``with_cold_jobs``, which ``place`` calls for a job given ``counters``). For each seed this
takes Lucid's cold-start split of ``evaluate`` (``cold_split``: every co-located run of
``--cold-jobs`` seeded jobs held out), fits the default model on the training runs *without*
the cold jobs (their isolated runs too), adds the cold jobs from the mean of their isolated
counter readings, and scores the held-out rows (MAE of the posterior mean speed, 90% interval
coverage) two ways on that one fit:

- ``borrowed``: as the library does, the added jobs' pair corrections borrowed from the five
  fitted jobs nearest by isolated counters (``interplace.model._cells.extended_pairs``);
- ``plain``: the same model with ``info["isolated_readings"]`` removed, which is how a model
  fitted before those readings were kept adds jobs: the structure's prediction alone;
- ``no_readings``: the same model with ``info["isolated_readings"]`` empty, a model of data
  without counters (Gavel's): no job has a reading to find mates by, so each added job
  borrows from every fitted job (the population's mean effect; until the seventeenth session
  it borrowed nothing, zero effect relative to the lifted structure).

With ``--family COLUMN`` the fits take job families from that column of the runs (Lucid's
``model``: the network a job trains) and each cold job is added with its family
(``with_cold_jobs(families=...)``, what ``place`` passes for a job's ``family``): its prior
starts from the family's effect and it borrows from the family's measured members;
``no_family`` scores the same fit with the cold jobs added from their counters alone. Each
``with_cold_jobs`` call is timed (median of 5; both ways on the same machine, same run).
``--in-fit`` adds the fit of ``evaluate``'s cold-start split, which sees the cold jobs'
isolated runs (one more fit per seed), for context. Lucid's licence is non-commercial: it
is read from ``--lucid`` and the script exits with a message when it is absent.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _results import save_json

from interplace.datasets import load_lucid
from interplace.model import METRIC_RESOURCE, InterferenceModel, cold_split, fit, row_queries
from interplace.model._data import subset_runs
from interplace.model._evaluate import solo_counters
from interplace.placement._cold import with_cold_jobs


def _score(model: InterferenceModel, test: Any, seed: int) -> dict[str, float]:
    y = test["speed"].to_numpy()
    p = model.posterior_speed(row_queries(test), seed=seed)
    return {
        "mae": float(np.abs(p.mean - y).mean()),
        "coverage_90": float(((y >= p.q05) & (y <= p.q95)).mean()),
    }


def _timed(
    model: InterferenceModel, counters: dict[str, dict[str, float]],
    families: dict[str, str] | None,
) -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        with_cold_jobs(model, counters, families)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--lucid", type=Path, default=Path("../shared/datasets/lucid"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--cold-jobs", type=int, default=8)
    ap.add_argument("--family", default=None, help="runs column of job families (default none)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--in-fit", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not args.lucid.is_dir():
        sys.exit(f"{args.lucid} not found: this benchmark needs Lucid's data")
    data = load_lucid(args.lucid)
    rows: list[dict[str, Any]] = []
    for seed in args.seeds:
        train, test, cold = cold_split(data, cold_jobs=args.cold_jobs, seed=seed)
        runs = train.runs
        touched = set(runs.loc[runs["job"].isin(cold), "run_id"].astype(str))
        keep = set(runs["run_id"].astype(str)) - touched
        warm_only = subset_runs(train, keep, f"{train.name}, cold jobs removed")
        model = fit(warm_only, seed=seed, family=args.family, workers=args.workers)
        solo = solo_counters(train)
        counters = {
            job: {m: float(v) for m, v in solo.loc[job].items()
                  if m in METRIC_RESOURCE and np.isfinite(v)}
            for job in cold
        }
        families = None
        if args.family is not None:
            of = runs.loc[runs["job"].isin(cold)].groupby("job")[args.family].first()
            families = {job: str(f) for job, f in of.items()}
        info = {k: v for k, v in model.info.items() if k != "isolated_readings"}
        plain_model = dataclasses.replace(model, info=info)
        grown = with_cold_jobs(model, counters, families)
        row: dict[str, Any] = {
            "seed": seed, "family": args.family, "cold_jobs": cold, "test_rows": len(test),
            "cold_families": families,
            "fit_jobs": len(model.jobs), "fit_seconds": model.info["fit_seconds"],
            "borrowing": grown.info.get("cold_jobs_borrowing", []),
            "borrowed": _score(grown, test, seed),
            "plain": _score(with_cold_jobs(plain_model, counters, families), test, seed),
            "no_readings": _score(with_cold_jobs(
                dataclasses.replace(model, info={**info, "isolated_readings": {}}), counters,
                families,
            ), test, seed),
            "add_seconds_borrowed": _timed(model, counters, families),
            "add_seconds_plain": _timed(plain_model, counters, families),
        }
        row["ratio"] = row["borrowed"]["mae"] / row["plain"]["mae"]
        if families is not None:
            row["no_family"] = _score(with_cold_jobs(model, counters), test, seed)
        if args.in_fit:
            in_fit = fit(train, seed=seed, family=args.family, workers=args.workers)
            row["in_fit"] = _score(in_fit, test, seed)
        print(json.dumps(row), flush=True)
        rows.append(row)

    def median(path: tuple[str, ...]) -> float:
        values = []
        for r in rows:
            v: Any = r
            for p in path:
                v = v[p]
            values.append(float(v))
        return statistics.median(values)

    summary: dict[str, Any] = {
        "seeds": args.seeds,
        "family": args.family,
        "borrowed_mae": median(("borrowed", "mae")),
        "plain_mae": median(("plain", "mae")),
        "ratio": median(("ratio",)),
        "seeds_better": sum(r["ratio"] < 1 for r in rows),
        "ratio_range": [min(r["ratio"] for r in rows), max(r["ratio"] for r in rows)],
        "borrowed_coverage": median(("borrowed", "coverage_90")),
        "plain_coverage": median(("plain", "coverage_90")),
        "no_readings_mae": median(("no_readings", "mae")),
        "no_readings_coverage": median(("no_readings", "coverage_90")),
        "add_seconds_borrowed": median(("add_seconds_borrowed",)),
        "add_seconds_plain": median(("add_seconds_plain",)),
    }
    if args.family is not None:
        summary["no_family_mae"] = median(("no_family", "mae"))
        summary["family_ratio"] = statistics.median(
            r["borrowed"]["mae"] / r["no_family"]["mae"] for r in rows
        )
    if args.in_fit:
        summary["in_fit_mae"] = median(("in_fit", "mae"))
        summary["in_fit_coverage"] = median(("in_fit", "coverage_90"))
    results = {"rows": rows, "medians": summary, "command": " ".join(sys.argv)}
    if args.out is not None:
        save_json(results, args.out)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
