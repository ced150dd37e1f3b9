"""The counter kernel: a regression of pair speeds on both jobs' isolated readings."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interplace.datasets import CoLocationData
from interplace.errors import InputError
from interplace.model import Hyper, InterferenceModel, fit
from interplace.model._cells import (
    _cells_log_mean_speed,
    _pair_terms,
    _solve_offsets,
    cold_kernel_cells,
    example_draws,
    pair_log_speed,
    speed_blended,
)
from interplace.model._counterkernel import (
    GRID,
    MIN_CELLS,
    READING_FLOOR,
    CounterKernel,
    fit_counter_kernel,
    floored,
    kernel_readings,
)
from interplace.placement._cold import with_cold_jobs

from .conftest import SMALL_STEPS


def _smooth_data(
    seed: int, n_jobs: int = 16, noise: float = 0.02
) -> tuple[np.ndarray[Any, Any], ...]:
    """Every pair of ``n_jobs`` jobs, log speed a smooth function of both jobs' readings."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n_jobs, 2))
    job, co = np.divmod(np.arange(n_jobs * n_jobs), n_jobs)
    truth = -0.3 * np.tanh(z[job, 0] + z[co, 1]) - 0.1
    y = truth + noise * rng.standard_normal(job.size)
    return z, job, co, y, truth


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_cold_jobs_pairs_are_recovered_from_their_readings(seed: int) -> None:
    # Four jobs lose every pair; the other twelve's 144 pairs train the regression, which
    # predicts the cold jobs' 112 pairs from the readings alone. The truth varies by 0.3 in log
    # speed over the readings (the mean predictor's error is about 0.2), the noise is 0.02:
    # a regression that reads the two jobs' readings gets within a third of the mean's error
    # (measured 0.12-0.21 of it over these seeds); one that ignored them would not.
    z, job, co, y, truth = _smooth_data(seed)
    cold = np.arange(4)
    warm = ~(np.isin(job, cold) | np.isin(co, cold))
    n = np.ones(job.size)
    kernel, info = fit_counter_kernel(job[warm], co[warm], y[warm], n[warm], z, seed=seed)
    assert kernel is not None and info["cells"] == 144
    assert (info["length"], info["scale"], info["level"]) in GRID
    pred = kernel.log_speed(job[warm], co[warm], y[warm], n[warm], z, job[~warm], co[~warm])
    err = np.abs(pred - truth[~warm]).mean()
    mean_err = np.abs(y[warm].mean() - truth[~warm]).mean()
    assert err < mean_err / 3


def test_fit_is_seeded() -> None:
    z, job, co, y, _ = _smooth_data(0)
    n = np.ones(job.size)
    a = fit_counter_kernel(job, co, y, n, z, seed=3)
    b = fit_counter_kernel(job, co, y, n, z, seed=3)
    assert a == b


def test_no_kernel_without_readings_or_pairs_enough() -> None:
    z, job, co, y, _ = _smooth_data(0, n_jobs=8)
    n = np.ones(job.size)
    blank = np.full_like(z, np.nan)
    assert fit_counter_kernel(job, co, y, n, blank, seed=0) == (None, {"cells": 0})
    few = slice(0, MIN_CELLS - 1)
    kernel, info = fit_counter_kernel(job[few], co[few], y[few], n[few], z, seed=0)
    assert kernel is None and info["cells"] == MIN_CELLS - 1
    # Jobs without a reading leave their pairs out of the regression.
    z2 = z.copy()
    z2[:6, 0] = np.nan
    kernel, info = fit_counter_kernel(job, co, y, n, z2, seed=0)
    assert kernel is None and info["cells"] == 4
    # A constant reading cannot be standardised: that column is not used.
    z3 = z.copy()
    z3[:, 1] = 0.5
    assert kernel_readings(z3)[0] == (0,)


