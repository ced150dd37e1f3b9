"""Issue 15's accuracy table, composed from the accuracy benchmark's JSON files, on any seeds.

Run: ``python benchmarks/issue_table.py --from docs/accuracy-direct25-gavel.json
docs/accuracy-direct25-lucid-random.json docs/accuracy-speed-blend-lucid-cold.json
docs/accuracy-speed-blend-lucid-cold-families.json [--seeds 0 1 ... 9] [--target 0.9]
[--out results.json]``

The table's rows come from several runs of ``benchmarks/accuracy.py`` (a change that can move
only some splits re-runs only those), and one of them may hold more seeds than the table reads
(the Lucid cold-start runs hold seeds 0-19, the table reads 0-9). This reads each run's split
rows (``splits``, each with ``data``, ``split``, ``family`` and the per-seed lists
``seeds``, ``model_mae_per_seed``, ``peer_mae_per_seed`` and ``coverage_per_seed``), keeps the
seeds given (every seed of each row without ``--seeds``; a row that lacks one of them is an
error, as is a split given by two files), and recomputes per split, as the target defines it,

.. math:: \\rho = \\frac{\\operatorname{median}_s \\mathrm{MAE}_{\\text{model}, s}}
          {\\min_p \\operatorname{median}_s \\mathrm{MAE}_{p, s}},

the per-seed ratio :math:`\\mathrm{MAE}_{\\text{model}, s} / \\min_p \\mathrm{MAE}_{p, s}`
against each seed's best peer (as the accuracy benchmark's ``ratio_to_best_peer_per_seed``),
how many seeds reach ``--target`` on their own, and the
median and range of the seeds' 90% interval coverage. It prints the table as Markdown, one row
per split in the order of the issue (Gavel V100, P100, K80, then Lucid random and cold start;
without families before with them), and saves the rows as JSON with ``--out``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from _results import save_json, split_rows

PEERS = ("soft_impute", "boosted_trees", "ebm")
LABEL = {"soft_impute": "soft-impute", "boosted_trees": "boosted trees", "ebm": "EBM"}
ORDER = ("gavel-v100", "gavel-p100", "gavel-k80", "lucid")


def _split_rows(path: Path) -> list[dict[str, Any]]:
    """The split rows of an accuracy JSON; exits with a one-line error on a file that is
    missing, not JSON, or has no such rows."""
    rows = split_rows(path, "benchmarks/accuracy.py")
    need = ("data", "split", "seeds", "model_mae_per_seed", "peer_mae_per_seed",
            "coverage_per_seed")
    for r in rows:
        missing = [k for k in need if k not in r]
        if missing:
            sys.exit(f"{path}: a split row without {', '.join(missing)} "
                     "(a run of benchmarks/accuracy.py before it kept per-seed figures)")
    return rows


def summarise(row: dict[str, Any], seeds: list[int] | None, target: float) -> dict[str, Any]:
    """One split's table row from an accuracy JSON split ``row``, on ``seeds`` (all of the
    row's when ``None``).

    >>> row = {"data": "d", "split": "random", "family": None, "seeds": [0, 1, 2],
    ...        "model_mae_per_seed": [0.8, 0.9, 1.2],
    ...        "peer_mae_per_seed": {"soft_impute": [1.0, 1.0, 1.0], "ebm": [2.0, 0.5, 2.0]},
    ...        "coverage_per_seed": [0.9, 0.85, 0.95]}
    >>> out = summarise(row, [0, 1], 0.9)
    >>> out["best_peer"], round(out["ratio"], 4), out["per_seed"], out["seeds_at_target"]
    ('soft_impute', 0.85, [0.8, 1.8], 1)
    >>> summarise(row, [3], 0.9)
    Traceback (most recent call last):
    ...
    SystemExit: d random: seed 3 not in the run (seeds 0, 1, 2)
    """
    name = f"{row['data']} {row['split']}" + (f" ({row['family']})" if row.get("family") else "")
    have = list(row["seeds"])
    use = have if seeds is None else seeds
    for s in use:
        if s not in have:
            sys.exit(f"{name}: seed {s} not in the run (seeds {', '.join(map(str, have))})")
    at = [have.index(s) for s in use]

    def pick(values: list[float], what: str) -> list[float]:
        if len(values) != len(have) or not all(
            isinstance(v, (int, float)) and math.isfinite(v) for v in values
        ):
            sys.exit(f"{name}: {what} is not one finite number per seed")
        return [float(values[i]) for i in at]

    model = pick(row["model_mae_per_seed"], "model_mae_per_seed")
    peers = {p: pick(v, f"peer {p}'s MAE") for p, v in row["peer_mae_per_seed"].items()}
    if not peers:
        sys.exit(f"{name}: no peer measured")
    cover = pick(row["coverage_per_seed"], "coverage_per_seed")
    med = {p: statistics.median(v) for p, v in peers.items()}
    best = min(med, key=lambda p: med[p])
    per_seed = [m / min(v[i] for v in peers.values()) for i, m in enumerate(model)]
    return {
        "data": row["data"], "split": row["split"], "family": row.get("family"), "seeds": use,
        "model_mae": statistics.median(model), "peer_mae": med, "best_peer": best,
        "ratio": statistics.median(model) / med[best], "per_seed": per_seed,
        "seeds_at_target": sum(r <= target for r in per_seed),
        "coverage": statistics.median(cover), "coverage_range": [min(cover), max(cover)],
    }


def markdown(rows: list[dict[str, Any]], target: float) -> str:
    """The rows as the issue's Markdown table."""
    lines = [
        "| data, split | families | model MAE | soft-impute | boosted trees | EBM | model / best "
        f"peer (median MAE ratio) | per seed, min-max | seeds ≤ {target:g} | 90% coverage |",
        "|---|---|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    for r in rows:
        peers = " | ".join(f"{r['peer_mae'][p]:.4f}" if p in r["peer_mae"] else "-" for p in PEERS)
        mark = "✓" if r["ratio"] <= target else "✗"
        lo, hi = r["coverage_range"]
        lines.append(
            f"| {r['data']}, {r['split']} | {r['family'] or 'none'} | {r['model_mae']:.4f} | "
            f"{peers} | **{r['ratio']:.3f}** ({LABEL[r['best_peer']]}) {mark} | "
            f"{min(r['per_seed']):.2f}-{max(r['per_seed']):.2f} | "
            f"{r['seeds_at_target']}/{len(r['seeds'])} | {r['coverage']:.3f} [{lo:.3f}-{hi:.3f}] |"
        )
    return "\n".join(lines)


def _order(r: dict[str, Any]) -> tuple[int, int, int]:
    data = ORDER.index(r["data"]) if r["data"] in ORDER else len(ORDER)
    return data, 0 if r["split"] == "random" else 1, 0 if not r["family"] else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--from", dest="sources", nargs="+", type=Path, required=True,
                    help="JSON files of benchmarks/accuracy.py")
    ap.add_argument("--seeds", type=int, nargs="+", help="the seeds to read (default: all)")
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not (math.isfinite(args.target) and args.target > 0):
        sys.exit(f"--target {args.target}: give a positive ratio")
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, str, Any], Path] = {}
    for path in args.sources:
        for r in _split_rows(path):
            key = (r["data"], r["split"], r.get("family"))
            if key in seen:
                sys.exit(f"{path}: {key[0]} {key[1]} (families {key[2] or 'none'}) is also in "
                         f"{seen[key]}; give each split once")
            seen[key] = path
            rows.append(summarise(r, args.seeds, args.target) | {"source": str(path)})
    rows.sort(key=_order)
    print(markdown(rows, args.target))
    if args.out is not None:
        save_json({"splits": rows, "target": args.target, "command": " ".join(sys.argv)},
                  args.out)


if __name__ == "__main__":
    main()
