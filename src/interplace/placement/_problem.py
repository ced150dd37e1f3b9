r"""The placement problem every policy works on, and the scoring they share.

A :class:`Problem` fixes the topology, the speed source (the fitted model, or measured speeds),
the jobs to place, what already runs, ``max_per_gpu`` and the objective. A :class:`State` is a
(partial) assignment of job instances to GPUs. Policies build states with
:meth:`Problem.assign`, compare candidates with :meth:`Problem.gain` and return the final
assignment; :func:`interplace.placement.place` scores it.

Scoring (the math is in :mod:`interplace.placement`): a job on GPU :math:`g` runs next to every
job on :math:`g` (sharing everything) and every job on a GPU :math:`h` that shares a contention
domain with :math:`g` (sharing the resources :func:`interplace.model.shared_resources` lists);
that is one :class:`~interplace.model.Query`. Queries are answered once, in batches, from
``num_samples`` posterior draws taken with one ``seed``, and memoised by their content (job
type, co-runner types and shares), so every candidate is compared on the same draws.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from interplace.errors import InputError, check_count, check_seed, is_int, is_real
from interplace.model import DOMAIN_RESOURCES, Query, shared_resources
from interplace.placement._comm import comm_time
from interplace.placement._sources import SpeedSource
from interplace.placement._types import OBJECTIVES, ClusterState, Job
from interplace.topology import DomainKind, Topology

__all__ = ["RISK_QUANTILE", "SPANNING_SETS", "Problem", "SpeedCache", "State"]

RISK_QUANTILE = 0.1
"""The quantile of the summed speed over posterior draws that ``objective="risk-averse"``
maximises: the sum the placement reaches in at least 90% of what the model believes."""

SPANNING_SETS = 20_000
"""Most GPU sets the exact search tries for one gang larger than a machine (every set of GPUs
that can take it, fewest machines first); past it the search is not proven optimal."""

_RESOURCES: tuple[str, ...] = DOMAIN_RESOURCES[DomainKind.GPU]
_FULL = (1 << len(_RESOURCES)) - 1
_MASK_NAMES: tuple[tuple[str, ...], ...] = tuple(
    tuple(r for b, r in enumerate(_RESOURCES) if m >> b & 1) for m in range(_FULL + 1)
)

def _share_names(resources: object) -> tuple[tuple[str, ...], ...]:
    """Per share mask, the resource names a query sends the source: on one GPU (every bit)
    all the source's own resources (those of a model fitted with other ``resources`` than
    the default), across GPUs the shared ones it has; a source that names no resources gets
    the masks' names as they are.

    >>> _share_names(("gpu_compute", "gpu_membw", "nvlink_bw"))[_FULL]
    ('gpu_compute', 'gpu_membw', 'nvlink_bw')
    >>> _share_names(("gpu_compute", "pcie_h2d"))[0b01100], _share_names(None)[0b01100]
    (('pcie_h2d',), ('pcie_h2d', 'pcie_d2h'))
    """
    if not isinstance(resources, tuple | list) or not all(isinstance(r, str) for r in resources):
        return _MASK_NAMES
    own = tuple(resources)
    return tuple(
        own if m == _FULL else tuple(r for r in names if r in own)
        for m, names in enumerate(_MASK_NAMES)
    )


#: A memoised query: (job type index, sorted ((co-runner type index, share bit mask), ...)).
Key = tuple[int, tuple[tuple[int, int], ...]]


def cross_gpu_evidence(source: object) -> bool:
    """Whether ``source`` knows how jobs on different GPUs slow each other.

    A model fitted only on jobs sharing one GPU cannot tell GPU contention from contention on
    the PCIe uplink or host that GPUs also share across a switch or socket (every resource is
    shared in its data), so its cross-GPU predictions are its prior's, not evidence. It has
    evidence when its fit data held runs spanning devices (``info["cross_device_runs"]``) or
    counters of a resource GPUs share across domains (PCIe traffic, host CPU). Sources that
    declare ``cross_gpu`` (e.g. :class:`MeasuredSpeeds`: False) are taken at their word.
    """
    declared = getattr(source, "cross_gpu", None)
    if isinstance(declared, bool):
        return declared
    info = getattr(source, "info", None) or {}
    if int(info.get("cross_device_runs", 0) or 0) > 0:
        return True
    from interplace.model import METRIC_RESOURCE

    shared = {r for kind, rs in DOMAIN_RESOURCES.items() if kind != DomainKind.GPU for r in rs}
    metrics = getattr(source, "metrics", ()) or ()
    return any(METRIC_RESOURCE.get(m) in shared for m in metrics)


def never_faster(source: object) -> bool:
    """Whether no co-runner can raise a job's speed under ``source``: in every draw, a job's
    speed next to co-runners at most its speed alone (what ``exact``'s bound needs).

    A fitted :class:`~interplace.model.InterferenceModel` guarantees it
    (``tests/model/test_properties.py``); a source that declares ``never_faster`` (e.g.
    :class:`MeasuredSpeeds`, False where a measured pair runs above 1) is taken at its word;
    any other is not assumed to.
    """
    declared = getattr(source, "never_faster", None)
    if isinstance(declared, bool):
        return declared
    from interplace.model import InterferenceModel

    return isinstance(source, InterferenceModel)


@dataclass
class _TopologyMemo:
    """What placement derives from a topology alone, shared by every :class:`Problem` built
    on that :class:`Topology` (immutable: its graph is frozen), so a scheduler, simulator or
    extender making a new problem per decision computes it once.

    ``machine_nodes``: the vertices of each machine; ``signatures``: each machine's structure
    (:meth:`Problem.machine_signature`); ``classes``: a small number per distinct signature
    and ``machine_class`` each machine's (equal numbers, equal signatures: a cheap key);
    ``comm``: all-reduce times of GPU sets
    (:meth:`Problem.comm_cost`, a pure function of the topology and the set; bounded);
    ``best_comm``: :math:`T^*` per gang size (:meth:`Problem.best_comm_cost`).
    """

    machine_nodes: dict[str, list[str]] | None = None
    signatures: dict[str, tuple[object, ...]] = field(default_factory=dict)
    classes: dict[tuple[object, ...], int] = field(default_factory=dict)
    machine_class: dict[str, int] = field(default_factory=dict)
    numbers: Iterator[int] = field(default_factory=itertools.count)
    comm: dict[tuple[object, ...], float] = field(default_factory=dict)
    best_comm: dict[int, float] = field(default_factory=dict)


_TOPOLOGY_MEMOS: weakref.WeakKeyDictionary[Topology, _TopologyMemo] = (
    weakref.WeakKeyDictionary()
)
_COMM_MEMO_SIZE = 65_536  # ring costs kept per topology (cleared when full)


def _topology_memo(topology: Topology) -> _TopologyMemo:
    """The shared memo of ``topology`` (created on first use, dropped with the topology)."""
    memo = _TOPOLOGY_MEMOS.get(topology)
    if memo is None:
        memo = _TOPOLOGY_MEMOS.setdefault(topology, _TopologyMemo())
    return memo


def _mask(names: Iterable[str]) -> int:
    m = 0
    for r in names:
        m |= 1 << _RESOURCES.index(r)
    return m


class SpeedCache:
    """Answered queries of one speed source, one ``seed`` and ``num_samples``, kept across
    placement calls (a scheduler or simulator deciding round after round).

    Answers are a pure function of the query for a fixed source, seed and number of draws,
    so reusing them is exact: the same candidate always gets the same draws.

    Threads may place with one cache at once (the Kubernetes extender's worker threads do):
    an answer's row is its position in the lists, so rows are taken and filled under
    ``lock``; reading a row already filed needs no lock (rows are only ever appended).

    >>> from interplace.placement import MeasuredSpeeds
    >>> cache = SpeedCache(MeasuredSpeeds({("a", "a"): 0.5}), num_samples=4, seed=0)
    >>> len(cache)
    0
    """

    def __init__(self, source: SpeedSource, *, num_samples: int = 128, seed: int = 0) -> None:
        if not isinstance(source, SpeedSource):
            raise InputError(f"SpeedCache needs a speed source, not a {type(source).__name__}")
        check_count(num_samples, "num_samples")
        self.source = source
        self.num_samples = num_samples
        self.seed = check_seed(seed)
        self.memo: dict[Key, int] = {}
        self.gang_memo: dict[tuple[tuple[Key, ...], float], int] = {}
        self.vec: list[torch.Tensor] = []  # each (S,): draws of the true speed
        self.meas: list[torch.Tensor] = []  # each (S,): draws of a measured speed
        self.mean: list[float] = []
        self.lock = threading.Lock()

    def serves(self, source: SpeedSource, num_samples: int, seed: int) -> bool:
        """Whether this cache answers for ``source`` with these draws."""
        return source is self.source and num_samples == self.num_samples and seed == self.seed

    def __len__(self) -> int:
        return len(self.memo)


@dataclass
class State:
    """A (partial) assignment: ``occ[g]`` lists the instances on GPU index ``g``;
    ``where[i]`` is instance ``i``'s GPU indices (None while unplaced); ``handle[i]`` is the
    memo row of its current speed (-1 while unplaced). ``ver[g]`` changes whenever ``occ[g]``
    does (and returns to its old value when a trial move is undone), so ``keys`` can cache
    each instance's query key per GPU; change ``occ`` only through :class:`Problem`."""

    occ: list[list[int]]
    where: list[tuple[int, ...] | None]
    handle: list[int]
    ver: list[int] = field(default_factory=list)
    keys: dict[tuple[int, int], tuple[tuple[int, ...], Key]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ver:
            self.ver = [0] * len(self.occ)

    def copy(self) -> State:
        """An independent copy."""
        return State(
            [list(o) for o in self.occ], list(self.where), list(self.handle), list(self.ver),
            dict(self.keys),
        )


def check_arguments(
    topology: object, source: object, jobs: object, state: object = None, *,
    can_share: object = None, cross_gpu: object = None, cache: object = None,
    reserved: object = None,
) -> list[Job]:
    """The arguments :func:`~interplace.placement.place`, :func:`~interplace.placement.score`
    and :class:`Problem` share, checked for their kinds (each wrong one an
    :class:`InputError` naming it, before any is used); returns ``jobs`` as a list.

    >>> from interplace.placement import MeasuredSpeeds
    >>> check_arguments("pcie-8gpu", MeasuredSpeeds({("a", "a"): 1.0}), [])
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: topology must be a Topology (topology.builtin, load...), not a str
    """
    if not isinstance(topology, Topology):
        raise InputError("topology must be a Topology (topology.builtin, load...), "
                         f"not a {type(topology).__name__}")
    if not isinstance(source, SpeedSource):
        raise InputError("model must be a fitted model or another speed source (jobs and "
                         f"posterior_speed), not a {type(source).__name__}")
    if isinstance(jobs, Job | str | bytes) or not isinstance(jobs, Iterable):
        raise InputError(f"jobs must be a sequence of Job objects, not a {type(jobs).__name__}")
    out = list(jobs)
    for j in out:
        if not isinstance(j, Job):
            raise InputError(f"jobs must be Job objects, not {type(j).__name__}")
    if state is not None and not isinstance(state, ClusterState):
        raise InputError(f"state must be a ClusterState or None, not a {type(state).__name__}")
    if can_share is not None and not callable(can_share):
        raise InputError(f"can_share must be a function of two job types or None, not "
                         f"{can_share!r}")
    if cross_gpu is not None and not isinstance(cross_gpu, bool):
        raise InputError(f"cross_gpu must be True, False or None, not {cross_gpu!r}")
    if cache is not None and not isinstance(cache, SpeedCache):
        raise InputError(f"cache must be a SpeedCache or None, not a {type(cache).__name__}")
    if reserved is not None and not isinstance(reserved, Mapping):
        raise InputError("reserved must map GPU ids to slot counts, not a "
                         f"{type(reserved).__name__}")
    return out


class Problem:
    """One placement problem: see the module docstring.

    Instances ``0 .. n_running - 1`` are the running jobs (fixed), the rest the new jobs in
    the order given. ``types`` are the source's job types; ``inst_type[i]`` indexes them.
    """

    def __init__(
        self,
        topology: Topology,
        source: SpeedSource,
        jobs: Sequence[Job],
        state: ClusterState | None = None,
        *,
        max_per_gpu: int = 2,
        objective: str = "sum",
        num_samples: int = 128,
        seed: int = 0,
        can_share: Callable[[str, str], bool] | None = None,
        cross_gpu: bool | None = None,
        cache: SpeedCache | None = None,
        min_gain: float | None = None,
        reserved: Mapping[str, int] | None = None,
    ) -> None:
        jobs = check_arguments(topology, source, jobs, state, can_share=can_share,
                               cross_gpu=cross_gpu, cache=cache, reserved=reserved)
        check_count(max_per_gpu, "max_per_gpu")
        if objective not in OBJECTIVES:
            raise InputError(
                f"unknown objective {objective!r} (choose from {', '.join(OBJECTIVES)})"
            )
        check_count(num_samples, "num_samples")
        self.topology = topology
        self.source = source
        if min_gain is not None and not is_real(min_gain):
            raise InputError(f"min_gain must be a finite number or None, not {min_gain!r}")
        self.min_gain = None if min_gain is None else float(min_gain)
        self.max_per_gpu = max_per_gpu
        self.objective = objective
        self.num_samples = num_samples
        self.seed = check_seed(seed)
        state = state or ClusterState.empty()
        ids = [j.job_id for j in jobs]
        dup = sorted({x for x in ids if ids.count(x) > 1}) if len(set(ids)) != len(ids) else []
        if dup:
            raise InputError(f"duplicate job id(s): {', '.join(dup[:5])}")
        clash = sorted(set(ids) & set(state.job_ids()))
        if clash:
            raise InputError(f"job id(s) already running: {', '.join(clash[:5])}")
        self.types: tuple[str, ...] = tuple(source.jobs)
        type_index = {t: i for i, t in enumerate(self.types)}
        all_jobs = [r.job for r in state.running] + jobs
        hints = (
            "give such a job its isolated counters, e.g. a gpu_util_pct column, to place it by "
            "the model's cold-start path, or refit with its isolated run",
            "a running job's type must be one the model knows or one a new job brings counters "
            "for; refit with its isolated run",
        )
        for where, group, hint in (("state: ", [r.job for r in state.running], hints[1]),
                                   ("", jobs, hints[0])):
            unknown = sorted({j.job for j in group if j.job not in type_index})
            if unknown:
                shown = ", ".join(repr(u) for u in unknown[:5]) + (
                    ", ..." if len(unknown) > 5 else "")
                raise InputError(
                    f"{where}unknown job type(s) {shown}: the model knows {len(self.types)} job "
                    f"types ({hint})"
                )
        self.gpus: tuple[str, ...] = tuple(topology.gpus())
        self.gpu_index = {g: i for i, g in enumerate(self.gpus)}
        machine_of = [topology.gpu(g).machine for g in self.gpus]
        machines: dict[str, list[int]] = {}
        for i, m in enumerate(machine_of):
            machines.setdefault(m, []).append(i)
        self.machine_of = machine_of
        self.machines = machines
        self.machine_size = max(len(v) for v in machines.values())
        for j in all_jobs:
            if j.gpus > len(self.gpus):
                raise InputError(
                    f"job {j.job_id} needs {j.gpus} GPUs; topology {topology.name!r} has "
                    f"{len(self.gpus)}"
                )
        self.jobs: tuple[Job, ...] = tuple(all_jobs)
        self.n_running = len(state.running)
        self.inst_type = [type_index[j.job] for j in all_jobs]
        self.fixed: list[tuple[int, ...] | None] = []
        for r in state.running:
            idx = []
            for g in r.gpus:
                if g not in self.gpu_index:
                    raise InputError(
                        f"state: running job {r.job.job_id} is on GPU {g!r}, which topology "
                        f"{topology.name!r} lacks"
                    )
                idx.append(self.gpu_index[g])
            self.fixed.append(tuple(idx))
        self.fixed += [None] * len(jobs)
        # Slots taken by jobs the model cannot see (no job type): they count against
        # max_per_gpu but are not scored.
        self.reserved = [0] * len(self.gpus)
        for g, n in (reserved or {}).items():
            if g not in self.gpu_index:
                raise InputError(f"reserved slots on GPU {g!r}, which topology {topology.name!r} "
                                 "lacks")
            if not is_int(n, 0):
                raise InputError(f"reserved slots on GPU {g} must be an integer >= 0")
            self.reserved[self.gpu_index[g]] = n
        self._share_ok = self._share_rule(can_share)
        self._share_any = can_share is None and getattr(source, "can_share", None) is None
        self._topo_memo = _topology_memo(topology)
        self.info: dict[str, object] = {}
        self._share_names = _share_names(getattr(source, "resources", None))
        self.cross_gpu = cross_gpu_evidence(source) if cross_gpu is None else bool(cross_gpu)
        self.info["cross_gpu"] = self.cross_gpu
        self.nbrs: list[list[tuple[int, int]]] = (
            self._neighbours() if self.cross_gpu else [[] for _ in self.gpus]
        )
        if cache is None:
            cache = SpeedCache(source, num_samples=num_samples, seed=self.seed)
        elif not cache.serves(source, num_samples, self.seed):
            raise InputError("the speed cache belongs to another model, seed or num_samples")
        self.cache = cache
        self._memo = cache.memo
        self._gang_memo = cache.gang_memo
        self._vec = cache.vec
        self._meas = cache.meas
        self._mean = cache.mean
        self._factors: dict[tuple[int, tuple[int, ...]], float] = {}
        # single_candidates: each GPU's standing, kept with the versions it was read at.
        self._standing: dict[int, tuple[tuple[int, ...], tuple[object, ...]]] = {}
        self._local_pos = {g: k for idx in machines.values() for k, g in enumerate(idx)}
        self.queries_answered = 0
        self._clock = itertools.count(1)

    # ------------------------------------------------------------ structure
    def _share_rule(
        self, can_share: Callable[[str, str], bool] | None
    ) -> Callable[[int, int], bool]:
        rule = can_share
        if rule is None:
            rule = getattr(self.source, "can_share", None)
        if rule is None:
            return lambda a, b: True
        cache: dict[tuple[int, int], bool] = {}
        types = self.types

        def ok(a: int, b: int) -> bool:
            key = (a, b) if a <= b else (b, a)
            if key not in cache:
                cache[key] = bool(rule(types[key[0]], types[key[1]]))
            return cache[key]

        return ok

    def _neighbours(self) -> list[list[tuple[int, int]]]:
        """Per GPU index, the other GPUs sharing a contention domain with it, and the mask."""
        nbrs: list[list[tuple[int, int]]] = [[] for _ in self.gpus]
        by_signature: dict[tuple[object, ...], list[list[tuple[int, int]]]] = {}
        for m, idx in self.machines.items():
            sig = self.machine_signature(m)
            local = by_signature.get(sig)
            if local is None:
                local = []
                for a in idx:
                    row = []
                    for lb, b in enumerate(idx):
                        if a == b:
                            continue
                        mask = _mask(shared_resources(self.topology, self.gpus[a], self.gpus[b]))
                        if mask:
                            row.append((lb, mask))
                    local.append(row)
                by_signature[sig] = local
            for la, a in enumerate(idx):
                nbrs[a] = [(idx[lb], mask) for lb, mask in local[la]]
        return nbrs

    def machine_signature(self, machine: str) -> tuple[object, ...]:
        """Identical for machines whose graphs match once the machine prefix is stripped.

        It holds every vertex (kind, GPU id) and edge (kind, bandwidth, NVLink count) of the
        machine, all that routes, ring costs and contention domains inside a machine read, so
        machines with equal signatures share them. Kept per topology (:class:`_TopologyMemo`).
        """
        sigs = self._topo_memo.signatures
        hit = sigs.get(machine)
        if hit is None:
            hit = sigs[machine] = self._signature(machine, self.machines[machine])
        return hit

    def machine_class(self, machine: str) -> int:
        """A number standing for :meth:`machine_signature` (equal for equal signatures)."""
        memo = self._topo_memo
        hit = memo.machine_class.get(machine)
        if hit is None:
            sig = self.machine_signature(machine)
            # a fresh number each try (atomic), so racing threads never share one by mistake
            hit = memo.classes.setdefault(sig, next(memo.numbers))
            memo.machine_class[machine] = hit
        return hit

    def _signature(self, machine: str, idx: list[int]) -> tuple[object, ...]:
        if not machine:
            return ("",)  # the one machine of a single-machine topology
        g = self.topology.graph
        memo = self._topo_memo
        if memo.machine_nodes is None:  # one pass over the graph for all machines
            by_machine: dict[str, list[str]] = {}
            for n, m in g.nodes(data="machine"):
                by_machine.setdefault(str(m), []).append(n)
            memo.machine_nodes = by_machine
        nodes = memo.machine_nodes.get(machine, [])
        pre = f"{machine}/"

        def strip(n: str) -> str:
            return n[len(pre):] if n.startswith(pre) else "~"

        vertices = sorted(
            (strip(n), str(g.nodes[n].get("kind")),
             str(g.nodes[n].get("gpu_id", "")).split(":", 1)[-1])
            for n in nodes
        )
        edges = sorted(
            (min(strip(u), strip(v)), max(strip(u), strip(v)), str(d.get("kind")),
             float(d.get("bandwidth", 0.0)), d.get("links"))
            for u, v, d in g.edges(nodes, data=True)
        )
        local_ids = tuple(self.gpus[i].split(":", 1)[-1] for i in idx)
        return (len(idx), local_ids, tuple(edges), tuple(vertices))

    def can_pair(self, i: int, k: int) -> bool:
        """Whether instances ``i`` and ``k`` may share a GPU (no forbidden type pair)."""
        return self._share_ok(self.inst_type[i], self.inst_type[k])

    def taken(self, st: State, g: int) -> int:
        """Slots of GPU ``g`` in use: its jobs and its reserved slots (jobs the model cannot
        see), what load-balancing and packing policies count."""
        return len(st.occ[g]) + self.reserved[g]

    def can_host(self, st: State, i: int, g: int) -> bool:
        """Whether instance ``i`` may join GPU ``g``: a free slot and no forbidden pair."""
        occ = st.occ[g]
        if len(occ) + self.reserved[g] >= self.max_per_gpu or i in occ:
            return False
        t = self.inst_type[i]
        return all(self._share_ok(t, self.inst_type[k]) for k in occ)

    def hosts(self, st: State, i: int) -> list[int]:
        """Every GPU index ``g`` with :meth:`can_host` ``(st, i, g)``, in index order.

        One pass over the GPUs with the checks inlined, :math:`O(g + t)` for :math:`g` GPUs
        and :math:`t` job types: the type-pair rule is asked once per job type (not at all
        when every pair may share), not once per co-runner.
        """
        cap, res, occs = self.max_per_gpu, self.reserved, st.occ
        free = [g for g, occ in enumerate(occs) if len(occ) + res[g] < cap and i not in occ]
        if self._share_any:
            return free
        t = self.inst_type[i]
        barred = {u for u in range(len(self.types)) if not self._share_ok(t, u)}
        if not barred:
            return free
        type_of = self.inst_type.__getitem__
        return [g for g in free if barred.isdisjoint(map(type_of, occs[g]))]

    def one_machine_gang(
        self, st: State, i: int, gpu_key: Callable[[int], tuple[int, ...]],
        machine_key: Callable[[Sequence[int], tuple[int, ...]], int],
        ok: Callable[[int], bool] | None = None,
    ) -> tuple[int, ...] | None:
        """The GPUs a rule-based policy gives gang instance ``i`` inside one machine, or None.

        On each machine with at least ``n`` GPUs that may take it (``ok``, default
        :meth:`can_host`), the ``n`` first by ``gpu_key``; of those sets, the one whose
        ``(machine_key(machine's GPUs, set), set[0])`` is smallest (ties: the lowest GPU
        index). The baselines differ only in the two keys (``pack``: fewest free slots;
        ``spread``: fewest jobs; ``lucid``: least load).
        """
        n = self.jobs[i].gpus
        take = ok if ok is not None else (lambda g: self.can_host(st, i, g))
        best: tuple[int, ...] | None = None
        best_key: tuple[int, int] | None = None
        for idx in self.machines.values():
            free = [g for g in idx if take(g)]
            if len(free) < n:
                continue
            chosen = tuple(sorted(sorted(free, key=gpu_key)[:n]))
            key = (machine_key(idx, chosen), chosen[0])
            if best_key is None or key < best_key:
                best, best_key = chosen, key
        return best

    # --------------------------------------------------------------- states
    def empty_state(self) -> State:
        """Running jobs on their GPUs, every new job unplaced (their speeds scored)."""
        n = len(self.jobs)
        st = State([[] for _ in self.gpus], [None] * n, [-1] * n)
        for i in range(self.n_running):
            fixed = self.fixed[i]
            assert fixed is not None
            for g in fixed:
                st.occ[g].append(i)
            st.where[i] = fixed
        for g, occ in enumerate(st.occ):
            if len(occ) + self.reserved[g] > self.max_per_gpu:
                ids = ", ".join(self.jobs[k].job_id for k in occ)
                held = f"runs {len(occ)} jobs ({ids})" if occ else "runs no job"
                if self.reserved[g]:
                    held += f" and has {self.reserved[g]} reserved slot(s)"
                raise InputError(
                    f"state: GPU {self.gpus[g]} {held}, more than "
                    f"max_per_gpu={self.max_per_gpu}"
                )
        self.refresh(st, range(self.n_running))
        return st

    def assign(self, st: State, i: int, gpus: Sequence[int]) -> None:
        """Place instance ``i`` on GPU indices ``gpus`` and rescore every affected instance."""
        if st.where[i] is not None:
            raise ValueError(f"instance {i} is already placed")
        st.where[i] = tuple(gpus)
        for g in gpus:
            st.occ[g].append(i)
            st.ver[g] = self.tick()
        self.refresh(st, self.affected(st, gpus) | {i})

    def unassign(self, st: State, i: int) -> tuple[int, ...]:
        """Remove instance ``i`` (a new job) and rescore; returns the GPUs it had."""
        gpus = st.where[i]
        if gpus is None or i < self.n_running:
            raise ValueError(f"instance {i} is not a placed new job")
        for g in gpus:
            st.occ[g].remove(i)
            st.ver[g] = self.tick()
        st.where[i] = None
        st.handle[i] = -1
        self.refresh(st, self.affected(st, gpus))
        return gpus

    def tick(self) -> int:
        """A fresh version number (never reused)."""
        return next(self._clock)

    def apply(self, st: State, moves: Mapping[int, tuple[int, ...] | None]) -> None:
        """Make ``moves`` for good: each instance leaves its GPUs, then takes its new ones
        (None: it becomes unplaced)."""
        for i in moves:
            if st.where[i] is not None:
                self.unassign(st, i)
        for i, target in moves.items():
            if target is not None:
                self.assign(st, i, target)

    def affected(self, st: State, gpus: Iterable[int]) -> set[int]:
        """Instances on ``gpus`` or on a GPU sharing a domain with one of them."""
        out: set[int] = set()
        for g in gpus:
            out.update(st.occ[g])
            for h, _ in self.nbrs[g]:
                out.update(st.occ[h])
        return out

    def refresh(self, st: State, instances: Iterable[int]) -> None:
        """Recompute the speed handles of ``instances`` (placed ones) in ``st``."""
        todo = [i for i in instances if st.where[i] is not None]
        handles = self.handles(st, todo)
        for i, h in zip(todo, handles, strict=True):
            st.handle[i] = h

    # -------------------------------------------------------------- scoring
    def key(self, st: State, i: int, g: int) -> Key:
        """The memo key of instance ``i``'s query on its GPU ``g`` in state ``st``."""
        vk = self._versions(st, g)
        hit = st.keys.get((i, g))
        if hit is not None and hit[0] == vk:
            return hit[1]
        key = self._key(st, i, g)
        st.keys[(i, g)] = (vk, key)
        return key

    def _versions(self, st: State, g: int) -> tuple[int, ...]:
        """The versions of GPU ``g`` and of its neighbours in ``st``: while they stand, so do
        the jobs on and around ``g`` (versions are never reused within a problem)."""
        nbrs = self.nbrs[g]
        return (st.ver[g],) if not nbrs else (st.ver[g], *(st.ver[h] for h, _ in nbrs))

    def _key(self, st: State, i: int, g: int) -> Key:
        co: dict[int, int] = {}
        for k in st.occ[g]:
            if k != i:
                co[k] = _FULL
        for h, m in self.nbrs[g]:
            for k in st.occ[h]:
                if k != i:
                    co[k] = co.get(k, 0) | m
        t = self.inst_type
        return (t[i], tuple(sorted((t[k], m) for k, m in co.items())))

    def handles(self, st: State, instances: Sequence[int]) -> list[int]:
        """Memo rows of the current speeds of placed ``instances`` (computing what is missing)."""
        keys_of: list[tuple[Key, ...]] = []
        missing: dict[Key, None] = {}
        for i in instances:
            where = st.where[i]
            assert where is not None
            ks = tuple(self.key(st, i, g) for g in where)
            keys_of.append(ks)
            for k in ks:
                if k not in self._memo:
                    missing[k] = None
        if missing:
            self._answer(list(missing))
        out = []
        for i, ks in zip(instances, keys_of, strict=True):
            if len(ks) == 1:
                out.append(self._memo[ks[0]])
            else:
                where = st.where[i]
                assert where is not None
                out.append(self._gang(ks, self.comm_factor(i, where)))
        return out

    def move_gains(
        self, st: State, options: Sequence[Mapping[int, tuple[int, ...] | None]]
    ) -> list[float]:
        """:meth:`move_gain` of each of ``options``, their new queries answered in one batch.

        Each option is applied once: its affected instances' query keys are collected, the
        missing ones are answered together, and the gains are summed from the memo. For an
        objective other than ``sum`` it is :meth:`move_gain` per option.
        """
        if self.objective != "sum":
            now = self.value(st)
            return [self.move_gain(st, moves, now) for moves in options]
        records = []
        missing: dict[Key, None] = {}
        for moves in options:
            with self._applied(st, moves) as aff:
                rows = []
                for i in aff:
                    where = st.where[i]
                    assert where is not None
                    ks = tuple(self.key(st, i, g) for g in where)
                    factor = self.comm_factor(i, where) if len(ks) > 1 else 1.0
                    rows.append((i, ks, factor))
                    for k in ks:
                        if k not in self._memo:
                            missing[k] = None
            records.append((moves, rows))
        if missing:
            self._answer(list(missing))
        gains = []
        for moves, rows in records:
            total = 0.0
            for i, ks, factor in rows:
                h = self._memo[ks[0]] if len(ks) == 1 else self._gang(ks, factor)
                old = st.handle[i]
                total += self._mean[h] - (self._mean[old] if old >= 0 else 0.0)
            for i, where in moves.items():
                if where is None and st.handle[i] >= 0:
                    total -= self._mean[st.handle[i]]
            gains.append(total)
        return gains

    def _answer(self, keys: list[Key]) -> None:
        types = self.types
        queries = [
            Query(
                types[t],
                tuple(types[c] for c, _ in co),
                tuple(self._share_names[m] for _, m in co),
            )
            for t, co in keys
        ]
        post = self.source.posterior_speed(queries, num_samples=self.num_samples, seed=self.seed)
        speed = post.speed.to(torch.float64)
        meas = post.measured.to(torch.float64)
        means = speed.mean(0).tolist()
        with self.cache.lock:  # a row is a position: taken and filled by one thread at a time
            for q, key in enumerate(keys):
                if key in self._memo:  # another thread filed it meanwhile (the same answer)
                    continue
                self._vec.append(speed[:, q])
                self._meas.append(meas[:, q])
                self._mean.append(float(means[q]))
                self._memo[key] = len(self._vec) - 1
        self.queries_answered += len(keys)

    def _gang(self, keys: tuple[Key, ...], factor: float) -> int:
        """A gang's speed: its slowest GPU in each draw, times its communication factor."""
        gk = (tuple(sorted(keys)), factor)
        hit = self._gang_memo.get(gk)
        if hit is not None:
            return hit
        rows = [self._memo[k] for k in gk[0]]
        vec = torch.stack([self._vec[r] for r in rows]).min(0).values * factor
        meas = torch.stack([self._meas[r] for r in rows]).min(0).values * factor
        with self.cache.lock:
            hit = self._gang_memo.get(gk)  # filed by another thread meanwhile
            if hit is not None:
                return hit
            self._vec.append(vec)
            self._meas.append(meas)
            self._mean.append(float(vec.mean()))
            h = self._gang_memo[gk] = len(self._vec) - 1
        return h

    def comm_factor(self, i: int, gpus: Sequence[int]) -> float:
        """Instance ``i``'s communication factor on ``gpus`` (:mod:`..._comm`), memoised."""
        key = (i, tuple(gpus))
        hit = self._factors.get(key)
        if hit is None:
            hit = self._factors[key] = self._comm_factor(i, gpus)
        return hit

    def _comm_factor(self, i: int, gpus: Sequence[int]) -> float:
        n = len(gpus)
        share = self.jobs[i].comm_share
        if n <= 1 or share <= 0:
            return 1.0
        t = self.comm_cost(gpus)
        best = self.best_comm_cost(n)
        if best <= 0:
            return 1.0
        return 1.0 / ((1.0 - share) + share * max(t / best, 1.0))

    def comm_cost(self, gpus: Sequence[int]) -> float:
        """All-reduce time of the cheapest ring through ``gpus``.

        Memoised per topology, across problems (:class:`_TopologyMemo`): :func:`comm_time`
        reads nothing but the topology and the GPU set (no job parameter), so the memo is
        exact. Sets inside one machine are keyed by the machine's signature and the GPUs'
        local positions (identical machines share their rings' costs); other sets by their
        GPU indices.
        """
        key = tuple(sorted(gpus))
        machines = {self.machine_of[g] for g in key}
        ckey: tuple[object, ...] = ("gpus", key)
        if len(machines) == 1:
            m = machines.pop()
            local = tuple(self._local_pos[g] for g in key)
            ckey = ("machine", self.machine_class(m), local)
        memo = self._topo_memo.comm
        hit = memo.get(ckey)
        if hit is None:
            hit = comm_time(self.topology, [self.gpus[g] for g in key])
            if len(memo) >= _COMM_MEMO_SIZE:
                memo.clear()  # bounded: a long simulation tries many cross-machine sets
            memo[ckey] = hit
        return hit

    def best_comm_cost(self, n: int) -> float:
        """:math:`T^*`: the all-reduce time on the best ``n``-GPU set of the topology
        (memoised per topology): the best set inside any machine it fits, one machine of each
        class tried (in a cluster of different machines the first may not hold the best); a
        gang larger than every machine, the first ``n`` GPUs."""
        memo = self._topo_memo.best_comm
        hit = memo.get(n)
        if hit is None:
            classes: dict[int, list[int]] = {}
            for m, idx in self.machines.items():
                classes.setdefault(self.machine_class(m), idx)
            fits = [idx for idx in classes.values() if n <= len(idx)]
            if fits:
                hit = min(self.comm_cost(c) for idx in fits
                          for c in itertools.combinations(idx, n))
            else:
                hit = self.comm_cost(list(range(n)))
            memo[n] = hit
        return hit

    def mean(self, handle: int) -> float:
        """Posterior mean speed behind a memo row."""
        return self._mean[handle]

    def draws(self, handle: int) -> torch.Tensor:
        """``(S,)`` posterior draws of the true speed behind a memo row."""
        return self._vec[handle]

    def measured_draws(self, handle: int) -> torch.Tensor:
        """``(S,)`` draws of a measured speed behind a memo row."""
        return self._meas[handle]

    # ------------------------------------------------------------ objective
    def value(self, st: State, replace: Mapping[int, int] | None = None) -> float:
        """The objective of ``st`` (with some instances' handles replaced), one number."""
        handles = list(st.handle)
        if replace:
            for i, h in replace.items():
                handles[i] = h
        placed = [h for h in handles if h >= 0]
        if not placed:
            return 0.0
        if self.objective == "sum":
            return float(sum(self._mean[h] for h in placed))
        per_draw = self.per_draw(placed)
        if self.objective == "max-min":
            return float(per_draw.mean())
        return float(torch.quantile(per_draw, RISK_QUANTILE))

    def per_draw(self, handles: Sequence[int]) -> torch.Tensor:
        """``(S,)``: the objective's per-draw quantity (summed or worst speed)."""
        m = torch.stack([self._vec[h] for h in handles])
        return m.min(0).values if self.objective == "max-min" else m.sum(0)

    def gain(self, st: State, i: int, gpus: Sequence[int]) -> float:
        """The objective after placing instance ``i`` on ``gpus`` minus now (``st`` unchanged)."""
        return self.move_gain(st, {i: tuple(gpus)})

    def move_gain(
        self,
        st: State,
        moves: Mapping[int, tuple[int, ...] | None],
        current: float | None = None,
    ) -> float:
        """The objective's change if ``moves`` were made (``st`` unchanged).

        For ``sum`` only the affected jobs' speeds are summed; other objectives compare the
        whole placement (``current``: the objective of ``st``, if known).
        """
        if self.objective != "sum":
            now = self.value(st) if current is None else current
            return self.move_value(st, moves) - now
        with self._applied(st, moves) as aff:
            order = sorted(aff)
            new = self.handles(st, order)
        total = 0.0
        for k, h in zip(order, new, strict=True):
            old = st.handle[k]
            total += self._mean[h] - (self._mean[old] if old >= 0 else 0.0)
        for i, where in moves.items():
            if where is None and st.handle[i] >= 0:
                total -= self._mean[st.handle[i]]
        return total

    @contextlib.contextmanager
    def _applied(
        self, st: State, moves: Mapping[int, tuple[int, ...] | None]
    ) -> Iterator[set[int]]:
        """Apply ``moves`` to ``st`` for the duration of the block; yields the affected set."""
        old = {i: st.where[i] for i in moves}
        touched: set[int] = set()
        for i in moves:
            touched.update(st.where[i] or ())
            touched.update(moves[i] or ())
        versions = {g: st.ver[g] for g in touched}
        for g in touched:
            st.ver[g] = self.tick()
        for i, new in moves.items():
            before = st.where[i]
            if before is not None:
                for g in before:
                    st.occ[g].remove(i)
                touched.update(before)
            st.where[i] = new
            if new is not None:
                for g in new:
                    st.occ[g].append(i)
                touched.update(new)
        try:
            yield self.affected(st, touched) | {i for i, n in moves.items() if n is not None}
        finally:
            for i, new in moves.items():
                if new is not None:
                    for g in new:
                        st.occ[g].remove(i)
            for i, before in old.items():
                st.where[i] = before
                if before is not None:
                    for g in before:
                        st.occ[g].append(i)
            for g, v in versions.items():
                st.ver[g] = v  # the state is as it was: so are its cached keys

    def prefetch(
        self, st: State, options: Iterable[Mapping[int, tuple[int, ...] | None]]
    ) -> None:
        """Answer, in one batch, every query the candidate ``options`` would ask."""
        missing: dict[Key, None] = {}
        for moves in options:
            with self._applied(st, moves) as aff:
                for i in aff:
                    where = st.where[i]
                    if where is None:
                        continue
                    for g in where:
                        k = self.key(st, i, g)
                        if k not in self._memo:
                            missing[k] = None
        if missing:
            self._answer(list(missing))

    def move_value(self, st: State, moves: Mapping[int, tuple[int, ...] | None]) -> float:
        """The objective after relocating instances (None: unplace); ``st`` is left unchanged."""
        with self._applied(st, moves) as aff:
            order = sorted(aff)
            replace = dict(zip(order, self.handles(st, order), strict=True))
        for i, new in moves.items():
            if new is None:
                replace[i] = -1
        if self.objective == "sum":
            base = self._placed_sum(st)
            for i, h in replace.items():
                if st.handle[i] >= 0:
                    base -= self._mean[st.handle[i]]
                if h >= 0:
                    base += self._mean[h]
            return float(base)
        return self.value(st, replace)

    def _placed_sum(self, st: State) -> float:
        return sum(self._mean[h] for h in st.handle if h >= 0)

    def alone_handle(self, i: int) -> int:
        """Memo row of instance ``i``'s speed with no co-runner at all (an upper bound on any)."""
        key: Key = (self.inst_type[i], ())
        if key not in self._memo:
            self._answer([key])
        return self._memo[key]

    def alone_mean(self, i: int) -> float:
        """Instance ``i``'s mean speed with no co-runner at all."""
        return self._mean[self.alone_handle(i)]

    # ------------------------------------------------------------ candidates
    def single_candidates(self, st: State, i: int) -> list[int]:
        """GPUs instance ``i`` (one GPU) may join, one per class of interchangeable GPUs.

        Two GPUs are interchangeable when their machines have the same structure, they sit at
        the same local position and every GPU they share a domain with holds the same job
        types: then every candidate score is equal, so only the first is kept.
        """
        seen: set[tuple[object, ...]] = set()
        out = []
        t = self.inst_type
        if not self.cross_gpu:  # a GPU's own jobs are all that matter
            cap = self.max_per_gpu
            seen_local: set[tuple[int, ...]] = set()
            for g, occ in enumerate(st.occ):
                if len(occ) + self.reserved[g] >= cap:
                    continue
                local = (self.reserved[g], *sorted(t[k] for k in occ))
                if local in seen_local or not self.can_host(st, i, g):
                    continue
                seen_local.add(local)
                out.append(g)
            return out
        standing = self._standing
        for g in self.hosts(st, i):
            # A GPU's standing changes only with its own or a neighbour's jobs: their versions
            # key it, as they key the speed queries (key).
            vk = self._versions(st, g)
            hit = standing.get(g)
            if hit is not None and hit[0] == vk:
                sig = hit[1]
            else:
                nbrs = self.nbrs[g]
                sig = (
                    tuple(sorted(t[k] for k in st.occ[g])),
                    tuple((m, tuple(sorted(t[k] for k in st.occ[h]))) for h, m in nbrs),
                    len(nbrs),
                )
                standing[g] = (vk, sig)
            if sig in seen:
                continue
            seen.add(sig)
            out.append(g)
        return out

    def gang_candidates(
        self, st: State, i: int, limit: int | None = 6
    ) -> list[tuple[int, ...]]:
        """Candidate GPU sets for a gang instance: inside one machine when it fits.

        Per machine with enough free GPUs, one set per class of alike sets, cheapest
        all-reduce first (ties: the least loaded, then the least loaded neighbours), at most
        ``limit`` per machine (:meth:`_gang_classes`); machines in the same state contribute
        once. A job larger than a machine: whole free machines (contiguous runs of them),
        and the GPUs that can take it filled machine by machine
        (:meth:`_spanning_candidates`).

        ``limit=None`` (exact search): every set inside each machine, and machines count as
        in the same state only when they hold the same gangs too (:meth:`_gang_holds`);
        symmetric sets inside a machine are left to the caller (``exact``'s orbits), since
        equal ring costs and holdings alone do not make two sets interchangeable (what they
        leave free may differ). A job larger than a machine: every set of GPUs that can take
        it, up to :data:`SPANNING_SETS` (:meth:`_spanning_sets`).
        """
        n = self.jobs[i].gpus
        out: list[tuple[int, ...]] = []
        seen: set[tuple[object, ...]] = set()
        t = self.inst_type

        def holds(g: int) -> tuple[object, ...]:  # what a GPU holds: reserved slots, job types
            if limit is None:
                return self._gang_holds(st, g)
            return (self.reserved[g], *sorted(t[k] for k in st.occ[g]))

        for idx in self.machines.values():
            free = [g for g in idx if self.can_host(st, i, g)]
            if n > len(idx):
                continue
            if len(free) < n:
                continue
            sig = (
                len(idx),
                tuple(holds(g) for g in idx),
                self.machine_class(self.machine_of[idx[0]]) if len(self.machines) > 1 else None,
            )
            if sig in seen:
                continue
            seen.add(sig)
            if len(free) == n:
                out.append(tuple(free))
                continue
            combos = list(itertools.combinations(free, n))
            if limit is None:
                combos.sort(key=lambda c: (self.comm_cost(c), sum(len(st.occ[g]) for g in c), c))
                out.extend(combos)
                continue
            if len(combos) > 400:  # large machines: contiguous windows
                combos = [tuple(free[s : s + n]) for s in range(len(free) - n + 1)]
            out.extend(self._gang_classes(st, combos, holds, limit))
        if n > self.machine_size:
            out.extend(self._spanning_sets(st, i) if limit is None
                       else self._spanning_candidates(st, i, limit))
        return out

    def _gang_classes(
        self,
        st: State,
        combos: Sequence[tuple[int, ...]],
        holds: Callable[[int], tuple[object, ...]],
        limit: int,
    ) -> list[tuple[int, ...]]:
        """One GPU set per class of alike sets inside a machine, at most ``limit`` classes:
        the heuristics' gang candidates.

        Two sets are alike when their rings cost the same, their GPUs hold the same (reserved
        slots, job types) and, where the source scores contention across GPUs, each GPU's
        neighbours outside the set hold the same behind the same shared resources, and the
        set's own GPUs share the same resources among themselves: placing the gang on either
        is scored the same. Classes are taken cheapest ring first, then least loaded, then
        with the least loaded neighbours (each neighbour's slots in use weighted by how many
        resources it shares), then the most compact (the fewest resources shared with GPUs
        outside the set, so that of sets scored alike the one that leaves later jobs the least
        contention comes first: the heuristics take the first of equal scores), then by GPU
        index; each is represented by its first set in that order. Keeping classes rather
        than the first sets in index order keeps a gang's options apart: on a machine whose
        GPUs are all one ring cost apart, with GPU 0 busy, the first six sets all held GPU 1,
        which shares GPU 0's PCIe switch.
        """
        nbrs = self.nbrs
        held: dict[int, tuple[object, ...]] = {}
        cost = {c: self.comm_cost(c) for c in combos}

        def hold(g: int) -> tuple[object, ...]:
            h = held.get(g)
            if h is None:
                h = held[g] = holds(g)
            return h

        def rank(c: tuple[int, ...]) -> tuple[object, ...]:
            near = [(m.bit_count(), self.taken(st, h)) for g in c for h, m in nbrs[g] if h not in c]
            return (cost[c], sum(len(st.occ[g]) for g in c),  # ring, load,
                    sum(w * k for w, k in near), sum(w for w, _ in near), c)  # near, exposure

        def alike(c: tuple[int, ...]) -> tuple[object, ...]:
            per = sorted(
                (hold(g), tuple(sorted((m, hold(h)) for h, m in nbrs[g] if h not in c)))
                for g in c
            )
            inner = tuple(sorted(m for g in c for h, m in nbrs[g] if h in c and h > g))
            return (cost[c], tuple(per), inner)

        ranked = sorted(combos, key=rank)
        out: list[tuple[int, ...]] = []
        seen: set[tuple[object, ...]] = set()
        for c in ranked:
            key = alike(c)
            if key in seen:
                continue
            seen.add(key)
            out.append(c)
            if len(out) == limit:
                break
        return out

    def _hostable_by_machine(self, st: State, i: int) -> list[list[int]]:
        """Per machine with any, the GPUs that can take instance ``i``, least loaded first;
        machines with the most such GPUs first (then the least loaded, then in order)."""
        per = []
        for idx in self.machines.values():
            free = sorted((g for g in idx if self.can_host(st, i, g)),
                          key=lambda g: (self.taken(st, g), g))
            if free:
                per.append(free)
        per.sort(key=lambda f: (-len(f), sum(self.taken(st, g) for g in f), f[0]))
        return per

    def _spanning_candidates(self, st: State, i: int, limit: int) -> list[tuple[int, ...]]:
        """A few GPU sets for a gang larger than a machine (the heuristics' candidates):
        contiguous runs of machines with every GPU free, then the GPUs that can take it
        filled machine by machine (the machines with most such GPUs first, least loaded GPUs
        first), then the same with the least loaded machines first."""
        n = self.jobs[i].gpus
        out: list[tuple[int, ...]] = []
        whole = [idx for idx in self.machines.values()
                 if all(self.can_host(st, i, g) for g in idx)]
        need = math.ceil(n / self.machine_size)
        for s in range(len(whole) - need + 1):
            out.append(tuple([g for idx in whole[s : s + need] for g in idx][:n]))
        per = self._hostable_by_machine(st, i)
        if sum(len(f) for f in per) >= n:
            by_load = sorted(per, key=lambda f: (sum(self.taken(st, g) for g in f) / len(f),
                                                 -len(f), f[0]))
            for order in (per, by_load):
                out.append(tuple(sorted(itertools.islice(itertools.chain(*order), n))))
        return list(dict.fromkeys(tuple(sorted(c)) for c in out))[:limit]

    def _spanning_sets(self, st: State, i: int) -> list[tuple[int, ...]]:
        """Every set of GPUs that can take a gang larger than a machine (exact search), up to
        :data:`SPANNING_SETS`: fewest machines first (as many GPUs as can be from the
        machines with the most free ones), least loaded GPUs first. A placement may put such
        a gang on any GPUs (:func:`~interplace.placement._place.check_state`), and no
        symmetry is used to merge these sets: a ring across machines runs through the GPUs
        in their order, so which positions it takes in each machine changes its cost. Past
        the limit ``info["spanning_capped"]`` is set, and the search is not proven optimal.
        """
        n = self.jobs[i].gpus
        per = self._hostable_by_machine(st, i)
        room = [0] * (len(per) + 1)
        for m in range(len(per) - 1, -1, -1):
            room[m] = room[m + 1] + len(per[m])
        out: list[tuple[int, ...]] = []

        def grow(m: int, left: int, chosen: tuple[int, ...]) -> bool:
            if left == 0:
                if len(out) == SPANNING_SETS:  # one set more than the search tries
                    return False
                out.append(tuple(sorted(chosen)))
                return True
            if left > room[m]:
                return True
            for c in range(min(left, len(per[m])), -1, -1):
                for combo in itertools.combinations(per[m], c):
                    if not grow(m + 1, left - c, chosen + combo):
                        return False
            return True

        if not grow(0, n, ()):
            self.info["spanning_capped"] = True
        return out

    def _gang_holds(self, st: State, g: int) -> tuple[object, ...]:
        """What GPU ``g`` holds, for telling machines in the same state apart: its reserved
        slots, its single-GPU job types, and its gangs: a gang inside ``g``'s machine by its
        type, size, communication share and local positions (two such gangs are alike), any
        other by its instance (it is alike to no other)."""
        t, where, jobs = self.inst_type, st.where, self.jobs
        singles: list[int] = []
        gangs: list[tuple[object, ...]] = []
        machine = self.machine_of[g]
        for k in st.occ[g]:
            w = where[k] or ()
            if len(w) <= 1:
                singles.append(t[k])
            elif all(self.machine_of[h] == machine for h in w):
                local = tuple(sorted(self._local_pos[h] for h in w))
                gangs.append((0, t[k], jobs[k].gpus, jobs[k].comm_share, local))
            else:
                gangs.append((1, k))
        return (self.reserved[g], tuple(sorted(singles)), tuple(sorted(gangs, key=repr)))

    def candidates(
        self, st: State, i: int, *, exhaustive: bool = False
    ) -> list[tuple[int, ...]]:
        """Every candidate GPU tuple for instance ``i`` (see the two methods above);
        ``exhaustive``: every GPU set of a gang, not only the cheapest few (exact search)."""
        if self.jobs[i].gpus == 1:
            return [(g,) for g in self.single_candidates(st, i)]
        return self.gang_candidates(st, i, limit=None if exhaustive else 6)

    def order(self) -> list[int]:
        """New instances, gangs first (largest first), then in the order given."""
        new = range(self.n_running, len(self.jobs))
        return sorted(new, key=lambda i: (-self.jobs[i].gpus, i))

    def new_instances(self) -> range:
        """Indices of the new jobs."""
        return range(self.n_running, len(self.jobs))

    def rng(self, seed: int) -> np.random.Generator:
        """A seeded generator for a policy's own randomness."""
        return np.random.default_rng(seed)
