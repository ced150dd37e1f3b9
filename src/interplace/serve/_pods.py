"""What the extender reads off a pod (as kube-scheduler sends it: the v1.Pod JSON)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from interplace.errors import InputError, check_count, is_real

__all__ = [
    "ANNOTATION_GPUS",
    "GPU_RESOURCE",
    "KEY_COMM_SHARE",
    "KEY_COUNTERS",
    "KEY_COUNTER_SAMPLES",
    "KEY_FAMILY",
    "KEY_JOB_TYPE",
    "PodRequest",
    "gpu_request",
    "parse_pod",
]

KEY_JOB_TYPE = "interplace.io/job-type"
"""Label or annotation naming the pod's job type (one the model knows)."""
KEY_FAMILY = "interplace.io/family"
"""Optional label or annotation: the job's family (for a new job type that brings its
counters, the model's family it joins: its prior and pair corrections come from it)."""
KEY_COUNTERS = "interplace.io/counters"
"""Optional annotation: a new job type's isolated counter readings, ``metric=value`` pairs
joined by commas (``"gpu_util_pct=85,mem_util_pct=40"``), which let the model place a type it
was never fitted on through its cold-start path."""
KEY_COUNTER_SAMPLES = "interplace.io/counter-samples"
"""Optional annotation: how many samples each of :data:`KEY_COUNTERS`' readings is a mean
of, a whole number (default: as many as the model's own isolated readings were)."""
KEY_COMM_SHARE = "interplace.io/comm-share"
"""Optional annotation: a multi-GPU job's share of step time in all-reduce (0..1)."""
ANNOTATION_GPUS = "interplace.io/gpus"
"""Annotation ``bind`` writes: the chosen GPU ids on the node, comma-separated (as HAMi's and
gpushare's extenders record theirs), e.g. ``"0,1"``."""
GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource whose limit (or request) counts a pod's GPUs."""


