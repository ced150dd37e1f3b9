r"""Synthetic co-location data drawn from a known ground truth, to score estimators against.

Generative story
----------------
Jobs :math:`j = 1..J` and resources :math:`r = 1..R` (by default ``gpu_compute``,
``gpu_membw``, ``pcie_h2d``, ``pcie_d2h``, ``host_cpu``).

* Demand :math:`d_{jr} \in [0, 1]`: with probability 0.25 the job barely uses the resource,
  :math:`d_{jr} \sim \mathrm{Beta}(1, 30)`; otherwise :math:`d_{jr} \sim \mathrm{Beta}(a_r, 2)`
  with :math:`a_r = 4` for ``gpu_compute`` and 2 for the others.
* Sensitivity :math:`s_{jr} \ge 0`: :math:`\mathrm{Gamma}(20, 1/20)` (close to 1) for
  ``gpu_compute``, whose sharing is time slicing, and :math:`\mathrm{Gamma}(2, 1/2)` (mean 1)
  for the others.
* Isolated throughput :math:`T_j \sim \mathrm{LogUniform}(1, 1000)`.

A run is a set :math:`C` of job instances sharing one GPU (one instance: isolated; the same job
may appear twice). The load on resource :math:`r` is :math:`L_r = \sum_{k \in C} d_{kr}` and the
true speed of instance :math:`j` (see :func:`contention_speed`) is

.. math:: v_j = \prod_r \frac{1}{1 + s_{jr}\, d_{jr}\, \max(0, L_r - 1)} \in (0, 1].

It is 1 while no resource is oversubscribed, never rises when load is added (monotone), is
close to 1 for a job that barely uses the contended resources ("almost no interference"), and
for two compute-saturated jobs (:math:`d = 1`, :math:`s = 1`, :math:`L = 2`) gives each 1/2:
time slicing halves both. The observed throughput is
:math:`T_j\, v_j\, \varepsilon`, :math:`\log \varepsilon \sim \mathcal N(0, \sigma_v^2)`
(``noise_speed``); isolated runs have :math:`v_j = 1`.

Runs: every job alone (``"iso/<job>"``), then pairs (``"pair/<a>/<b>"``): ``pairs="all"``
every unordered pair *including self-pairs* (two instances of one job), :math:`J(J+1)/2` runs;
``"distinct"`` without self-pairs, :math:`J(J-1)/2`; ``"random"`` each pair of ``"all"`` kept
independently with probability 1/2; ``"none"`` no pairs. Each run is placed on a GPU drawn
uniformly (``device`` column); GPU ``i`` of ``gpus`` sits on host ``"h<i>"``.

Samples (``samples_per_run`` per run and metric, one every second): the true utilisation
:math:`u_r = \min(1, L_r)` gives the true counter values

- ``gpu_compute`` -> ``gpu_util_pct`` = :math:`100 u`
- ``gpu_membw`` -> ``mem_util_pct`` = :math:`100 u`
- ``pcie_h2d`` -> ``pcie_rx_kbps`` (the GPU receives) = :math:`u \cdot` :data:`PCIE_LINK_KBPS`
- ``pcie_d2h`` -> ``pcie_tx_kbps`` (the GPU transmits) = :math:`u \cdot` :data:`PCIE_LINK_KBPS`
- ``host_cpu`` -> ``host_cpu_busy_pct`` = :math:`100 u` and ``instructions`` =
  :math:`u \cdot` :data:`INSTRUCTIONS_PER_S`

Observed value = true value + :math:`\mathcal N(0, \sigma_m^2)` with the per-metric
:math:`\sigma_m` of :data:`DEFAULT_NOISE_METRIC` (override with ``noise_metric``); values are not
clipped, so the noise is exactly Gaussian. ``instructions`` is a perf-style counter: a
``multiplex_frac`` share of its samples ran only a fraction
:math:`c \sim \mathrm{Uniform}(0.2, 1)` of the interval and report the raw count
:math:`(x + \eta)\, c` with ``scale`` = :math:`c` (the others ``scale`` = 1), so
``value / scale`` estimates the true :math:`x` with noise :math:`\sigma_m`; non-perf metrics
have ``scale`` NaN. Then a ``missing_frac`` share of sample rows, drawn independently, is
dropped, and each host's clock is off by :math:`o_h \sim \mathcal N(0, \text{clock\_offset\_s}^2)`:
observed ``t_s`` = :math:`k + o_h + \mathcal N(0, 0.02^2)` for the :math:`k`-th sample.

``truth`` holds: ``jobs`` (names, the order of all arrays), ``resources``, ``demand`` and
``sensitivity`` (arrays of shape ``(J, R)``), ``isolated_throughput`` (``(J,)``),
``noise_speed``, ``noise_metric`` (metric -> sigma), ``clock_offset_s`` (host -> offset),
``t_jitter_s``, ``speed`` (true speed of every runs row, in row order), ``samples`` (every
generated sample before dropping: ``sample_id``, ``run_id``, ``host``, ``device``, ``metric``,
``t_true_s``, ``true_value``, ``dropped``; the observed samples carry the same ``sample_id``)
and the constants ``pcie_link_kbps`` and ``instructions_per_s``.

Only same-GPU co-location is generated. A ``topology`` (any :class:`DomainSource`, such as a
:class:`~interplace.topology.Topology`) only supplies the GPU ids runs are placed on (hosts
``"n<k>"`` for ids ``"n<k>:<i>"``, else ``"h0"``); contention between co-runners on different
GPUs behind one PCIe uplink is not modelled yet.

>>> data = synthetic(3, seed=0)
>>> len(data.run_sizes()), int(data.run_sizes().eq(2).sum())  # 3 alone + 6 pairs
(9, 6)
>>> bool((data.truth["speed"] > 0).all() and (data.truth["speed"] <= 1).all())
True
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from interplace.datasets.runs import CoLocationData
from interplace.errors import InputError

__all__ = [
    "DEFAULT_NOISE_METRIC",
    "INSTRUCTIONS_PER_S",
    "PCIE_LINK_KBPS",
    "RESOURCES",
    "DomainSource",
    "contention_speed",
    "synthetic",
]

PCIE_LINK_KBPS: float = 16.0e6
"""PCIe link rate that full utilisation maps to, KB/s (about PCIe 3.0 x16, 16 GB/s)."""

INSTRUCTIONS_PER_S: float = 1.0e10
"""Host instructions per one-second sample at full host-CPU utilisation."""

RESOURCES: dict[str, tuple[str, ...]] = {
    "gpu_compute": ("gpu_util_pct",),
    "gpu_membw": ("mem_util_pct",),
    "pcie_h2d": ("pcie_rx_kbps",),
    "pcie_d2h": ("pcie_tx_kbps",),
    "host_cpu": ("host_cpu_busy_pct", "instructions"),
}
"""Resources the generator knows, with the metrics each one drives."""

_FULL: dict[str, float] = {
    "gpu_util_pct": 100.0,
    "mem_util_pct": 100.0,
    "pcie_rx_kbps": PCIE_LINK_KBPS,
    "pcie_tx_kbps": PCIE_LINK_KBPS,
    "host_cpu_busy_pct": 100.0,
    "instructions": INSTRUCTIONS_PER_S,
}

DEFAULT_NOISE_METRIC: dict[str, float] = {
    "gpu_util_pct": 3.0,
    "mem_util_pct": 3.0,
    "pcie_rx_kbps": 0.02 * PCIE_LINK_KBPS,
    "pcie_tx_kbps": 0.02 * PCIE_LINK_KBPS,
    "host_cpu_busy_pct": 2.0,
    "instructions": 0.02 * INSTRUCTIONS_PER_S,
}
"""Default standard deviation of the Gaussian noise on each metric, in the metric's unit."""

