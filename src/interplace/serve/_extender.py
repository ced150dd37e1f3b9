r"""The extender's logic, free of HTTP: filter, prioritize, bind and preempt on JSON objects.

Wire format: ``k8s.io/kube-scheduler/extender/v1`` (``types.go``), whose Go structs carry no
JSON tags, so the keys are the Go field names: ``ExtenderArgs{Pod, Nodes, NodeNames}``,
``ExtenderFilterResult{Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error}``,
``HostPriorityList`` = ``[{Host, Score}]`` (``MaxExtenderPriority`` = 10),
``ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}`` -> ``ExtenderBindingResult{Error}``,
``ExtenderPreemptionArgs{Pod, NodeNameToVictims, NodeNameToMetaVictims}`` ->
``ExtenderPreemptionResult{NodeNameToMetaVictims}``. With ``nodeCacheCapable`` the scheduler
sends ``NodeNames`` (``Nodes`` null) and reads ``NodeNames`` back; without it, the full
``Nodes`` list both ways. Returned nodes are always a subset of those sent.

Scores: the predicted objective gain :math:`g` of the best placement of the pod on the node
(its own predicted speed minus the slowdown it brings to the node's pods, in job-speed units,
per GPU for a multi-GPU pod), relative to the best node's in the same call, as kube-scheduler
normalises its own plugins' scores (:func:`node_score`): 10 for the best node and any within
half a percent of it, :math:`\lfloor 10\, g / g^* \rfloor` below, 0 where :math:`g \le 0`.
So a node where the pod would cost anything measurable scores below one where it costs
nothing, however small the cost (a pod's own speed can exceed 1, where its co-located speeds
say its recorded isolated throughput was low, so gains are not bounded by 1). Where no node
gains (:math:`g^* \le 0`: the pod would cost the pods already there more than it runs, on
every node), the scores still rank the nodes, from the least costly (10) to the most
costly (0) in the call: :math:`\lfloor 10\,(g - g_*) / (g^* - g_*) \rfloor`, with
:math:`g_*` the lowest gain. kube-scheduler
multiplies an extender's score by its ``weight`` and by 10 (``MaxNodeScore /
MaxExtenderPriority``) before adding it to its own plugins' scores. A pod without
:data:`~interplace.serve._pods.KEY_JOB_TYPE`, or of a type the model does not know, gets the
same neutral score (5) on every node that fits it.

State: which pods run on which GPUs (:class:`Book`), rebuilt from the API server's pods (the
:data:`~interplace.serve._pods.ANNOTATION_GPUS` annotation ``bind`` writes) and kept current by
a watch (:mod:`._kube`); every booking goes through one lock, and a bind re-checks capacity
under it, so concurrent binds never double-book a GPU. A booking is keyed by the pod's
``namespace/name`` and remembers its UID: a pod recreated under the same name (a
StatefulSet's) replaces the booking of the one before it, and a late deletion of the old pod
leaves the new one's booking alone.

A booking that ``bind`` makes through the API server is *assumed* (as kube-scheduler's cache
assumes the pods it binds) until a watch event or a list shows that pod, same UID, bound: a
re-list whose pods were read before the binding landed keeps it, and so does a late event of
an older pod of the same name (one that is terminating, or created earlier, or, where the
creation times are unknown, any other pod while the booking is assumed). An assumption that
no event confirms within ``assume_ttl_s`` is dropped. A bind for a UID other than the booked
pod of that name's is refused unless the booked pod is known to have gone (the API server's
pod of that name is the one bound, or the bound one was created later). A GPU that holds
more pods than ``max_per_gpu`` (bound by a service with a higher limit, say) is full: no pod
is placed on it, and its pods are counted there but not seen by the model; so is a pod
booked on more or fewer GPUs than it asks for (an ``interplace.io/gpus`` edited by hand).

A pod whose ``interplace.io/`` labels or annotations are malformed (or name what placement
refuses: a counter reading that is not a finite number >= 0, a metric no model reads, a
family with a control character) is refused by ``filter`` on every node
(``FailedAndUnresolvableNodes``, with the reason, which kube-scheduler shows on the pod)
rather than answered with an error status, which an ``ignorable`` extender's caller would
skip; the book still counts its GPUs if it runs (bound by someone else), unseen by the model.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeVar

from interplace.errors import InputError, check_count, check_seed, first_line, is_real
from interplace.placement import (
    ClusterState,
    Job,
    Running,
    SpeedCache,
    SpeedSource,
    place,
    resolve_policy,
)
from interplace.serve._pods import ANNOTATION_GPUS, PodRequest, parse_pod
from interplace.topology import Topology

__all__ = ["NEUTRAL_SCORE", "Book", "Booking", "Extender"]

#: A node as placement sees it: topology, running jobs, slots of jobs the model cannot see,
#: and a hashable key of that state (for the score cache). Immutable: a snapshot of the book
#: that prioritize scores from once it has let go of the book.
_View = tuple[Topology, ClusterState, Mapping[str, int], tuple[object, ...]]

_MISSING = object()

SPEED_CACHE_ROWS = 100_000
"""Answered speed queries the shared :class:`~interplace.placement.SpeedCache` keeps (it
starts afresh past this many: a long-running extender meets ever new node states)."""

log = logging.getLogger("interplace.serve")

_K = TypeVar("_K")
_V = TypeVar("_V")


def _remember(cache: dict[_K, _V], key: _K, value: _V, limit: int) -> None:
    """``cache[key] = value``, the whole cache dropped first once it holds more than ``limit``
    entries: a long-running extender meets ever new node states, and the ones in use come back
    at the next request. Not atomic: call with the lock that guards ``cache`` held."""
    if len(cache) > limit:
        cache.clear()
    cache[key] = value

NEUTRAL_SCORE = 5
"""The score of every node for a pod the model cannot score."""

MAX_PRIORITY = 10
"""``extenderv1.MaxExtenderPriority``."""

TIE = 0.005
"""Gains within this share of the best node's score as the best (:func:`node_score`)."""

