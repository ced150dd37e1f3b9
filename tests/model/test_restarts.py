"""fit's restarts (a mixture posterior) and tempered likelihood, and the mixture model's I/O."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from interplace.datasets import CoLocationData, synthetic
from interplace.errors import InputError
from interplace.model import InterferenceModel, Query, _fit, fit
from interplace.model._fit import (
    MIXTURE_MAX_SIZE,
    MIXTURE_RESTARTS,
    MIXTURE_TEMPER,
    restart_seed,
)

from .conftest import SMALL_STEPS


@pytest.fixture(scope="module")
def mixture(small_data: CoLocationData) -> InterferenceModel:
    return fit(small_data, seed=0, steps=SMALL_STEPS, min_steps=SMALL_STEPS, restarts=3)


@pytest.mark.parametrize("restarts", [0, -1, 1.5, True, "2"])
def test_bad_restarts_are_refused(restarts: object) -> None:
    with pytest.raises(InputError, match="restarts must be an integer >= 1"):
        fit(synthetic(3, seed=0, samples_per_run=2), steps=5, min_steps=0, restarts=restarts)  # type: ignore[arg-type]


@pytest.mark.parametrize("temper", [0, -1.0, math.nan, math.inf, True, "2"])
def test_bad_temper_is_refused(temper: object) -> None:
    with pytest.raises(InputError, match="temper must be a finite number > 0"):
        fit(synthetic(3, seed=0, samples_per_run=2), steps=5, min_steps=0, temper=temper)  # type: ignore[arg-type]


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "2"])
def test_bad_workers_are_refused(workers: object) -> None:
    with pytest.raises(InputError, match="workers must be an integer >= 1"):
        fit(synthetic(3, seed=0, samples_per_run=2), steps=5, min_steps=0, workers=workers)  # type: ignore[arg-type]


def test_workers_do_not_change_a_fit_of_several_restarts(
    mixture: InterferenceModel, small_data: CoLocationData
) -> None:
    # The restarts run together in this process whatever workers says (it spreads NUTS
    # chains only), so the model is the same bit for bit.
    par = fit(small_data, seed=0, steps=SMALL_STEPS, min_steps=SMALL_STEPS, restarts=3,
              workers=2)
    assert par.info["restart_steps"] == mixture.info["restart_steps"]
    for name, (loc, scale) in mixture.posterior.items():
        assert torch.equal(par.posterior[name][0], loc), name
        assert torch.equal(par.posterior[name][1], scale), name


def test_restarts_stepped_together_follow_each_restart_run_alone(
    small_data: CoLocationData, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each batched restart draws its own normals, in the order its own run draws them, and
    # takes the same update: over a short fit the losses and the posterior agree with the
    # restarts run one by one up to rounding. A wrong draw or update differs by O(1) from
    # the second step on; rounding grows slowly (about 1e-11 in the loss after 50 steps here;
    # SVI's steps amplify it over thousands), hence the tolerance.
    steps = 40
    # Each run's losses by its schedule (kept alive here, so no two runs share a key), in the
    # order the runs start.
    losses: dict[_fit._Schedule, list[float]] = {}
    original = _fit._Schedule.record

    def record(self: _fit._Schedule, step: int, loss: float, bar: object) -> str | None:
        losses.setdefault(self, []).append(loss)
        return original(self, step, loss, bar)

    monkeypatch.setattr(_fit._Schedule, "record", record)
    together = fit(small_data, seed=0, steps=steps, min_steps=steps, restarts=3,
                   measured=False)
    batched = list(losses.values())
    losses.clear()

    def one_by_one(net_args: Any, tensors: Any, init_demands: Any, *, seeds: Any,
                   **kwargs: Any) -> list[_fit._Run]:
        return [_fit._svi(net_args, tensors, init, seed=seed, **kwargs)
                for seed, init in zip(seeds, init_demands, strict=True)]

    monkeypatch.setattr(_fit, "_svi_batch", one_by_one)
    alone = fit(small_data, seed=0, steps=steps, min_steps=steps, restarts=3, measured=False)
    assert len(batched) == len(losses) == 3
    for a, b in zip(batched, losses.values(), strict=True):
        # The first step is each run's own, the same to the bit. From the second on a run
        # alone sums its loss in another order than the batched step (the prior in one
        # piece, _SVI._direct), which moves the loss's last bit.
        assert a[0] == b[0]
        np.testing.assert_allclose(a, b, rtol=1e-9)
    for name, (loc, scale) in alone.posterior.items():
        torch.testing.assert_close(together.posterior[name][0], loc, rtol=1e-6, atol=1e-8)
        torch.testing.assert_close(together.posterior[name][1], scale, rtol=1e-6, atol=1e-8)


def test_a_batched_fit_raises_on_the_restart_that_diverges(
    small_data: CoLocationData, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = _fit._BatchSVI.step

    def step(self: _fit._BatchSVI, *args: torch.Tensor) -> list[float]:
        out = original(self, *args)
        return [out[0], math.nan, *out[2:]]

    monkeypatch.setattr(_fit._BatchSVI, "step", step)
    with pytest.raises(InputError, match=r"the fit diverged \(ELBO loss nan\) at step 1"):
        fit(small_data, seed=0, steps=5, min_steps=5, restarts=3)


@pytest.fixture(scope="module")
def single(small_data: CoLocationData) -> InterferenceModel:
    return fit(small_data, seed=0, steps=SMALL_STEPS, min_steps=SMALL_STEPS, restarts=1)


def test_small_data_gets_the_tempered_mixture_by_default(
    small_model: InterferenceModel,
) -> None:
    assert small_model.components == MIXTURE_RESTARTS
    assert (small_model.info["restarts"], small_model.info["temper"]) == (
        MIXTURE_RESTARTS, MIXTURE_TEMPER
    )


def test_data_over_the_size_limit_gets_one_plain_fit() -> None:
    # 24 jobs, every pair measured: 600 observations and about 1,900 counter groups, over
    # the limit of observations plus counter groups, so one untempered fit.
    data = synthetic(24, seed=0, samples_per_run=2)
    m = fit(data, seed=0, steps=20, min_steps=20)
    size = m.info["observations"] + m.info["counter_groups"]
    assert size > MIXTURE_MAX_SIZE
    assert (m.components, m.info["restarts"], m.info["temper"]) == (1, 1, 1.0)


def test_one_restart_is_untempered_unless_asked(single: InterferenceModel) -> None:
    assert (single.components, single.info["temper"]) == (1, 1.0)


def test_the_mixture_stacks_its_restarts_the_first_being_the_plain_fit(
    mixture: InterferenceModel, single: InterferenceModel, small_data: CoLocationData
) -> None:
    assert mixture.components == 3 and mixture.info["restarts"] == 3
    assert len(mixture.info["restart_steps"]) == 3
    assert mixture.info["steps"] == sum(mixture.info["restart_steps"])
    # Restart 0 runs with the fit's own seed: it is the one-restart fit at the same temper
    # (as SVI left it: the ceiling lift, which shifts iso_bias after SVI, is taken back), up
    # to the rounding of the restarts' steps taken together, which SVI's steps amplify (to
    # about 2e-6 after 400 steps here), so it is compared over a short fit (as in the test
    # above).
    short = 40
    together = fit(small_data, seed=0, steps=short, min_steps=short, restarts=3)
    first = fit(small_data, seed=0, steps=short, min_steps=short, restarts=1,
                temper=MIXTURE_TEMPER)

    def svi_loc(model: InterferenceModel, name: str) -> torch.Tensor:
        loc = model.posterior[name][0]
        if name != "iso_bias":
            return loc
        lift = model.info["ceiling_lift"]
        return loc - torch.tensor([lift.get(j, 0.0) for j in model.jobs], dtype=loc.dtype)

    for name, (loc, scale) in first.posterior.items():
        assert mixture.posterior[name][0].shape == (3, *loc.shape), name
        torch.testing.assert_close(svi_loc(together, name)[0], svi_loc(first, name),
                                   rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(together.posterior[name][1][0], scale, rtol=1e-9, atol=1e-12)
    # Other restarts start elsewhere, so they end elsewhere.
    demand = mixture.posterior["log_demand"][0]
    assert not torch.equal(demand[1], demand[0]) and not torch.equal(demand[2], demand[1])


def test_restart_seeds_are_distinct_and_the_first_is_the_seed() -> None:
    seeds = [restart_seed(s, k) for s in range(20) for k in range(4)]
    assert len(set(seeds)) == len(seeds)
    assert [restart_seed(s, 0) for s in range(20)] == list(range(20))


def test_draw_s_comes_from_component_s_mod_k(mixture: InterferenceModel) -> None:
    # Move component 1 of log_demand far away: exactly the draws s = 1 mod 3 follow it.
    loc, scale = mixture.posterior["log_demand"]
    shifted = loc.clone()
    shifted[1] += 50.0
    post = dict(mixture.posterior)
    post["log_demand"] = (shifted, scale)
    m = dataclasses.replace(mixture, posterior=post)
    d = m.draws(30, seed=0)["log_demand"]
    far = d.mean(dim=(1, 2)) > 25.0
    assert far.tolist() == [s % 3 == 1 for s in range(30)]
    # The other sites' draws are unchanged by the move (one RNG stream per site, fixed order).
    same = mixture.draws(30, seed=0)
    assert torch.equal(same["sens_eps"], m.draws(30, seed=0)["sens_eps"])


def test_a_mixture_predicts_and_is_reproducible(mixture: InterferenceModel) -> None:
    q = [Query("job0", ("job1",)), Query("job2", ())]
    a = mixture.posterior_speed(q, num_samples=60, seed=4)
    b = mixture.posterior_speed(q, num_samples=60, seed=4)
    assert torch.equal(a.speed, b.speed)
    assert ((a.mean > 0) & (a.mean < 1.5)).all()


def test_a_mixture_round_trips(mixture: InterferenceModel, tmp_path: Path) -> None:
    mixture.save(tmp_path / "m")
    loaded = InterferenceModel.load(tmp_path / "m")
    assert loaded.components == 3
    for name, (loc, scale) in mixture.posterior.items():
        assert torch.equal(loaded.posterior[name][0], loc), name
        assert torch.equal(loaded.posterior[name][1], scale), name
    q = [Query("job0", ("job1",))]
    assert torch.equal(
        loaded.posterior_speed(q, num_samples=20).speed,
        mixture.posterior_speed(q, num_samples=20).speed,
    )


def test_a_mixture_whose_shapes_disagree_with_its_components_is_refused(
    mixture: InterferenceModel, single: InterferenceModel
) -> None:
    with pytest.raises(InputError, match=r"posterior site .* expected"):
        dataclasses.replace(single, components=2)
    with pytest.raises(InputError, match=r"posterior site .* expected"):
        dataclasses.replace(mixture, components=1)
    with pytest.raises(InputError, match="components must be an integer >= 1"):
        dataclasses.replace(single, components=0)


def test_a_saved_components_count_that_is_not_an_integer_is_refused(
    mixture: InterferenceModel, tmp_path: Path
) -> None:
    import json

    d = mixture.save(tmp_path / "m")
    meta = json.loads((d / "model.json").read_text())
    meta["components"] = "3"
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="components must be an integer"):
        InterferenceModel.load(d)


@pytest.mark.slow  # two converged fits, about 16 s: statistical (the scale's ratio)
def test_tempering_narrows_the_posterior(small_data: CoLocationData) -> None:
    # A power posterior p(theta) p(y | theta)^4 is, where the likelihood dominates, about half
    # as wide (1/sqrt(4)) as the plain one; the mean-field guide follows the curvature, so the
    # typical scale of the per-job demands must shrink well past any fit-to-fit noise (the
    # scales of two plain fits with other seeds differ by a few percent).
    plain = fit(small_data, seed=0, steps=800, min_steps=800, restarts=1)
    hot = fit(small_data, seed=0, steps=800, min_steps=800, restarts=1, temper=4.0)
    ratio = (hot.posterior["log_demand"][1] / plain.posterior["log_demand"][1]).median()
    assert float(ratio) < 0.8
    assert hot.info["temper"] == 4.0



def test_a_version_5_model_loads_as_one_component_and_a_stacked_one_is_refused(
    mixture: InterferenceModel, single: InterferenceModel, tmp_path: Path
) -> None:
    import json

    from safetensors.torch import load_file, save_file

    def as_version_5(d: Path) -> None:
        meta = json.loads((d / "model.json").read_text())
        meta["format_version"] = 5
        meta.pop("components")
        meta.pop("sha256")  # nor the digest
        meta["measured"] = {k: meta["measured"][k] for k in ("scale", "noise")}  # nor a kernel
        (d / "model.json").write_text(json.dumps(meta))
        # Nor had version 5 the lifted pairs' spreads (version 8).
        tensors = load_file(str(d / "posterior.safetensors"))
        tensors.pop("measured.spread", None)
        save_file(tensors, str(d / "posterior.safetensors"))

    one = single.save(tmp_path / "one")
    as_version_5(one)
    assert InterferenceModel.load(one).components == 1
    stacked = mixture.save(tmp_path / "stacked")
    as_version_5(stacked)
    with pytest.raises(InputError, match=r"posterior site demand_mu has shape \(3, 5\)"):
        InterferenceModel.load(stacked)
