"""``interplace serve``: a Kubernetes scheduler extender that picks GPUs by predicted
interference.

kube-scheduler calls it over HTTP (``filter``, ``prioritize``, ``bind``, ``preempt``) as the
``extenders:`` stanza of its ``KubeSchedulerConfiguration`` says (``deploy/kubernetes/``). A pod
names its job type with the label or annotation ``interplace.io/job-type`` and its GPUs with
the ``nvidia.com/gpu`` limit (a type the model never saw can bring its isolated counters in
the annotation ``interplace.io/counters``, e.g. ``gpu_util_pct=85,mem_util_pct=40``, how
many samples each reading is a mean of in ``interplace.io/counter-samples`` (default: as the
model's own), and its family in ``interplace.io/family``: it is then placed by the model's
cold-start path);
the extender drops nodes it cannot fit, scores
the rest by the predicted slowdown of the best placement there (for the pod and the pods
already there), on ``bind`` records the chosen GPU ids on the pod (``interplace.io/gpus``)
and creates the Binding, and on ``preempt`` keeps the candidate nodes whose victims free GPU
slots enough for the pod.
The logic is :class:`Extender` (:mod:`._extender`), the HTTP face :func:`build_app`
(:mod:`._app`, Starlette, the optional extra ``interplace[serve]``), the API server side
:class:`KubeSync` (:mod:`._kube`, the official ``kubernetes`` client).
"""

from interplace.serve._app import MAX_BODY, build_app
from interplace.serve._extender import NEUTRAL_SCORE, Book, Booking, Extender
from interplace.serve._kube import KubeSync, connect
from interplace.serve._pods import (
    ANNOTATION_GPUS,
    GPU_RESOURCE,
    KEY_COMM_SHARE,
    KEY_COUNTER_SAMPLES,
    KEY_COUNTERS,
    KEY_FAMILY,
    KEY_JOB_TYPE,
    PodRequest,
    parse_pod,
)

__all__ = [
    "ANNOTATION_GPUS",
    "GPU_RESOURCE",
    "KEY_COMM_SHARE",
    "KEY_COUNTERS",
    "KEY_COUNTER_SAMPLES",
    "KEY_FAMILY",
    "KEY_JOB_TYPE",
    "MAX_BODY",
    "NEUTRAL_SCORE",
    "Book",
    "Booking",
    "Extender",
    "KubeSync",
    "PodRequest",
    "build_app",
    "connect",
    "parse_pod",
]
