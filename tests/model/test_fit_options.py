"""fit's pair-term rank and what it records about its data."""

from __future__ import annotations

import dataclasses
import math

import pytest

from interplace.datasets import synthetic
from interplace.errors import InputError
from interplace.model import InterferenceModel, Query, fit
from interplace.topology import builtin


@pytest.mark.parametrize("rank", [-1, 1.5, True, "3"])
def test_a_bad_rank_is_refused(rank: object) -> None:
    with pytest.raises(InputError, match="rank must be an integer >= 0"):
        fit(synthetic(3, seed=0, samples_per_run=2), steps=5, min_steps=0, rank=rank)  # type: ignore[arg-type]


def test_rank_0_has_no_pair_sites(small_model_rank0: InterferenceModel) -> None:
    assert small_model_rank0.rank == 0
    assert not any(name.startswith("pair_") for name in small_model_rank0.posterior)
    assert small_model_rank0.info["rank"] == 0


def test_the_default_model_has_the_pair_sites(small_model: InterferenceModel) -> None:
    from interplace.model import DEFAULT_RANK

    r = small_model.rank
    assert r == DEFAULT_RANK == small_model.info["rank"]
    n, k = len(small_model.jobs), small_model.components
    assert small_model.posterior["pair_u"][0].shape == (k, n, r)
    assert small_model.posterior["pair_w"][0].shape == (k, n, r)
    assert small_model.posterior["pair_scale"][0].shape == (k, r)


def test_cross_device_runs_are_counted() -> None:
    topo = builtin("p4d")
    data = synthetic(4, seed=0, topology=topo, cross_gpu=1.0, pairs="distinct",
                     samples_per_run=2)
    m = fit(data, steps=20, min_steps=0, topology=topo, rank=0)
    assert m.info["cross_device_runs"] == 6  # every one of the 4 * 3 / 2 pair runs
    same = fit(synthetic(3, seed=0, samples_per_run=2), steps=20, min_steps=0, rank=0)
    assert same.info["cross_device_runs"] == 0


def test_a_job_alone_still_runs_at_its_reference_with_the_pair_term(
    small_model: InterferenceModel,
) -> None:
    # The pair term scales co-runners' pressure; with no co-runner there is nothing to scale,
    # and the job runs at its record, raised where its co-located level says the record was
    # low (reference_level).
    p = small_model.posterior_speed([Query("job0", ())])
    b = small_model.draws(500)["iso_bias"][:, 0].clamp_min(0.0).exp().mean()
    assert float(p.mean[0]) == pytest.approx(float(b), rel=1e-9)


def test_a_diverging_fit_raises_one_error_and_leaves_validation_as_it_was() -> None:
    # An absurd learning rate sends the first step's parameters to infinity, so the next loss
    # is NaN. The fit must say so as an InputError (the suite runs with warnings as errors, so
    # Pyro's own NaN warning escaping would fail this test too), and the validation switch it
    # turns off for SVI must be back on afterwards.
    import pyro

    assert pyro.infer.is_validation_enabled()
    with pytest.raises(InputError, match="the fit diverged"):
        fit(synthetic(3, seed=0, samples_per_run=2), steps=60, min_steps=0, lr=1e6)
    assert pyro.infer.is_validation_enabled()
    assert pyro.poutine.is_validation_enabled()


class _PyroSVI:
    """What fit's ``_SVI`` stands in for: Pyro's own SVI step with a per-parameter
    ``pyro.optim.ClippedAdam`` and ``Trace_ELBO``, parameter trace and all."""

    def __init__(self, model: object, guide: object, lr: float, steps: int) -> None:
        import pyro.optim
        from pyro.infer import SVI, Trace_ELBO

        self.optim = pyro.optim.ClippedAdam(
            {"lr": lr, "clip_norm": 10.0, "lrd": 0.1 ** (1 / steps)}
        )
        self.svi = SVI(model, guide, self.optim, Trace_ELBO(max_plate_nesting=2))

    def step(self, *args: object) -> float:
        return float(self.svi.step(*args))

    def scale_lr(self, factor: float) -> None:
        for opt in self.optim.optim_objs.values():
            for group in opt.param_groups:
                group["lr"] *= factor


