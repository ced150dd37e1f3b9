"""What the Lucid-only benchmarks share: their command-line options and their splits.

Imported by the scripts beside it (``python benchmarks/<name>.py`` puts this folder first on
``sys.path``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from interplace.datasets import CoLocationData, load_lucid
from interplace.model._evaluate import cold_split, holdout_split


def add_lucid_options(ap: argparse.ArgumentParser) -> None:
    """``--lucid``, ``--splits``, ``--seeds`` and ``--workers``, as the Lucid scripts take them."""
    ap.add_argument("--lucid", default="../shared/datasets/lucid")
    ap.add_argument("--splits", nargs="+", choices=("random", "cold"),
                    default=["random", "cold"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=1, help="splits in parallel processes")


def require_lucid(path: str) -> None:
    """Exit with a one-line message when ``path`` holds no Lucid data."""
    if not Path(path, "colocate_info.csv").is_file():
        sys.exit(f"no Lucid data at {path} (give --lucid PATH)")


def lucid_split(path: str, kind: str, seed: int
                ) -> tuple[CoLocationData, pd.DataFrame, set[str]]:
    """``evaluate``'s split of Lucid: ``random`` holds out 30% of the co-located runs, ``cold``
    every co-located run of 8 jobs (seeded). Returns the training data, the held-out rows and
    the cold jobs (empty on ``random``)."""
    data = load_lucid(path)
    if kind == "cold":
        train, test, cold = cold_split(data, cold_jobs=8, seed=seed)
        return train, test, {str(j) for j in cold}
    train, test = holdout_split(data, holdout_frac=0.3, seed=seed)
    return train, test, set()
