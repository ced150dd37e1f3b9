"""The default fit's restarts in worker processes against one after another, same run.

Run: ``python benchmarks/restart_workers.py [--gavel v100] [--seeds 0 1 2] [--families none
model] [--workers 2] [--out results.json]``

On data of Gavel's size the default fit pools four SVI restarts (``interplace.model.fit``);
``fit(workers=N)`` runs them in N spawned processes. For each seed and family choice this fits
the split of ``evaluate`` (30% of co-located runs held out, seed ``seed``) both ways,
alternating which goes first from seed to seed, one fit at a time with nothing else started
by the script, and reports the wall seconds of each, their ratio (workers over serial), and
whether the two posteriors and second stages are equal bit for bit (they must be: each
restart is seeded on its own and runs on one torch thread either way). The packaged Gavel
data is used, so it runs on a fresh clone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _results import save_json

from interplace.datasets import load_gavel
from interplace.model import InterferenceModel, fit, holdout_split


def _same(a: InterferenceModel, b: InterferenceModel) -> bool:
    """Bit-for-bit equal posteriors (every site's locations and scales) and second stages."""
    if a.posterior.keys() != b.posterior.keys():
        return False
    post = all(torch.equal(a.posterior[k][i], b.posterior[k][i])
               for k in a.posterior for i in (0, 1))
    if a.measured is None or b.measured is None:
        return post and a.measured is b.measured
    ma, mb = a.measured, b.measured
    stage = (ma.scale == mb.scale and ma.noise == mb.noise
             and all(np.array_equal(getattr(ma, f), getattr(mb, f))
                     for f in ("job", "co", "log_speed", "n", "expected", "offset")))
    return post and stage


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gavel", choices=("v100", "p100", "k80"), default="v100")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--families", nargs="+", choices=("none", "model"), default=["none"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    data = load_gavel(args.gavel).data
    rows: list[dict[str, Any]] = []
    for fam in args.families:
        for i, seed in enumerate(args.seeds):
            train, _ = holdout_split(data, holdout_frac=0.3, seed=seed)
            family = None if fam == "none" else fam
            models: dict[int, InterferenceModel] = {}
            secs: dict[int, float] = {}
            order = (1, args.workers) if i % 2 == 0 else (args.workers, 1)
            for w in order:
                start = time.perf_counter()
                models[w] = fit(train, seed=seed, family=family, workers=w)
                secs[w] = time.perf_counter() - start
            row = {
                "gavel": args.gavel, "family": fam, "seed": seed,
                "restarts": models[1].info["restarts"], "steps": models[1].info["steps"],
                "serial_s": secs[1], "workers_s": secs[args.workers],
                "ratio": secs[args.workers] / secs[1],
                "bit_for_bit": _same(models[1], models[args.workers]),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    summary = {
        fam: {
            "serial_s": statistics.median(r["serial_s"] for r in rows if r["family"] == fam),
            "workers_s": statistics.median(r["workers_s"] for r in rows if r["family"] == fam),
            "ratio": statistics.median(r["ratio"] for r in rows if r["family"] == fam),
            "bit_for_bit": all(r["bit_for_bit"] for r in rows if r["family"] == fam),
        }
        for fam in args.families
    }
    results = {"workers": args.workers, "rows": rows, "medians": summary,
               "command": " ".join(sys.argv)}
    if args.out is not None:
        save_json(results, args.out)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