@pytest.mark.slow  # four 250-step fits, two through Pyro's SVI: about 40 s; the direct
# ELBO's step-by-step checks below run by default
def test_the_lean_svi_step_gives_pyros_numbers_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fit steps the guide's parameters with one optimiser and a guide without param
    # statements or plates (for speed); through Pyro's ELBO every step (DIRECT off; the
    # direct ELBO is checked against Pyro's in the next test), Pyro's SVI with AutoNormal
    # must give the very same posterior, second stage included. Families, the pair term,
    # cross-device runs, the learning-rate drop at the first plateau (rel_tol 10: at step
    # 200 of 250) and the tempered likelihood are all exercised. One restart: several are
    # stepped together by _BatchSVI after their first step, not by _SVI (test_restarts.py
    # holds each batched restart to the restart run alone).
    import torch
    from pyro.infer.autoguide import AutoNormal

    from interplace.model import _fit

    topo = builtin("p4d")
    data = synthetic(6, seed=3, topology=topo, cross_gpu=0.3, samples_per_run=3)
    families = {f"job{i}": f"fam{i % 2}" for i in range(6)}

    def run() -> InterferenceModel:
        return fit(data, seed=1, steps=250, min_steps=0, rel_tol=10.0, topology=topo,
                   family=families, restarts=1, temper=1.5)

    monkeypatch.setattr(_fit._SVI, "DIRECT", False)
    lean = run()
    monkeypatch.setattr(_fit, "_SVI", _PyroSVI)
    monkeypatch.setattr(_fit, "_Normal", AutoNormal)
    reference = run()
    assert lean.info["steps"] == reference.info["steps"]
    assert lean.posterior.keys() == reference.posterior.keys()
    for name, (loc, scale) in lean.posterior.items():
        assert torch.equal(loc, reference.posterior[name][0]), name
        assert torch.equal(scale, reference.posterior[name][1]), name
    assert lean.measured is not None and reference.measured is not None
    assert (lean.measured.offset == reference.measured.offset).all()


