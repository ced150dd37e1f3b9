"""The book under interleavings of binds, watch events and re-lists, each driven explicitly
(events and fakes, no sleeps): a GPU never ends up holding more pods than ``max_per_gpu``."""

from __future__ import annotations

import copy
import threading
import types
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("kubernetes")
from starlette.testclient import TestClient

from interplace.errors import InputError
from interplace.serve import (
    ANNOTATION_GPUS,
    NEUTRAL_SCORE,
    Extender,
    KubeSync,
    build_app,
)
from interplace.serve import _extender as extender_module
from tests.serve.test_extender import FakeApi, Reply, bound, make, pod

MAX = 1


class Cluster:
    """A small API server: pods by ``namespace/name``; the patch and the Binding refuse a
    UID other than the pod's, as the API server does; every change queues its watch event
    (:meth:`deliver` hands them to the extender, as a watch that lags would)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = {self.key(p): copy.deepcopy(p) for p in pods}
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.patches: list[dict[str, Any]] = []

    @staticmethod
    def key(p: dict[str, Any]) -> str:
        return f"{p['metadata']['namespace']}/{p['metadata']['name']}"

    def put(self, p: dict[str, Any]) -> None:
        self.pods[self.key(p)] = copy.deepcopy(p)

    def _changed(self, key: str) -> None:
        self.events.append(("MODIFIED", copy.deepcopy(self.pods[key])))

    def _get(self, ns: str, name: str) -> dict[str, Any]:
        if f"{ns}/{name}" not in self.pods:
            raise RuntimeError("404 Not Found")
        return self.pods[f"{ns}/{name}"]

    def list_pod_for_all_namespaces(self, **_: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "7"},
                "items": copy.deepcopy(list(self.pods.values()))}

    def patch_namespaced_pod(self, name: str, ns: str, body: dict[str, Any]) -> None:
        self.patches.append(body)
        p = self._get(ns, name)
        uid = body["metadata"].get("uid")
        if uid is not None and uid != p["metadata"]["uid"]:
            raise RuntimeError("422 Invalid: metadata.uid: field is immutable")
        p["metadata"]["annotations"] = {**(p["metadata"].get("annotations") or {}),
                                        **body["metadata"]["annotations"]}
        self._changed(f"{ns}/{name}")

    def create_namespaced_binding(self, ns: str, body: Any, **kw: Any) -> Reply:
        p = self._get(ns, body.metadata.name)
        if body.metadata.uid and body.metadata.uid != p["metadata"]["uid"]:
            raise RuntimeError("409 Conflict: Precondition failed: UID in precondition")
        if p["spec"].get("nodeName"):
            raise RuntimeError("409 Conflict: pod is already assigned to a node")
        p["spec"]["nodeName"] = body.target.name
        self._changed(f"{ns}/{body.metadata.name}")
        return Reply()

    def read_namespaced_pod(self, name: str, ns: str) -> dict[str, Any]:
        return copy.deepcopy(self._get(ns, name))

    def deliver(self, ext: Extender) -> None:
        for kind, obj in self.events:
            ext.observe(kind, obj)
        self.events.clear()


def connected(ext: Extender, api: Any) -> KubeSync:
    sync = KubeSync(api, ext)
    ext.binder, ext.fetch_pod = sync.bind, sync.read
    sync.restore()
    return sync


def bind_args(p: dict[str, Any], node: str = "n1") -> dict[str, Any]:
    m = p["metadata"]
    return {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"],
            "Node": node}


def over_full(ext: Extender) -> dict[tuple[str, str], int]:
    with ext.book.lock:
        return {(n, g): c for n in ext.book.by_node
                for g, c in ext.book.occupancy(n).items() if c > ext.max_per_gpu}


def one_slot_left(jobs: list[str]) -> list[dict[str, Any]]:
    """Pods on 7 of n1's 8 GPUs: one slot left under max-per-gpu=1."""
    out = []
    for g in range(7):
        p = bound(f"r{g}", jobs[g % 4], 1, str(g))
        p["status"] = {"phase": "Running"}
        out.append(p)
    return out


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------ 1: re-list vs bind
def test_a_relist_during_a_bind_keeps_its_booking(served: tuple[Any, list[str]]) -> None:
    model, jobs = served
    a, b = pod("a", jobs[0], 1), pod("b", jobs[1], 1)
    api = Cluster([*one_slot_left(jobs), a, b])
    ext, _ = make(model, ["n1"], max_per_gpu=MAX)
    sync = connected(ext, api)
    entered, release = threading.Event(), threading.Event()
    real = api.create_namespaced_binding

    def held_binding(ns: str, body: Any, **kw: Any) -> None:
        entered.set()
        release.wait(30)
        real(ns, body, **kw)

    api.create_namespaced_binding = held_binding  # type: ignore[method-assign]
    replies: list[dict[str, Any]] = []
    t = threading.Thread(target=lambda: replies.append(ext.bind(bind_args(a))))
    t.start()
    try:
        assert entered.wait(30)  # a is booked, its Binding under way
        sync.restore()  # the watch expired: list again
        assert "ml/a" in ext.book.pods and "ml/a" in ext.snapshot()["assumed"]
        assert "free slot" in ext.bind(bind_args(b))["Error"]  # the last slot is a's
    finally:
        release.set()
        t.join(30)
    assert replies == [{"Error": ""}]
    api.deliver(ext)  # the watch resumes from the list: a's patch and binding
    assert over_full(ext) == {} and ext.snapshot()["assumed"] == []
    assert ext.book.pods["ml/a"].assumed is None


