"""``interplace stability``: refit under seeded perturbations and report how far answers move."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO, cast

from interplace.cli._common import (
    Subparsers,
    add_fit_args,
    add_model_data_args,
    int_at_least,
    naming_file,
    read_data,
)
from interplace.errors import atomic_write, check_output_file, output_dir

__all__ = ["register"]


def _perturbations(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated perturbation names (checked by ``stability``)."""
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"must name at least one perturbation, not {text!r}")
    return names


def _run(args: argparse.Namespace) -> int:
    out = None if args.out is None else check_output_file(args.out)
    with output_dir(args.plot, "--plot directory") as plot_dir:
        return _stability(args, out, plot_dir)


def _stability(args: argparse.Namespace, out: Path | None, plot_dir: Path | None) -> int:
    from interplace.model import stability

    topology = None
    if args.topology is not None:
        from interplace.topology import load

        topology = load(args.topology)
    data = read_data(args.runs, args.samples)
    with naming_file(data, args.runs):
        report = stability(
            data,
            perturbations=args.perturbations,
            n=args.n,
            seed=args.seed,
            family=args.family,
            steps=args.steps,
            progress=sys.stderr.isatty() and not args.quiet,
            workers=args.workers,
            mode=args.mode,
            topology=topology,
        )
    if out is not None:
        with atomic_write(out, "w") as fh:
            cast("IO[str]", fh).write(report.to_json())
    if plot_dir is not None:
        report.plot(plot_dir)
    sys.stdout.write(report.summary())
    return 0


def register(sub: Subparsers) -> None:
    """Add the ``stability`` command to the ``interplace`` parser."""
    st = sub.add_parser(
        "stability",
        help="check whether a fit is stable under perturbations the data really suffers",
        description="Fit the model on the runs (holding out 20% of the co-located runs to "
        "check coverage), refit it under seeded perturbations (dropped counter samples, "
        "dropped, duplicated or bootstrapped runs, jittered throughputs, relabelled jobs, "
        "another fit seed) and print how far predictions and per-job latents move in units of "
        "the posterior sd, the held-out coverage, and which jobs are unstable and which pair to "
        "measure next. A job is flagged when the RMS move of its predictions, median over the "
        "replicates, exceeds 2 posterior sds under some perturbation (see "
        "interplace.model.stability).",
    )
    add_model_data_args(st)
    add_fit_args(st)
    st.add_argument(
        "--n",
        type=int_at_least(1),
        default=3,
        help="replicates of each perturbation (default: 3)",
    )
    st.add_argument(
        "--perturbations",
        type=_perturbations,
        metavar="A,B,...",
        help="comma-separated subset of drop_samples, drop_runs, duplicate_runs, "
        "bootstrap_runs, jitter, relabel, seed (default: all that apply)",
    )
    st.add_argument(
        "--workers",
        type=int_at_least(1),
        metavar="N",
        help="fit in N processes (default: one per CPU core, at most one per fit)",
    )
    st.add_argument("--out", metavar="JSON", help="write the full report as JSON")
    st.add_argument("--plot", metavar="DIR", help="write stability_*.png into this directory")
    st.set_defaults(func=_run)
