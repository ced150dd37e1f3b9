"""fit(nuts=...): exact inference by pooled NUTS chains, stored as point-mass components."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyro
import pytest
import torch

from interplace.datasets import CoLocationData
from interplace.errors import InputError
from interplace.model import InterferenceModel, Nuts, Query, fit
from interplace.model import _fit as fit_module
from interplace.model._fit import restart_seed
from interplace.model._net import SUPPORT
from interplace.model._nuts import Chain, pooled

# Short chains of shallow trees: these tests check the plumbing, not the sampler's accuracy
# (benchmarks/inference_gap.py and pair_calibration.py measure that).
SHORT = Nuts(chains=2, warmup=6, draws=3, max_tree_depth=3)
STEPS = 200


@pytest.fixture(scope="module")
def sampled(small_data: CoLocationData) -> InterferenceModel:
    return fit(small_data, seed=0, steps=STEPS, min_steps=STEPS, restarts=2, nuts=SHORT)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"chains": 0}, "NUTS chains must be an integer >= 1, not 0"),
        ({"warmup": 0}, "NUTS warmup must be an integer >= 1, not 0"),
        ({"draws": 2.5}, "NUTS draws must be an integer >= 1, not 2.5"),
        ({"chains": True}, "NUTS chains must be an integer >= 1, not True"),
        ({"max_tree_depth": 13}, "NUTS max_tree_depth must be at most 12, not 13"),
        ({"chains": 1, "draws": 1}, "NUTS needs at least 2 draws in all"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        Nuts(**kwargs)


def test_fit_refuses_settings_of_another_type(small_data: CoLocationData) -> None:
    with pytest.raises(InputError, match="nuts must be a Nuts"):
        fit(small_data, steps=5, min_steps=0, nuts={"chains": 2})  # type: ignore[arg-type]


def test_the_model_holds_every_draw_as_a_point_mass(sampled: InterferenceModel) -> None:
    assert sampled.components == SHORT.total == 6
    for name, (loc, scale) in sampled.posterior.items():
        assert loc.shape[0] == 6, name
        assert torch.equal(scale, torch.zeros_like(scale)), name
    info = sampled.info["nuts"]
    assert info["chains"] == 2 and info["draws"] == 3 and info["warmup"] == 6
    assert len(info["divergences"]) == len(info["accept_prob"]) == len(info["chain_seconds"]) == 2
    assert all(0 <= a <= 1 for a in info["accept_prob"])
    assert sampled.info["restarts"] == 2  # the SVI start
    # Draws of a point-mass mixture are the stored points themselves, whatever the seed.
    a, b = sampled.draws(6, seed=1), sampled.draws(6, seed=2)
    for name in a:
        assert torch.equal(a[name], b[name]), name
        loc = sampled.posterior[name][0]
        assert torch.equal(a[name], loc.exp() if SUPPORT[name] == "positive" else loc), name


@pytest.mark.slow  # two spawned interpreters: 10-30 s; the restarts' test covers spawn_map
def test_the_fit_is_seeded_and_workers_give_the_same_draws(
    small_data: CoLocationData, sampled: InterferenceModel
) -> None:
    again = fit(small_data, seed=0, steps=STEPS, min_steps=STEPS, restarts=2, nuts=SHORT,
                workers=2)
    for name in sampled.posterior:
        assert torch.equal(sampled.posterior[name][0], again.posterior[name][0]), name
    other = fit(small_data, seed=1, steps=STEPS, min_steps=STEPS, restarts=2, nuts=SHORT)
    assert not torch.equal(other.posterior["log_demand"][0], sampled.posterior["log_demand"][0])


def _record_chains(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Each chain's ``(net_args, tensors, start, seed)``, recorded as fit runs it."""
    seen: list[tuple[Any, ...]] = []
    real = fit_module.run_chain

    def spy(net_args: tuple[Any, ...], tensors: Any, start: dict[str, torch.Tensor],
            settings: Nuts, seed: int, name: str, bar: Any = None) -> Chain:
        seen.append((net_args, tensors, start, seed))
        return real(net_args, tensors, start, settings, seed, name, bar)

    monkeypatch.setattr(fit_module, "run_chain", spy)
    return seen


