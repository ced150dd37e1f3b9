"""The extender replayed as kube-scheduler drives it: real client models, a fake scheduler
applying replies as kube-scheduler's HTTP extender does, a fake API server."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("starlette")
kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from interplace.errors import InputError  # noqa: E402
from interplace.model import InterferenceModel  # noqa: E402
from interplace.placement import place  # noqa: E402
from interplace.serve import (  # noqa: E402
    ANNOTATION_GPUS,
    KEY_JOB_TYPE,
    NEUTRAL_SCORE,
    Extender,
    KubeSync,
    build_app,
    parse_pod,
)
from interplace.serve._extender import TIE, node_score  # noqa: E402
from interplace.topology import builtin  # noqa: E402

DEPLOY = Path(__file__).parents[2] / "deploy" / "kubernetes"
WEIGHT = 5
API = client.ApiClient()


def pod(name: str, job: str | None, gpus: int, ns: str = "ml") -> dict[str, Any]:
    labels = {KEY_JOB_TYPE: job} if job else {}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    p = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace=ns, uid=f"uid-{name}",
                                     labels=labels),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="main", image="train:1", resources=client.V1ResourceRequirements(
                limits=limits))]),
    )
    out: dict[str, Any] = API.sanitize_for_serialization(p)
    return out


def bound(name: str, job: str | None, gpus: int, booked: str, **annotations: str) -> dict[str, Any]:
    """A pod already running on node n1 on the GPUs ``booked`` (as ``bind`` records them)."""
    out = pod(name, job, gpus)
    out["spec"]["nodeName"] = "n1"
    out["metadata"]["annotations"] = {ANNOTATION_GPUS: booked, **annotations}
    return out


def node(name: str) -> dict[str, Any]:
    n = client.V1Node(metadata=client.V1ObjectMeta(name=name))
    out: dict[str, Any] = API.sanitize_for_serialization(n)
    return out


class FakeScheduler:
    """Applies extender replies as kube-scheduler's HTTPExtender does (pkg/scheduler/
    extender.go, schedule_one.go): status 200 or the call fails; with nodeCacheCapable the
    filter reply's NodeNames, else its Nodes; a name not sent is an error; a prioritize score
    counts score * weight * (MaxNodeScore / MaxExtenderPriority) = score * weight * 10."""

    def __init__(self, http: TestClient, node_cache_capable: bool = True) -> None:
        self.http = http
        self.cache = node_cache_capable

    def args(self, the_pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
        if self.cache:
            return {"Pod": the_pod, "Nodes": None, "NodeNames": nodes}
        return {"Pod": the_pod, "Nodes": {"items": [node(n) for n in nodes]},
                "NodeNames": None}

    def filter(self, the_pod: dict[str, Any], nodes: list[str]) -> tuple[list[str], dict]:
        r = self.http.post("/filter", json=self.args(the_pod, nodes))
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["Error"] == ""
        if self.cache:
            kept = body["NodeNames"]
        else:
            kept = [n["metadata"]["name"] for n in body["Nodes"]["items"]]
        assert set(kept) <= set(nodes)  # "claims a filtered node which is not found"
        return kept, {**body["FailedNodes"], **body["FailedAndUnresolvableNodes"]}

    def prioritize(self, the_pod: dict[str, Any], nodes: list[str]) -> dict[str, int]:
        r = self.http.post("/prioritize", json=self.args(the_pod, nodes))
        assert r.status_code == 200, r.text
        scores = {}
        for hp in r.json():
            assert set(hp) == {"Host", "Score"} and isinstance(hp["Score"], int)
            assert 0 <= hp["Score"] <= 10 and hp["Host"] in nodes
            scores[hp["Host"]] = hp["Score"] * WEIGHT * 10
        return scores

    def schedule(self, the_pod: dict[str, Any], nodes: list[str]) -> str | None:
        kept, _ = self.filter(the_pod, nodes)
        if not kept:
            return None
        scores = self.prioritize(the_pod, kept)
        best = max(kept, key=lambda n: (scores[n], -kept.index(n)))
        meta = the_pod["metadata"]
        r = self.http.post("/bind", json={"PodName": meta["name"],
                                          "PodNamespace": meta["namespace"],
                                          "PodUID": meta["uid"], "Node": best})
        assert r.status_code == 200 and r.json()["Error"] == "", r.text
        return best


def make(model: InterferenceModel, nodes: list[str], **kw: Any) -> tuple[Extender, TestClient]:
    topo = builtin("dgx-a100")
    ext = Extender(model, lambda n: topo if n in nodes else None, **kw)
    return ext, TestClient(build_app(ext))


@pytest.mark.parametrize("cache", [True, False])
def test_filter_prioritize_bind_round(served: tuple[Any, list[str]], cache: bool) -> None:
    model, jobs = served
    nodes = ["n1", "n2", "n3"]
    ext, http = make(model, nodes)
    sched = FakeScheduler(http, cache)
    for k in range(20):
        the_pod = pod(f"p{k}", jobs[k % 4], 1)
        kept, _ = sched.filter(the_pod, nodes)
        parsed = parse_pod(the_pod)
        job = ext._job(parsed)
        assert job is not None
        gains = {n: ext._best(parsed, job, n) for n in kept}
        for n in kept:  # the kept gains and node objectives answer as placements from scratch
            topo, state, reserved, _ = ext._build_view(n)
            fresh = [place(topo, model, new, state, policy=ext.policy, reserved=reserved,
                           max_per_gpu=ext.max_per_gpu, seed=ext.seed,
                           num_samples=ext._cache.num_samples) for new in ([], [job])]
            g = gains[n]
            assert g is not None
            assert g[0] == pytest.approx(fresh[1].objective - fresh[0].objective, abs=1e-9)
        placed = sched.schedule(the_pod, nodes)
        assert placed in nodes
        # The scheduler, adding up integer scores, lands each pod where the model predicts
        # the most gain (within the scores' tie band): the scores rank nodes as the model does.
        top = max(g[0] for g in gains.values() if g is not None)
        got = gains[placed]
        assert got is not None and got[0] >= top * (1 - TIE) - 1e-12
    state = http.get("/state").json()
    per_gpu: dict[tuple[str, str], int] = {}
    for n, pods in state["nodes"].items():
        for gpus in pods.values():
            for g in gpus.split(","):
                per_gpu[(n, g)] = per_gpu.get((n, g), 0) + 1
    assert sum(per_gpu.values()) == 20 and max(per_gpu.values()) <= 2


def test_a_node_that_costs_anything_scores_below_one_that_costs_nothing() -> None:
    # Scores are relative to the best node's gain (kube-scheduler normalises its own plugins'
    # scores the same way), so a pod's own speed above 1 (a record measured low) cannot push
    # every node to the top score, and any measurable cost drops a node below it.
    assert node_score(1.04, 1.04) == 10 and node_score(1.04 * (1 - TIE), 1.04) == 10
    assert node_score(1.03, 1.04) == 9 and node_score(0.52, 1.04) == 5
    assert node_score(-0.2, 1.04) == 0
    # Where every node costs more than the pod gains, the scores still rank them, from the
    # least costly to the most costly in the call (they all scored 0, leaving the choice to
    # the scheduler's other plugins).
    assert node_score(-0.25, -0.25, -0.75) == 10 and node_score(-0.75, -0.25, -0.75) == 0
    assert node_score(-0.5, -0.25, -0.75) == 5 and node_score(-0.3, -0.3, -0.3) == 10


def test_filter_reasons_and_unknown_nodes(served: tuple[Any, list[str]]) -> None:
    model, jobs = served
    _ext, http = make(model, ["n1"], max_per_gpu=1)
    sched = FakeScheduler(http)
    kept, failed = sched.filter(pod("big", jobs[0], 9), ["n1", "ghost"])
    assert kept == [] and "needs 9 GPUs" in failed["n1"] and "no topology" in failed["ghost"]
    for k in range(8):
        assert sched.schedule(pod(f"a{k}", jobs[0], 1), ["n1"]) == "n1"
    kept, failed = sched.filter(pod("late", jobs[1], 1), ["n1"])
    assert kept == [] and "max-per-gpu=1" in failed["n1"]


def test_unlabelled_and_unknown_pods_are_neutral(served: tuple[Any, list[str]]) -> None:
    model, _ = served
    _ext, http = make(model, ["n1", "n2"])
    sched = FakeScheduler(http)
    for the_pod in (pod("plain", None, 1), pod("new", "never-seen", 1)):
        kept, _ = sched.filter(the_pod, ["n1", "n2"])
        assert kept == ["n1", "n2"]  # never refused for lacking a label
        assert set(sched.prioritize(the_pod, kept).values()) == {NEUTRAL_SCORE * WEIGHT * 10}
        assert sched.schedule(the_pod, kept) in ("n1", "n2")
    assert len(http.get("/state").json()["nodes"]) >= 1


def test_bad_requests(served: tuple[Any, list[str]]) -> None:
    model, jobs = served
    _ext, http = make(model, ["n1"])
    assert http.post("/filter", content=b"{not json").status_code == 400
    r = http.post("/prioritize", json={"Pod": {"metadata": {}}, "NodeNames": ["n1"]})
    assert r.status_code == 400 and "metadata.name" in r.json()["Error"]
    assert http.post("/nope", json={}).status_code == 404
    big = b"[" + b"1," * (3 * 1024 * 1024) + b"1]"
    assert http.post("/filter", content=big).status_code == 413
    r = http.post("/bind", json={"PodName": "x", "PodNamespace": "ml", "Node": "n1"})
    assert r.status_code == 200 and "no filter or prioritize call named it" in r.json()["Error"]
    r = http.post("/filter", json={"Pod": pod("p", jobs[0], 1)})
    assert r.status_code == 400 and "neither Nodes nor NodeNames" in r.json()["Error"]


def test_preempt_is_no_op_safe(served: tuple[Any, list[str]]) -> None:
    model, _ = served
    _, http = make(model, ["n1"])
    args = {"Pod": pod("p", None, 1), "NodeNameToVictims": {"n1": {
        "Pods": [pod("v", None, 1)], "NumPDBViolations": 0}}, "NodeNameToMetaVictims": None}
    r = http.post("/preempt", json=args)
    assert r.json() == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-v"}],
                                                          "NumPDBViolations": 0}}}


def test_concurrent_binds_never_double_book(served: tuple[Any, list[str]]) -> None:
    model, jobs = served
    ext, http = make(model, ["n1"], max_per_gpu=1)
    pods = [pod(f"c{k}", jobs[k % 4], 1) for k in range(16)]
    for p in pods:
        assert http.post("/filter", json={"Pod": p, "NodeNames": ["n1"]}).status_code == 200
    errors: list[str] = []

    def bind(p: dict[str, Any]) -> None:
        m = p["metadata"]
        r = http.post("/bind", json={"PodName": m["name"], "PodNamespace": m["namespace"],
                                     "PodUID": m["uid"], "Node": "n1"})
        errors.append(r.json()["Error"])

    threads = [threading.Thread(target=bind, args=(p,)) for p in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(e == "" for e in errors) == 8  # 8 GPUs, one pod each
    state = ext.snapshot()["nodes"]["n1"]
    gpus = [g for v in state.values() for g in v.split(",")]
    assert sorted(gpus) == sorted(set(gpus)) and len(gpus) == 8


class Reply:
    """An unread HTTP reply (``_preload_content=False``): its connection goes back to the
    pool only once it is read and released."""

    def __init__(self) -> None:
        self.released = False

    def read(self) -> bytes:
        return b"{}"

    def release_conn(self) -> None:
        self.released = True


class FakeApi:
    """The CoreV1Api calls KubeSync makes, recorded."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.patches: list[tuple[str, str, dict]] = []
        self.bindings: list[Any] = []
        self.replies: list[Reply] = []
        self.fail = False

    def list_pod_for_all_namespaces(self, **_: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "7"}, "items": self.pods}

    def patch_namespaced_pod(self, name: str, ns: str, body: dict) -> None:
        self.patches.append((name, ns, body))

    def create_namespaced_binding(self, ns: str, body: Any, **kw: Any) -> Reply:
        if self.fail:
            raise RuntimeError("apiserver said no")
        assert kw == {"_preload_content": False}
        self.bindings.append(body)
        self.replies.append(Reply())
        return self.replies[-1]

    def read_namespaced_pod(self, name: str, ns: str) -> dict[str, Any]:
        return next(p for p in self.pods if p["metadata"]["name"] == name)


