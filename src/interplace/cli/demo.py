"""``interplace demo``: run interplace end to end on built-in data."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from interplace._plot import plain_text
from interplace.cli._common import (
    Subparsers,
    add_seed_steps_args,
    describe_set,
    fit_steps,
    summary,
)
from interplace.errors import atomic_write, prepare_output_dir

if TYPE_CHECKING:
    import pandas as pd


__all__ = ["register"]



def _run(args: argparse.Namespace) -> int:
    import numpy as np
    import pandas as pd

    from interplace.datasets import load_gavel
    from interplace.model import (
        Query,
        baselines,
        best_baseline,
        family_lookup,
        fit,
        holdout_split,
        row_queries,
        score,
    )
    from interplace.topology import builtin
    from interplace.topology.nvsmi import to_nvidia_smi
    from interplace.topology.plot import plot_topology

    # Fail before the slow fit when the outputs could not be written afterwards.
    out = prepare_output_dir(args.out, "--out directory")
    w = sys.stdout.write
    w(
        "interplace demo: a built-in machine's shared resources, then the interference model\n"
        "fitted to Gavel's measured V100 co-locations and scored on held-out pairs\n\n"
    )
    topo = builtin(args.topology)
    w(f"== Topology\n{summary(topo)}\n{to_nvidia_smi(topo)}\n")
    gpus = topo.gpus()
    far = next((g for g in gpus if topo.connection(gpus[0], g) == "SYS"), gpus[-1])
    sets: list[list[str]] = [gpus[:2], [gpus[0], far], gpus[: len(gpus) // 2]]
    w("Shared contention domains of a few GPU sets (resources two or more of them use):\n")
    for s in sets:
        w(describe_set(topo, s))
    two = builtin(f"{args.topology}*2")
    a, b = two.gpus()[0], two.gpus()[len(gpus)]
    w(f"Two such machines on one network ({two.name}): GPUs {a} and {b}\n")
    w(describe_set(two, [a, b]))
    plot = out / f"{topo.name}.png"
    plot_topology(topo, plot)
    w(f"topology plot written to {plot}\n")

    gavel = load_gavel("v100")
    data = gavel.data
    train, test = holdout_split(data, holdout_frac=0.3, seed=args.seed)
    n_runs = int(data.run_sizes().ge(2).sum())
    w(
        f"\n== Interference model on {data.name}: {data.runs['job'].nunique()} jobs, {n_runs} "
        "co-located pairs measured by Gavel (OSDI 2020, MIT licence, packaged)\n"
        f"held out {test['run_id'].nunique()} of the {n_runs} co-located runs ({len(test)} "
        f"speeds, seed {args.seed}); fitting the rest and every isolated run, with each "
        "network's batch sizes as one job family...\n"
    )
    model = fit(
        train,
        seed=args.seed,
        steps=args.steps,
        progress=sys.stderr.isatty(),
        family="model",
    )
    info = model.info
    w(f"fitted in {info['fit_seconds']:.1f} s ({fit_steps(info)})\n")

    held = model.posterior_speed(row_queries(test), seed=args.seed)
    mean, q05, q95 = held.mean.tolist(), held.q05.tolist(), held.q95.tolist()
    w(_demo_heldout_table(test, mean, q05, q95))
    # Every ordered pair of jobs (a job next to a second instance of itself included), scored
    # in one vectorised call that shares its posterior draws across all of them.
    pairs = [(j, c) for j in model.jobs for c in model.jobs]
    post = model.posterior_speed([Query(j, (c,)) for j, c in pairs], seed=args.seed)
    table = pd.DataFrame(
        {
            "job": [j for j, _ in pairs],
            "co_runner": [c for _, c in pairs],
            "speed_mean": post.mean,
            "speed_q05": post.q05,
            "speed_q95": post.q95,
        }
    )
    feasible = [gavel.is_feasible(j, c) for j, c in pairs]
    w(_demo_partners(table, feasible))

    result = score(model, test, posterior=held)
    base = baselines(train, test)
    best, ratio = best_baseline(base, result["mae"])
    known = {k: v["mae"] for k, v in base.items() if v["mae"] is not None}
    shown = ", ".join(f"{k} {v:.3f}" for k, v in sorted(known.items(), key=lambda kv: kv[1]))
    if ratio is None:
        verdict = "the best baseline is exact"
    else:
        beats = "below 1: the model beats it" if ratio < 1 else "the model does not beat it"
        verdict = f"{ratio:.2f} ({beats})"
    fam_pred = family_lookup(train, test, model.family_map())
    fam_mae = float(np.mean(np.abs(fam_pred - test["speed"].to_numpy(dtype=float))))
    misfits = feasible.count(False)
    csv_path = out / f"{data.name}-predictions.csv"
    png_path = out / f"{data.name}-heldout.png"
    with atomic_write(csv_path, "w") as fh:
        table.to_csv(cast("IO[str]", fh), index=False, lineterminator="\n")
    title = (
        f"{data.name}, {len(test)} held-out speeds: MAE {result['mae']:.3f}, "
        f"90% coverage {result['coverage_90']:.2f}"
    )
    _demo_plot(test["speed"].tolist(), mean, q05, q95, title, png_path)
    w(
        f"\nHeld-out accuracy on {len(test)} speeds:\n"
        f"  model MAE {result['mae']:.3f}, 90% interval coverage {result['coverage_90']:.2f} "
        f"(mean width {result['interval_width_90']:.2f})\n"
        f"  baseline MAE: {shown}\n"
        f"  model MAE / best baseline ({best}): {verdict}\n"
        f"  a lookup that knows the families too (evaluate's family_baseline) has MAE "
        f"{fam_mae:.3f}\n"
        f"predictions for all {len(table)} ordered job pairs ({misfits} cannot share a V100) "
        f"written to {csv_path}\n"
        f"predicted against measured held-out speed plotted to {png_path}\n"
    )
    w(_demo_placement(model, train, gavel, args.seed))
    w(_demo_simulation(model, train, out, args.seed))
    return 0


def _demo_placement(model: Any, train: Any, gavel: Any, seed: int) -> str:
    """A 14-job mix on one DGX A100 with every policy, scored with Gavel's measured speeds."""
    import numpy as np

    from interplace.placement import POLICIES, Job, MeasuredOverModel, MeasuredSpeeds, place
    from interplace.placement import score as score_placement
    from interplace.placement.lucid import UNMEASURED
    from interplace.topology import builtin

    bad = [(str(a), str(b)) for a, b in gavel.infeasible.dropna().values.tolist()]
    truth = MeasuredSpeeds.from_pairs(gavel.data.pairs(), forbidden=bad)
    topo = builtin("dgx-a100")
    rng = np.random.default_rng(seed)
    types = sorted(truth.jobs)
    jobs = [Job(f"j{k}", types[int(t)]) for k, t in enumerate(rng.integers(len(types), size=14))]
    best = place(topo, truth, jobs, policy="exact").objective
    lines = [
        "\n== Placement: 14 jobs on the 8 GPUs of a DGX A100 (at most 2 per GPU)",
        "each policy decides with the model (its 'predicted' total speed); the placement is then",
        "scored with Gavel's measured speeds, as a share of the measured optimum",
        f"  {'policy':<24}{'predicted':>10}{'measured':>10}{'of optimum':>12}{'time':>9}",
    ]
    informed = MeasuredOverModel(model, train.pairs())
    unmeasured_classes = False
    for name in [*POLICIES, "local-search+measured"]:
        source = informed if name.endswith("+measured") else model
        p = place(topo, source, jobs, policy=name.split("+")[0], can_share=truth.can_share,
                  seed=seed)
        unmeasured_classes |= p.info.get("utilisation") == UNMEASURED
        measured = score_placement(topo, truth, p).objective
        pending = f" ({len(p.pending)} pending)" if p.pending else ""
        lines.append(
            f"  {name:<24}{p.objective:>10.2f}{measured:>10.2f}{measured / best:>12.3f}"
            f"{p.decision_s * 1000:>7.0f}ms{pending}"
        )
    lines.append("  (+measured: the fit's own measured pairs take precedence over the model's "
                 "predictions of them)")
    if unmeasured_classes:
        lines.append("  (lucid: Gavel has no GPU counters, so its utilisation classes are the "
                     "model's unmeasured demand)")
    return "\n".join(lines) + "\n"


