"""Shared fixtures of the placement tests: a measured toy table and a small fitted model."""

from __future__ import annotations

import pytest

from interplace.datasets import synthetic
from interplace.model import InterferenceModel, fit
from interplace.placement import MeasuredSpeeds

# Four job types with pair speeds that make the choice of partner matter: "hog" slows
# everybody, "light" barely slows anybody; "x" and "hog" cannot share a GPU.
TOY_SPEED = {
    ("hog", "hog"): 0.40, ("hog", "mid"): 0.60, ("hog", "light"): 0.90, ("hog", "x"): 0.5,
    ("mid", "hog"): 0.45, ("mid", "mid"): 0.65, ("mid", "light"): 0.92, ("mid", "x"): 0.7,
    ("light", "hog"): 0.55, ("light", "mid"): 0.80, ("light", "light"): 0.95, ("light", "x"): 0.9,
    ("x", "hog"): 0.5, ("x", "mid"): 0.75, ("x", "light"): 0.85, ("x", "x"): 0.6,
}


@pytest.fixture(scope="session")
def toy() -> MeasuredSpeeds:
    return MeasuredSpeeds(TOY_SPEED, forbidden=frozenset({frozenset(("x", "hog"))}))


@pytest.fixture(scope="session")
def small_model() -> InterferenceModel:
    """A short fit on 4 synthetic jobs (its cross-GPU terms come from counters of PCIe/host)."""
    return fit(synthetic(4, seed=2, samples_per_run=8), seed=0, steps=300, min_steps=300)
