"""``interplace place``: place jobs on a topology so that predicted slowdown is smallest."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from interplace.cli._common import Subparsers, count, int_at_least, seed_arg
from interplace.errors import InputError

if TYPE_CHECKING:
    from interplace.model import InterferenceModel
    from interplace.placement import ClusterState, Job, Placement

__all__ = ["register"]

_SHOWN = 20


def _run(args: argparse.Namespace) -> int:
    from interplace.model import InterferenceModel
    from interplace.placement import OBJECTIVES, POLICIES, SpeedSource, place
    from interplace.placement.io import (
        check_table_path,
        placement_frame,
        read_jobs,
        read_state,
        write_tables,
    )
    from interplace.topology import load

    if args.policy not in POLICIES:
        raise InputError(f"unknown policy {args.policy!r} (choose from {', '.join(POLICIES)})")
    if args.objective not in OBJECTIVES:
        raise InputError(f"unknown objective {args.objective!r} (choose from "
                         f"{', '.join(OBJECTIVES)})")
    out = check_table_path(args.out)
    if args.pending_out is not None:
        pending_out = check_table_path(args.pending_out)
        if pending_out.resolve() == out.resolve():
            raise InputError(f"--pending-out {pending_out} is the --out file too")
    if args.policy_file is not None and args.policy != "rl":
        raise InputError("--policy-file only works with --policy rl")
    topology = load(args.topology)
    jobs = read_jobs(args.jobs)
    state = read_state(args.state) if args.state is not None else None
    fitted = InterferenceModel.load(args.model)
    model: SpeedSource = fitted
    if args.measured is not None:
        from interplace.cli._common import read_data
        from interplace.placement import MeasuredOverModel

        over = MeasuredOverModel(fitted, read_data(args.measured, None).pairs())
        if over.unused:
            job, co = over.unused[0]
            sys.stderr.write(
                f"interplace: note: {len(over.unused)} of {len(over.measured)} measured pairs "
                f"in {args.measured} name a job the model was not fitted on (first: {job} next "
                f"to {co}); they are not used\n")
        model = over
    policy: object = args.policy
    if args.policy_file is not None:  # --policy rl with a trained file; without: the default
        from interplace.placement.rl import load_policy

        policy = load_policy(args.policy_file)
    try:
        placement = place(
            topology,
            model,
            jobs,
            state,
            policy=policy,  # type: ignore[arg-type]
            max_per_gpu=args.max_per_gpu,
            objective=args.objective,
            seed=args.seed,
        )
    except InputError as exc:
        text = str(exc)
        if args.state is not None and text.startswith("state: "):
            raise InputError(f"{args.state}: {text.removeprefix('state: ')}") from None
        raise InputError(f"{args.jobs}: {text}") from None
    tables = [(placement_frame(placement), out)]
    if args.pending_out is not None:
        import pandas as pd

        pending = pd.DataFrame(
            {
                "job_id": [j.job_id for j in placement.pending],
                "job": [j.job for j in placement.pending],
                "gpus": [j.gpus for j in placement.pending],
            }
        )
        tables.append((pending, Path(args.pending_out)))
    write_tables(tables)  # both files or neither
    for j in placement.pending:
        sys.stderr.write(f"interplace: pending: {j.job_id} ({j.job}, {count(j.gpus, 'GPU')})\n")
    sys.stdout.write(_summary(placement, topology.name, out, _cold_note(fitted, jobs, state)))
    return 0


def _cold_note(
    fitted: InterferenceModel, jobs: Sequence[Job], state: ClusterState | None
) -> str | None:
    """A note naming the job types added from their counters (cold start) and where their
    pair corrections came from, or None when every type was fitted."""
    from interplace.model import InterferenceModel
    from interplace.placement._place import with_counters

    grown = with_counters(fitted, jobs, state)  # what place used (kept per model and input)
    if not isinstance(grown, InterferenceModel):
        return None
    added = grown.jobs[len(fitted.jobs):]  # with_cold_jobs appends the new types
    if not added:
        return None
    from interplace.placement._cold import _family_members

    family = grown.family_map()
    borrowing = set(grown.info.get("cold_jobs_borrowing", []))
    everyone = set(grown.info.get("cold_jobs_from_population", []))
    mixed = _family_members(fitted) is not None  # a job of no known family: their mixture
    parts = []
    for job in added:
        if job not in borrowing:
            how = "no pair corrections"
        elif job in everyone:
            how = "pair corrections from every fitted job (no counters to find the nearest by)"
        elif family.get(job):
            how = f"pair corrections from family {family[job]}"
        else:
            how = "pair corrections from the 5 fitted jobs with the nearest counters"
        if mixed and not family.get(job):
            how = "family unknown: started from the mixture of the fitted families; " + how
        parts.append(f"{job} ({how})")
    return "note: job type(s) the model was not fitted on, added from their counters: " + (
        ", ".join(parts)
    )


def _summary(p: Placement, topology: str, out: Path, cold: str | None = None) -> str:
    from interplace.placement.lucid import UNMEASURED

    new = p.new_jobs()
    running = [j for j in p.jobs if j.running]
    lines = [
        f"{p.policy} placement on {topology}: {count(len(new), 'job')} placed, "
        f"{len(p.pending)} pending"
        + (f", {len(running)} running" if running else ""),
        f"objective {p.objective_name} {p.objective:.3f} [90%: {p.objective_q05:.3f}, "
        f"{p.objective_q95:.3f}], decided in {p.decision_s * 1000:.0f} ms",
    ]
    if p.info.get("exact") is False:
        lines.append(
            f"note: exact search stopped after {p.info.get('nodes')} nodes: best found, "
            "not proven optimal"
        )
    if cold is not None:
        lines.append(cold)
    if p.info.get("utilisation") == UNMEASURED:
        lines.append(
            "note: lucid's utilisation classes are the model's demand, which no GPU counters "
            "measured (none in its fit data): they say nothing of the jobs' utilisation"
        )
    if not p.info.get("cross_gpu", True):
        lines.append(
            "note: contention across GPUs (PCIe switch, socket) not scored: the model has no "
            "evidence of it (no cross-device runs or PCIe/host counters in its fit data)"
        )
    rows = [("job_id", "job", "GPUs", "speed [90% interval]")]
    for j in sorted(p.jobs, key=lambda j: (j.running, j.speed_mean))[:_SHOWN]:
        gpus = ",".join(j.gpus) if len(j.gpus) <= 4 else f"{j.gpus[0]}..{j.gpus[-1]}"
        tag = " (running)" if j.running else ""
        rows.append(
            (j.job.job_id + tag, j.job.job, gpus,
             f"{j.speed_mean:.2f} [{j.speed_q05:.2f}, {j.speed_q95:.2f}]")
        )
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    if len(p.jobs) > _SHOWN:
        lines.append(f"  ... {len(p.jobs) - _SHOWN} more (slowest first shown)")
    lines.append(f"-> {out}")
    return "\n".join(lines) + "\n"


def register(sub: Subparsers) -> None:
    """Add the ``place`` command to the ``interplace`` parser."""
    p = sub.add_parser(
        "place",
        help="place jobs on GPUs so that predicted slowdown is smallest",
        description="Choose GPUs for each job of JOBS (columns job_id, job; optional gpus, "
        "how many GPUs the job takes, 1 for every job without the column; family; "
        "comm_share; and counter columns such as gpu_util_pct, the mean isolated readings of "
        "a job type the model was not fitted on, with counter_samples, how many samples each "
        "is a mean of) next to what STATE runs (job_id, job, gpu), maximising the objective "
        "predicted by a fitted model. OUT gets one row per (job, GPU): job_id, job, gpu, "
        "speed_mean, speed_q05, speed_q95; pending jobs go to stderr and --pending-out.",
    )
    p.add_argument("--model", required=True, metavar="MODEL", help="model directory (fit)")
    p.add_argument(
        "--topology", required=True, metavar="FILE_OR_BUILTIN",
        help="topology file, recording or built-in (dgx-a100, dgx-a100*64, ...)",
    )
    p.add_argument("--jobs", required=True, metavar="JOBS", help="jobs table: .csv or .parquet")
    p.add_argument("--state", metavar="STATE", help="what already runs: .csv or .parquet")
    p.add_argument(
        "--measured", metavar="RUNS",
        help="runs table of measured co-locations: a measured pair's prediction is centred on "
        "its measurement (the model answers the rest); for pairs measured after the model's "
        "fit, since the fit already follows the pairs it saw",
    )
    p.add_argument(
        "--max-per-gpu", type=int_at_least(1), default=2, metavar="K",
        help="jobs per GPU at most (default: 2)",
    )
    p.add_argument(
        "--policy", default="local-search", metavar="NAME",
        help="exact, greedy, local-search (default), rl, random, pack, spread, lucid, gandiva",
    )
    p.add_argument(
        "--policy-file", metavar="P",
        help="policy directory from interplace train-policy, for --policy rl (default: the "
        "packaged policy)",
    )
    p.add_argument(
        "--objective", default="sum", metavar="NAME",
        help="sum (default), max-min or risk-averse",
    )
    p.add_argument("--seed", type=seed_arg, default=0, help="random seed (default: 0)")
    p.add_argument("--out", required=True, metavar="OUT", help="placement: .csv or .parquet")
    p.add_argument("--pending-out", metavar="F", help="also write pending jobs here")
    p.set_defaults(func=_run)