def _demo_simulation(model: Any, train: Any, out: Path, seed: int) -> str:
    """60 Philly-derived jobs on two DGX A100, each scheduler, measured speeds; plots."""
    from interplace.simulate._run import SimConfig, compare, plot_results

    policies = ("fifo-exclusive", "random", "spread", "gandiva", "interplace", "oracle")
    cfg = SimConfig(n_jobs=60, load=0.25, seed=seed, topology="dgx-a100*2", policies=policies)
    results = compare(cfg, model=model, measured=train.pairs())
    paths = plot_results(results, out)
    lines = [
        "\n== Simulation: the first 60 jobs of the packaged Philly-derived trace, arrivals "
        "spread 4x,",
        "on two DGX A100; every job runs at its measured co-located speed (Gavel V100)",
        f"  {'policy':<16}{'avg JCT':>9}{'p99 JCT':>9}{'avg queue':>11}{'co-located':>12}",
    ]
    for name, r in results.items():
        m = r.metrics()
        lines.append(f"  {name:<16}{m['avg_jct_s']:>8.0f}s{m['p99_jct_s']:>8.0f}s"
                     f"{m['avg_queue_s']:>10.0f}s{m['colocated_share']:>12.2f}")
    lines.append(f"JCT CDF and queue/utilisation over time plotted to {paths[0]} and {paths[1]}")
    return "\n".join(lines) + "\n"


