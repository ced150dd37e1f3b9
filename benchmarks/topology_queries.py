"""Speed of the topology queries the placement engine calls in its inner loop.

Run: ``python benchmarks/topology_queries.py [--spec dgx-h100*64] [--repeats 7]``

For each query it reports the median time per call over ``--repeats`` timed rounds and its
ratio to a baseline measured in the same run: networkx's ``shortest_path`` between the same
two GPU vertices (what a scheduler without interplace would do to find a route).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import networkx as nx

from interplace.topology import builtin


def per_call(fn: Callable[[int], object], calls: int, repeats: int) -> tuple[float, float]:
    """(first round, median over ``repeats`` rounds) of the mean seconds per call.

    Routes are memoised per GPU pair, so the first round measures cold queries and the
    later rounds the warm cache a placement loop sees when it revisits candidates.
    """
    rounds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)
        rounds.append((time.perf_counter() - t0) / calls)
    return rounds[0], statistics.median(rounds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="dgx-h100*64")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    topo = builtin(args.spec)
    build_s = time.perf_counter() - t0
    rng = random.Random(args.seed)
    gpus = topo.gpus()
    pairs = [(rng.choice(gpus), rng.choice(gpus)) for _ in range(args.calls)]
    sets = [rng.sample(gpus, 8) for _ in range(args.calls)]
    nodes = [(topo.gpu(a).node, topo.gpu(b).node) for a, b in pairs]
    g = topo.graph
    base = per_call(lambda i: nx.shortest_path(g, *nodes[i]), args.calls, args.repeats)
    fresh = builtin(args.spec)  # a second copy, so domains() starts with an empty route cache
    rows = [
        ("networkx shortest_path (baseline)", base),
        ("connection(a, b)", per_call(lambda i: topo.connection(*pairs[i]), args.calls,
                                      args.repeats)),
        ("path(a, b)", per_call(lambda i: topo.path(*pairs[i]), args.calls, args.repeats)),
        ("domains(8 GPUs)", per_call(lambda i: fresh.domains(sets[i]), args.calls // 10,
                                     args.repeats)),
    ]
    print(f"{args.spec}: {len(gpus)} GPUs, built in {build_s * 1e3:.1f} ms; "
          f"median of {args.repeats} rounds")
    print(f"{'query':<36}{'cold us':>9}{'median us':>11}{'x baseline':>12}")
    for name, (cold, med) in rows:
        print(f"{name:<36}{cold * 1e6:>9.1f}{med * 1e6:>11.1f}{med / base[1]:>12.2f}")


if __name__ == "__main__":
    main()
