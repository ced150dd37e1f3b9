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
