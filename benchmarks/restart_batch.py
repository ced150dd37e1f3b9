"""The default fit's restarts stepped together, against one after another and in two processes.

Run: ``python benchmarks/restart_batch.py [--gavel v100] [--seeds 0 1 2] [--families none
model] [--workers 2] [--out results.json]``

On data of Gavel's size the default fit pools four SVI restarts (``interplace.model.fit``),
which it steps together in one process (``_fit._svi_batch``: one pass over the network scores
every restart's draw). For each seed and family choice this fits the split of ``evaluate``
(30% of co-located runs held out, seed ``seed``) three ways, one fit at a time with nothing
else started by the script, the order rotated from seed to seed:

- ``batched``: the default;
- ``serial``: the restarts one after another in this process (each ``_fit._svi``, the fit
  before the restarts were batched, bit for bit);
- ``workers``: the same serial restarts spread over ``--workers`` spawned processes, each on
  one torch thread (what the CLI did by default before, one process per core).

It reports the wall seconds of each and their ratios to ``serial``; that ``serial`` and
``workers`` give the same posterior bit for bit; and how far the batched fit is from the
serial one: the largest difference of any posterior location, and each fit's held-out MAE
and 90% interval coverage (the batched restarts are the serial ones up to rounding, which
SVI's thousands of steps amplify, so the two fits should differ as two fits of nearby seeds
do, not systematically). The packaged Gavel data is used, so it runs on a fresh clone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from _results import save_json
from tqdm import tqdm

from interplace._parallel import spawn_map
from interplace.datasets import load_gavel
from interplace.model import InterferenceModel, _fit, fit, holdout_split
from interplace.model._evaluate import score


def _alone(task: tuple[Any, ...]) -> _fit._Run:
    """One restart in a worker process, on one torch thread, as the fit runs it alone."""
    net_args, tensors, init_demand, seed, kwargs = task
    torch.set_num_threads(1)
    with tqdm(total=0, disable=True) as bar:
        return _fit._svi(net_args, tensors, init_demand, seed=seed, bar=bar, **kwargs)


@contextmanager
def _restarts(how: str, workers: int) -> Iterator[None]:
    """Run the fit's restarts ``how``: ``batched`` (as it is), ``serial`` or ``workers``."""
    batched = _fit._svi_batch

    def serial(net_args: Any, tensors: Any, init_demands: Any, *, seeds: Any,
               **kwargs: Any) -> list[_fit._Run]:
        return [_fit._svi(net_args, tensors, init, seed=seed, **kwargs)
                for seed, init in zip(seeds, init_demands, strict=True)]

    def spread(net_args: Any, tensors: Any, init_demands: Any, *, seeds: Any, bar: Any,
               **kwargs: Any) -> list[_fit._Run]:
        tasks = [(net_args, tensors, init, seed, kwargs)
                 for seed, init in zip(seeds, init_demands, strict=True)]
        return spawn_map(_alone, tasks, workers)

    if how != "batched":
        _fit._svi_batch = serial if how == "serial" else spread  # type: ignore[assignment]
    try:
        yield
    finally:
        _fit._svi_batch = batched


def _same(a: InterferenceModel, b: InterferenceModel) -> bool:
    """Bit-for-bit equal posteriors (every site's locations and scales)."""
    return a.posterior.keys() == b.posterior.keys() and all(
        torch.equal(a.posterior[k][i], b.posterior[k][i]) for k in a.posterior for i in (0, 1)
    )


def _largest_gap(a: InterferenceModel, b: InterferenceModel) -> float:
    return max(float((a.posterior[k][0] - b.posterior[k][0]).abs().max()) for k in a.posterior)


def _held_out(model: InterferenceModel, test: Any, seed: int) -> dict[str, float]:
    """Held-out MAE and 90% coverage of the measured speeds, as ``evaluate`` scores them."""
    scored = score(model, test, seed=seed)
    return {"mae": float(scored["mae"]), "coverage_90": float(scored["coverage_90"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gavel", choices=("v100", "p100", "k80"), default="v100")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--families", nargs="+", choices=("none", "model"), default=["none"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    data = load_gavel(args.gavel).data
    ways = ("batched", "serial", "workers")
    rows: list[dict[str, Any]] = []
    for fam in args.families:
        for i, seed in enumerate(args.seeds):
            train, test = holdout_split(data, holdout_frac=0.3, seed=seed)
            family = None if fam == "none" else fam
            models: dict[str, InterferenceModel] = {}
            secs: dict[str, float] = {}
            for how in ways[i % 3:] + ways[: i % 3]:
                with _restarts(how, args.workers):
                    start = time.perf_counter()
                    models[how] = fit(train, seed=seed, family=family)
                    secs[how] = time.perf_counter() - start
            row = {
                "gavel": args.gavel, "family": fam, "seed": seed,
                "restarts": models["serial"].info["restarts"],
                "steps": {how: models[how].info["steps"] for how in ways},
                **{f"{how}_s": secs[how] for how in ways},
                "batched_over_serial": secs["batched"] / secs["serial"],
                "workers_over_serial": secs["workers"] / secs["serial"],
                "batched_over_workers": secs["batched"] / secs["workers"],
                "workers_bit_for_bit": _same(models["serial"], models["workers"]),
                "largest_location_gap": _largest_gap(models["batched"], models["serial"]),
                **{f"{how}_held_out": _held_out(models[how], test, seed)
                   for how in ("batched", "serial")},
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    summary = {
        fam: {
            **{f"{how}_s": statistics.median(r[f"{how}_s"] for r in rows if r["family"] == fam)
               for how in ways},
            **{key: statistics.median(r[key] for r in rows if r["family"] == fam)
               for key in ("batched_over_serial", "workers_over_serial", "batched_over_workers")},
            "workers_bit_for_bit": all(r["workers_bit_for_bit"] for r in rows
                                       if r["family"] == fam),
            "mae_batched_over_serial": statistics.median(
                r["batched_held_out"]["mae"] / r["serial_held_out"]["mae"]
                for r in rows if r["family"] == fam),
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
