"""Held-out accuracy, calibration, counter denoising and fit time of the interference model.

Run: ``python benchmarks/accuracy.py [--seeds 0 1 2] [--lucid ../shared/datasets/lucid]
[--out results.json] [--parts gavel lucid denoise ablation decision] [--families none model]
[--gavel v100 p100 k80] [--workers 2] [--mixes 5] [--restarts K] [--temper LAMBDA]
[--lucid-splits random cold] [--no-fit-time] [--no-lift-ceilings] [--iso-bias-scale S]
[--no-counter-kernel]``

``--restarts`` and ``--temper`` pass those options to every fit (default: the library's own,
which pools four tempered restarts on Gavel-sized data and fits Lucid once);
``--no-lift-ceilings`` fits with ``fit(lift_ceilings=False)`` (the default until the
fifteenth session); ``--iso-bias-scale S`` centres the prior of the isolated-reference error's
scale :math:`\\omega` at ``S`` with spread 0.1 (``Hyper(iso_bias_scale_loc=log S,
iso_bias_scale_scale=0.1)``; the library's is ``log 0.03`` and 0.5); ``--no-counter-kernel``
fits with ``Hyper(cold_kernel_weight=0)``, without the counter kernel in the cold jobs' pairs
(the default before the forty-third session).

Peers: every split also scores the peer predictors of :mod:`interplace.model._peers` on the
same split (soft-impute matrix completion with inner-CV rank and shrinkage, scikit-learn
gradient-boosted trees and interpret's EBM with 4 outer bags, on ids + isolated counters, and
families when the split uses them), and reports their median MAE and the model's median MAE
over the best peer's (``ratio_to_best_peer``).

Decision (``decision``): for each seed, the exact best co-location of 12 and of 16 Gavel V100
jobs (``--mixes`` seeded mixes of each) on the 8 GPUs of ``dgx-a100``, at most 2 per GPU,
chosen on each predictor's speeds (the model's posterior means; each peer's predicted pair
speeds), all fitted with 30% of the co-located runs held out, and scored with Gavel's
*measured* speeds as a share of the measured optimum. Every predictor also runs as
``<name>+measured``: the pairs measured in training at their measured mean speed, the rest
its predictions (the model through :class:`interplace.placement.MeasuredOverModel`), so no
predictor is scored without the measurements another is given. It runs once per
``--families`` setting: without families (``decision`` in the JSON) and with the runs'
``model`` column as families, the model fitted with them and the trees and EBM given them
(``decision_families``; soft-impute has no use for them).

For every data set and split it fits the model once per seed (the seed picks both the split
and the fit) and reports, per seed and as the median over seeds: the model's held-out MAE,
the MAE of each baseline measured on the same split (no interference, global mean, per-job
mean, the utilisation-sum rule :math:`\\min(1, 100 / \\sum \\text{solo GPU util})` where solo
counters exist), the ratio of the model's MAE to the best baseline, the share of held-out
measurements inside the 90% predictive interval, and the fit time.

Every Gavel and Lucid split runs twice (``--families``): without job families, and with the
runs' ``model`` column as families (Lucid's network; Gavel's job name without its batch
size). With families it also reports the family lookup baseline
(:func:`interplace.model.family_lookup`), which knows the families too.

Splits: ``random`` holds out 30% of the co-located runs (all isolated runs stay in training);
``cold`` holds out every co-located run of 8 jobs, keeping their isolated runs and counters.

Denoising: on :func:`interplace.datasets.synthetic` data (known true utilisation), the mean
absolute error of the raw counter samples, of each run's plain sample mean and of the model's
posterior mean utilisation, all in units of full scale.

``--cold-breakdown`` prints only the Lucid cold-start MAE split by side (the cold job's own
speed, or a warm job next to a cold co-runner) for the first seed, as a JSON list with one
entry per ``--families`` choice.

``--parts ablation`` fits the Lucid cold start with families, switching some family effects
off (:data:`ABLATION`), to show which of them carry the gain.

Lucid (non-commercial licence) is read from ``--lucid`` when that directory exists and is
skipped otherwise; Gavel ships with interplace.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from _results import save_json

from interplace._parallel import spawn_map
from interplace.datasets import CoLocationData, load_gavel, load_lucid, synthetic
from interplace.model import (
    PEERS,
    Hyper,
    cold_split,
    colocated_rows,
    evaluate,
    fit,
    holdout_split,
    row_queries,
)


def _evaluate_one(
    job: tuple[CoLocationData, str, int, str | None, dict[str, Any]],
) -> dict[str, Any]:
    data, kind, seed, family, fit_kwargs = job
    return evaluate(
        data, seed=seed, cold_jobs=8 if kind == "cold" else None, family=family,
        fit_kwargs=fit_kwargs,
    )


def split_results(
    data: CoLocationData, kind: str, seeds: list[int], family: str | None = None,
    workers: int = 1, fit_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    jobs = [(data, kind, seed, family, dict(fit_kwargs or {})) for seed in seeds]
    runs = spawn_map(_evaluate_one, jobs, workers)
    for seed, r in zip(seeds, runs, strict=True):
        m = r["model"]
        fam = (
            ""
            if family is None
            else f", family lookup {r['family_baseline']['mae']:.4f} "
            f"(ratio {r['mae_ratio_to_family_baseline']:.3f})"
        )
        print(
            f"  {data.name} {kind} family={family} seed {seed}: MAE {m['mae']:.4f}, best "
            f"baseline {r['best_baseline']} {r['baselines'][r['best_baseline']]['mae']:.4f}, "
            f"ratio {r['mae_ratio_to_best']:.3f}{fam}, coverage {m['coverage_90']:.3f}, "
            f"fit {m['fit_seconds']:.1f} s; peers "
            + ", ".join(f"{k} {v['mae']:.4f}" for k, v in r.get("peers", {}).items()
                        if v["mae"] is not None),
            file=sys.stderr,
        )

    def med(values: list[float]) -> float:
        return float(statistics.median(values))

    base_names = list(runs[0]["baselines"])
    fam_results: dict[str, Any] = {}
    if family is not None:
        fam_results = {
            "family_baseline_mae": med([r["family_baseline"]["mae"] for r in runs]),
            "ratio_to_family_baseline": med([r["mae_ratio_to_family_baseline"] for r in runs]),
            "ratio_to_family_baseline_per_seed": [
                r["mae_ratio_to_family_baseline"] for r in runs
            ],
        }
    peer_names = [k for k, v in runs[0].get("peers", {}).items() if v["mae"] is not None]
    peer_mae = {k: med([r["peers"][k]["mae"] for r in runs]) for k in peer_names}
    best_peer = min(peer_mae, key=lambda k: peer_mae[k]) if peer_mae else None
    peer_results: dict[str, Any] = {
        "peer_mae": peer_mae,
        "best_peer": best_peer,
        # The target's ratio: the model's median MAE over the best peer's median MAE.
        "ratio_to_best_peer": (
            None if best_peer is None else med([r["model"]["mae"] for r in runs])
            / peer_mae[best_peer]
        ),
        "ratio_to_best_peer_per_seed": [r.get("mae_ratio_to_best_peer") for r in runs],
        # Per seed, so that any subset of the seeds can be summarised later as the target is.
        "peer_mae_per_seed": {k: [r["peers"][k]["mae"] for r in runs] for k in peer_names},
        "unavailable_peers": sorted(
            k for k, v in runs[0].get("peers", {}).items() if v["mae"] is None
        ),
    }
    return {
        "data": data.name,
        "split": kind,
        "family": family,
        "seeds": seeds,
        **peer_results,
        "test_rows": med([r["split"]["test_rows"] for r in runs]),
        "model_mae": med([r["model"]["mae"] for r in runs]),
        "model_mae_per_seed": [r["model"]["mae"] for r in runs],
        "baseline_mae": {
            b: (
                None
                if any(r["baselines"][b]["mae"] is None for r in runs)
                else med([r["baselines"][b]["mae"] for r in runs])
            )
            for b in base_names
        },
        "ratio_to_best": med([r["mae_ratio_to_best"] for r in runs]),
        "ratio_per_seed": [r["mae_ratio_to_best"] for r in runs],
        "best_baseline_per_seed": [r["best_baseline"] for r in runs],
        "coverage_90": med([r["model"]["coverage_90"] for r in runs]),
        "coverage_per_seed": [r["model"]["coverage_90"] for r in runs],
        "interval_width_90": med([r["model"]["interval_width_90"] for r in runs]),
        "fit_seconds": med([r["model"]["fit_seconds"] for r in runs]),
        **fam_results,
    }


def denoise(seeds: list[int], n_jobs: int = 10, samples_per_run: int = 20) -> dict[str, Any]:
    rows = []
    for seed in seeds:
        data = synthetic(n_jobs, seed=seed, samples_per_run=samples_per_run)
        assert data.samples is not None and data.truth is not None
        model = fit(data, seed=seed)
        util = model.utilisation(data)
        full = dict(zip(model.metrics, model.full_scale, strict=True))
        truth = data.truth["samples"].groupby(["run_id", "metric"])["true_value"].first()
        true_u = np.asarray(
            [truth[(r, m)] for r, m in zip(util["run_id"], util["metric"], strict=True)]
        )
        f_u = np.asarray([full[m] for m in util["metric"]])
        s = data.samples
        value = np.where(s["scale"].notna(), s["value"] / s["scale"], s["value"])
        true_s = np.asarray([truth[(r, m)] for r, m in zip(s["run_id"], s["metric"], strict=True)])
        f_s = np.asarray([full[m] for m in s["metric"]])
        raw = float(np.mean(np.abs(value - true_s) / f_s))
        run_mean = float(np.mean(np.abs(util["observed_mean"].to_numpy() - true_u) / f_u))
        model_err = float(np.mean(np.abs(util["mean"].to_numpy() - true_u) / f_u))
        inside = (util["q05"].to_numpy() <= true_u) & (true_u <= util["q95"].to_numpy())
        rows.append(
            {
                "seed": seed,
                "raw": raw,
                "run_mean": run_mean,
                "model": model_err,
                "reduction": raw / model_err,
                "coverage_90": float(np.mean(inside)),
            }
        )
        print(
            f"  denoise seed {seed}: raw {raw:.4f}, run mean {run_mean:.4f}, model "
            f"{model_err:.4f} ({raw / model_err:.1f}x), coverage {np.mean(inside):.3f}",
            file=sys.stderr,
        )
    return {
        "n_jobs": n_jobs,
        "samples_per_run": samples_per_run,
        "per_seed": rows,
        **{k: float(statistics.median(r[k] for r in rows)) for k in rows[0] if k != "seed"},
    }


def cold_breakdown(data: CoLocationData, seed: int, family: str | None) -> dict[str, Any]:
    """Held-out MAE of the cold split by side: the cold job's own speed, or a warm job's."""
    train, test, cold = cold_split(data, cold_jobs=8, seed=seed)
    model = fit(train, seed=seed, family=family)
    mean = model.posterior_speed(row_queries(test), seed=seed).mean
    rows = colocated_rows(train)
    per_job = rows.groupby("job")["speed"].mean()
    base = test["job"].map(per_job).fillna(float(rows["speed"].mean())).to_numpy()
    y = test["speed"].to_numpy()
    out: dict[str, Any] = {"seed": seed, "family": family, "cold_jobs": cold}
    is_cold = test["job"].isin(cold).to_numpy()
    for name, mask in (("cold_job", is_cold), ("warm_job_cold_co_runner", ~is_cold)):
        out[name] = {
            "rows": int(mask.sum()),
            "model_mae": float(np.mean(np.abs(mean - y)[mask])),
            "per_job_mean_mae": float(np.mean(np.abs(base - y)[mask])),
        }
    return out


ABLATION: dict[str, dict[str, float]] = {
    "reference error only": {
        "family_demand_sd_loc": math.log(1e-4),
        "family_sens_sd_loc": math.log(1e-4),
        "family_intensity_sd_loc": math.log(1e-4),
    },
    "demand, sensitivity and intensity only": {"family_bias_sd_loc": math.log(1e-4)},
}
"""Family effects switched off (prior spread 1e-4) in the ablation of the Lucid cold start."""


def family_ablation(data: CoLocationData, seeds: list[int]) -> list[dict[str, Any]]:
    """Lucid cold start with families, some family effects switched off (:data:`ABLATION`)."""
    out = []
    for name, change in ABLATION.items():
        ratios = []
        for seed in seeds:
            r = evaluate(
                data,
                seed=seed,
                cold_jobs=8,
                family="model",
                fit_kwargs={"hyper": Hyper(**change)},
            )
            ratios.append(r["mae_ratio_to_best"])
            print(f"  ablation {name} seed {seed}: ratio {ratios[-1]:.3f}", file=sys.stderr)
        out.append(
            {
                "family_effects": name,
                "hyper": change,
                "seeds": seeds,
                "ratio_per_seed": ratios,
                "ratio_to_best": float(statistics.median(ratios)),
                "seeds_at_most_0.8": sum(x <= 0.8 for x in ratios),
            }
        )
    return out


def fit_time(
    data: CoLocationData, repeats: int, family: str | None,
    fit_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    times = []
    steps = []
    for seed in range(repeats):
        t0 = time.perf_counter()
        m = fit(data, seed=seed, family=family, **(fit_kwargs or {}))
        times.append(time.perf_counter() - t0)
        steps.append(m.info["steps"])
    return {
        "data": data.name,
        "family": family,
        "seconds": times,
        "median_seconds": statistics.median(times),
        "steps": steps,
    }


def _decision_one(
    job: tuple[int, int, tuple[int, ...], dict[str, Any], str | None],
) -> dict[str, Any]:
    """One seed of the decision benchmark: every predictor's exact choice, scored on truth
    (with ``family``, a runs column such as ``"model"``, the model is fitted with those job
    families and every peer that can use them is given them too)."""
    from interplace.placement import Job, MeasuredOverModel, MeasuredSpeeds, place, score
    from interplace.topology import builtin

    seed, mixes, sizes, fit_kwargs, family = job
    gavel = load_gavel("v100")
    inf = [tuple(x) for x in gavel.infeasible.dropna().values.tolist()]
    truth = MeasuredSpeeds.from_pairs(gavel.data.pairs(), forbidden=inf)
    topo = builtin("dgx-a100")
    train, _ = holdout_split(gavel.data, holdout_frac=0.3, seed=seed)
    types = list(truth.jobs)
    grid = pd.DataFrame([(a, b) for a in types for b in types], columns=["job", "co_runner"])
    model = fit(train, seed=seed, family=family, **fit_kwargs)
    families = model.family_map() if family is not None else None
    # The model alone, and the model with the fit's own measured pairs taking precedence
    # (what `interplace place --measured` does: a scheduler keeps what it measured).
    sources: dict[str, Any] = {
        "interplace": model,
        "interplace+measured": MeasuredOverModel(model, train.pairs()),
    }
    # Each peer alone, and with the same training measurements taking precedence over its
    # predictions (from_pairs averages a pair's rows: a measured pair's are the measurements
    # alone), so that no predictor is scored without what the model's "+measured" row is given.
    measured = train.pairs()[["job", "co_runner", "speed"]]
    unmeasured = ~pd.MultiIndex.from_frame(grid).isin(
        pd.MultiIndex.from_frame(measured[["job", "co_runner"]])
    )
    for name, make in PEERS.items():
        try:
            peer = make(train, families, seed)
        except Exception as exc:
            print(f"  peer {name} unavailable: {exc}", file=sys.stderr)
            continue
        predicted = grid.assign(speed=np.maximum(peer.predict(grid), 0.0))
        sources[name] = MeasuredSpeeds.from_pairs(predicted, forbidden=inf)
        sources[f"{name}+measured"] = MeasuredSpeeds.from_pairs(
            pd.concat([predicted[unmeasured], measured]), forbidden=inf
        )
    rng = np.random.default_rng(1000 + seed)
    out: dict[str, list[float]] = {k: [] for k in sources}
    for n in sizes:
        for _ in range(mixes):
            mix = [types[k] for k in rng.choice(len(types), n, replace=True)]
            jobs = [Job(f"j{k}", t) for k, t in enumerate(mix)]
            opt = score(topo, truth, place(topo, truth, jobs, policy="exact")).objective
            for name, src in sources.items():
                p = place(topo, src, jobs, policy="exact", can_share=truth.can_share, seed=seed)
                out[name].append(score(topo, truth, p).objective / opt)
    return {"seed": seed, "ratios": out}


def decision(
    seeds: list[int], mixes: int, workers: int, fit_kwargs: dict[str, Any] | None = None,
    family: str | None = None,
) -> dict[str, Any]:
    """Decision quality per predictor: the exact best co-location of 12 and 16 Gavel V100
    jobs on the 8 GPUs of dgx-a100 (at most 2 per GPU) chosen on each predictor's speeds
    (fitted with 30% of the co-located runs held out, the seed picking split, fit and mixes),
    scored with the measured speeds as a share of the measured optimum; ``family``: fit with
    job families (a runs column), given to the peers that can use them as well."""
    jobs = [(seed, mixes, (12, 16), dict(fit_kwargs or {}), family) for seed in seeds]
    per_seed = spawn_map(_decision_one, jobs, workers)
    names = list(per_seed[0]["ratios"])
    summary = {}
    for name in names:
        allr = [x for r in per_seed for x in r["ratios"][name]]
        seed_means = [float(np.mean(r["ratios"][name])) for r in per_seed]
        summary[name] = {
            "mean": float(np.mean(allr)),
            "median_of_seed_means": float(statistics.median(seed_means)),
            "min": float(np.min(allr)),
            "seed_means": seed_means,
        }
        print(f"  decision (families: {family}) {name}: mean {summary[name]['mean']:.4f}",
              file=sys.stderr)
    return {"mixes_per_size": mixes, "sizes": [12, 16], "family": family,
            "summary": summary, "per_seed": per_seed}


def _save(results: dict[str, Any], out: Path | None) -> None:
    """Write the results so far to ``out`` atomically (temp file, then rename), so a run cut
    short keeps every finished split and never leaves a half-written file."""
    if out is None:
        return
    save_json(results, out, indent=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--lucid", type=Path, default=Path("../shared/datasets/lucid"))
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--parts",
        nargs="+",
        choices=("gavel", "lucid", "denoise", "ablation", "decision"),
        default=["gavel", "lucid", "denoise"],
        help="which parts to run (default: gavel lucid denoise; ablation: which family "
        "effects carry the Lucid cold-start gain)",
    )
    ap.add_argument(
        "--gavel",
        nargs="+",
        choices=("v100", "p100", "k80"),
        default=["v100", "p100", "k80"],
        help="Gavel GPU types to run (default: all three)",
    )
    ap.add_argument(
        "--families",
        nargs="+",
        choices=("none", "model"),
        default=["none", "model"],
        help="fit without job families, with the runs' model column as families, or both "
        "(default: both)",
    )
    ap.add_argument("--workers", type=int, default=1, help="seeds fitted in parallel processes")
    ap.add_argument("--mixes", type=int, default=5, help="decision: job mixes per size and seed")
    ap.add_argument(
        "--restarts", type=int, help="fit option: SVI restarts pooled (default: fit's own)"
    )
    ap.add_argument(
        "--temper", type=float, help="fit option: likelihood power (default: fit's own)"
    )
    ap.add_argument(
        "--no-lift-ceilings",
        action="store_true",
        help="fit option: fit(lift_ceilings=False) (default: fit's own, on)",
    )
    ap.add_argument(
        "--iso-bias-scale",
        type=float,
        metavar="S",
        help="fit option: the prior of the isolated-reference error's scale centred at S "
        "(Hyper(iso_bias_scale_loc=log S, iso_bias_scale_scale=0.1); default: the library's)",
    )
    ap.add_argument(
        "--no-counter-kernel",
        action="store_true",
        help="fit option: Hyper(cold_kernel_weight=0), no counter kernel in the cold jobs' "
        "pairs (default: the library's, 0.5)",
    )
    ap.add_argument(
        "--direct-weight",
        type=float,
        metavar="W",
        help="fit option: Hyper(direct_weight=W), a direct matrix completion averaged into "
        "the unmeasured pairs of measured jobs (default: the library's, 0.25)",
    )
    ap.add_argument(
        "--lucid-splits",
        nargs="+",
        choices=("random", "cold"),
        default=["random", "cold"],
        help="Lucid splits to run (default: both)",
    )
    ap.add_argument(
        "--no-fit-time",
        action="store_true",
        help="skip the Lucid fit-time measurement that follows the Lucid splits",
    )
    ap.add_argument(
        "--cold-breakdown",
        action="store_true",
        help="only print the Lucid cold-start MAE split by which side is cold (first seed)",
    )
    args = ap.parse_args()
    if args.cold_breakdown:
        lucid = load_lucid(args.lucid)
        families = [None if f == "none" else f for f in args.families]
        print(json.dumps([cold_breakdown(lucid, args.seeds[0], f) for f in families], indent=2))
        return
    fit_kwargs: dict[str, Any] = {
        k: v for k, v in (("restarts", args.restarts), ("temper", args.temper)) if v is not None
    }
    if args.no_lift_ceilings:
        fit_kwargs["lift_ceilings"] = False
    results: dict[str, Any] = {
        "command": " ".join(sys.argv), "seeds": args.seeds, "fit": dict(fit_kwargs), "splits": [],
    }
    hyper: dict[str, float] = {}
    if args.iso_bias_scale is not None:
        hyper.update(iso_bias_scale_loc=math.log(args.iso_bias_scale), iso_bias_scale_scale=0.1)
        results["fit"]["iso_bias_scale"] = args.iso_bias_scale
    if args.no_counter_kernel:
        hyper["cold_kernel_weight"] = 0.0
        results["fit"]["cold_kernel_weight"] = 0.0
    if args.direct_weight is not None:
        hyper["direct_weight"] = args.direct_weight
        results["fit"]["direct_weight"] = args.direct_weight
    if hyper:
        fit_kwargs["hyper"] = Hyper(**hyper)
    families = [None if f == "none" else f for f in args.families]
    for gpu in args.gavel if "gavel" in args.parts else ():
        for family in families:
            results["splits"].append(
                split_results(
                    load_gavel(gpu).data, "random", args.seeds, family, args.workers, fit_kwargs
                )
            )
            _save(results, args.out)
    if "lucid" in args.parts and args.lucid.is_dir():
        lucid = load_lucid(args.lucid)
        for family in families:
            for kind in args.lucid_splits:
                results["splits"].append(
                    split_results(lucid, kind, args.seeds, family, args.workers, fit_kwargs)
                )
                _save(results, args.out)
        if not args.no_fit_time:
            results["fit_time_lucid"] = [
                fit_time(lucid, len(args.seeds), f, fit_kwargs) for f in families
            ]
            _save(results, args.out)
    elif "lucid" in args.parts:
        print(f"  {args.lucid} not found: Lucid skipped", file=sys.stderr)
    if "ablation" in args.parts and args.lucid.is_dir():
        results["family_ablation"] = family_ablation(load_lucid(args.lucid), args.seeds)
        _save(results, args.out)
    if "denoise" in args.parts:
        results["denoise"] = denoise(args.seeds)
        _save(results, args.out)
    for family in families if "decision" in args.parts else ():
        # Without families under "decision" (the key earlier runs wrote), with them under
        # "decision_families".
        key = "decision" if family is None else "decision_families"
        results[key] = decision(args.seeds, args.mixes, args.workers, fit_kwargs, family)
        _save(results, args.out)
    _save(results, args.out)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