def test_restart_rebuilds_from_annotations_and_binds_through_api(
    served: tuple[Any, list[str]],
) -> None:
    model, jobs = served
    running = bound("old", jobs[0], 2, "0,1")
    running["status"] = {"phase": "Running"}
    done = bound("done", jobs[1], 1, "2")
    done["status"] = {"phase": "Succeeded"}
    fresh = pod("fresh", jobs[2], 1)
    api = FakeApi([running, done, fresh])
    ext, http = make(model, ["n1"], max_per_gpu=1)
    sync = KubeSync(api, ext)
    ext.binder, ext.fetch_pod = sync.bind, sync.read
    assert sync.restore() == "7"
    assert ext.snapshot()["nodes"] == {"n1": {"ml/old": "0,1"}}
    # A bind the service saw no filter for: it reads the pod from the API server.
    r = http.post("/bind", json={"PodName": "fresh", "PodNamespace": "ml", "Node": "n1"})
    assert r.json()["Error"] == ""
    name, ns, body = api.patches[0]
    chosen = body["metadata"]["annotations"][ANNOTATION_GPUS]
    assert (name, ns) == ("fresh", "ml") and chosen not in ("0", "1")
    assert api.bindings[0].target.name == "n1" and api.bindings[0].metadata.name == "fresh"
    assert api.replies[0].released  # its connection back in the pool (each bind opened one)
    # A failed API bind books nothing.
    api.fail = True
    other = pod("other", jobs[3], 1)
    api.pods.append(other)
    r = http.post("/bind", json={"PodName": "other", "PodNamespace": "ml", "Node": "n1"})
    assert "apiserver said no" in r.json()["Error"]
    assert "ml/other" not in ext.snapshot()["nodes"]["n1"]
    # Watch events: a deletion frees the GPUs.
    ext.observe("DELETED", running)
    assert "ml/old" not in ext.snapshot()["nodes"]["n1"]


