"""``interplace fit``: fit the Bayesian interference model to co-location runs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from interplace.cli._common import (
    Subparsers,
    add_fit_args,
    add_model_data_args,
    add_rank_arg,
    fit_steps,
    rank_kwargs,
    read_data,
)
from interplace.errors import InputError

__all__ = ["register"]



def _run(args: argparse.Namespace) -> int:
    from interplace.model import fit

    out = Path(args.out)
    if not out.parent.is_dir():
        raise InputError(f"output directory does not exist: {out.parent}")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write to {out.parent}: permission denied")
    # InterferenceModel.save refuses these too, but only after the fit; say so at once.
    if out.exists() and not (
        out.is_dir() and ((out / "model.json").is_file() or not any(out.iterdir()))
    ):
        raise InputError(f"{out} exists and is not an interplace model directory")
    topology = None
    if args.topology is not None:
        from interplace.topology import load

        topology = load(args.topology)
    data = read_data(args.runs, args.samples)
    model = fit(
        data,
        seed=args.seed,
        steps=args.steps,
        topology=topology,
        device=args.device,
        progress=sys.stderr.isatty() and not args.quiet,
        mode=args.mode,
        family=args.family,
        **rank_kwargs(args),
    )
    model.save(out)
    info = model.info
    kept = (
        f", {len(model.measured)} measured pairs kept" if model.measured is not None else ""
    )
    sys.stdout.write(
        f"fitted {len(model.jobs)} jobs to {info['observations']} co-located observations and "
        f"{info['counter_groups']} counter groups of {data.name}: {fit_steps(info)}"
        f"{kept}, {info['fit_seconds']:.1f} s -> {out}\n"
    )
    return 0


def register(sub: Subparsers) -> None:
    """Add the ``fit`` command to the ``interplace`` parser."""
    fitp = sub.add_parser(
        "fit",
        help="fit the Bayesian interference model to co-location runs",
        description="Fit the interference model to a runs table (and optional counter samples) "
        "and save it as a model directory (model.json + posterior.safetensors).",
    )
    add_model_data_args(fitp)
    fitp.add_argument(
        "--out",
        required=True,
        metavar="MODEL",
        help="model directory to write (an existing model there is replaced)",
    )
    fitp.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="where to fit (default: cpu)"
    )
    add_fit_args(fitp)
    add_rank_arg(fitp)
    fitp.set_defaults(func=_run)
