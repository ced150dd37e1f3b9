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

A pod whose ``interplace.io/`` labels or annotations are malformed is refused by ``filter``
on every node (``FailedAndUnresolvableNodes``, with the reason, which kube-scheduler shows
on the pod) rather than answered with an error status, which an ``ignorable`` extender's
caller would skip; the book still counts its GPUs if it runs (bound by someone else).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from interplace.errors import InputError
from interplace.placement import (
    ClusterState,
    Job,
    Running,
    SpeedCache,
    SpeedSource,
    place,
)
from interplace.serve._pods import ANNOTATION_GPUS, PodRequest, parse_pod
from interplace.topology import Topology

__all__ = ["NEUTRAL_SCORE", "Book", "Booking", "Extender"]

#: A node as placement sees it: topology, running jobs, slots of jobs the model cannot see,
#: and a hashable key of that state (for the score cache).
_View = tuple[Topology, ClusterState, dict[str, int], tuple[object, ...]]

log = logging.getLogger("interplace.serve")

_K = TypeVar("_K")
_V = TypeVar("_V")


def _remember(cache: dict[_K, _V], key: _K, value: _V, limit: int) -> None:
    """``cache[key] = value``, the whole cache dropped first once it holds more than ``limit``
    entries: a long-running extender meets ever new node states, and the ones in use come back
    at the next request."""
    if len(cache) > limit:
        cache.clear()
    cache[key] = value

NEUTRAL_SCORE = 5
"""The score of every node for a pod the model cannot score."""

MAX_PRIORITY = 10
"""``extenderv1.MaxExtenderPriority``."""

TIE = 0.005
"""Gains within this share of the best node's score as the best (:func:`node_score`)."""


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
    ``uid`` the pod's UID where known (empty: not known)."""

    pod: str
    node: str
    gpus: tuple[str, ...]
    job: Job | None
    uid: str = ""


