"""Built-in machine topologies, by name, and clusters of them (``"NAME*N"``).

Each built-in follows the vendor's published block diagram:

``dgx-a100``
    2x AMD EPYC 7742 in NPS4 mode (8 NUMA nodes); GPUs sit on NUMA 3, 1, 7, 5 in pairs.
    Each pair hangs below a PCIe Gen4 switch tree (one leaf switch per GPU, one for the two
    ConnectX-6 NICs), so GPU-NIC is ``PXB``. 8x A100-SXM4-40GB on 6 NVSwitches: ``NV12``.
``dgx-h100``
    2x Xeon 8480C (2 NUMA nodes), each GPU on its own PCIe Gen5 switch with its own
    ConnectX-7 NIC (``PIX``); 8x H100-SXM5-80GB on 4 NVSwitches: ``NV18``. A published
    ``nvidia-smi topo -m`` of an 8x H100 SXM server with these CPU lists (NVIDIA/nccl issue
    1264) has ``PIX`` to each GPU's own NIC as here, but ``SYS`` to the NICs of the same
    socket's other switches, which this built-in, following the block diagram, calls
    ``NODE``; other H100 servers put a second switch level between a GPU and its NIC
    (``PXB``). Where it matters, give the machine's own matrix or XML.
``dgx1-v100``
    2x Xeon E5-2698 v4, 4 PCIe Gen3 switches with 2 GPUs and 1 InfiniBand NIC each;
    8x V100-SXM2-32GB in the hybrid cube-mesh (NV1/NV2 bonds, 6 links per GPU).
``p4d``
    AWS p4d.24xlarge: 2 sockets x 2 PCIe switches, each with 2 A100-SXM4-40GB and one
    100 Gb/s EFA NIC; all GPUs on NVSwitch (``NV12``). Matches aws-ofi-nccl's topology file.
``pcie-8gpu``
    A plain 2-socket PCIe server: 2 sockets x 2 PCIe Gen3 switches x 2 GPUs, no NVLink,
    one NIC per socket on the host bridge.

>>> builtin("dgx-a100").connection("0", "nic:2")
'SYS'
>>> builtin("p4d*2").gpus()[-1]
'n1:7'
"""

from __future__ import annotations

import re
from collections.abc import Callable

from interplace.errors import InputError
from interplace.topology._graph import MAX_CLUSTER_MACHINES, Topology, TopologyBuilder, cluster
from interplace.topology._units import pcie_gbps

__all__ = ["BUILTINS", "builtin", "builtin_names"]

GIB = 1024**3
_A100 = ("NVIDIA A100-SXM4-40GB", 40 * GIB)
_H100 = ("NVIDIA H100 80GB HBM3", 80 * GIB)
_V100 = ("Tesla V100-SXM2-32GB", 32 * GIB)


def _dgx_a100() -> Topology:
    gen4 = pcie_gbps(16.0, 16)
    b = TopologyBuilder()
    numa_ids = [3, 1, 7, 5]
    cpus = {0: "0-15,128-143", 1: "16-31,144-159", 2: "32-47,160-175", 3: "48-63,176-191",
            4: "64-79,192-207", 5: "80-95,208-223", 6: "96-111,224-239", 7: "112-127,240-255"}
    numas = {i: b.add_numa(i, cpus=cpus[i]) for i in range(8)}
    fabric = b.add_nvswitch(chips=6)
    for pair, nid in enumerate(numa_ids):
        hb = b.add_host_bridge(numas[nid], key=str(pair), bandwidth=gen4)
        top = b.add_switch(hb, key=f"{pair}", bandwidth=gen4)
        for k in range(2):
            gid = 2 * pair + k
            leaf = b.add_switch(top, key=f"{pair}.gpu{k}", bandwidth=gen4)
            g = b.add_gpu(str(gid), leaf, model=_A100[0], memory_bytes=_A100[1], bandwidth=gen4)
            b.add_nvlink(g, fabric, 12)
        nic_sw = b.add_switch(top, key=f"{pair}.nic", bandwidth=gen4)
        for k in range(2):
            b.add_nic(f"{2 * pair + k}", nic_sw, label=f"mlx5_{2 * pair + k}", bandwidth=gen4,
                      speed=25.0)
    return b.build(name="dgx-a100", source="built-in: NVIDIA DGX A100 block diagram")