ASSUME_TTL_S = 300.0
"""How long a booking ``bind`` made stays without an event showing its pod bound (seconds)."""

_FINISHED = ("Succeeded", "Failed")

WATCH_EVENTS = ("ADDED", "MODIFIED", "DELETED")
"""The watch event types :meth:`Extender.observe` applies to the book."""


def _other(a: str, b: str) -> bool:
    """Whether UIDs ``a`` and ``b`` name two different pods (an empty UID is not known)."""
    return bool(a and b and a != b)


def _newer(req: PodRequest, held: Booking, default: bool) -> bool:
    """Whether ``req`` is a later pod of its name than the booked one: by creation time where
    both are known and differ, else ``default``."""
    if req.created is not None and held.created is not None and req.created != held.created:
        return req.created > held.created
    return default


def _check_callable(value: object, what: str) -> None:
    if not callable(value):
        raise InputError(f"{what} must be a function, not {type(value).__name__}")


def _request(args: object, what: str) -> Mapping[str, Any]:
    """``args`` if it is an object (a verb's JSON request), else an :class:`InputError`."""
    if not isinstance(args, Mapping):
        raise InputError(f"{what} must be an object, not {type(args).__name__}")
    return args


def _victim_pods(victims: Any, what: str) -> list[Mapping[str, Any]]:
    """The ``Pods`` of a node's ``Victims`` or ``MetaVictims`` object (null: none), each an
    object; :class:`InputError` for any other shape, and for a ``NumPDBViolations`` that is
    not an integer."""
    if victims is None:
        return []
    if not isinstance(victims, Mapping):
        raise InputError(f"{what} values must be objects")
    pods = victims.get("Pods") or []
    if not isinstance(pods, list) or not all(isinstance(p, Mapping) for p in pods):
        raise InputError(f"{what}: Pods must be a list of objects")
    count = victims.get("NumPDBViolations")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        raise InputError(f"{what}: NumPDBViolations must be an integer, not {count!r}")
    return pods


def node_score(gain: float, best: float, worst: float | None = None) -> int:
    """A node's score in ``0..MAX_PRIORITY`` from its predicted gain and the best and worst
    gains in the call (``worst`` matters only where no node gains, ``best <= 0``; module
    docstring).

    >>> [node_score(g, 1.04) for g in (1.04, 1.036, 1.0, 0.5, -0.1)]
    [10, 10, 9, 4, 0]
    >>> [node_score(g, -0.25, -0.75) for g in (-0.25, -0.5, -0.75)]
    [10, 5, 0]
    """
    if best <= 0:
        low = best if worst is None else min(worst, gain)
        if best - low <= TIE * abs(best) + 1e-12:
            return MAX_PRIORITY
        ratio = (gain - low) / (best - low)
    elif gain <= 0:
        return 0
    else:
        ratio = gain / best
    ratio = min(ratio, 1.0)
    return MAX_PRIORITY if ratio >= 1.0 - TIE - 1e-12 else math.floor(MAX_PRIORITY * ratio)


