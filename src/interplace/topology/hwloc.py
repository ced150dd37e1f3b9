"""Import an hwloc XML topology (``lstopo --of xml``, hwloc 2.x; hwloc 1.x files mostly work).

The document nests ``<object type=...>``: ``Machine``, ``Package``, ``Group``, caches, cores;
``NUMANode`` objects (in hwloc 2 the memory children of a Package or Group); and the I/O
tree: ``Bridge`` (``bridge_type="0-1"`` is a host bridge), ``PCIDev`` and ``OSDev``
(``nvml0``, ``cuda0``, ``mlx5_0``, ``eth0``...). NVLink bandwidths (MB/s) are in
``<distances2hetero name="NVLinkBandwidth">`` (or ``<distances2>`` in older files).

Mapping onto the :class:`~interplace.topology.Topology` conventions:

* NUMA nodes are the ``NUMANode`` objects (``os_index``; CPU list from the cpuset). The PCI
  tree of a Package or Group hangs off the first NUMANode of that object; I/O attached where
  no NUMANode is in scope (e.g. on the Machine) goes to the lowest NUMA node, and a machine
  without NUMANode objects gets NUMA node 0.
* A host bridge absorbs its root ports. A bridge below a root port or a downstream port is a
  switch upstream port and starts a new PCIe switch; the bridges right below an upstream port
  are that switch's downstream ports. Switches and host bridges with no GPU or NIC below them
  are left out (for instance the PCIe switch that only carries NVSwitch management links).
  Link bandwidths are ``pci_link_speed`` (GB/s) when above 1.5, else the documented default.
* GPUs are NVIDIA (vendor ``10de``) PCI devices of class ``03xx``: other vendors' GPUs (an
  AMD card, a BMC's VGA chip) are skipped, as ``nvidia-smi`` would not list them. GPU ids come
  from the ``nvml<N>`` OS devices below them (``cuda<N>`` when no GPU has an NVML device);
  GPUs without one take the lowest free numbers in PCI bus order. NICs are class ``02xx``
  devices, ``NIC0``, ``NIC1``... in bus order, labelled with their OpenFabrics device name
  (``mlx5_0``) or else their first OS device name (``eth0``, ``ib0``) or else the bus id.
* NVSwitch chips (``subtype="NVSwitch"``, or NVIDIA class ``0680``) are counted into one
  NVSwitch fabric vertex. NVLink matrix entries become ``round(MB/s / (1000 x per-link GB/s))``
  bonded links (at least one): GPU-GPU entries as GPU-GPU edges, GPU-NVSwitch entries summed
  over the chips as the GPU's links into the fabric. GPU-CPU NVLinks (POWER8/9) are ignored:
  the graph has no NVLink edge kind between a GPU and a socket.
"""

from __future__ import annotations

import math
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from interplace.errors import InputError, read_input
from interplace.topology._graph import Topology, TopologyBuilder
from interplace.topology._pci import (
    CLASS_BASE_DISPLAY,
    CLASS_BASE_NETWORK,
    CLASS_OTHER_BRIDGE,
    assign_ids,
    bus_key,
    canonical_busid,
)
from interplace.topology._units import nvlink_link_gbps
from interplace.topology._xml import parse_xml
from interplace.topology.nccl import _mask_to_cpulist

__all__ = ["from_hwloc_xml", "read_hwloc_xml"]

_PCI_TYPE = re.compile(r"^\s*([0-9a-fA-F]{4})\s*\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")
_NVML = re.compile(r"^nvml(\d+)$")
_CUDA = re.compile(r"^cuda(\d+)$")
_KIB = re.compile(r"^\s*(\d+)\s*KiB\s*$")
_MIN_LINK_GBPS = 1.5  # hwloc reports unknown or virtual links as 0 or ~1 GB/s
_NVIDIA = 0x10DE
_NOT_MEMORY_PARENTS = frozenset({"Bridge", "PCIDev", "OSDev", "Misc"})  # no NUMANode below


@dataclass
class _Dev:
    """A GPU or NIC waiting for its id."""

    kind: str  # "gpu" | "nic"
    busid: str
    bandwidth: float | None
    gp: list[int]  # gp_index of the PCIDev and of its OS devices
    model: str | None = None
    memory_bytes: int | None = None
    nvml: int | None = None
    cuda: int | None = None
    label: str | None = None
    vertex: str = ""


