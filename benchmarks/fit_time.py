"""Lucid fit time of the current code against an earlier commit's, in the same run.

Run: ``git worktree add /tmp/before <commit> && python benchmarks/fit_time.py --baseline
/tmp/before/src [--seeds 0 1 2 3] [--families none model] [--lucid ../shared/datasets/lucid]
[--gavel v100] [--out results.json]`` (``--gavel GPU``: Gavel's packaged data of that GPU
instead of Lucid's, whose default fit is four tempered restarts stepped together).

Fit times move with the machine (the same commit's Lucid fit took 25.6 s one day and 38.5 s
another on the 2-core machine), so a fit time is only comparable to one measured beside it.
For each seed and family choice it fits Lucid once with the current source tree and once with
``--baseline`` (a ``src`` directory of another checkout), alternating, each in a fresh process,
one at a time, and reports per fit the seconds, SVI steps and the second stage's seconds, and
per family the medians and the median of the per-seed ratios (current over baseline).

Before the first fit and after the last, a fresh process times a fixed workload of
third-party code alone (``host`` in the output): networkx's ``shortest_path`` on a 30 x 30
grid, a small torch forward and backward pass (softplus, log1p and a sum over a 66 x 4 tensor,
one thread) and a CPython loop. interplace's code plays no part in it, so it tells how fast
the machine itself ran, which fit times from different days need (the same commit's fit of
seed 0 took 12.3 s on 2026-11-29 and 37.5 s on 2026-11-30; ``docs/benchmarks.md``).

Lucid (non-commercial licence) is read from ``--lucid``; without it (and without ``--gavel``)
the script exits with a one-line error.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from _results import save_json, snippet_result, start_snippet

_FIT = r"""
import json, sys, time
from pathlib import Path
from interplace.datasets import load_gavel, load_lucid
from interplace.model import fit
kind, where = sys.argv[1].split(":", 1)
data = load_lucid(Path(where)) if kind == "lucid" else load_gavel(where).data
seed, fam = int(sys.argv[2]), (None if sys.argv[3] == "none" else sys.argv[3])
t = time.perf_counter()
m = fit(data, seed=seed, family=fam)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "steps": m.info["steps"],
                  "stage_seconds": m.info.get("measured_seconds")}))
"""

_HOST = r"""
import json, random, time
import networkx as nx
import torch
torch.set_num_threads(1)
g = nx.grid_2d_graph(30, 30)
rng = random.Random(0)
nodes = list(g)
pairs = [(rng.choice(nodes), rng.choice(nodes)) for _ in range(300)]
t = time.perf_counter()
for a, b in pairs:
    nx.shortest_path(g, a, b)
nx_us = (time.perf_counter() - t) / len(pairs) * 1e6
x = torch.randn(66, 4, dtype=torch.float64, requires_grad=True)
t = time.perf_counter()
for _ in range(2000):
    (torch.nn.functional.softplus(2.0 * x) / 2.0).log1p().sum().backward()
torch_us = (time.perf_counter() - t) / 2000 * 1e6
s = 0
t = time.perf_counter()
for i in range(2_000_000):
    s += i
loop_ns = (time.perf_counter() - t) / 2e6 * 1e9
print(json.dumps({"networkx_shortest_path_us": nx_us, "torch_small_step_us": torch_us,
                  "python_loop_ns": loop_ns}))
"""


def _host(src: Path, cwd: Path) -> dict[str, Any]:
    proc = start_snippet(src, _HOST, [], cwd)
    return snippet_result(proc, "fit_time: the host reference failed")


def _fit_once(src: Path, data: str, cwd: Path, seed: int, family: str) -> dict[str, Any]:
    proc = start_snippet(src, _FIT, [data, str(seed), family], cwd)
    return snippet_result(proc, f"fit_time: fit with {src} failed")


def _host_line(h: dict[str, float]) -> str:
    return (f"networkx shortest_path {h['networkx_shortest_path_us']:.0f} us, torch small step "
            f"{h['torch_small_step_us']:.0f} us, CPython loop {h['python_loop_ns']:.0f} ns")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="src/ of the other checkout")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--families", nargs="+", choices=("none", "model"), default=["none", "model"])
    ap.add_argument("--lucid", type=Path, default=Path("../shared/datasets/lucid"))
    ap.add_argument("--gavel", choices=("v100", "p100", "k80"),
                    help="fit Gavel's packaged data of this GPU instead of Lucid's (all of it, "
                    "as Lucid's; the default fit there is four tempered restarts, stepped "
                    "together)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    current = Path(__file__).resolve().parent.parent / "src"
    if not (args.baseline / "interplace").is_dir():
        raise SystemExit(f"fit_time: {args.baseline} holds no interplace package")
    if args.gavel:
        data, cwd = f"gavel:{args.gavel}", current.parent
    elif not args.lucid.is_dir():
        raise SystemExit(f"fit_time: {args.lucid} not found (Lucid's data)")
    else:
        data, cwd = f"lucid:{args.lucid.resolve()}", Path(args.lucid.resolve().anchor)
    results: dict[str, Any] = {"data": data, "seeds": args.seeds,
                               "baseline": str(args.baseline), "fits": []}
    host = [_host(current, cwd)]
    print(f"  host before: {_host_line(host[0])}", file=sys.stderr)
    for seed in args.seeds:
        for family in args.families:
            for name, src in (("baseline", args.baseline.resolve()), ("current", current)):
                r = _fit_once(src, data, cwd, seed, family)
                results["fits"].append({"code": name, "seed": seed, "family": family, **r})
                print(f"  {name} family={family} seed {seed}: {r['seconds']:.1f} s, "
                      f"{r['steps']} steps", file=sys.stderr)
    host.append(_host(current, cwd))
    print(f"  host after: {_host_line(host[1])}", file=sys.stderr)
    results["host"] = {"before": host[0], "after": host[1]}
    summary = {}
    for family in args.families:
        by = {
            name: {f["seed"]: f["seconds"] for f in results["fits"]
                   if f["code"] == name and f["family"] == family}
            for name in ("baseline", "current")
        }
        ratios = [by["current"][s] / by["baseline"][s] for s in args.seeds]
        summary[family] = {
            "baseline_median_seconds": statistics.median(by["baseline"].values()),
            "current_median_seconds": statistics.median(by["current"].values()),
            "median_ratio": statistics.median(ratios),
            "ratios": ratios,
        }
    results["summary"] = summary
    results["command"] = " ".join(sys.argv)
    if args.out:
        save_json(results, args.out, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
