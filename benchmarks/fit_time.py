"""Lucid fit time of the current code against an earlier commit's, in the same run.

Run: ``git worktree add /tmp/before <commit> && python benchmarks/fit_time.py --baseline
/tmp/before/src [--seeds 0 1 2 3] [--families none model] [--lucid ../shared/datasets/lucid]
[--out results.json]``

Fit times move with the machine (the same commit's Lucid fit took 25.6 s one day and 38.5 s
another on the 2-core machine), so a fit time is only comparable to one measured beside it.
For each seed and family choice it fits Lucid once with the current source tree and once with
``--baseline`` (a ``src`` directory of another checkout), alternating, each in a fresh process,
one at a time, and reports per fit the seconds, SVI steps and the second stage's seconds, and
per family the medians and the median of the per-seed ratios (current over baseline).

Lucid (non-commercial licence) is read from ``--lucid``; without it the script exits with a
one-line error.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from _results import save_json, snippet_result, start_snippet

_FIT = r"""
import json, sys, time
from pathlib import Path
from interplace.datasets import load_lucid
from interplace.model import fit
data = load_lucid(Path(sys.argv[1]))
seed, fam = int(sys.argv[2]), (None if sys.argv[3] == "none" else sys.argv[3])
t = time.perf_counter()
m = fit(data, seed=seed, family=fam)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "steps": m.info["steps"],
                  "stage_seconds": m.info.get("measured_seconds")}))
"""


def _fit_once(src: Path, lucid: Path, seed: int, family: str) -> dict[str, Any]:
    proc = start_snippet(src, _FIT, [str(lucid), str(seed), family], lucid.anchor)
    return snippet_result(proc, f"fit_time: fit with {src} failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="src/ of the other checkout")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--families", nargs="+", choices=("none", "model"), default=["none", "model"])
    ap.add_argument("--lucid", type=Path, default=Path("../shared/datasets/lucid"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    current = Path(__file__).resolve().parent.parent / "src"
    if not (args.baseline / "interplace").is_dir():
        raise SystemExit(f"fit_time: {args.baseline} holds no interplace package")
    if not args.lucid.is_dir():
        raise SystemExit(f"fit_time: {args.lucid} not found (Lucid's data)")
    lucid = args.lucid.resolve()
    results: dict[str, Any] = {"seeds": args.seeds, "baseline": str(args.baseline), "fits": []}
    for seed in args.seeds:
        for family in args.families:
            for name, src in (("baseline", args.baseline.resolve()), ("current", current)):
                r = _fit_once(src, lucid, seed, family)
                results["fits"].append({"code": name, "seed": seed, "family": family, **r})
                print(f"  {name} family={family} seed {seed}: {r['seconds']:.1f} s, "
                      f"{r['steps']} steps", file=sys.stderr)
    summary = {}
    for family in args.families:
        by = {
            name: {f["seed"]: f["seconds"] for f in results["fits"]
                   if f["code"] == name and f["family"] == family}
            for name in ("baseline", "current")
        }
        ratios = [by["current"][s] / by["baseline"][s] for s in args.seeds]
        summary[family] = {
            "baseline_median_seconds": statistics.median(by["baseline"].values()),
            "current_median_seconds": statistics.median(by["current"].values()),
            "median_ratio": statistics.median(ratios),
            "ratios": ratios,
        }
    results["summary"] = summary
    if args.out:
        save_json(results, args.out, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