@dataclass
class _PNode:
    """A host bridge or PCIe switch of the intermediate tree (pruned before building)."""

    key: str
    bandwidth: float | None
    busid: str | None = None
    switches: list[_PNode] = field(default_factory=list)
    devices: list[_Dev] = field(default_factory=list)

    def useful(self) -> bool:
        return bool(self.devices) or any(s.useful() for s in self.switches)


class _Reader:
    def __init__(self, what: str) -> None:
        self.what = what
        self.b = TopologyBuilder()
        self.roots: list[tuple[int, _PNode]] = []  # (NUMA os_index, host bridge)
        self.implicit: dict[int, _PNode] = {}
        self.devices: list[_Dev] = []
        self.nvswitch_gp: set[int] = set()
        self.by_gp: dict[int, ET.Element] = {}
        self.default_numa = 0

    def fail(self, problem: str) -> InputError:
        return InputError(f"{self.what}: {problem}")

    # ------------------------------------------------------------------ numbers
    def int_attr(self, el: ET.Element, attr: str) -> int | None:
        raw = el.get(attr)
        if raw is None:
            return None
        try:
            return int(raw.strip())
        except ValueError:
            raise self.fail(f"<object type={el.get('type')!r}> has a malformed {attr} "
                            f"{raw!r}") from None

    def link(self, el: ET.Element) -> float | None:
        raw = el.get("pci_link_speed")
        if raw is None or raw.strip() == "":
            return None
        try:
            gbps = float(raw)
        except ValueError:
            raise self.fail(f"PCI device {el.get('pci_busid')} has a malformed pci_link_speed "
                            f"{raw!r}") from None
        if not math.isfinite(gbps):
            raise self.fail(f"PCI device {el.get('pci_busid')} has pci_link_speed {raw!r}")
        return gbps if gbps > _MIN_LINK_GBPS else None

    def cpus(self, el: ET.Element) -> str | None:
        mask = el.get("cpuset")
        if not mask or "f...f" in mask:  # hwloc writes infinite sets as 0xf...f
            return None
        return _mask_to_cpulist(mask, self.what)

    # ------------------------------------------------------------------ NUMA nodes
    def read_numa(self, root: ET.Element) -> None:
        found: dict[int, ET.Element] = {}
        for el in root.iter("object"):
            gp = self.int_attr(el, "gp_index")
            if gp is not None:
                self.by_gp[gp] = el
            if el.get("type") != "NUMANode":
                continue
            idx = self.int_attr(el, "os_index")
            if idx is None or idx < 0:
                raise self.fail(f"a NUMANode has a missing or invalid os_index "
                                f"{el.get('os_index')!r}")
            if idx in found:
                raise self.fail(f"two NUMANode objects have os_index {idx}")
            found[idx] = el
        if not found:
            machine = root.find("object")
            self.b.add_numa(0, cpus=None if machine is None else self.cpus(machine))
            self.default_numa = 0
            return
        for idx in sorted(found):
            self.b.add_numa(idx, cpus=self.cpus(found[idx]))
        self.default_numa = min(found)

    def first_numa(self, el: ET.Element) -> int | None:
        """os_index of the first NUMANode among ``el``'s memory children, else of its
        descendants' (not through I/O objects): a Package whose NUMA nodes sit one level down,
        under Group or Die objects (sub-NUMA clustering, NPS), is the first of them's."""
        for c in el.findall("object"):
            t = c.get("type")
            if t == "NUMANode":
                return self.int_attr(c, "os_index")
            if t == "MemCache":
                inner = self.first_numa(c)
                if inner is not None:
                    return inner
        for c in el.findall("object"):
            if c.get("type") in _NOT_MEMORY_PARENTS:
                continue
            inner = self.first_numa(c)
            if inner is not None:
                return inner
        return None

    # ------------------------------------------------------------------ the walk
    def walk(self, el: ET.Element, numa: int | None, attach: _PNode | None,
             role: str | None) -> None:
        """Visit the children of ``el``. ``numa`` is the NUMA node in scope, ``attach`` the host
        bridge or switch that devices found here hang on, ``role`` the kind of bridge ``el`` is
        (``HB`` host bridge, ``RP`` root port, ``UP``/``DP`` switch up/downstream port)."""
        if el.get("type") == "NUMANode":  # hwloc 1.x: NUMA nodes are ordinary parents
            here = self.int_attr(el, "os_index")
        else:
            here = self.first_numa(el)
        if here is None:
            here = numa
        for child in el.findall("object"):
            t = child.get("type")
            if t == "Bridge":
                self.bridge(child, here, attach, role)
            elif t == "PCIDev":
                self.pcidev(child, here, attach)
            elif t != "OSDev":
                self.walk(child, here, attach, role)

    def bridge(self, el: ET.Element, numa: int | None, attach: _PNode | None,
               role: str | None) -> None:
        if attach is None or (el.get("bridge_type") or "").startswith("0-"):
            hb = _PNode(key=self.hb_key(el), bandwidth=None)
            self.roots.append((numa if numa is not None else self.default_numa, hb))
            self.walk(el, numa, hb, "HB")
        elif role == "HB":  # a root port: part of the host bridge
            self.walk(el, numa, attach, "RP")
        elif role == "UP":  # a downstream port: part of the switch
            self.walk(el, numa, attach, "DP")
        else:  # below a root port or a downstream port: a switch upstream port
            busid = self.busid(el)
            sw = _PNode(key=busid, bandwidth=self.link(el), busid=busid)
            attach.switches.append(sw)
            self.walk(el, numa, sw, "UP")

    def hb_key(self, el: ET.Element) -> str:
        rng = el.get("bridge_pci")
        m = re.match(r"^\s*([0-9a-fA-F]+):\[([0-9a-fA-F]+)-", rng or "")
        if m is not None:
            return f"{m.group(1).lower()}:{m.group(2).lower()}"
        if el.get("pci_busid"):
            return self.busid(el)
        return f"gp{el.get('gp_index', len(self.roots))}"

    def busid(self, el: ET.Element) -> str:
        raw = el.get("pci_busid")
        if raw is None or raw.strip() == "":
            raise self.fail(f"<object type={el.get('type')!r} gp_index={el.get('gp_index')}> "
                            "has no pci_busid")
        return canonical_busid(raw)

    def pcidev(self, el: ET.Element, numa: int | None, attach: _PNode | None) -> None:
        raw = el.get("pci_type")
        if raw is None:
            return
        m = _PCI_TYPE.match(raw)
        if m is None:
            raise self.fail(f"PCI device {el.get('pci_busid')} has a malformed pci_type {raw!r}")
        cls, vendor = int(m.group(1), 16), int(m.group(2), 16)
        gp = self.int_attr(el, "gp_index")
        if el.get("subtype") == "NVSwitch" or (cls == CLASS_OTHER_BRIDGE and vendor == _NVIDIA):
            if gp is not None:
                self.nvswitch_gp.add(gp)
            return
        if cls >> 8 == CLASS_BASE_DISPLAY and vendor == _NVIDIA:
            kind = "gpu"
        elif cls >> 8 == CLASS_BASE_NETWORK:
            kind = "nic"
        else:
            return
        dev = _Dev(kind=kind, busid=self.busid(el), bandwidth=self.link(el),
                   gp=[] if gp is None else [gp])
        self.os_devices(el, dev)
        if attach is None:  # a device with no bridge above it: give its NUMA node a host bridge
            n = numa if numa is not None else self.default_numa
            if n not in self.implicit:
                self.implicit[n] = _PNode(key=f"numa{n}", bandwidth=None)
                self.roots.append((n, self.implicit[n]))
            attach = self.implicit[n]
        attach.devices.append(dev)
        self.devices.append(dev)

    def os_devices(self, el: ET.Element, dev: _Dev) -> None:
        fabric_name = first_name = None
        for osdev in el.iter("object"):
            if osdev.get("type") != "OSDev":
                continue
            gp = self.int_attr(osdev, "gp_index")
            if gp is not None:
                dev.gp.append(gp)
            name = osdev.get("name") or ""
            info = {i.get("name"): i.get("value") for i in osdev.findall("info")}
            first_name = first_name or name or None
            if "NodeGUID" in info or osdev.get("subtype") == "OpenFabrics":
                fabric_name = fabric_name or name or None
            if m := _NVML.match(name):
                dev.nvml = int(m.group(1))
            elif m := _CUDA.match(name):
                dev.cuda = int(m.group(1))
            if dev.kind == "gpu" and info.get("GPUModel") and (
                    dev.model is None or _NVML.match(name) or _CUDA.match(name)):
                dev.model = info["GPUModel"]
            mem = info.get("CUDAGlobalMemorySize")
            if dev.kind == "gpu" and mem is not None:
                km = _KIB.match(mem)
                if km is None:
                    raise self.fail(f"GPU {dev.busid} has a malformed CUDAGlobalMemorySize "
                                    f"{mem!r}")
                dev.memory_bytes = int(km.group(1)) * 1024
        dev.label = fabric_name or first_name or dev.busid

    # ------------------------------------------------------------------ building
    def emit(self, parent: str, node: _PNode) -> None:
        for dev in node.devices:
            dev.vertex = parent
        for sw in node.switches:
            if sw.useful():
                if f"sw:{sw.key}" in self.b.graph:
                    raise self.fail(f"two PCIe switches have bus id {sw.key}")
                self.emit(self.b.add_switch(parent, key=sw.key, busid=sw.busid,
                                            bandwidth=sw.bandwidth), sw)

    def gpu_ids(self, gpus: list[_Dev]) -> list[int]:
        if any(g.nvml is not None for g in gpus):
            explicit = [g.nvml for g in gpus]
        elif any(g.cuda is not None for g in gpus):
            explicit = [g.cuda for g in gpus]
        else:
            explicit = [None for _ in gpus]
        given = [e for e in explicit if e is not None]
        if len(set(given)) != len(given):
            raise self.fail("two GPUs have the same nvml/cuda device number")
        return assign_ids(explicit, [g.busid for g in gpus])

    def build(self, root: ET.Element, name: str, source: str) -> Topology:
        gpus = [d for d in self.devices if d.kind == "gpu"]
        if not gpus:
            raise self.fail("no NVIDIA GPU found (no PCIDev of class 03xx from vendor 10de)")
        keys: set[str] = set()
        for numa, hb in self.roots:
            if not hb.useful():
                continue
            key = hb.key if hb.key not in keys else f"{hb.key}.{len(keys)}"
            keys.add(key)
            self.emit(self.b.add_host_bridge(f"numa:{numa}", key=key), hb)
        seen: set[str] = set()
        for d in self.devices:
            if d.busid in seen:
                raise self.fail(f"two GPUs or NICs have bus id {d.busid}")
            seen.add(d.busid)
        gpu_of_gp: dict[int, _Dev] = {}
        for gid, g in zip(self.gpu_ids(gpus), gpus, strict=True):
            g.vertex = self.b.add_gpu(str(gid), g.vertex, model=g.model, busid=g.busid,
                                      memory_bytes=g.memory_bytes, bandwidth=g.bandwidth)
            gpu_of_gp.update(dict.fromkeys(g.gp, g))
        nics = sorted((d for d in self.devices if d.kind == "nic"), key=lambda d: bus_key(d.busid))
        for i, nic in enumerate(nics):
            self.b.add_nic(f"NIC{i}", nic.vertex, label=nic.label, busid=nic.busid,
                           bandwidth=nic.bandwidth)
        self.nvlinks(root, gpu_of_gp)
        return self.b.build(name=name, source=source)

    # ------------------------------------------------------------------ NVLink
    def matrix(self, el: ET.Element) -> tuple[list[int], list[int]]:
        """(gp_index of each object, row-major values) of an NVLinkBandwidth matrix."""
        nb = self.int_attr(el, "nbobjs")
        if nb is None or nb <= 0:
            raise self.fail(f"<{el.tag} name='NVLinkBandwidth'> has a missing or bad nbobjs")
        tokens = " ".join(i.text or "" for i in el.findall("indexes")).split()
        raw = " ".join(v.text or "" for v in el.findall("u64values")).split()
        if len(tokens) != nb or len(raw) != nb * nb:
            raise self.fail(f"NVLinkBandwidth matrix has {len(tokens)} indexes and {len(raw)} "
                            f"values for {nb} objects")
        try:
            values = [int(v) for v in raw]
        except ValueError:
            raise self.fail("NVLinkBandwidth matrix has a non-integer value") from None
        objtype = el.get("type")
        os_indexing = el.tag == "distances2" and el.get("indexing") == "os"
        gps: list[int] = []
        for tok in tokens:
            num = tok.rsplit(":", 1)[-1]
            if not num.isdigit():
                raise self.fail(f"NVLinkBandwidth matrix has a malformed index {tok!r}")
            if os_indexing:  # resolve an os_index of the matrix's object type to its gp_index
                match = [gp for gp, o in self.by_gp.items()
                         if o.get("type") == objtype and o.get("os_index") == num]
                gps.append(match[0] if match else -1)
            else:
                gps.append(int(num))
        return gps, values

    def nvlinks(self, root: ET.Element, gpu_of_gp: dict[int, _Dev]) -> None:
        pairs: dict[tuple[str, str], int] = {}
        fabric: dict[tuple[str, int], int] = {}  # (GPU vertex, chip gp) -> links
        chips: set[int] = set(self.nvswitch_gp)
        for el in [*root.iter("distances2hetero"), *root.iter("distances2")]:
            if el.get("name") != "NVLinkBandwidth":
                continue
            gps, values = self.matrix(el)
            nb = len(gps)
            for i in range(nb):
                a = gpu_of_gp.get(gps[i])
                if a is None:
                    continue  # a CPU (POWER NVLink to the socket) or an unknown object
                per_link = nvlink_link_gbps(a.model)
                for j in range(nb):
                    mbps = max(values[i * nb + j], values[j * nb + i])
                    if i == j or mbps <= 0:
                        continue
                    links = max(1, round(mbps / (1000.0 * per_link)))
                    other = gpu_of_gp.get(gps[j])
                    if other is not None and other is not a:
                        u, v = sorted((a.vertex, other.vertex))
                        pairs[u, v] = max(pairs.get((u, v), 0), links)
                    elif gps[j] in self.nvswitch_gp:
                        key = (a.vertex, gps[j])
                        fabric[key] = max(fabric.get(key, 0), links)
                        chips.add(gps[j])
        models = {g.vertex: g.model for g in gpu_of_gp.values()}
        for (u, v), links in sorted(pairs.items()):
            self.b.add_nvlink(u, v, links, link_bandwidth=nvlink_link_gbps(models[u]))
        if fabric:
            sw = self.b.add_nvswitch(chips=len(chips))
            per_gpu: dict[str, int] = {}
            for (gpu, _chip), links in fabric.items():
                per_gpu[gpu] = per_gpu.get(gpu, 0) + links
            for gpu, links in sorted(per_gpu.items()):
                self.b.add_nvlink(gpu, sw, links, link_bandwidth=nvlink_link_gbps(models[gpu]))