def test_a_list_read_before_a_bind_keeps_its_booking(served: tuple[Any, list[str]]) -> None:
    model, jobs = served
    a, b = pod("a", jobs[0], 1), pod("b", jobs[1], 1)
    api = Cluster([*one_slot_left(jobs), a, b])
    clock = Clock()
    ext, _ = make(model, ["n1"], max_per_gpu=MAX, clock=clock)
    connected(ext, api)
    listed_at = clock()
    listing = api.list_pod_for_all_namespaces()  # the list is read ...
    clock.now += 1
    assert ext.bind(bind_args(a))["Error"] == ""  # ... a bind lands meanwhile ...
    ext.restore(listing["items"], listed_at=listed_at)  # ... and the older list is applied
    assert "ml/a" in ext.book.pods
    assert "free slot" in ext.bind(bind_args(b))["Error"]
    api.deliver(ext)
    assert over_full(ext) == {} and ext.snapshot()["assumed"] == []


def test_an_assumed_booking_ends_by_ttl_or_by_a_list_that_shows_it_gone(
    served: tuple[Any, list[str]],
) -> None:
    model, jobs = served
    a = pod("a", jobs[0], 1)
    api = Cluster([*one_slot_left(jobs), a])
    clock = Clock()
    ext, http = make(model, ["n1"], max_per_gpu=MAX, clock=clock, assume_ttl_s=60)
    sync = connected(ext, api)
    assert ext.bind(bind_args(a))["Error"] == ""
    api.events.clear()  # the watch never shows it bound
    clock.now += 59
    sync.restore()  # the list shows it bound, with its GPUs: confirmed
    assert ext.book.pods["ml/a"].assumed is None
    clock.now += 3600
    http.post("/filter", json={"Pod": pod("d", jobs[1], 1), "NodeNames": ["n1"]})
    assert "ml/a" in ext.book.pods  # confirmed: no TTL
    # Never confirmed: dropped after the TTL (a filter call sees the slot free again).
    api2 = Cluster([*one_slot_left(jobs), a])
    ext2, http2 = make(model, ["n1"], max_per_gpu=MAX, clock=clock, assume_ttl_s=60)
    connected(ext2, api2)
    assert ext2.bind(bind_args(a))["Error"] == ""
    c = pod("c", jobs[1], 1)
    r = http2.post("/filter", json={"Pod": c, "NodeNames": ["n1"]}).json()
    assert r["NodeNames"] == []
    clock.now += 61
    r = http2.post("/filter", json={"Pod": c, "NodeNames": ["n1"]}).json()
    assert r["NodeNames"] == ["n1"] and "ml/a" not in ext2.book.pods
    with pytest.raises(InputError, match="assume_ttl_s"):
        make(model, ["n1"], assume_ttl_s=0)
    # A list read after the booking that shows no such pod, or the pod finished: gone.
    for shown in (None, "Succeeded"):
        api3 = Cluster([*one_slot_left(jobs), a])
        ext3, _ = make(model, ["n1"], max_per_gpu=MAX, clock=clock)
        connected(ext3, api3)
        assert ext3.bind(bind_args(a))["Error"] == ""
        listing = api3.list_pod_for_all_namespaces()["items"]
        if shown is None:
            listing = [p for p in listing if p["metadata"]["name"] != "a"]
        else:
            for p in listing:
                if p["metadata"]["name"] == "a":
                    p["status"] = {"phase": shown}
        clock.now += 1
        ext3.restore(listing, listed_at=clock())
        assert "ml/a" not in ext3.book.pods, shown