@dataclass(frozen=True)
class PodRequest:
    """A pod as the extender sees it: ``key`` is ``namespace/name``; ``job_type`` None when
    the pod carries no :data:`KEY_JOB_TYPE`; ``gpus`` from :data:`GPU_RESOURCE` (the pod's
    effective request, :func:`gpu_request`). ``problem``: why its ``interplace.io/``
    labels or annotations could not be read, where :func:`parse_pod` was asked to read it
    anyway (``strict=False``); the model then cannot see it (``job_type`` None). ``created``:
    ``metadata.creationTimestamp`` in seconds since the epoch (None: absent or unreadable);
    ``deleting``: the pod carries a ``metadata.deletionTimestamp`` (it is terminating)."""

    key: str
    namespace: str
    name: str
    uid: str
    job_type: str | None
    family: str | None
    gpus: int
    comm_share: float | None
    counters: tuple[tuple[str, float], ...] | None = None
    counter_samples: int | None = None
    node: str | None = None
    assigned_gpus: tuple[str, ...] = ()
    phase: str = ""
    problem: str | None = None
    created: float | None = None
    deleting: bool = False

    def __post_init__(self) -> None:
        for name in ("key", "namespace", "name"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InputError(f"PodRequest.{name} must be a non-empty string, not {value!r}")
        who = f"pod {self.key}"
        for name in ("uid", "phase"):
            if not isinstance(getattr(self, name), str):
                raise InputError(f"{who}: {name} must be a string, not {getattr(self, name)!r}")
        for name in ("job_type", "family", "node", "problem"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InputError(f"{who}: {name} must be a non-empty string or None, not "
                                 f"{value!r}")
        check_count(self.gpus, f"{who}: gpus", low=0)
        c = self.comm_share  # as a placement Job takes it
        if c is not None and not (is_real(c) and 0 <= c < 1):
            raise InputError(f"{who}: comm_share must be in [0, 1) or None, not {c!r}")
        # Any number: placement judges the readings (parse_pod reads those of a pod without a
        # job type, which the model never sees, unchecked).
        if self.counters is not None and not (
            isinstance(self.counters, tuple)
            and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                    and is_real(p[1], finite=False) for p in self.counters)
        ):
            raise InputError(f"{who}: counters must be a tuple of (metric, number) pairs, not "
                             f"{self.counters!r}")
        if self.counter_samples is not None:
            check_count(self.counter_samples, f"{who}: counter_samples")
        if not isinstance(self.assigned_gpus, tuple) or not all(
            isinstance(g, str) and g for g in self.assigned_gpus
        ):
            raise InputError(f"{who}: assigned_gpus must be a tuple of GPU ids, not "
                             f"{self.assigned_gpus!r}")
        if self.created is not None and not is_real(self.created):
            raise InputError(f"{who}: created must be a finite number or None, not "
                             f"{self.created!r}")
        if not isinstance(self.deleting, bool):
            raise InputError(f"{who}: deleting must be True or False, not {self.deleting!r}")


def _timestamp(value: Any) -> float | None:
    """An API timestamp (RFC 3339, ``2026-01-01T00:00:00Z``) in seconds since the epoch, or
    None where there is none or it cannot be read (the extender only compares them).

    >>> _timestamp("1970-01-01T00:01:00Z"), _timestamp("soon")
    (60.0, None)
    """
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _meta_value(meta: Mapping[str, Any], key: str) -> str | None:
    for field in ("labels", "annotations"):
        values = meta.get(field) or {}
        if not isinstance(values, Mapping):
            raise InputError(f"pod metadata.{field} must be an object")
        v = values.get(key)
        if v is not None:
            if not isinstance(v, str):
                raise InputError(f"pod {field} {key} must be a string")
            if v.strip():
                return v.strip()
    return None


def _quantity(value: Any) -> int:
    """A Kubernetes quantity of whole devices (``"2"``, ``2``)."""
    try:
        f = float(str(value))
    except ValueError:
        raise InputError(f"{GPU_RESOURCE} quantity {value!r} is not a number") from None
    if not math.isfinite(f) or f < 0 or f != int(f):
        raise InputError(f"{GPU_RESOURCE} quantity {value!r} is not a whole number >= 0")
    return int(f)


def _container_gpus(container: Any) -> int:
    if not isinstance(container, Mapping):
        raise InputError("a Pod container must be an object")
    res = container.get("resources") or {}
    if not isinstance(res, Mapping):
        raise InputError("a Pod container's resources must be an object")
    amount = None
    for part in ("limits", "requests"):  # a limit stands for the request
        values = res.get(part) or {}
        if not isinstance(values, Mapping):
            raise InputError(f"a Pod container's resources.{part} must be an object")
        if amount is None:
            amount = values.get(GPU_RESOURCE)
    return 0 if amount is None else _quantity(amount)


def gpu_request(spec: Mapping[str, Any]) -> int:
    r"""A pod's effective :data:`GPU_RESOURCE` request, as kube-scheduler counts it.

    Its containers run together, so their requests add up; its init containers run one at a
    time before them, each beside the *sidecars* started before it (init containers with
    ``restartPolicy: Always``, which keep running beside the containers):

    .. math:: n = \max\Bigl(\sum_c n_c + \sum_s n_s,\;
              \max_i \bigl(n_i + \textstyle\sum_{s < i} n_s\bigr)\Bigr)

    (``resource.PodRequests`` in Kubernetes' ``component-helpers``; a container's limit
    stands for its request where it gives only the limit, as for every extended resource).

    >>> c = lambda n, **kw: {"resources": {"limits": {GPU_RESOURCE: str(n)}}, **kw}
    >>> gpu_request({"containers": [c(1), c(1)], "initContainers": [c(4)]})
    4
    >>> gpu_request({"containers": [c(2)], "initContainers": [c(1, restartPolicy="Always")]})
    3
    """
    containers = spec.get("containers") or []
    inits = spec.get("initContainers") or []
    if not isinstance(containers, list):
        raise InputError("Pod spec.containers must be a list")
    if not isinstance(inits, list):
        raise InputError("Pod spec.initContainers must be a list")
    sidecars = 0
    init_peak = 0
    for c in inits:
        n = _container_gpus(c)
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always":
            sidecars += n
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + n)
    return max(sum(_container_gpus(c) for c in containers) + sidecars, init_peak)


@dataclass(frozen=True)
class _JobFields:
    job_type: str | None = None
    family: str | None = None
    comm_share: float | None = None
    counters: tuple[tuple[str, float], ...] | None = None
    counter_samples: int | None = None


def _job_fields(meta: Mapping[str, Any]) -> _JobFields:
    """What the pod's ``interplace.io/`` labels and annotations say about its job."""
    share_text = _meta_value(meta, KEY_COMM_SHARE)
    share = None
    if share_text is not None:
        try:
            share = float(share_text)
        except ValueError:
            raise InputError(f"{KEY_COMM_SHARE} {share_text!r} is not a number") from None
        if not 0 <= share < 1:
            raise InputError(f"{KEY_COMM_SHARE} must be in [0, 1), not {share_text}")
    counters = None
    counter_text = _meta_value(meta, KEY_COUNTERS)
    if counter_text is not None:
        pairs = []
        for part in counter_text.split(","):
            name, sep, value = part.partition("=")
            try:
                pairs.append((name.strip(), float(value)))
            except ValueError:
                raise InputError(f"{KEY_COUNTERS}: {part!r} is not metric=number") from None
            if not sep or not name.strip():
                raise InputError(f"{KEY_COUNTERS}: {part!r} is not metric=number")
        named = [name for name, _ in pairs]
        twice = sorted({name for name in named if named.count(name) > 1})
        if twice:
            raise InputError(f"{KEY_COUNTERS}: {', '.join(twice)} given twice")
        counters = tuple(sorted(pairs))
    samples = None
    samples_text = _meta_value(meta, KEY_COUNTER_SAMPLES)
    if samples_text is not None:
        try:
            f = float(samples_text)
        except ValueError:
            raise InputError(f"{KEY_COUNTER_SAMPLES} {samples_text!r} is not a number") from None
        if not math.isfinite(f) or f != int(f) or f < 1:
            raise InputError(
                f"{KEY_COUNTER_SAMPLES} must be a whole number >= 1, not {samples_text}"
            )
        samples = int(f)
    fields = _JobFields(_meta_value(meta, KEY_JOB_TYPE), _meta_value(meta, KEY_FAMILY), share,
                        counters, samples)
    if fields.job_type is not None:
        _check_job(fields)
    return fields


