"""``interplace simulate``: schedulers side by side on a trace, with measured ground truth."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from interplace.cli._common import Subparsers, int_at_least, positive_number, seed_arg
from interplace.errors import InputError, output_dir

if TYPE_CHECKING:
    from interplace.simulate._run import SimConfig

__all__ = ["register"]

_FORMATS = ("philly", "openb")
"""``--trace-format``'s choices: :data:`interplace.simulate._run.TRACE_FORMATS` (not imported
here, so that building the parser stays cheap)."""


def _trace_format(text: str) -> str:
    """An argparse type: a trace format the simulator reads; ``venus`` is refused saying why."""
    if text not in _FORMATS:
        from interplace.simulate._run import check_trace_format

        try:
            check_trace_format(text)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _run(args: argparse.Namespace) -> int:
    from interplace.simulate import SIM_POLICIES
    from interplace.simulate._run import SimConfig
    from interplace.simulate._sim import truth_file

    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    for p in policies:
        if p not in SIM_POLICIES:
            raise InputError(f"unknown policy {p!r} (choose from {', '.join(SIM_POLICIES)})")
    if not policies:
        raise InputError("--policies names no policy")
    trace = args.trace
    if trace in ("synthetic", "philly") and args.trace_format != "philly":
        raise InputError(f"--trace-format {args.trace_format} reads a trace file; --trace {trace} "
                         "is built in")
    if trace not in ("synthetic", "philly") and Path(trace).is_dir():
        raise InputError(f"trace {trace} is a directory, not a file")
    if trace not in ("synthetic", "philly") and not Path(trace).is_file():
        raise InputError(f"no such trace file: {trace} (or use synthetic, philly)")
    truth_file(args.ground_truth)  # a missing runs file, named before anything runs
    seeds = [args.seed] if args.seeds is None else list(range(args.seed, args.seed + args.seeds))
    configs = [
        SimConfig(trace=trace, ground_truth=args.ground_truth, topology=args.topology,
                  n_jobs=args.jobs, load=args.load, seed=s, policies=policies,
                  trace_format=args.trace_format, interval_s=args.interval)
        for s in seeds
    ]
    if args.plot is not None and (len(configs) > 1 or args.ray):
        raise InputError("--plot draws one simulation: drop --seeds/--ray to plot")
    with output_dir(args.plot, "--plot directory"):  # removed again if the simulation fails
        return _simulate(args, configs, policies, seeds)


def _simulate(args: argparse.Namespace, configs: list[SimConfig], policies: tuple[str, ...],
              seeds: list[int]) -> int:
    from interplace.simulate._run import compare, plot_results, sweep

    plots: list[str] = []
    if len(configs) == 1 and not args.ray:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(policies), desc="simulate", unit="policy",
                   disable=not sys.stderr.isatty(), leave=False)
        try:
            results = compare(configs[0], progress=lambda name: bar.update(1))
        finally:
            bar.close()
        metrics = [{k: v.metrics() for k, v in results.items()}]
        if args.plot is not None:
            plots = [str(path) for path in plot_results(results, args.plot)]
    else:
        metrics = sweep(configs, ray=args.ray)
    summary = _median(metrics)
    if args.json:
        sys.stdout.write(json.dumps({"policies": summary, "seeds": seeds}, indent=2) + "\n")
    else:
        sys.stdout.write(_table(summary, configs[0], len(seeds)))
        if args.plot is not None:
            sys.stdout.write(f"plots written to {', '.join(plots)}\n")
    return 0


def _median(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    import statistics

    out: dict[str, dict[str, float]] = {}
    for name in runs[0]:
        out[name] = {k: statistics.median(r[name][k] for r in runs) for k in runs[0][name]}
    return out


def _table(summary: dict[str, dict[str, float]], config: SimConfig, n_seeds: int) -> str:
    head = (f"{config.n_jobs} jobs of {config.trace} at load {config.load} on "
            f"{config.topology}, {config.ground_truth} measured speeds"
            + (f", median of {n_seeds} seeds" if n_seeds > 1 else "") + "\n")
    cols = ("avg_jct_s", "p99_jct_s", "makespan_s", "avg_queue_s", "utilisation",
            "colocated_share")
    rows: list[tuple[str, ...]] = [
        ("policy", "avg JCT s", "p99 JCT s", "makespan s", "avg queue s", "GPU util",
         "co-located")
    ]
    for name, m in summary.items():
        rows.append((name, *(f"{m[c]:.0f}" if c.endswith("_s") else f"{m[c]:.2f}"
                             for c in cols)))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    lines = [head] + ["  ".join(c.rjust(w) if k else c.ljust(w)
                                for k, (c, w) in enumerate(zip(r, widths, strict=True)))
                      for r in rows]
    return "\n".join(lines) + "\n"


def register(sub: Subparsers) -> None:
    """Add the ``simulate`` command to the ``interplace`` parser."""
    p = sub.add_parser(
        "simulate",
        help="compare schedulers on a job trace with measured co-location speeds",
        description="Run a trace's jobs through each scheduler on a topology; every job runs "
        "at its measured co-located speed; the model-driven schedulers see a model fitted on "
        "70% of the measurements (fitted only when a policy reads it: fifo-exclusive, random, "
        "pack, spread and oracle do not).",
    )
    p.add_argument("--trace", default="philly", metavar="PATH|synthetic|philly",
                   help="trace file, the packaged Philly excerpt (philly, default) or synthetic")
    p.add_argument("--trace-format", default="philly", type=_trace_format,
                   metavar="{" + ",".join(_FORMATS) + "}",
                   help="format of a trace file, CSV or .parquet (default: philly); venus "
                   "traces have no job durations and cannot be simulated")
    p.add_argument("--ground-truth", default="gavel-v100", metavar="NAME|RUNS.csv",
                   help="gavel-v100 (default), gavel-p100, gavel-k80 or a runs table")
    p.add_argument("--topology", default="dgx-a100*8", metavar="T",
                   help="cluster: file or built-in (default: dgx-a100*8)")
    p.add_argument("--jobs", type=int_at_least(1), default=400, metavar="N",
                   help="jobs from the trace (default: 400)")
    p.add_argument("--load", type=positive_number, default=1.0, metavar="X",
                   help="arrival-rate multiplier (default: 1)")
    p.add_argument("--seed", type=seed_arg, default=0,
                   help="seed: job types, model split and fit, policies (default: 0)")
    p.add_argument("--seeds", type=int_at_least(1), metavar="K",
                   help="run seeds SEED..SEED+K-1 and report medians (in parallel)")
    p.add_argument("--policies", default="fifo-exclusive,random,pack,spread,lucid,gandiva,"
                   "interplace,oracle", metavar="A,B,...",
                   help="comma list of policies (default: all but interplace-greedy/-rl)")
    p.add_argument("--interval", type=positive_number, metavar="S",
                   help="also schedule every S seconds while jobs wait")
    p.add_argument("--ray", action="store_true", help="run the seeds through Ray")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.add_argument("--plot", metavar="DIR", help="write jct_cdf.png and timeline.png here")
    p.set_defaults(func=_run)
