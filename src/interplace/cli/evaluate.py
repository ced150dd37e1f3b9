"""``interplace evaluate``: score the model on held-out runs against simple baselines."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import IO, cast

from interplace.cli._common import (
    Subparsers,
    add_fit_args,
    add_model_data_args,
    add_rank_arg,
    int_at_least,
    naming_file,
    open_fraction,
    rank_kwargs,
    read_data,
)
from interplace.errors import atomic_write, check_output_file

__all__ = ["register"]



def _run(args: argparse.Namespace) -> int:
    from interplace.model import evaluate

    out = None if args.out is None else Path(args.out)
    if out is not None:
        check_output_file(out)
    topology = None
    if args.topology is not None:
        from interplace.topology import load

        topology = load(args.topology)
    data = read_data(args.runs, args.samples)
    with naming_file(data, args.runs):
        result = evaluate(
            data,
            holdout_frac=0.3 if args.holdout_frac is None else args.holdout_frac,
            cold_jobs=args.cold_jobs,
            seed=args.seed,
            steps=args.steps,
            topology=topology,
            progress=sys.stderr.isatty() and not args.quiet,
            mode=args.mode,
            family=args.family,
            fit_kwargs=rank_kwargs(args),
            peers=not args.no_peers,
        )
    text = json.dumps(result, indent=2) + "\n"
    if out is not None:
        with atomic_write(out, "w") as fh:
            cast("IO[str]", fh).write(text)
    sys.stdout.write(text)
    return 0


def register(sub: Subparsers) -> None:
    """Add the ``evaluate`` command to the ``interplace`` parser."""
    at_least_1 = int_at_least(1)
    ev = sub.add_parser(
        "evaluate",
        help="score the model on held-out runs against baselines and peer predictors",
        description="Fit on a seeded split of the runs and print, as JSON, the model's MAE, 90% "
        "interval coverage and width on the held-out co-located runs, the baselines' MAE and, "
        "with the peers extra installed, the peer predictors' MAE (interplace[peers]).",
    )
    add_model_data_args(ev)
    split = ev.add_mutually_exclusive_group()
    split.add_argument(
        "--holdout-frac",
        type=open_fraction,
        metavar="F",
        help="hold out this share of the co-located runs (default: 0.3)",
    )
    split.add_argument(
        "--cold-jobs",
        type=at_least_1,
        metavar="N",
        help="hold out every co-located run of N jobs (cold start)",
    )
    add_fit_args(ev)
    add_rank_arg(ev)
    ev.add_argument(
        "--no-peers",
        action="store_true",
        help="leave out the peer predictors (matrix completion, boosted trees, EBM)",
    )
    ev.add_argument("--out", metavar="JSON", help="also write the JSON to this file")
    ev.set_defaults(func=_run)
