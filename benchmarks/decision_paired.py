"""Is the model's decision quality above a peer's, or level with it? Paired over seeds.

Run: ``python benchmarks/decision_paired.py --from docs/accuracy-decision-families-400.json
[more.json ...] [--baseline other.json ...] [--key decision decision_families]
[--resamples 20000] [--seed 0] [--out results.json]``

``benchmarks/accuracy.py --parts decision`` scores every predictor's exact choice of
co-location on the same seeded job mixes, as a share of the measured optimum, and keeps each
seed's ratios (``per_seed``) under ``decision`` (fitted without families) and
``decision_families`` (with them). A difference of means over a few hundred mixes says
little by itself: mixes of one seed share one fit and one split, so they are not independent.
This takes the seed as the unit. For each seed :math:`s` and predictor :math:`p` it forms

.. math:: d_{s,p} = \\bar r_{s,\\text{model}} - \\bar r_{s,p},

the model's mean ratio over the seed's mixes less the predictor's (paired: the same mixes),
pools the seeds of every file given (a seed in two files counts twice: give each seed once),
and reports per predictor the mean of :math:`d` over seeds, its standard error, a percentile
bootstrap interval (seeds resampled with replacement), how many seeds put the model ahead and
behind, and mix by mix how many it wins, loses and ties. "Above a peer" is read here as the
interval lying above 0.

``--baseline``: runs of *another setting of the model* on the same seeds and mixes (the
default, say, where ``--from`` ran an option of the fit); each seed's model ratios there join
that seed's rows as the predictor ``interplace@baseline``, so the setting is set against the
baseline as against a peer. Each seed of ``--from`` must be in the baseline files once, with
as many mixes.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
from _results import report

from interplace.errors import InputError, read_json

MODEL = "interplace"


def _per_seed(path: Path, key: str) -> list[dict[str, Any]]:
    """The ``per_seed`` rows of ``path``'s ``key`` part; exits with a one-line error on a
    file that is missing, not JSON, or lacks them (an empty list if the file has no ``key``)."""
    try:
        data = read_json(path, "benchmark results")
    except InputError as e:
        sys.exit(str(e))
    if not isinstance(data, dict):
        sys.exit(f"{path}: not the JSON of benchmarks/accuracy.py")
    part = data.get(key)
    if part is None:
        return []
    rows = part.get("per_seed") if isinstance(part, dict) else None
    if not isinstance(rows, list) or not rows:
        sys.exit(f"{path}: {key} has no 'per_seed' rows")
    for r in rows:
        ratios = r.get("ratios") if isinstance(r, dict) else None
        if not isinstance(ratios, dict) or MODEL not in ratios or "seed" not in r:
            sys.exit(f"{path}: {key}: a row without 'seed' or the model's 'ratios'")
        n = len(ratios[MODEL])
        for name, v in ratios.items():
            if not (isinstance(v, list) and len(v) == n and n > 0
                    and all(isinstance(x, (int, float)) and math.isfinite(x) for x in v)):
                sys.exit(f"{path}: {key}: seed {r['seed']}: {name} has no finite ratio per mix")
    return rows


BASELINE = f"{MODEL}@baseline"


def with_baseline(rows: list[dict[str, Any]], base: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with each seed's model ratios in ``base`` added as :data:`BASELINE`; exits with
    a one-line error where a seed is missing from ``base``, is there twice, or has another
    number of mixes.

    >>> rows = [{"seed": 3, "ratios": {"interplace": [1.0, 0.9]}}]
    >>> base = [{"seed": 3, "ratios": {"interplace": [0.9, 0.9], "p": [0.8, 0.8]}}]
    >>> with_baseline(rows, base)[0]["ratios"]
    {'interplace': [1.0, 0.9], 'interplace@baseline': [0.9, 0.9]}
    """
    by_seed: dict[int, list[float]] = {}
    for r in base:
        if r["seed"] in by_seed:
            sys.exit(f"--baseline: seed {r['seed']} is there twice")
        by_seed[r["seed"]] = r["ratios"][MODEL]
    out = []
    for r in rows:
        b = by_seed.get(r["seed"])
        if b is None:
            sys.exit(f"--baseline: no seed {r['seed']}")
        if len(b) != len(r["ratios"][MODEL]):
            sys.exit(f"--baseline: seed {r['seed']} has {len(b)} mixes, not "
                     f"{len(r['ratios'][MODEL])}")
        out.append({**r, "ratios": {**r["ratios"], BASELINE: b}})
    return out