# ----------------------------------------------- 2: a late event of an older pod, same name
def test_a_late_event_of_an_older_pod_leaves_the_newer_booking(
    served: tuple[Any, list[str]],
) -> None:
    model, jobs = served
    old = bound("w-0", jobs[0], 1, "7")
    old["metadata"]["uid"] = "uid-old"
    api = Cluster([*one_slot_left(jobs), old])
    ext, _ = make(model, ["n1"], max_per_gpu=MAX)
    connected(ext, api)
    # The API server: old w-0 terminates and goes; the StatefulSet creates the new one. The
    # extender's watch lags: it has delivered none of this yet.
    terminating = copy.deepcopy(old)
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    new = pod("w-0", jobs[0], 1)
    new["metadata"]["uid"] = "uid-new"
    api.put(new)
    assert ext.bind(bind_args(new))["Error"] == ""  # kube-scheduler is ahead of the watch
    assert ext.book.pods["ml/w-0"].uid == "uid-new"
    lagging = [("MODIFIED", terminating), ("DELETED", terminating)]
    stale = copy.deepcopy(old)  # an old pod's event with no deletionTimestamp yet
    for kind, obj in [("MODIFIED", stale), *lagging]:
        ext.observe(kind, obj)
        assert ext.book.pods["ml/w-0"].uid == "uid-new", kind
    c = pod("c", jobs[1], 1)
    api.put(c)
    assert "free slot" in ext.bind(bind_args(c))["Error"]
    api.deliver(ext)
    assert over_full(ext) == {} and ext.book.pods["ml/w-0"].assumed is None
    # A terminating pod the book does not hold is not booked.
    gone = bound("x", jobs[2], 1, "3")
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    ext.observe("MODIFIED", gone)
    assert "ml/x" not in ext.book.pods


def test_creation_times_say_which_pod_of_a_name_is_later(
    served: tuple[Any, list[str]],
) -> None:
    model, jobs = served
    ext, _ = make(model, ["n1"], max_per_gpu=2)
    early, late = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
    new = bound("w-0", jobs[0], 1, "1")
    new["metadata"].update(uid="uid-new", creationTimestamp=late)
    old = bound("w-0", jobs[0], 1, "2")
    old["metadata"].update(uid="uid-old", creationTimestamp=early)
    ext.restore([new])
    ext.observe("MODIFIED", old)  # confirmed booking, older event: left alone
    assert ext.book.pods["ml/w-0"].uid == "uid-new"
    newer = bound("w-0", jobs[0], 1, "3")
    newer["metadata"].update(uid="uid-newer", creationTimestamp="2026-01-03T00:00:00Z")
    ext.observe("ADDED", newer)
    assert ext.book.pods["ml/w-0"].uid == "uid-newer"
    assert ext.book.pods["ml/w-0"].gpus == ("3",)


# ------------------------------------------- 3: a late bind of an older pod, same name
def test_a_late_bind_of_an_older_pod_is_refused_and_touches_nothing(
    served: tuple[Any, list[str]],
) -> None:
    model, jobs = served
    new = pod("w-0", jobs[0], 1)
    new["metadata"]["uid"] = "uid-new"
    api = Cluster([new])
    ext, http = make(model, ["n1"], max_per_gpu=MAX)
    connected(ext, api)
    http.post("/filter", json={"Pod": new, "NodeNames": ["n1"]})
    assert http.post("/bind", json=bind_args(new)).json()["Error"] == ""
    annotation = api.pods["ml/w-0"]["metadata"]["annotations"][ANNOTATION_GPUS]
    assert api.patches[0]["metadata"]["uid"] == "uid-new"  # the patch's UID precondition
    old = pod("w-0", jobs[1], 2)
    old["metadata"]["uid"] = "uid-old"
    http.post("/filter", json={"Pod": old, "NodeNames": ["n1"]})  # remembered from filter
    r = http.post("/bind", json=bind_args(old)).json()
    assert "not the API server's pod of that name (UID uid-new)" in r["Error"]
    assert ext.book.pods["ml/w-0"].uid == "uid-new"
    assert api.pods["ml/w-0"]["metadata"]["annotations"][ANNOTATION_GPUS] == annotation
    assert len(api.patches) == 1
    # Not remembered either: the pod read from the API server is another one.
    ext._pending.clear()
    r = http.post("/bind", json=bind_args(old)).json()
    assert "is gone" in r["Error"] and ext.book.pods["ml/w-0"].uid == "uid-new"
    # The binder names the UID in the patch, so a patch aimed at another pod is refused.
    with pytest.raises(RuntimeError, match="immutable"):
        api.patch_namespaced_pod("w-0", "ml", {"metadata": {"uid": "uid-old",
                                                            "annotations": {}}})


