"""Shared fits for the model tests: small data sets, short fits, fitted once per session."""

from __future__ import annotations

import pytest

from interplace.datasets import CoLocationData, synthetic
from interplace.model import InterferenceModel, fit

# A short fit: 400 steps on 4 jobs take about a second on two cores. Its posterior is not
# converged to the digit, which is fine for every test that compares a model with itself
# (round trips, monotonicity per draw) rather than with the truth.
SMALL_STEPS = 400


@pytest.fixture(scope="session")
def small_data() -> CoLocationData:
    return synthetic(4, seed=2, samples_per_run=8)


@pytest.fixture(scope="session")
def small_model(small_data: CoLocationData) -> InterferenceModel:
    # The default mixture's four restarts in two processes: the same model bit for bit
    # (test_restarts.py), in about half the wall time on two cores.
    return fit(small_data, seed=0, steps=SMALL_STEPS, min_steps=SMALL_STEPS)


@pytest.fixture(scope="session")
def small_model_rank0(small_data: CoLocationData) -> InterferenceModel:
    """The mechanism alone (no pair term, no measured pairs, one fit rather than a mixture):
    what model formats 2 and 3 hold."""
    return fit(
        small_data, seed=0, steps=SMALL_STEPS, min_steps=SMALL_STEPS, rank=0, measured=False,
        restarts=1,
    )


@pytest.fixture(scope="session")
def cold_data() -> tuple[CoLocationData, list[str]]:
    """Eight synthetic jobs, two of them cold (every co-located run held out): enough
    measured pairs between jobs with readings for the counter kernel."""
    from interplace.model import cold_split

    train, _, cold = cold_split(synthetic(8, seed=2, samples_per_run=8), cold_jobs=2, seed=0)
    return train, cold


@pytest.fixture(scope="session")
def cold_model(cold_data: tuple[CoLocationData, list[str]]) -> InterferenceModel:
    """A fit with the counter kernel averaged into its cold jobs' pairs (the default)."""
    return fit(cold_data[0], seed=0, steps=SMALL_STEPS, min_steps=SMALL_STEPS)