@pytest.mark.parametrize("variant", ["rich", "speeds only", "counters only"])
def test_the_direct_elbo_is_pyros_from_the_same_draws(
    monkeypatch: pytest.MonkeyPatch, variant: str
) -> None:
    # After its first step fit computes the ELBO itself (the flattened guide's draw scored by
    # the net's log_joint), not through Pyro's traces, and steps the guide's parameters as
    # two flat tensors whose pieces the guide's own parameters are. At the same RNG state
    # both must draw the same normals (the state after them is equal) and give the same
    # loss and gradient (each parameter's piece of the flat gradient) up to
    # rounding: sums of a few thousand float64 terms, each |term| < 1e4, differ by far less
    # than 1e-9 relatively; a wrong site, prior, Jacobian or temper would be off by >= 1e-3.
    # Checked at three steps of a fit with families, the pair term, cross-device runs and a
    # tempered likelihood ("rich"), and of fits with only speeds or only counters.
    import torch

    from interplace.model import _fit

    topo = builtin("p4d")
    data = synthetic(6, seed=3, topology=topo, cross_gpu=0.3, samples_per_run=3)
    if variant == "speeds only":
        data = dataclasses.replace(data, samples=None)
    elif variant == "counters only":
        alone = data.runs[data.runs["run_id"].str.startswith("iso/")]
        assert data.samples is not None
        samples = data.samples[data.samples["run_id"].isin(alone["run_id"])]
        data = dataclasses.replace(data, runs=alone, samples=samples)
    checks: list[tuple[torch.Tensor, ...]] = []

    class Checked(_fit._SVI):
        def step(self, *args: torch.Tensor) -> float:
            if self.params and len(checks) < 3:
                flat = self.flatten()
                sites = [*flat.locs, *flat.scales]  # the guide's own parameters, site order
                state = torch.get_rng_state()
                ref = self.elbo.differentiable_loss(self.model, self.guide, *args)
                ref_grads = torch.autograd.grad(ref, sites)
                after_ref = torch.get_rng_state()
                torch.set_rng_state(state)
                z, log_q = flat.draw()
                direct = log_q - self.model.log_joint(flat.sites(z), *args)
                # fit's steps take the log joint in its two parts (prior, likelihood)
                prior, likelihood = self.model.log_joint_parts(flat.sites(z), *args)
                assert float((prior + likelihood - log_q).detach()) == pytest.approx(
                    float(-direct.detach()), rel=1e-12)
                g_loc, g_scale = torch.autograd.grad(direct, flat.params)
                grads = [
                    g.view(p.shape)
                    for g, p in zip((*g_loc.split(flat.sizes), *g_scale.split(flat.sizes)),
                                    sites, strict=True)
                ]
                assert torch.equal(torch.get_rng_state(), after_ref)
                checks.append((ref.detach(), direct.detach(), *ref_grads, *grads))
                torch.set_rng_state(state)
            return super().step(*args)

    monkeypatch.setattr(_fit, "_SVI", Checked)
    # One restart: several are stepped together by _BatchSVI after their first step (its
    # test, in test_restarts.py, holds each to the restart run alone).
    fit(data, seed=1, steps=40, min_steps=0, topology=topo, measured=False, restarts=1,
        **({"family": {f"job{i}": f"fam{i % 2}" for i in range(6)}, "temper": 1.5}
           if variant == "rich" else {}))
    assert len(checks) == 3
    for ref, direct, *grads in checks:
        assert float(direct) == pytest.approx(float(ref), rel=1e-9)
        half = len(grads) // 2
        for g_ref, g in zip(grads[:half], grads[half:], strict=True):
            torch.testing.assert_close(g, g_ref, rtol=1e-9, atol=1e-9)


