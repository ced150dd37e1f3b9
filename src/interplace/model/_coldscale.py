r"""Cold jobs' demand read on the fitted jobs' scale (a post-fit step of :func:`fit`).

A job with co-located runs (*warm*) gets its demand :math:`d_{jr}` from two sources: its
isolated counters and the speeds of its co-locations. A job without co-located runs (*cold*)
has the counters alone. The two disagree in a systematic way: the speeds pull a warm job's
demand below its counter reading and its intensity :math:`\eta_{jr}` up (the pressure
:math:`p = d e^\eta` is what the speeds see), while a cold job's demand sits on its reading
with :math:`\eta = 0`. Pressure agrees between the two, but sensitivity is regressed on log
demand (:math:`s = \exp(a + b \log d + \tau\epsilon)`, :math:`b \approx 1.3` on Lucid), so a
cold job reads as more sensitive than a warm job of the same counters and is predicted too
slow next to anything (measured on Lucid's cold-start splits, ``docs/benchmarks.md``).

So after SVI, per resource :math:`r` that a counter reads and per mixture component, with
:math:`x_{jr} = \log \bar u_{jr}` the log of job :math:`j`'s mean isolated reading (a share of
full scale) and :math:`m_{jr}` the posterior mean of :math:`\log d_{jr}`, the gap
:math:`g_{jr} = m_{jr} - x_{jr}` is summarised by its median over the warm jobs :math:`W_r` and
over the cold jobs :math:`C_r` whose reading is at least :data:`MIN_READING`, and every cold job
with a reading above 0 is moved by the difference,

.. math::
    \Delta_r = \operatorname{median}_{j \in W_r} g_{jr} - \operatorname{median}_{j \in C_r}
    g_{jr}, \qquad m_{jr} \leftarrow m_{jr} + \Delta_r, \quad
    \mathbb E[\eta_{jr}] \leftarrow \mathbb E[\eta_{jr}] - \Delta_r,

which keeps each cold job's pressure and its own deviation from the cold median, and puts its
demand (hence its sensitivity) where a warm job with its counters would have it. Posterior
spreads are kept. Medians over well-read jobs, not means over all: a low reading pins demand
loosely, so the prior pulls its posterior up, and a few such jobs among a handful of cold ones
would otherwise move every cold job (on synthetic data, whose counters read demand exactly,
means over all readings moved cold jobs' demand 0.07-0.20 off the truth where medians over
readings of at least 5% keep it within 0.01-0.03, as without the step). A resource with
fewer than :data:`MIN_WARM_JOBS` warm jobs reading it is left alone. This is a cut, like the
second stage: it does not feed back into the population's latents. Jobs are *warm* when
they are observed as a victim in some co-located run (``info["jobs_with_pairs"]``).

*Families.* In a fit with job families the intensity's prior centre is the family's effect
(:func:`~interplace.model._net.family_centres`), which the speeds of the family's warm members
set, so it already carries their raised intensity; a cold member's intensity sits on that
centre, and raising it by :math:`-\Delta_r` as well would count the warm scale twice (a cold
job's pressure too high by :math:`e^{-\Delta_r}`, its co-runners predicted too slow). So a
cold job's intensity moves by :math:`-(1 - c_j)\Delta_r`, with :math:`c_j` the share of its
intensity centre that warm jobs set: 1 for a job whose family has a warm member, 0 for one
without a family or whose family has none (its centre is the prior's 0). Its demand moves by
:math:`\Delta_r` either way. Measured on Lucid's cold-start splits with families (10 seeds,
``docs/benchmarks.md``): held-out MAE 0.0581 to 0.0535, and the rows of a fitted job next to
a cold co-runner, which the model predicted 3-5% too slow on half the seeds, gain most.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from interplace.errors import InputError, is_real
from interplace.model._data import Counters

__all__ = [
    "MIN_READING",
    "MIN_WARM_JOBS",
    "align_cold_demand",
    "below_array",
    "below_map",
    "isolated_log_readings",
    "isolated_readings",
    "isolated_samples",
    "readings_array",
    "readings_map",
    "warm_families",
]

MIN_WARM_JOBS = 5
"""The fewest warm jobs with a reading of a resource for :func:`align_cold_demand` to move the
cold jobs' demand on it."""

MIN_READING = 0.05
"""The smallest isolated reading (share of full scale) whose gap counts in the medians of
:func:`align_cold_demand`."""

