"""How fast a fitted model scores candidate co-locations, the placement engine's inner call.

Run: ``python benchmarks/predict_speed.py [--queries 10000] [--draws 500] [--repeats 5]
[--compare-rank 0] [--batch-sizes 1024 256]``

Fits the model once on Gavel V100 (26 jobs), then times
:meth:`~interplace.model.InterferenceModel.posterior_speed` on ``--queries`` random
candidates (one to three co-runners each) and reports the median over ``--repeats`` rounds of
the time per query, next to a baseline measured in the same run: calling
:meth:`~interplace.model.InterferenceModel.predict` once per query in a Python loop (on 200
queries), which is what a scheduler without the batched call would do. ``--compare-rank L`` also
fits a model with pair-term rank ``L`` (0: the mechanism alone, the model before the pair term) and
times its batched call on the same queries, interleaved round by round with the default
model's, and prints the ratio of the two. That model is one plain fit (``restarts=1``: one
mean-field posterior, not the default's mixture of four on data this small) without the second
stage (``measured=False``: no measured pairs' offsets, no unmeasured-pair spread), so
``--compare-rank 0`` is the model as it was before the pair term, the second stage and the
mixture (issue 15's "today"). ``--batch-sizes N ...`` also times the default model's batched
call with each of those ``batch_size`` values (the library picks one from the number of draws
when none is given), interleaved round by round with the rest.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from interplace.datasets import load_gavel
from interplace.model import Query, fit


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compare-rank", type=int, default=None)
    ap.add_argument("--batch-sizes", type=int, nargs="*", default=[])
    args = ap.parse_args()
    model = fit(load_gavel("v100").data, seed=0)
    other = (
        None if args.compare_rank is None
        else fit(load_gavel("v100").data, seed=0, rank=args.compare_rank, measured=False,
                 restarts=1)
    )
    rng = random.Random(0)
    jobs = list(model.jobs)
    queries = [
        Query(rng.choice(jobs), tuple(rng.choices(jobs, k=rng.randint(1, 3))))
        for _ in range(args.queries)
    ]
    batched = []
    batched_other = []
    by_size: dict[int, list[float]] = {size: [] for size in args.batch_sizes}
    for r in range(args.repeats):
        t0 = time.perf_counter()
        model.posterior_speed(queries, num_samples=args.draws, seed=r)
        batched.append((time.perf_counter() - t0) / len(queries))
        if other is not None:
            t0 = time.perf_counter()
            other.posterior_speed(queries, num_samples=args.draws, seed=r)
            batched_other.append((time.perf_counter() - t0) / len(queries))
        for size, times in by_size.items():
            t0 = time.perf_counter()
            model.posterior_speed(queries, num_samples=args.draws, seed=r, batch_size=size)
            times.append((time.perf_counter() - t0) / len(queries))
    loop = []
    few = queries[:200]
    for r in range(args.repeats):
        t0 = time.perf_counter()
        for q in few:
            model.predict(q.job, q.co_runners, num_samples=args.draws, seed=r)
        loop.append((time.perf_counter() - t0) / len(few))
    b, lo = statistics.median(batched), statistics.median(loop)
    print(
        f"{len(jobs)} jobs, {args.queries} queries, {args.draws} posterior draws each, "
        f"median of {args.repeats} rounds"
    )
    print(f"{'call':<44}{'us / query':>12}{'x baseline':>12}")
    print(f"{'predict() per query in a loop (baseline)':<44}{lo * 1e6:>12.1f}{1.0:>12.2f}")
    print(f"{'posterior_speed(all queries)':<44}{b * 1e6:>12.1f}{b / lo:>12.3f}")
    for size, times in by_size.items():
        t = statistics.median(times)
        print(f"{f'posterior_speed(..., batch_size={size})':<44}{t * 1e6:>12.1f}{t / lo:>12.3f}")
    print(f"queries per second, batched: {1 / b:,.0f}")
    if other is not None:
        bo = statistics.median(batched_other)
        print(
            f"default model (rank {model.rank}, measured pairs): {b * 1e6:.1f} us / query; "
            f"rank {other.rank} structure only: {bo * 1e6:.1f} us / query; ratio {b / bo:.2f}"
        )


if __name__ == "__main__":
    main()
