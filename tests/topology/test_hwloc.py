"""hwloc XML importer, against the hwloc test-suite files in tests/fixtures/topology."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from interplace.errors import InputError
from interplace.topology._graph import NodeKind, Topology
from interplace.topology.hwloc import from_hwloc_xml, read_hwloc_xml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "topology"


def load(name: str) -> Topology:
    return read_hwloc_xml(FIXTURES / name)


# --------------------------------------------------------------------------- DGX-2
def test_dgx2_gpus_numa_and_nvswitch() -> None:
    t = load("nvidiaDGX2.xml")
    assert t.name == "nvidiaDGX2"
    assert t.gpus() == [str(i) for i in range(16)]
    assert t.numa_nodes == 2
    assert all(t.gpu(g).model == "Tesla V100-SXM3-32GB-H" for g in t.gpus())
    assert [t.gpu(g).numa for g in t.gpus()] == [0] * 8 + [1] * 8
    # nvml0 is the PCIDev at 0000:34:00.0, nvml15 the one at 0000:e7:00.0
    assert t.gpu("0").busid == "0000:34:00.0"
    assert t.gpu("15").busid == "0000:e7:00.0"
    for a, b in itertools.combinations(t.gpus(), 2):
        assert t.connection(a, b) == "NV6"
    (fabric,) = t.nodes_of_kind(NodeKind.NVSWITCH)
    assert t.graph.nodes[fabric]["chips"] == 12
    # 6 links of 25000 MB/s from each GPU into the fabric
    assert t.graph.edges["gpu:0", fabric]["links"] == 6
    assert t.graph.edges["gpu:0", fabric]["bandwidth"] == pytest.approx(150.0)


def test_dgx2_pcie_tree() -> None:
    t = load("nvidiaDGX2.xml")
    # 4 host bridges, each with a top switch and 2 leaf switches holding 2 GPUs; the switches
    # that only carry the NVSwitch chips (0000:5f:00.0, 0000:bf:00.0) hold no GPU or NIC and
    # are left out.
    assert t.pcie_switches == 12
    assert len(t.nodes_of_kind(NodeKind.HOST_BRIDGE)) == 4
    assert "sw:0000:5f:00.0" not in t.graph
    # nvml0 (0000:34:00.0) and nvml1 (0000:36:00.0) sit below downstream ports 33:00.0 and
    # 33:10.0 of the leaf switch whose upstream port is 0000:32:00.0; nvml2 (0000:39:00.0) is
    # below the leaf switch 0000:37:00.0. Both leaves hang off the switch 0000:2c:00.0 on the
    # host bridge 0000:[2b-3b]. nvml4 (0000:57:00.0) is on host bridge 0000:[4e-67], same
    # package; nvml8 is on the other package.
    gpu = {g: t.gpu(g).node for g in ("0", "1", "2", "4", "8")}
    assert t._pcie_class(gpu["0"], gpu["1"]) == "PIX"
    assert t._pcie_class(gpu["0"], gpu["2"]) == "PXB"
    assert t._pcie_class(gpu["0"], gpu["4"]) == "NODE"
    assert t._pcie_class(gpu["0"], gpu["8"]) == "SYS"
    # the same through the public API: the PCIe uplinks that a pair shares
    def shared_uplinks(a: str, b: str) -> set[str]:
        return {d.name for d in t.domains([a, b]) if d.kind == "pcie_uplink" and len(d.gpus) == 2}

    assert shared_uplinks("0", "1") == {"uplink:sw:0000:32:00.0", "uplink:sw:0000:2c:00.0"}
    assert shared_uplinks("0", "2") == {"uplink:sw:0000:2c:00.0"}
    assert shared_uplinks("0", "4") == set()
    # GPU links are Gen3 x16: hwloc's pci_link_speed="15.753846" is kept as is
    assert t.graph.edges["gpu:0", "sw:0000:32:00.0"]["bandwidth"] == pytest.approx(15.753846)


# --------------------------------------------------------------------------- POWER8
def test_power8_nvlink_pairs() -> None:
    t = load("power8gpudistances.xml")
    assert t.gpus() == ["0", "1", "2", "3"]
    assert all(t.gpu(g).model == "Tesla P100-SXM2-16GB" for g in t.gpus())
    assert t.gpu("0").memory_bytes == 16671616 * 1024  # CUDAGlobalMemorySize in KiB
    assert t.numa_nodes == 2
    assert [t.gpu(g).numa for g in t.gpus()] == [0, 0, 1, 1]
    # NVLinkBandwidth: cuda0-cuda1 and cuda2-cuda3 at 40000 MB/s = 2 P100 links of 20 GB/s;
    # the GPU-CPU (Package) entries are ignored.
    assert t.nvlinks() == [("0", "1", 2), ("2", "3", 2)]
    edge = t.graph.edges["gpu:0", "gpu:1"]
    assert edge["bandwidth"] / edge["links"] == pytest.approx(20.0)
    assert t.connection("0", "1") == "NV2"
    assert t.connection("0", "2") == "SYS"
    assert t.connection("0", "3") == "SYS"
    assert t.nodes_of_kind(NodeKind.NVSWITCH) == []


# --------------------------------------------------------------------------- whole PCI tree
def test_wholeio_nvidia_gpus_only() -> None:
    t = load("32em64t-2n8c2t-pci-wholeio.xml")
    # NVIDIA class-03 devices: 0000:03:00.0, 0000:83:00.0 and 0000:84:00.0 (cuda0, "Tesla K40m").
    # Skipped: the AMD GPU at 0000:84:00.1 and the Matrox VGA chip at 0000:05:03.0, which
    # nvidia-smi would not list either.
    assert len(t.gpus()) == 3
    busids = {t.gpu(g).busid for g in t.gpus()}
    assert busids == {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0"}
    assert "0000:84:00.1" not in busids
    assert "0000:05:03.0" not in busids
    # cuda0 keeps id 0; the GPUs without a CUDA device take 1 and 2 in bus order
    k40 = t.gpu("0")
    assert k40.model == "Tesla K40m"
    assert k40.busid == "0000:84:00.0"
    assert k40.numa == 1
    assert t.gpu("1").busid == "0000:03:00.0"
    assert t.gpu("2").busid == "0000:83:00.0"
    assert t.connection("0", "2") == "PHB"  # two root ports of one host bridge
    assert t.connection("0", "1") == "SYS"
    # NICs in bus order, named after their OpenFabrics / network device
    labels = [t.graph.nodes[n]["label"] for n in t.nics()]
    assert labels == ["mlx5_0", "eth0", "eth1"]
    assert t.pcie_switches == 0


# --------------------------------------------------------------------------- errors
def test_missing_file() -> None:
    with pytest.raises(InputError, match="no such file"):
        read_hwloc_xml(FIXTURES / "missing.xml")


def test_malformed_xml() -> None:
    with pytest.raises(InputError, match="malformed XML"):
        from_hwloc_xml("<topology><object type='Machine'></topology>")


def test_billion_laughs_fails_fast() -> None:
    lol = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
           + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">'
                     for i in range(1, 10))
           + ']><topology>&lol9;</topology>')
    start = time.perf_counter()
    with pytest.raises(InputError, match="unsafe XML"):
        from_hwloc_xml(lol)
    assert time.perf_counter() - start < 1.0


def test_nccl_document_is_not_hwloc() -> None:
    with pytest.raises(InputError, match="not an hwloc topology"):
        from_hwloc_xml("<system version='1'><cpu numaid='0'/></system>")


def test_no_gpu() -> None:
    xml = ('<topology version="3.0"><object type="Machine" os_index="0" gp_index="1">'
           '<object type="NUMANode" os_index="0" gp_index="2"/></object></topology>')
    with pytest.raises(InputError, match="no NVIDIA GPU"):
        from_hwloc_xml(xml)


GPU = ('<object type="Bridge" gp_index="3" bridge_type="0-1" depth="0" bridge_pci="0000:[00-01]">'
       '<object type="PCIDev" gp_index="4" pci_busid="0000:01:00.0" '
       'pci_type="0302 [10de:20b0] [10de:134f] a1 00" pci_link_speed="{speed}">'
       '<object type="OSDev" gp_index="5" name="nvml0"/></object></object>')


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('<object type="NUMANode" os_index="x" gp_index="2"/>' + GPU.format(speed="1"),
         "os_index"),
        (GPU.format(speed="fast"), "pci_link_speed"),
        (GPU.format(speed="1").replace("0302 [10de:20b0]", "03zz"), "pci_type"),
        (GPU.format(speed="1") + '<distances2hetero nbobjs="2" name="NVLinkBandwidth">'
         '<indexes>OSDev:5 OSDev:5</indexes><u64values>0 1 2</u64values></distances2hetero>',
         "NVLinkBandwidth"),
        (GPU.format(speed="1") + '<distances2hetero nbobjs="1" name="NVLinkBandwidth">'
         '<indexes>OSDev:5</indexes><u64values>lots</u64values></distances2hetero>',
         "non-integer"),
    ],
)
def test_malformed_numbers(body: str, message: str) -> None:
    xml = f'<topology version="3.0"><object type="Machine" gp_index="1">{body}</object></topology>'
    if "distances2" in body:  # matrices live beside the Machine, not inside it
        head, _, matrix = body.partition("<distances2hetero")
        xml = (f'<topology version="3.0"><object type="Machine" gp_index="1">{head}</object>'
               f"<distances2hetero{matrix}</topology>")
    with pytest.raises(InputError, match=message) as info:
        from_hwloc_xml(xml, name="bad")
    assert "\n" not in str(info.value)


def test_machine_without_numa_gets_numa0() -> None:
    xml = ('<topology version="3.0"><object type="Machine" cpuset="0x000000ff" gp_index="1">'
           + GPU.format(speed="15.753846") + "</object></topology>")
    t = from_hwloc_xml(xml)
    assert t.numa_nodes == 1
    assert t.gpu("0").numa == 0
    assert t.graph.nodes["numa:0"]["cpus"] == "0-7"
    assert t.graph.edges["gpu:0", "hb:0000:00"]["bandwidth"] == pytest.approx(15.753846)


def test_io_of_a_package_whose_numa_nodes_sit_under_groups() -> None:
    # Sub-NUMA clustering (NPS, SNC): each Package's NUMA nodes are under Group objects and
    # its PCI tree hangs off the Package. The second socket's GPU was put on NUMA node 0 (the
    # walk looked for a NUMANode among the Package's own children only, found none and kept
    # the Machine's), and the two GPUs, one per socket, were "NODE" apart, not "SYS".
    def package(k: int, bus: int) -> str:
        groups = "".join(
            f'<object type="Group" cpuset="0x1"><object type="NUMANode" os_index="{2 * k + i}"'
            ' cpuset="0x1"/></object>' for i in (0, 1))
        return (f'<object type="Package" os_index="{k}" cpuset="0x{15 << 4 * k:x}">{groups}'
                f'<object type="Bridge" bridge_type="0-1" depth="0" bridge_pci='
                f'"0000:[{bus:02x}-{bus + 1:02x}]"><object type="PCIDev" pci_busid='
                f'"0000:{bus + 1:02x}:00.0" pci_type="0302 [10de:20b0] [10de:134f] a1 00"/>'
                "</object></object>")

    xml = ('<topology version="2.0"><object type="Machine" os_index="0" cpuset="0xff">'
           + package(0, 0) + package(1, 0x80) + "</object></topology>")
    t = from_hwloc_xml(xml)
    assert [t.gpu(g).numa for g in t.gpus()] == [0, 2]
    assert t.connection(*t.gpus()) == "SYS"
