"""Bad arguments to the extender's library calls raise InputError with a one-line message,
at once, instead of building a service that answers every call wrongly (or raising a raw
AttributeError/TypeError/ValueError)."""

from __future__ import annotations

from typing import Any

import pytest

from interplace.errors import InputError
from interplace.placement import Job, MeasuredSpeeds
from interplace.serve import (
    ANNOTATION_GPUS,
    GPU_RESOURCE,
    KEY_JOB_TYPE,
    Booking,
    Extender,
    PodRequest,
)
from interplace.topology import builtin

TOPO = builtin("pcie-8gpu")
MODEL = MeasuredSpeeds({("a", "a"): 0.5, ("a", "b"): 0.9, ("b", "a"): 0.8, ("b", "b"): 0.4})


def topology_for(node: str) -> Any:
    return TOPO if node in ("n1", "n2") else None


def pod(name: str = "p", gpus: str = "1", node: str | None = None,
        booked: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"u-{name}",
                            "labels": {KEY_JOB_TYPE: "a"}}
    if booked is not None:
        meta["annotations"] = {ANNOTATION_GPUS: booked}
    spec: dict[str, Any] = {"containers": [{"resources": {"limits": {GPU_RESOURCE: gpus}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec}


def ext(**kw: Any) -> Extender:
    return Extender(MODEL, topology_for, **kw)


def one_line(exc: pytest.ExceptionInfo[InputError]) -> str:
    text = str(exc.value)
    assert text and "\n" not in text
    return text


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        # Each built before, then scored every node neutrally, failed every node, or raised
        # a raw ValueError at construction.
        ({"policy": "bogus"}, "unknown policy 'bogus'"),
        ({"policy": 5}, "policy must be a name or a function"),
        ({"seed": -1}, "seed must be an integer"),
        ({"seed": "x"}, "seed must be an integer"),
        ({"num_samples": 0}, "num_samples must be an integer >= 1"),
        ({"num_samples": "x"}, "num_samples must be an integer >= 1"),
        ({"max_per_gpu": 0}, "max_per_gpu must be an integer >= 1"),
        ({"max_per_gpu": "2"}, "max_per_gpu must be an integer >= 1"),
        ({"max_per_gpu": 1.5}, "max_per_gpu must be an integer >= 1"),
        ({"deadline_s": -1}, "deadline_s must be a finite number > 0"),
        ({"deadline_s": float("nan")}, "deadline_s must be a finite number > 0"),
        ({"deadline_s": "2"}, "deadline_s must be a finite number > 0"),
        ({"deadline_s": None}, "deadline_s must be a finite number > 0"),
        ({"assume_ttl_s": True}, "assume_ttl_s must be a positive number"),
        ({"binder": "x"}, "binder must be a function"),
        ({"fetch_pod": 3}, "fetch_pod must be a function"),
        ({"clock": "x"}, "clock must be a function"),
    ],
)
def test_bad_constructor_arguments_are_refused_at_once(kw: dict[str, Any], reason: str) -> None:
    with pytest.raises(InputError) as exc:
        ext(**kw)
    assert reason in one_line(exc)


@pytest.mark.parametrize("model", [None, "model-dir", 3])
def test_a_model_that_is_no_speed_source_is_refused(model: Any) -> None:
    with pytest.raises(InputError, match="model must be a speed source") as exc:
        Extender(model, topology_for)
    one_line(exc)


def test_a_topology_lookup_that_is_no_function_is_refused() -> None:
    with pytest.raises(InputError, match="topology_for must be a function"):
        Extender(MODEL, "dgx-a100")  # type: ignore[arg-type]


def test_good_constructor_arguments_still_serve() -> None:
    e = ext(policy="greedy", max_per_gpu=1, seed=3, num_samples=8, deadline_s=5,
            assume_ttl_s=60, binder=None, fetch_pod=None)
    args = {"Pod": pod(), "NodeNames": ["n1", "n2"]}
    assert e.filter(args)["NodeNames"] == ["n1", "n2"]
    assert [hp["Score"] for hp in e.prioritize(args)] == [10, 10]


def test_an_unknown_watch_event_is_refused_not_booked() -> None:
    e = ext()
    running = pod("r", node="n1", booked="0")
    for kind in ("BOGUS", None, "ERROR", "added"):
        with pytest.raises(InputError, match="unknown watch event type"):
            e.observe(kind, running)  # type: ignore[arg-type]
    assert e.snapshot()["nodes"] == {}  # was booked as if ADDED
    e.observe("BOOKMARK", {"metadata": {"resourceVersion": "5"}})  # carries no pod
    assert e.snapshot()["nodes"] == {}
    e.observe("ADDED", running)
    assert e.snapshot()["nodes"] == {"n1": {"ml/r": "0"}}
    e.observe("DELETED", running)
    assert e.snapshot()["nodes"] == {}


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind", "preempt"])
@pytest.mark.parametrize("args", [None, [1], "x", 5])
def test_a_request_that_is_no_object_is_refused(verb: str, args: Any) -> None:
    with pytest.raises(InputError, match="must be an object") as exc:
        getattr(ext(), verb)(args)  # was an AttributeError
    one_line(exc)


def test_prioritize_refuses_an_arrival_that_is_no_clock_reading() -> None:
    args = {"Pod": pod(), "NodeNames": ["n1"]}
    for arrived in ("x", float("nan"), [1.0]):
        with pytest.raises(InputError, match="arrived must be"):
            ext().prioritize(args, arrived=arrived)  # type: ignore[arg-type]
    assert ext().prioritize(args, arrived=None) == [{"Host": "n1", "Score": 10}]


@pytest.mark.parametrize("pods", [None, "abc", {"a": 1}, 5])
def test_restore_refuses_what_is_no_list_of_pods(pods: Any) -> None:
    with pytest.raises(InputError, match="restore needs a list of pod objects"):
        ext().restore(pods)  # was a TypeError (None) or a pod per character or key


def test_restore_refuses_a_listed_at_that_is_no_clock_reading() -> None:
    with pytest.raises(InputError, match="listed_at must be"):
        ext().restore([], listed_at="x")  # type: ignore[arg-type]
    assert ext().restore((pod("r", node="n1", booked="0"),), listed_at=1.0) == 1


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"gpus": -1}, "gpus must be an integer >= 0"),
        ({"gpus": "1"}, "gpus must be an integer >= 0"),
        ({"comm_share": 5.0}, "comm_share must be in [0, 1)"),
        ({"comm_share": 1.0}, "comm_share must be in [0, 1)"),  # as a placement Job
        ({"comm_share": float("nan")}, "comm_share must be in [0, 1)"),
        ({"key": ""}, "PodRequest.key must be a non-empty string"),
        ({"node": 5}, "node must be a non-empty string or None"),
        ({"assigned_gpus": "0,1"}, "assigned_gpus must be a tuple of GPU ids"),
        ({"counter_samples": 0}, "counter_samples must be an integer >= 1"),
        ({"counters": {"gpu_util_pct": 5.0}}, "counters must be a tuple"),
        ({"created": "soon"}, "created must be a finite number or None"),
        ({"deleting": "no"}, "deleting must be True or False"),
    ],
)
def test_a_pod_request_with_bad_fields_is_refused(kw: dict[str, Any], reason: str) -> None:
    fields: dict[str, Any] = {"key": "a/b", "namespace": "a", "name": "b", "uid": "",
                              "job_type": "t", "family": None, "gpus": 1, "comm_share": None}
    PodRequest(**fields)  # the good one stands
    with pytest.raises(InputError) as exc:
        PodRequest(**{**fields, **kw})
    assert reason in one_line(exc)


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("p", "n1", "0,1", None), "gpus must be a tuple of GPU ids"),
        (("p", "n1", (0, 1), None), "gpus must be a tuple of GPU ids"),
        (("p", "n1", ("0",), "job"), "job must be a Job or None"),
        (("", "n1", ("0",), None), "Booking.pod must be a non-empty string"),
        (("p", None, ("0",), None), "Booking.node must be a non-empty string"),
        (("p", "n1", ("0",), None, None), "uid must be a string"),
        (("p", "n1", ("0",), None, "", "soon"), "assumed must be a finite number or None"),
        (("p", "n1", ("0",), None, "", None, float("inf")), "created must be a finite"),
    ],
)
def test_a_booking_with_bad_fields_is_refused(args: tuple[Any, ...], reason: str) -> None:
    Booking("p", "n1", ("0", "1"), Job("p", "a"), "u", 1.0, 2.0)  # the good one stands
    Booking("p", "n1", (), None)  # a pod that asks for no GPUs books none
    with pytest.raises(InputError) as exc:
        Booking(*args)
    assert reason in one_line(exc)


def test_a_listed_pod_bound_to_a_node_that_is_no_name_is_left_out() -> None:
    # A nodeName that is not a string was booked under that value; now the pod is unreadable,
    # and the list leaves it out (with a log line) as it does any other.
    bad = pod("odd", node="n1", booked="0")
    bad["spec"]["nodeName"] = 5
    e = ext()
    assert e.restore([bad, pod("r", node="n1", booked="1")]) == 1
    assert e.snapshot()["nodes"] == {"n1": {"ml/r": "1"}}