_Posterior = dict[str, tuple[torch.Tensor, torch.Tensor]]


def isolated_log_readings(
    counters: Counters, n_jobs: int, resources: Sequence[str]
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """``(J, R)`` log of each job's mean isolated counter reading per resource (NaN: none).

    The mean is over the job's isolated counter groups of every metric that reads the resource
    (each group's mean, a share of full scale); a mean of 0 has no log and gives NaN.

    >>> from interplace.datasets import synthetic
    >>> from interplace.model._data import counters_from_samples
    >>> data = synthetic(3, seed=0, samples_per_run=4)
    >>> jobs = tuple(sorted(data.runs["job"].unique()))
    >>> counters = counters_from_samples(data, jobs)
    >>> x = isolated_log_readings(counters, 3, ("gpu_compute", "host_cpu"))
    >>> x.shape, bool((x <= 0).all())
    ((3, 2), True)
    """
    mean, _ = _isolated_means(counters, n_jobs, resources)
    return _log_of(mean)


def _log_of(mean: np.ndarray[Any, np.dtype[np.float64]]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The log of each mean reading, NaN where there is none or it is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.asarray(np.log(mean), dtype=float)
    out[~(mean > 0)] = np.nan
    return out


def _isolated_means(
    counters: Counters, n_jobs: int, resources: Sequence[str]
) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.float64]]]:
    """``(J, R)`` each job's mean isolated reading per resource (NaN: none) and the number of
    counter groups it is the mean of (:func:`isolated_log_readings`)."""
    total = np.zeros((n_jobs, len(resources)))
    count = np.zeros((n_jobs, len(resources)))
    for g, j, r in counters.solo_reads(n_jobs, resources):
        total[j, r] += float(counters.mean[g])
        count[j, r] += 1
    with np.errstate(divide="ignore", invalid="ignore"):
        return total / count, count


def isolated_readings(
    counters: Counters, n_jobs: int, resources: Sequence[str], floor: float
) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.bool_]]]:
    """``(J, R)`` each job's log mean isolated reading per resource (NaN: none), as
    :func:`isolated_log_readings`, and ``(J, R)`` which of the jobs that read a resource alone
    have a mean reading below ``floor``, 0 included (the counter kernel's floor,
    :func:`~interplace.model._counterkernel.floored`): one walk over the counter groups.

    >>> from interplace.datasets import synthetic
    >>> from interplace.model._data import counters_from_samples
    >>> data = synthetic(3, seed=0, samples_per_run=4)
    >>> counters = counters_from_samples(data, tuple(sorted(data.runs["job"].unique())))
    >>> x, below = isolated_readings(counters, 3, ("gpu_compute",), 0.005)
    >>> x.shape, below.tolist()
    ((3, 1), [[False], [False], [False]])
    """
    mean, count = _isolated_means(counters, n_jobs, resources)
    with np.errstate(invalid="ignore"):
        below = np.asarray((count > 0) & ~(mean >= floor), dtype=bool)
    return _log_of(mean), below


def isolated_samples(counters: Counters, n_jobs: int) -> int:
    """The median number of samples in one isolated counter group (rounded, at least 1; 1
    without any): how much one mean reading of an isolated run weighs in the fit, and so, by
    default, a job added later from its mean readings
    (:func:`~interplace.placement._cold.with_cold_jobs`).

    >>> from interplace.datasets import synthetic
    >>> from interplace.model._data import counters_from_samples
    >>> data = synthetic(3, seed=0, samples_per_run=4)
    >>> isolated_samples(counters_from_samples(data, ("job0", "job1", "job2")), 3)
    4
    """
    solo = [g for g, _ in counters.solo(n_jobs)]
    if not solo:
        return 1
    return max(1, round(float(np.median(counters.n[solo]))))


def readings_map(
    readings: np.ndarray[Any, np.dtype[np.float64]], jobs: Sequence[str],
    resources: Sequence[str],
) -> dict[str, dict[str, float]]:
    """:func:`isolated_log_readings` as ``{job: {resource: log reading}}``, finite readings
    only (the form ``info["isolated_readings"]`` keeps them in, for jobs added later to find
    their nearest fitted jobs; :func:`readings_array` reads it back).

    >>> readings_map(np.array([[0.0, np.nan], [np.nan, np.nan]]), ["a", "b"], ["x", "y"])
    {'a': {'x': 0.0}}
    """
    out: dict[str, dict[str, float]] = {}
    for j, job in enumerate(jobs):
        row = {r: float(readings[j, i]) for i, r in enumerate(resources)
               if math.isfinite(float(readings[j, i]))}
        if row:
            out[job] = row
    return out