@settings(max_examples=20, deadline=None)
@given(st.permutations(list(range(10))))
def test_predictions_do_not_depend_on_the_job_order(perm: list[int]) -> None:
    # The same kernel on the same pairs with the jobs renumbered predicts the same speeds.
    z, job, co, y, _ = _smooth_data(5, n_jobs=10)
    n = np.ones(job.size)
    kernel, _ = fit_counter_kernel(job, co, y, n, z, seed=0)
    assert kernel is not None
    p = np.asarray(perm)
    inverse = np.argsort(p)
    qj, qk = np.array([0, 3, 9]), np.array([1, 3, 2])
    a = kernel.log_speed(job, co, y, n, z, qj, qk)
    b = kernel.log_speed(p[job], p[co], y, n, z[inverse], p[qj], p[qk])
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)


def test_refusals() -> None:
    good: dict[str, Any] = dict(length=1.0, scale=0.3, level=0.1, noise=0.1, columns=(0,),
                                centre=(0.0,), spread=(1.0,))
    CounterKernel(**good)
    with pytest.raises(InputError, match="length must be a finite float > 0"):
        CounterKernel(**{**good, "length": -1.0})
    with pytest.raises(InputError, match="columns, centre and spread must match"):
        CounterKernel(**{**good, "centre": (0.0, 1.0)})
    with pytest.raises(InputError, match="spread > 0"):
        CounterKernel(**{**good, "spread": (0.0,)})
    kernel = CounterKernel(**good)
    z = np.array([[0.0], [1.0], [np.nan]])
    job, co = np.array([0, 1]), np.array([1, 0])
    with pytest.raises(InputError, match="a queried job lacks a reading"):
        kernel.log_speed(job, co, np.zeros(2), np.ones(2), z, np.array([2]), np.array([0]))
    with pytest.raises(InputError, match="readings lack the kernel's columns"):
        kernel.features(np.zeros((3, 0)))


def test_the_kernel_reads_only_cold_unmeasured_pairs() -> None:
    z, job, co, y, _ = _smooth_data(1, n_jobs=8)
    cold = np.isin(job, [0]) | np.isin(co, [0, 1])  # job 0 cold; job 1 never a co-runner
    j, k, yy, n = job[~cold], co[~cold], y[~cold], np.ones(int((~cold).sum()))
    kernel, _ = fit_counter_kernel(j, k, yy, n, z, seed=0)
    assert kernel is not None
    flat, g = cold_kernel_cells(8, (j, k, yy, n), z, kernel)
    touched = np.zeros(64, dtype=bool)
    touched[flat] = True
    touched = touched.reshape(8, 8)
    # Row 0 (never a victim) and columns 0 and 1 (never co-runners): 8 + 7 + 7 cells.
    assert flat.size == 22 and touched.sum() == 22
    assert touched[0].all() and touched[:, 0].all() and touched[:, 1].all()
    np.testing.assert_allclose(g, kernel.log_speed(j, k, yy, n, z, flat // 8, flat % 8))
    only = np.zeros((8, 8), dtype=bool)
    only[0, 3] = True
    limited, _ = cold_kernel_cells(8, (j, k, yy, n), z, kernel, cells=only)
    assert limited.tolist() == [3]
    lost = np.full_like(z, np.nan)  # no readings (a model saved without them): no pairs
    assert cold_kernel_cells(8, (j, k, yy, n), lost, kernel)[0].size == 0


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), weight=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
       shift=st.floats(-0.6, 0.0))
