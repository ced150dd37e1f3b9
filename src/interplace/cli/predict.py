"""``interplace predict``: predict co-located speeds with a fitted model."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from interplace.cli._common import Subparsers, count, int_at_least, seed_arg
from interplace.errors import InputError, atomic_write, check_output_file, read_table

if TYPE_CHECKING:
    import pandas as pd


__all__ = ["register"]

_PREDICT_SUFFIXES = (".csv", ".parquet")


def _read_pairs(path: Path) -> pd.DataFrame:
    """The pairs table to predict, names kept as text (its rows are checked by the model)."""
    # Every cell as text, nothing read as missing: a job called "NA" stays "NA".
    pairs = read_table(path, "pairs table", text=None, missing=(), suffixes=_PREDICT_SUFFIXES)
    if len(pairs) == 0:
        raise InputError(f"{path}: pairs table has no rows")
    return pairs.reset_index(drop=True)


def _run(args: argparse.Namespace) -> int:
    from interplace.model import InterferenceModel

    out = Path(args.out)
    suffix = out.suffix.lower()
    if suffix not in _PREDICT_SUFFIXES:
        raise InputError(f"{out}: unknown output file type {out.suffix!r} (use .csv or .parquet)")
    check_output_file(out)
    pairs_path = Path(args.pairs)
    pairs = _read_pairs(pairs_path)
    model = InterferenceModel.load(args.model)
    try:  # the model checks the rows; the message gains the file they came from
        result = model.predict_frame(pairs, num_samples=args.samples_per_query, seed=args.seed)
    except InputError as exc:
        raise InputError(f"{pairs_path}: {exc}") from None
    if suffix == ".csv":
        with atomic_write(out, "w") as fh:
            result.to_csv(cast("IO[str]", fh), index=False, lineterminator="\n")
    else:
        with atomic_write(out, "wb") as fh:
            result.to_parquet(cast("IO[bytes]", fh), index=False)
    sys.stdout.write(
        f"predicted {count(len(result), 'co-location')} with {args.samples_per_query} "
        f"posterior draws each -> {out}\n"
    )
    return 0


def register(sub: Subparsers) -> None:
    """Add the ``predict`` command to the ``interplace`` parser."""
    pred = sub.add_parser(
        "predict",
        help="predict co-located speeds with a fitted model",
        description="Predict each job's speed (co-located / isolated throughput) next to its "
        "co-runners, with a 90% interval of a new measurement. PAIRS has the columns job and "
        "co_runner (several co-runners joined by +); OUT gets job, co_runner, speed_mean, "
        "speed_q05, speed_q95, one row per query in the same order.",
    )
    pred.add_argument("--model", required=True, metavar="MODEL", help="model directory (fit)")
    pred.add_argument(
        "--pairs",
        required=True,
        metavar="PAIRS",
        help="queries: .csv or .parquet with columns job, co_runner",
    )
    pred.add_argument("--out", required=True, metavar="OUT", help="predictions: .csv or .parquet")
    pred.add_argument(
        "--samples-per-query",
        type=int_at_least(2),
        default=500,
        metavar="N",
        help="posterior draws per query (default: 500)",
    )
    pred.add_argument("--seed", type=seed_arg, default=0, help="random seed (default: 0)")
    pred.set_defaults(func=_run)
