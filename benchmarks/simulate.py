"""Cluster simulation: every scheduler on the same Philly-derived arrivals, measured speeds.

Run: ``python benchmarks/simulate.py [--seeds 0 1 2 3 4] [--load 0.25] [--jobs 400]
[--sweep 0.02 0.05 0.1 0.25 1] [--out results.json] [--plot DIR]``

Setting: the packaged Philly-derived excerpt (the 2,000 earliest jobs of Chronus'
``trace_job_Philly_MIX1.csv``), its first ``--jobs`` jobs with 1-8 GPUs, arrivals measured from
the first and divided by ``--load`` (the trace submits 400 jobs within about a minute; load
0.25 spreads them over four), each job typed uniformly at random among Gavel's V100 job types
(seeded); ``dgx-a100*8`` (64 GPUs); every job runs at its measured co-located speed (Gavel
V100). The model-driven schedulers see a model fitted on 70% of Gavel's co-located runs (the
seed picks the split, the fit and the types). Reported per policy: medians over seeds of
average and p99 JCT, makespan, queueing delay, GPU utilisation and co-located share; the
ratios of interplace's average JCT to the oracle's, fifo-exclusive's and random's per seed;
the wall time of each simulation. ``--sweep`` reruns fifo-exclusive, random, interplace and the
oracle at each load (first seed only) for the load curve.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _results import save_json

from interplace.simulate import SIM_POLICIES
from interplace.simulate._run import SimConfig, _model_for, compare, plot_results

POLICIES = tuple(p for p in SIM_POLICIES if p != "interplace-greedy")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--load", type=float, default=0.25)
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--sweep", type=float, nargs="*", default=[0.02, 0.05, 0.1, 0.25, 1.0])
    ap.add_argument("--out")
    ap.add_argument("--plot")
    args = ap.parse_args()
    out: dict[str, Any] = {"command": " ".join(sys.argv), "per_seed": {}}
    for seed in args.seeds:
        t0 = time.perf_counter()
        model, measured = _model_for("gavel-v100", seed)
        fit_s = time.perf_counter() - t0
        cfg = SimConfig(n_jobs=args.jobs, load=args.load, seed=seed, policies=POLICIES)
        res = compare(cfg, model=model, measured=measured)
        out["per_seed"][seed] = {k: v.metrics() for k, v in res.items()}
        out["per_seed"][seed]["fit_s"] = fit_s
        if args.plot and seed == args.seeds[0]:
            plot_results(res, args.plot)
        m = out["per_seed"][seed]
        print(f"seed {seed}: " + ", ".join(f"{k} {m[k]['avg_jct_s']:.0f}" for k in POLICIES),
              file=sys.stderr)
    per = out["per_seed"]
    out["median"] = {
        k: {c: statistics.median(per[s][k][c] for s in per) for c in per[args.seeds[0]][k]}
        for k in POLICIES
    }
    out["ratios"] = {
        other: [per[s]["interplace"]["avg_jct_s"] / per[s][other]["avg_jct_s"] for s in per]
        for other in ("oracle", "fifo-exclusive", "random", "spread", "gandiva", "lucid")
    }
    sweep: dict[str, Any] = {}
    if args.sweep:
        model, measured = _model_for("gavel-v100", args.seeds[0])
        for load in args.sweep:
            cfg = SimConfig(n_jobs=args.jobs, load=load, seed=args.seeds[0],
                            policies=("fifo-exclusive", "random", "interplace", "oracle"))
            res = compare(cfg, model=model, measured=measured)
            sweep[str(load)] = {k: v.metrics() for k, v in res.items()}
            print(f"load {load}: " + ", ".join(
                f"{k} {v['avg_jct_s']:.0f}" for k, v in sweep[str(load)].items()),
                file=sys.stderr)
        out["sweep"] = sweep
        if args.plot:
            _plot_sweep(sweep, Path(args.plot) / "load_sweep.png")
    print(json.dumps({"median": out["median"], "ratios": out["ratios"]}, indent=1))
    if args.out:
        save_json(out, args.out)


def _plot_sweep(sweep: dict[str, Any], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    loads = sorted(sweep, key=float)
    for name in ("fifo-exclusive", "random", "interplace", "oracle"):
        ax.plot([float(x) for x in loads], [sweep[x][name]["avg_jct_s"] / 60 for x in loads],
                marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("load (arrival-rate multiplier of the Philly-derived trace)")
    ax.set_ylabel("average JCT (minutes)")
    ax.set_title("400 jobs on 8 DGX A100, Gavel V100 measured speeds")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)


if __name__ == "__main__":
    main()
