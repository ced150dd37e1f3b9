"""Unit tests of Topology, TopologyBuilder and cluster on small hand-built machines."""

from __future__ import annotations

import math

import networkx as nx
import pytest

from interplace.errors import InputError
from interplace.topology import (
    Domain,
    DomainKind,
    Gpu,
    Link,
    Topology,
    TopologyBuilder,
    cluster,
    natural_key,
    pcie_gbps,
)


def two_level_machine() -> Topology:
    """numa0 -> hb -> top switch -> (leaf A: GPU0, GPU1) (leaf B: GPU2); GPU3 on hb; numa1: GPU4."""
    b = TopologyBuilder()
    n0, n1 = b.add_numa(0, cpus="0-7"), b.add_numa(1, cpus="8-15")
    hb = b.add_host_bridge(n0, key="a", bandwidth=40.0)
    hb2 = b.add_host_bridge(n0, key="b", bandwidth=40.0)
    top = b.add_switch(hb, key="top", bandwidth=20.0)
    leaf_a = b.add_switch(top, key="A", bandwidth=10.0)
    leaf_b = b.add_switch(top, key="B", bandwidth=12.0)
    b.add_gpu("0", leaf_a, bandwidth=16.0)
    b.add_gpu("1", leaf_a, bandwidth=16.0)
    b.add_gpu("2", leaf_b, bandwidth=16.0)
    b.add_gpu("3", hb2, bandwidth=16.0)
    hb3 = b.add_host_bridge(n1, key="c", bandwidth=40.0)
    b.add_gpu("4", hb3, bandwidth=16.0)
    b.add_nic("0", leaf_a, label="mlx5_0", speed=25.0)
    return b.build(name="two-level")


def test_connection_classes_follow_nvidia_smi_definitions() -> None:
    t = two_level_machine()
    assert t.connection("0", "0") == "X"
    assert t.connection("0", "1") == "PIX"  # one switch between them
    assert t.connection("0", "2") == "PXB"  # two switches, no host bridge
    assert t.connection("0", "3") == "NODE"  # two host bridges of one NUMA node
    assert t.connection("0", "4") == "SYS"  # across the SMP link
    assert t.connection("0", "nic:0") == "PIX"
    assert t.nearest_nic("2") == "nic:0"


def test_phb_for_two_devices_below_one_host_bridge() -> None:
    b = TopologyBuilder()
    hb = b.add_host_bridge(b.add_numa(0))
    b.add_gpu("0", hb)
    b.add_gpu("1", b.add_switch(hb, key="s"))
    assert b.build().connection("0", "1") == "PHB"


def test_path_routes_and_bottlenecks() -> None:
    t = two_level_machine()
    p = t.path("0", "2")
    assert p.nodes == ("gpu:0", "sw:A", "sw:top", "sw:B", "gpu:2")
    assert p.bottleneck == 10.0
    p = t.path("0", "4")
    assert p.nodes[3:7] == ("hb:a", "numa:0", "node", "numa:1")
    assert p.bottleneck == 10.0
    assert t.path("1", "1").bottleneck == math.inf


def test_domains_for_host_memory_and_pairs() -> None:
    t = two_level_machine()
    names = {d.name: d for d in t.domains(["0", "1"])}
    assert set(names) == {"gpu:0", "gpu:1", "uplink:sw:A", "uplink:sw:top", "host_bridge:hb:a",
                          "socket:numa:0"}
    assert names["uplink:sw:A"].gpus == ("0", "1")
    assert names["uplink:sw:A"].bandwidth == 10.0
    assert names["host_bridge:hb:a"].bandwidth == 40.0
    cross = {d.name: d for d in t.domains(["0", "4"])}
    assert cross["smp:node"].kind == DomainKind.SMP
    assert cross["smp:node"].gpus == ("0", "4")
    assert "socket:numa:1" in cross


def test_domains_reject_unknown_gpu_with_a_clear_message() -> None:
    with pytest.raises(InputError, match=r"no GPU '9' in topology 'two-level'"):
        two_level_machine().domains(["0", "9"])


