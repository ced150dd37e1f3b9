"""``interplace fit``: fit the Bayesian interference model to co-location runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interplace.cli._common import (
    Subparsers,
    add_fit_args,
    add_model_data_args,
    add_rank_arg,
    add_workers_arg,
    fit_steps,
    fit_workers,
    int_at_least,
    naming_file,
    rank_kwargs,
    read_data,
)
from interplace.errors import InputError, check_output_parent, check_replaceable_dir

if TYPE_CHECKING:
    from interplace.datasets.runs import CoLocationData
    from interplace.model import InterferenceModel

__all__ = ["register"]



NUTS_DRAWS = 200
"""``--nuts-draws``'s default, :class:`~interplace.model.Nuts`'s: kept draws a chain, and warm-up
steps unless ``--nuts-warmup`` is given."""

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
    :data:`RHAT_AGREE` (with each chain's median speed noise, where the fit recorded it), else
    None.

    >>> nuts = {"rhat_speed_noise": 2.15, "chain_speed_noise": [0.012, 0.03]}
    >>> note = _nuts_disagree({"nuts": nuts})
    >>> print(note.split(": ")[0])
    the NUTS chains disagree (R-hat of the speed noise 2.15 > 1.1; each chain's median 0.012, 0.030)
    >>> _nuts_disagree({"nuts": {"rhat_speed_noise": 1.03}}) is None
    True
    """
    nuts = info.get("nuts")
    if not isinstance(nuts, dict):
        return None
    rhat = nuts.get("rhat_speed_noise")
    if rhat is None or rhat <= RHAT_AGREE:
        return None
    noise = nuts.get("chain_speed_noise")
    each = (
        "; each chain's median " + ", ".join(f"{v:.3f}" for v in noise)
        if isinstance(noise, list) else ""
    )
    return (
        f"the NUTS chains disagree (R-hat of the speed noise {rhat:.2f} > {RHAT_AGREE}{each}): "
        "they sit in different modes, and the model pools them; longer chains "
        "(--nuts-draws) may join them"
    )


ACCEPT_LOW = 0.5
"""Mean acceptance probability of a chain's kept draws under which ``interplace fit --nuts``
notes it: the step size was adapted during warm-up for 0.8, so a chain far below it moved
into a narrower part of the posterior after its warm-up ended, and its draws move little."""


def _nuts_stuck(info: Mapping[str, Any]) -> str | None:
    """A note naming the chains whose mean acceptance probability is under
    :data:`ACCEPT_LOW`, else None.

    >>> print(_nuts_stuck({"nuts": {"accept_prob": [0.25, 0.81, 0.19, 0.9]}}).split(": ")[0])
    NUTS chains 0 and 2 accepted 0.25 and 0.19 of their proposals on average, against the 0.8 \
their step size was adapted for
    >>> _nuts_stuck({"nuts": {"accept_prob": [0.7, 0.9]}}) is None
    True
    """
    nuts = info.get("nuts")
    accept = nuts.get("accept_prob") if isinstance(nuts, dict) else None
    if not isinstance(accept, list):
        return None
    low = [(c, a) for c, a in enumerate(accept) if a < ACCEPT_LOW]
    if not low:
        return None

    def listed(items: list[str]) -> str:
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]

    which = listed([str(c) for c, _ in low])
    rates = listed([f"{a:.2f}" for _, a in low])
    noun, its, it = ("chain", "its", "it") if len(low) == 1 else ("chains", "their", "they")
    return (
        f"NUTS {noun} {which} accepted {rates} of {its} proposals on average, against the 0.8 "
        f"{its} step size was adapted for: {its} warm-up ended before {it} settled and {its} "
        "draws move little; a longer warm-up (--nuts-warmup) may help"
    )


def _run(args: argparse.Namespace) -> int:
    from interplace.model import Nuts, fit

    out = Path(args.out)
    check_output_parent(out.parent)
    # InterferenceModel.save refuses these too, but only after the fit; say so at once.
    from interplace.model._fitted import MODEL_FILES

    check_replaceable_dir(out, MODEL_FILES, "an interplace model")
    topology = None
    if args.topology is not None:
        from interplace.topology import load

        topology = load(args.topology)
    nuts = None
    if args.nuts is None:
        for flag, value in (("--nuts-draws", args.nuts_draws), ("--nuts-warmup", args.nuts_warmup),
                            ("--workers", args.workers)):
            if value is not None:
                raise InputError(f"{flag} needs --nuts CHAINS")
    else:
        draws = NUTS_DRAWS if args.nuts_draws is None else args.nuts_draws
        warmup = draws if args.nuts_warmup is None else args.nuts_warmup
        nuts = Nuts(chains=args.nuts, warmup=warmup, draws=draws)
    data = read_data(args.runs, args.samples)
    with naming_file(data, args.runs):
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
            workers=fit_workers(args),
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
    for note in (_nuts_disagree(info), _nuts_stuck(info), _unread_samples(data, model)):
        if note is not None:
            sys.stderr.write(f"interplace: note: {note}\n")
    return 0


def _unread_samples(data: CoLocationData, model: InterferenceModel) -> str | None:
    """Why a samples table gave the fit no counters, where it gave none (else None)."""
    if data.samples is None or len(data.samples) == 0 or model.metrics:
        return None
    from interplace.model import METRIC_RESOURCE

    known = set(METRIC_RESOURCE)
    read = set(data.samples.loc[data.samples["value"].notna(), "metric"].astype(str))
    if not read:
        return "the samples gave the model no counters: every value in them is missing"
    why = ("none of its metrics is one the model reads" if not read & known
           else "none of them was read in an isolated run")
    return (f"the samples gave the model no counters: {why} (it reads "
            f"{', '.join(sorted(known))})")


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
    add_workers_arg(fitp)
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
        metavar="N",
        help="NUTS kept draws per chain, and warm-up steps unless --nuts-warmup is given "
        f"(default {NUTS_DRAWS} each)",
    )
    fitp.add_argument(
        "--nuts-warmup",
        type=int_at_least(1),
        metavar="N",
        help="NUTS warm-up steps per chain, in which the step size and mass matrix adapt "
        "(default: --nuts-draws)",
    )
    fitp.set_defaults(func=_run)