def _dgx_h100() -> Topology:
    gen5 = pcie_gbps(32.0, 16)
    b = TopologyBuilder()
    numas = [b.add_numa(0, cpus="0-55,112-167"), b.add_numa(1, cpus="56-111,168-223")]
    fabric = b.add_nvswitch(chips=4)
    for gid in range(8):
        hb = b.add_host_bridge(numas[gid // 4], key=str(gid), bandwidth=gen5)
        sw = b.add_switch(hb, key=str(gid), bandwidth=gen5)
        g = b.add_gpu(str(gid), sw, model=_H100[0], memory_bytes=_H100[1], bandwidth=gen5)
        b.add_nvlink(g, fabric, 18)
        b.add_nic(str(gid), sw, label=f"mlx5_{gid}", bandwidth=gen5, speed=50.0)
    return b.build(name="dgx-h100", source="built-in: NVIDIA DGX H100 block diagram")


#: The DGX-1 (V100) hybrid cube-mesh: bonded NVLink count for each connected GPU pair.
DGX1_NVLINKS: dict[tuple[int, int], int] = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
    (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2,
    (5, 6): 2, (5, 7): 1,
    (6, 7): 2,
}


def _dgx1_v100() -> Topology:
    gen3 = pcie_gbps(8.0, 16)
    b = TopologyBuilder(smp_bandwidth=38.4)  # 2 QPI links at 9.6 GT/s
    numas = [b.add_numa(0, cpus="0-19,40-59"), b.add_numa(1, cpus="20-39,60-79")]
    gpus: list[str] = []
    for s in range(2):
        hb = b.add_host_bridge(numas[s], key=str(s), bandwidth=gen3)
        for k in range(2):
            sw_index = 2 * s + k
            sw = b.add_switch(hb, key=str(sw_index), bandwidth=gen3)
            for j in range(2):
                gid = 2 * sw_index + j
                gpus.append(b.add_gpu(str(gid), sw, model=_V100[0], memory_bytes=_V100[1],
                                      bandwidth=gen3))
            b.add_nic(str(sw_index), sw, label=f"mlx5_{sw_index}", bandwidth=gen3, speed=12.5)
    for (x, y), n in DGX1_NVLINKS.items():
        b.add_nvlink(gpus[x], gpus[y], n)
    return b.build(name="dgx1-v100", source="built-in: NVIDIA DGX-1 (V100) hybrid cube-mesh")


def _p4d() -> Topology:
    gen4 = pcie_gbps(16.0, 16)
    b = TopologyBuilder()
    numas = [b.add_numa(0, cpus="0-23,48-71"), b.add_numa(1, cpus="24-47,72-95")]
    fabric = b.add_nvswitch(chips=6)
    for s in range(2):
        hb = b.add_host_bridge(numas[s], key=str(s), bandwidth=gen4)
        for k in range(2):
            sw_index = 2 * s + k
            sw = b.add_switch(hb, key=str(sw_index), bandwidth=gen4)
            for j in range(2):
                g = b.add_gpu(str(2 * sw_index + j), sw, model=_A100[0], memory_bytes=_A100[1],
                              bandwidth=gen4)
                b.add_nvlink(g, fabric, 12)
            b.add_nic(str(sw_index), sw, label=f"efa{sw_index}", bandwidth=gen4, speed=12.5)
    return b.build(name="p4d", source="built-in: AWS p4d.24xlarge (aws-ofi-nccl topology)")


def _pcie_8gpu() -> Topology:
    gen3 = pcie_gbps(8.0, 16)
    b = TopologyBuilder()
    for s in range(2):
        numa = b.add_numa(s, cpus=f"{16 * s}-{16 * s + 15}")
        hb = b.add_host_bridge(numa, key=str(s), bandwidth=gen3)
        for k in range(2):
            sw_index = 2 * s + k
            sw = b.add_switch(hb, key=f"{s}.{k}", bandwidth=gen3)
            for j in range(2):
                b.add_gpu(str(2 * sw_index + j), sw, model="PCIe GPU", bandwidth=gen3)
        b.add_nic(str(s), hb, label=f"eth{s}", bandwidth=gen3, speed=12.5)
    return b.build(name="pcie-8gpu", source="built-in: 2 sockets x 2 PCIe switches x 2 GPUs")


#: Built-in topologies by name; each value builds a fresh :class:`Topology`.
BUILTINS: dict[str, Callable[[], Topology]] = {
    "dgx-a100": _dgx_a100,
    "dgx-h100": _dgx_h100,
    "dgx1-v100": _dgx1_v100,
    "p4d": _p4d,
    "pcie-8gpu": _pcie_8gpu,
}

_CLUSTER = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)\*(?P<n>[0-9]+)$")  # ASCII digits only


def builtin_names() -> list[str]:
    """Names accepted by :func:`builtin` (each also as ``NAME*N``)."""
    return sorted(BUILTINS)


def builtin(spec: str) -> Topology:
    """A built-in topology by name, or ``"NAME*N"`` for N such machines on one network.

    >>> builtin("dgx1-v100").connection("0", "3")
    'NV2'
    >>> builtin("DGX-A100*2").name
    'dgx-a100*2'
    >>> builtin("nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: unknown built-in topology 'nope' (built-ins: ...)
    """
    if not isinstance(spec, str):
        raise InputError(f"a built-in topology is named by a string, got {spec!r}")
    m = _CLUSTER.match(spec.strip())
    name = (m.group("name") if m else spec.strip()).lower()  # DGX-A100 is dgx-a100
    if name not in BUILTINS:
        raise InputError(
            f"unknown built-in topology {name!r} (built-ins: {', '.join(builtin_names())})"
        )
    machine = BUILTINS[name]()
    if m is None:
        return machine
    digits = m.group("n")
    # int() refuses 4,300 digits and more: a size that long is out of range anyway
    n = int(digits) if len(digits.lstrip("0")) <= len(str(MAX_CLUSTER_MACHINES)) else -1
    if not 1 <= n <= MAX_CLUSTER_MACHINES:  # as cluster() checks, before building the copies
        shown = str(n) if n >= 0 else f"{digits.lstrip('0')[:20]}..."
        raise InputError(f"cluster size must be between 1 and {MAX_CLUSTER_MACHINES}, got {shown}")
    return cluster(machine, n, name=f"{name}*{n}")