def test_chains_start_at_the_svi_components_untempered_and_seeded(
    small_data: CoLocationData, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _record_chains(monkeypatch)
    settings = Nuts(chains=3, warmup=2, draws=1, max_tree_depth=2)
    model = fit(small_data, seed=5, steps=50, min_steps=50, restarts=2, temper=1.5,
                nuts=settings, cold_scale=False, measured=False)
    # The exact posterior (temper, the network's last argument, 1), not the tempered one.
    assert [s[0][-1] for s in seen] == [1.0, 1.0, 1.0]
    assert [s[3] for s in seen] == [restart_seed(5, c) for c in range(3)]
    svi = fit(small_data, seed=5, steps=50, min_steps=50, restarts=2, temper=1.5,
              cold_scale=False, measured=False)
    for c, (_, _, start, _) in enumerate(seen):
        loc = svi.posterior["log_demand"][0][c % 2]
        assert torch.equal(start["log_demand"], loc)
        assert torch.equal(start["speed_noise"], svi.posterior["speed_noise"][0][c % 2].exp())
    assert model.components == 3


def _chain(value: float, draws: int) -> Chain:
    samples = {
        "log_demand": torch.full((draws, 2, 3), value) + torch.arange(draws).view(-1, 1, 1),
        "speed_noise": torch.full((draws,), math.exp(value)) * (1 + 0.01 * torch.arange(draws)),
    }
    return Chain(samples, divergences=int(value), accept_prob=0.8, step_size=0.1, seconds=1.0)


def test_pooled_draws_interleave_the_chains() -> None:
    post, info = pooled([_chain(0.0, 4), _chain(10.0, 4)])
    loc, scale = post["log_demand"]
    assert loc.shape == (8, 2, 3) and torch.equal(scale, torch.zeros_like(loc))
    # Component i is draw i // 2 of chain i % 2, so any first S components hold both chains.
    assert loc[:, 0, 0].tolist() == [0.0, 10.0, 1.0, 11.0, 2.0, 12.0, 3.0, 13.0]
    # A positive site is stored by its log, as SVI's locations are.
    noise = post["speed_noise"][0]
    assert torch.allclose(noise[:2], torch.tensor([0.0, 10.0], dtype=noise.dtype))
    assert info["divergences"] == [0, 10] and info["chains"] == 2
    # Each chain's median speed noise: exp(value) times the middle of 1 + 0.01 * (0..3).
    assert info["chain_speed_noise"] == pytest.approx([1.01, math.exp(10.0) * 1.01])
    # Chains far apart: the split R-hat of the speed noise is far above 1.
    assert info["rhat_speed_noise"] > 2
    # Chains that mix alike (each half of each chain holds the same two values): R-hat <= 1.
    mixing = {"speed_noise": torch.tensor([1.0, 2.0, 1.0, 2.0])}
    same = [Chain(mixing, 0, 0.8, 0.1, 1.0), Chain(mixing, 0, 0.8, 0.1, 1.0)]
    assert pooled(same)[1]["rhat_speed_noise"] <= 1.0


def test_a_sampled_model_saves_loads_and_predicts(
    sampled: InterferenceModel, tmp_path: Path
) -> None:
    path = sampled.save(tmp_path / "m")
    back = InterferenceModel.load(path)
    assert back.components == 6 and back.info["nuts"] == sampled.info["nuts"]
    for name in sampled.posterior:
        assert torch.equal(back.posterior[name][1], sampled.posterior[name][1]), name
    q = [Query("job0", ("job1",)), Query("job2", ("job3",))]
    a = sampled.posterior_speed(q, num_samples=6, seed=0)
    b = back.posterior_speed(q, num_samples=6, seed=0)
    assert torch.allclose(torch.as_tensor(a.mean), torch.as_tensor(b.mean))
    assert all(0 < m <= 1.5 for m in a.mean)
    assert sampled.measured is not None  # the second stage ran on the draws



def test_unless_told_otherwise_each_chain_starts_at_its_own_untempered_restart(
    small_data: CoLocationData, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts: list[dict[str, torch.Tensor]] = []
    real = fit_module.run_chain

    def spy(net_args: tuple[Any, ...], tensors: Any, start: dict[str, torch.Tensor],
            settings: Nuts, seed: int, name: str, bar: Any = None) -> Chain:
        starts.append(start)
        return real(net_args, tensors, start, settings, seed, name, bar)

    monkeypatch.setattr(fit_module, "run_chain", spy)
    settings = Nuts(chains=3, warmup=2, draws=1, max_tree_depth=2)
    model = fit(small_data, seed=3, steps=50, min_steps=50, nuts=settings, cold_scale=False,
                measured=False)
    # As many SVI restarts as chains, on the exact posterior the chains sample (small data
    # otherwise gets the tempered mixture).
    assert (model.info["restarts"], model.info["temper"]) == (3, 1.0)
    svi = fit(small_data, seed=3, steps=50, min_steps=50, restarts=3, temper=1.0,
              cold_scale=False, measured=False)
    for c, start in enumerate(starts):
        assert torch.equal(start["log_demand"], svi.posterior["log_demand"][0][c])
    assert not torch.equal(starts[0]["log_demand"], starts[1]["log_demand"])


def test_the_chains_potential_is_pyros_from_the_sample_sites(
    small_data: CoLocationData, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The chains run on InterferenceNet.log_joint, compiled, not on the potential Pyro
    # derives from the sample sites; at the start and at points around it, near and as far
    # as a chain wanders, both must give the same energy and gradient (up to float64
    # rounding over a few hundred terms).
    from pyro.infer.mcmc.util import initialize_model
    from pyro.ops.integrator import potential_grad

    from interplace.model._net import InterferenceNet
    from interplace.model._nuts import potential

    seen = _record_chains(monkeypatch)
    fit(small_data, seed=0, steps=50, min_steps=50, restarts=1, measured=False,
        nuts=Nuts(chains=1, warmup=1, draws=2, max_tree_depth=2))
    net_args, tensors, start, _ = seen[0]
    with pyro.settings.context(module_local_params=True), pyro.validation_enabled(False):
        net = InterferenceNet(*net_args)
        init = {k: v.log() if SUPPORT[k] == "positive" else v for k, v in start.items()}
        _, pyro_energy, _, _ = initialize_model(net, model_args=tensors)
        ours = potential(net, tensors, init)
        gen = torch.Generator().manual_seed(0)
        for scale in (0.0, 0.01, 0.1, 1.0):
            z = {k: v + scale * torch.randn(v.shape, generator=gen, dtype=v.dtype)
                 for k, v in init.items()}
            g0, v0 = potential_grad(pyro_energy, z)
            g1, v1 = potential_grad(ours, z)
            assert math.isclose(float(v0), float(v1), rel_tol=1e-12, abs_tol=1e-9)
            for k in z:
                assert torch.allclose(g0[k], g1[k], rtol=1e-10, atol=1e-10), k
