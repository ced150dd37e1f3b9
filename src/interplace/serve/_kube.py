"""The API server side: list and watch pods to keep the book, patch and bind on ``bind``.

Uses the official ``kubernetes`` client (``interplace[serve]``). ``KubeSync`` takes any
object with the ``CoreV1Api`` methods it calls (``list_pod_for_all_namespaces``,
``patch_namespaced_pod``, ``create_namespaced_binding``, ``read_namespaced_pod``), so tests
pass a fake.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from interplace.errors import InputError, first_line
from interplace.serve._extender import Extender
from interplace.serve._pods import ANNOTATION_GPUS, PodRequest

__all__ = ["KubeSync", "connect", "describe"]

log = logging.getLogger("interplace.serve")


def connect() -> Any:
    """A ``CoreV1Api`` from the in-cluster service account, else the local kubeconfig.

    Raises :class:`~interplace.errors.InputError` when there is neither."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException as in_cluster:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as local:
            raise InputError(
                f"no Kubernetes API server: not in a cluster ({in_cluster}) and no usable "
                f"kubeconfig ({first_line(local)}); --standalone serves without one"
            ) from None
    return client.CoreV1Api()


def describe(exc: BaseException) -> str:
    """One line for an API or connection failure (the client's ``ApiException`` prints the
    whole HTTP reply)."""
    status, reason = getattr(exc, "status", None), getattr(exc, "reason", None)
    if status is not None:
        return f"HTTP {status} {reason or ''}".rstrip()
    return f"{type(exc).__name__}: {first_line(exc)}"


def _plain(obj: Any) -> Any:
    """A client model object as the API's JSON (camelCase keys), dicts unchanged."""
    if isinstance(obj, dict):
        return obj
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(obj)


class KubeSync:
    """Restores the book from the API server, keeps it current from a watch, binds pods.

    When the watch ends (it expires, or the connection drops) it lists the pods again and
    watches on; a list that fails is retried after ``retry_s`` seconds, doubling up to
    ``max_retry_s``, until one succeeds. Meanwhile :meth:`problem` says so, and the service's
    ``/healthz`` answers 503 with it, so a liveness probe restarts a service whose book no
    longer follows the cluster.
    """

    def __init__(
        self, api: Any, extender: Extender, *, retry_s: float = 1.0, max_retry_s: float = 30.0
    ) -> None:
        self.api = api
        self.extender = extender
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: str | None = None

    def restore(self) -> str:
        """List every pod, rebuild the book; returns the list's resourceVersion.

        The list is read without the book's lock, so binds go on meanwhile: the book keeps
        the bookings of binds the list does not show yet (:meth:`Extender.restore`)."""
        listed_at = self.extender.clock()
        listing = self.api.list_pod_for_all_namespaces()
        plain = _plain(listing)
        made = self.extender.restore(plain.get("items") or [], listed_at=listed_at)
        log.info("restored %d GPU bookings from the API server", made)
        return str((plain.get("metadata") or {}).get("resourceVersion") or "")

    def bind(self, pod: PodRequest, node: str, gpus: tuple[str, ...]) -> None:
        """Record the GPUs on the pod, then create its Binding to ``node``.

        Both name the pod's UID (where known), so the API server refuses them when the pod
        of that name is another one (recreated under its name): the Binding by its UID
        precondition, the patch because a pod's ``metadata.uid`` is immutable (a patch
        that sets another UID is rejected, as Kubernetes' own controllers rely on)."""
        from kubernetes import client

        if gpus:
            meta: dict[str, Any] = {"annotations": {ANNOTATION_GPUS: ",".join(gpus)}}
            if pod.uid:
                meta["uid"] = pod.uid
            self.api.patch_namespaced_pod(pod.name, pod.namespace, {"metadata": meta})
        binding = client.V1Binding(
            metadata=client.V1ObjectMeta(name=pod.name, namespace=pod.namespace, uid=pod.uid
                                         or None),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        # The Python client cannot deserialise this call's reply (kubernetes-client/python
        # #825): skip deserialising it.
        # Read and release the reply, so that its connection goes back to the pool (each bind
        # opened a new one, a TLS handshake in a real cluster).
        reply = self.api.create_namespaced_binding(pod.namespace, binding,
                                                   _preload_content=False)
        reply.read()
        reply.release_conn()

    def read(self, namespace: str, name: str) -> Any:
        """One pod as JSON (for a bind the service saw no filter call for)."""
        return _plain(self.api.read_namespaced_pod(name, namespace))

    def watch(self, resource_version: str = "") -> None:
        """Follow pod events until :meth:`stop` (restarting the watch when it ends)."""
        from kubernetes import watch

        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(self.api.list_pod_for_all_namespaces,
                                      resource_version=resource_version or None,
                                      timeout_seconds=60):
                    if self._stop.is_set():
                        w.stop()
                        break
                    obj = _plain(event.get("object"))
                    try:
                        self.extender.observe(str(event.get("type")), obj)
                    except InputError as exc:  # one pod the book cannot read
                        log.warning("pod watch: an event left out (%s)", exc)
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        resource_version = str(rv)
            except Exception as exc:  # the watch expired or the connection dropped
                log.warning("pod watch ended (%s); listing again", exc)
                resource_version = self.relist()

    def relist(self) -> str:
        """:meth:`restore`, retried with a doubling wait until it succeeds (or :meth:`stop`);
        returns the list's resourceVersion ("" if stopped first)."""
        wait = self.retry_s
        since = time.monotonic()
        while not self._stop.is_set():
            try:
                rv = self.restore()
            except Exception as exc:
                self._failing = (f"listing pods has failed for {time.monotonic() - since:.0f} s "
                                 f"({describe(exc)}); the book may be stale")
                log.warning("pod list failed (%s); again in %.0f s", exc, wait)
                self._stop.wait(wait)
                wait = min(2 * wait, self.max_retry_s)
                continue
            self._failing = None
            return rv
        return ""

    def problem(self) -> str | None:
        """Why the book may not follow the cluster now (None: it does): the watch thread
        has ended, or listing the pods keeps failing."""
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return "the pod watch has stopped; the book no longer follows the cluster"
        return self._failing

    def start(self) -> None:
        """Restore, then watch in a daemon thread. Raises
        :class:`~interplace.errors.InputError` when the first list fails (the service cannot
        know which GPUs are taken)."""
        try:
            rv = self.restore()
        except Exception as exc:
            raise InputError(
                f"cannot list the cluster's pods ({describe(exc)}): check the API server and "
                "the service account's permissions (deploy/kubernetes/extender.yaml)"
            ) from None
        self._thread = threading.Thread(target=self.watch, args=(rv,), daemon=True,
                                        name="interplace-watch")
        self._thread.start()

    def stop(self) -> None:
        """Ask the watch to end."""
        self._stop.set()