def test_without_an_api_server_creation_times_decide_a_bind_under_a_taken_name(
    served: tuple[Any, list[str]],
) -> None:
    model, jobs = served
    held = bound("w-0", jobs[0], 1, "5")
    held["metadata"].update(uid="uid-b", creationTimestamp="2026-01-02T00:00:00Z")
    ext, http = make(model, ["n1"])
    KubeSync(FakeApi([held]), ext).restore()
    for uid, created, ok in (("uid-a", "2026-01-01T00:00:00Z", False),
                             ("uid-x", None, False), ("uid-c", "2026-01-03T00:00:00Z", True)):
        other = pod("w-0", jobs[1], 1)
        other["metadata"].update(uid=uid, creationTimestamp=created)
        http.post("/filter", json={"Pod": other, "NodeNames": ["n1"]})
        err = http.post("/bind", json=bind_args(other)).json()["Error"]
        assert (err == "") == ok, (uid, err)
    assert ext.book.pods["ml/w-0"].uid == "uid-c"


# ------------------------------------------------------------------ 4: over-full GPUs
def test_an_over_full_gpu_is_full_in_filter_prioritize_and_bind(
    served: tuple[Any, list[str]],
) -> None:
    model, jobs = served
    ext, http = make(model, ["n1"], max_per_gpu=1)
    # Two pods on GPU 0 (bound before a restart with a lower --max-per-gpu), one on a GPU id
    # the node's topology lacks.
    ext.restore([bound("a", jobs[0], 1, "0"), bound("b", jobs[1], 1, "0"),
                 bound("z", jobs[2], 1, "99")])
    c = pod("c", jobs[2], 1)
    f = http.post("/filter", json={"Pod": c, "NodeNames": ["n1"]}).json()
    assert f["NodeNames"] == ["n1"]
    scores = http.post("/prioritize", json={"Pod": c, "NodeNames": ["n1"]}).json()
    assert scores == [{"Host": "n1", "Score": 10}]  # scored, not neutral for an error
    big = pod("big", jobs[3], 8)
    f = http.post("/filter", json={"Pod": big, "NodeNames": ["n1"]}).json()
    assert f["NodeNames"] == [] and "7 of 8 GPUs" in f["FailedNodes"]["n1"]
    r = http.post("/bind", json=bind_args(c))
    assert r.status_code == 200 and r.json() == {"Error": ""}
    assert ext.book.pods["ml/c"].gpus != ("0",)
    seven = pod("seven", jobs[3], 6)
    http.post("/filter", json={"Pod": seven, "NodeNames": ["n1"]})
    r = http.post("/bind", json=bind_args(seven))
    assert r.status_code == 200 and r.json() == {"Error": ""}
    assert "0" not in ext.book.pods["ml/seven"].gpus and over_full(ext) == {("n1", "0"): 2}


# --------------------------------------------------- 5: a binder failure that did bind
def test_a_bind_whose_reply_is_lost_keeps_the_booking(served: tuple[Any, list[str]]) -> None:
    model, jobs = served
    a = pod("a", jobs[0], 1)
    api = Cluster([a])
    ext, _ = make(model, ["n1"], max_per_gpu=MAX)
    sync = connected(ext, api)
    real = api.create_namespaced_binding

    def lost_reply(ns: str, body: Any, **kw: Any) -> None:
        real(ns, body, **kw)  # the API server binds the pod ...
        raise TimeoutError("read timed out")  # ... but its reply is lost

    api.create_namespaced_binding = lost_reply  # type: ignore[method-assign]
    assert ext.bind(bind_args(a)) == {"Error": ""}  # read back: bound to n1
    assert "ml/a" in ext.book.pods
    # The watch delivered the binding before the binder gave up, and there is no reading
    # the pod back: the confirmed booking stays.
    b = pod("b", jobs[1], 1)
    api.put(b)
    ext.remember(b)
    ext.fetch_pod = None

    def seen_then_lost(ns: str, body: Any, **kw: Any) -> None:
        real(ns, body, **kw)
        api.deliver(ext)
        raise TimeoutError("read timed out")

    api.create_namespaced_binding = seen_then_lost  # type: ignore[method-assign]
    assert ext.bind(bind_args(b)) == {"Error": ""}
    assert ext.book.pods["ml/b"].assumed is None
    # A binding the API server refused: the booking goes.
    c = pod("c", jobs[2], 1)
    api.put(c)
    ext.fetch_pod = sync.read

    def refused(ns: str, body: Any, **kw: Any) -> None:
        raise RuntimeError("403 Forbidden")

    api.create_namespaced_binding = refused  # type: ignore[method-assign]
    assert "403 Forbidden" in ext.bind(bind_args(c))["Error"]
    assert "ml/c" not in ext.book.pods