def test_manifests_match_the_client_models() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "extender.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment",
                          "Service"}

    import json

    def model_of(doc: dict, kind: str) -> Any:
        # Through the client's own deserialiser, as an API server reply would go: unknown
        # or mistyped fields fail here.
        return API.deserialize(json.dumps(doc), kind, "application/json")

    dep = model_of(kinds["Deployment"], "V1Deployment")
    container = dep.spec.template.spec.containers[0]
    assert container.args[0] == "serve" and dep.spec.template.spec.service_account_name == \
        "interplace-extender"
    role = model_of(kinds["ClusterRole"], "V1ClusterRole")
    granted = {(r.resources[0] if len(r.resources) == 1 else tuple(r.resources), v)
               for r in role.rules for v in r.verbs}
    # What KubeSync calls: list/watch/get/patch pods, create bindings.
    for verb in ("get", "list", "watch", "patch"):
        assert ("pods", verb) in granted
    assert any(isinstance(r, tuple) and "pods/binding" in r and v == "create"
               for r, v in granted)
    # The book lives in the process: one replica, and a rollout stops the old one before it
    # starts the new (two books side by side would each hand out the same GPU).
    assert dep.spec.replicas == 1 and dep.spec.strategy.type == "Recreate"
    svc = model_of(kinds["Service"], "V1Service")
    assert svc.spec.ports[0].port == 8888
    cfg = yaml.safe_load((DEPLOY / "scheduler-config.yaml").read_text())
    ext = cfg["extenders"][0]
    assert ext["urlPrefix"].endswith(":8888") and ext["filterVerb"] == "filter"
    assert ext["prioritizeVerb"] == "prioritize" and ext["bindVerb"] == "bind"
    # interplace binds: an ignorable binder's refusals would be overridden (README).
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is False
    assert ext["managedResources"][0]["name"] == "nvidia.com/gpu"


