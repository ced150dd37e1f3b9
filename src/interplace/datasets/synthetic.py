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

A run is a set :math:`C` of job instances (one instance: isolated; the same job may appear
twice). When they share one GPU the load on resource :math:`r` is
:math:`L_r = \sum_{k \in C} d_{kr}` and the true speed of instance :math:`j` (see
:func:`contention_speed`) is

.. math:: v_j = \prod_r \frac{1}{1 + s_{jr}\, d_{jr}\, \max(0, L_r - 1)} \in (0, 1].

It is 1 while no resource is oversubscribed, never rises when load is added (monotone), is
close to 1 for a job that barely uses the contended resources ("almost no interference"), and
for two compute-saturated jobs (:math:`d = 1`, :math:`s = 1`, :math:`L = 2`) gives each 1/2:
time slicing halves both. The observed throughput is
:math:`T_j\, v_j\, \varepsilon`, :math:`\log \varepsilon \sim \mathcal N(0, \sigma_v^2)`
(``noise_speed``); isolated runs have :math:`v_j = 1`.

*Cross-GPU pairs.* With ``cross_gpu`` :math:`p > 0` (which needs a ``topology``) each pair run
is, independently with probability :math:`p`, placed on two *different* GPUs :math:`a \ne b`
of one host that share a PCIe uplink or a host bridge, drawn uniformly among the ordered such
GPU pairs (the first instance goes on :math:`a`). The pair then contends only for the
resources :math:`S_{ab}` of the domains that contain both GPUs (those of
``topology.domains([a, b])`` with both in ``gpus``): ``pcie_uplink`` and ``host_bridge`` ->
``pcie_h2d``, ``pcie_d2h``; ``socket`` -> ``host_cpu``; other kinds -> nothing (restricted to
``resources``), the same table as :data:`interplace.model.DOMAIN_RESOURCES`. Instance
:math:`j` next to :math:`k` sees the load :math:`L_{jr} = d_{jr} + [r \in S_{ab}]\, d_{kr}`
and runs at speed :math:`v_j` above with :math:`L_{jr}` for :math:`L_r`. Same-GPU pairs share
every resource; their speeds are unchanged. The extra draws come from a second generator,
``np.random.default_rng([seed, 1])``, so ``cross_gpu=0`` (the default) gives exactly the data
of a call without it.