def test_an_event_of_the_booked_pod_corrects_its_gpus(served: tuple[Any, list[str]]) -> None:
    model, jobs = served
    a = pod("a", jobs[0], 1)
    api = Cluster([a])
    ext, _ = make(model, ["n1"], max_per_gpu=2)
    connected(ext, api)
    assert ext.bind(bind_args(a))["Error"] == ""
    mine = ext.book.pods["ml/a"].gpus
    shown = "7" if mine != ("7",) else "6"
    event = copy.deepcopy(api.pods["ml/a"])
    event["metadata"]["annotations"][ANNOTATION_GPUS] = shown
    ext.observe("MODIFIED", event)
    assert ext.book.pods["ml/a"].gpus == (shown,) and ext.book.pods["ml/a"].assumed is None
    event["spec"]["nodeName"] = "n2"
    ext.observe("MODIFIED", event)
    assert ext.book.pods["ml/a"].node == "n2"


# ------------------------------------------------ 6: /state off the event loop
def test_state_waits_for_the_book_off_the_event_loop(
    served: tuple[Any, list[str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, _ = served
    ext, _ = make(model, ["n1"])
    entered = threading.Event()
    snapshot = ext.snapshot

    def announced() -> dict[str, Any]:
        entered.set()
        return snapshot()

    monkeypatch.setattr(ext, "snapshot", announced)
    states: list[int] = []
    healths: list[int] = []
    with TestClient(build_app(ext, health=lambda: None)) as http:  # one event loop
        with ext.book.lock:  # a verb holds the book
            state = threading.Thread(target=lambda: states.append(
                http.get("/state").status_code))
            state.start()
            assert entered.wait(30)  # /state waits for the book
            health = threading.Thread(target=lambda: healths.append(
                http.get("/healthz").status_code))
            health.start()
            health.join(30)
            answered = list(healths)
        state.join(30)
        health.join(30)
    assert answered == [200]  # /healthz answered while /state waited
    assert states == [200]


# -------------------------------------------------- 8: the prioritize deadline
class _Lock:
    """A lock that says when someone starts waiting for it."""

    def __init__(self) -> None:
        self.inner = threading.Lock()
        self.waiting = threading.Event()

    def __enter__(self) -> None:
        self.waiting.set()
        self.inner.acquire()

    def __exit__(self, *exc: object) -> None:
        self.inner.release()


def test_the_prioritize_deadline_runs_from_the_calls_arrival(
    served: tuple[Any, list[str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, jobs = served
    ext, _ = make(model, ["n1"], deadline_s=2.0)
    clock = Clock()
    monkeypatch.setattr(extender_module, "time", types.SimpleNamespace(monotonic=clock))
    lock = _Lock()
    ext.book.lock = lock  # type: ignore[assignment]
    out: list[list[dict[str, Any]]] = []
    lock.inner.acquire()  # another call holds the book ...
    t = threading.Thread(target=lambda: out.append(
        ext.prioritize({"Pod": pod("p", jobs[0], 1), "NodeNames": ["n1"]})))
    t.start()
    try:
        assert lock.waiting.wait(30)
        clock.now += 10  # ... for longer than the deadline
    finally:
        lock.inner.release()
    t.join(30)
    # The wait counted: neutral at once, not a second deadline's worth of scoring.
    assert out == [[{"Host": "n1", "Score": NEUTRAL_SCORE}]]
    assert NEUTRAL_SCORE != 10


class _Gate:
    """Holds the first ``place`` call of each thread it is armed for until released, and
    says when that call has started; other threads' calls (a bind's) pass."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real = extender_module.place
        self.armed: dict[int, tuple[threading.Event, threading.Event]] = {}
        monkeypatch.setattr(extender_module, "place", self)

    def arm(self) -> tuple[threading.Event, threading.Event]:
        """For the calling thread: (entered, release)."""
        events = (threading.Event(), threading.Event())
        self.armed[threading.get_ident()] = events
        return events

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        events = self.armed.pop(threading.get_ident(), None)
        if events is not None:
            events[0].set()
            assert events[1].wait(30)
        return self.real(*args, **kwargs)


def test_a_bind_completes_while_a_prioritize_is_scoring(
    served: tuple[Any, list[str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, jobs = served
    ext, _ = make(model, ["n1"], max_per_gpu=MAX, deadline_s=600)
    ext.restore(one_slot_left(jobs))
    a, b = pod("a", jobs[0], 1), pod("b", jobs[1], 1)
    ext.remember(a)
    ext.remember(b)
    gate = _Gate(monkeypatch)
    armed: list[tuple[threading.Event, threading.Event]] = []
    ready = threading.Event()
    out: list[list[dict[str, Any]]] = []

    def scorer() -> None:
        armed.append(gate.arm())
        ready.set()
        out.append(ext.prioritize({"Pod": pod("p", jobs[2], 1), "NodeNames": ["n1"]}))

    t = threading.Thread(target=scorer)
    t.start()
    assert ready.wait(30)
    entered, release = armed[0]
    try:
        assert entered.wait(30)  # scoring n1 (it has one free slot in its snapshot) ...
        assert not ext.book.lock.locked()  # ... without the book
        assert ext.bind(bind_args(a)) == {"Error": ""}  # so a bind goes through meanwhile
        # Binds re-check capacity under the book, whatever the scores said: n1 is full now.
        assert "free slot" in ext.bind(bind_args(b))["Error"]
        assert t.is_alive() and out == []  # the prioritize is still scoring
    finally:
        release.set()
        t.join(30)
    # Scored from its snapshot (a free slot on n1): advisory, not an error.
    assert len(out) == 1 and out[0][0]["Host"] == "n1" and out[0][0]["Score"] == 10
    assert over_full(ext) == {} and set(ext.book.pods) >= {"ml/a"} and "ml/b" not in ext.book.pods


def test_concurrent_prioritize_calls_score_at_once_each_within_its_deadline(
    served: tuple[Any, list[str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, jobs = served
    ext, _ = make(model, ["n1", "n2"], deadline_s=2.0)
    clock = Clock()
    monkeypatch.setattr(extender_module, "time", types.SimpleNamespace(monotonic=clock))
    gate = _Gate(monkeypatch)
    calls: dict[str, tuple[threading.Event, threading.Event]] = {}
    ready = {k: threading.Event() for k in "AB"}
    out: dict[str, list[dict[str, Any]]] = {}
    took: dict[str, float] = {}

    def call(k: str) -> None:
        calls[k] = gate.arm()
        ready[k].set()
        arrived = clock()
        out[k] = ext.prioritize({"Pod": pod(f"p{k}", jobs[0], 1), "NodeNames": ["n1", "n2"]})
        took[k] = clock() - arrived

    threads = {k: threading.Thread(target=call, args=(k,)) for k in "AB"}
    try:
        threads["A"].start()
        assert ready["A"].wait(30) and calls["A"][0].wait(30)  # A scores n1 ...
        threads["B"].start()
        assert ready["B"].wait(30)
        assert calls["B"][0].wait(30)  # ... and B scores n1 too, not queued behind A
        clock.now += 2.5  # both spend longer than the deadline on n1
    finally:
        for k in calls:
            calls[k][1].set()
        for t in threads.values():
            t.join(30)
    for k in "AB":
        # n1 scored, n2 left neutral by the deadline: each call took one deadline (plus the
        # node under way), not two.
        assert out[k] == [{"Host": "n1", "Score": 10},
                          {"Host": "n2", "Score": NEUTRAL_SCORE}], k
        assert took[k] == pytest.approx(2.5), k
    # The shared speed cache took both calls' answers, consistently.
    cache = ext._cache
    assert len(cache.vec) == len(cache.meas) == len(cache.mean) > 0
    rows = list(cache.memo.values()) + list(cache.gang_memo.values())
    assert sorted(rows) == list(range(len(cache.vec)))
