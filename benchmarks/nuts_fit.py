r"""The exact-inference fit, ``fit(nuts=Nuts(...))``, against the default SVI fit, same splits.

Run: ``python benchmarks/nuts_fit.py [--gavel v100 p100 k80] [--lucid PATH] [--seeds 0]
[--chains 4] [--draws 200] [--warmup N] [--workers 2] [--out results.json]``

For each data set and seed, on the split of ``evaluate`` (30% of co-located runs held out,
seed ``seed``): the default fit (:func:`interplace.model.fit`, seed ``seed``) and the
exact-inference fit, ``--chains`` NUTS chains of ``--warmup`` (default ``--draws``) warm-up
and ``--draws`` kept draws each (:class:`interplace.model.Nuts`, pooled; each chain from its
own untempered SVI restart, the library's default, or with ``--start-restarts K`` chain
:math:`c` from untempered restart :math:`c \bmod K`), both with the second stage, scored on the
held-out speeds as ``evaluate`` scores the model (MAE of the posterior mean, coverage of the
90% interval; 500 draws of the SVI fit, every draw of the NUTS fit), next to soft-impute
matrix completion on the same split. Also reported: each fit's wall seconds (the chains run
in ``--workers`` processes), the NUTS chains' divergent transitions, mean acceptance
probabilities, step sizes, median speed noise and split R-hat of the speed noise, and each
posterior's median speed noise. ``--lucid PATH`` adds Lucid's random split (non-commercial
licence: read from ``PATH``, never copied); ``--gavel`` with no name leaves Gavel out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from _results import save_json

from interplace.datasets import CoLocationData, load_gavel, load_lucid
from interplace.model import InterferenceModel, Nuts, fit, holdout_split, row_queries, score
from interplace.model._peers import fit_soft_impute


def _scores(model: InterferenceModel, test: Any, n: int) -> dict[str, Any]:
    post = model.posterior_speed(row_queries(test), num_samples=n, seed=0)
    out = score(model, test, posterior=post)
    noise = model.draws(n, seed=0)["speed_noise"]
    return {
        "mae": out["mae"],
        "coverage_90": out["coverage_90"],
        "speed_noise": float(noise.median()),
        "fit_seconds": model.info["fit_seconds"],
    }


def one(name: str, data: CoLocationData, seed: int, settings: Nuts,
        workers: int, restarts: int | None = None) -> dict[str, Any]:
    """The figures of one data set and seed (module docstring)."""
    train, test = holdout_split(data, holdout_frac=0.3, seed=seed)
    y = test["speed"].to_numpy(dtype=float)
    si = fit_soft_impute(train, seed=seed)
    row: dict[str, Any] = {"data": name, "seed": seed,
                           "soft_impute_mae": float(np.mean(np.abs(si.predict(test) - y)))}
    svi = fit(train, seed=seed, workers=workers)
    row["svi"] = _scores(svi, test, 500)
    sampled = fit(train, seed=seed, workers=workers, nuts=settings, restarts=restarts)
    row["nuts"] = {**_scores(sampled, test, settings.total), **sampled.info["nuts"]}
    row["nuts"]["svi_seconds"] = sampled.info["svi_seconds"]
    for kind in ("svi", "nuts"):
        row[kind]["ratio_to_soft_impute"] = row[kind]["mae"] / row["soft_impute_mae"]
    row["nuts_over_svi_mae"] = row["nuts"]["mae"] / row["svi"]["mae"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gavel", nargs="*", choices=("v100", "p100", "k80"), default=["v100"])
    ap.add_argument("--lucid", type=Path, help="also Lucid's random split, read from PATH")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=None, metavar="N",
                    help="NUTS warm-up steps a chain (default: --draws, as the CLI's --nuts-draws)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--start-restarts", type=int, default=None, metavar="K",
                    help="SVI restarts of the NUTS fit's start (default: the library's, one "
                    "untempered restart per chain; 1: one plain fit, the start of "
                    "benchmarks/inference_gap.py)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    warmup = args.draws if args.warmup is None else args.warmup
    settings = Nuts(chains=args.chains, warmup=warmup, draws=args.draws)
    sets: list[tuple[str, CoLocationData]] = [(f"gavel-{g}", load_gavel(g).data)
                                              for g in args.gavel]
    if args.lucid is not None:
        if not Path(args.lucid, "colocate_info.csv").is_file():
            ap.error(f"no Lucid data at {args.lucid}")
        sets.append(("lucid", load_lucid(args.lucid)))
    results: dict[str, Any] = {"nuts": {"chains": args.chains, "warmup": warmup,
                                        "draws": args.draws},
                               "start_restarts": args.start_restarts,
                               "workers": args.workers, "splits": []}
    for name, data in sets:
        for seed in args.seeds:
            row = one(name, data, seed, settings, args.workers, args.start_restarts)
            results["splits"].append(row)
            print(json.dumps(row), file=sys.stderr)
            if args.out:
                save_json(results, args.out)  # after every split: a cut run keeps what it did
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