*Pair effect.* With ``pair_rank`` :math:`L > 0` each co-runner's load on job :math:`j` is
scaled by a low-rank pair factor, :math:`L_{jr} = d_{jr} + \sum_{k} e^{z_{jk}} d_{kr}`
(over :math:`j`'s co-runners, same-GPU or, restricted to :math:`S_{ab}`, cross-GPU), with
:math:`z = U W^\top`, :math:`U_{jl} \sim \mathcal N(0, \text{pair\_scale}^2)`,
:math:`W_{kl} \sim \mathcal N(0, 1)`: some pairs interfere more, some less, than their
demands say, as kernels interleave badly or well; the counters still read the plain sum
:math:`\sum_k d_{kr}`. The draws come from a third generator,
``np.random.default_rng([seed, 2])``, so ``pair_rank=0`` (the default) gives exactly the data
of a call without it.

Runs: every job alone (``"iso/<job>"``), then pairs (``"pair/<a>/<b>"``): ``pairs="all"``
every unordered pair *including self-pairs* (two instances of one job), :math:`J(J+1)/2` runs;
``"distinct"`` without self-pairs, :math:`J(J-1)/2`; ``"random"`` each pair of ``"all"`` kept
independently with probability 1/2; ``"none"`` no pairs. Each run is placed on a GPU drawn
uniformly (``device`` column); GPU ``i`` of ``gpus`` sits on host ``"h<i>"``. The rows of a
cross-GPU pair each name their own GPU in ``device``, and their common host in ``host``.

Samples (``samples_per_run`` per run and metric, one every second): the true utilisation
:math:`u_r = \min(1, L_r)` gives the true counter values

- ``gpu_compute`` -> ``gpu_util_pct`` = :math:`100 u`
- ``gpu_membw`` -> ``mem_util_pct`` = :math:`100 u`
- ``pcie_h2d`` -> ``pcie_rx_kbps`` (the GPU receives) = :math:`u \cdot` :data:`PCIE_LINK_KBPS`
- ``pcie_d2h`` -> ``pcie_tx_kbps`` (the GPU transmits) = :math:`u \cdot` :data:`PCIE_LINK_KBPS`
- ``host_cpu`` -> ``host_cpu_busy_pct`` = :math:`100 u` and ``instructions`` =
  :math:`u \cdot` :data:`INSTRUCTIONS_PER_S`

The GPU metrics (the first four) carry the run's GPU in ``device``; the host metrics
(``host_cpu_busy_pct``, ``instructions``) are machine-wide and carry ``device`` =
``"host"``, the convention of :mod:`interplace.collectors.table`, so the samples pass
:func:`interplace.collectors.validate_samples`. A cross-GPU pair has its GPU metrics once per
GPU, with that GPU's ``device``, from its own job alone: :math:`u_r = \min(1, d_{jr})` (a
GPU's PCIe counters count its own link); and its host metrics once per run, from both jobs of
the host: :math:`u = \min(1, d_{j,\mathrm{cpu}} + d_{k,\mathrm{cpu}})`.

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
``t_jitter_s``, ``speed`` (true speed of every runs row, in row order), ``shared`` (a list
with, for every runs row in row order, the tuple of resources it contends for with its
co-runner, in ``resources`` order: all of them for a same-GPU pair, :math:`S_{ab}` for a
cross-GPU pair, ``()`` for an isolated run), ``cross_gpu`` (the probability asked for),
``pair_rank`` and ``pair_effect`` (the :math:`(J, J)` matrix :math:`z`, or None without a
pair effect), ``samples`` (every generated sample before dropping: ``sample_id``,
``run_id``, ``host``, ``device``, ``metric``, ``t_true_s``, ``true_value``, ``dropped``; the
observed samples carry
the same ``sample_id``) and the constants ``pcie_link_kbps`` and ``instructions_per_s``.
:func:`~interplace.datasets.truth.write_truth` stores it beside the runs and
:func:`~interplace.datasets.truth.read_truth` reads it back.

A ``topology`` (any :class:`DomainSource`, such as a :class:`~interplace.topology.Topology`)
supplies the GPU ids runs are placed on (hosts ``"n<k>"`` for ids ``"n<k>:<i>"``, else
``"h0"``) and, for ``cross_gpu``, the contention domains that GPU pairs share.

``mode`` (``"timeslice"`` or ``"mps"``, see :data:`~interplace.datasets.runs.MODES`) only
labels the data: it adds a ``mode`` column with that value on every runs row and changes no
draw (the contention law above is the same whichever way the GPU is shared). Without it
(``None``, the default) there is no ``mode`` column.

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

from interplace.datasets.runs import MODES, CoLocationData
from interplace.errors import InputError, check_count, check_seed, is_real

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
_HOST_RESOURCES = frozenset({"host_cpu"})
"""Resources whose metrics are host-wide (emitted once per run, not per GPU)."""
_HOST_DEVICE = "host"
"""``device`` of machine-wide samples, as in :mod:`interplace.collectors.table`."""
_KIND_RESOURCES: dict[str, tuple[str, ...]] = {
    "pcie_uplink": ("pcie_h2d", "pcie_d2h"),
    "host_bridge": ("pcie_h2d", "pcie_d2h"),
    "socket": ("host_cpu",),
}
"""Resources two GPUs contend for through a shared domain of each kind (by ``str(kind)``)."""
_CROSS_KINDS = frozenset({"pcie_uplink", "host_bridge"})
_PAIRS = ("all", "distinct", "random", "none")
_T_JITTER_S = 0.02
_FloatArray = np.ndarray[Any, np.dtype[np.float64]]


@runtime_checkable
class DomainSource(Protocol):
    """What :func:`synthetic` needs of a topology (a :class:`~interplace.topology.Topology` fits).

    ``domains`` returns objects with ``.name``, ``.kind`` and ``.gpus``. The generator calls it
    only for ``cross_gpu > 0``, on pairs of GPUs of one host, and reads ``kind`` (compared as a
    string: ``"pcie_uplink"``, ``"host_bridge"``, ``"socket"``...) and ``gpus``.
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
        check_count(value, name, low=low)
    check_seed(seed)
    if pairs not in _PAIRS:
        raise InputError(f"pairs must be one of {', '.join(_PAIRS)}, not {pairs!r}")
    for name, x in (("noise_speed", noise_speed), ("clock_offset_s", clock_offset_s)):
        if not (is_real(x) and x >= 0):
            raise InputError(f"{name} must be a finite number >= 0, not {x!r}")
    if not (is_real(missing_frac) and 0 <= missing_frac < 1):
        raise InputError(f"missing_frac must be in [0, 1), not {missing_frac!r}")
    if not (is_real(multiplex_frac) and 0 <= multiplex_frac <= 1):
        raise InputError(f"multiplex_frac must be in [0, 1], not {multiplex_frac!r}")
    if not resources or len(set(resources)) != len(resources):
        raise InputError(f"resources must be distinct and at least one, not {resources!r}")
    unknown = [r for r in resources if r not in RESOURCES]
    if unknown:
        raise InputError(f"unknown resource {unknown[0]!r} (known: {', '.join(RESOURCES)})")


def _cross_pairs(
    topology: DomainSource, gpu_ids: list[str], gpu_hosts: list[str], resources: tuple[str, ...]
) -> list[tuple[int, int, tuple[str, ...]]]:
    """Ordered GPU index pairs of one host sharing a PCIe uplink or host bridge, and what they
    share (in ``resources`` order)."""
    out: list[tuple[int, int, tuple[str, ...]]] = []
    for a in range(len(gpu_ids)):
        for b in range(a + 1, len(gpu_ids)):
            if gpu_hosts[a] != gpu_hosts[b] or gpu_ids[a] == gpu_ids[b]:
                continue
            both = {gpu_ids[a], gpu_ids[b]}
            kinds = {
                str(getattr(d, "kind", ""))
                for d in topology.domains([gpu_ids[a], gpu_ids[b]])
                if {str(g) for g in getattr(d, "gpus", ())} >= both
            }
            if not kinds & _CROSS_KINDS:
                continue
            found = {r for k in kinds for r in _KIND_RESOURCES.get(k, ())}
            shared = tuple(r for r in resources if r in found)
            out += [(a, b, shared), (b, a, shared)]
    return out


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
    cross_gpu: float = 0.0,
    pairs: str = "all",
    noise_speed: float = 0.03,
    noise_metric: dict[str, float] | None = None,
    missing_frac: float = 0.1,
    clock_offset_s: float = 0.5,
    multiplex_frac: float = 0.2,
    samples_per_run: int = 20,
    resources: tuple[str, ...] = ("gpu_compute", "gpu_membw", "pcie_h2d", "pcie_d2h", "host_cpu"),
    mode: str | None = None,
    pair_rank: int = 0,
    pair_scale: float = 0.5,
) -> CoLocationData:
    """Draw a :class:`~interplace.datasets.runs.CoLocationData` with ``truth`` filled.

    See the module docstring for the generative story and the contents of ``truth``. All
    randomness comes from ``np.random.default_rng(seed)`` (and, for ``cross_gpu > 0``,
    ``np.random.default_rng([seed, 1])``): the same arguments give identical tables.
    ``samples_per_run=0`` gives no samples (``samples`` is None). With a ``topology``, ``gpus``
    is ignored and runs are placed on the topology's GPUs. ``cross_gpu`` in [0, 1] is the
    probability that a pair run is placed on two different GPUs that share a PCIe uplink or host
    bridge, so the pair contends only for what those GPUs share; it needs a ``topology`` with
    such a GPU pair. ``mode`` (one of :data:`~interplace.datasets.runs.MODES`) adds a ``mode``
    column with that value on every runs row and changes nothing else; ``None`` adds none.
    ``pair_rank`` > 0 adds a low-rank pair effect (module docstring) of that rank, with
    victim factors of spread ``pair_scale``.

    >>> a = synthetic(4, seed=1, pairs="distinct", samples_per_run=2)
    >>> b = synthetic(4, seed=1, pairs="distinct", samples_per_run=2)
    >>> a.runs.equals(b.runs) and a.samples.equals(b.samples), len(a.runs)
    (True, 16)
    >>> synthetic(2, seed=0, resources=("gpu_flops",))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: unknown resource 'gpu_flops' (known: gpu_compute, ...)

    Cross-GPU pairs on a two-GPU machine whose GPUs share only a PCIe switch (any object with
    ``gpus()`` and ``domains()`` does as a topology; a real one comes from
    :func:`interplace.topology.load`):

    >>> from collections import namedtuple
    >>> Domain = namedtuple("Domain", "name kind gpus")
    >>> class OneSwitch:
    ...     def gpus(self):
    ...         return ["0", "1"]
    ...     def domains(self, gpus):
    ...         return [Domain("uplink:sw0", "pcie_uplink", ("0", "1"))]
    >>> d = synthetic(2, seed=0, topology=OneSwitch(), cross_gpu=1.0, pairs="distinct")
    >>> d.runs[["run_id", "device"]].values.tolist()
    [['iso/job0', '1'], ['iso/job1', '1'], ['pair/job0/job1', '1'], ['pair/job0/job1', '0']]
    >>> d.truth["shared"]
    [(), (), ('pcie_h2d', 'pcie_d2h'), ('pcie_h2d', 'pcie_d2h')]
    >>> synthetic(2, seed=0, cross_gpu=0.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: cross_gpu > 0 needs a topology to tell which GPUs share a ...

    The host metrics of that run are machine-wide (``device`` ``"host"``), its GPU metrics per
    GPU; ``mode`` labels the runs:

    >>> s = d.samples.query("run_id == 'pair/job0/job1'")
    >>> sorted(s.loc[s["metric"] == "host_cpu_busy_pct", "device"].unique())
    ['host']
    >>> sorted(s.loc[s["metric"] == "gpu_util_pct", "device"].unique())
    ['0', '1']
    >>> synthetic(2, seed=0, mode="mps").runs["mode"].unique().tolist()
    ['mps']
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
    if mode is not None and (not isinstance(mode, str) or mode not in MODES):
        raise InputError(f"mode must be one of {', '.join(sorted(MODES))} or None, not {mode!r}")
    metrics = [m for r in resources for m in RESOURCES[r]]
    sigma = {m: DEFAULT_NOISE_METRIC[m] for m in metrics}
    for m, v in (noise_metric or {}).items():
        if m not in sigma:
            raise InputError(
                f"noise_metric names {m!r}, not a metric of the chosen resources "
                f"({', '.join(metrics)})"
            )
        if not (is_real(v) and v >= 0):
            raise InputError(f"noise_metric[{m!r}] must be a finite number >= 0, not {v!r}")
        sigma[m] = float(v)
    if not (is_real(cross_gpu) and 0 <= cross_gpu <= 1):
        raise InputError(f"cross_gpu must be a probability in [0, 1], not {cross_gpu!r}")
    check_count(pair_rank, "pair_rank", low=0)
    if not (is_real(pair_scale) and pair_scale >= 0):
        raise InputError(f"pair_scale must be a finite number >= 0, not {pair_scale!r}")
    gpu_ids, gpu_hosts = _placement(gpus, topology)
    cross_cand: list[tuple[int, int, tuple[str, ...]]] = []
    if cross_gpu > 0:
        if topology is None:
            raise InputError(
                "cross_gpu > 0 needs a topology to tell which GPUs share a PCIe uplink or host "
                "bridge"
            )
        cross_cand = _cross_pairs(topology, gpu_ids, gpu_hosts, tuple(resources))
        if not cross_cand:
            raise InputError(
                "cross_gpu > 0, but no two GPUs of the topology share a PCIe uplink or host bridge"
            )
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
    # Cross-GPU placement (its own generator, so cross_gpu=0 leaves every draw above as is):
    # run index -> (GPU of the first instance, GPU of the second, shared resources).
    cross: dict[int, tuple[int, int, tuple[str, ...]]] = {}
    if cross_gpu > 0:
        xrng = np.random.default_rng([int(seed), 1])
        n_pair_runs = n_runs - n_jobs
        moved = xrng.random(n_pair_runs) < cross_gpu
        pick = xrng.integers(0, len(cross_cand), size=n_pair_runs)
        for i in np.flatnonzero(moved).tolist():
            cross[n_jobs + i] = cross_cand[int(pick[i])]
    # Pair effect (its own generator, so pair_rank=0 leaves every draw above as is).
    pair = np.ones((n_jobs, n_jobs))
    pair_effect = None
    if pair_rank > 0:
        prng = np.random.default_rng([int(seed), 2])
        u = prng.normal(0.0, pair_scale, size=(n_jobs, pair_rank))
        w = prng.normal(0.0, 1.0, size=(n_jobs, pair_rank))
        pair_effect = u @ w.T
        pair = np.exp(pair_effect)
    all_res = tuple(resources)
    rows_run: list[int] = []
    rows_job: list[int] = []
    rows_gpu: list[int] = []
    rows_shared: list[tuple[str, ...]] = []
    speeds: list[float] = []
    loads = np.empty((n_runs, n_res))
    for r, members_r in enumerate(members):
        load = demand[list(members_r)].sum(axis=0)
        loads[r] = load  # what the counters read: the pair effect is not in them
        if r in cross:
            gpu_a, gpu_b, shared = cross[r]
            mask = np.array([res in shared for res in resources])
            j, k = members_r
            for me, other, g in ((j, k, gpu_a), (k, j, gpu_b)):
                own = demand[me] + np.where(mask, pair[me, other] * demand[other], 0.0)
                rows_run.append(r)
                rows_job.append(me)
                rows_gpu.append(g)
                rows_shared.append(shared)
                speeds.append(contention_speed(demand[me], sensitivity[me], own))
            continue
        for pos, j in enumerate(members_r):
            rows_run.append(r)
            rows_job.append(j)
            rows_gpu.append(int(gpu_of_run[r]))
            rows_shared.append(all_res if len(members_r) > 1 else ())
            own = demand[j] + sum(
                (pair[j, q] * demand[q] for i, q in enumerate(members_r) if i != pos),
                np.zeros(n_res),
            )
            speeds.append(contention_speed(demand[j], sensitivity[j], own))
    speed = np.asarray(speeds)
    job_idx = np.asarray(rows_job)
    noise = np.exp(rng.normal(0.0, noise_speed, size=speed.size))
    runs = pd.DataFrame(
        {
            "run_id": [run_ids[r] for r in rows_run],
            "job": [names[j] for j in rows_job],
            "throughput": isolated[job_idx] * speed * noise,
            "device": [gpu_ids[g] for g in rows_gpu],
            "host": [gpu_hosts[g] for g in rows_gpu],
        }
    )
    if mode is not None:
        runs["mode"] = mode

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
        "shared": rows_shared,
        "cross_gpu": float(cross_gpu),
        "pair_rank": int(pair_rank),
        "pair_effect": pair_effect,
        "pcie_link_kbps": PCIE_LINK_KBPS,
        "instructions_per_s": INSTRUCTIONS_PER_S,
    }
    samples = None
    if samples_per_run > 0:
        units = _sample_units(
            members, loads, demand, resources, gpu_of_run, cross, gpu_ids, gpu_hosts
        )
        samples, truth["samples"] = _samples(
            rng,
            run_ids,
            units,
            offset_of,
            sigma,
            samples_per_run,
            missing_frac,
            multiplex_frac,
        )
    name = f"synthetic(n_jobs={n_jobs}, seed={seed}"
    name += f", cross_gpu={cross_gpu}" if cross_gpu > 0 else ""
    name += f", mode={mode!r})" if mode is not None else ")"
    return CoLocationData(runs, samples, name, truth)


_Unit = tuple[int, str, str, str, float]
"""One sample stream: run index, metric, device (``"host"``: machine-wide), host, utilisation."""


def _sample_units(
    members: list[tuple[int, ...]],
    loads: _FloatArray,
    demand: _FloatArray,
    resources: tuple[str, ...],
    gpu_of_run: np.ndarray[Any, np.dtype[np.int64]],
    cross: dict[int, tuple[int, int, tuple[str, ...]]],
    gpu_ids: list[str],
    gpu_hosts: list[str],
) -> list[_Unit]:
    """Every (run, metric, device) sample stream with its true utilisation, in output order.

    Run by run, metric by metric (``resources`` order). A same-GPU run has one stream per metric,
    ``u = min(1, L_r)``; a cross-GPU pair has each GPU metric once per GPU from that GPU's job
    alone and each host metric once, from both jobs. Host metrics have device ``"host"``, GPU
    metrics the GPU's id.
    """
    util = np.minimum(1.0, loads)  # (runs, R)
    cols = [(i, m) for i, r in enumerate(resources) for m in RESOURCES[r]]
    units: list[_Unit] = []
    for r in range(len(members)):
        if r not in cross:
            g = int(gpu_of_run[r])
            units += [
                (r, m, _device(resources[i], gpu_ids[g]), gpu_hosts[g], float(util[r, i]))
                for i, m in cols
            ]
            continue
        gpu_a, gpu_b, _ = cross[r]
        for i, m in cols:
            if resources[i] in _HOST_RESOURCES:
                units.append((r, m, _HOST_DEVICE, gpu_hosts[gpu_a], float(util[r, i])))
                continue
            for j, g in zip(members[r], (gpu_a, gpu_b), strict=True):
                units.append((r, m, gpu_ids[g], gpu_hosts[g], float(min(1.0, demand[j, i]))))
    return units


def _device(resource: str, gpu: str) -> str:
    """``device`` of a sample of ``resource`` taken on ``gpu``: ``"host"`` if machine-wide."""
    return _HOST_DEVICE if resource in _HOST_RESOURCES else gpu


def _samples(
    rng: np.random.Generator,
    run_ids: list[str],
    units: list[_Unit],
    offset_of: dict[str, float],
    sigma: dict[str, float],
    per_run: int,
    missing_frac: float,
    multiplex_frac: float,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Observed samples and the truth table of every generated sample (module docstring)."""
    # Index grid: stream (run, metric[, device]), k (sample number), flattened in that order.
    u_g, k_g = (
        a.reshape(-1) for a in np.meshgrid(np.arange(len(units)), np.arange(per_run), indexing="ij")
    )
    unit_metric = [u[1] for u in units]
    metric_names = np.array(unit_metric, dtype=object)[u_g]
    full = np.array([_FULL[m] for m in unit_metric])[u_g]
    true_value = np.array([u[4] for u in units])[u_g] * full
    sd = np.array([sigma[m] for m in unit_metric])[u_g]
    observed = true_value + rng.normal(0.0, 1.0, size=true_value.size) * sd
    perf = np.array([m in _PERF for m in unit_metric])[u_g]
    multiplexed = perf & (rng.random(true_value.size) < multiplex_frac)
    running = rng.uniform(0.2, 1.0, size=true_value.size)
    scale = np.where(perf, np.where(multiplexed, running, 1.0), np.nan)
    observed = np.where(multiplexed, observed * running, observed)
    host = np.array([u[3] for u in units], dtype=object)[u_g]
    device = np.array([u[2] for u in units], dtype=object)[u_g]
    t_true = k_g.astype(np.float64)
    t_obs = (
        t_true
        + np.array([offset_of[h] for h in host.tolist()])
        + rng.normal(0.0, _T_JITTER_S, size=t_true.size)
    )
    dropped = rng.random(true_value.size) < missing_frac
    sample_id = np.arange(true_value.size)
    rid = np.array([run_ids[u[0]] for u in units], dtype=object)[u_g]
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