def test_speed_blend_reports_the_geometric_mean_of_the_two_speeds(
    seed: int, weight: float, shift: float
) -> None:
    # The blended pairs' posterior mean speed (over the same draws) is the weighted geometric
    # mean of the structure's and the kernel's, to the offset solver's 1e-10 (1e-9 allowed)
    # wherever the blend lies below the job's level; the other pairs keep their targets and
    # offsets bit for bit; each moved pair's target is the mean log speed its offset reaches.
    d = example_draws(3, seed=seed)
    terms = _pair_terms(d)
    target = pair_log_speed(d) - 0.05
    offset = _solve_offsets(d, target)
    cells = np.array([1, 5, 6])
    g = (target.reshape(-1)[cells] + shift).numpy()  # at or below the structure's: reachable
    t, c = speed_blended(d, target, offset, cells, g, weight, terms=terms)
    at = torch.as_tensor(cells)
    before = _cells_log_mean_speed(terms, offset, at, 3)
    after = _cells_log_mean_speed(terms, c, at, 3)
    want = (1 - weight) * before + weight * torch.as_tensor(g)
    assert float((after - want).abs().max()) <= 1e-9
    rest = np.setdiff1d(np.arange(9), cells)
    assert torch.equal(t.reshape(-1)[rest], target.reshape(-1)[rest])
    assert torch.equal(c.reshape(-1)[rest], offset.reshape(-1)[rest])
    reached = pair_log_speed(d, c).reshape(-1)[at]
    # (the offset solver meets a target to 1e-10)
    torch.testing.assert_close(t.reshape(-1)[at], reached, rtol=0, atol=1e-9)


def test_a_blend_beyond_the_level_stays_at_it() -> None:
    d = example_draws(3, seed=0)
    target = pair_log_speed(d) - 0.05
    offset = _solve_offsets(d, target)
    t, c = speed_blended(d, target, offset, np.array([1]), np.array([2.0]), 0.5)
    assert float(c[0, 1]) == -12.0  # the co-runner's pressure all but off: the job's level
    assert float(t[0, 1]) == float(pair_log_speed(d, c)[0, 1]) > float(target[0, 1])


def test_a_fit_averages_only_its_cold_jobs_pairs_with_the_kernel(
    cold_data: tuple[CoLocationData, list[str]], cold_model: InterferenceModel
) -> None:
    # The weight enters the second stage only: without it the structure is the same fit, and
    # the completion differs exactly on the pairs with a cold job.
    train, cold = cold_data
    plain = fit(train, seed=0, steps=SMALL_STEPS, min_steps=SMALL_STEPS,
                hyper=Hyper(cold_kernel_weight=0.0))
    a, b = cold_model.measured, plain.measured
    assert a is not None and b is not None and b.kernel is None and a.kernel is not None
    for name, (loc, scale) in plain.posterior.items():
        assert torch.equal(loc, cold_model.posterior[name][0]), name
        assert torch.equal(scale, cold_model.posterior[name][1]), name
    idx = [cold_model.jobs.index(j) for j in cold]
    touched = np.zeros(a.expected.shape, dtype=bool)
    touched[idx, :] = touched[:, idx] = True
    assert np.array_equal(a.expected[~touched], b.expected[~touched])
    # The offsets are solved to |mean log speed - target| <= 1e-10 in batches whose shapes
    # differ, so their last bits may (at slopes of 0.01 or more, 1e-8 in the offset).
    np.testing.assert_allclose(a.offset[~touched], b.offset[~touched], rtol=0, atol=1e-7)
    assert (a.expected[touched] != b.expected[touched]).all()
    info = cold_model.info["completion"]["counter_kernel"]
    assert info["pairs"] == int(touched.sum()) and "counter_kernel" not in plain.info["completion"]