def test_the_flat_guide_steps_as_one_tensor_per_parameter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # From its second step fit holds the guide's parameters and Adam's moments in two flat
    # tensors (_FlatGuide) and takes the gradient of the log joint's prior and likelihood
    # in two passes (_SVI._direct), for speed. The reference is the step it replaced: each
    # site drawn and scored on its own parameters, one pass through log_joint, Adam over
    # one tensor per parameter. Both take the same normals and the same elementwise
    # operations, summed in the same order, so the fits agree: bit for bit on the CPUs
    # measured (Lucid's fits of seed 0 too, with and without families), and the tolerance leaves
    # room only for a CPU whose vectorised kernels round an entry of the flat tensors by
    # an ulp (1e-16 relative, grown over 60 steps to far under 1e-9); a site's values in
    # another's place, a wrong scale or a skipped update would be off by >= 1e-3. Families,
    # the pair term, cross-device runs and a tempered likelihood, one restart (several are
    # stepped by _BatchSVI, which does not flatten).
    import torch
    from torch.distributions import transform_to

    from interplace.model import _fit
    from interplace.model._net import _HALF_LOG_2PI

    class PerParameter(_fit._SVI):
        def step(self, *args: torch.Tensor) -> float:
            if not self.params:
                return super().step(*args)  # the first step, through Pyro, as fit's
            guide = self.guide
            assert guide._sites is not None
            to_scale = transform_to(guide.scale_constraint)
            latent: dict[str, torch.Tensor] = {}
            log_q: torch.Tensor | float = 0.0
            for name, *_ in guide._sites:
                loc = getattr(guide.locs, name + "_unconstrained")
                scale = to_scale(getattr(guide.scales, name + "_unconstrained"))
                eps = torch.empty(loc.shape, dtype=loc.dtype).normal_()
                latent[name] = loc + eps * scale
                log_q = log_q + (-0.5 * eps**2 - scale.log() - _HALF_LOG_2PI).sum()
            objective = torch.as_tensor(log_q) - self.model.log_joint(latent, *args)
            objective.backward()
            self.update()  # Adam over self.params, never flattened here: one per parameter
            return float(objective.detach())

    topo = builtin("p4d")
    data = synthetic(6, seed=3, topology=topo, cross_gpu=0.3, samples_per_run=3)

    def run() -> InterferenceModel:
        return fit(data, seed=1, steps=60, min_steps=0, topology=topo, measured=False,
                   restarts=1, temper=1.5,
                   family={f"job{i}": f"fam{i % 2}" for i in range(6)})

    flat = run()
    monkeypatch.setattr(_fit, "_SVI", PerParameter)
    reference = run()
    assert flat.info["steps"] == reference.info["steps"] == 60
    assert flat.posterior.keys() == reference.posterior.keys()
    moved = 0.0
    for name, (loc, scale) in flat.posterior.items():
        ref_loc, ref_scale = reference.posterior[name]
        torch.testing.assert_close(loc, ref_loc, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(scale, ref_scale, rtol=1e-9, atol=1e-12)
        moved = max(moved, float((ref_scale.log() - math.log(0.05)).abs().max()))
    assert moved > 0.01  # the scales were stepped (they start at 0.05), not left alone


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"seed": -1}, r"seed must be an integer in \[0, 2\*\*63\)"),
        ({"seed": 2**70}, r"seed must be an integer in \[0, 2\*\*63\)"),
        ({"rel_tol": float("nan")}, "rel_tol must be a finite number >= 0"),
        ({"rel_tol": "x"}, "rel_tol must be a finite number >= 0"),
        ({"device": None}, "device must be 'cpu' or 'cuda'"),
        ({"hyper": {"demand_loc": 0.0}}, "hyper must be a Hyper, not dict"),
        ({"topology": "pcie-8gpu"}, "topology must be a Topology"),
        ({"full_scale": {"gpu_util_pct": "x"}}, "full_scale of 'gpu_util_pct' must be"),
        # (1, 2) came back from a save as ("1", "2"); a string was refused letter by letter
        ({"resources": (1, 2)}, "resource names must be non-empty text, not 1"),
        ({"resources": "gpu_compute"}, "resources must be a sequence of resource names"),
        ({"resources": None}, "resources must be a sequence of resource names"),
    ],
)
def test_bad_fit_options_are_one_line_errors(option: dict[str, object], message: str) -> None:
    # Each of these ended in numpy's, torch's or Python's own error, some after the fit ran.
    with pytest.raises(InputError, match=message):
        fit(synthetic(3, seed=0, samples_per_run=2), steps=5, min_steps=5, restarts=1,
            **option)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # A prior's scale of 0 made the fit "diverge" (the data blamed), a negative one ended
        # in torch's "normal expects all elements of std >= 0.0".
        ({"threshold_scale": 0.0}, "hyper-parameter threshold_scale must be > 0, not 0.0"),
        ({"pair_scale_scale": -1.0}, "hyper-parameter pair_scale_scale must be > 0"),
        ({"measure_noise": 0.0}, "hyper-parameter measure_noise must be > 0"),
        ({"speed_df": "4"}, "hyper-parameter speed_df must be a finite number, not '4'"),
        ({"demand_loc": math.inf}, "hyper-parameter demand_loc must be a finite number"),
        ({"cold_kernel_weight": 1.5}, r"cold_kernel_weight must lie in \[0, 1\], not 1.5"),
        ({"cold_kernel_weight": -0.1}, r"cold_kernel_weight must lie in \[0, 1\]"),
        ({"direct_weight": 2.0}, r"direct_weight must lie in \[0, 1\], not 2.0"),
        ({"direct_weight": math.nan}, "hyper-parameter direct_weight must be a finite number"),
    ],
)
def test_bad_hyper_parameters_are_input_errors(values: dict[str, object], message: str) -> None:
    from interplace.model import Hyper

    with pytest.raises(InputError, match=message):
        Hyper(**values)  # type: ignore[arg-type]
    assert Hyper(demand_loc=-5.0, sens_slope_loc=0.0).demand_loc == -5.0  # locations: any


