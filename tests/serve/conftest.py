"""The fitted model the extender tests serve (fitted once for the whole directory)."""

from __future__ import annotations

import pytest

from interplace.model import InterferenceModel


@pytest.fixture(scope="session")
def served() -> tuple[InterferenceModel, list[str]]:
    from interplace.datasets import synthetic
    from interplace.model import fit

    # The structure alone (measured=False): this fixture tests the extender's rounds, which
    # assume every co-location costs something. With the second stage, a synthetic pair whose
    # noisy measurements sit at or above its solo speed keeps that measurement (a free
    # co-location, as measured), and an idle GPU is no longer strictly preferred.
    model = fit(
        synthetic(4, seed=2, samples_per_run=8), seed=0, steps=200, min_steps=200, measured=False
    )
    return model, list(model.jobs)
