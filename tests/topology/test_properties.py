"""Property tests on random machine trees (hypothesis)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from interplace.topology import CONNECTION_ORDER, Topology, cluster

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
