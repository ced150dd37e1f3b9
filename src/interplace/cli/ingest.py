"""``interplace ingest``: convert counter output a cluster already produces to the long table."""

from __future__ import annotations

import argparse
import sys

from interplace.cli._common import Subparsers

__all__ = ["register"]



def _run(args: argparse.Namespace) -> int:
    from interplace.collectors import ingest, write_samples

    fields = [f.strip() for f in args.fields.split(",") if f.strip()] if args.fields else None
    df = ingest(
        args.file, format=args.format, host=args.host, fields=fields, interval_s=args.interval
    )
    write_samples(df, args.out)
    n_dev = df["device"].nunique()
    n_met = df["metric"].nunique()
    sys.stdout.write(
        f"{args.file}: {df.attrs.get('format', args.format)}, {len(df)} samples, "
        f"{n_met} metrics, {n_dev} devices -> {args.out}\n"
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
