"""``interplace ingest``: convert counter output a cluster already produces to the long table."""

from __future__ import annotations

import argparse
import sys

from interplace.cli._common import Subparsers, count
from interplace.errors import InputError

__all__ = ["register"]

_OPTIONS = {"fields": "--fields", "interval_s": "--interval"}
"""The command's option for each keyword option of :func:`interplace.collectors.ingest`."""


def _run(args: argparse.Namespace) -> int:
    from interplace.collectors import ingest, write_samples
    from interplace.collectors.ingest import OptionError
    from interplace.collectors.sampler import check_output_path

    check_output_path(args.out)  # before reading the input: a bad --out fails at once
    fields = [f.strip() for f in args.fields.split(",") if f.strip()] if args.fields else None
    try:
        df = ingest(
            args.file, format=args.format, host=args.host, fields=fields, interval_s=args.interval
        )
    except OptionError as exc:  # named as the library's keyword: say it as this command's option
        raise InputError(f"{_OPTIONS[exc.option]} {exc.problem}") from None
    write_samples(df, args.out)
    counts = ", ".join((count(len(df), "sample"), count(df["metric"].nunique(), "metric"),
                        count(df["device"].nunique(), "device")))
    sys.stdout.write(
        f"{args.file}: {df.attrs.get('format', args.format)}, {counts} -> {args.out}\n"
    )
    unsupported = df.attrs.get("unsupported")
    if unsupported:
        names = ", ".join(sorted(unsupported))
        sys.stderr.write(
            f"interplace: note: readings marked unavailable in the input for: {names}\n"
        )
    return 0


def register(sub: Subparsers) -> None:
    """Add the ``ingest`` command to the ``interplace`` parser."""
    from interplace.collectors import FORMATS

    ing = sub.add_parser(
        "ingest",
        help="convert counter output a cluster already produces to the long table",
        description="Convert nvidia-smi --query-gpu CSV, nvidia-smi dmon, perf stat -x, -I or "
        "dcgm-exporter Prometheus text into interplace's long counter table "
        "(t_s, host, device, metric, value).",
    )
    ing.add_argument("file", metavar="FILE", help="captured counter output")
    ing.add_argument(
        "--format",
        default="auto",
        choices=["auto", *FORMATS],
        help="input format (default: detect from content)",
    )
    ing.add_argument("--out", required=True, metavar="OUT", help="output table: .csv or .parquet")
    ing.add_argument("--host", help="host name to record (default: from the input or localhost)")
    ing.add_argument(
        "--fields", metavar="A,B,...", help="nvidia-smi --query-gpu field list, for noheader output"
    )
    ing.add_argument(
        "--interval",
        type=float,
        metavar="SECONDS",
        help="sampling interval, for input without time stamps (dmon, prometheus)",
    )
    ing.set_defaults(func=_run)
