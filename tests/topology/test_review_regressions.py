"""Regression tests for defects found in review: each one crashed or refused real input."""

from __future__ import annotations

import pytest

from interplace.errors import InputError
from interplace.topology import TopologyBuilder, builtin, cluster, load
from interplace.topology._units import nvlink_link_gbps, parse_link_speed
from interplace.topology._xml import MAX_DEPTH, parse_xml
from interplace.topology.nccl import from_nccl_xml


def test_nccl_nic_with_base_class_only_and_unknown_link_speed() -> None:
    # NCCL's own topology dumps write class="0x02" and link_speed="Unknown" on NICs.
    xml = ("<system version='1'><cpu numaid='0' affinity='ff'>"
           "<pci busid='0000:01:00.0' class='0x030200' link_speed='16 GT/s' link_width='16'/>"
           "<pci busid='0000:02:00.0' class='0x02' link_speed='Unknown' link_width='0'>"
           "<nic><net name='mlx5_0' dev='0' speed='200000'/></nic></pci>"
           "</cpu></system>")
    t = from_nccl_xml(xml)
    assert len(t.nics()) == 1
    assert t.graph.nodes[t.nics()[0]]["speed"] == 25.0
    assert parse_link_speed("Unknown", "16") is None


def test_deeply_nested_xml_is_refused_with_one_line() -> None:
    deep = "<system>" + "<pci>" * (MAX_DEPTH + 5) + "</pci>" * (MAX_DEPTH + 5) + "</system>"
    with pytest.raises(InputError, match="nested deeper than"):
        parse_xml(deep, "deep.xml")
    with pytest.raises(InputError):
        from_nccl_xml("<system>" + "<pci class='0x060400' busid='0000:00:00.0'>" * 600
                      + "</pci>" * 600 + "</system>")


def test_stray_nic_and_missing_machine_vertex_are_input_errors() -> None:
    import networkx as nx

    from interplace.topology import Topology

    g = nx.Graph(builtin("pcie-8gpu").graph)
    g.add_node("nic:zz", kind="nic", machine="")
    with pytest.raises(InputError, match="NIC nic:zz is not attached"):
        Topology(g)
    g2 = nx.Graph(builtin("pcie-8gpu").graph)
    g2.remove_node("node")
    with pytest.raises(InputError, match="no 'node' vertex"):
        Topology(g2)


def test_relabel_in_a_cluster_keeps_the_vertex_convention() -> None:
    c = cluster(builtin("pcie-8gpu"), 2)
    r = c.relabel({"n0:0": "n0:9", "n0:1": "n0:8"})
    assert r.gpu("n0:9").node == "n0/gpu:9"
    assert r.connection("n0:9", "n0:8") == c.connection("n0:0", "n0:1")
    with pytest.raises(InputError, match="collide"):
        c.relabel({"n0:0": "x:5"})  # vertex n0/gpu:5 belongs to the unmapped GPU n0:5


def test_missing_file_with_upper_case_suffix_says_no_such_file() -> None:
    with pytest.raises(InputError, match="no such file"):
        load("TOPO.XML")


def test_nvlink5_rate_and_route_cache_consistency() -> None:
    assert nvlink_link_gbps("NVIDIA B200") == 50.0
    t = builtin("dgx1-v100")
    first = t.path("0", "5")
    assert t.path("0", "5") == first
    assert t.connection("0", "5") == first.connection == "SYS"


def test_single_numa_builder_graph_still_valid() -> None:
    b = TopologyBuilder()
    b.add_gpu("0", b.add_host_bridge(b.add_numa(0)))
    assert b.build().gpus() == ["0"]