def test_new_job_type_with_counters_goes_through_cold_start(
    served: tuple[Any, list[str]],
) -> None:
    from interplace.serve import KEY_COUNTERS

    model, jobs = served
    _, http = make(model, ["n1", "n2"])
    sched = FakeScheduler(http)
    # n1 already runs a job on every GPU; n2 is idle: a heavy newcomer belongs on n2.
    for k in range(8):
        busy = pod(f"b{k}", jobs[k % 4], 1)
        http.post("/filter", json={"Pod": busy, "NodeNames": ["n1"]})
        assert http.post("/bind", json={"PodName": f"b{k}", "PodNamespace": "ml",
                                        "Node": "n1"}).json()["Error"] == ""
    new = pod("new", "brand-new-net", 1)
    new["metadata"]["annotations"] = {KEY_COUNTERS: "gpu_util_pct=90,mem_util_pct=70"}
    scores = sched.prioritize(new, ["n1", "n2"])
    assert scores["n2"] > scores["n1"] and scores["n2"] != NEUTRAL_SCORE * WEIGHT * 10
    assert sched.schedule(new, ["n1", "n2"]) == "n2"
    bad = pod("bad", "other-net", 1)
    bad["metadata"]["annotations"] = {KEY_COUNTERS: "gpu_util_pct"}
    kept, failed = sched.filter(bad, ["n1", "n2"])
    assert kept == [] and all("metric=number" in why for why in failed.values())
    # How many samples the readings are means of travels with them to the cold-start path.
    from interplace.serve import KEY_COUNTER_SAMPLES, parse_pod

    weighed = pod("weighed", "third-new-net", 1)
    weighed["metadata"]["annotations"] = {KEY_COUNTERS: "gpu_util_pct=90",
                                          KEY_COUNTER_SAMPLES: "60"}
    assert parse_pod(weighed).counter_samples == 60
    assert sched.schedule(weighed, ["n1", "n2"]) == "n2"
    weighed["metadata"]["annotations"][KEY_COUNTER_SAMPLES] = "0"
    r = http.post("/filter", json={"Pod": weighed, "NodeNames": ["n1"]})
    assert r.status_code == 200 and r.json()["NodeNames"] == []
    why = r.json()["FailedAndUnresolvableNodes"]["n1"]
    assert why.startswith("pod ml/weighed: ") and "counter-samples must be a whole number" in why


def test_gpus_of_init_containers_count_as_kube_scheduler_counts_them(
    served: tuple[Any, list[str]],
) -> None:
    # kube-scheduler sends a pod whose only GPUs are an init container's (its managedResources
    # check reads init containers too): the extender must not take it for a GPU-less pod.
    def gpus(n: int) -> client.V1ResourceRequirements:
        return client.V1ResourceRequirements(limits={"nvidia.com/gpu": str(n)})

    def with_inits(*inits: client.V1Container, main: int = 0) -> dict[str, Any]:
        p = client.V1Pod(
            metadata=client.V1ObjectMeta(name="i", namespace="ml", uid="uid-i"),
            spec=client.V1PodSpec(
                init_containers=list(inits),
                containers=[client.V1Container(name="main", image="t:1",
                                               resources=gpus(main))]),
        )
        out: dict[str, Any] = API.sanitize_for_serialization(p)
        return out

    assert parse_pod(with_inits(client.V1Container(name="a", image="t:1",
                                                   resources=gpus(2)))).gpus == 2
    # One at a time, before the containers: the largest need counts, not the sum.
    both = with_inits(client.V1Container(name="a", image="t:1", resources=gpus(3)),
                      client.V1Container(name="b", image="t:1", resources=gpus(2)), main=1)
    assert parse_pod(both).gpus == 3
    # A sidecar (restartPolicy Always) keeps running beside what comes after it.
    sidecar = with_inits(
        client.V1Container(name="s", image="t:1", resources=gpus(1), restart_policy="Always"),
        client.V1Container(name="a", image="t:1", resources=gpus(2)), main=2)
    assert parse_pod(sidecar).gpus == 3
    model, _ = served
    _ext, http = make(model, ["n1"])
    sched = FakeScheduler(http)
    huge = with_inits(client.V1Container(name="a", image="t:1", resources=gpus(9)))
    kept, failed = sched.filter(huge, ["n1"])
    assert kept == [] and "needs 9 GPUs" in failed["n1"]