_PERF = frozenset({"instructions"})
_PAIRS = ("all", "distinct", "random", "none")
_T_JITTER_S = 0.02
_FloatArray = np.ndarray[Any, np.dtype[np.float64]]


@runtime_checkable
class DomainSource(Protocol):
    """What :func:`synthetic` needs of a topology (a :class:`~interplace.topology.Topology` fits).

    ``domains`` returns objects with ``.name`` and ``.gpus``; the generator uses only ``gpus``.
    """

    def gpus(self) -> list[str]:
        """GPU ids."""
        ...

    def domains(self, gpus: Iterable[str]) -> list[Any]:
        """Shared contention domains of a set of GPUs."""
        ...


def contention_speed(
    demand: _FloatArray | Sequence[float],
    sensitivity: _FloatArray | Sequence[float],
    load: _FloatArray | Sequence[float],
) -> float:
    r"""True speed :math:`\prod_r 1 / (1 + s_r d_r \max(0, L_r - 1))` of one job instance.

    ``demand`` :math:`d`, ``sensitivity`` :math:`s` and ``load`` :math:`L` (the summed demand of
    every instance in the run, this one included) have shape ``(R,)``. The result is in
    (0, 1], is 1 while :math:`L \le 1` and does not rise when any :math:`L_r` grows.

    >>> contention_speed([1.0], [1.0], [2.0])  # time slicing: two saturating jobs halve
    0.5
    >>> contention_speed([0.0, 0.5], [3.0, 1.0], [1.8, 0.9])  # no oversubscribed resource used
    1.0
    """
    d = np.asarray(demand, dtype=np.float64)
    s = np.asarray(sensitivity, dtype=np.float64)
    lo = np.asarray(load, dtype=np.float64)
    if not (d.shape == s.shape == lo.shape and d.ndim == 1):
        raise InputError(
            f"demand, sensitivity and load need one shape (R,), got {d.shape}, {s.shape}, "
            f"{lo.shape}"
        )
    return float(np.prod(1.0 / (1.0 + s * d * np.maximum(0.0, lo - 1.0))))


