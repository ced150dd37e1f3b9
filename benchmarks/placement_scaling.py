"""CPU time of the placement engine's scaling hot spots (the scalability audit's sizes).

Run: ``python benchmarks/placement_scaling.py [--parts repair gang nic candidates singles]
[--repeats 3] [--quick] [--model PATH]``

Each part reports the median CPU time (``time.process_time``) over ``--repeats`` runs, each on
a fresh topology (no warm caches from an earlier run):

* ``repair``: ``greedy`` on ``dgx-a100*N`` (8N GPUs) with 32N single-GPU jobs (4x
  oversubscribed, hundreds pending) and a third of the job-type pairs forbidden to share a
  GPU, so the repair pass runs with blockers everywhere.
* ``gang``: one ``place()`` of a gang of 1, 2, 4 or 8 GPUs on one ``dgx-a100`` with four
  single-GPU jobs running, 60 decisions with one :class:`SpeedCache` (what a scheduler or the
  Kubernetes extender does: a new problem per decision); median milliseconds per decision.
* ``nic``: :meth:`Topology.nearest_nic` of every GPU of ``dgx-a100*N``.
* ``candidates``: ``random``, ``spread`` and ``pack`` on ``dgx-a100*N`` with N/2 eight-GPU and
  8N single-GPU jobs (the audit's "bench" shape).
* ``singles``: ``greedy`` on ``dgx-a100*N`` with 8N single-GPU jobs, deciding with a model that
  has cross-GPU evidence (so a GPU's standing is its neighbours' jobs too:
  ``Problem.single_candidates``): ``--model``, or one fitted here on synthetic runs with
  counters (``fit(synthetic(12, seed=0, samples_per_run=2), seed=0)``, about a minute).
  Not in the default parts (only ``--parts singles`` runs it).

The speed source is a seeded :class:`MeasuredSpeeds` over 26 job types (``--model``: a saved
:class:`InterferenceModel` instead, e.g. the audit's). To compare two versions of the code,
run the script with ``PYTHONPATH`` pointing at the other ``src`` tree.
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib
from collections.abc import Callable

import numpy as np

import interplace
from interplace.placement import ClusterState, Job, MeasuredSpeeds, Running, SpeedCache, place
from interplace.placement._sources import SpeedSource
from interplace.topology import builtin


def measured_source(n_types: int = 26, seed: int = 0) -> MeasuredSpeeds:
    """Seeded measured speeds of every pair of ``n_types`` job types."""
    rng = np.random.default_rng(seed)
    types = [f"t{k:02d}" for k in range(n_types)]
    speed = {(a, b): float(rng.uniform(0.3, 1.0)) for a in types for b in types}
    return MeasuredSpeeds(speed)


def forbid_third(a: str, b: str) -> bool:
    """``can_share``: a fixed, hash-chosen third of the type pairs may not share a GPU."""
    return zlib.crc32("|".join(sorted((a, b))).encode()) % 3 != 0


def cpu(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """(median CPU seconds over ``repeats`` calls, the last call's result)."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return statistics.median(times), out


def part_repair(source: SpeedSource, sizes: list[int], repeats: int) -> None:
    types = list(source.jobs)
    print("\nrepair: greedy, 4x oversubscribed, 1/3 of type pairs forbidden")
    print(f"{'GPUs':>6}{'jobs':>7}{'pending':>9}{'objective':>11}{'median cpu s':>14}")
    for n in sizes:
        rng = np.random.default_rng(n)
        jobs = [Job(f"s{k}", types[rng.integers(len(types))]) for k in range(32 * n)]

        def run(n: int = n, jobs: list[Job] = jobs) -> object:
            return place(builtin(f"dgx-a100*{n}"), source, jobs, policy="greedy",
                         can_share=forbid_third)

        med, p = cpu(run, repeats)
        print(f"{8 * n:>6}{len(jobs):>7}{len(p.pending):>9}{p.objective:>11.3f}"  # type: ignore[attr-defined]
              f"{med:>14.3f}")


def part_gang(source: SpeedSource, decisions: int, repeats: int) -> None:
    types = list(source.jobs)
    print("\ngang: one place() per decision on one dgx-a100, 4 single-GPU jobs running")
    print(f"{'policy':<14}{'gang':>5}{'median ms/decision':>20}")
    for policy in ("local-search", "greedy"):
        for size in (1, 2, 4, 8):
            meds = []
            for _ in range(repeats):
                topo = builtin("dgx-a100")
                gpus = topo.gpus()
                cache = SpeedCache(source, num_samples=64, seed=0)
                rng = np.random.default_rng(size)
                times = []
                for _ in range(decisions):
                    on = rng.choice(8, 4, replace=False)
                    st = ClusterState(tuple(
                        Running(Job(f"r{k}", types[rng.integers(len(types))]), (gpus[int(x)],))
                        for k, x in enumerate(on)
                    ))
                    job = Job("n", types[rng.integers(len(types))], gpus=size)
                    t0 = time.process_time()
                    place(topo, source, [job], st, policy=policy, cache=cache, num_samples=64)
                    times.append(time.process_time() - t0)
                meds.append(statistics.median(times))
            print(f"{policy:<14}{size:>5}{1e3 * statistics.median(meds):>20.2f}")


def part_nic(sizes: list[int], repeats: int) -> None:
    print("\nnic: nearest_nic of every GPU (fresh topology each run)")
    print(f"{'GPUs':>6}{'median cpu s':>14}")
    for n in sizes:
        times = []
        for _ in range(repeats):
            topo = builtin(f"dgx-a100*{n}")
            gpus = topo.gpus()
            t0 = time.process_time()
            for g in gpus:
                topo.nearest_nic(g)
            times.append(time.process_time() - t0)
        print(f"{8 * n:>6}{statistics.median(times):>14.3f}")


def part_candidates(source: SpeedSource, sizes: list[int], repeats: int) -> None:
    types = list(source.jobs)
    print("\ncandidates: baseline policies, N/2 8-GPU + 8N 1-GPU jobs on dgx-a100*N")
    print(f"{'policy':<9}{'GPUs':>6}{'jobs':>7}{'objective':>11}{'median cpu s':>14}")
    for policy in ("random", "spread", "pack"):
        for n in sizes:
            rng = np.random.default_rng(n)
            jobs = [Job(f"g{k}", types[rng.integers(len(types))], gpus=8)
                    for k in range(n // 2)]
            jobs += [Job(f"s{k}", types[rng.integers(len(types))]) for k in range(8 * n)]

            def run(n: int = n, jobs: list[Job] = jobs, policy: str = policy) -> object:
                return place(builtin(f"dgx-a100*{n}"), source, jobs, policy=policy)

            med, p = cpu(run, repeats)
            print(f"{policy:<9}{8 * n:>6}{len(jobs):>7}{p.objective:>11.3f}"  # type: ignore[attr-defined]
                  f"{med:>14.3f}")


def part_singles(model: SpeedSource | None, sizes: list[int], repeats: int) -> None:
    from interplace.placement._problem import cross_gpu_evidence

    if model is None:
        from interplace.datasets import synthetic
        from interplace.model import fit

        model = fit(synthetic(12, seed=0, samples_per_run=2), seed=0)
    if not cross_gpu_evidence(model):
        raise SystemExit("singles: the model has no cross-GPU evidence (fit one with counters)")
    types = list(model.jobs)
    print("\nsingles: greedy, 8N one-GPU jobs on dgx-a100*N, a model with cross-GPU evidence")
    print(f"{'GPUs':>6}{'jobs':>7}{'objective':>11}{'median cpu s':>14}")
    for n in sizes:
        rng = np.random.default_rng(n)
        jobs = [Job(f"s{k}", types[rng.integers(len(types))]) for k in range(8 * n)]

        def run(n: int = n, jobs: list[Job] = jobs) -> object:
            return place(builtin(f"dgx-a100*{n}"), model, jobs, policy="greedy")

        med, p = cpu(run, repeats)
        print(f"{8 * n:>6}{len(jobs):>7}{p.objective:>11.3f}"  # type: ignore[attr-defined]
              f"{med:>14.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=["repair", "gang", "nic", "candidates"],
                    choices=["repair", "gang", "nic", "candidates", "singles"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    ap.add_argument("--model", default=None, help="a saved InterferenceModel to place with")
    args = ap.parse_args()
    source: SpeedSource
    model: SpeedSource | None = None
    if args.model:
        from interplace.model import InterferenceModel

        source = model = InterferenceModel.load(args.model)
    else:
        source = measured_source()
    repeats = 1 if args.quick else args.repeats
    print(f"interplace from {interplace.__file__}; median CPU time of {repeats} run(s)")
    if "repair" in args.parts:
        part_repair(source, [8, 16] if args.quick else [16, 32, 64], repeats)
    if "gang" in args.parts:
        part_gang(source, 15 if args.quick else 60, repeats)
    if "nic" in args.parts:
        part_nic([64] if args.quick else [128, 512], repeats)
    if "candidates" in args.parts:
        part_candidates(source, [16] if args.quick else [64, 128], repeats)
    if "singles" in args.parts:
        part_singles(model, [16] if args.quick else [64, 128], repeats)


if __name__ == "__main__":
    main()
