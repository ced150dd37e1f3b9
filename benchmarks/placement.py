"""Placement quality on measured ground truth, and decision time at scale.

Run: ``python benchmarks/placement.py [--parts quality lucid scale] [--seeds 0 1 2]
[--mixes 5] [--lucid ../shared/datasets/lucid] [--scale 1 8 64 512] [--out results.json]``

Quality (``quality``): for each seed, fit the model on Gavel's V100 measurements with 30% of
the co-located runs held out (the seed picks the split and the fit); draw ``--mixes`` job
mixes of 12 and of 16 single-GPU jobs (seeded, uniform over Gavel's 26 V100 job types, with
replacement); place each mix on the 8 GPUs of ``dgx-a100``, at most 2 per GPU, with every
policy; score every placement with Gavel's *measured* speeds (the pair's measured co-located
over isolated throughput; a job alone runs at 1) and divide by the measured optimum (the
``exact`` policy fed the measured speeds: a maximum-weight matching). Pairs Gavel could not
run together are forbidden for every policy. ``lucid`` does the same on Lucid's measured
pairs (read from ``--lucid``; skipped without it), where pairs Lucid never measured are
forbidden for every policy (no truth to score them by).

Scale (``scale``): the whole ``interplace place`` command (process start, model load, jobs
file read, decision, output write) on ``dgx-a100*N`` for each N, with N/2 eight-GPU jobs and
8N single-GPU jobs (N = 64: 32 + 512 = 544 jobs on 512 GPUs, every GPU shared by two),
median of ``--repeats`` runs; and per-job decision times from the greedy pass (median, p99).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from _results import save_json

from interplace.datasets import CoLocationData, load_gavel, load_lucid
from interplace.model import InterferenceModel, fit, holdout_split
from interplace.placement import (
    POLICIES,
    Job,
    MeasuredOverModel,
    MeasuredSpeeds,
    place,
    score,
)
from interplace.topology import builtin

POLICY_ORDER = ["exact", "local-search", "greedy", "rl", "gandiva", "spread", "random", "pack",
                "lucid"]


MEASURED = ["exact+measured", "local-search+measured"]
"""The same policies with the scheduler's own measurements (the fit's training pairs) taking
precedence over the model's predictions of those pairs (:class:`MeasuredOverModel`)."""


def _policies() -> list[str]:
    return [p for p in POLICY_ORDER if p in POLICIES] + MEASURED


def quality(
    data: CoLocationData,
    truth: MeasuredSpeeds,
    seeds: list[int],
    mixes: int,
    sizes: tuple[int, ...] = (12, 16),
    topology: str = "dgx-a100",
) -> dict[str, Any]:
    """Fraction of the measured optimum reached by every policy, per seed and mix."""
    topo = builtin(topology)
    types = sorted({t for t in truth.jobs if truth.can_share(t, t) or True})
    per_policy: dict[str, list[float]] = {p: [] for p in _policies()}
    rows = []
    for seed in seeds:
        train, _ = holdout_split(data, holdout_frac=0.3, seed=seed)
        t0 = time.perf_counter()
        model = fit(train, seed=seed)
        fit_s = time.perf_counter() - t0
        with_measured = MeasuredOverModel(model, train.pairs())
        rng = np.random.default_rng(1000 + seed)
        for n in sizes:
            for m in range(mixes):
                mix = [types[k] for k in rng.choice(len(types), n, replace=True)]
                jobs = [Job(f"j{k}", t) for k, t in enumerate(mix)]
                opt = place(topo, truth, jobs, policy="exact")
                for name in _policies():
                    source = with_measured if name in MEASURED else model
                    p = place(topo, source, jobs, policy=name.split("+")[0],
                              can_share=truth.can_share, seed=seed)
                    measured = score(topo, truth, p)
                    ratio = measured.objective / opt.objective
                    per_policy[name].append(ratio)
                    rows.append({"seed": seed, "jobs": n, "mix": m, "policy": name,
                                 "ratio": ratio, "pending": len(p.pending),
                                 "decision_ms": 1000 * p.decision_s,
                                 "predicted": p.objective, "measured": measured.objective,
                                 "optimum": opt.objective})
        print(f"  seed {seed}: fit {fit_s:.1f} s", file=sys.stderr)
    summary = {
        name: {
            "mean": float(np.mean(v)),
            "median": float(np.median(v)),
            "min": float(np.min(v)),
            "decision_ms_median": float(np.median(
                [r["decision_ms"] for r in rows if r["policy"] == name])),
            "pending_mean": float(np.mean([r["pending"] for r in rows if r["policy"] == name])),
        }
        for name, v in per_policy.items()
    }
    return {"summary": summary, "rows": rows}