@dataclass
class Book:
    """Which pods hold which GPUs, per node, behind one lock (``version`` counts changes)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    pods: dict[str, Booking] = field(default_factory=dict)
    version: int = 0
    by_node: dict[str, dict[str, Booking]] = field(default_factory=dict)
    node_version: dict[str, int] = field(default_factory=dict)

    def add(self, booking: Booking) -> None:
        """Book ``booking`` (replacing the pod's earlier one); call with the lock held."""
        self.remove(booking.pod)
        self.pods[booking.pod] = booking
        self.by_node.setdefault(booking.node, {})[booking.pod] = booking
        self._bump(booking.node)

    def remove(self, pod: str) -> Booking | None:
        """Drop ``pod``'s booking, if any; call with the lock held."""
        old = self.pods.pop(pod, None)
        if old is not None:
            self.by_node.get(old.node, {}).pop(pod, None)
            self._bump(old.node)
        return old

    def clear(self) -> None:
        """Drop every booking; call with the lock held."""
        for node in list(self.by_node):
            self._bump(node)
        self.pods.clear()
        self.by_node.clear()

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
    bind only books). ``deadline_s`` bounds a prioritize call: nodes left unscored when it
    runs out get the neutral score (and a log line), so the scheduler is never held up.
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
    ) -> None:
        self.model = model
        self.topology_for = topology_for
        self.policy = policy
        self.max_per_gpu = max_per_gpu
        self.binder = binder
        self.fetch_pod = fetch_pod
        self.deadline_s = deadline_s
        self.book = Book()
        self.known = set(model.jobs)
        self._cache = SpeedCache(model, num_samples=num_samples, seed=seed)
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
                name = ((item or {}).get("metadata") or {}).get("name")
                if not isinstance(name, str) or not name:
                    raise InputError("a node in Nodes lacks metadata.name")
                by_name[name] = item
            return list(by_name), by_name
        raise InputError("ExtenderArgs has neither Nodes nor NodeNames")

    def _node_view(self, node: str) -> _View | None:
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
        for b in self.book.on_node(node):
            if b.job is None or (b.job.job not in self.known and not b.job.counters):
                for g in b.gpus:
                    reserved[g] = reserved.get(g, 0) + 1
            else:
                running.append(Running(b.job, b.gpus))
        key = (id(topo), tuple(sorted((r.job.job, r.gpus) for r in running)),
               tuple(sorted(reserved.items())))
        return topo, ClusterState(tuple(running)), reserved, key

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
        """(predicted gain, GPUs) of the best placement of ``job`` on ``node``, or None."""
        view = self._node_view(node)
        if view is None:
            return None
        topo, state, reserved, state_key = view
        key = (job.job, job.gpus, job.comm_share, job.counters, job.counter_samples, job.family,
               state_key)
        if key in self._scores:
            return self._scores[key]
        base = self._base.get(state_key)
        if base is None:  # the node's own objective: the same for every pod scored there
            base = place(topo, self.model, [], state, policy=self.policy,
                         max_per_gpu=self.max_per_gpu, reserved=reserved, seed=self.seed,
                         num_samples=self._cache.num_samples,
                         cache=self._cache).objective if state.running else 0.0
            _remember(self._base, state_key, base, 50_000)
        p = place(topo, self.model, [job], state, policy=self.policy,
                  max_per_gpu=self.max_per_gpu, reserved=reserved, seed=self.seed,
                  num_samples=self._cache.num_samples, cache=self._cache)
        result: tuple[float, tuple[str, ...]] | None = None
        if not p.pending:
            gain = p.objective - base
            result = (gain, p.assignment()[job.job_id])
        _remember(self._scores, key, result, 50_000)
        return result

    # ------------------------------------------------------------- verbs
    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``ExtenderArgs`` -> ``ExtenderFilterResult`` (module docstring)."""
        pod = parse_pod(args.get("Pod"), strict=False)
        names, objects = self._nodes(args)
        passed, failed, hopeless = [], {}, {}
        with self.book.lock:
            for node in names:
                if pod.problem is not None:
                    hopeless[node] = f"pod {pod.key}: {pod.problem}"
                    continue
                if pod.gpus == 0:
                    passed.append(node)
                    continue
                why = self._fits(pod, node)
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

    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``ExtenderArgs`` -> ``HostPriorityList`` with integer scores in 0..10."""
        pod = parse_pod(args.get("Pod"), strict=False)
        names, _ = self._nodes(args)
        job = self._job(pod)
        if job is None:
            if pod.job_type is not None and pod.job_type not in self.known:
                log.warning("pod %s: job type %r unknown to the model and no %s; neutral "
                            "scores", pod.key, pod.job_type, "interplace.io/counters")
            return [{"Host": n, "Score": NEUTRAL_SCORE} for n in names]
        start = time.monotonic()
        gains: dict[str, float | None] = {}  # absent: neutral; None: cannot place there
        with self.book.lock:
            for node in names:
                if time.monotonic() - start > self.deadline_s:
                    log.warning("prioritize %s: deadline %.1f s reached; %s scored neutrally",
                                pod.key, self.deadline_s, node)
                    continue
                try:
                    best = self._best(pod, job, node)
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
        """``ExtenderBindingArgs`` -> ``ExtenderBindingResult``: choose GPUs, book, bind."""
        for k in ("PodName", "PodNamespace", "Node"):
            if not isinstance(args.get(k), str) or not args[k]:
                raise InputError(f"ExtenderBindingArgs lacks {k}")
        key = f"{args['PodNamespace']}/{args['PodName']}"
        node = str(args["Node"])
        uid = args.get("PodUID")
        uid = uid if isinstance(uid, str) else ""
        pod = self._pending.get(key)
        if pod is not None and uid and pod.uid and pod.uid != uid:
            pod = None  # remembered from an earlier pod of that name
        if pod is None and self.fetch_pod is not None:
            pod = parse_pod(self.fetch_pod(str(args["PodNamespace"]), str(args["PodName"])),
                            strict=False)
        if pod is None:
            return {"Error": f"pod {key}: no filter or prioritize call named it, and the "
                             "service has no API server to read it from"}
        if pod.problem is not None:
            return {"Error": f"pod {key}: {pod.problem}"}
        uid = uid or pod.uid
        with self.book.lock:
            held = self.book.pods.get(key)
            if held is not None and not (held.uid and uid and held.uid != uid):
                return {"Error": f"pod {key} is already bound to {held.node}"}
            if held is not None:  # an earlier pod of that name, gone: names are unique
                self.book.remove(key)
            why = self._fits(pod, node)
            if why is not None:
                return {"Error": f"cannot bind {key} to {node}: {why}"}
            job = self._job(pod)
            gpus: tuple[str, ...] = ()
            if pod.gpus > 0:
                best = self._best(pod, job, node) if job is not None else None
                if best is not None:
                    gpus = best[1]
                else:  # a pod the model cannot see: its least loaded GPUs
                    topo = self.topology_for(node)
                    assert topo is not None
                    occ = self.book.occupancy(node)
                    free = sorted((g for g in topo.gpus() if occ.get(g, 0) < self.max_per_gpu),
                                  key=lambda g: (occ.get(g, 0), topo.gpus().index(g)))
                    gpus = tuple(free[: pod.gpus])
            booking = Booking(key, node, gpus, job, uid)
            self.book.add(booking)
        if self.binder is not None:
            try:
                self.binder(pod, node, gpus)
            except Exception as exc:
                with self.book.lock:
                    if self.book.pods.get(key) is booking:
                        self.book.remove(key)
                return {"Error": f"binding {key} to {node} failed: {exc}"}
        self._pending.pop(key, None)
        return {"Error": ""}

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
        meta = args.get("NodeNameToMetaVictims")
        out: dict[str, Any] = {}
        keys: dict[str, set[str]] = {}  # per node: booking keys of victims sent in full
        if isinstance(meta, Mapping) and meta:
            for node, v in meta.items():
                if not isinstance(v, Mapping):
                    raise InputError("NodeNameToMetaVictims values must be objects")
                out[str(node)] = dict(v)
        else:
            victims = args.get("NodeNameToVictims") or {}
            if not isinstance(victims, Mapping):
                raise InputError("NodeNameToVictims must be an object")
            for node, v in victims.items():
                pods = (v or {}).get("Pods") or []
                metas = [((p or {}).get("metadata") or {}) for p in pods]
                out[str(node)] = {
                    "Pods": [{"UID": str(m.get("uid") or "")} for m in metas],
                    "NumPDBViolations": int((v or {}).get("NumPDBViolations") or 0),
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
    def restore(self, pods: Sequence[Any]) -> int:
        """Rebuild the book from pod objects (the API server's list); returns bookings made.

        A pod that cannot be read at all is left out with a log line; one whose
        ``interplace.io/`` annotations are malformed is booked where it runs, unseen by the
        model (:func:`~interplace.serve._pods.parse_pod` with ``strict=False``)."""
        made = 0
        with self.book.lock:
            self.book.clear()
            for obj in pods:
                try:
                    req = parse_pod(obj, strict=False)
                except InputError as exc:
                    log.warning("restore: a pod left out of the book (%s)", exc)
                    continue
                if not req.node or req.phase in ("Succeeded", "Failed"):
                    continue
                if not req.assigned_gpus and req.gpus:
                    continue  # not ours: bound by another scheduler, GPUs unknown
                self._note_problem(req)
                self.book.add(self._booking(req))
                made += 1
        return made

    def observe(self, event_type: str, pod: Any) -> None:
        """Apply one watch event (``ADDED``, ``MODIFIED``, ``DELETED``) to the book.

        Pods are read as :meth:`restore` reads them, but one that cannot be read at all
        raises :class:`~interplace.errors.InputError` (the watch logs it and goes on). A
        deletion of a pod whose UID differs from the booked one's (an older pod of the same
        name) changes nothing."""
        req = parse_pod(pod, strict=False)
        with self.book.lock:
            held = self.book.pods.get(req.key)
            other = held is not None and bool(held.uid and req.uid and held.uid != req.uid)
            gone = event_type == "DELETED" or req.phase in ("Succeeded", "Failed")
            if gone:
                if not other:
                    self.book.remove(req.key)
                return
            if req.node and req.assigned_gpus and (held is None or other):
                self._note_problem(req)
                self.book.add(self._booking(req))

    def _booking(self, req: PodRequest) -> Booking:
        return Booking(req.key, req.node or "", req.assigned_gpus, self._job(req), req.uid)

    @staticmethod
    def _note_problem(req: PodRequest) -> None:
        if req.problem is not None:
            log.warning("pod %s on %s: %s; booked, unseen by the model", req.key, req.node,
                        req.problem)

    def snapshot(self) -> dict[str, Any]:
        """The book as JSON: ``{node: {pod: "gpu,gpu"}}`` and its version."""
        with self.book.lock:
            nodes: dict[str, dict[str, str]] = {}
            for b in self.book.pods.values():
                nodes.setdefault(b.node, {})[b.pod] = ",".join(b.gpus)
            return {"version": self.book.version, "nodes": nodes,
                    "annotation": ANNOTATION_GPUS}
