"""Bayesian optimisation (``interplace.placement.bo``) against random search and Optuna.

Run: ``python benchmarks/bo.py [--parts quality reach timing] [--problems branin hartmann6
mixed gpu-split] [--methods ...] [--seeds 10] [--gpu-seeds 20] [--reach-budget 60]
[--timing-seeds 3] [--out docs/bo-results.json] [--plot docs/figures/bo-regret.png]``

Methods, each with the same evaluation budget per problem and seed:

- ``interplace``: :class:`interplace.placement.bo.Tuner`, defaults (Sobol design of
  ``max(5, 2d)`` points, then one point at a time by LogExpectedImprovement);
- ``random``: uniform random points (feasible ones, for the constrained problem);
- ``optuna-tpe`` and ``optuna-gp``: Optuna's ``TPESampler`` and ``GPSampler`` with their
  defaults, seeded (skipped when Optuna is not installed: ``pip install interplace[bench]``).

Problems:

- ``branin`` (2 reals, minimise, optimum 0.397887; 30 evaluations), ``hartmann6`` (6 reals
  in [0, 1], minimise, optimum -3.32237; 40 evaluations): simple regret (best so far minus
  the optimum) after each evaluation;
- ``mixed``: :math:`\\mathrm{branin}(x + s_c, k) + o_c` with ``x`` real in [-5, 7.5], ``k``
  an integer in [0, 15] and ``c`` categorical in {a, b, c} (shifts :math:`s` = 0, 2.5, -2.5,
  offsets :math:`o` = 1, 0, 0.5); the optimum is computed by enumerating ``k`` and ``c`` and
  minimising over ``x`` (30 evaluations);
- ``gpu-split``: split 16 V100s among 6 jobs, each 0, 1, 2, 4 or 8 GPUs, never more than 16
  in all, maximising the total normalised throughput :math:`\\sum_j T_j(g_j)/T_j(1)` from
  Gavel's measured scale-out throughputs (:class:`~interplace.placement.bo.GpuSplit`). Each
  seed draws its 6 jobs without replacement from the 19 V100 jobs measured at 1, 2, 4 and 8
  GPUs (``numpy.random.default_rng(seed)``); the exact optimum is
  :meth:`~interplace.placement.bo.GpuSplit.optimum`. 30 evaluations. The tuner and random
  search never propose more than 16 GPUs. Optuna cannot constrain its samplers' search: a
  suggestion over 16 GPUs is told the value 0 (what running nothing is worth) and is not
  counted, so Optuna gets its 30 feasible evaluations too (generous to Optuna). Reported: the
  best value found as a fraction of the optimum, and the evaluations needed to come within
  5% of it.

Reach (``reach``): on the GPU split, each method again with ``--reach-budget`` evaluations
(the same seeds, so the same first 30), recording when it first comes within 5% of the
optimum.

Timing (``timing``): the wall time of one ``Tuner.ask()`` when the tuner already holds 30
and 200 finished trials (random feasible points with their true values, so the GP is fitted
to that many points), per problem, median over ``--timing-seeds`` seeds. One torch thread
(the tuner sets it).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _results import save_json

from interplace.placement.bo import (
    Choice,
    Float,
    GpuSplit,
    Int,
    Point,
    Space,
    Tuner,
    gavel_scaleout,
)

METHODS = ["interplace", "random", "optuna-tpe", "optuna-gp"]


def branin(x1: float, x2: float) -> float:
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


_H_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                 [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
_H_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                        [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
_H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(x: np.ndarray[Any, Any]) -> float:
    return float(-np.sum(_H_ALPHA * np.exp(-np.sum(_H_A * (x - _H_P) ** 2, axis=1))))


SHIFT = {"a": 0.0, "b": 2.5, "c": -2.5}
OFFSET = {"a": 1.0, "b": 0.0, "c": 0.5}


def mixed(x: float, k: int, c: str) -> float:
    return branin(x + SHIFT[c], float(k)) + OFFSET[c]


def _mixed_optimum() -> float:
    from scipy.optimize import minimize_scalar

    best = math.inf
    for c in SHIFT:
        for k in range(16):
            grid = np.linspace(-5, 7.5, 2001)
            vals = [mixed(float(x), k, c) for x in grid]
            i = int(np.argmin(vals))
            lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
            r = minimize_scalar(lambda x, k=k, c=c: mixed(float(x), k, c), bounds=(lo, hi),
                                method="bounded", options={"xatol": 1e-10})
            best = min(best, float(r.fun), vals[i])
    return best


@dataclass
class Problem:
    name: str
    space: Space
    objective: Callable[[Point], float]
    optimum: float
    maximize: bool
    budget: int
    optuna: Callable[[Any], Point]  # trial -> point
    random: Callable[[np.random.Generator], Point]


def _continuous_random(space: Space) -> Callable[[np.random.Generator], Point]:
    def draw(rng: np.random.Generator) -> Point:
        return space.from_unit(rng.random(space.dim).tolist())
    return draw


def make_problems(seed: int) -> dict[str, Problem]:
    out: dict[str, Problem] = {}
    sb = Space((Float("x1", -5.0, 10.0), Float("x2", 0.0, 15.0)))
    out["branin"] = Problem(
        "branin", sb, lambda p: branin(float(p["x1"]), float(p["x2"])), 0.397887, False, 30,
        lambda t: {"x1": t.suggest_float("x1", -5, 10), "x2": t.suggest_float("x2", 0, 15)},
        _continuous_random(sb))
    sh = Space(tuple(Float(f"x{i}", 0.0, 1.0) for i in range(6)))
    out["hartmann6"] = Problem(
        "hartmann6", sh, lambda p: hartmann6(np.array([float(p[f"x{i}"]) for i in range(6)])),
        -3.32237, False, 40,
        lambda t: {f"x{i}": t.suggest_float(f"x{i}", 0, 1) for i in range(6)},
        _continuous_random(sh))
    sm = Space((Float("x", -5.0, 7.5), Int("k", 0, 15), Choice("c", ("a", "b", "c"))))
    out["mixed"] = Problem(
        "mixed", sm, lambda p: mixed(float(p["x"]), int(p["k"]), str(p["c"])),
        MIXED_OPTIMUM, False, 30,
        lambda t: {"x": t.suggest_float("x", -5, 7.5), "k": t.suggest_int("k", 0, 15),
                   "c": t.suggest_categorical("c", ["a", "b", "c"])},
        _continuous_random(sm))
    table = gavel_scaleout("v100")
    jobs = sorted(table)
    rng = np.random.default_rng(seed)
    chosen = tuple(jobs[i] for i in rng.choice(len(jobs), size=6, replace=False))
    split = GpuSplit(table, chosen, capacity=16)
    sg = split.space()
    _, opt = split.optimum()

    def rand_split(r: np.random.Generator) -> Point:
        while True:
            p = sg.from_unit(r.random(sg.dim).tolist())
            if sg.feasible(p):
                return p

    out["gpu-split"] = Problem(
        "gpu-split", sg, split.value, opt, True, 30,
        lambda t: {n: t.suggest_categorical(n, [0, 1, 2, 4, 8]) for n in split.names},
        rand_split)
    return out


MIXED_OPTIMUM = _mixed_optimum()


def run_interplace(pr: Problem, seed: int) -> tuple[list[float], float]:
    t = Tuner(pr.space, maximize=pr.maximize, seed=seed, budget=pr.budget)
    values = []
    spent = 0.0
    while True:
        t0 = time.perf_counter()
        pts = t.ask()
        spent += time.perf_counter() - t0
        if not pts:
            break
        v = pr.objective(pts[0])
        t.tell(pts[0], v)
        values.append(v)
    return values, spent / pr.budget


def run_random(pr: Problem, seed: int) -> tuple[list[float], float]:
    rng = np.random.default_rng([seed, 99])
    return [pr.objective(pr.random(rng)) for _ in range(pr.budget)], 0.0


def run_optuna(pr: Problem, seed: int, kind: str) -> tuple[list[float], float]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    sampler = (optuna.samplers.TPESampler(seed=seed) if kind == "tpe"
               else optuna.samplers.GPSampler(seed=seed))
    study = optuna.create_study(direction="maximize" if pr.maximize else "minimize",
                                sampler=sampler)
    values: list[float] = []
    skipped = 0
    spent = 0.0
    while len(values) < pr.budget:
        t0 = time.perf_counter()
        trial = study.ask()
        p = pr.optuna(trial)
        spent += time.perf_counter() - t0
        if not pr.space.feasible(p):
            skipped += 1
            if skipped > 10_000:
                raise RuntimeError("Optuna proposed 10,000 infeasible points")
            study.tell(trial, 0.0)
            continue
        v = pr.objective(p)
        t0 = time.perf_counter()
        study.tell(trial, v)
        spent += time.perf_counter() - t0
        values.append(v)
    return values, spent / pr.budget


def best_so_far(values: list[float], maximize: bool) -> list[float]:
    out, best = [], -math.inf if maximize else math.inf
    for v in values:
        best = max(best, v) if maximize else min(best, v)
        out.append(best)
    return out


def quality(problems: list[str], seeds: int, gpu_seeds: int,
            methods: list[str]) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for name in problems:
        n_seeds = gpu_seeds if name == "gpu-split" else seeds
        per: dict[str, Any] = {}
        for m in methods:
            curves, times, opts = [], [], []
            for seed in range(n_seeds):
                pr = make_problems(seed)[name]
                if m == "interplace":
                    vals, sec = run_interplace(pr, seed)
                elif m == "random":
                    vals, sec = run_random(pr, seed)
                else:
                    vals, sec = run_optuna(pr, seed, m.split("-")[1])
                curves.append(best_so_far(vals, pr.maximize))
                times.append(sec)
                opts.append(pr.optimum)
                print(f"{name} {m} seed {seed}: best {curves[-1][-1]:.5g} "
                      f"(optimum {pr.optimum:.5g}) {sec:.3f} s/trial", file=sys.stderr,
                      flush=True)
            entry: dict[str, Any] = {"curves": curves, "optima": opts,
                                     "mean_suggest_s": statistics.fmean(times)}
            if name == "gpu-split":
                frac = [[v / o for v in c] for c, o in zip(curves, opts, strict=True)]
                final = [f[-1] for f in frac]
                within = [next((i + 1 for i, v in enumerate(f) if v >= 0.95), None) for f in frac]
                reached = [w for w in within if w is not None]
                entry.update({
                    "fraction": frac,
                    "mean_fraction": statistics.fmean(final),
                    "min_fraction": min(final),
                    "mean_fraction_at": {str(k): statistics.fmean(f[k - 1] for f in frac)
                                         for k in (10, 20, 30)},
                    "evals_to_95": within,
                    "median_evals_to_95": statistics.median(reached) if reached else None,
                    "seeds_within_5pct": len(reached),
                })
            else:
                reg = [[max(v - o, 1e-12) for v in c] for c, o in zip(curves, opts, strict=True)]
                entry["log10_regret"] = {
                    str(k): {"median": statistics.median(math.log10(r[k - 1]) for r in reg),
                             "mean": statistics.fmean(math.log10(r[k - 1]) for r in reg)}
                    for k in (10, 20, 30, 40) if k <= len(reg[0])}
            per[m] = entry
        res[name] = per
    return res


def reach(seeds: int, budget: int, methods: list[str]) -> dict[str, Any]:
    """Evaluations each method needs to come within 5% of the GPU split's optimum, with a
    longer budget (None: not within ``budget``)."""
    out: dict[str, Any] = {"budget": budget}
    for m in methods:
        within = []
        for seed in range(seeds):
            pr = make_problems(seed)["gpu-split"]
            pr.budget = budget
            if m == "interplace":
                vals, _ = run_interplace(pr, seed)
            elif m == "random":
                vals, _ = run_random(pr, seed)
            else:
                vals, _ = run_optuna(pr, seed, m.split("-")[1])
            frac = [v / pr.optimum for v in best_so_far(vals, True)]
            within.append(next((i + 1 for i, v in enumerate(frac) if v >= 0.95), None))
            print(f"reach {m} seed {seed}: {within[-1]}", file=sys.stderr, flush=True)
        med = statistics.median(math.inf if w is None else w for w in within)
        out[m] = {"evals_to_95": within, "reached": sum(w is not None for w in within),
                  "median": None if math.isinf(med) else med}  # None: more than the budget
    return out


def timing(problems: list[str], seeds: int, sizes: tuple[int, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in problems:
        out[name] = {}
        for n in sizes:
            secs = []
            for seed in range(seeds):
                pr = make_problems(seed)[name]
                rng = np.random.default_rng([seed, n])
                t = Tuner(pr.space, maximize=pr.maximize, seed=seed)
                for _ in range(n):
                    p = pr.random(rng)
                    t.tell(p, pr.objective(p))
                t0 = time.perf_counter()
                t.ask()
                secs.append(time.perf_counter() - t0)
            out[name][str(n)] = {"median_s": statistics.median(secs), "all_s": secs}
            print(f"timing {name} n={n}: {statistics.median(secs):.2f} s", file=sys.stderr,
                  flush=True)
    return out


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("branin", "hartmann6", "mixed", "gpu-split") if n in res]
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.3))
    for ax, name in zip(np.atleast_1d(axes), names, strict=True):
        for m, e in res[name].items():
            if name == "gpu-split":
                ys = np.mean(np.array(e["fraction"]), axis=0)
                ax.set_ylabel("best / optimum (mean)")
            else:
                r = np.array([[max(v - o, 1e-12) for v in c]
                              for c, o in zip(e["curves"], e["optima"], strict=True)])
                ys = np.median(np.log10(r), axis=0)
                ax.set_ylabel("log10 simple regret (median)")
            ax.plot(np.arange(1, len(ys) + 1), ys, label=m)
        ax.set_title(name)
        ax.set_xlabel("evaluations")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=["quality", "timing"])
    ap.add_argument("--problems", nargs="+",
                    default=["branin", "hartmann6", "mixed", "gpu-split"])
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--gpu-seeds", type=int, default=20)
    ap.add_argument("--timing-seeds", type=int, default=3)
    ap.add_argument("--timing-problems", nargs="+", default=["gpu-split", "hartmann6", "mixed"])
    ap.add_argument("--sizes", nargs="+", type=int, default=[30, 200])
    ap.add_argument("--reach-budget", type=int, default=60)
    ap.add_argument("--out", default="docs/bo-results.json")
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    methods = list(args.methods)
    try:
        import optuna  # noqa: F401
    except ImportError:
        print("optuna is not installed: skipping the Optuna samplers", file=sys.stderr)
        methods = [m for m in methods if not m.startswith("optuna")]
    warnings.filterwarnings("ignore", module="optuna")  # ExperimentalWarning of GPSampler
    out = Path(args.out)
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    result["mixed_optimum"] = MIXED_OPTIMUM
    command = " ".join(["python", *sys.argv])
    for part in args.parts:  # the command behind each part's figures
        probs = {"quality": args.problems, "timing": args.timing_problems}.get(part,
                                                                               ["gpu-split"])
        result.setdefault("commands", {})[f"{part}:{','.join(probs)}"] = command
    if "quality" in args.parts:
        for name, per in quality(args.problems, args.seeds, args.gpu_seeds, methods).items():
            result.setdefault("quality", {}).setdefault(name, {}).update(per)
        if args.plot:
            plot(result["quality"], Path(args.plot))
    if "reach" in args.parts:
        result["reach"] = reach(args.gpu_seeds, args.reach_budget, methods)
    if "timing" in args.parts:
        result["timing"] = timing(args.timing_problems, args.timing_seeds, tuple(args.sizes))
    save_json(result, out)
    print(json.dumps({k: v for k, v in result.items() if k != "quality"}, indent=1)[:2000])
    for name, per in result.get("quality", {}).items():
        for m, e in per.items():
            summary = {k: v for k, v in e.items()
                       if k not in ("curves", "optima", "fraction", "evals_to_95")}
            print(name, m, json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
