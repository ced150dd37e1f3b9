"""The API server side: list and watch pods to keep the book, patch and bind on ``bind``.

Uses the official ``kubernetes`` client (``interplace[serve]``). ``KubeSync`` takes any
object with the ``CoreV1Api`` methods it calls (``list_pod_for_all_namespaces``,
``patch_namespaced_pod``, ``create_namespaced_binding``, ``read_namespaced_pod``), so tests
pass a fake.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from interplace.serve._extender import Extender
from interplace.serve._pods import ANNOTATION_GPUS, PodRequest

__all__ = ["KubeSync", "connect"]

log = logging.getLogger("interplace.serve")


def connect() -> Any:
    """A ``CoreV1Api`` from the in-cluster service account, else the local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CoreV1Api()


def _plain(obj: Any) -> Any:
    """A client model object as the API's JSON (camelCase keys), dicts unchanged."""
    if isinstance(obj, dict):
        return obj
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(obj)


class KubeSync:
    """Restores the book from the API server, keeps it current from a watch, binds pods."""

    def __init__(self, api: Any, extender: Extender) -> None:
        self.api = api
        self.extender = extender
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def restore(self) -> str:
        """List every pod, rebuild the book; returns the list's resourceVersion."""
        listing = self.api.list_pod_for_all_namespaces()
        plain = _plain(listing)
        made = self.extender.restore(plain.get("items") or [])
        log.info("restored %d GPU bookings from the API server", made)
        return str((plain.get("metadata") or {}).get("resourceVersion") or "")

    def bind(self, pod: PodRequest, node: str, gpus: tuple[str, ...]) -> None:
        """Record the GPUs on the pod, then create its Binding to ``node``."""
        from kubernetes import client

        if gpus:
            body = {"metadata": {"annotations": {ANNOTATION_GPUS: ",".join(gpus)}}}
            self.api.patch_namespaced_pod(pod.name, pod.namespace, body)
        binding = client.V1Binding(
            metadata=client.V1ObjectMeta(name=pod.name, namespace=pod.namespace, uid=pod.uid
                                         or None),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        # The Python client cannot deserialise this call's reply (kubernetes-client/python
        # #825): skip deserialising it.
        self.api.create_namespaced_binding(pod.namespace, binding, _preload_content=False)

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
                    self.extender.observe(str(event.get("type")), obj)
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        resource_version = str(rv)
            except Exception as exc:  # the watch expired or the connection dropped
                log.warning("pod watch ended (%s); listing again", exc)
                resource_version = self.restore()

    def start(self) -> None:
        """Restore, then watch in a daemon thread."""
        rv = self.restore()
        self._thread = threading.Thread(target=self.watch, args=(rv,), daemon=True,
                                        name="interplace-watch")
        self._thread.start()

    def stop(self) -> None:
        """Ask the watch to end."""
        self._stop.set()