def below_map(
    below: np.ndarray[Any, np.dtype[np.bool_]], jobs: Sequence[str], resources: Sequence[str],
) -> dict[str, list[str]]:
    """The readings below the floor (:func:`isolated_readings`) as ``{job: [resource,
    ...]}``, jobs with any only (the form ``info["isolated_below_floor"]`` keeps it in;
    :func:`below_array` reads it back).

    >>> below_map(np.array([[False, True], [False, False]]), ["a", "b"], ["x", "y"])
    {'a': ['y']}
    """
    return {
        job: [r for i, r in enumerate(resources) if below[j, i]]
        for j, job in enumerate(jobs) if below[j].any()
    }


def below_array(
    recorded: object, jobs: Sequence[str], resources: Sequence[str]
) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """``(J, R)`` from a :func:`below_map` (None, a model fitted before it was kept: none
    below); anything else that is not such a map is refused with a one-line error.

    >>> below_array({"a": ["y"]}, ["a", "b"], ["x", "y"]).tolist()
    [[False, True], [False, False]]
    """
    out = np.zeros((len(jobs), len(resources)), dtype=bool)
    if recorded is None:
        return out
    if not isinstance(recorded, Mapping):
        raise InputError("this model's info['isolated_below_floor'] is not a job -> list map")
    index = {r: i for i, r in enumerate(resources)}
    for j, job in enumerate(jobs):
        names = recorded.get(job, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InputError(
                f"this model's info['isolated_below_floor'][{job!r}] is not a list of names"
            )
        for name in names:
            if name in index:
                out[j, index[name]] = True
    return out


def readings_array(
    recorded: object, jobs: Sequence[str], resources: Sequence[str]
) -> np.ndarray[Any, np.dtype[np.float64]] | None:
    """``(J, R)`` log readings from a :func:`readings_map` (NaN where none), or None when
    ``recorded`` is None (a model fitted before the readings were kept); anything else that
    is not such a map is refused with a one-line error.

    >>> readings_array({"a": {"x": 0.5}}, ["a", "b"], ["x", "y"]).tolist()
    [[0.5, nan], [nan, nan]]
    """
    if recorded is None:
        return None
    if not isinstance(recorded, Mapping):
        raise InputError("this model's info['isolated_readings'] is not a job -> readings map")
    out = np.full((len(jobs), len(resources)), np.nan)
    index = {r: i for i, r in enumerate(resources)}
    for j, job in enumerate(jobs):
        row = recorded.get(job, {})
        if not isinstance(row, Mapping):
            raise InputError(f"this model's info['isolated_readings'][{job!r}] is not a map")
        for name, value in row.items():
            if not is_real(value):
                raise InputError(
                    f"this model's info['isolated_readings'][{job!r}][{name!r}] is not a number"
                )
            if name in index:
                out[j, index[name]] = float(value)
    return out


def align_cold_demand(
    posterior: _Posterior,
    readings: np.ndarray[Any, np.dtype[np.float64]],
    warm: np.ndarray[Any, np.dtype[np.bool_]],
    resources: Sequence[str],
    components: int,
    carried: np.ndarray[Any, np.dtype[np.float64]] | None = None,
) -> tuple[_Posterior, dict[str, list[float]], dict[str, list[float]]]:
    r"""Move cold jobs' ``log_demand`` by :math:`\Delta_r` (and back their ``log_intensity``
    by :math:`(1 - c_j)\Delta_r`).

    ``posterior``: the fit's ``(loc, scale)`` per site, locs ``(J, R)`` (or ``(K, J, R)`` for
    a mixture of ``components`` :math:`K`); ``readings``: ``(J, R)`` from
    :func:`isolated_log_readings`; ``warm``: ``(J,)``, True for jobs observed in a co-located
    run; ``carried``: ``(J,)`` :math:`c_j`, the share of each job's intensity centre that warm
    jobs set (module docstring, *Families*: :func:`warm_families`; None: 0 for every job).
    Returns the new posterior (the inputs are not changed), the warm jobs' median gap
    :math:`\bar g_{W r}` per resource and component (what :func:`~interplace.placement.
    with_cold_jobs` adds to a new job's read demand) and the shift :math:`\Delta_r` applied,
    both only for resources with at least :data:`MIN_WARM_JOBS` warm readings of at least
    :data:`MIN_READING` (the shift only where a cold job has one too).

    >>> import numpy as np, torch
    >>> loc = torch.tensor([[-1.2], [-0.7], [-0.2], [-1.7], [-2.2], [-0.9]], dtype=torch.float64)
    >>> post = {"log_demand": (loc, torch.ones_like(loc)),
    ...         "log_intensity": (torch.zeros_like(loc), torch.ones_like(loc))}
    >>> x = np.array([[-1.0], [-0.5], [0.0], [-1.5], [-2.0], [-1.0]])
    >>> warm = np.array([True] * 5 + [False])
    >>> new, gap, shift = align_cold_demand(post, x, warm, ["gpu_compute"], 1)
    >>> round(gap["gpu_compute"][0], 6), round(shift["gpu_compute"][0], 6)
    (-0.2, -0.3)
    >>> round(float(new["log_demand"][0][5, 0]), 6), round(float(new["log_intensity"][0][5, 0]), 6)
    (-1.2, 0.3)
    >>> carried = np.array([0.0] * 5 + [1.0])  # a family of warm members sets its centre
    >>> new, _, _ = align_cold_demand(post, x, warm, ["gpu_compute"], 1, carried)
    >>> round(float(new["log_demand"][0][5, 0]), 6), round(float(new["log_intensity"][0][5, 0]), 6)
    (-1.2, 0.0)
    """
    out = dict(posterior)
    gaps: dict[str, list[float]] = {}
    shifts: dict[str, list[float]] = {}
    demand_loc = posterior["log_demand"][0]
    intensity_loc = posterior["log_intensity"][0]
    locs = demand_loc if components > 1 else demand_loc.unsqueeze(0)
    new_demand = locs.clone()
    new_intensity = (intensity_loc if components > 1 else intensity_loc.unsqueeze(0)).clone()
    cold = ~warm
    floor = np.log(MIN_READING)
    for r, name in enumerate(resources):
        read = np.isfinite(readings[:, r])
        well = read & (np.nan_to_num(readings[:, r], nan=-np.inf) >= floor)
        w_idx = np.flatnonzero(well & warm)
        if len(w_idx) < MIN_WARM_JOBS:
            continue
        x = torch.as_tensor(readings[:, r], dtype=locs.dtype)
        gap = locs[:, :, r] - x  # (K, J); NaN where there is no reading
        warm_gap = _median(gap[:, w_idx])
        gaps[name] = [float(g) for g in warm_gap]
        c_well = np.flatnonzero(well & cold)
        if not len(c_well):
            continue
        delta = warm_gap - _median(gap[:, c_well])  # (K,)
        c_idx = np.flatnonzero(read & cold)
        shifts[name] = [float(s) for s in delta]
        new_demand[:, c_idx, r] += delta.unsqueeze(1)
        keep = torch.as_tensor(
            np.ones(len(c_idx)) if carried is None else 1.0 - carried[c_idx], dtype=locs.dtype
        )
        new_intensity[:, c_idx, r] -= delta.unsqueeze(1) * keep
    if shifts:
        if components == 1:
            new_demand, new_intensity = new_demand[0], new_intensity[0]
        out["log_demand"] = (new_demand, posterior["log_demand"][1])
        out["log_intensity"] = (new_intensity, posterior["log_intensity"][1])
    return out, gaps, shifts


def warm_families(
    family: np.ndarray[Any, np.dtype[np.int64]] | None,
    warm: np.ndarray[Any, np.dtype[np.bool_]],
) -> np.ndarray[Any, np.dtype[np.float64]] | None:
    """``(J,)`` :math:`c_j` of :func:`align_cold_demand`: 1 for a job whose family
    (``family``: ``(J,)`` indices, negative for none) has a ``warm`` member, else 0; None for
    a fit without families.

    >>> import numpy as np
    >>> warm_families(np.array([0, 0, 1, -1]), np.array([True, False, False, False])).tolist()
    [1.0, 1.0, 0.0, 0.0]
    """
    if family is None:
        return None
    lit = np.unique(family[warm & (family >= 0)])
    return np.isin(family, lit).astype(np.float64) * (family >= 0)


def _median(x: torch.Tensor) -> torch.Tensor:
    """``(K, n)`` -> ``(K,)`` medians (the mean of the two middle values for an even ``n``)."""
    return torch.quantile(x, 0.5, dim=1)