def test_a_pod_with_malformed_annotations_is_refused_with_its_reason_and_still_booked(
    served: tuple[Any, list[str]],
) -> None:
    # One pod's bad annotation must not stop the service: it is refused where it asks to be
    # placed (the reason shows on the pod), and counted where it runs (it holds its GPUs).
    model, jobs = served
    running = bound("odd", jobs[0], 1, "3", **{"interplace.io/comm-share": "high"})
    unreadable = {"metadata": {"namespace": "ml"}, "spec": {"nodeName": "n1"}}
    plain = bound("plain", jobs[1], 1, "4")
    ext, http = make(model, ["n1"], max_per_gpu=1)
    sync = KubeSync(FakeApi([running, unreadable, plain]), ext)
    assert sync.restore() == "7"
    assert ext.snapshot()["nodes"] == {"n1": {"ml/odd": "3", "ml/plain": "4"}}
    assert ext.book.pods["ml/odd"].job is None and ext.book.pods["ml/plain"].job is not None
    # Both booked GPUs are full under max-per-gpu=1, whatever the odd pod's annotations say.
    assert ext._fits(parse_pod(pod("x", jobs[2], 6)), "n1") is None
    assert "6 of 8 GPUs" in (ext._fits(parse_pod(pod("y", jobs[2], 7)), "n1") or "")
    ext.observe("MODIFIED", running)  # no raise
    with pytest.raises(InputError, match=r"metadata\.name"):
        ext.observe("ADDED", unreadable)
    new = pod("new", jobs[2], 1)
    new["metadata"]["annotations"] = {"interplace.io/comm-share": "1.5"}
    r = http.post("/filter", json={"Pod": new, "Nodes": None, "NodeNames": ["n1"]})
    assert r.status_code == 200 and r.json()["NodeNames"] == []
    assert "comm-share must be in [0, 1)" in r.json()["FailedAndUnresolvableNodes"]["n1"]
    assert set(FakeScheduler(http).prioritize(new, ["n1"]).values()) == {
        NEUTRAL_SCORE * WEIGHT * 10}
    r = http.post("/bind", json={"PodName": "new", "PodNamespace": "ml", "Node": "n1"})
    assert "comm-share must be in [0, 1)" in r.json()["Error"]
    assert "ml/new" not in ext.snapshot()["nodes"]["n1"]


