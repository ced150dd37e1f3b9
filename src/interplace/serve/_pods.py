"""What the extender reads off a pod (as kube-scheduler sends it: the v1.Pod JSON)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from interplace.errors import InputError

__all__ = [
    "ANNOTATION_GPUS",
    "GPU_RESOURCE",
    "KEY_COMM_SHARE",
    "KEY_COUNTERS",
    "KEY_COUNTER_SAMPLES",
    "KEY_FAMILY",
    "KEY_JOB_TYPE",
    "PodRequest",
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
    the pod carries no :data:`KEY_JOB_TYPE`; ``gpus`` from :data:`GPU_RESOURCE`."""

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


def parse_pod(pod: Any) -> PodRequest:
    """Read a pod object (kube-scheduler's JSON, Go field names inside as the API's camelCase).

    >>> p = parse_pod({"metadata": {"name": "a", "namespace": "ml", "uid": "u1",
    ...                             "labels": {KEY_JOB_TYPE: "resnet"}},
    ...                "spec": {"containers": [{"resources": {"limits": {GPU_RESOURCE: "2"}}}]}})
    >>> p.key, p.job_type, p.gpus
    ('ml/a', 'resnet', 2)
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
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise InputError("Pod spec.containers must be a list")
    gpus = 0
    for c in containers:
        res = (c or {}).get("resources") or {}
        amount = (res.get("limits") or {}).get(GPU_RESOURCE)
        if amount is None:
            amount = (res.get("requests") or {}).get(GPU_RESOURCE)
        if amount is not None:
            gpus += _quantity(amount)
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
    annotations = meta.get("annotations") or {}
    assigned = annotations.get(ANNOTATION_GPUS) if isinstance(annotations, Mapping) else None
    status = pod.get("status") or {}
    return PodRequest(
        key=f"{namespace}/{meta['name']}",
        namespace=namespace,
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        job_type=_meta_value(meta, KEY_JOB_TYPE),
        family=_meta_value(meta, KEY_FAMILY),
        gpus=gpus,
        comm_share=share,
        counters=counters,
        counter_samples=samples,
        node=spec.get("nodeName") or None,
        assigned_gpus=tuple(g for g in str(assigned).split(",") if g) if assigned else (),
        phase=str(status.get("phase") or "") if isinstance(status, Mapping) else "",
    )