def paired(rows: list[dict[str, Any]], peer: str, resamples: int, seed: int) -> dict[str, Any]:
    """The model against ``peer`` over the seeds of ``rows`` (module docstring).

    >>> rows = [{"seed": s, "ratios": {"interplace": [1.0, 0.99], "p": [0.98, 0.99]}}
    ...         for s in range(4)]
    >>> out = paired(rows, "p", 1000, seed=0)
    >>> round(out["mean_difference"], 3), out["seeds_ahead"], out["mixes_won"], out["mixes_tied"]
    (0.01, 4, 4, 4)
    """
    model = np.array([np.mean(r["ratios"][MODEL]) for r in rows])  # each seed's mean
    other = np.array([np.mean(r["ratios"][peer]) for r in rows])
    d = model - other
    mix = np.concatenate([np.subtract(r["ratios"][MODEL], r["ratios"][peer]) for r in rows])
    gen = np.random.default_rng(seed)
    means = np.array([d[gen.integers(0, d.size, d.size)].mean() for _ in range(resamples)])
    low, high = np.quantile(means, [0.025, 0.975])
    tie = 1e-12
    return {
        "peer": peer, "seeds": int(d.size), "mixes": int(mix.size),
        "model_mean": float(model.mean()), "peer_mean": float(other.mean()),
        "mean_difference": float(d.mean()),
        "standard_error": float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else math.nan,
        "low": float(low), "high": float(high),
        "seeds_ahead": int((d > tie).sum()), "seeds_behind": int((d < -tie).sum()),
        "mixes_won": int((mix > tie).sum()), "mixes_lost": int((mix < -tie).sum()),
        "mixes_tied": int((np.abs(mix) <= tie).sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--from", dest="sources", nargs="+", type=Path, required=True,
                    help="JSON files of benchmarks/accuracy.py --parts decision")
    ap.add_argument("--baseline", nargs="+", type=Path, default=[],
                    help="runs of another setting of the model on the same seeds and mixes, "
                    "set against --from's model as the predictor interplace@baseline")
    ap.add_argument("--key", nargs="+", default=["decision", "decision_families"],
                    help="which decision parts (default: decision decision_families)")
    ap.add_argument("--resamples", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.resamples < 100:
        sys.exit(f"--resamples {args.resamples}: give at least 100")
    out_rows: list[dict[str, Any]] = []
    for key in args.key:
        rows = [r for path in args.sources for r in _per_seed(path, key)]
        if not rows:
            continue
        if args.baseline:
            rows = with_baseline(rows, [r for path in args.baseline for r in _per_seed(path, key)])
        peers = sorted(set.intersection(*(set(r["ratios"]) for r in rows)) - {MODEL})
        for peer in peers:
            out_rows.append({"key": key, "seed_list": [r["seed"] for r in rows]}
                            | paired(rows, peer, args.resamples, args.seed))
    if not out_rows:
        sys.exit(f"no {' or '.join(args.key)} part in {', '.join(map(str, args.sources))}")
    summary = {
        f"{r['key']}: {r['peer']}": {k: round(r[k], 4) for k in
                                    ("mean_difference", "low", "high", "model_mean", "peer_mean")}
        | {"seeds_ahead": r["seeds_ahead"], "seeds": r["seeds"]}
        for r in out_rows
    }
    report(out_rows, summary, args.out, rows_key="rows", summary_key="summary")


if __name__ == "__main__":
    main()