def test_a_job_added_later_gets_the_kernel_as_the_fit_s_cold_jobs_do(
    cold_model: InterferenceModel, tmp_path: Path
) -> None:
    # The kernel reads every resource of this fit, so the new job gives every reading (a job
    # without one borrows its mates' effects alone, as before the kernel).
    readings = {"new": {"gpu_util_pct": 70.0, "mem_util_pct": 30.0, "pcie_rx_kbps": 2e6,
                        "pcie_tx_kbps": 1e6, "host_cpu_busy_pct": 20.0}}
    grown = with_cold_jobs(cold_model, readings)
    assert cold_model.measured is not None
    off = dataclasses.replace(
        cold_model, measured=dataclasses.replace(cold_model.measured, kernel_weight=0.0)
    )
    without = with_cold_jobs(off, readings)
    a, b = grown.measured, without.measured
    assert a is not None and b is not None
    n = len(cold_model.jobs)
    assert np.array_equal(a.expected[:n, :n], b.expected[:n, :n])
    assert (a.expected[n] != b.expected[n]).any() and (a.expected[:, n] != b.expected[:, n]).any()
    partial = {"new": {"gpu_util_pct": 70.0, "mem_util_pct": 30.0}}
    c, d = with_cold_jobs(cold_model, partial).measured, with_cold_jobs(off, partial).measured
    assert c is not None and d is not None and np.array_equal(c.expected, d.expected)
    # The saved kernel is all a loaded model needs to do the same.
    loaded = InterferenceModel.load(cold_model.save(tmp_path / "m"))
    again = with_cold_jobs(loaded, readings).measured
    assert again is not None
    np.testing.assert_allclose(again.expected, a.expected, rtol=0, atol=1e-12)


def test_a_zero_reading_is_a_low_reading_to_the_kernel(cold_model: InterferenceModel) -> None:
    # A job reading 0 on a resource (Lucid's RL jobs read 0% memory utilisation) has no log
    # reading for its mates, but the kernel reads it at the floor: its pairs get the kernel.
    zero = {"new": {"gpu_util_pct": 70.0, "mem_util_pct": 30.0, "pcie_rx_kbps": 2e6,
                    "pcie_tx_kbps": 1e6, "host_cpu_busy_pct": 0.0}}
    grown = with_cold_jobs(cold_model, zero)
    assert grown.info["isolated_below_floor"]["new"] == ["host_cpu"]
    assert "host_cpu" not in grown.info["isolated_readings"]["new"]
    assert cold_model.measured is not None
    off = dataclasses.replace(
        cold_model, measured=dataclasses.replace(cold_model.measured, kernel_weight=0.0)
    )
    a, b = grown.measured, with_cold_jobs(off, zero).measured
    assert a is not None and b is not None
    n = len(cold_model.jobs)
    assert (a.expected[n] != b.expected[n]).any()
    # The floor: its log, for the reading below it (0 included) and no other.
    x = floored(np.array([[np.nan, -1.0, np.nan]]), np.array([[True, False, False]]))
    assert x[0, 0] == math.log(READING_FLOOR) and x[0, 1] == -1.0 and np.isnan(x[0, 2])


def test_a_model_without_its_readings_adds_jobs_without_the_kernel(
    cold_model: InterferenceModel,
) -> None:
    # Readings dropped from the model (as a data set without counters has none): the stored
    # kernel has no measured pair to regress on, so added jobs borrow alone, as before.
    blank = dataclasses.replace(
        cold_model, info={**cold_model.info, "isolated_readings": {}, "isolated_below_floor": {}}
    )
    assert blank.measured is not None
    off = dataclasses.replace(
        blank, measured=dataclasses.replace(blank.measured, kernel_weight=0.0)
    )
    readings = {"new": {"gpu_util_pct": 70.0, "mem_util_pct": 30.0, "pcie_rx_kbps": 2e6,
                        "pcie_tx_kbps": 1e6, "host_cpu_busy_pct": 20.0}}
    a, b = with_cold_jobs(blank, readings).measured, with_cold_jobs(off, readings).measured
    assert a is not None and b is not None and np.array_equal(a.expected, b.expected)
    kernel = blank.measured.kernel
    assert kernel is not None
    z = np.zeros((3, len(cold_model.resources)))
    z[:2] = np.nan  # the one measured pair's jobs 0 and 1 have no reading; job 2 has all
    with pytest.raises(InputError, match="no measured pair between jobs with readings"):
        kernel.log_speed(np.array([0]), np.array([1]), np.zeros(1), np.ones(1), z,
                         np.array([2]), np.array([2]))
