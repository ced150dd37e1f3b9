"""The rl policy: sample efficiency against model-free RL, and quality and time against the rest.

Run: ``python benchmarks/placement_rl.py [--seed 0] [--mixes 20] [--episodes 150]
[--model-free-episodes 50 100 200 400 800] [--out results.json]``

Setting (as ``benchmarks/placement.py``): the model is fitted on Gavel's V100 measurements with
30% of the co-located runs held out; job mixes of 12 and 16 single-GPU jobs go on the 8 GPUs of
``dgx-a100``, at most 2 per GPU; every placement is scored with Gavel's *measured* speeds as a
fraction of the measured optimum, on ``--mixes`` evaluation mixes no policy trained on.

- *Model-based* (``rl``): trained by gradient sampling on the fitted model only, so the ground
  truth it consumed is the fit's measurements (the co-located runs of the training split).
- *Model-free*: the same network and trainer, with features that name job types instead of
  predictions (``features="types"``), rewarded by the measured speeds themselves: one
  ground-truth reward per sampled placement (a placement run on the cluster and measured).
  Its quality is recorded along training, as a function of the rewards it consumed.

Sample efficiency, as Symphony reports it: the ground-truth rewards the model-free policy needs
to reach the model-based policy's quality, over the measurements the model-based one used.
``exact``, ``local-search`` and ``greedy`` run on the same mixes with the same model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
from _results import save_json

from interplace.datasets import load_gavel
from interplace.model import fit, holdout_split
from interplace.placement import Job, MeasuredSpeeds, place, score
from interplace.placement.rl import RLPolicy, train_policy
from interplace.topology import builtin


def evaluate(policy: Any, model: Any, truth: MeasuredSpeeds, mixes: list[list[Job]],
             optima: list[float]) -> tuple[float, float]:
    """Mean fraction of the measured optimum, and median decision time (ms)."""
    topo = builtin("dgx-a100")
    ratios, times = [], []
    for jobs, opt in zip(mixes, optima, strict=True):
        p = place(topo, model, jobs, policy=policy, can_share=truth.can_share)
        ratios.append(score(topo, truth, p).objective / opt)
        times.append(1000 * p.decision_s)
    return float(np.mean(ratios)), float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mixes", type=int, default=20)
    ap.add_argument("--episodes", type=int, default=150)
    ap.add_argument("--model-free-episodes", type=int, nargs="+",
                    default=[50, 100, 200, 400, 800])
    ap.add_argument("--out")
    args = ap.parse_args()
    gavel = load_gavel("v100")
    inf = [tuple(x) for x in gavel.infeasible.dropna().values.tolist()]
    truth = MeasuredSpeeds.from_pairs(gavel.data.pairs(), forbidden=inf)
    train, _ = holdout_split(gavel.data, holdout_frac=0.3, seed=args.seed)
    measurements = int(train.run_sizes().ge(2).sum())
    model = fit(train, seed=args.seed)
    topo = builtin("dgx-a100")
    types = sorted(truth.jobs)
    rng = np.random.default_rng(10_000 + args.seed)
    mixes = []
    for k in range(args.mixes):
        n = 12 if k % 2 == 0 else 16
        mixes.append([Job(f"j{i}", types[int(t)]) for i, t in
                      enumerate(rng.integers(len(types), size=n))])
    optima = [place(topo, truth, jobs, policy="exact").objective for jobs in mixes]
    out: dict[str, Any] = {"command": " ".join(sys.argv), "seed": args.seed,
                           "fit_measurements": measurements}
    t0 = time.perf_counter()
    mb = train_policy(model, topo, episodes=args.episodes, seed=args.seed,
                      can_share=truth.can_share)
    out["model_based"] = {"train_s": time.perf_counter() - t0, "episodes": args.episodes,
                          "model_rewards": mb.info["rewards_consumed"]}
    q_mb, ms_mb = evaluate(mb, model, truth, mixes, optima)
    out["model_based"].update(quality=q_mb, decision_ms=ms_mb)
    print(f"model-based rl: {q_mb:.3f} of the optimum, {ms_mb:.0f} ms", file=sys.stderr)
    for name in ("exact", "local-search", "greedy", "random"):
        q, ms = evaluate(name, model, truth, mixes, optima)
        out[name] = {"quality": q, "decision_ms": ms}
        print(f"{name}: {q:.3f}, {ms:.0f} ms", file=sys.stderr)
    curve: list[dict[str, float]] = []
    checkpoints = set(args.model_free_episodes)

    def record(episode: int, policy: RLPolicy) -> None:
        if episode + 1 in checkpoints:
            q, _ = evaluate(policy, truth, truth, mixes, optima)
            curve.append({"episodes": episode + 1, "rewards": 8 * (episode + 1), "quality": q})
            print(f"model-free after {8 * (episode + 1)} rewards: {q:.3f}", file=sys.stderr)

    t0 = time.perf_counter()
    train_policy(truth, topo, episodes=max(checkpoints), seed=args.seed, num_samples=1,
                 features="types", types=types, can_share=truth.can_share, callback=record)
    out["model_free"] = {"curve": curve, "train_s": time.perf_counter() - t0}
    reached = [c["rewards"] for c in curve if c["quality"] >= q_mb]
    out["model_free"]["rewards_to_match"] = reached[0] if reached else None
    out["sample_efficiency"] = (reached[0] / measurements) if reached else None
    print(json.dumps(out, indent=1))
    if args.out:
        save_json(out, args.out)


if __name__ == "__main__":
    main()
