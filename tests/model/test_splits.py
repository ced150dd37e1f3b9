"""The held-out splits ``evaluate`` and the benchmarks use."""

from __future__ import annotations

from interplace.datasets import synthetic
from interplace.model._evaluate import _colocated_runs, holdout_split


def test_holdout_split_always_leaves_a_colocated_run_to_train_on() -> None:
    # Holding out 99% of 15 co-located runs rounds to all of them; one stays to fit on (an
    # audit found no test noticing the cap removed).
    data = synthetic(5, seed=0)
    train, test = holdout_split(data, holdout_frac=0.99, seed=0)
    assert len(_colocated_runs(train)) == 1
    assert test["run_id"].nunique() == len(_colocated_runs(data)) - 1
