"""Held-out 90% coverage and interval width under the ceiling lift's spread rule, against the
rule it replaced on 2026-12-01.

Run: ``python benchmarks/lift_spread.py [--seeds 0 1 2] [--lucid ../shared/datasets/lucid]
[--gavel v100 p100 k80] [--families none model] [--workers 2] [--out results.json]``

A lifted pair's interval spread is :math:`\\tau_{jk}^2 = \\max(\\tau^2 - c\\,(v^\\uparrow_{jk}
- v_{jk}), (\\tau/10)^2)` (``interplace.model._cells``, *Intervals*). The library's rule is
:math:`c = (\\nu - 2)/\\nu` (a Student-t of scale :math:`\\tau` has variance
:math:`\\tfrac{\\nu}{\\nu-2}\\tau^2`); the rule before it took the lift's variance off whole,
:math:`c = 1`. This script runs :func:`interplace.model.evaluate` (no peers; without job
families, or with the runs' ``model`` column as families, ``--families``) on the same
seeded splits twice, once with the library as it is (``current``) and once with
``lifted_spread`` called at :math:`\\nu \\to \\infty` inside the second stage (``before``;
:math:`c = 1`, everything else the same), and reports per split and seed the MAE (equal by
construction: the rule moves only intervals), the 90% coverage and the mean interval width,
with their medians over seeds.

Lucid (non-commercial licence) is read from ``--lucid`` when that directory exists and is
skipped otherwise.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from _results import report

from interplace._parallel import spawn_map
from interplace.datasets import CoLocationData, load_gavel, load_lucid
from interplace.model import evaluate


def _one(job: tuple[CoLocationData, str, int, str | None, str]) -> dict[str, Any]:
    data, kind, seed, family, rule = job
    cold = 8 if kind == "cold" else None
    if rule == "before":
        import interplace.model._cells as cells

        original = cells.lifted_spread

        def whole(*args: Any, **kwargs: Any) -> Any:
            # (df - 2) / df -> 1: the lift's variance taken off tau^2 whole.
            kwargs["df"] = 1e12
            return original(*args, **kwargs)

        cells.lifted_spread = whole  # type: ignore[assignment]
        try:
            r = evaluate(data, seed=seed, cold_jobs=cold, family=family, peers=False)
        finally:  # a pooled worker runs the next job with the library's rule
            cells.lifted_spread = original  # type: ignore[assignment]
    else:
        r = evaluate(data, seed=seed, cold_jobs=cold, family=family, peers=False)
    m = r["model"]
    return {
        "data": data.name, "split": kind, "family": family, "seed": seed, "rule": rule,
        "mae": m["mae"],
        "coverage_90": m["coverage_90"], "interval_width_90": m["interval_width_90"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--lucid", type=Path, default=Path("../shared/datasets/lucid"))
    ap.add_argument("--gavel", nargs="*", default=["v100", "p100", "k80"],
                    choices=["v100", "p100", "k80"])
    ap.add_argument("--families", nargs="+", default=["none"], choices=["none", "model"])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sets: list[tuple[CoLocationData, str]] = [(load_gavel(g).data, "random") for g in args.gavel]
    if args.lucid.is_dir():
        lucid = load_lucid(args.lucid)
        sets += [(lucid, "random"), (lucid, "cold")]
    families = [None if f == "none" else f for f in args.families]
    jobs = [(d, kind, s, f, rule) for d, kind in sets for f in families for s in args.seeds
            for rule in ("current", "before")]
    rows = spawn_map(_one, jobs, args.workers)
    summary: list[dict[str, Any]] = []
    for (d, kind), f in ((s, f) for s in sets for f in families):
        entry: dict[str, Any] = {"data": d.name, "split": kind, "family": f}
        for rule in ("current", "before"):
            sel = [r for r in rows if r["data"] == d.name and r["split"] == kind
                   and r["family"] == f and r["rule"] == rule]
            entry[rule] = {
                k: statistics.median(r[k] for r in sel)
                for k in ("mae", "coverage_90", "interval_width_90")
            }
            entry[rule]["coverage_90_range"] = [min(r["coverage_90"] for r in sel),
                                                max(r["coverage_90"] for r in sel)]
        summary.append(entry)
    report(rows, summary, args.out)


if __name__ == "__main__":
    main()