def _demo_heldout_table(
    test: pd.DataFrame, mean: Sequence[float], q05: Sequence[float], q95: Sequence[float]
) -> str:
    """Six held-out pairs spread over the measured speeds: prediction next to measurement."""
    speed = [float(s) for s in test["speed"]]
    job, co = test["job"].astype(str).tolist(), test["co_runner"].astype(str).tolist()
    order = sorted(range(len(speed)), key=lambda i: speed[i])
    picks = sorted(
        {order[round(k * (len(order) - 1) / 5)] for k in range(6)}, key=lambda i: -speed[i]
    )
    jw = max(len(job[i]) for i in picks) + 2
    cw = max(len(co[i]) for i in picks) + 2
    lines = [
        "\nA few held-out pairs (speed = throughput next to the co-runner / throughput alone):",
        f"  {'job':<{jw}}{'co-runner':<{cw}}predicted [90% interval]  measured",
    ]
    for i in picks:
        pred = f"{mean[i]:.2f} [{q05[i]:.2f}, {q95[i]:.2f}]"
        lines.append(f"  {job[i]:<{jw}}{co[i]:<{cw}}{pred:<26}{speed[i]:.2f}")
    return "\n".join(lines) + "\n"


def _demo_partners(table: pd.DataFrame, feasible: Sequence[bool]) -> str:
    """Best and worst co-runners, by predicted speed, of the job whose partner matters most.

    ``feasible`` says, per row of ``table``, whether the pair can share a GPU at all.
    """
    keep = [
        j != c and ok
        for j, c, ok in zip(
            table["job"].tolist(), table["co_runner"].tolist(), feasible, strict=True
        )
    ]
    rows = table.loc[keep]
    by_job = rows.groupby("job")["speed_mean"]
    job = str((by_job.max() - by_job.min()).idxmax())
    ranked = rows.loc[rows["job"] == job].sort_values("speed_mean", ascending=False)
    others = int(table["job"].nunique()) - 1
    width = max(len(str(c)) for c in ranked["co_runner"]) + 2
    lines = [
        f"\nBest and worst partners of {job}, the job whose partner matters most\n"
        f"(its predicted speed next to each of the {len(ranked)} other jobs that fit on one GPU "
        "with it" + (f"; {others - len(ranked)} do not" if others > len(ranked) else "") + "):"
    ]
    for label, part in (("best ", ranked.head(3)), ("worst", ranked.tail(3))):
        for c, m, lo, hi in zip(
            part["co_runner"], part["speed_mean"], part["speed_q05"], part["speed_q95"], strict=True
        ):
            lines.append(f"  {label}  {c:<{width}}{m:.2f} [{lo:.2f}, {hi:.2f}]")
    return "\n".join(lines) + "\n"


@plain_text
def _demo_plot(
    measured: Sequence[float],
    mean: Sequence[float],
    q05: Sequence[float],
    q95: Sequence[float],
    title: str,
    path: Path,
) -> None:
    """Predicted against measured held-out speed, 90% intervals as error bars, and y = x."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # The mean is of the true speed, the interval of a new measurement: clip so that an
    # interval that (rarely) misses the mean still draws.
    below = [max(m - lo, 0.0) for m, lo in zip(mean, q05, strict=True)]
    above = [max(hi - m, 0.0) for m, hi in zip(mean, q95, strict=True)]
    top = 1.05 * max(1.0, *measured, *q95)
    fig = Figure(figsize=(6, 6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot([0, top], [0, top], color="0.5", lw=1, label="y = x")
    ax.errorbar(
        measured,
        mean,
        yerr=[below, above],
        fmt="o",
        ms=3,
        lw=0.6,
        alpha=0.7,
        label="predicted mean and 90% interval",
    )
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_aspect("equal")
    ax.set_xlabel("measured speed (co-located / isolated throughput)")
    ax.set_ylabel("predicted speed")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left")
    fig.tight_layout()
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)


def register(sub: Subparsers) -> None:
    """Add the ``demo`` command to the ``interplace`` parser."""
    from interplace.topology import builtin_names

    demo = sub.add_parser(
        "demo",
        help="run interplace end to end on built-in data",
        description="Show a built-in topology and the contention domains of a few GPU sets, "
        "then fit the interference model to Gavel's packaged V100 measurements with 30% of "
        "the co-located runs held out, print its held-out error, interval coverage and "
        "baselines, a few predictions and the best and worst partners of one job; place a "
        "14-job mix on a DGX A100 with every policy, each placement scored with the measured "
        "speeds as a share of the measured optimum; and simulate the packaged Philly-derived "
        "trace on two DGX A100 against the baselines. Writes into --out the topology plot, a "
        "CSV of predictions for every ordered job pair, a plot of predicted against measured "
        "held-out speed, and the simulation's jct_cdf.png and timeline.png.",
    )
    demo.add_argument(
        "--topology",
        default="dgx1-v100",
        choices=builtin_names(),
        help="built-in machine to use (default: dgx1-v100)",
    )
    demo.add_argument(
        "--out", default="interplace-demo", help="output directory (default: interplace-demo)"
    )
    add_seed_steps_args(demo, "seed of the held-out split, the fit and the predictions")
    demo.set_defaults(func=_run)