def test_a_pod_recreated_under_its_name_replaces_the_old_booking(
    served: tuple[Any, list[str]],
) -> None:
    # A StatefulSet recreates its pod under the same name with a new UID. The old pod's
    # booking must not block the new one's bind, and a late deletion event of the old pod
    # must not free the new one's GPUs.
    # Without an API server to ask which pod of that name is live, the creation times tell
    # (tests/serve/test_races.py: with one).
    model, jobs = served
    old = bound("w-0", jobs[0], 1, "5")
    old["metadata"]["uid"] = "uid-old"
    old["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    ext, http = make(model, ["n1"])
    KubeSync(FakeApi([old]), ext).restore()
    new = pod("w-0", jobs[0], 1)
    new["metadata"]["uid"] = "uid-new"
    new["metadata"]["creationTimestamp"] = "2026-01-02T00:00:00Z"
    http.post("/filter", json={"Pod": new, "Nodes": None, "NodeNames": ["n1"]})
    bind = {"PodName": "w-0", "PodNamespace": "ml", "PodUID": "uid-new", "Node": "n1"}
    assert http.post("/bind", json=bind).json()["Error"] == ""
    assert ext.book.pods["ml/w-0"].uid == "uid-new"
    ext.observe("DELETED", old)
    assert "ml/w-0" in ext.snapshot()["nodes"]["n1"]
    # The same pod bound twice is still refused.
    http.post("/filter", json={"Pod": new, "Nodes": None, "NodeNames": ["n1"]})
    assert "already bound" in http.post("/bind", json=bind).json()["Error"]
    booked = {**new, "spec": {**new["spec"], "nodeName": "n1"}}
    ext.observe("DELETED", booked)
    assert "ml/w-0" not in ext.snapshot().get("nodes", {}).get("n1", {})


def test_the_watch_outlives_bad_events_and_failed_lists_and_healthz_tells(
    served: tuple[Any, list[str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, jobs = served
    ext, _ = make(model, ["n1"])
    api = FakeApi([])
    sync = KubeSync(api, ext, retry_s=0.001, max_retry_s=0.002)
    http = TestClient(build_app(ext, health=sync.problem))
    assert http.get("/healthz").json() == {"ok": True}
    # A list that fails twice is retried until it succeeds; meanwhile problem() says why.
    calls: list[str | None] = []
    listing = api.list_pod_for_all_namespaces

    def flaky(**kw: Any) -> dict[str, Any]:
        calls.append(sync.problem())
        if len(calls) <= 2:
            raise ConnectionError("apiserver unreachable")
        return listing(**kw)

    monkeypatch.setattr(api, "list_pod_for_all_namespaces", flaky)
    assert sync.relist() == "7" and len(calls) == 3
    assert calls[0] is None and "apiserver unreachable" in (calls[2] or "")
    assert sync.problem() is None
    sync._failing = "listing pods has failed for 40 s"
    r = http.get("/healthz")
    assert r.status_code == 503 and r.json() == {"ok": False, "Error": sync._failing}
    sync._failing = None
    # An event the book cannot read is left out; the watch goes on to the next one, and
    # when a watch ends it lists again and watches on.
    placed = bound("p", jobs[0], 1, "2")
    streams: list[str | None] = []
    books: list[Any] = []

    class FakeWatch:
        def stream(self, func: Any, **kw: Any) -> Any:
            streams.append(kw.get("resource_version"))
            if len(streams) == 1:
                yield {"type": "ADDED", "object": {"metadata": {"resourceVersion": "8"}}}
                yield {"type": "ADDED", "object": {**placed, "metadata": {
                    **placed["metadata"], "resourceVersion": "9"}}}
                books.append(ext.snapshot()["nodes"])
                raise ConnectionError("watch dropped")
            sync.stop()
            return

        def stop(self) -> None:
            pass

    monkeypatch.setattr(kubernetes.watch, "Watch", FakeWatch)
    sync.watch("7")
    assert books == [{"n1": {"ml/p": "2"}}]  # the event after the unreadable one applied
    assert streams == ["7", "7"]  # the second watch starts from the fresh list's version
    assert ext.snapshot()["nodes"] == {}  # the fresh list (no pods) replaced the book
    # A watch thread that has ended makes the service unhealthy.
    sync2 = KubeSync(api, ext)
    sync2._thread = threading.Thread(target=lambda: None)
    sync2._thread.start()
    sync2._thread.join()
    assert "stopped" in (sync2.problem() or "")


def test_an_empty_node_list_is_a_list(served: tuple[Any, list[str]]) -> None:
    # Go serialises a NodeList without items as "items": null.
    model, jobs = served
    _, http = make(model, ["n1"])
    r = http.post("/filter", json={"Pod": pod("p", jobs[0], 1),
                                   "Nodes": {"metadata": {}, "items": None}, "NodeNames": None})
    assert r.status_code == 200 and r.json()["Nodes"]["items"] == []


def _full_node(
    served: tuple[Any, list[str]],
) -> tuple[TestClient, list[dict[str, Any]], list[str]]:
    """One node, n1, every GPU taken by a 1-GPU pod under max-per-gpu=1: the client, the
    eight pods and the job types."""
    model, jobs = served
    _, http = make(model, ["n1"], max_per_gpu=1)
    sched = FakeScheduler(http)
    full = [pod(f"f{k}", jobs[k % 4], 1) for k in range(8)]
    for p in full:
        assert sched.schedule(p, ["n1"]) == "n1"
    return http, full, jobs


def test_preempt_matches_full_victims_without_a_uid(served: tuple[Any, list[str]]) -> None:
    # Victims sent in full (NodeNameToVictims) without metadata.uid are matched by namespace
    # and name: two 1-GPU pods evicted free two GPUs for a 2-GPU pod (an audit found no test
    # that sent full victims without UIDs, so the name match could go unnoticed).
    http, full, jobs = _full_node(served)
    victims = [copy.deepcopy(full[2]), copy.deepcopy(full[3])]
    for v in victims:
        del v["metadata"]["uid"]
    sent = {"Pod": pod("big", jobs[0], 2), "NodeNameToMetaVictims": None,
            "NodeNameToVictims": {"n1": {"Pods": victims, "NumPDBViolations": 0}}}
    r = http.post("/preempt", json=sent)
    assert r.status_code == 200, r.text
    assert list(r.json()["NodeNameToMetaVictims"]) == ["n1"]
    # One victim frees one GPU: not enough, the node is dropped.
    sent["NodeNameToVictims"] = {"n1": {"Pods": victims[:1], "NumPDBViolations": 0}}
    r = http.post("/preempt", json=sent)
    assert r.status_code == 200, r.text
    assert list(r.json()["NodeNameToMetaVictims"]) == []


def test_preempt_keeps_the_nodes_whose_victims_free_enough_slots(
    served: tuple[Any, list[str]],
) -> None:
    # kube-scheduler counts a node's GPUs, not the slots on each: with every GPU full under
    # max-per-gpu=1, evicting one pod cannot make room for a 2-GPU pod.
    http, full, jobs = _full_node(served)
    big = pod("big", jobs[0], 2)
    cpu_only = pod("cpu", None, 0)

    def meta(*victims: dict[str, Any]) -> dict[str, Any]:
        return {"Pods": [{"UID": v["metadata"]["uid"]} for v in victims],
                "NumPDBViolations": 0}

    def offered(victims: dict[str, Any], full_pods: bool = False) -> dict[str, Any]:
        if full_pods:
            sent = {"Pod": big, "NodeNameToVictims": {n: {"Pods": list(v), "NumPDBViolations": 0}
                                                      for n, v in victims.items()},
                    "NodeNameToMetaVictims": None}
        else:
            sent = {"Pod": big, "NodeNameToVictims": None,
                    "NodeNameToMetaVictims": {n: meta(*v) for n, v in victims.items()}}
        r = http.post("/preempt", json=sent)
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()["NodeNameToMetaVictims"]
        return out

    assert offered({"n1": [full[0]]}) == {}
    assert offered({"n1": [full[0], cpu_only]}) == {}  # a pod the book does not hold
    assert offered({"n1": [full[0], full[1]]}) == {"n1": meta(full[0], full[1])}
    assert offered({"n1": [full[2], full[3]]}, full_pods=True) == {"n1": meta(full[2], full[3])}
    assert offered({"n1": [full[2]]}, full_pods=True) == {}


@pytest.mark.parametrize(
    ("annotation", "reason"),
    [
        # What placement's Job refuses passed the pod's reading: filter passed it and every
        # bind failed (400); on a running pod the service could not start (its list failed).
        ({"interplace.io/counters": "gpu_util_pct=nan"}, "must be a finite number >= 0"),
        ({"interplace.io/counters": "gpu_util_pct=-1"}, "must be a finite number >= 0"),
        ({"interplace.io/counters": "gpu_util_pct=1e400"}, "must be a finite number >= 0"),
        ({"interplace.io/counters": "foo=3"}, "unknown counter 'foo'"),
        ({"interplace.io/counters": "gpu_util_pct=1,gpu_util_pct=2"}, "given twice"),
        ({"interplace.io/family": "a\tb"}, "interplace.io/family: family 'a\\tb' holds a"),
    ],
)
def test_annotations_placement_refuses_are_the_pods_problem(
    served: tuple[Any, list[str]], annotation: dict[str, str], reason: str
) -> None:
    model, jobs = served
    running = bound("odd", "newtype", 1, "3", **annotation)
    ext, http = make(model, ["n1"])
    sync = KubeSync(FakeApi([running]), ext)
    assert sync.restore() == "7"  # the service starts, the pod booked where it runs, unseen
    assert ext.book.pods["ml/odd"].job is None
    ext.observe("MODIFIED", running)
    assert ext.snapshot()["nodes"] == {"n1": {"ml/odd": "3"}}
    new = pod("new", "newtype", 1)
    new["metadata"]["annotations"] = annotation
    r = http.post("/filter", json={"Pod": new, "Nodes": None, "NodeNames": ["n1"]})
    assert r.status_code == 200 and r.json()["NodeNames"] == []
    assert reason in r.json()["FailedAndUnresolvableNodes"]["n1"]
    plain = pod("plain", jobs[0], 1)  # and the node still takes other pods
    r = http.post("/filter", json={"Pod": plain, "Nodes": None, "NodeNames": ["n1"]})
    assert r.json()["NodeNames"] == ["n1"]
    r = http.post("/bind", json={"PodName": "plain", "PodNamespace": "ml", "Node": "n1"})
    assert r.json()["Error"] == ""


@pytest.mark.parametrize(("gpus", "booked", "held"), [(1, "0,1", 2), (2, "0", 1), (2, "0,0", 1)])
def test_a_running_pod_on_other_gpus_than_it_asks_for_is_reserved_not_an_error(
    served: tuple[Any, list[str]], gpus: int, booked: str, held: int
) -> None:
    # Its booking made the node's state unbuildable (placement refuses a job on a GPU count
    # it does not ask for): every filter naming the node answered 400, every bind too.
    model, jobs = served
    ext, http = make(model, ["n1", "n2"], max_per_gpu=1)
    ext.restore([bound("odd", jobs[0], gpus, booked)])
    _topo, state, reserved, _ = ext._build_view("n1")
    assert not state.running and sum(reserved.values()) == held  # each GPU it holds, once
    new = pod("new", jobs[1], 1)
    r = http.post("/filter", json={"Pod": new, "Nodes": None, "NodeNames": ["n1", "n2"]})
    assert r.status_code == 200 and r.json()["NodeNames"] == ["n1", "n2"]
    r = http.post("/bind", json={"PodName": "new", "PodNamespace": "ml", "Node": "n1"})
    assert r.json()["Error"] == ""
    assert ext.snapshot()["nodes"]["n1"]["ml/new"] not in booked.split(",")


def test_a_node_whose_state_cannot_be_built_fails_alone(served: tuple[Any, list[str]]) -> None:
    model, jobs = served
    topo = builtin("dgx-a100")

    def topology_for(n: str) -> Any:
        if n == "broken":
            raise RuntimeError("topology store unreachable")
        return topo

    ext = Extender(model, topology_for)
    http = TestClient(build_app(ext))
    r = http.post("/filter", json={"Pod": pod("p", jobs[0], 1), "Nodes": None,
                                   "NodeNames": ["broken", "n1"]})
    assert r.status_code == 200 and r.json()["NodeNames"] == ["n1"]
    assert "topology store unreachable" in r.json()["FailedAndUnresolvableNodes"]["broken"]
    r = http.post("/bind", json={"PodName": "p", "PodNamespace": "ml", "Node": "broken"})
    assert "cannot bind ml/p to broken: topology store unreachable" in r.json()["Error"]


def test_nodes_whose_running_pods_differ_only_in_counters_are_scored_apart(
    served: tuple[Any, list[str]],
) -> None:
    # The score cache's key named running jobs by type and GPUs only: two nodes running the
    # same new type with other counters shared whichever score came first.
    model, jobs = served
    ext, _ = make(model, ["heavy", "light"])
    ones = {"heavy": "100", "light": "1"}
    pods = [bound(f"r-{n}", "newtype", 1, "0", **{"interplace.io/counters": ",".join(
        f"{m}={v}" for m in ("gpu_util_pct", "mem_util_pct", "sm_active_pct",
                             "dram_active_pct"))}) for n, v in ones.items()]
    for p, n in zip(pods, ones, strict=True):
        p["spec"]["nodeName"] = n
    ext.restore(pods)
    keys = {n: ext._build_view(n)[3] for n in ones}
    assert keys["heavy"] != keys["light"]
    new = parse_pod(pod("new", jobs[0], 1))
    job = ext._job(new)
    assert job is not None
    gains = {n: ext._score(job, ext._build_view(n)) for n in ones}
    fresh = {}
    for n in ones:  # each node alone, in an extender of its own
        alone, _ = make(model, [n])
        alone.restore([p for p in pods if p["spec"]["nodeName"] == n])
        fresh[n] = alone._best(new, job, n)
    assert gains == fresh


def test_a_pod_that_asks_for_no_gpus_binds_where_filter_passed_it(
    served: tuple[Any, list[str]],
) -> None:
    # filter passes it on a node without a topology (a CPU node); bind then refused it there
    # ("no topology"), and the pod never started.
    model, _ = served
    _ext, http = make(model, ["gpu-node"])
    zero = pod("zero", None, 0)
    zero["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "0"}}
    r = http.post("/filter", json={"Pod": zero, "Nodes": None, "NodeNames": ["cpu-node"]})
    assert r.json()["NodeNames"] == ["cpu-node"]
    r = http.post("/bind", json={"PodName": "zero", "PodNamespace": "ml", "Node": "cpu-node"})
    assert r.json()["Error"] == ""


def test_a_list_books_no_pod_that_asks_for_no_gpus(served: tuple[Any, list[str]]) -> None:
    model, _ = served
    ext, _http = make(model, ["n1"])
    cpu = pod("sidecar", None, 0, ns="kube-system")
    cpu["spec"]["nodeName"] = "n1"
    assert ext.restore([cpu]) == 0  # as the watch books nothing of it
    ext.observe("ADDED", cpu)
    assert ext.snapshot()["nodes"] == {}


@pytest.mark.parametrize(
    ("verb", "args", "reason"),
    [
        ("filter", {"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [
            {"resources": {"limits": "1"}}]}}, "NodeNames": ["n1"]},
         "resources.limits must be an object"),
        ("filter", {"Pod": pod("p", None, 1), "Nodes": {"items": ["n1"]}},
         "a node in Nodes lacks metadata.name"),
        ("preempt", {"Pod": pod("p", None, 1), "NodeNameToMetaVictims": {"n1": {"Pods": 1}}},
         "Pods must be a list of objects"),
        ("preempt", {"Pod": pod("p", None, 1), "NodeNameToVictims": {"n1": {
            "Pods": [], "NumPDBViolations": "x"}}}, "NumPDBViolations must be an integer"),
        ("preempt", {"Pod": pod("p", None, 1), "NodeNameToVictims": {"n1": {"Pods": [1]}}},
         "Pods must be a list of objects"),
    ],
)
def test_misshapen_requests_are_400_with_the_reason(
    served: tuple[Any, list[str]], verb: str, args: dict[str, Any], reason: str
) -> None:
    model, _ = served
    _ext, http = make(model, ["n1"])
    r = http.post(f"/{verb}", json=args)  # was a plain-text 500 (AttributeError, TypeError)
    assert r.status_code == 400 and reason in r.json()["Error"]


def test_a_fault_of_the_service_is_a_json_500(served: tuple[Any, list[str]]) -> None:
    model, _ = served
    ext, _ = make(model, ["n1"])

    def broken(args: Any) -> Any:
        raise ZeroDivisionError("a bug")

    ext.preempt = broken  # type: ignore[method-assign]
    http = TestClient(build_app(ext), raise_server_exceptions=False)
    r = http.post("/preempt", json={})
    assert r.status_code == 500 and r.json() == {"Error": "preempt failed: a bug"}