def lucid_truth(data: CoLocationData) -> MeasuredSpeeds:
    """Lucid's measured pairs; unmeasured pairs are forbidden (no truth to score them)."""
    pairs = data.pairs()
    measured = {frozenset((a, b)) for a, b in zip(pairs["job"], pairs["co_runner"], strict=True)}
    jobs = sorted(set(pairs["job"]))
    forbidden = [
        (a, b) for i, a in enumerate(jobs) for b in jobs[i:] if frozenset((a, b)) not in measured
    ]
    return MeasuredSpeeds.from_pairs(pairs, forbidden=forbidden)


def scale(sizes: list[int], repeats: int, model: InterferenceModel) -> dict[str, Any]:
    """Whole-command time of ``interplace place`` and per-job decision times, per size."""
    out: dict[str, Any] = {}
    tmp = Path(tempfile.mkdtemp(prefix="interplace-bench-"))
    try:
        model_dir = model.save(tmp / "model")
        types = list(model.jobs)
        for n in sizes:
            rng = np.random.default_rng(n)
            jobs = [Job(f"g{k}", types[rng.integers(len(types))], gpus=8) for k in range(n // 2)]
            jobs += [Job(f"s{k}", types[rng.integers(len(types))]) for k in range(8 * n)]
            frame = pd.DataFrame({"job_id": [j.job_id for j in jobs], "job": [j.job for j in jobs],
                                  "gpus": [j.gpus for j in jobs]})
            jobs_path = tmp / f"jobs-{n}.csv"
            frame.to_csv(jobs_path, index=False)
            spec = "dgx-a100" if n == 1 else f"dgx-a100*{n}"
            entry: dict[str, Any] = {"gpus": 8 * n, "jobs": len(jobs)}
            for policy in ("greedy", "local-search"):
                times = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    subprocess.run(
                        [sys.executable, "-m", "interplace.cli", "place", "--model", str(model_dir),
                         "--topology", spec, "--jobs", str(jobs_path), "--policy", policy,
                         "--out", str(tmp / f"p-{n}.csv")],
                        check=True, capture_output=True,
                    )
                    times.append(time.perf_counter() - t0)
                entry[f"{policy}_command_s"] = statistics.median(times)
                entry[f"{policy}_command_s_all"] = times
            p = place(builtin(spec), model, jobs, policy="greedy")
            per_job = np.asarray(p.info["job_seconds"]) * 1000
            entry["greedy_per_job_ms_median"] = float(np.median(per_job))
            entry["greedy_per_job_ms_p99"] = float(np.quantile(per_job, 0.99))
            entry["greedy_decision_s"] = p.decision_s
            ls = place(builtin(spec), model, jobs, policy="local-search")
            entry["local_search_decision_s"] = ls.decision_s
            entry["objective_greedy"] = p.objective
            entry["objective_local_search"] = ls.objective
            out[str(n)] = entry
            print(f"  dgx-a100*{n}: {entry}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=["quality", "lucid", "scale"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--mixes", type=int, default=5)
    ap.add_argument("--lucid", default=str(Path(__file__).parents[1] / ".." / "shared" /
                                           "datasets" / "lucid"))
    ap.add_argument("--scale", nargs="+", type=int, default=[1, 8, 64, 512])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    results: dict[str, Any] = {"command": " ".join(sys.argv)}
    gavel = load_gavel("v100")
    if "quality" in args.parts:
        inf = [tuple(x) for x in gavel.infeasible.dropna().values.tolist()]
        truth = MeasuredSpeeds.from_pairs(gavel.data.pairs(), forbidden=inf)
        results["gavel_v100"] = quality(gavel.data, truth, args.seeds, args.mixes)
        print(json.dumps(results["gavel_v100"]["summary"], indent=1))
    if "lucid" in args.parts and Path(args.lucid).is_dir():
        data = load_lucid(args.lucid)
        results["lucid"] = quality(data, lucid_truth(data), args.seeds, args.mixes)
        print(json.dumps(results["lucid"]["summary"], indent=1))
    if "scale" in args.parts:
        model = fit(gavel.data, seed=0)
        results["scale"] = scale(args.scale, args.repeats, model)
        print(json.dumps(results["scale"], indent=1))
    if args.out:
        save_json(results, args.out)


if __name__ == "__main__":
    main()
