r"""Allocation problems for the tuner: GPU splits, co-location by the model, MPS percentages.

:class:`GpuSplit`
    Split a machine's ``capacity`` GPUs among jobs. Job :math:`j` gets :math:`g_j` GPUs from
    ``options`` (default 0, 1, 2, 4, 8) and, from its measured scale-out throughputs
    :math:`T_j(g)` (Gavel's, :func:`gavel_scaleout`), is worth its speed-up over one GPU; the
    objective is the total normalised throughput

    .. math:: f(g) = \sum_j T_j(g_j) / T_j(1), \qquad T_j(0) = 0,
              \qquad \text{subject to } \sum_j g_j \le \text{capacity}.

    The capacity is a constraint of the search space (:class:`~._space.Constraint`), so the
    tuner never proposes an infeasible split; :meth:`GpuSplit.value` refuses one. Normalising
    by one GPU makes jobs of different step rates comparable (a job at 1 GPU counts 1); a
    job left at 0 GPUs counts 0. :meth:`GpuSplit.optimum` is the exact optimum, by dynamic
    programming over jobs and GPUs used (:math:`O(J \cdot C \cdot |options|)`).

:class:`CoLocation`
    Which of a few jobs share a GPU: job :math:`i` goes to GPU :math:`a_i \in \{0..G-1\}`
    (categorical parameters ``j0, j1, ...``), and the objective is the interference model's
    predicted total speed :math:`\sum_i w_i\, \mathbb E[v_i \mid \text{co-runners on } a_i]`
    (:meth:`~interplace.model.InterferenceModel.posterior_speed`, one :class:`Query` per job,
    every evaluation on the same seeded posterior draws, so the objective is deterministic).
    No hardware is needed. :meth:`CoLocation.optimum` enumerates the assignments up to GPU
    relabelling.

:class:`MpsPair`
    The CUDA MPS active-thread percentages :math:`(p_a, p_b)` of two co-located jobs. A trial
    runs the pair through :func:`interplace.collectors.profile.profile` (what ``interplace
    profile`` runs) with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` set per job, and scores
    :math:`T_a / R_a + T_b / R_b`, the pair's throughputs over each job's isolated reference
    (:func:`isolated_throughputs`, measured once at 100%). ``profile`` has no pair-only mode,
    so a trial also runs each job alone and with itself (five runs of ``warmup_s +
    measure_s``). MPS needs a GPU and a running MPS control daemon: this objective has been
    tested here only on the CPU, in timeslice mode, with jobs that read the variable; it has
    not run on a GPU.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interplace.errors import InputError, check_count, is_int
from interplace.placement.bo._space import Choice, Constraint, Int, Point, Space

if TYPE_CHECKING:
    from interplace.collectors.profile import WorkloadSpec
    from interplace.model import InterferenceModel

__all__ = ["CoLocation", "GpuSplit", "MpsPair", "gavel_scaleout", "isolated_throughputs"]

MPS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


def gavel_scaleout(gpu_type: str = "v100", *,
                   scale: Sequence[int] = (1, 2, 4, 8)) -> dict[str, dict[int, float]]:
    """Gavel's measured isolated throughputs ``{job: {gpus: steps/s}}`` on ``gpu_type``, for
    the jobs measured at every GPU count in ``scale`` (on V100: 19 of 26 jobs; A3C, CycleGAN
    and Recommendation were measured on one GPU only).

    >>> t = gavel_scaleout("v100")
    >>> len(t), sorted(t["ResNet-50 (batch size 64)"])
    (19, [1, 2, 4, 8])
    """
    from interplace.datasets import load_gavel

    s = load_gavel(gpu_type).scaling
    out: dict[str, dict[int, float]] = {}
    for job, sf, thr in zip(s["job"], s["scale_factor"], s["throughput"], strict=True):
        out.setdefault(str(job), {})[int(sf)] = float(thr)
    return {j: dict(sorted(v.items())) for j, v in sorted(out.items())
            if all(k in v for k in scale)}


@dataclass(frozen=True, eq=False)
class GpuSplit:
    """Split ``capacity`` GPUs among ``jobs`` (see the module docstring).

    ``throughput``: ``{job: {gpus: throughput}}`` with every positive count of ``options``
    and 1; ``jobs``: the jobs to serve, in order (a job may appear twice: two instances);
    parameter ``g<i>`` is job ``i``'s GPU count.

    >>> t = {"a": {1: 1.0, 2: 2.0, 4: 3.0}, "b": {1: 5.0, 2: 9.0, 4: 10.0}}
    >>> split = GpuSplit(t, ("a", "b"), capacity=4, options=(0, 1, 2, 4))
    >>> split.value({"g0": 2, "g1": 2})
    3.8
    >>> split.optimum()
    ({'g0': 2, 'g1': 2}, 3.8)
    >>> split.space().feasible({"g0": 4, "g1": 1})
    False
    """

    throughput: Mapping[str, Mapping[int, float]]
    jobs: tuple[str, ...]
    capacity: int
    options: tuple[int, ...] = (0, 1, 2, 4, 8)

    def __post_init__(self) -> None:
        if not isinstance(self.jobs, tuple) or not self.jobs:
            raise InputError("a GPU split needs at least one job")
        check_count(self.capacity, "capacity", low=0)
        opts = self.options
        if (not isinstance(opts, tuple) or not opts or len(set(opts)) != len(opts)
                or any(not is_int(o, 0) for o in opts)):
            raise InputError(f"options must be distinct GPU counts >= 0, not {opts!r}")
        for j in self.jobs:
            t = self.throughput.get(j)
            if t is None:
                raise InputError(f"no throughputs for job {j!r}")
            for g in {1, *(o for o in opts if o > 0)}:
                v = t.get(g)
                if v is None or not math.isfinite(v) or v <= 0:
                    raise InputError(f"job {j!r}: no positive throughput on {g} GPU(s)")

    @property
    def names(self) -> tuple[str, ...]:
        """Parameter names, ``g0, g1, ...``."""
        return tuple(f"g{i}" for i in range(len(self.jobs)))

    def space(self) -> Space:
        """One choice of ``options`` per job, and at most ``capacity`` GPUs in all."""
        params = tuple(Choice(n, self.options) for n in self.names)
        cap = Constraint(tuple((n, 1.0) for n in self.names), self.capacity)
        return Space(params, (cap,))

    def gain(self, job: str, gpus: int) -> float:
        """``T_job(gpus) / T_job(1)`` (0 for 0 GPUs)."""
        if gpus == 0:
            return 0.0
        return float(self.throughput[job][gpus]) / float(self.throughput[job][1])

    def value(self, point: Mapping[str, Any]) -> float:
        """The total normalised throughput of a split; an :class:`InputError` if it
        exceeds the capacity."""
        p = self.space().check(point)
        return math.fsum(self.gain(j, int(p[n])) for j, n in
                         zip(self.jobs, self.names, strict=True))

    __call__ = value

    def optimum(self) -> tuple[Point, float]:
        """The best split and its value, exactly (dynamic programming; ties go to the
        lexicographically smallest counts)."""
        cap = self.capacity
        # best[c] = (value, counts) over the jobs so far using exactly c GPUs
        best: list[tuple[float, tuple[int, ...]] | None] = [None] * (cap + 1)
        best[0] = (0.0, ())
        for j in self.jobs:
            nxt: list[tuple[float, tuple[int, ...]] | None] = [None] * (cap + 1)
            for c, cur in enumerate(best):
                if cur is None:
                    continue
                for g in sorted(self.options):
                    if c + g > cap:
                        continue
                    cand = (cur[0] + self.gain(j, g), (*cur[1], g))
                    old = nxt[c + g]
                    if old is None or cand[0] > old[0] + 1e-12 or (
                            abs(cand[0] - old[0]) <= 1e-12 and cand[1] < old[1]):
                        nxt[c + g] = cand
            best = nxt
        found = [b for b in best if b is not None]
        if not found:
            raise InputError(f"no split of {self.capacity} GPUs gives every job one of "
                             f"{sorted(self.options)} GPUs")
        top = max(found, key=lambda b: (b[0], [-g for g in b[1]]))
        point: Point = dict(zip(self.names, top[1], strict=True))
        return point, self.value(point)


@dataclass(frozen=True, eq=False)
class CoLocation:
    """Which GPU each of ``jobs`` runs on, scored by ``model``'s predicted total speed.

    ``gpus``: GPUs available (each may hold any number of jobs); ``weights``: one per job
    (default 1); ``num_samples`` posterior draws with ``seed`` (the same for every
    evaluation). Parameter ``j<i>`` is job ``i``'s GPU, a categorical ``"0" .. "G-1"``.

    >>> from interplace.datasets import synthetic
    >>> from interplace.model import fit
    >>> m = fit(synthetic(3, seed=0, samples_per_run=2), steps=100, min_steps=100, restarts=1)
    >>> c = CoLocation(m, ("job0", "job1", "job2"), gpus=2)
    >>> c.value({"j0": "0", "j1": "0", "j2": "0"}) <= c.value({"j0": "0", "j1": "1", "j2": "1"})
    True
    """

    model: InterferenceModel
    jobs: tuple[str, ...]
    gpus: int
    weights: tuple[float, ...] | None = None
    num_samples: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.jobs, tuple) or not self.jobs:
            raise InputError("a co-location needs at least one job")
        check_count(self.gpus, "gpus")
        if self.weights is not None and (
                len(self.weights) != len(self.jobs)
                or any(not math.isfinite(w) or w < 0 for w in self.weights)):
            raise InputError("weights must be one finite number >= 0 per job")

    @property
    def names(self) -> tuple[str, ...]:
        """Parameter names, ``j0, j1, ...``."""
        return tuple(f"j{i}" for i in range(len(self.jobs)))

    def space(self) -> Space:
        """One categorical GPU choice per job."""
        gpus = tuple(str(g) for g in range(self.gpus))
        return Space(tuple(Choice(n, gpus) for n in self.names))

    def _speeds(self, assignments: Sequence[Sequence[str]]) -> list[float]:
        from interplace.model import Query

        queries = []
        for gpu_of in assignments:
            for i, (j, g) in enumerate(zip(self.jobs, gpu_of, strict=True)):
                co = tuple(k for m, (k, gk) in enumerate(zip(self.jobs, gpu_of, strict=True))
                           if gk == g and m != i)
                queries.append(Query(j, co))
        mean = self.model.posterior_speed(queries, num_samples=self.num_samples,
                                          seed=self.seed).mean
        w = self.weights or (1.0,) * len(self.jobs)
        n = len(self.jobs)
        return [math.fsum(float(w[i]) * float(mean[a * n + i]) for i in range(n))
                for a in range(len(assignments))]

    def value(self, point: Mapping[str, Any]) -> float:
        """Predicted total (weighted) speed of an assignment."""
        p = self.space().check(point)
        return self._speeds([[str(p[n]) for n in self.names]])[0]

    __call__ = value

    def optimum(self) -> tuple[Point, float]:
        """The best assignment by enumeration up to relabelling GPUs (restricted growth
        strings: job ``i`` takes a GPU already used or the next new one)."""
        n, g = len(self.jobs), self.gpus
        canon: list[list[str]] = []

        def grow(prefix: list[int], used: int) -> None:
            if len(prefix) == n:
                canon.append([str(x) for x in prefix])
                return
            for x in range(min(used + 1, g)):
                grow([*prefix, x], max(used, x + 1))

        grow([], 0)
        values = self._speeds(canon)
        k = max(range(len(canon)), key=lambda i: (values[i], -i))
        point: Point = dict(zip(self.names, canon[k], strict=True))
        return point, values[k]


def _with_env(spec: WorkloadSpec, pct: int) -> WorkloadSpec:
    from interplace.collectors.profile import WorkloadSpec

    return WorkloadSpec(spec.name, ("env", f"{MPS_ENV}={int(pct)}", *spec.argv),
                        builtin=spec.builtin)


def _profile_throughputs(specs: Sequence[WorkloadSpec], run_id: str, *, pairs: bool,
                         mode: str, device: str, gpu: int, warmup_s: float,
                         measure_s: float) -> dict[str, float]:
    import pandas as pd

    from interplace.collectors.profile import profile

    with tempfile.TemporaryDirectory(prefix="interplace-bo-") as tmp:
        res = profile(list(specs), Path(tmp) / "prof", modes=(mode,), warmup_s=warmup_s,
                      measure_s=measure_s, device=device, gpu=gpu, pairs=pairs)
        runs = pd.read_csv(res.out / "runs.csv", dtype={"run_id": str, "job": str})
    rows = runs.loc[runs["run_id"] == run_id]
    if rows.empty:
        raise InputError(f"profile wrote no run {run_id!r}")
    return {str(j): float(t) for j, t in zip(rows["job"], rows["throughput"], strict=True)}


def isolated_throughputs(a: WorkloadSpec, b: WorkloadSpec, *, mode: str = "mps",
                         device: str = "cuda", gpu: int = 0, warmup_s: float = 2.0,
                         measure_s: float = 5.0) -> tuple[float, float]:
    """The throughputs of ``a`` and ``b`` each alone with the whole GPU (no percentage set):
    the references of :class:`MpsPair`."""
    if a.name == b.name:
        raise InputError("the two jobs of a pair need different names")
    out = []
    for s in (a, b):
        thr = _profile_throughputs([s], f"{mode}-{s.name}", pairs=False, mode=mode,
                                   device=device, gpu=gpu, warmup_s=warmup_s,
                                   measure_s=measure_s)
        out.append(thr[s.name])
    return out[0], out[1]


@dataclass(frozen=True, eq=False)
class MpsPair:
    """MPS active-thread percentages of the co-located pair ``a``, ``b`` (see the module
    docstring). ``reference``: each job's isolated throughput; parameters ``mps_a`` and
    ``mps_b`` are integers in ``[low, high]``; ``mode``, ``device``, ``gpu``, ``warmup_s``
    and ``measure_s`` go to :func:`~interplace.collectors.profile.profile`
    (``mode="timeslice", device="cpu"`` runs the plumbing without a GPU).

    >>> from interplace.collectors.profile import WorkloadSpec
    >>> pair = MpsPair(WorkloadSpec("a", ("train_a",)), WorkloadSpec("b", ("train_b",)),
    ...                reference=(100.0, 40.0))
    >>> pair.space().names
    ('mps_a', 'mps_b')
    >>> pair.commands({"mps_a": 30, "mps_b": 70})[1].argv
    ('env', 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70', 'train_b')
    """

    a: WorkloadSpec
    b: WorkloadSpec
    reference: tuple[float, float]
    low: int = 10
    high: int = 100
    mode: str = "mps"
    device: str = "cuda"
    gpu: int = 0
    warmup_s: float = 2.0
    measure_s: float = 5.0

    def __post_init__(self) -> None:
        if self.a.name == self.b.name:
            raise InputError("the two jobs of a pair need different names")
        if len(self.reference) != 2 or any(
                not math.isfinite(r) or r <= 0 for r in self.reference):
            raise InputError("reference must be two positive throughputs")
        if not 1 <= self.low <= self.high <= 100:
            raise InputError(f"percentages must satisfy 1 <= low <= high <= 100, got "
                             f"{self.low}, {self.high}")

    def space(self) -> Space:
        """``mps_a`` and ``mps_b``, integers in ``[low, high]``."""
        return Space((Int("mps_a", self.low, self.high), Int("mps_b", self.low, self.high)))

    def commands(self, point: Mapping[str, Any]) -> tuple[WorkloadSpec, WorkloadSpec]:
        """The two jobs with their percentage in the environment (through ``env``)."""
        p = self.space().check(point)
        return _with_env(self.a, int(p["mps_a"])), _with_env(self.b, int(p["mps_b"]))

    def value(self, point: Mapping[str, Any]) -> float:
        """Run the trial; the pair's summed normalised throughput."""
        a, b = self.commands(point)
        thr = _profile_throughputs(
            [a, b], f"{self.mode}-{a.name}+{b.name}", pairs=True, mode=self.mode,
            device=self.device, gpu=self.gpu, warmup_s=self.warmup_s, measure_s=self.measure_s)
        return thr[a.name] / self.reference[0] + thr[b.name] / self.reference[1]

    __call__ = value

