"""Recovery of a known low-rank pair effect: its rank, the effects themselves, held-out speeds.

Two synthetic data sets of 12 jobs with a rank-2 pair effect (``pair_rank=2``, victim factors
of spread 0.7: pair factors :math:`e^{z}` between about 0.2 and 5), every pair and self-pair run
once (78 co-located runs, 156 speed rows each). The model allows rank 5 (the default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from interplace.datasets import CoLocationData, synthetic
from interplace.model import (
    DEFAULT_RANK,
    InterferenceModel,
    Nuts,
    fit,
    holdout_split,
    row_queries,
)

pytestmark = pytest.mark.slow  # 12-job fits, the default four restarts each: minutes on 2 cores

DATA_SEEDS = (21, 22)
TRUE_RANK = 2
PAIR_SCALE = 0.7


@dataclass
class Case:
    data: CoLocationData
    model: InterferenceModel


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    out = []
    for seed in DATA_SEEDS:
        data = synthetic(12, seed=seed, pair_rank=TRUE_RANK, pair_scale=PAIR_SCALE,
                         samples_per_run=10)
        # Two worker processes for the four restarts: the same model bit for bit
        # (test_restarts.py), in about half the wall time on two cores.
        out.append(Case(data, fit(data, seed=0)))
    return out


def _double_centred(z: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``z`` less its row and column means: the part no per-job term can absorb (a victim's
    overall sensitivity and an aggressor's overall pressure are the mechanism's)."""
    return z - z.mean(-1, keepdims=True) - z.mean(-2, keepdims=True) + z.mean((-1, -2),
                                                                              keepdims=True)


def _effects(model: InterferenceModel) -> np.ndarray[Any, Any]:
    d = model.draws(1000, seed=1)
    return torch.einsum("sjl,skl->sjk", d["pair_u"], d["pair_w"]).numpy()


def _rank_per_component(model: InterferenceModel) -> list[int]:
    """How many pair components each mixture component keeps: shrinkage scales (the medians,
    exp of their locations) above 0.3. Components of a mixture need not number their pair
    components alike, so each is counted on its own."""
    scales = model.posterior["pair_scale"][0].exp().reshape(-1, DEFAULT_RANK).numpy()
    return [int((row > 0.3).sum()) for row in scales]


# Each component's shrinkage scale: the true components' victim factors have spread 0.7;
# a component the data do not support shrinks to its prior's floor (about 0.05 in
# exploratory fits). 0.3 separates the two by a factor of more than 2 on either side.


def test_one_plain_fit_finds_the_rank(cases: list[Case]) -> None:
    for c in cases:
        model = fit(c.data, seed=0, restarts=1)
        assert _rank_per_component(model) == [TRUE_RANK]


@pytest.mark.xfail(
    strict=True,
    reason="known shortfall (2026-11-26): the default fit on these small sets, four restarts "
    "with the likelihood tempered to 1.5, keeps a third pair component in three of the four "
    "restarts on data seed 21 (scales 0.5-0.9; the third singular value of their effects "
    "0.9-2.2 against the truth's 0); data seed 22 keeps two in every restart. The tempering "
    "is the cause: the same restarts untempered keep two in every restart on both sets "
    "(docs/benchmarks.md, 'The default fit on small data')",
)
def test_every_component_of_the_default_mixture_finds_the_rank(cases: list[Case]) -> None:
    for c in cases:
        assert c.model.components > 1  # small data: the default is the mixture
        assert _rank_per_component(c.model) == [TRUE_RANK] * c.model.components


def test_the_pair_effects_are_recovered(cases: list[Case]) -> None:
    # 144 double-centred effects per data set. Exploratory fits correlate at 0.98-0.99 with
    # the truth; 0.9 leaves room for another SVI path, and an unrecovered effect (rank 0, or
    # the wrong pairs) correlates near 0.
    for c in cases:
        assert c.data.truth is not None
        truth = _double_centred(c.data.truth["pair_effect"])
        post = _double_centred(_effects(c.model)).mean(0)
        assert np.corrcoef(post.ravel(), truth.ravel())[0, 1] > 0.9


def test_the_pair_term_beats_the_mechanism_alone_on_held_out_pairs() -> None:
    # Same data, split and fit seed; only the rank differs. The pair effect moves speeds by
    # up to a factor of 5 in pressure, which no per-job term can express, so the rank-0 model
    # must be clearly worse (exploratory: MAE 0.29 against 0.12).
    data = synthetic(12, seed=DATA_SEEDS[0], pair_rank=TRUE_RANK, pair_scale=PAIR_SCALE,
                     samples_per_run=10)
    train, test = holdout_split(data, holdout_frac=0.3, seed=0)
    y = test["speed"].to_numpy()
    mae = {}
    for rank in (0, DEFAULT_RANK):
        model = fit(train, seed=0, rank=rank)
        mae[rank] = float(np.abs(model.posterior_speed(row_queries(test)).mean - y).mean())
    assert mae[DEFAULT_RANK] < 0.8 * mae[0], mae


def test_the_exact_posterior_finds_the_rank_and_covers_the_pair_effects() -> None:
    # fit(nuts=Nuts()) on data seed 22: the library's default, four chains of 200 + 200 draws,
    # each from its own untempered SVI restart. Every chain must keep the true rank, and the
    # pooled 90% intervals must cover the 144 double-centred effects near the nominal rate.
    # The share covered is a property of this data set's effects as much as of the
    # posterior: over fit seeds 0-4 these chains cover 0.819, 0.854, 0.847, 0.8125 and 0.868
    # (2026-11-29, benchmarks/nuts_recovery_spread.py; docs/benchmarks.md, "The
    # exact-posterior recovery test, re-based"), a mean of 0.840 with an sd of 0.024 from
    # the chains' randomness alone, every chain at rank 2 (seeds 1-4; seed 0 is this test);
    # on data seed 21 the same fit covered 0.944 (twelfth session), and the two sets average
    # about the nominal 0.9.
    # Those were on Pyro's potential; on the direct log joint the chains run on since
    # (_nuts.potential, equal to rounding) fit seeds 0 and 1 covered 0.896 both, so the
    # seven together: mean 0.856, sd 0.033. Accept 0.75-0.98: 3.2 of those sd below the
    # mean (an sd from a few seeds is itself uncertain by about a third), and short of
    # covering nearly everything, which would mean intervals too wide.
    # The mean-field SVI fit covers 0.38-0.62 of these effects, far outside. The shorter
    # chains this test ran before (two of 150 + 150) covered 0.68-0.88 over the same fit
    # seeds: too short to hold still.
    data = synthetic(12, seed=DATA_SEEDS[1], pair_rank=TRUE_RANK, pair_scale=PAIR_SCALE,
                     samples_per_run=10)
    settings = Nuts()
    model = fit(data, seed=0, nuts=settings, workers=2, measured=False)
    assert model.components == settings.total
    # Component i is draw i // chains of chain i % chains.
    scales = model.posterior["pair_scale"][0].exp()
    for c in range(settings.chains):
        assert int((scales[c :: settings.chains].median(0).values > 0.3).sum()) == TRUE_RANK
    assert data.truth is not None
    truth = _double_centred(data.truth["pair_effect"])
    d = model.draws(settings.total, seed=1)  # every pooled draw once
    draws = _double_centred(torch.einsum("sjl,skl->sjk", d["pair_u"], d["pair_w"]).numpy())
    low, high = np.quantile(draws, [0.05, 0.95], axis=0)
    covered = float(((truth >= low) & (truth <= high)).mean())
    assert 0.75 <= covered <= 0.98, covered
