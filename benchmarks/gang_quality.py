"""The heuristics against exact search on mixes with gangs, and under relabelled GPUs.

Run: ``python benchmarks/gang_quality.py [--mixes 40] [--out FILE]``

``greedy``, ``local-search`` and ``rl`` choose a gang's GPUs among
:meth:`Problem.gang_candidates`. This script places seeded mixes of 2-9 jobs (single-GPU
jobs and 2-GPU gangs, half the mixes beside a job running on GPU 0) on ``pcie-8gpu`` and
``dgx-a100`` with each heuristic and with ``exact``, at most 2 jobs per GPU, for the three
objectives, and reports each heuristic's objective as a share of exact's (mean, worst, and
how many mixes reach it). It then places seeded mixes of 4-12 jobs (a quarter of them
gangs) on four built-in machines and on the same machines with their GPUs renamed in a
seeded order, and counts the mixes whose objective changes (a placement should not depend on
GPU names).

The decisions are made on a model with cross-GPU evidence, fitted here as the placement
tests' fixture is (``fit(synthetic(4, seed=2, samples_per_run=8), seed=0, steps=300,
min_steps=300)``, a few seconds); ``--model DIR`` loads a saved one instead. To compare two
versions of the code, run the script with ``PYTHONPATH`` pointing at the other ``src`` tree.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

import interplace
from interplace.datasets import synthetic
from interplace.model import InterferenceModel, fit
from interplace.placement import ClusterState, Job, Running, place
from interplace.topology import builtin

HEURISTICS = ("greedy", "local-search", "rl")


def against_exact(model: InterferenceModel, mixes: int) -> dict[str, list[float]]:
    """Per heuristic, its objective over exact's on each mix."""
    types = list(model.jobs)
    shares: dict[str, list[float]] = {p: [] for p in HEURISTICS}
    for trial in range(mixes):
        rng = random.Random(100 + trial)
        topo = builtin(rng.choice(["pcie-8gpu", "dgx-a100"]))
        objective = rng.choice(["sum", "max-min", "risk-averse"])
        jobs = [Job(f"j{k}", rng.choice(types), gpus=rng.choice([1, 1, 1, 2]))
                for k in range(rng.randint(2, 9))]
        running = ClusterState(
            (Running(Job("r0", rng.choice(types)), ("0",)),) if rng.random() < 0.5 else ())
        kw = {"objective": objective, "num_samples": 32, "seed": trial, "max_per_gpu": 2}
        best = place(topo, model, jobs, running, policy="exact", **kw)
        for p in HEURISTICS:
            got = place(topo, model, jobs, running, policy=p, **kw)
            if best.objective > 0:
                shares[p].append(got.objective / best.objective)
    return shares


def relabelled(model: InterferenceModel, mixes: int) -> dict[str, list[float]]:
    """Per heuristic, the relative change of its objective when the GPUs are renamed, on the
    mixes where it changes."""
    types = list(model.jobs)
    moved: dict[str, list[float]] = {p: [] for p in HEURISTICS}
    for trial in range(mixes):
        rng = random.Random(trial)
        topo = builtin(rng.choice(["pcie-8gpu", "dgx-a100", "p4d", "dgx1-v100"]))
        gpus = list(topo.gpus())
        perm = gpus[:]
        rng.shuffle(perm)
        renamed = topo.relabel({g: f"x{perm.index(g)}" for g in gpus})
        jobs = [Job(f"j{k}", rng.choice(types), gpus=rng.choice([1, 1, 1, 2]))
                for k in range(rng.randint(4, 12))]
        for p in HEURISTICS:
            a = place(topo, model, jobs, policy=p, num_samples=32, max_per_gpu=2)
            b = place(renamed, model, jobs, policy=p, num_samples=32, max_per_gpu=2)
            if abs(a.objective - b.objective) > 1e-6:
                moved[p].append(b.objective / a.objective - 1)
    return moved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mixes", type=int, default=40)
    ap.add_argument("--model", default=None, help="a saved InterferenceModel")
    ap.add_argument("--out", default=None, help="write the figures as JSON")
    args = ap.parse_args()
    print(f"interplace from {interplace.__file__}")
    model = (InterferenceModel.load(args.model) if args.model else
             fit(synthetic(4, seed=2, samples_per_run=8), seed=0, steps=300, min_steps=300))
    shares = against_exact(model, args.mixes)
    print(f"\nshare of exact's objective over {args.mixes} mixes with gangs")
    print(f"{'policy':<14}{'mean':>8}{'worst':>8}{'reach exact':>13}")
    for p, s in shares.items():
        reach = sum(1 for x in s if x >= 1 - 1e-9)
        print(f"{p:<14}{statistics.fmean(s):>8.4f}{min(s):>8.3f}{reach:>9}/{len(s)}")
    moved = relabelled(model, args.mixes)
    print(f"\nGPUs renamed: mixes whose objective changes, of {args.mixes}")
    print(f"{'policy':<14}{'changed':>9}{'largest change':>16}")
    for p, m in moved.items():
        big = max((abs(x) for x in m), default=0.0)
        print(f"{p:<14}{len(m):>9}{big:>16.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(
            {"command": "python benchmarks/gang_quality.py " + " ".join(
                f"--{k} {v}" for k, v in vars(args).items() if v is not None and k != "out"),
             "against_exact": shares, "relabelled": moved}, indent=1) + "\n")


if __name__ == "__main__":
    main()
