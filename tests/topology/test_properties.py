"""Property tests on random machine trees (hypothesis)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from interplace.topology import CONNECTION_ORDER, Domain, Topology, builtin, cluster, natural_key

from .strategies import machines

SETTINGS = settings(max_examples=60, deadline=None)


def _rank(c: str) -> int:
    return CONNECTION_ORDER.index("NV#" if c.startswith("NV") else c)


@SETTINGS
@given(machines())
def test_connection_is_symmetric_and_x_only_on_the_diagonal(t: Topology) -> None:
    for a, b in itertools.product(t.gpus(), repeat=2):
        assert t.connection(a, b) == t.connection(b, a)
        assert (t.connection(a, b) == "X") == (a == b)


@SETTINGS
@given(machines(), st.randoms(use_true_random=False))
def test_relabelling_permutes_every_answer(t: Topology, rnd: object) -> None:
    ids = t.gpus()
    shuffled = list(ids)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    mapping = {old: f"g{new}" for old, new in zip(ids, shuffled, strict=True)}
    r = t.relabel(mapping)
    assert sorted(r.gpus()) == sorted(mapping.values())
    for a, b in itertools.combinations(ids, 2):
        assert r.connection(mapping[a], mapping[b]) == t.connection(a, b)
        assert r.path(mapping[a], mapping[b]).bottleneck == t.path(a, b).bottleneck
    sub = ids[: min(4, len(ids))]
    before = {(d.kind, tuple(sorted(mapping[g] for g in d.gpus))) for d in t.domains(sub)
              if d.kind != "gpu" and d.kind != "nvlink"}
    after = {(d.kind, tuple(sorted(d.gpus))) for d in r.domains([mapping[g] for g in sub])
             if d.kind != "gpu" and d.kind != "nvlink"}
    assert before == after
    gpu_domains = {d.name for d in r.domains([mapping[g] for g in sub]) if d.kind == "gpu"}
    assert gpu_domains == {f"gpu:{mapping[g]}" for g in sub}


@SETTINGS
@given(machines())
def test_bottleneck_never_exceeds_a_link_of_the_path(t: Topology) -> None:
    for a, b in itertools.combinations(t.gpus(), 2):
        p = t.path(a, b)
        assert p.nodes[0] == t.gpu(a).node and p.nodes[-1] == t.gpu(b).node
        assert len(p.links) == len(p.nodes) - 1
        for link in p.links:
            assert p.bottleneck <= link.bandwidth
            assert t.graph.has_edge(link.u, link.v)
        assert p.bottleneck in {link.bandwidth for link in p.links}


@SETTINGS
@given(machines(), st.data())
def test_domains_of_a_superset_contain_those_of_a_subset(t: Topology, data: st.DataObject) -> None:
    big = data.draw(st.lists(st.sampled_from(t.gpus()), min_size=1, unique=True))
    small = data.draw(st.lists(st.sampled_from(big), min_size=1, unique=True))
    dom_big = {d.name: set(d.gpus) for d in t.domains(big)}
    dom_small = {d.name: set(d.gpus) for d in t.domains(small)}
    assert set(dom_small) <= set(dom_big)
    for name, users in dom_small.items():
        assert users <= dom_big[name]
        assert users <= set(small)


@SETTINGS
@given(machines())
def test_connection_classes_agree_with_the_tree(t: Topology) -> None:
    """Same NUMA node never gives SYS; a shared switch never gives anything farther than PXB."""
    for a, b in itertools.combinations(t.gpus(), 2):
        c = t.connection(a, b)
        if c.startswith("NV"):
            continue
        same_numa = t.gpu(a).numa == t.gpu(b).numa
        assert (c == "SYS") == (not same_numa)
        path = t.path(a, b)
        if c in ("PIX", "PXB"):
            assert all(t.graph.nodes[n]["kind"] in ("gpu", "pcie_switch") for n in path.nodes)


@settings(max_examples=25, deadline=None)
@given(machines(max_gpus=4), st.integers(2, 3))
def test_cluster_pairs_across_machines_are_net_and_within_keep_their_class(
    t: Topology, n: int
) -> None:
    if not t.nics():
        return
    c = cluster(t, n)
    assert len(c.gpus()) == n * len(t.gpus())
    for a, b in itertools.combinations(t.gpus(), 2):
        assert c.connection(f"n1:{a}", f"n1:{b}") == t.connection(a, b)
    g0 = t.gpus()[0]
    assert c.connection(f"n0:{g0}", f"n1:{g0}") == "NET"
    names = {d.kind for d in c.domains([f"n0:{g0}", f"n1:{g0}"])}
    assert {"nic", "network"} <= names
    assert _rank("NET") == len(CONNECTION_ORDER) - 1


def _merge(parts: list[list[Domain]]) -> dict[str, tuple[str, float | None, set[str]]]:
    """Domains of several queries merged by name: (kind, bandwidth, union of their GPUs)."""
    out: dict[str, tuple[str, float | None, set[str]]] = {}
    for domains in parts:
        for d in domains:
            kind, bw, users = out.setdefault(d.name, (d.kind, d.bandwidth, set()))
            assert (kind, bw) == (d.kind, d.bandwidth)  # a name always means one resource
            users.update(d.gpus)
    return out


def _assert_union_of_pairs(t: Topology, ids: list[str]) -> None:
    """The domains of a set are those of its GPUs and of its pairs, merged (the definition)."""
    whole = t.domains(ids)
    assert [d.name for d in whole] == sorted((d.name for d in whole), key=natural_key)
    for d in whole:
        assert list(d.gpus) == sorted(d.gpus, key=natural_key)
    parts = [t.domains([a]) for a in ids] + [t.domains(list(p))
                                              for p in itertools.combinations(ids, 2)]
    assert _merge([whole]) == _merge(parts)


@settings(max_examples=40, deadline=None)
@given(machines(max_gpus=5), st.integers(2, 3), st.data())
def test_cluster_domains_are_the_union_of_pair_domains(t: Topology, n: int,
                                                       data: st.DataObject) -> None:
    # Routes across machines are read in halves (GPU -> NIC, NIC -> GPU) and shared by all the
    # partners of a GPU; merging pair by pair must give the same users for every domain.
    if not t.nics():
        return
    c = cluster(t, n)
    ids = data.draw(st.lists(st.sampled_from(c.gpus()), min_size=1, max_size=7, unique=True))
    _assert_union_of_pairs(c, ids)


_VERTEX_DOMAIN = {"host_bridge": "host_bridge", "numa": "socket", "node": "smp",
                  "nvswitch": "nvswitch", "nic": "nic", "network": "network"}


@settings(max_examples=40, deadline=None)
@given(machines(max_gpus=5), st.data())
def test_cross_machine_pair_domains_follow_its_path(t: Topology, data: st.DataObject) -> None:
    if not t.nics():
        return
    c = cluster(t, 2)
    a = f"n0:{data.draw(st.sampled_from(t.gpus()))}"
    b = f"n1:{data.draw(st.sampled_from(t.gpus()))}"
    nodes = c.path(a, b).nodes
    kinds = {v: c.graph.nodes[v]["kind"] for v in nodes}
    doms = c.domains([a, b])
    # each GPU's way to host memory, plus what the route a -> NIC -> network -> NIC -> b meets
    alone = {d.name for x in (a, b) for d in c.domains([x])}
    on_path = {f"{_VERTEX_DOMAIN[k]}:{v}" for v, k in kinds.items() if k in _VERTEX_DOMAIN}
    assert {"nic", "network"} <= {kinds[v] for v in nodes}
    assert {d.name for d in doms if d.kind != "pcie_uplink"} == (
        on_path | {n for n in alone if not n.startswith("uplink:")})
    uplinks = {d.name for d in doms if d.kind == "pcie_uplink"}
    switches = {f"uplink:{v}" for v, k in kinds.items() if k == "pcie_switch"}
    assert {n for n in alone if n.startswith("uplink:")} <= uplinks <= alone | switches
    assert all(d.gpus == (a, b) for d in doms if d.name in on_path)


def test_mid_size_cluster_domains_are_the_union_of_pair_domains() -> None:
    c = builtin("dgx1-v100*3")  # NVLink pairs, two sockets and the network: 24 GPUs
    _assert_union_of_pairs(c, c.gpus())
    assert len(c.to_json()["domains"]) == len(c.domains(c.gpus()))