def test_nvlink_direct_and_through_nvswitch() -> None:
    b = TopologyBuilder()
    hb = b.add_host_bridge(b.add_numa(0))
    g = [b.add_gpu(str(i), hb) for i in range(4)]
    b.add_nvlink(g[0], g[1], 2)
    fabric = b.add_nvswitch(chips=2)
    b.add_nvlink(g[2], fabric, 6)
    b.add_nvlink(g[3], fabric, 4)
    t = b.build()
    assert t.connection("0", "1") == "NV2"
    assert t.path("0", "1").bottleneck == 50.0
    assert t.connection("2", "3") == "NV4"
    assert t.path("2", "3").nodes == ("gpu:2", "nvswitch:0", "gpu:3")
    assert t.path("2", "3").bottleneck == 100.0
    assert t.connection("0", "2") == "PHB"
    assert t.nvlinks() == [("0", "1", 2), ("2", "3", 4)]
    kinds = {d.name: d.kind for d in t.domains(["0", "1", "2", "3"])}
    assert kinds["nvlink:0-1"] == DomainKind.NVLINK
    assert kinds["nvswitch:nvswitch:0"] == DomainKind.NVSWITCH


def test_cluster_gpu_ids_paths_and_json() -> None:
    c = cluster(two_level_machine(), 3)
    assert c.gpus()[:6] == ["n0:0", "n0:1", "n0:2", "n0:3", "n0:4", "n1:0"]
    assert c.connection("n2:0", "n2:1") == "PIX"
    p = c.path("n0:4", "n2:0")
    assert p.connection == "NET"
    assert "network" in p.nodes and p.bottleneck == min(link.bandwidth for link in p.links)
    j = c.to_json()
    assert j["machines"] == 3 and j["numa_nodes"] == 6
    assert j["gpu_pairs"]["n0:0,n1:0"] == "NET"


def test_cluster_needs_nics_and_a_single_machine() -> None:
    b = TopologyBuilder()
    b.add_gpu("0", b.add_host_bridge(b.add_numa(0)))
    with pytest.raises(InputError, match="no NIC"):
        cluster(b.build(name="bare"), 2)
    with pytest.raises(InputError, match="already a cluster"):
        cluster(cluster(two_level_machine(), 2), 2)
    with pytest.raises(InputError, match="at least one"):
        cluster(two_level_machine(), 0)