@dataclass(frozen=True)
class Booking:
    """A pod's GPUs on a node; ``job`` None for a pod the model cannot see (no job type);
    ``uid`` the pod's UID where known (empty: not known); ``assumed`` the clock reading when
    ``bind`` booked it, until an event or a list shows the pod bound (then None);
    ``created`` the pod's creation time (seconds since the epoch) where known."""

    pod: str
    node: str
    gpus: tuple[str, ...]
    job: Job | None
    uid: str = ""
    assumed: float | None = None
    created: float | None = None

    def __post_init__(self) -> None:
        for name in ("pod", "node"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InputError(f"Booking.{name} must be a non-empty string, not {value!r}")
        if not isinstance(self.gpus, tuple) or not all(isinstance(g, str) for g in self.gpus):
            raise InputError(f"booking {self.pod}: gpus must be a tuple of GPU ids, not "
                             f"{self.gpus!r}")
        if self.job is not None and not isinstance(self.job, Job):
            raise InputError(f"booking {self.pod}: job must be a Job or None, not "
                             f"{type(self.job).__name__}")
        if not isinstance(self.uid, str):
            raise InputError(f"booking {self.pod}: uid must be a string, not {self.uid!r}")
        for name in ("assumed", "created"):
            value = getattr(self, name)
            if value is not None and not is_real(value):
                raise InputError(f"booking {self.pod}: {name} must be a finite number or "
                                 f"None, not {value!r}")


@dataclass
class Book:
    """Which pods hold which GPUs, per node, behind one lock (``version`` counts changes);
    ``assumed`` the bookings not yet confirmed (:attr:`Booking.assumed`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    pods: dict[str, Booking] = field(default_factory=dict)
    version: int = 0
    by_node: dict[str, dict[str, Booking]] = field(default_factory=dict)
    node_version: dict[str, int] = field(default_factory=dict)
    assumed: dict[str, Booking] = field(default_factory=dict)

    def add(self, booking: Booking) -> None:
        """Book ``booking`` (replacing the pod's earlier one); call with the lock held."""
        self.remove(booking.pod)
        self.pods[booking.pod] = booking
        self.by_node.setdefault(booking.node, {})[booking.pod] = booking
        if booking.assumed is not None:
            self.assumed[booking.pod] = booking
        self._bump(booking.node)

    def remove(self, pod: str) -> Booking | None:
        """Drop ``pod``'s booking, if any; call with the lock held."""
        old = self.pods.pop(pod, None)
        if old is not None:
            self.by_node.get(old.node, {}).pop(pod, None)
            self.assumed.pop(pod, None)
            self._bump(old.node)
        return old

    def clear(self) -> None:
        """Drop every booking; call with the lock held."""
        for node in list(self.by_node):
            self._bump(node)
        self.pods.clear()
        self.by_node.clear()
        self.assumed.clear()

    def _bump(self, node: str) -> None:
        self.version += 1
        self.node_version[node] = self.version

    def on_node(self, node: str) -> list[Booking]:
        """The bookings on ``node`` (call with the lock held, or accept a snapshot)."""
        return list(self.by_node.get(node, {}).values())

    def occupancy(self, node: str, without: frozenset[str] = frozenset()) -> dict[str, int]:
        """Jobs per GPU id on ``node`` (leaving out the pods named in ``without``)."""
        out: dict[str, int] = {}
        for b in self.by_node.get(node, {}).values():
            if b.pod in without:
                continue
            for g in b.gpus:
                out[g] = out.get(g, 0) + 1
        return out


class Extender:
    """The extender verbs (module docstring) over a model, topologies and a :class:`Book`.

    ``topology_for(node)`` returns the node's topology (GPU ids local to it) or None;
    ``binder(pod, node, gpus)`` records a binding with the API server (None: standalone,
    bind only books, and its bookings are final); ``fetch_pod(namespace, name)`` reads a pod
    from it. ``deadline_s`` bounds a prioritize call, from its arrival (a wait for the book
    counts): nodes left unscored when it runs out get the neutral score (and a log line), so
    the scheduler is never held up. ``assume_ttl_s``: how long a booking made by a bind through
    ``binder`` lasts unless an event or a list shows its pod bound (module docstring);
    ``clock`` the monotonic clock that measures it.

    Threads: the verbs may run in several threads at once (the app's worker threads). Every
    booking, and the per-node views built from them (``_views``), sit behind ``book.lock``.
    Prioritize holds it only to take its nodes' views (immutable snapshots), then scores
    without it, so binds and other calls go on meanwhile; a bind re-checks capacity and picks
    its GPUs under the lock, from the book as it is then. The scoring caches (``_scores``,
    ``_base``, which speed cache is in use) sit behind a lock of their own, held for their
    lookups and updates only, never across a placement search; the
    :class:`~interplace.placement.SpeedCache` takes its own lock to file an answer, so
    searches in several threads share it.
    """

    def __init__(
        self,
        model: SpeedSource,
        topology_for: Callable[[str], Topology | None],
        *,
        policy: str = "local-search",
        max_per_gpu: int = 2,
        binder: Callable[[PodRequest, str, tuple[str, ...]], None] | None = None,
        fetch_pod: Callable[[str, str], Any] | None = None,
        deadline_s: float = 2.0,
        num_samples: int = 64,
        seed: int = 0,
        assume_ttl_s: float = ASSUME_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(model, SpeedSource):
            raise InputError("model must be a speed source (a fitted InterferenceModel or "
                             f"MeasuredSpeeds), not {type(model).__name__}")
        _check_callable(topology_for, "topology_for")
        resolve_policy(policy)  # an unknown name fails here, not as neutral scores later
        check_count(max_per_gpu, "max_per_gpu")
        if binder is not None:
            _check_callable(binder, "binder")
        if fetch_pod is not None:
            _check_callable(fetch_pod, "fetch_pod")
        if not (is_real(deadline_s) and deadline_s > 0):
            raise InputError(f"deadline_s must be a finite number > 0, not {deadline_s!r}")
        check_count(num_samples, "num_samples")
        check_seed(seed)
        if not (is_real(assume_ttl_s) and assume_ttl_s > 0):
            raise InputError(f"assume_ttl_s must be a positive number, not {assume_ttl_s!r}")
        _check_callable(clock, "clock")
        self.model = model
        self.topology_for = topology_for
        self.policy = policy
        self.max_per_gpu = max_per_gpu
        self.binder = binder
        self.fetch_pod = fetch_pod
        self.deadline_s = deadline_s
        self.assume_ttl_s = float(assume_ttl_s)
        self.clock = clock
        self.book = Book()
        self.known = set(model.jobs)
        self._cache = SpeedCache(model, num_samples=num_samples, seed=seed)
        self._memo_lock = threading.Lock()  # _cache, _scores and _base (not _views: the book's)
        self._scores: dict[tuple[object, ...], tuple[float, tuple[str, ...]] | None] = {}
        self._base: dict[tuple[object, ...], float] = {}
        self._pending: dict[str, PodRequest] = {}
        self._views: dict[str, tuple[int, _View | None]] = {}
        self.seed = seed

    # ------------------------------------------------------------ helpers
    def _nodes(self, args: Mapping[str, Any]) -> tuple[list[str], dict[str, Any] | None]:
        names = args.get("NodeNames")
        nodes = args.get("Nodes")
        if names is not None:
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise InputError("NodeNames must be a list of node names")
            return list(names), None
        if nodes is not None:
            # An empty NodeList's items are null in Go's JSON.
            if not isinstance(nodes, Mapping) or not isinstance(nodes.get("items") or [], list):
                raise InputError("Nodes must be a v1.NodeList")
            by_name: dict[str, Any] = {}
            for item in nodes.get("items") or []:
                meta = item.get("metadata") if isinstance(item, Mapping) else None
                name = meta.get("name") if isinstance(meta, Mapping) else None
                if not isinstance(name, str) or not name:
                    raise InputError("a node in Nodes lacks metadata.name")
                by_name[name] = item
            return list(by_name), by_name
        raise InputError("ExtenderArgs has neither Nodes nor NodeNames")

    def _node_view(self, node: str) -> _View | None:
        """``node``'s view of the book (cached per node version); call with the lock held."""
        version = self.book.node_version.get(node, 0)
        hit = self._views.get(node)
        if hit is not None and hit[0] == version:
            return hit[1]
        view = self._build_view(node)
        _remember(self._views, node, (version, view), 100_000)
        return view

    def _build_view(self, node: str) -> _View | None:
        topo = self.topology_for(node)
        if topo is None:
            return None
        running: list[Running] = []
        reserved: dict[str, int] = {}
        ids = set(topo.gpus())
        occ = self.book.occupancy(node)
        # A GPU over max_per_gpu (bound under a higher limit, or by another scheduler) is full:
        # its pods count as reserved slots, at most max_per_gpu, and the model does not see
        # them (placement refuses an over-full state). So does a pod on GPUs the node lacks,
        # and one on more or fewer GPUs than it asks for (an annotation edited by hand).
        over = {g for g, n in occ.items() if n > self.max_per_gpu}
        for b in sorted(self.book.on_node(node), key=lambda b: b.pod):
            if (b.job is None or (b.job.job not in self.known and not b.job.counters)
                    or len(b.gpus) != b.job.gpus
                    or any(g in over or g not in ids for g in b.gpus)):
                for g in b.gpus:
                    if g in ids:
                        reserved[g] = reserved.get(g, 0) + 1
            else:
                running.append(Running(b.job, b.gpus))
        for g in over & ids:
            reserved[g] = min(reserved[g], self.max_per_gpu)
        # Everything of a running job that its scores read (not its pod's name).
        key = (id(topo), tuple(sorted(
            (r.job.job, r.gpus, r.job.family, r.job.counters, r.job.counter_samples,
             r.job.comm_share) for r in running)), tuple(sorted(reserved.items())))
        return topo, ClusterState(tuple(running)), MappingProxyType(reserved), key

    def _fits(
        self, pod: PodRequest, node: str, without: frozenset[str] = frozenset()
    ) -> str | None:
        """None if ``pod`` fits ``node`` by capacity (with the pods in ``without`` gone),
        else why not."""
        view = self._node_view(node)
        if view is None:
            return f"no topology for node {node}"
        topo = view[0]
        gpus = topo.gpus()
        if pod.gpus > len(gpus):
            return f"pod needs {pod.gpus} GPUs; node {node} has {len(gpus)}"
        occ = self.book.occupancy(node, without)
        free = [g for g in gpus if occ.get(g, 0) < self.max_per_gpu]
        if len(free) < pod.gpus:
            return (f"{len(free)} of {len(gpus)} GPUs have a free slot under "
                    f"max-per-gpu={self.max_per_gpu}; pod needs {pod.gpus}")
        return None

    def _job(self, pod: PodRequest) -> Job | None:
        """The pod as a placement job: a known type, or a new one with counters (cold start)."""
        if pod.job_type is None or pod.gpus == 0:
            return None
        if pod.job_type not in self.known and not pod.counters:
            return None
        kwargs: dict[str, Any] = {}
        if pod.comm_share is not None:
            kwargs["comm_share"] = pod.comm_share
        samples = pod.counter_samples if pod.counters else None
        return Job(pod.key, pod.job_type, pod.gpus, pod.family, counters=pod.counters,
                   counter_samples=samples, **kwargs)

    def _best(self, pod: PodRequest, job: Job, node: str) -> tuple[float, tuple[str, ...]] | None:
        """(predicted gain, GPUs) of the best placement of ``job`` on ``node`` as the book
        stands, or None; call with the lock held (or with no other thread about)."""
        view = self._node_view(node)
        if view is None:
            return None
        return self._score(job, view)

    def _score(self, job: Job, view: _View) -> tuple[float, tuple[str, ...]] | None:
        """(predicted gain, GPUs) of the best placement of ``job`` on a node in state ``view``,
        or None. Needs no lock: ``view`` is immutable, the score caches are read and written
        under ``_memo_lock``, and the speed cache files its answers under its own lock."""
        topo, state, reserved, state_key = view
        key = (job.job, job.gpus, job.comm_share, job.counters, job.counter_samples, job.family,
               state_key)
        with self._memo_lock:
            hit = self._scores.get(key, _MISSING)
            base = self._base.get(state_key)
            cache = self._cache
        if hit is not _MISSING:
            return hit  # type: ignore[return-value]
        if base is None:  # the node's own objective: the same for every pod scored there
            base = place(topo, self.model, [], state, policy=self.policy,
                         max_per_gpu=self.max_per_gpu, reserved=reserved, seed=self.seed,
                         num_samples=cache.num_samples,
                         cache=cache).objective if state.running else 0.0
            with self._memo_lock:
                _remember(self._base, state_key, base, 50_000)
        p = place(topo, self.model, [job], state, policy=self.policy,
                  max_per_gpu=self.max_per_gpu, reserved=reserved, seed=self.seed,
                  num_samples=cache.num_samples, cache=cache)
        result: tuple[float, tuple[str, ...]] | None = None
        if not p.pending:
            gain = p.objective - base
            result = (gain, p.assignment()[job.job_id])
        with self._memo_lock:
            _remember(self._scores, key, result, 50_000)
            if len(self._cache) > SPEED_CACHE_ROWS:  # searches under way keep the old one
                self._cache = SpeedCache(self.model, num_samples=cache.num_samples,
                                         seed=self.seed)
        return result

    # ------------------------------------------------------------- verbs
    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``ExtenderArgs`` -> ``ExtenderFilterResult`` (module docstring)."""
        args = _request(args, "ExtenderArgs")
        pod = parse_pod(args.get("Pod"), strict=False)
        names, objects = self._nodes(args)
        passed, failed, hopeless = [], {}, {}
        with self.book.lock:
            self._expire()
            for node in names:
                if pod.problem is not None:
                    hopeless[node] = f"pod {pod.key}: {pod.problem}"
                    continue
                if pod.gpus == 0:
                    passed.append(node)
                    continue
                try:
                    why = self._fits(pod, node)
                except Exception as exc:  # this node's state cannot be read: it alone fails
                    log.warning("filter %s on %s: %s", pod.key, node, first_line(exc))
                    hopeless[node] = f"node {node}: {first_line(exc)}"
                    continue
                if why is None:
                    passed.append(node)
                elif why.startswith(("pod needs", "no topology")):
                    hopeless[node] = why
                else:
                    failed[node] = why
        result: dict[str, Any] = {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": hopeless,
            "Error": "",
        }
        if objects is None:
            result["NodeNames"] = passed
        else:
            nodes = args["Nodes"]
            result["Nodes"] = {**nodes, "items": [objects[n] for n in passed]}
        return result

    def prioritize(
        self, args: Mapping[str, Any], *, arrived: float | None = None
    ) -> list[dict[str, Any]]:
        """``ExtenderArgs`` -> ``HostPriorityList`` with integer scores in 0..10.

        The nodes are scored from a snapshot of the book taken at the start, without holding
        it (class docstring): a bind that lands meanwhile is not seen, as kube-scheduler's
        scores are advisory and the bind re-checks capacity. ``deadline_s`` runs from
        ``arrived`` (a ``time.monotonic()`` reading when the request arrived; default: now),
        so a call that waited (for the book, for a worker thread) scores the less for it."""
        args = _request(args, "ExtenderArgs")
        if arrived is not None and not is_real(arrived):
            raise InputError("arrived must be a time.monotonic() reading or None, not "
                             f"{arrived!r}")
        start = time.monotonic() if arrived is None else arrived
        pod = parse_pod(args.get("Pod"), strict=False)
        names, _ = self._nodes(args)
        job = self._job(pod)
        if job is None:
            if pod.job_type is not None and pod.job_type not in self.known:
                log.warning("pod %s: job type %r unknown to the model and no %s; neutral "
                            "scores", pod.key, pod.job_type, "interplace.io/counters")
            return [{"Host": n, "Score": NEUTRAL_SCORE} for n in names]
        gains: dict[str, float | None] = {}  # absent: neutral; None: cannot place there
        views: dict[str, _View | Exception | None] = {}
        with self.book.lock:  # only to take the snapshot: scoring runs without the book
            self._expire()
            for node in names:
                if node not in views:
                    try:
                        views[node] = self._node_view(node)
                    except Exception as exc:  # a topology lookup that fails: neutral
                        views[node] = exc
        for node in names:
            if time.monotonic() - start > self.deadline_s:
                log.warning("prioritize %s: deadline %.1f s reached; %s scored neutrally",
                            pod.key, self.deadline_s, node)
                continue
            view = views[node]
            try:
                if isinstance(view, Exception):
                    raise view
                best = None if view is None else self._score(job, view)
            except Exception as exc:  # the model cannot score: never block the scheduler
                log.warning("prioritize %s on %s: cannot score (%s); neutral", pod.key,
                            node, exc)
                continue
            gains[node] = None if best is None else best[0] / max(job.gpus, 1)
        scored = [g for g in gains.values() if g is not None]
        top, bottom = max(scored, default=0.0), min(scored, default=0.0)
        out = []
        for node in names:
            if node not in gains:
                out.append({"Host": node, "Score": NEUTRAL_SCORE})
                continue
            g = gains[node]
            out.append({"Host": node, "Score": 0 if g is None else node_score(g, top, bottom)})
        return out

    def bind(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``ExtenderBindingArgs`` -> ``ExtenderBindingResult``: choose GPUs, book, bind.

        Refused (in ``Error``): a pod already booked, a pod whose UID is not the API server's
        pod of that name, and a UID other than the booked pod of that name's unless that
        one is known to have gone (module docstring). Where the binder fails, the pod is
        read again: if it is bound to the node all the same (the reply was lost), the bind
        succeeds and keeps its booking; otherwise the booking is dropped."""
        args = _request(args, "ExtenderBindingArgs")
        for k in ("PodName", "PodNamespace", "Node"):
            if not isinstance(args.get(k), str) or not args[k]:
                raise InputError(f"ExtenderBindingArgs lacks {k}")
        namespace, name = str(args["PodNamespace"]), str(args["PodName"])
        key = f"{namespace}/{name}"
        node = str(args["Node"])
        uid = args.get("PodUID")
        uid = uid if isinstance(uid, str) else ""
        pod = self._pending.get(key)
        if pod is not None and uid and pod.uid and pod.uid != uid:
            pod = None  # remembered from an earlier pod of that name
        live: PodRequest | None = None  # the API server's pod of that name, where read
        if pod is None and self.fetch_pod is not None:
            pod = live = parse_pod(self.fetch_pod(namespace, name), strict=False)
            if _other(live.uid, uid):
                return {"Error": f"pod {key} (UID {uid}) is gone: the API server's pod of "
                                 f"that name is UID {live.uid}"}
        if pod is None:
            return {"Error": f"pod {key}: no filter or prioritize call named it, and the "
                             "service has no API server to read it from"}
        if pod.problem is not None:
            return {"Error": f"pod {key}: {pod.problem}"}
        uid = uid or pod.uid
        pod = replace(pod, uid=uid)  # the binder's preconditions name this pod
        with self.book.lock:
            held = self.book.pods.get(key)
        superseded = ""  # the UID of a booked pod of that name known to have gone
        if held is not None and _other(held.uid, uid):
            why = self._superseded(pod, held, live)
            if why is not None:
                return {"Error": why}
            superseded = held.uid
        with self.book.lock:
            self._expire()
            held = self.book.pods.get(key)
            if held is not None and not _other(held.uid, uid):
                return {"Error": f"pod {key} is already bound to {held.node}"}
            if held is not None:
                if held.uid != superseded:
                    return {"Error": f"pod {key}: another pod of that name (UID {held.uid}) "
                                     "was booked meanwhile; not bound"}
                log.info("bind %s: the booked pod of that name (UID %s) has gone", key,
                         held.uid)
                self.book.remove(key)
            job = self._job(pod)
            gpus: tuple[str, ...] = ()
            if pod.gpus > 0:  # one that asks for none needs no topology (filter passes it)
                try:
                    why = self._fits(pod, node)
                except Exception as exc:  # the node's state cannot be read
                    log.warning("bind %s on %s: %s", key, node, first_line(exc))
                    return {"Error": f"cannot bind {key} to {node}: {first_line(exc)}"}
                if why is not None:
                    return {"Error": f"cannot bind {key} to {node}: {why}"}
                best = None
                try:
                    best = self._best(pod, job, node) if job is not None else None
                except Exception as exc:  # the model cannot score: bind all the same
                    log.warning("bind %s on %s: cannot score (%s); least loaded GPUs", key,
                                node, first_line(exc))
                if best is not None:
                    gpus = best[1]
                else:  # a pod the model cannot see: its least loaded GPUs
                    topo = self.topology_for(node)
                    assert topo is not None
                    occ = self.book.occupancy(node)
                    free = sorted((g for g in topo.gpus() if occ.get(g, 0) < self.max_per_gpu),
                                  key=lambda g: (occ.get(g, 0), topo.gpus().index(g)))
                    gpus = tuple(free[: pod.gpus])
            assumed = None if self.binder is None else self.clock()
            booking = Booking(key, node, gpus, job, uid, assumed, pod.created)
            self.book.add(booking)
        if self.binder is not None:
            try:
                self.binder(pod, node, gpus)
            except Exception as exc:
                return self._bind_failed(pod, node, booking, exc)
            with self.book.lock:  # the assumption's time runs from the binding
                if self.book.pods.get(key) is booking:
                    self.book.add(replace(booking, assumed=self.clock()))
        self._pending.pop(key, None)
        return {"Error": ""}

    def _superseded(self, pod: PodRequest, held: Booking, live: PodRequest | None) -> str | None:
        """None where the booked ``held`` (another UID than ``pod``'s) is known to have gone,
        else why the bind of ``pod`` is refused. ``live``: the API server's pod of that name,
        if already read."""
        key = pod.key
        if pod.created is not None and held.created is not None and pod.created != held.created:
            if pod.created > held.created:
                return None
            return (f"pod {key} (UID {pod.uid}) is older than the booked pod of that name "
                    f"(UID {held.uid}); not bound")
        if live is None and self.fetch_pod is not None:
            try:
                live = parse_pod(self.fetch_pod(pod.namespace, pod.name), strict=False)
            except Exception as exc:
                return (f"pod {key}: another pod of that name (UID {held.uid}) is booked, "
                        f"and reading the pod failed ({first_line(exc)}); not bound")
        if live is None:
            return (f"pod {key}: another pod of that name (UID {held.uid}) is booked, and "
                    "without an API server the service cannot tell it has gone; not bound")
        if live.uid == pod.uid:
            return None
        return (f"pod {key} (UID {pod.uid}) is not the API server's pod of that name "
                f"(UID {live.uid}); not bound")

    def _bind_failed(
        self, pod: PodRequest, node: str, booking: Booking, exc: Exception
    ) -> dict[str, Any]:
        """The reply to a bind whose binder raised ``exc``: the request may have reached the
        API server all the same, so read the pod again, and keep the booking where it is
        bound to ``node`` (as a watch event may already have shown)."""
        key = pod.key
        there: str | None = None  # the node the API server has the pod bound to
        if self.fetch_pod is not None:
            try:
                now = parse_pod(self.fetch_pod(pod.namespace, pod.name), strict=False)
            except Exception as read:
                log.warning("bind %s: binding failed (%s) and reading the pod back failed "
                            "too (%s)", key, first_line(exc), first_line(read))
            else:
                if not _other(now.uid, pod.uid):
                    there = now.node
        with self.book.lock:
            current = self.book.pods.get(key)
            seen = (current is not None and current is not booking and current.assumed is None
                    and not _other(current.uid, pod.uid) and current.node == node)
            if there == node or seen:
                log.warning("bind %s: the binder failed (%s) but the pod is bound to %s; "
                            "booking kept", key, first_line(exc), node)
                self._pending.pop(key, None)
                return {"Error": ""}
            if current is booking:
                self.book.remove(key)
        return {"Error": f"binding {key} to {node} failed: {exc}"}

    def preempt(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``ExtenderPreemptionArgs`` -> ``ExtenderPreemptionResult``: the scheduler's
        candidate nodes where evicting their victims frees GPU slots enough for the pod
        (under ``max_per_gpu``, in the book), victims as ``MetaVictims`` by pod UID, as sent.

        kube-scheduler counts a node's GPUs but not the slots on each GPU, so it may offer a
        node whose victims free nothing usable: evicting them would not let the pod bind.
        A victim is matched to its booking by UID (or, sent in full, by namespace and name);
        a pod the book does not hold frees nothing here. A pod the extender cannot read, or
        one that asks for no GPUs, keeps every candidate.
        """
        args = _request(args, "ExtenderPreemptionArgs")
        meta = args.get("NodeNameToMetaVictims")
        out: dict[str, Any] = {}
        keys: dict[str, set[str]] = {}  # per node: booking keys of victims sent in full
        if isinstance(meta, Mapping) and meta:
            for node, v in meta.items():
                _victim_pods(v, "NodeNameToMetaVictims")
                out[str(node)] = dict(v or {})
        else:
            victims = args.get("NodeNameToVictims") or {}
            if not isinstance(victims, Mapping):
                raise InputError("NodeNameToVictims must be an object")
            for node, v in victims.items():
                metas = []
                for p in _victim_pods(v, "NodeNameToVictims"):
                    m = p.get("metadata") or {}
                    if not isinstance(m, Mapping):
                        raise InputError("a victim pod's metadata must be an object")
                    metas.append(m)
                out[str(node)] = {
                    "Pods": [{"UID": str(m.get("uid") or "")} for m in metas],
                    "NumPDBViolations": (v or {}).get("NumPDBViolations") or 0,
                }
                keys[str(node)] = {f"{m.get('namespace') or 'default'}/{m.get('name')}"
                                   for m in metas}
        try:
            pod = parse_pod(args.get("Pod"))
        except InputError:
            return {"NodeNameToMetaVictims": out}
        if pod.gpus == 0:
            return {"NodeNameToMetaVictims": out}
        kept = {}
        with self.book.lock:
            self._expire()
            for node, victims_of in out.items():
                uids = {str((m or {}).get("UID") or "") for m in victims_of.get("Pods") or []}
                uids.discard("")
                gone = frozenset(
                    b.pod for b in self.book.on_node(node)
                    if (b.uid and b.uid in uids) or b.pod in keys.get(node, ())
                )
                why = self._fits(pod, node, gone)
                if why is None:
                    kept[node] = victims_of
                else:
                    log.info("preempt %s: %s left out (%s with its victims gone)", pod.key, node,
                             why)
        return {"NodeNameToMetaVictims": kept}

    def remember(self, pod: Any) -> None:
        """Keep the pod of a filter/prioritize call for its bind (which names it only)."""
        req = parse_pod(pod, strict=False)
        if len(self._pending) > 10_000:
            self._pending.clear()
        self._pending[req.key] = req

    # ------------------------------------------------------------- state
    def _expire(self) -> None:
        """Drop the assumed bookings older than ``assume_ttl_s``; call with the lock held."""
        now = self.clock()
        for key, b in list(self.book.assumed.items()):
            if b.assumed is not None and now - b.assumed > self.assume_ttl_s:
                log.warning("pod %s: no event showed it bound to %s within %.0f s; its "
                            "booking is dropped", key, b.node, self.assume_ttl_s)
                self.book.remove(key)

    def restore(self, pods: Sequence[Any], listed_at: float | None = None) -> int:
        """Rebuild the book from pod objects (the API server's list); returns the bookings
        in the book.

        A pod that cannot be read at all is left out with a log line; one whose
        ``interplace.io/`` annotations are malformed is booked where it runs, unseen by the
        model (:func:`~interplace.serve._pods.parse_pod` with ``strict=False``). Assumed
        bookings (module docstring) the list does not show bound yet are kept, unless the
        list shows the pod finished, or a later pod of that name, or (where ``listed_at``,
        the :attr:`clock` reading when the list was asked for, is given and comes after the
        booking) no pod of that name or another one."""
        if not isinstance(pods, Sequence) or isinstance(pods, str | bytes):
            raise InputError(f"restore needs a list of pod objects, not {type(pods).__name__}")
        if listed_at is not None and not is_real(listed_at):
            raise InputError(f"listed_at must be a clock reading or None, not {listed_at!r}")
        with self.book.lock:
            self._expire()
            assumed = list(self.book.assumed.values())
            self.book.clear()
            listed: dict[str, PodRequest] = {}
            for obj in pods:
                try:
                    req = parse_pod(obj, strict=False)
                except InputError as exc:
                    log.warning("restore: a pod left out of the book (%s)", exc)
                    continue
                listed[req.key] = req
                if not req.node or req.phase in _FINISHED:
                    continue
                if not req.assigned_gpus:
                    # Bound by another scheduler (GPUs unknown), or asks for no GPUs: nothing
                    # to book (as the watch books nothing of it).
                    continue
                self._note_problem(req)
                self.book.add(self._booking(req))
            for b in assumed:
                kept = self._still_assumed(b, listed.get(b.pod), listed_at)
                if kept is not None:
                    self.book.add(kept)
            return len(self.book.pods)

    def _still_assumed(
        self, b: Booking, req: PodRequest | None, listed_at: float | None
    ) -> Booking | None:
        """What becomes of assumed booking ``b`` after a list that shows ``req`` under its
        name (None: no pod): the booking to keep, or None (the list's own booking, if any,
        stands)."""
        after = listed_at is not None and b.assumed is not None and b.assumed <= listed_at
        if req is None:  # created after the list, or deleted since it
            return None if after else b
        if _other(b.uid, req.uid):
            return None if after or _newer(req, b, default=False) else b
        if req.phase in _FINISHED:
            return None
        if req.node is None:
            return b  # the list was read before the binding landed
        if req.key in self.book.pods:
            return None  # shown bound: the list's booking is confirmed
        # Bound, but with no GPUs recorded: ours where it is on our node.
        return replace(b, assumed=None) if req.node == b.node else None

    def observe(self, event_type: str, pod: Any) -> None:
        """Apply one watch event (``ADDED``, ``MODIFIED``, ``DELETED``) to the book; a
        ``BOOKMARK`` (only a resourceVersion) changes nothing, and any other type raises
        :class:`~interplace.errors.InputError` (the client raises an ``ERROR`` itself).

        Pods are read as :meth:`restore` reads them, but one that cannot be read at all
        raises :class:`~interplace.errors.InputError` (the watch logs it and goes on). An
        event of the booked pod that shows it bound confirms its booking (and corrects its
        node and GPUs, where they differ). An event of another pod of the same name replaces
        the booking only where it shows that pod bound, not terminating, and later than the
        booked one (module docstring); its deletion changes nothing. An event of a
        terminating pod the book does not hold books nothing."""
        if event_type == "BOOKMARK":
            return
        if event_type not in WATCH_EVENTS:
            raise InputError(f"unknown watch event type {event_type!r} (known: "
                             f"{', '.join(WATCH_EVENTS)}, BOOKMARK)")
        req = parse_pod(pod, strict=False)
        with self.book.lock:
            held = self.book.pods.get(req.key)
            gone = event_type == "DELETED" or req.phase in _FINISHED
            if held is not None and _other(held.uid, req.uid):
                # Another pod of that name: a late event of an earlier one, or a later one.
                if gone or req.deleting or not _newer(req, held, held.assumed is None):
                    return
                if req.node and req.assigned_gpus:
                    self._note_problem(req)
                    self.book.add(self._booking(req))
                return
            if gone:
                if held is not None:
                    self.book.remove(req.key)
                return
            if held is None:
                if req.node and req.assigned_gpus and not req.deleting:
                    self._note_problem(req)
                    self.book.add(self._booking(req))
                return
            if not req.node:
                return  # not bound yet (its bind is under way): the booking stands
            if req.assigned_gpus:
                fresh = self._booking(req)
                if held.assumed is not None or (held.node, held.gpus) != (fresh.node,
                                                                          fresh.gpus):
                    self._note_problem(req)
                    self.book.add(fresh)
            elif req.node != held.node:
                self.book.remove(req.key)  # bound elsewhere by someone else, GPUs unknown
            elif held.assumed is not None:
                self.book.add(replace(held, assumed=None))

    def _booking(self, req: PodRequest) -> Booking:
        return Booking(req.key, req.node or "", req.assigned_gpus, self._job(req), req.uid,
                       None, req.created)

    @staticmethod
    def _note_problem(req: PodRequest) -> None:
        if req.problem is not None:
            log.warning("pod %s on %s: %s; booked, unseen by the model", req.key, req.node,
                        req.problem)

    def snapshot(self) -> dict[str, Any]:
        """The book as JSON: ``{node: {pod: "gpu,gpu"}}``, its version, and the pods whose
        bookings are still assumed (module docstring)."""
        with self.book.lock:
            nodes: dict[str, dict[str, str]] = {}
            for b in self.book.pods.values():
                nodes.setdefault(b.node, {})[b.pod] = ",".join(b.gpus)
            return {"version": self.book.version, "nodes": nodes,
                    "assumed": sorted(self.book.assumed), "annotation": ANNOTATION_GPUS}
