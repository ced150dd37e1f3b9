"""Held-out accuracy of the current code against an earlier commit's, seed by seed, same run.

Run: ``git worktree add /tmp/before <commit> && python benchmarks/accuracy_against.py
--baseline /tmp/before/src [--seeds 0 1 2 3 4 5 6 7] [--splits lucid-random lucid-cold
v100-random] [--lucid ../shared/datasets/lucid] [--side-by-side] [--out results.json]``

For a change that should leave the model's accuracy where it was but cannot leave its numbers
bit for bit (a sum in another order sends every SVI trajectory elsewhere from its last bits
on), a bitwise comparison says nothing, and the accuracy benchmark's medians over ten seeds
move by their own seed-to-seed spread. This fits each split and seed with both codes
(:func:`interplace.model.evaluate`, no peers; each fit in a fresh process) and reports per
split the medians of the model's held-out MAE and 90% coverage, and the median, smallest and
largest per-seed ratio current / baseline, so a shift shows beside the scatter of the ratios.

Splits: ``lucid-random`` (30% of co-located runs held out), ``lucid-cold`` (8 cold jobs),
``v100-random``, ``p100-random``, ``k80-random`` (Gavel, 30% held out). Lucid
(non-commercial licence) is read from ``--lucid``; a Lucid split without it exits with a
one-line error. ``--side-by-side`` runs the two codes' fits of a seed at once (two processes,
each with one BLAS thread: two processes with two OpenBLAS threads each on two cores stall
each other in the completion's SVDs; the library keeps them to one thread itself since the
twenty-sixth session, a baseline from before does not); the fit times it records are then
not comparable with ``benchmarks/fit_time.py``'s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _results import save_json, snippet_result, start_snippet

SPLITS = ("lucid-random", "lucid-cold", "v100-random", "p100-random", "k80-random")

_EVAL = r"""
import json, sys
from pathlib import Path
from interplace.model import evaluate
split, seed = sys.argv[1], int(sys.argv[2])
data_name, kind = split.split("-")
if data_name == "lucid":
    from interplace.datasets import load_lucid
    data = load_lucid(Path(sys.argv[3]))
else:
    from interplace.datasets import load_gavel
    data = load_gavel(data_name).data
kw = {"holdout_frac": None, "cold_jobs": 8} if kind == "cold" else {"holdout_frac": 0.3}
r = evaluate(data, seed=seed, peers=False, **kw)["model"]
print(json.dumps({"mae": r["mae"], "coverage_90": r["coverage_90"],
                  "fit_seconds": r["fit_seconds"], "steps": r["steps"]}))
"""


def _start(
    src: Path, split: str, seed: int, lucid: Path, one_thread: bool
) -> subprocess.Popen[str]:
    return start_snippet(
        src, _EVAL, [split, str(seed), str(lucid)], lucid.anchor, one_thread=one_thread
    )


def _result(proc: subprocess.Popen[str], src: Path) -> dict[str, Any]:
    return snippet_result(proc, f"accuracy_against: a fit with {src} failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="src/ of the other checkout")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    ap.add_argument("--splits", nargs="+", choices=SPLITS,
                    default=["lucid-random", "lucid-cold", "v100-random"])
    ap.add_argument("--lucid", type=Path, default=Path("../shared/datasets/lucid"))
    ap.add_argument("--side-by-side", action="store_true",
                    help="fit both codes of a seed at once, one BLAS thread each")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    current = Path(__file__).resolve().parent.parent / "src"
    if not (args.baseline / "interplace").is_dir():
        raise SystemExit(f"accuracy_against: {args.baseline} holds no interplace package")
    if any(s.startswith("lucid") for s in args.splits) and not args.lucid.is_dir():
        raise SystemExit(f"accuracy_against: {args.lucid} not found (Lucid's data)")
    lucid = args.lucid.resolve()
    codes = (("baseline", args.baseline.resolve()), ("current", current))
    fits: list[dict[str, Any]] = []
    for seed in args.seeds:
        for split in args.splits:
            if args.side_by_side:
                procs = [(name, src, _start(src, split, seed, lucid, True)) for name, src in codes]
                done = [(name, _result(p, src)) for name, src, p in procs]
            else:
                done = [(name, _result(_start(src, split, seed, lucid, False), src))
                        for name, src in codes]
            for name, r in done:
                fits.append({"code": name, "split": split, "seed": seed, **r})
                print(f"  {name} {split} seed {seed}: MAE {r['mae']:.4f}, coverage "
                      f"{r['coverage_90']:.3f}, {r['steps']} steps", file=sys.stderr)
    summary: dict[str, Any] = {}
    for split in args.splits:
        by = {
            name: {f["seed"]: f for f in fits if f["code"] == name and f["split"] == split}
            for name, _ in codes
        }
        entry: dict[str, Any] = {}
        for key in ("mae", "coverage_90"):
            ratios = [by["current"][s][key] / by["baseline"][s][key] for s in args.seeds]
            entry[key] = {
                "baseline_median": statistics.median(f[key] for f in by["baseline"].values()),
                "current_median": statistics.median(f[key] for f in by["current"].values()),
                "median_ratio": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)],
                "ratios": ratios,
            }
        summary[split] = entry
    results = {"seeds": args.seeds, "baseline": str(args.baseline), "fits": fits,
               "summary": summary, "command": " ".join(sys.argv)}
    if args.out:
        save_json(results, args.out, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
