"""NCCL topology XML importer, against the AWS and Azure files in tests/fixtures/topology."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from interplace.errors import InputError
from interplace.topology._graph import NodeKind, Topology
from interplace.topology._units import pcie_gbps
from interplace.topology.nccl import from_nccl_xml, read_nccl_xml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "topology"


def load(name: str) -> Topology:
    return read_nccl_xml(FIXTURES / name)


def parent(t: Topology, vertex: str) -> str:
    """The PCIe parent (towards the NUMA node) of a GPU or NIC vertex."""
    ups = [n for n in t.graph.neighbors(vertex)
           if t.graph.edges[vertex, n]["kind"] == "pcie"]
    assert len(ups) == 1
    return str(ups[0])


# --------------------------------------------------------------------------- p4d.24xlarge
def test_p4d_shape() -> None:
    t = load("p4d-24xl-topo.xml")
    assert t.name == "p4d-24xl-topo"
    assert t.gpus() == [str(i) for i in range(8)]
    assert t.numa_nodes == 2
    assert t.pcie_switches == 4
    assert len(t.nics()) == 4
    assert t.nvlinks() == []  # the file lists no NVLink


def test_p4d_connections() -> None:
    t = load("p4d-24xl-topo.xml")
    assert t.connection("0", "1") == "PIX"
    assert t.connection("0", "2") == "PHB"
    assert t.connection("0", "4") == "SYS"
    assert t.connection("6", "7") == "PIX"


def test_p4d_gpus_in_bus_order_and_numa() -> None:
    t = load("p4d-24xl-topo.xml")
    # The file's comments number the GPUs in bus order: GPU 0 = 0000:10:1c.0, GPU 7 = a0:1d.0.
    assert t.gpu("0").busid == "0000:10:1c.0"
    assert t.gpu("7").busid == "0000:a0:1d.0"
    assert [t.gpu(g).numa for g in t.gpus()] == [0, 0, 0, 0, 1, 1, 1, 1]
    numa0 = t.graph.nodes["numa:0"]
    assert numa0["cpus"] == "0-23,48-71"  # affinity 000000ff,ffff0000,00ffffff


def test_p4d_nearest_nic_is_under_own_switch() -> None:
    t = load("p4d-24xl-topo.xml")
    for g in t.gpus():
        nic = t.nearest_nic(g)
        assert nic is not None
        gpu_switch = parent(t, t.gpu(g).node)
        assert t.graph.nodes[gpu_switch]["kind"] == NodeKind.PCIE_SWITCH
        assert parent(t, nic) == gpu_switch
        assert t.connection(g, nic) == "PIX"
    assert t.nearest_nic("0") == "nic:NIC0"
    assert t.graph.nodes["nic:NIC0"]["busid"] == "0000:10:1b.0"


def test_p4d_bottleneck_is_gen3_x16() -> None:
    t = load("p4d-24xl-topo.xml")
    path = t.path("0", "1")
    # every link of the file is link_speed="8 GT/s" link_width="16"
    assert path.bottleneck == pytest.approx(pcie_gbps(8.0, 16))
    assert path.bottleneck == pytest.approx(15.75, abs=0.01)
    assert len(path.nodes) == 3  # gpu - switch - gpu


# --------------------------------------------------------------------------- Azure
def test_ndv5_one_gpu_one_nic_per_switch() -> None:
    t = load("ndv5-topo.xml")
    assert len(t.gpus()) == 8
    assert t.numa_nodes == 2
    assert t.pcie_switches == 8
    nics = t.nics()
    for g in t.gpus():
        pix = [n for n in nics if t.connection(g, n) == "PIX"]
        assert len(pix) == 1
        assert t.nearest_nic(g) == pix[0]
    # Gen5 x16 links ("32.0 GT/s PCIe")
    assert t.path("0", "1").bottleneck == pytest.approx(pcie_gbps(32.0, 16))


def test_ndv4_gpu0_is_lowest_bus_id() -> None:
    t = load("ndv4-topo.xml")
    # the file lists 0003,0004 (NUMA 0) before 0001,0002 (NUMA 1); nvidia-smi numbers by bus id
    assert t.gpu("0").busid == "0001:00:00.0"
    assert t.gpu("0").numa == 1
    assert t.gpu("2").busid == "0003:00:00.0"
    assert t.gpu("2").numa == 0
    assert t.numa_nodes == 4
    assert t.pcie_switches == 4
    assert len(t.nics()) == 8
    assert t.connection("0", "1") == "PIX"
    assert t.connection("0", "2") == "SYS"


def test_ndv2_gpus_on_host_bridge() -> None:
    t = load("ndv2-topo.xml")
    assert len(t.gpus()) == 8
    assert t.pcie_switches == 0
    for g in t.gpus():
        assert t.graph.nodes[parent(t, t.gpu(g).node)]["kind"] == NodeKind.HOST_BRIDGE
    for a in ("0", "1", "2", "3"):
        for b in ("0", "1", "2", "3"):
            if a != b:
                assert t.connection(a, b) == "PHB"
    assert t.connection("0", "4") == "SYS"
    assert len(t.nics()) == 1


def test_ncv4_dump_with_self_nvlink_and_cpu_nic() -> None:
    t = load("ncv4-topo.xml")
    assert t.gpus() == ["0", "1", "2", "3"]
    assert t.numa_nodes == 4
    assert [t.gpu(g).numa for g in t.gpus()] == [0, 1, 2, 3]
    assert t.nvlinks() == []  # the only <nvlink> elements target the GPU itself
    assert all(d["kind"] != "nvlink" for _, _, d in t.graph.edges(data=True))
    (nic,) = t.nics()
    assert t.graph.nodes[nic]["label"] == "eth0"
    assert t.graph.nodes[nic]["speed"] == pytest.approx(12.5)  # 100000 Mb/s
    assert t.graph.nodes[parent(t, nic)]["kind"] == NodeKind.HOST_BRIDGE
    assert t.connection("0", nic) == "PHB"


# --------------------------------------------------------------------------- NVLink
def test_gpu_dev_ids_and_nvlinks() -> None:
    xml = """<system version="1">
      <cpu numaid="0" affinity="0000000f">
        <pci busid="0000:02:00.0" class="0x030200">
          <gpu dev="1"><nvlink target="0000:01:00.0" count="2" tclass="0x030200"/>
                       <nvlink target="fffffff:ffff:ff" count="6" tclass="0x068000"/></gpu>
        </pci>
        <pci busid="0000:01:00.0" class="0x030200">
          <gpu dev="0"><nvlink target="0000:02:00.0" count="2" tclass="0x030200"/>
                       <nvlink target="fffffff:ffff:ff" count="6" tclass="0x068000"/></gpu>
        </pci>
        <pci busid="0000:03:00.0" class="0x030200">
          <gpu dev="2"><nvlink target="0000:09:00.0" count="4" tclass="0x030200"/></gpu>
        </pci>
      </cpu>
    </system>"""
    t = from_nccl_xml(xml, name="nv")
    assert t.gpu("0").busid == "0000:01:00.0"
    g = t.graph
    # listed from both ends, counted once
    assert g.edges["gpu:0", "gpu:1"]["links"] == 2
    assert g.edges["gpu:0", "gpu:1"]["bandwidth"] == pytest.approx(50.0)
    (fabric,) = t.nodes_of_kind(NodeKind.NVSWITCH)
    assert g.edges["gpu:0", fabric]["links"] == 6
    assert t.connection("0", "1") == "NV2"  # the direct bond wins over the fabric route
    assert t.connection("0", "2") == "PHB"  # GPU 2's link to an absent GPU is ignored


# --------------------------------------------------------------------------- errors
def test_missing_file() -> None:
    with pytest.raises(InputError, match="no such file"):
        read_nccl_xml(FIXTURES / "does-not-exist.xml")


def test_malformed_xml() -> None:
    with pytest.raises(InputError, match="malformed XML"):
        from_nccl_xml("<system><cpu numaid='0'></system>")


def test_billion_laughs_fails_fast() -> None:
    lol = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
           + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">'
                     for i in range(1, 10))
           + ']><system>&lol9;</system>')
    start = time.perf_counter()
    with pytest.raises(InputError, match="unsafe XML"):
        from_nccl_xml(lol)
    assert time.perf_counter() - start < 1.0


GPU0 = "<system><cpu numaid='0'><pci busid='0000:01:00.0' class='0x030200'>"
GPU1 = "<pci busid='0000:02:00.0' class='0x030200'>"


def test_a_nic_without_bus_id_listed_under_each_cpu_is_one_nic() -> None:
    # NCCL 2.27 dumps a NIC it found no PCI path for under every <cpu>: it became a NIC per
    # socket, doubling the machine's network.
    nic = "<nic><net name='eth0' dev='0' speed='10000'/></nic>"
    xml = ("<system><cpu numaid='0'><pci busid='0000:01:00.0' class='0x030200'/>" + nic
           + "</cpu><cpu numaid='1'><pci busid='0000:81:00.0' class='0x030200'/>" + nic
           + "</cpu></system>")
    t = from_nccl_xml(xml)
    assert [t.graph.nodes[n]["label"] for n in t.nics()] == ["eth0"]


def test_no_gpu() -> None:
    xml = '<system version="1"><cpu numaid="0" affinity="ff"/></system>'
    with pytest.raises(InputError, match="no GPU"):
        from_nccl_xml(xml)


@pytest.mark.parametrize(
    ("xml", "message"),
    [
        ("<topology/>", "expected <system>"),
        ("<system version='1'/>", "no <cpu>"),
        ("<system><cpu numaid='x'/></system>", "numaid"),
        ("<system><cpu/></system>", "numaid"),
        ("<system><cpu numaid='0'><pci busid='0000:01:00.0'/></cpu></system>",
         "has no class attribute"),
        ("<system><cpu numaid='0' affinity='zz'/></system>", "CPU mask"),
        ("<system><cpu numaid='0'/><cpu numaid='0'/></system>", "numaid=0"),
        ("<system><cpu numaid='0'><pci busid='0000:01:00.0' class='0x030200' "
         "link_speed='fast' link_width='16'/></cpu></system>", "link speed"),
        # Counts past any GPU's (an exported file was then refused by the nvidia-smi reader),
        # a NIC speed that is not a number >= 0 (was taken as unknown), and two NICs at one
        # bus id (the hwloc reader refuses them).
        (GPU0 + "<gpu dev='0'><nvlink target='0000:02:00.0' count='99999999999' "
         "tclass='0x030200'/></gpu></pci>" + GPU1 + "</pci></cpu></system>",
         "NVLink gpu:0-gpu:1: 99999999999 links; a GPU has at most 64"),
        (GPU0 + "</pci><nic><net name='ib0' speed='nan'/></nic></cpu></system>",
         "<net name='ib0'> has a malformed speed 'nan'"),
        (GPU0 + "</pci><nic><net name='ib0' speed='-5'/></nic></cpu></system>",
         "malformed speed '-5'"),
        (GPU0 + "</pci>" + 2 * "<pci busid='0000:05:00.0' class='0x020700'><nic><net "
         "name='ib0'/></nic></pci>" + "</cpu></system>", "two NICs have busid 0000:05:00.0"),
    ],
)
def test_bad_documents(xml: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        from_nccl_xml(xml, name="bad")
    assert "\n" not in str(info.value)


def test_numaid_minus_one_means_the_single_numa_node_of_a_vm() -> None:
    xml = ("<system><cpu numaid='-1' affinity='ff'><pci busid='0000:01:00.0' class='0x030200'"
           " link_speed='16 GT/s' link_width='16'/></cpu></system>")
    t = from_nccl_xml(xml, name="vm")
    assert t.numa_nodes == 1
    assert t.gpu("0").numa == 0