def test_json_shape() -> None:
    j = two_level_machine().to_json()
    assert j["gpus"] == ["0", "1", "2", "3", "4"]
    assert j["numa_nodes"] == 2 and j["pcie_switches"] == 3
    assert len(j["gpu_pairs"]) == 10 and j["gpu_pairs"]["0,1"] == "PIX"
    assert j["nvlinks"] == []
    assert {d["kind"] for d in j["domains"]} >= {"gpu", "pcie_uplink", "socket", "smp"}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda b: b.add_gpu("0", b.add_numa(0)), "cannot hang below"),
        (lambda b: b.add_gpu("a b", b.add_host_bridge(b.add_numa(0))), "invalid GPU id"),
        (lambda b: b.add_switch(b.add_host_bridge(b.add_numa(0)), bandwidth=-1.0), "positive"),
        (lambda b: b.add_switch(b.add_host_bridge(b.add_numa(0)), bandwidth=math.nan), "positive"),
        (lambda b: (b.add_numa(0), b.add_numa(0)), "duplicate"),
    ],
)
def test_builder_rejects_bad_input(build: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        build(TopologyBuilder())  # type: ignore[operator]


def test_build_needs_a_gpu_and_a_numa_node() -> None:
    with pytest.raises(InputError, match="no NUMA"):
        TopologyBuilder().build()
    b = TopologyBuilder()
    b.add_host_bridge(b.add_numa(0))
    with pytest.raises(InputError, match="no GPU"):
        b.build()


def test_topology_rejects_a_pcie_cycle_and_unknown_kinds() -> None:
    g = nx.Graph(two_level_machine().graph)
    g.add_edge("gpu:0", "gpu:2", kind="pcie", bandwidth=1.0)
    with pytest.raises(InputError, match=r"cycle|tree"):
        Topology(g)
    g2 = nx.Graph(two_level_machine().graph)
    g2.nodes["gpu:0"]["kind"] = "toaster"
    with pytest.raises(InputError, match="unknown kind"):
        Topology(g2)


def test_frozen_records_validate() -> None:
    with pytest.raises(InputError):
        Link(u="a", v="b", kind="pcie", bandwidth=0.0)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        Domain(name="x", kind=DomainKind.GPU, gpus=())
    with pytest.raises(InputError):
        Gpu(id="0", node="gpu:0", memory_bytes=-1)
    with pytest.raises(AttributeError):
        Gpu(id="0", node="gpu:0").id = "1"  # type: ignore[misc]


def test_graph_is_read_only_and_independent_of_the_builder() -> None:
    b = TopologyBuilder()
    b.add_gpu("0", b.add_host_bridge(b.add_numa(0)))
    t = b.build()
    b.graph.add_node("extra", kind="gpu")
    assert "extra" not in t.graph
    with pytest.raises(nx.NetworkXError):
        t.graph.add_node("x")


def test_natural_key_and_pcie_bandwidth() -> None:
    assert sorted(["n10:1", "n2:3", "n2:10"], key=natural_key) == ["n2:3", "n2:10", "n10:1"]
    assert pcie_gbps(16.0, 16) == pytest.approx(31.5077, rel=1e-4)
    # Gen 1 and 2 (2.5 and 5 GT/s) code 8b/10b, Gen 3 on 128b/130b: 5 GT/s x16 is 8 GB/s.
    assert pcie_gbps(5.0, 16) == pytest.approx(8.0)
    assert pcie_gbps(2.5, 16) == pytest.approx(4.0)
    assert pcie_gbps(8.0, 16) == pytest.approx(8 * 16 / 8 * 128 / 130)
    with pytest.raises(InputError):
        pcie_gbps(8.0, 0)


def test_nvlink_needs_gpu_ends() -> None:
    b = TopologyBuilder()
    s = b.add_numa(0)
    hb = b.add_host_bridge(s)
    g = b.add_gpu("0", hb)
    nic = b.add_nic("x", hb)
    f1, f2 = b.add_nvswitch("a"), b.add_nvswitch("b")
    for other in (s, nic):
        with pytest.raises(InputError, match="needs two GPUs"):
            b.add_nvlink(g, other, 2)
    with pytest.raises(InputError, match="needs two GPUs"):
        b.add_nvlink(f1, f2, 2)
    with pytest.raises(InputError, match="already be in"):
        b.add_nvlink(g, "gpu:99", 1)


@pytest.mark.parametrize("spec", ["dgx-a100*3", "p4d*2", "pcie-8gpu*2", "dgx1-v100"])
def test_nearest_nic_equals_a_scan_of_every_nic(spec: str) -> None:
    # nearest_nic compares only the GPU's own machine's NICs: one of the NICs a scan of every
    # NIC of the cluster on the GPU's machine finds nearest, and GPUs tied over the same NICs
    # are spread evenly over them (all of a DGX A100's GPUs on NIC 0, 2, 4, 6 before).
    from interplace.topology import CONNECTION_ORDER, builtin

    t = builtin(spec)
    rank = {c: i for i, c in enumerate(CONNECTION_ORDER)}
    load: dict[tuple[str, ...], dict[str, int]] = {}
    for g in t.gpus():
        node = t.gpu(g).node
        machine = t.graph.nodes[node]["machine"]
        mine = [c for c in t.nics() if t.graph.nodes[c]["machine"] == machine]
        best = min(rank[t.connection(g, c)] for c in mine)
        tie = tuple(c for c in mine if rank[t.connection(g, c)] == best)
        nic = t.nearest_nic(g)
        assert nic in tie, g
        count = load.setdefault(tie, dict.fromkeys(tie, 0))
        count[nic] += 1
    for count in load.values():
        assert max(count.values()) - min(count.values()) <= 1
    if spec.startswith("dgx-a100"):  # a NIC per GPU, as NCCL maps them
        assert len({t.nearest_nic(g) for g in t.gpus()}) == len(t.gpus())
