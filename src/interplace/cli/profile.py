"""``interplace profile``: measure workloads alone and in every pair on one GPU."""

from __future__ import annotations

import argparse
import sys

from interplace.cli._common import (
    Subparsers,
    count,
    int_at_least,
    non_negative_number,
    positive_number,
    write_unsupported_notes,
)
from interplace.errors import InputError

__all__ = ["register"]



def _run(args: argparse.Namespace) -> int:
    from interplace.collectors.profile import CudaUnavailableError, parse_workloads, profile

    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if args.device == "cpu" and args.gpu is not None:
        raise InputError("--gpu picks a GPU for --device cuda; with --device cpu there is none")
    workloads = parse_workloads(args.workloads)
    try:
        result = profile(
            workloads,
            args.out,
            modes=modes,
            warmup_s=args.warmup,
            measure_s=args.measure,
            device=args.device,
            gpu=0 if args.gpu is None else args.gpu,
            pairs=not args.no_pairs,
            progress=sys.stderr.isatty(),
        )
    except CudaUnavailableError as exc:  # checked before any workload starts
        raise InputError(f"--device cuda: {exc.reason}; use --device cpu") from None
    write_unsupported_notes(result.unsupported)
    n, out = len(workloads), result.out
    pairs = "" if args.no_pairs else f" and in {count(n * (n + 1) // 2, 'pair')}"
    sys.stdout.write(
        f"profiled {count(n, 'workload')} alone{pairs} "
        f"({', '.join(modes)}) -> {out}/runs.csv, {out}/samples.csv\n"
    )
    return 0


def register(sub: Subparsers) -> None:
    """Add the ``profile`` command to the ``interplace`` parser."""
    prof = sub.add_parser(
        "profile",
        help="measure workloads alone and in every pair on one GPU",
        description="Run each workload alone and every pair together on one device (co-runners "
        "start at the same instant), measure each one's throughput over the same window from "
        "its INTERPLACE_PROGRESS lines, sample counters throughout, and write runs.csv + "
        "samples.csv. SPEC: built-in names (gemm,memcpy,h2d,d2h,launch,cnn,transformer,"
        "cpu_pipeline; NAME:SIZE sets a size) or a .json/.toml file of {name, command} jobs.",
    )
    prof.add_argument(
        "--workloads",
        required=True,
        metavar="SPEC",
        help="the workloads: a comma list of built-in names, each NAME or NAME:SIZE (e.g. "
        "gemm,launch:8), or a .json / .toml file of {name, command} jobs",
    )
    prof.add_argument(
        "--out", required=True, metavar="DIR", help="output directory (new, or empty)"
    )
    prof.add_argument(
        "--modes",
        default="timeslice",
        help="comma list of sharing modes: timeslice, mps (default: timeslice)",
    )
    prof.add_argument(
        "--warmup",
        type=non_negative_number,
        default=2.0,
        metavar="S",
        help="seconds before the measurement window (default: 2)",
    )
    prof.add_argument(
        "--measure",
        type=positive_number,
        default=5.0,
        metavar="S",
        help="length of the measurement window (default: 5)",
    )
    prof.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                      help="where the workloads run: cuda (the default) needs a CUDA GPU; "
                      "on a machine without one give cpu (host counters only): there is no "
                      "automatic fallback")
    prof.add_argument(
        "--gpu",
        type=int_at_least(0),
        default=None,
        metavar="N",
        help="with --device cuda: the GPU to profile on, by its nvidia-smi / NVML index; "
        "runs.csv names it as its device (default: 0)",
    )
    prof.add_argument("--no-pairs", action="store_true", help="only the isolated runs")
    prof.set_defaults(func=_run)