def _check_args(
    n_jobs: int,
    seed: int,
    gpus: int,
    pairs: str,
    noise_speed: float,
    missing_frac: float,
    clock_offset_s: float,
    multiplex_frac: float,
    samples_per_run: int,
    resources: tuple[str, ...],
) -> None:
    for name, value, low in (
        ("n_jobs", n_jobs, 1),
        ("gpus", gpus, 1),
        ("samples_per_run", samples_per_run, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise InputError(f"{name} must be an integer >= {low}, not {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise InputError(f"seed must be an integer, not {seed!r}")
    if pairs not in _PAIRS:
        raise InputError(f"pairs must be one of {', '.join(_PAIRS)}, not {pairs!r}")
    for name, x in (("noise_speed", noise_speed), ("clock_offset_s", clock_offset_s)):
        if not (isinstance(x, int | float) and math.isfinite(x) and x >= 0):
            raise InputError(f"{name} must be a finite number >= 0, not {x!r}")
    if not (isinstance(missing_frac, int | float) and 0 <= missing_frac < 1):
        raise InputError(f"missing_frac must be in [0, 1), not {missing_frac!r}")
    if not (isinstance(multiplex_frac, int | float) and 0 <= multiplex_frac <= 1):
        raise InputError(f"multiplex_frac must be in [0, 1], not {multiplex_frac!r}")
    if not resources or len(set(resources)) != len(resources):
        raise InputError(f"resources must be distinct and at least one, not {resources!r}")
    unknown = [r for r in resources if r not in RESOURCES]
    if unknown:
        raise InputError(f"unknown resource {unknown[0]!r} (known: {', '.join(RESOURCES)})")


def _placement(gpus: int, topology: DomainSource | None) -> tuple[list[str], list[str]]:
    """GPU ids and the host of each."""
    if topology is None:
        ids = [str(i) for i in range(gpus)]
        return ids, [f"h{i}" for i in range(gpus)]
    if not isinstance(topology, DomainSource):
        raise InputError(f"topology must have gpus() and domains(), not {type(topology).__name__}")
    ids = [str(g) for g in topology.gpus()]
    if not ids:
        raise InputError("topology has no GPU")
    hosts = [g.split(":", 1)[0] if ":" in g else "h0" for g in ids]
    return ids, hosts


def synthetic(
    n_jobs: int,
    seed: int,
    *,
    gpus: int = 1,
    topology: DomainSource | None = None,
    pairs: str = "all",
    noise_speed: float = 0.03,
    noise_metric: dict[str, float] | None = None,
    missing_frac: float = 0.1,
    clock_offset_s: float = 0.5,
    multiplex_frac: float = 0.2,
    samples_per_run: int = 20,
    resources: tuple[str, ...] = ("gpu_compute", "gpu_membw", "pcie_h2d", "pcie_d2h", "host_cpu"),
) -> CoLocationData:
    """Draw a :class:`~interplace.datasets.runs.CoLocationData` with ``truth`` filled.

    See the module docstring for the generative story and the contents of ``truth``. All
    randomness comes from ``np.random.default_rng(seed)``: the same arguments give identical
    tables. ``samples_per_run=0`` gives no samples (``samples`` is None). With a ``topology``,
    ``gpus`` is ignored and runs are placed on the topology's GPUs.

    >>> a = synthetic(4, seed=1, pairs="distinct", samples_per_run=2)
    >>> b = synthetic(4, seed=1, pairs="distinct", samples_per_run=2)
    >>> a.runs.equals(b.runs) and a.samples.equals(b.samples), len(a.runs)
    (True, 16)
    >>> synthetic(2, seed=0, resources=("gpu_flops",))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: unknown resource 'gpu_flops' (known: gpu_compute, ...)
    """
    _check_args(
        n_jobs,
        seed,
        gpus,
        pairs,
        noise_speed,
        missing_frac,
        clock_offset_s,
        multiplex_frac,
        samples_per_run,
        resources,
    )
    metrics = [m for r in resources for m in RESOURCES[r]]
    sigma = {m: DEFAULT_NOISE_METRIC[m] for m in metrics}
    for m, v in (noise_metric or {}).items():
        if m not in sigma:
            raise InputError(
                f"noise_metric names {m!r}, not a metric of the chosen resources "
                f"({', '.join(metrics)})"
            )
        if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
            raise InputError(f"noise_metric[{m!r}] must be a finite number >= 0, not {v!r}")
        sigma[m] = float(v)
    gpu_ids, gpu_hosts = _placement(gpus, topology)
    rng = np.random.default_rng(seed)
    n_res = len(resources)

    # Jobs: demand, sensitivity, isolated throughput.
    a = np.array([4.0 if r == "gpu_compute" else 2.0 for r in resources])
    busy = rng.beta(np.broadcast_to(a, (n_jobs, n_res)), 2.0)
    idle = rng.beta(1.0, 30.0, size=(n_jobs, n_res))
    demand = np.where(rng.random((n_jobs, n_res)) < 0.25, idle, busy)
    compute = np.array([r == "gpu_compute" for r in resources])
    shape = np.where(compute, 20.0, 2.0)
    sensitivity = rng.gamma(np.broadcast_to(shape, (n_jobs, n_res)), 1.0 / shape)
    isolated = np.exp(rng.uniform(0.0, math.log(1000.0), size=n_jobs))
    width = len(str(n_jobs - 1))
    names = [f"job{j:0{width}d}" for j in range(n_jobs)]

    # Runs.
    members: list[tuple[int, ...]] = [(j,) for j in range(n_jobs)]
    run_ids = [f"iso/{names[j]}" for j in range(n_jobs)]
    if pairs != "none":
        cand = [
            (j, k) for j in range(n_jobs) for k in range(j, n_jobs) if pairs != "distinct" or j != k
        ]
        keep = rng.random(len(cand)) < 0.5 if pairs == "random" else np.ones(len(cand), bool)
        for (j, k), kept in zip(cand, keep.tolist(), strict=True):
            if kept:
                members.append((j, k))
                run_ids.append(f"pair/{names[j]}/{names[k]}")
    n_runs = len(members)
    gpu_of_run = rng.integers(0, len(gpu_ids), size=n_runs)
    rows_run: list[int] = []
    rows_job: list[int] = []
    speeds: list[float] = []
    loads = np.empty((n_runs, n_res))
    for r, members_r in enumerate(members):
        load = demand[list(members_r)].sum(axis=0)
        loads[r] = load
        for j in members_r:
            rows_run.append(r)
            rows_job.append(j)
            speeds.append(contention_speed(demand[j], sensitivity[j], load))
    speed = np.asarray(speeds)
    job_idx = np.asarray(rows_job)
    run_idx = np.asarray(rows_run)
    noise = np.exp(rng.normal(0.0, noise_speed, size=speed.size))
    runs = pd.DataFrame(
        {
            "run_id": [run_ids[r] for r in rows_run],
            "job": [names[j] for j in rows_job],
            "throughput": isolated[job_idx] * speed * noise,
            "device": [gpu_ids[g] for g in gpu_of_run[run_idx]],
            "host": [gpu_hosts[g] for g in gpu_of_run[run_idx]],
        }
    )

    hosts = sorted(set(gpu_hosts))
    offsets = (
        rng.normal(0.0, clock_offset_s, size=len(hosts))
        if clock_offset_s > 0
        else (np.zeros(len(hosts)))
    )
    offset_of = dict(zip(hosts, offsets.tolist(), strict=True))
    truth: dict[str, Any] = {
        "jobs": names,
        "resources": tuple(resources),
        "demand": demand,
        "sensitivity": sensitivity,
        "isolated_throughput": isolated,
        "noise_speed": float(noise_speed),
        "noise_metric": dict(sigma),
        "clock_offset_s": offset_of,
        "t_jitter_s": _T_JITTER_S,
        "speed": speed,
        "pcie_link_kbps": PCIE_LINK_KBPS,
        "instructions_per_s": INSTRUCTIONS_PER_S,
    }
    samples = None
    if samples_per_run > 0:
        samples, truth["samples"] = _samples(
            rng,
            run_ids,
            loads,
            resources,
            gpu_of_run,
            gpu_ids,
            gpu_hosts,
            offset_of,
            sigma,
            samples_per_run,
            missing_frac,
            multiplex_frac,
        )
    return CoLocationData(runs, samples, f"synthetic(n_jobs={n_jobs}, seed={seed})", truth)


def _samples(
    rng: np.random.Generator,
    run_ids: list[str],
    loads: _FloatArray,
    resources: tuple[str, ...],
    gpu_of_run: np.ndarray[Any, np.dtype[np.int64]],
    gpu_ids: list[str],
    gpu_hosts: list[str],
    offset_of: dict[str, float],
    sigma: dict[str, float],
    per_run: int,
    missing_frac: float,
    multiplex_frac: float,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Observed samples and the truth table of every generated sample (module docstring)."""
    util = np.minimum(1.0, loads)  # (runs, R)
    cols = [(i, m) for i, r in enumerate(resources) for m in RESOURCES[r]]
    n_runs, n_m = len(run_ids), len(cols)
    # Index grid: run, metric, k (sample number), flattened in that order.
    run_g, m_g, k_g = (
        a.reshape(-1)
        for a in np.meshgrid(np.arange(n_runs), np.arange(n_m), np.arange(per_run), indexing="ij")
    )
    metric_names = np.array([m for _, m in cols], dtype=object)[m_g]
    res_idx = np.array([i for i, _ in cols])[m_g]
    full = np.array([_FULL[m] for _, m in cols])[m_g]
    true_value = util[run_g, res_idx] * full
    sd = np.array([sigma[m] for _, m in cols])[m_g]
    observed = true_value + rng.normal(0.0, 1.0, size=true_value.size) * sd
    perf = np.array([m in _PERF for _, m in cols])[m_g]
    multiplexed = perf & (rng.random(true_value.size) < multiplex_frac)
    running = rng.uniform(0.2, 1.0, size=true_value.size)
    scale = np.where(perf, np.where(multiplexed, running, 1.0), np.nan)
    observed = np.where(multiplexed, observed * running, observed)
    host = np.array([gpu_hosts[g] for g in gpu_of_run], dtype=object)[run_g]
    device = np.array([gpu_ids[g] for g in gpu_of_run], dtype=object)[run_g]
    t_true = k_g.astype(np.float64)
    t_obs = (
        t_true
        + np.array([offset_of[h] for h in host.tolist()])
        + rng.normal(0.0, _T_JITTER_S, size=t_true.size)
    )
    dropped = rng.random(true_value.size) < missing_frac
    sample_id = np.arange(true_value.size)
    rid = np.array(run_ids, dtype=object)[run_g]
    truth = pd.DataFrame(
        {
            "sample_id": sample_id,
            "run_id": rid,
            "host": host,
            "device": device,
            "metric": metric_names,
            "t_true_s": t_true,
            "true_value": true_value,
            "dropped": dropped,
        }
    )
    keep = ~dropped
    samples = pd.DataFrame(
        {
            "run_id": rid[keep],
            "t_s": t_obs[keep],
            "metric": metric_names[keep],
            "value": observed[keep],
            "device": device[keep],
            "host": host[keep],
            "scale": scale[keep],
            "sample_id": sample_id[keep],
        }
    )
    return samples, truth
