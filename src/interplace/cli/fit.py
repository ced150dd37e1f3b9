"""``interplace fit``: fit the Bayesian interference model to co-location runs."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from interplace.cli._common import (
    Subparsers,
    add_fit_args,
    add_model_data_args,
    add_rank_arg,
    fit_steps,
    int_at_least,
    rank_kwargs,
    read_data,
)
from interplace.errors import InputError

__all__ = ["register"]



RHAT_AGREE = 1.1
"""Split R-hat of the speed noise above which ``interplace fit --nuts`` notes that the chains
disagree (the usual threshold; 1 when they sample one distribution)."""


def _nuts_note(info: Mapping[str, Any]) -> str:
    """``", then 800 NUTS draws of 4 chains (0 divergent, R-hat 1.02)"`` for a fit that
    sampled (no R-hat with fewer than 4 draws a chain).

    >>> _nuts_note({"nuts": {"chains": 4, "draws": 200, "divergences": [0, 1, 0, 0],
    ...                      "rhat_speed_noise": 1.016}})
    ', then 800 NUTS draws of 4 chains (1 divergent, R-hat 1.02)'
    """
    nuts = info.get("nuts")
    if not isinstance(nuts, dict):
        return ""
    divergent = sum(nuts["divergences"])
    rhat = nuts.get("rhat_speed_noise")
    rhat_note = "" if rhat is None else f", R-hat {rhat:.2f}"
    return (
        f", then {nuts['chains'] * nuts['draws']} NUTS draws of {nuts['chains']} chains "
        f"({divergent} divergent{rhat_note})"
    )


def _nuts_disagree(info: Mapping[str, Any]) -> str | None:
    """A note when the NUTS chains' split R-hat of the speed noise is over
    :data:`RHAT_AGREE`, else None.

    >>> _nuts_disagree({"nuts": {"rhat_speed_noise": 2.15}})[:48]
    'the NUTS chains disagree (R-hat of the speed noi'
    >>> _nuts_disagree({"nuts": {"rhat_speed_noise": 1.03}}) is None
    True
    """
    nuts = info.get("nuts")
    rhat = nuts.get("rhat_speed_noise") if isinstance(nuts, dict) else None
    if rhat is None or rhat <= RHAT_AGREE:
        return None
    return (
        f"the NUTS chains disagree (R-hat of the speed noise {rhat:.2f} > {RHAT_AGREE}): "
        "they sit in different modes, and the model pools them; longer chains "
        "(--nuts-draws) may join them"
    )


def _run(args: argparse.Namespace) -> int:
    from interplace.model import Nuts, fit

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
    nuts = None
    if args.nuts is not None:
        nuts = Nuts(chains=args.nuts, warmup=args.nuts_draws, draws=args.nuts_draws)
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
        nuts=nuts,
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
        f"{_nuts_note(info)}{kept}, {info['fit_seconds']:.1f} s -> {out}\n"
    )
    disagree = _nuts_disagree(info)
    if disagree is not None:
        sys.stderr.write(f"interplace: note: {disagree}\n")
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
    fitp.add_argument(
        "--nuts",
        type=int_at_least(1),
        metavar="CHAINS",
        help="after SVI, sample the model's exact posterior by NUTS with CHAINS chains, pooled "
        "(slow: minutes to tens of minutes a chain on one core; --workers runs chains in "
        "parallel); the model keeps their draws",
    )
    fitp.add_argument(
        "--nuts-draws",
        type=int_at_least(1),
        default=200,
        metavar="N",
        help="NUTS warm-up steps and kept draws per chain (default 200 each)",
    )
    fitp.set_defaults(func=_run)
