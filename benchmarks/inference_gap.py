"""What better inference would buy: the same model's NUTS posterior against its SVI fit.

Run: ``python benchmarks/inference_gap.py [--gavel v100 p100 k80] [--lucid PATH] [--seeds 0 1
2] [--nuts 200] [--chain 0] [--chains 1] [--workers 2] [--out results.json]``

For each Gavel data set and seed, on the split of ``evaluate`` (30% of co-located runs held
out, seed ``seed``): the default fit (:func:`interplace.model.fit`, seed ``seed``), and NUTS on
the *same* network (its jobs, resources, hyper-parameters and rank; ``pyro.infer.NUTS``, one
chain seeded by ``--chain``, ``--nuts`` warm-up and kept draws, tree depth up to 8, started at
the SVI posterior medians; ``benchmarks/_reference.py``). Each posterior is scored on the
held-out speeds as ``evaluate`` scores the model (MAE of the posterior mean, coverage and width
of the 90% interval; SVI with 500 draws, as ``evaluate``, NUTS with its own), as the structure
alone and with the second stage (:mod:`interplace.model._cells`, the ceiling lift included, as
the default fit has it since 2026-11-27) computed from its draws, next
to soft-impute matrix completion, the strongest peer on Gavel. It also reports each
posterior's fitted speed noise (the Student-t scale's median).

With ``--chains K`` (K > 1) each split runs K chains, seeded ``--chain`` to ``--chain + K -
1`` (one row each in ``splits``, as above), and their draws pooled (concatenated, K times as
many) are scored as one posterior, the second stage computed from them too (one row per split
in ``pooled``, medians over seeds in ``pooled_medians``): single chains of this model land in
different modes, and a pooled posterior is what several chains of one sampler would report.

``--lucid PATH`` adds Lucid's random splits (read from ``PATH``, the directory of
``colocate_info.csv``; non-commercial licence, never copied), scored the same way; Lucid's
default fit is one plain fit (its size is over the mixture's limit), so its chains start at
that fit's medians. ``--gavel`` with no name leaves Gavel out.

NUTS takes about 10-13 minutes per split on one core (26 jobs): this is a measurement of the
gap the mean-field guide leaves, not a way to fit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _reference import SampledModel, nuts
from _results import save_json

from interplace.datasets import CoLocationData, load_gavel, load_lucid
from interplace.model import InterferenceModel, fit
from interplace.model._cells import lifted_draws, measured_pairs
from interplace.model._counterkernel import floored
from interplace.model._evaluate import holdout_split, row_queries, score
from interplace.model._fit import stage_inputs, with_second_stage
from interplace.model._peers import fit_soft_impute


def _scores(model: InterferenceModel, test: Any, n: int) -> dict[str, float]:
    post = model.posterior_speed(row_queries(test), num_samples=n, seed=0)
    return score(model, test, posterior=post)


def _load(name: str) -> CoLocationData:
    """``gavel-<gpu>`` from the package, or ``lucid:<path>`` from that directory."""
    if name.startswith("lucid:"):
        return load_lucid(name.removeprefix("lucid:"))
    return load_gavel(name.removeprefix("gavel-")).data


def _split(name: str, seed: int) -> tuple[Any, Any, dict[str, Any], InterferenceModel]:
    """The split of one data set and seed, soft-impute's MAE on it and the default SVI fit,
    scored (the SVI part of a row)."""
    torch.set_num_threads(1)
    data = _load(name)
    train, test = holdout_split(data, holdout_frac=0.3, seed=seed)
    y = test["speed"].to_numpy(dtype=float)
    si = fit_soft_impute(train, seed=seed)
    row: dict[str, Any] = {"data": name.split(":")[0], "name": name, "seed": seed,
                           "soft_impute_mae": float(np.mean(np.abs(si.predict(test) - y)))}
    # The structure, then the second stage added as fit adds it (the default fit, bit for
    # bit: tests/model/test_cells.py); the stage's ceiling lift shifts the posterior's
    # isolated-reference bias, so the structure is kept from before it.
    start = time.perf_counter()
    structure = fit(train, seed=seed, measured=False)
    obs, fam, readings, below = stage_inputs(structure, train)
    full, _, _ = with_second_stage(structure, obs, seed=seed, family=fam, readings=readings,
                                   below=below)
    row["svi"] = {
        "structure": _scores(structure, test, 500),
        "with_stage": _scores(full, test, 500),
        "speed_noise": full.speed_noise(),
        "fit_seconds": time.perf_counter() - start,
    }
    return train, test, row, structure


def _score_draws(structure: InterferenceModel, train: Any, test: Any, seed: int,
                 draws: dict[str, torch.Tensor]) -> dict[str, Any]:
    """``draws`` of ``structure``'s network scored as the structure alone and with the second
    stage computed from them, and their median speed noise."""
    n = next(iter(draws.values())).shape[0]
    sampled = SampledModel(**{f.name: getattr(structure, f.name)
                              for f in dataclasses.fields(InterferenceModel) if f.init},
                           samples=draws)
    noise = float(draws["speed_noise"].median())
    obs, fam, readings, below = stage_inputs(structure, train)
    # The default's stage, lift and counter kernel included: the offsets are relative to the
    # lifted draws.
    pairs, info = measured_pairs(obs, draws, noise, structure.hyper.measure_noise, seed=seed,
                                 family=fam, readings=readings, lift_ceilings=True,
                                 kernel_weight=structure.hyper.cold_kernel_weight,
                                 kernel_readings=floored(readings, below))
    staged = dataclasses.replace(
        sampled, samples=lifted_draws(draws, np.asarray(info["ceiling_lift"])), measured=pairs
    )
    return {
        "structure": _scores(sampled, test, n),
        "with_stage": _scores(staged, test, n),
        "speed_noise": noise,
    }


def _ratios(row: dict[str, Any], kinds: tuple[str, ...]) -> dict[str, Any]:
    """``row`` with each posterior's MAE over soft-impute's added to its scores."""
    for kind in kinds:
        for part in ("structure", "with_stage"):
            row[kind][part]["ratio_to_soft_impute"] = (
                row[kind][part]["mae"] / row["soft_impute_mae"])
    return row


def one(name: str, seed: int, n: int, chain: int = 0,
        keep: bool = False) -> dict[str, Any]:
    """The figures of one data set (``gavel-<gpu>`` or ``lucid:<path>``), seed and chain (module
    docstring); with ``keep`` the row also holds the chain's draws (``"draws"``, tensors by
    site) for pooling."""
    train, test, row, structure = _split(name, seed)
    row["chain"] = chain
    start = time.perf_counter()
    draws = nuts(structure, train, n, seed=chain)
    seconds = time.perf_counter() - start
    row["nuts"] = {**_score_draws(structure, train, test, seed, draws), "fit_seconds": seconds}
    if keep:
        row["draws"] = draws
    return _ratios(row, ("svi", "nuts"))


def pooled(name: str, seed: int, chains: list[int],
           draws: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
    """The draws of several chains of one split, pooled (concatenated) and scored as one
    posterior."""
    train, test, row, structure = _split(name, seed)
    row["chains"] = chains
    both = {k: torch.cat([d[k] for d in draws]) for k in draws[0]}
    row["nuts"] = _score_draws(structure, train, test, seed, both)
    return _ratios(row, ("svi", "nuts"))


def _medians(rows: list[dict[str, Any]],
             kinds: tuple[str, ...] = ("svi", "nuts")) -> dict[str, Any]:
    """Per data set, the median over its rows (seeds, and chains where there are several) of
    each posterior's scores; ``kinds`` picks the posteriors (``("nuts",)`` for pooled rows)."""
    out: dict[str, Any] = {}
    for data in sorted({r["data"] for r in rows}):
        mine = [r for r in rows if r["data"] == data]
        out[data] = {"seeds": sorted(r["seed"] for r in mine)}
        for kind in kinds:
            out[data][f"{kind}_speed_noise"] = float(np.median([r[kind]["speed_noise"]
                                                                for r in mine]))
            for part in ("structure", "with_stage"):
                out[data][f"{kind}_{part}"] = {
                    k: float(np.median([r[kind][part][k] for r in mine]))
                    for k in ("mae", "coverage_90", "interval_width_90", "ratio_to_soft_impute")
                }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gavel", nargs="*", choices=("v100", "p100", "k80"), default=["v100"])
    ap.add_argument("--lucid", type=Path, help="also Lucid's random splits, read from PATH")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--nuts", type=int, default=200, metavar="N",
                    help="NUTS warm-up and kept draws (default 200)")
    ap.add_argument("--chain", type=int, default=0,
                    help="seed of the (first) NUTS chain (default 0; another seed is another "
                         "chain)")
    ap.add_argument("--chains", type=int, default=1, metavar="K",
                    help="chains per split, seeded --chain, --chain + 1, ...; with K > 1 each "
                         "chain is scored alone and the K chains' draws pooled (default 1)")
    ap.add_argument("--workers", type=int, default=1, help="chains run in parallel processes")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.chains < 1:
        ap.error("--chains must be at least 1")
    chains = list(range(args.chain, args.chain + args.chains))
    keep = args.chains > 1
    names = [f"gavel-{gpu}" for gpu in args.gavel]
    if args.lucid is not None:
        if not Path(args.lucid, "colocate_info.csv").is_file():
            ap.error(f"no Lucid data at {args.lucid}")
        names.append(f"lucid:{args.lucid}")
    jobs = [(name, seed, args.nuts, c, keep) for name in names for seed in args.seeds
            for c in chains]
    results: dict[str, Any] = {"nuts": args.nuts, "chain": args.chain, "chains": chains,
                               "splits": []}
    if keep:
        results["pooled"] = []
    held: dict[tuple[str, int], list[dict[str, Any]]] = {}
    pools: set[Any] = set()

    def save() -> None:
        # Written after every chain and pool, so a run cut short keeps what it finished.
        if args.out:
            save_json(results, args.out)

    def done(row: dict[str, Any]) -> tuple[str, int, list[int], list[Any]] | None:
        draws = row.pop("draws", None)
        results["splits"].append(row)
        results["medians"] = _medians(results["splits"])
        print(json.dumps(row), file=sys.stderr)
        save()
        if draws is None:
            return None
        rows = held.setdefault((row["data"], row["seed"]), [])
        rows.append({"chain": row["chain"], "draws": draws})
        if len(rows) < len(chains):
            return None
        rows.sort(key=lambda r: r["chain"])
        return row["name"], row["seed"], [r["chain"] for r in rows], [r["draws"] for r in rows]

    def pool_done(row: dict[str, Any]) -> None:
        results["pooled"].append(row)
        results["pooled_medians"] = _medians(results["pooled"], ("nuts",))
        print(json.dumps({"pooled": row}), file=sys.stderr)
        save()

    if args.workers > 1:
        with ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn")) as ex:
            pending = {ex.submit(one, *job) for job in jobs}
            while pending:
                future = next(as_completed(pending))
                pending.remove(future)
                if future in pools:
                    pool_done(future.result())
                    continue
                ready = done(future.result())
                if ready is not None:
                    pool_future = ex.submit(pooled, *ready)
                    pools.add(pool_future)
                    pending.add(pool_future)
    else:
        for job in jobs:
            ready = done(one(*job))
            if ready is not None:
                pool_done(pooled(*ready))
    print(json.dumps(results["medians"], indent=1))
    if keep:
        print(json.dumps(results["pooled_medians"], indent=1))


if __name__ == "__main__":
    main()