def _check_job(fields: _JobFields) -> None:
    """Raise :class:`InputError` unless ``fields`` make a placement job: what placement
    refuses (a counter reading that is not finite or is negative, a metric no model reads, a
    name with a control character) would otherwise pass ``filter`` and fail every ``bind``,
    or, on a running pod, fail every call that builds its node's state."""
    from interplace.model import METRIC_RESOURCE
    from interplace.placement import Job

    for metric, _ in fields.counters or ():
        if metric not in METRIC_RESOURCE:
            raise InputError(
                f"{KEY_COUNTERS}: unknown counter {metric!r} (known: "
                f"{', '.join(sorted(METRIC_RESOURCE))})"
            )
    share = {} if fields.comm_share is None else {"comm_share": fields.comm_share}
    try:
        Job("pod", str(fields.job_type), 1, fields.family, counters=fields.counters,
            counter_samples=fields.counter_samples if fields.counters else None, **share)
    except InputError as exc:
        why = str(exc).removeprefix("job pod: ")
        key = next((k for word, k in (("counter_samples", KEY_COUNTER_SAMPLES),
                                      ("counter", KEY_COUNTERS), ("family", KEY_FAMILY))
                    if why.startswith(word)), KEY_JOB_TYPE)
        raise InputError(f"{key}: {why}") from None


def parse_pod(pod: Any, *, strict: bool = True) -> PodRequest:
    """Read a pod object (kube-scheduler's JSON, Go field names inside as the API's camelCase).

    Raises :class:`~interplace.errors.InputError` for a pod it cannot read, and, with
    ``strict`` (the default), for malformed ``interplace.io/`` labels or annotations; without
    it such a pod is read with the reason in ``problem`` and no job (the book must still count
    the GPUs of a pod that runs, whatever its annotations say).

    >>> p = parse_pod({"metadata": {"name": "a", "namespace": "ml", "uid": "u1",
    ...                             "labels": {KEY_JOB_TYPE: "resnet"}},
    ...                "spec": {"containers": [{"resources": {"limits": {GPU_RESOURCE: "2"}}}]}})
    >>> p.key, p.job_type, p.gpus
    ('ml/a', 'resnet', 2)
    >>> bad = {"metadata": {"name": "b", "annotations": {KEY_COMM_SHARE: "high"}}}
    >>> parse_pod(bad, strict=False).problem
    "interplace.io/comm-share 'high' is not a number"
    """
    if not isinstance(pod, Mapping):
        raise InputError("Pod must be an object")
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise InputError("Pod lacks metadata.name")
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise InputError("Pod metadata.namespace must be a string")
    spec = pod.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise InputError("Pod spec must be an object")
    gpus = gpu_request(spec)
    problem = None
    try:
        fields = _job_fields(meta)
    except InputError as exc:
        if strict:
            raise
        problem, fields = str(exc), _JobFields()
    annotations = meta.get("annotations") or {}
    assigned = annotations.get(ANNOTATION_GPUS) if isinstance(annotations, Mapping) else None
    status = pod.get("status") or {}
    return PodRequest(
        key=f"{namespace}/{meta['name']}",
        namespace=namespace,
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        job_type=fields.job_type,
        family=fields.family,
        gpus=gpus,
        comm_share=fields.comm_share,
        counters=fields.counters,
        counter_samples=fields.counter_samples,
        node=spec.get("nodeName") or None,
        # Each GPU once ("0,0" holds GPU 0): the book counts a pod once per GPU it holds.
        assigned_gpus=tuple(dict.fromkeys(g for g in str(assigned).split(",") if g))
        if assigned else (),
        phase=str(status.get("phase") or "") if isinstance(status, Mapping) else "",
        problem=problem,
        created=_timestamp(meta.get("creationTimestamp")),
        deleting=meta.get("deletionTimestamp") is not None,
    )