def _from_hwloc(data: str | bytes, name: str, source: str) -> Topology:
    what = f"hwloc topology {name}"
    root = parse_xml(data, what)
    if root.tag != "topology" or root.find("object") is None:
        raise InputError(f"{what}: not an hwloc topology (root <{root.tag}>, expected "
                         "<topology> holding a Machine <object>)")
    reader = _Reader(what)
    reader.read_numa(root)
    reader.walk(root, None, None, None)
    return reader.build(root, name, source)


def from_hwloc_xml(data: str | bytes, name: str = "hwloc") -> Topology:
    """A :class:`~interplace.topology.Topology` from the text of an hwloc XML export.

    >>> xml = '''<topology version="2.0">
    ...  <object type="Machine" os_index="0" cpuset="0x0000000f" gp_index="1">
    ...   <object type="NUMANode" os_index="0" cpuset="0x0000000f" gp_index="2"/>
    ...   <object type="Bridge" gp_index="3" bridge_type="0-1" depth="0" bridge_pci="0000:[00-02]">
    ...    <object type="Bridge" gp_index="4" bridge_type="1-1" depth="1"
    ...            pci_busid="0000:00:01.0" pci_type="0604 [8086:2030] [0000:0000] 00 00">
    ...     <object type="PCIDev" gp_index="5" pci_busid="0000:01:00.0"
    ...             pci_type="0302 [10de:20b0] [10de:134f] a1 00" pci_link_speed="31.507692">
    ...      <object type="OSDev" gp_index="6" name="nvml0" osdev_type="1">
    ...       <info name="GPUModel" value="NVIDIA A100-SXM4-40GB"/>
    ...      </object>
    ...     </object>
    ...    </object>
    ...   </object>
    ...  </object>
    ... </topology>'''
    >>> t = from_hwloc_xml(xml, name="demo")
    >>> t.gpus(), t.gpu("0").model, t.gpu("0").numa
    (['0'], 'NVIDIA A100-SXM4-40GB', 0)
    """
    return _from_hwloc(data, name, source=f"hwloc XML ({name})")


def read_hwloc_xml(path: str | os.PathLike[str]) -> Topology:
    """Read an hwloc XML file; the topology is named after the file's stem.

    >>> read_hwloc_xml("/nonexistent/dgx2.xml")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: no such file: /nonexistent/dgx2.xml
    """
    p = Path(path)
    data = read_input(p)
    return _from_hwloc(data, p.stem, source=f"hwloc XML: {p}")