def test_a_torch_device_is_a_device() -> None:
    import torch

    m = fit(synthetic(3, seed=0, samples_per_run=2), steps=5, min_steps=5, restarts=1,
            device=torch.device("cpu"))  # type: ignore[arg-type]
    assert m.jobs == ("job0", "job1", "job2")


def test_queries_that_are_not_what_they_should_be(small_model: InterferenceModel) -> None:
    import pandas as pd

    m = small_model
    empty = m.posterior_speed([], num_samples=10)
    assert empty.speed.shape == (10, 0)
    assert empty.q05.shape == empty.q95.shape == empty.sd.shape == empty.mean.shape == (0,)
    assert len(m.predict_frame(pd.DataFrame({"job": [], "co_runner": []}))) == 0
    with pytest.raises(InputError, match="query 0 is a tuple, not a Query"):
        m.posterior_speed([("job0", ("job1",))])  # type: ignore[list-item]
    with pytest.raises(InputError, match="co_runners must be a sequence of names, not the str"):
        m.predict("job0", "job1")
    with pytest.raises(InputError, match="each shares entry must be a tuple of resource names"):
        Query("job0", ("job1",), shares=("pcie_h2d",))  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"seed must be an integer in \[0, 2\*\*63\)"):
        m.posterior_speed([Query("job0", ("job1",))], seed=-1)
    # Spaces around a job's name are stripped as around its co-runners'.
    row = m.queries_from_frame(pd.DataFrame({"job": [" job0 "], "co_runner": [" job1 "]}))
    assert row == [Query("job0", ("job1",))]
    # A job named with a "+" (or with spaces around it) is queried as named: they were
    # fitted, then read back as "gemm" and "memcpy" (unknown jobs).
    named = dataclasses.replace(m, jobs=("gemm+memcpy", " padded ", "job2", "job3"))
    row = named.queries_from_frame(
        pd.DataFrame({"job": [" padded ", "job2"], "co_runner": ["gemm+memcpy", " padded "]}))
    assert row == [Query(" padded ", ("gemm+memcpy",)), Query("job2", (" padded ",))]
    both = dataclasses.replace(m, jobs=("a+b", "a", "b", "c"))
    with pytest.raises(InputError, match="pairs row 0: co_runner 'a\\+b' names a job and also"):
        both.queries_from_frame(pd.DataFrame({"job": ["a"], "co_runner": ["a+b"]}))
    with pytest.raises(InputError, match="pairs row 0: job 0 is not a job name"):
        m.queries_from_frame(pd.DataFrame({"job": [0], "co_runner": ["job1"]}))


def test_evaluate_refuses_its_own_arguments_in_fit_kwargs_and_bad_seeds() -> None:
    from interplace.model import evaluate

    data = synthetic(3, seed=0, samples_per_run=2)
    with pytest.raises(InputError, match="fit_kwargs may not set seed, steps"):
        evaluate(data, fit_kwargs={"seed": 3, "steps": 3})
    with pytest.raises(InputError, match=r"seed must be an integer in \[0, 2\*\*63\)"):
        evaluate(data, seed=-1)


def test_a_fit_records_what_its_last_bits_depend_on(
    small_model: InterferenceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fits are the same bit for bit only on one machine and build (docs/benchmarks.md, "Fits
    # differ by CPU"): the fit says which.
    import torch

    from interplace.model._fit import build_info

    build = small_model.info["build"]
    assert build["torch"] == torch.__version__
    assert build["cpu_capability"] == str(torch.backends.cpu.get_cpu_capability())
    assert isinstance(build["mkl"], bool)
    for name in ("ATEN_CPU_CAPABILITY", "MKL_CBWR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    assert build_info()["kernel_settings"] == {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}
