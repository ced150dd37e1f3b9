"""Tests of live discovery against a synthetic sysfs tree and NVML recording.

The fixture is synthetic (no GPU machine was available when it was written); it mirrors a
two-socket box: GPUs 0 and 1 and a ConnectX NIC behind one PCIe switch on socket 0, GPU 2
directly below a root port and an Ethernet NIC on socket 1, NVLink x2 between GPUs 0 and 1.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from interplace.errors import InputError
from interplace.topology._units import DEFAULT_NIC_GBPS, DEFAULT_PCIE_GBPS, pcie_gbps
from interplace.topology.discover import (
    NvLink,
    NvmlBackend,
    PynvmlBackend,
    ReplayBackend,
    discover,
    normalize_busid,
    record_discovery,
    replay_discovery,
    snapshot_sysfs,
)

A100 = "NVIDIA A100-SXM4-40GB"
GIB40 = 40 * 1024**3

HB16 = "devices/pci0000:16"
RP17 = f"{HB16}/0000:17:00.0"
UP19 = f"{RP17}/0000:19:00.0"
GPU0 = f"{UP19}/0000:1a:00.0/0000:1b:00.0"
GPU1 = f"{UP19}/0000:1a:01.0/0000:1c:00.0"
NIC_IB = f"{UP19}/0000:1a:02.0/0000:1d:00.0"
HB85 = "devices/pci0000:85"
NIC_ETH = f"{HB85}/0000:85:01.0/0000:86:00.0"
NIC_VF = f"{HB85}/0000:85:01.0/0000:86:02.0"
GPU2 = f"{HB85}/0000:87:00.0/0000:88:00.0"
SATA = "devices/pci0000:00/0000:00:17.0"


def _write(root: Path, rel: str, **files: str) -> None:
    d = root / rel
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text + "\n")


def _link(root: Path, rel: str, target_rel: str) -> None:
    link = root / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(root / target_rel, link.parent), link)


def _pci(root: Path, rel: str, cls: str, numa: int, speed: str, width: int,
         max_speed: str | None = None) -> None:
    _write(root, rel, **{"class": cls, "numa_node": str(numa),
                         "current_link_speed": speed, "current_link_width": str(width),
                         "max_link_speed": max_speed or speed})
    _link(root, f"bus/pci/devices/{rel.rsplit('/', 1)[-1]}", rel)


def make_sysfs(root: Path) -> Path:
    """A sysfs tree laid out like a real two-socket box (relative symlinks as in /sys)."""
    bridge = "0x060400"
    g4, g3, g5 = "16.0 GT/s PCIe", "8.0 GT/s PCIe", "32.0 GT/s PCIe"
    # socket 0: root port 17:00.0 -> switch 19:00.0 / 1a:0x.0 -> GPU0, GPU1, ConnectX
    _pci(root, RP17, bridge, 0, g4, 16)
    _pci(root, UP19, bridge, 0, g4, 16)
    for port in ("0000:1a:00.0", "0000:1a:01.0", "0000:1a:02.0"):
        _pci(root, f"{UP19}/{port}", bridge, 0, g4, 16)
    _pci(root, GPU0, "0x030200", 0, g4, 16)
    _pci(root, GPU1, "0x030200", 0, g3, 8)
    _pci(root, NIC_IB, "0x020700", 0, g4, 16)
    _write(root, f"{NIC_IB}/infiniband/mlx5_0")
    _write(root, f"{NIC_IB}/infiniband/mlx5_0/ports/1", rate="200 Gb/sec (4X HDR)")
    _link(root, f"{NIC_IB}/infiniband/mlx5_0/device", NIC_IB)
    _link(root, "class/infiniband/mlx5_0", f"{NIC_IB}/infiniband/mlx5_0")
    _write(root, f"{NIC_IB}/net/ib0", speed="200000")
    _link(root, f"{NIC_IB}/net/ib0/device", NIC_IB)
    _link(root, "class/net/ib0", f"{NIC_IB}/net/ib0")
    # socket 1: GPU2 alone below root port 87:00.0; an Ethernet NIC (and one of its VFs)
    _pci(root, f"{HB85}/0000:87:00.0", bridge, 1, g5, 16)
    _pci(root, GPU2, "0x030200", 1, g5, 16)
    _pci(root, f"{HB85}/0000:85:01.0", bridge, 1, g3, 8)
    _pci(root, NIC_ETH, "0x020000", 1, g3, 8)
    _write(root, f"{NIC_ETH}/net/eno1", speed="25000")
    _link(root, f"{NIC_ETH}/net/eno1/device", NIC_ETH)
    _link(root, "class/net/eno1", f"{NIC_ETH}/net/eno1")
    _pci(root, NIC_VF, "0x020000", 1, g3, 8)
    _link(root, f"{NIC_VF}/physfn", NIC_ETH)
    # not a NIC, and a virtual interface without a device
    _pci(root, SATA, "0x010601", -1, "Unknown", 0)
    _write(root, "devices/virtual/net/lo", speed="-1")
    _link(root, "class/net/lo", "devices/virtual/net/lo")
    # NUMA nodes
    _write(root, "devices/system/node", possible="0-1", online="0-1")
    _write(root, "devices/system/node/node0", cpulist="0-23,48-71")
    _write(root, "devices/system/node/node1", cpulist="24-47,72-95")
    return root


def replay_doc() -> dict[str, Any]:
    """NVML readings of the three GPUs as NVML writes bus ids (8-digit domain, uppercase)."""
    def dev(busid: str, links: list[dict[str, Any]]) -> dict[str, Any]:
        return {"busid": busid, "name": A100, "memory_bytes": GIB40, "nvlinks": links}

    return {
        "format": "interplace-nvml",
        "version": 1,
        "devices": [
            dev("00000000:1B:00.0", [
                {"link": 0, "remote_busid": "00000000:1C:00.0", "remote_type": "gpu"},
                {"link": 1, "remote_busid": "00000000:1C:00.0", "remote_type": "gpu"}]),
            dev("00000000:1C:00.0", [
                {"link": 0, "remote_busid": "00000000:1B:00.0", "remote_type": "gpu"},
                {"link": 1, "remote_busid": "00000000:1B:00.0", "remote_type": "gpu"}]),
            dev("00000000:88:00.0", []),
        ],
    }


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    return make_sysfs(tmp_path / "sys")


@pytest.fixture
def nvml() -> ReplayBackend:
    return ReplayBackend(replay_doc())


def _edge_bw(topo: Any, u: str, v: str) -> float:
    return float(topo.graph.edges[u, v]["bandwidth"])


# --------------------------------------------------------------------------- discovery
def test_discover_two_socket_box(sysfs: Path, nvml: ReplayBackend) -> None:
    t = discover(nvml, sysfs_root=sysfs, name="box")
    assert t.name == "box"
    assert t.gpus() == ["0", "1", "2"]
    assert t.numa_nodes == 2
    assert t.pcie_switches == 1
    assert t.nodes_of_kind("pcie_switch") == ["sw:0000:19:00.0"]
    assert t.nodes_of_kind("host_bridge") == ["hb:0000:16", "hb:0000:85"]
    assert t.gpu_pairs() == {"0,1": "NV2", "0,2": "SYS", "1,2": "SYS"}
    assert t.nvlinks() == [("0", "1", 2)]
    assert _edge_bw(t, "gpu:0", "gpu:1") == 2 * 25.0


def test_discover_gpu_records(sysfs: Path, nvml: ReplayBackend) -> None:
    t = discover(nvml, sysfs_root=sysfs)
    g0, g2 = t.gpu("0"), t.gpu("2")
    assert (g0.busid, g0.model, g0.memory_bytes, g0.numa) == ("0000:1b:00.0", A100, GIB40, 0)
    assert (g2.busid, g2.numa) == ("0000:88:00.0", 1)


def test_discover_nics(sysfs: Path, nvml: ReplayBackend) -> None:
    t = discover(nvml, sysfs_root=sysfs)
    # the VF and the SATA controller are left out; labels come from infiniband, then net
    assert t.nics() == ["nic:0000:1d:00.0", "nic:0000:86:00.0"]
    assert t.to_json()["nics"] == ["mlx5_0", "eno1"]
    ib = "nic:0000:1d:00.0"
    assert t.connection("0", ib) == "PIX"
    assert t.connection("2", ib) == "SYS"
    assert t.connection("2", "nic:0000:86:00.0") == "PHB"
    assert t.nearest_nic("0") == ib
    assert t.graph.nodes[ib]["speed"] == 25.0  # 200 Gb/s InfiniBand port rate
    assert t.graph.nodes["nic:0000:86:00.0"]["speed"] == 25000 / 8000
    assert "hb:0000:00" not in t.graph  # the SATA controller's host bridge is not added


def test_discover_link_bandwidths(sysfs: Path, nvml: ReplayBackend) -> None:
    t = discover(nvml, sysfs_root=sysfs)
    assert _edge_bw(t, "sw:0000:19:00.0", "hb:0000:16") == pcie_gbps(16.0, 16)
    assert _edge_bw(t, "gpu:0", "sw:0000:19:00.0") == pcie_gbps(16.0, 16)
    assert _edge_bw(t, "gpu:1", "sw:0000:19:00.0") == pcie_gbps(8.0, 8)
    assert _edge_bw(t, "gpu:2", "hb:0000:85") == pcie_gbps(32.0, 16)
    assert _edge_bw(t, "nic:0000:86:00.0", "hb:0000:85") == pcie_gbps(8.0, 8)
    # a host bridge gets its fastest link below it
    assert _edge_bw(t, "hb:0000:85", "numa:1") == pcie_gbps(32.0, 16)
    uplinks = {d.name: d.bandwidth for d in t.domains(["0", "1"]) if d.kind == "pcie_uplink"}
    assert uplinks == {"uplink:sw:0000:19:00.0": pcie_gbps(16.0, 16)}


def test_discover_cpulists(sysfs: Path, nvml: ReplayBackend) -> None:
    t = discover(nvml, sysfs_root=sysfs)
    assert t.graph.nodes["numa:0"]["cpus"] == "0-23,48-71"
    assert t.graph.nodes["numa:1"]["cpus"] == "24-47,72-95"


def test_discover_name_defaults_to_hostname(sysfs: Path, nvml: ReplayBackend) -> None:
    import socket

    assert discover(nvml, sysfs_root=sysfs).name == socket.gethostname()


def test_idle_gpu_link_read_at_its_top_speed(sysfs: Path, nvml: ReplayBackend) -> None:
    (sysfs / GPU0 / "current_link_speed").write_text("2.5 GT/s PCIe\n")
    t = discover(nvml, sysfs_root=sysfs)
    assert _edge_bw(t, "gpu:0", "sw:0000:19:00.0") == pcie_gbps(16.0, 16)


def test_missing_link_readings_give_defaults(sysfs: Path, nvml: ReplayBackend) -> None:
    for d in (UP19, GPU0):
        for f in ("current_link_speed", "max_link_speed"):
            (sysfs / d / f).unlink()
    (sysfs / GPU1 / "current_link_width").write_text("0\n")
    (sysfs / GPU1 / "current_link_speed").write_text("Unknown\n")
    (sysfs / GPU1 / "max_link_speed").write_text("Unknown\n")
    t = discover(nvml, sysfs_root=sysfs)
    assert _edge_bw(t, "sw:0000:19:00.0", "hb:0000:16") == DEFAULT_PCIE_GBPS
    assert _edge_bw(t, "gpu:0", "sw:0000:19:00.0") == DEFAULT_PCIE_GBPS
    assert _edge_bw(t, "gpu:1", "sw:0000:19:00.0") == DEFAULT_PCIE_GBPS


def test_unknown_numa_node_counts_as_zero(sysfs: Path, nvml: ReplayBackend) -> None:
    for rel in (f"{HB85}/0000:87:00.0", GPU2, f"{HB85}/0000:85:01.0", NIC_ETH):
        (sysfs / rel / "numa_node").write_text("-1\n")
    t = discover(nvml, sysfs_root=sysfs)
    assert t.gpu("2").numa == 0
    assert t.connection("0", "2") == "NODE"  # two host bridges on one socket
    assert t.numa_nodes == 2  # node 1 still has CPUs


def test_nested_switch_gives_pxb(sysfs: Path, nvml: ReplayBackend) -> None:
    # a second switch (1e:00.0 up, 1f:00.0 down) below downstream port 1a:01.0
    nested = f"{UP19}/0000:1a:01.0/0000:1e:00.0/0000:1f:00.0/0000:20:00.0"
    for rel in (nested.rsplit("/", 2)[0], nested.rsplit("/", 1)[0]):
        _pci(sysfs, rel, "0x060400", 0, "16.0 GT/s PCIe", 16)
    _pci(sysfs, nested, "0x030200", 0, "16.0 GT/s PCIe", 16)
    doc = replay_doc()
    doc["devices"][1]["busid"] = "0000:20:00.0"
    doc["devices"][0]["nvlinks"] = doc["devices"][1]["nvlinks"] = []
    t = discover(ReplayBackend(doc), sysfs_root=sysfs)
    assert t.pcie_switches == 2
    assert t.connection("0", "1") == "PXB"
    assert t.gpu_pairs()["0,2"] == "SYS"


def test_gpu_directly_on_host_bridge_bus(tmp_path: Path) -> None:
    # a VM: the GPU sits on the root bus, with no numa_node and no link readings
    root = tmp_path / "sys"
    _write(root, "devices/pci0000:00/0000:00:05.0", **{"class": "0x030200"})
    _link(root, "bus/pci/devices/0000:00:05.0", "devices/pci0000:00/0000:00:05.0")
    doc = {"devices": [{"busid": "0000:00:05.0", "name": "Tesla T4", "memory_bytes": 1,
                        "nvlinks": []}]}
    t = discover(ReplayBackend(doc), sysfs_root=root, name="vm")
    assert t.gpus() == ["0"]
    assert t.numa_nodes == 1
    assert t.graph.nodes["numa:0"].get("cpus") is None
    assert _edge_bw(t, "gpu:0", "hb:0000:00") == DEFAULT_PCIE_GBPS


def test_nvswitch_fabric(sysfs: Path) -> None:
    switches = [f"0000:{b:02x}:00.0" for b in (0xc0, 0xc1, 0xc2)]

    def links(n: int, rtype: str | None) -> list[dict[str, Any]]:
        return [{"link": k, "remote_busid": switches[k % 3], "remote_type": rtype}
                for k in range(n)]

    doc = replay_doc()
    doc["devices"][0]["nvlinks"] = links(12, "switch")
    doc["devices"][1]["nvlinks"] = links(12, None)  # no remote type: not a GPU -> NVSwitch
    doc["devices"][2]["nvlinks"] = [
        {"link": 0, "remote_busid": "0000:99:00.0", "remote_type": "gpu"},  # a hidden GPU
        {"link": 1, "remote_busid": "0000:00:00.0", "remote_type": "ibmnpu"},
    ]
    t = discover(ReplayBackend(doc), sysfs_root=sysfs)
    assert t.nodes_of_kind("nvswitch") == ["nvswitch:0"]
    assert t.graph.nodes["nvswitch:0"]["chips"] == 3
    assert t.nvlinks() == [("0", "1", 12)]
    assert t.gpu_pairs() == {"0,1": "NV12", "0,2": "SYS", "1,2": "SYS"}
    assert _edge_bw(t, "gpu:0", "nvswitch:0") == 12 * 25.0


def test_nvlink_count_uses_larger_end(sysfs: Path) -> None:
    doc = replay_doc()
    doc["devices"][1]["nvlinks"] = []  # the driver reports the links from one end only
    t = discover(ReplayBackend(doc), sysfs_root=sysfs)
    assert t.connection("0", "1") == "NV2"


def test_p100_link_rate(sysfs: Path) -> None:
    doc = replay_doc()
    for d in doc["devices"]:
        d["name"] = "Tesla P100-SXM2-16GB"
    t = discover(ReplayBackend(doc), sysfs_root=sysfs)
    assert _edge_bw(t, "gpu:0", "gpu:1") == 2 * 20.0


# --------------------------------------------------------------------------- errors
def test_gpu_missing_from_sysfs(sysfs: Path) -> None:
    doc = replay_doc()
    doc["devices"][2]["busid"] = "0000:3b:00.0"
    with pytest.raises(InputError, match=r"GPU 2 \(0000:3b:00\.0\) is not a PCI device"):
        discover(ReplayBackend(doc), sysfs_root=sysfs)


def test_sysfs_root_missing(tmp_path: Path, nvml: ReplayBackend) -> None:
    with pytest.raises(InputError, match="GPU 0"):
        discover(nvml, sysfs_root=tmp_path / "nowhere")


def test_no_gpu(sysfs: Path) -> None:
    with pytest.raises(InputError, match="no GPU"):
        discover(ReplayBackend({"devices": []}), sysfs_root=sysfs)


def test_duplicate_bus_id(sysfs: Path) -> None:
    doc = replay_doc()
    doc["devices"][1]["busid"] = "0000:1b:00.0"
    with pytest.raises(InputError, match=r"same bus id 0000:1b:00\.0"):
        discover(ReplayBackend(doc), sysfs_root=sysfs)


def _broken(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = replay_doc()
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected a JSON object"),
        ({"format": "other", "devices": []}, "format"),
        ({"version": 2, "devices": []}, "version 2"),
        ({"hostname": 3, "devices": []}, "hostname"),
        ({}, "'devices' must be a list"),
        ({"devices": [3]}, r"devices\[0\] must be an object"),
        (_broken(("devices", 0, "busid"), None), r"devices\[0\].busid"),
        # The message names the recording and the field (it named neither).
        (_broken(("devices", 0, "busid"), "gpu0"),
         r"malformed NVML recording: devices\[0\]\.busid: malformed PCI bus id 'gpu0'"),
        (_broken(("devices", 0, "nvlinks", 1, "remote_busid"), "zz"),
         r"devices\[0\]\.nvlinks\[1\]\.remote_busid: malformed PCI bus id 'zz'"),
        (_broken(("devices", 1, "name"), 7), r"devices\[1\].name"),
        (_broken(("devices", 1, "memory_bytes"), -1), "memory_bytes"),
        (_broken(("devices", 1, "memory_bytes"), True), "memory_bytes"),
        (_broken(("devices", 1, "memory_bytes"), 1.5), "memory_bytes"),
        (_broken(("devices", 2, "nvlinks"), None), r"devices\[2\].nvlinks must be a list"),
        (_broken(("devices", 0, "nvlinks", 1), "x"), r"nvlinks\[1\] must be an object"),
        (_broken(("devices", 0, "nvlinks", 1, "link"), "1"), r"nvlinks\[1\].link"),
        (_broken(("devices", 0, "nvlinks", 1, "remote_busid"), 5), "remote_busid"),
        (_broken(("devices", 0, "nvlinks", 1, "remote_type"), "cpu"), "remote_type"),
    ],
)
def test_malformed_replay_document(doc: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        ReplayBackend(doc)


def test_malformed_replay_json(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not JSON"):
        ReplayBackend.from_json("{devices: [")
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe{")
    with pytest.raises(InputError, match=r"malformed NVML recording .*bad\.json"):
        ReplayBackend.from_file(bad)
    with pytest.raises(InputError, match="cannot read NVML recording"):
        ReplayBackend.from_file(tmp_path / "missing.json")


def test_replay_index_out_of_range(nvml: ReplayBackend) -> None:
    with pytest.raises(InputError, match="no GPU 3"):
        nvml.name(3)


def test_normalize_busid() -> None:
    assert normalize_busid("00000000:1B:00.0") == "0000:1b:00.0"
    assert normalize_busid(" 0000:88:00.1 ") == "0000:88:00.1"
    assert normalize_busid("00010000:e0:1d.0") == "10000:e0:1d.0"
    with pytest.raises(InputError, match="malformed PCI bus id"):
        normalize_busid("0000:1b:00")


# --------------------------------------------------------------------------- NVML (live)
def test_pynvml_backend_without_driver() -> None:
    """On a machine without an NVIDIA driver, NVML fails with an InputError, not a traceback."""
    try:
        with PynvmlBackend():
            pytest.skip("NVML initialises here; this test needs a machine without a driver")
    except InputError as exc:
        message = str(exc)
    assert message.startswith("NVML is not available: ")
    assert "\n" not in message
    with pytest.raises(InputError, match="NVML is not available"):
        discover(sysfs_root="/nonexistent")
    with pytest.raises(InputError, match="NVML is not available"):
        record_discovery("/nonexistent/rec")


def test_pynvml_backend_driver_not_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml = pytest.importorskip("pynvml")

    def fail() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    with pytest.raises(InputError, match="NVML is not available: Driver Not Loaded"):
        discover()


def test_pynvml_backend_without_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(InputError, match=r"NVML is not available: .*pynvml"):
        PynvmlBackend().__enter__()


def test_pynvml_backend_outside_with_block() -> None:
    backend = PynvmlBackend()
    assert not backend.active
    assert isinstance(backend, NvmlBackend)
    with pytest.raises(InputError, match="not initialised"):
        backend.device_count()


@pytest.mark.gpu
def test_discover_live(tmp_path: Path) -> None:
    try:
        with PynvmlBackend() as live:
            count = live.device_count()
            t = discover(live)
            rec = record_discovery(tmp_path / "rec", live)
    except InputError as exc:
        if "NVML is not available" in str(exc):
            pytest.skip(str(exc))
        raise
    assert len(t.gpus()) == count
    # The replay rebuilds the same machine; only its provenance differs (it read the
    # recorded sysfs, not /sys). Found on a real H100 (2026-11-26), where the test compared
    # the provenance too.
    replayed = replay_discovery(rec, name=t.name).to_json()
    live_json = t.to_json()
    assert replayed.pop("source") == f"discover:{rec / 'sysfs'}"
    assert live_json.pop("source") == "discover:/sys"
    assert replayed == live_json


# --------------------------------------------------------------------------- recording
def test_record_round_trip(nvml: ReplayBackend) -> None:
    rec = ReplayBackend.record(nvml, hostname="box")
    assert json.loads(json.dumps(rec)) == rec
    assert rec["hostname"] == "box"
    assert rec["devices"][0]["busid"] == "0000:1b:00.0"
    assert rec["devices"][0]["nvlinks"][0] == {"link": 0, "remote_busid": "0000:1c:00.0",
                                               "remote_type": "gpu"}
    again = ReplayBackend(rec)
    assert again.hostname == "box"
    assert ReplayBackend.record(again, hostname="box") == rec
    for i in range(nvml.device_count()):
        assert again.pci_bus_id(i) == nvml.pci_bus_id(i)
        assert again.name(i) == nvml.name(i)
        assert again.memory_total(i) == nvml.memory_total(i)
        assert again.nvlinks(i) == nvml.nvlinks(i)
    assert again.nvlinks(0)[1] == NvLink(1, "0000:1c:00.0", "gpu")


def test_snapshot_round_trip(sysfs: Path, nvml: ReplayBackend, tmp_path: Path) -> None:
    busids = [nvml.pci_bus_id(i) for i in range(nvml.device_count())]
    snap = tmp_path / "snap"
    snapshot_sysfs(sysfs, busids, snap)
    source = discover(nvml, sysfs_root=sysfs, name="box")
    copy = discover(nvml, sysfs_root=snap, name="box")
    assert copy.gpu_pairs() == source.gpu_pairs()
    assert {k: v for k, v in copy.to_json().items() if k != "source"} == {
        k: v for k, v in source.to_json().items() if k != "source"}
    assert sorted(copy.graph.edges(data=True)) == sorted(source.graph.edges(data=True))
    # only what discovery needs: no SATA controller, no VF, no virtual interface
    assert sorted(os.listdir(snap / "bus/pci/devices")) == [
        "0000:1b:00.0", "0000:1c:00.0", "0000:1d:00.0", "0000:86:00.0", "0000:88:00.0"]
    assert sorted(os.listdir(snap / "class/net")) == ["eno1", "ib0"]
    assert not (snap / SATA).exists()
    for p in snap.rglob("*"):
        if p.is_symlink():
            assert not os.path.isabs(os.readlink(p))
            assert Path(os.path.realpath(p)).is_relative_to(snap.resolve())


def test_snapshot_refuses_non_empty_dir(sysfs: Path, tmp_path: Path) -> None:
    dest = tmp_path / "snap"
    dest.mkdir()
    (dest / "x").write_text("")
    with pytest.raises(InputError, match="not an empty directory"):
        snapshot_sysfs(sysfs, ["0000:1b:00.0"], dest)


def test_snapshot_unknown_busid(sysfs: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"0000:3b:00\.0"):
        snapshot_sysfs(sysfs, ["0000:3b:00.0"], tmp_path / "snap")


def _fail_on_call(monkeypatch: pytest.MonkeyPatch, owner: Any, attr: str, nth: int,
                  exc: BaseException) -> list[int]:
    """Make ``owner.attr`` raise ``exc`` on its ``nth`` call; returns the call counter."""
    real = getattr(owner, attr)
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == nth:
            raise exc
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, attr, wrapper)
    return calls


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# A failure after some files (or links) are written: the disk fills up, or the user interrupts.
MIDWAY_FAILURES = [
    pytest.param(Path, "write_text", OSError(28, "No space left on device"), id="write-enospc"),
    pytest.param(os, "symlink", OSError(13, "Permission denied"), id="symlink-eacces"),
    pytest.param(Path, "write_text", KeyboardInterrupt(), id="write-interrupted"),
]


@pytest.mark.parametrize(("owner", "attr", "exc"), MIDWAY_FAILURES)
@pytest.mark.parametrize("dest_rel", ["snap", "new/deeper/snap", "empty"])
def test_snapshot_failing_midway_leaves_nothing(sysfs: Path, nvml: ReplayBackend,
                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                owner: Any, attr: str, exc: BaseException,
                                                dest_rel: str) -> None:
    busids = [nvml.pci_bus_id(i) for i in range(nvml.device_count())]
    (tmp_path / "empty").mkdir()
    before = _tree(tmp_path)
    calls = _fail_on_call(monkeypatch, owner, attr, 5, exc)
    expected = InputError if isinstance(exc, OSError) else type(exc)
    with pytest.raises(expected) as info:
        snapshot_sysfs(sysfs, busids, tmp_path / dest_rel)
    assert calls[0] == 5  # it failed midway, after four successful calls
    if expected is InputError:
        assert f"cannot write sysfs snapshot in {tmp_path / dest_rel}" in str(info.value)
        assert "\n" not in str(info.value)
    monkeypatch.undo()
    # no partial copy, no hidden scratch directory beside it, no parent it created
    assert _tree(tmp_path) == before
    # and the same call then succeeds
    snapshot_sysfs(sysfs, busids, tmp_path / dest_rel)
    assert discover(nvml, sysfs_root=tmp_path / dest_rel).to_json()["gpus"] == discover(
        nvml, sysfs_root=sysfs).to_json()["gpus"]


def test_snapshot_holds_what_discovery_read(sysfs: Path, nvml: ReplayBackend, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # GPU 1 changes link speed between the scan and the copy (a GPU leaving its idle state):
    # the snapshot keeps the reading the scan saw, so it replays to the same topology.
    from interplace.topology import discover as module

    source = discover(nvml, sysfs_root=sysfs, name="box")
    real_scan = module._scan_sysfs

    def scan_then_change(*args: Any) -> Any:
        view = real_scan(*args)
        (sysfs / GPU1 / "current_link_speed").write_text("2.5 GT/s PCIe\n")
        (sysfs / GPU1 / "current_link_width").write_text("1\n")
        return view

    monkeypatch.setattr(module, "_scan_sysfs", scan_then_change)
    snapshot_sysfs(sysfs, [nvml.pci_bus_id(i) for i in range(3)], tmp_path / "snap")
    assert (tmp_path / "snap" / GPU1 / "current_link_width").read_text() == "8\n"
    def body(topo: Any) -> list[Any]:
        return sorted(topo.graph.edges(data=True))

    assert body(discover(nvml, sysfs_root=tmp_path / "snap", name="box")) == body(source)
    assert body(discover(nvml, sysfs_root=sysfs, name="box")) != body(source)  # sysfs did change


def test_snapshot_directory_mode(sysfs: Path, tmp_path: Path) -> None:
    # built in a scratch directory and renamed, it has the mode a plain mkdir gives
    snapshot_sysfs(sysfs, ["0000:1b:00.0"], tmp_path / "snap")
    umask = os.umask(0o022)
    os.umask(umask)
    assert (tmp_path / "snap").stat().st_mode & 0o777 == 0o777 & ~umask


def test_snapshot_into_empty_dir_and_onto_a_file(sysfs: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    snapshot_sysfs(sysfs, ["0000:1b:00.0"], tmp_path / "empty")
    assert (tmp_path / "empty/bus/pci/devices/0000:1b:00.0").is_symlink()
    (tmp_path / "file").write_text("keep")
    with pytest.raises(InputError, match="not an empty directory"):
        snapshot_sysfs(sysfs, ["0000:1b:00.0"], tmp_path / "file")
    assert (tmp_path / "file").read_text() == "keep"
    assert sorted(os.listdir(tmp_path)) == ["empty", "file", "sys"]


@pytest.mark.parametrize("existing", [False, True])
def test_record_discovery_failing_leaves_nothing(sysfs: Path, nvml: ReplayBackend,
                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 existing: bool) -> None:
    dest = tmp_path / "runs" / "rec"
    if existing:
        dest.mkdir(parents=True)
        (dest / "notes.txt").write_text("mine")
    before = _tree(tmp_path)
    # the sysfs copy fails midway, then (second case) the NVML file cannot be written
    _fail_on_call(monkeypatch, os, "symlink", 3, OSError(28, "No space left on device"))
    with pytest.raises(InputError, match="cannot write sysfs snapshot"):
        record_discovery(dest, nvml, sysfs_root=sysfs)
    assert _tree(tmp_path) == before
    monkeypatch.undo()
    _fail_on_call(monkeypatch, json, "dumps", 1, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        record_discovery(dest, nvml, sysfs_root=sysfs)
    assert _tree(tmp_path) == before


def test_record_and_replay_discovery(sysfs: Path, nvml: ReplayBackend, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "gpubox")
    rec = record_discovery(tmp_path / "rec", nvml, sysfs_root=sysfs)
    assert sorted(os.listdir(rec)) == ["nvml.json", "sysfs"]
    replayed = replay_discovery(rec)
    assert replayed.name == "gpubox"
    assert replayed.gpu_pairs() == discover(nvml, sysfs_root=sysfs).gpu_pairs()
    with pytest.raises(InputError, match="already holds a recording"):
        record_discovery(rec, nvml, sysfs_root=sysfs)


def test_replay_discovery_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read NVML recording"):
        replay_discovery(tmp_path)
    (tmp_path / "nvml.json").write_text(json.dumps({"devices": []}))
    with pytest.raises(InputError, match="no sysfs/ directory"):
        replay_discovery(tmp_path)


def test_nic_default_speed_without_names(sysfs: Path, nvml: ReplayBackend) -> None:
    # a NIC with no infiniband/net entry keeps its bus id as label and the default speed
    for rel in ("class/infiniband/mlx5_0", "class/net/ib0"):
        (sysfs / rel).unlink()
    t = discover(nvml, sysfs_root=sysfs)
    assert t.graph.nodes["nic:0000:1d:00.0"]["label"] == "0000:1d:00.0"
    assert t.graph.nodes["nic:0000:1d:00.0"]["speed"] == DEFAULT_NIC_GBPS


def test_pynvml_backend_reads_nvml_structures(sysfs: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """PynvmlBackend against pynvml's own structures and errors, the C library stubbed out."""
    pynvml = pytest.importorskip("pynvml")
    calls: list[str] = []
    busids = {0: b"00000000:1B:00.0", 1: b"00000000:1C:00.0"}

    def pci(h: int, legacy: bool = False) -> Any:
        info = pynvml.nvmlPciInfo_t()
        if legacy:  # an old driver fills only the legacy field
            info.busIdLegacy = busids[h]
        else:
            info.busId = busids[h]
        return info

    def not_supported(*_: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def state(h: int, link: int) -> int:
        if link >= 3:
            not_supported()
        return int(link < 2)

    def remote_type(h: int, link: int) -> int:
        if h == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return int(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)

    fakes: dict[str, Any] = {
        "nvmlInit": lambda: calls.append("init"),
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetPciInfo": lambda h: pci(h, legacy=h == 1),
        "nvmlDeviceGetName": lambda h: A100,
        "nvmlDeviceGetMemoryInfo": lambda h: pynvml.c_nvmlMemory_t(total=GIB40),
        "nvmlDeviceGetNvLinkState": state,
        "nvmlDeviceGetNvLinkRemotePciInfo": lambda h, link: pci(1 - h),
        "nvmlDeviceGetNvLinkRemoteDeviceType": remote_type,
    }
    for name, fn in fakes.items():
        monkeypatch.setattr(pynvml, name, fn)
    t = discover(sysfs_root=sysfs, name="box")
    assert calls == ["init", "shutdown"]
    assert t.gpu_pairs() == {"0,1": "NV2"}
    assert t.gpu("1").busid == "0000:1c:00.0"
    assert t.gpu("0").memory_bytes == GIB40
    with PynvmlBackend() as live:
        with live:  # nested use keeps NVML up until the outer block ends
            assert live.device_count() == 2
        assert live.active
        assert calls == ["init", "shutdown", "init"]
        assert live.nvlinks(0) == [NvLink(0, "0000:1c:00.0", "gpu"),
                                   NvLink(1, "0000:1c:00.0", "gpu")]
        assert live.nvlinks(1)[0] == NvLink(0, "0000:1b:00.0", None)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetName", not_supported)
        with pytest.raises(InputError, match="nvmlDeviceGetName failed for GPU 0: Not Supported"):
            live.name(0)
    assert calls == ["init", "shutdown", "init", "shutdown"]


def test_nic_named_through_a_child_device(sysfs: Path, nvml: ReplayBackend) -> None:
    # virtio-net: class/net/eth0/device points at virtio2, a child of the PCI function
    (sysfs / "class/net/eno1").unlink()
    _write(sysfs, f"{NIC_ETH}/virtio2/net/eth0", speed="-1")
    _link(sysfs, f"{NIC_ETH}/virtio2/net/eth0/device", f"{NIC_ETH}/virtio2")
    _link(sysfs, "class/net/eth0", f"{NIC_ETH}/virtio2/net/eth0")
    t = discover(nvml, sysfs_root=sysfs)
    assert t.graph.nodes["nic:0000:86:00.0"]["label"] == "eth0"
    assert t.graph.nodes["nic:0000:86:00.0"]["speed"] == DEFAULT_NIC_GBPS
