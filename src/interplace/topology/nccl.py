"""Import an NCCL topology XML file (the ``NCCL_TOPO_FILE`` / ``NCCL_TOPO_DUMP_FILE`` format).

The document is ``<system>`` with one ``<cpu numaid= affinity=>`` per NUMA node, holding a
tree of ``<pci busid= class= link_speed= link_width=>`` elements: PCIe switches (class
``0x0604xx``) nest further ``<pci>``; GPUs (``0x03xxxx``) may carry ``<gpu dev=>`` with
``<nvlink target= count= tclass=>`` children; NICs (``0x02xxxx``) may carry
``<nic><net name= speed=>``. A ``<nic>`` directly below ``<cpu>`` has no PCI parent.

Mapping onto the :class:`~interplace.topology.Topology` conventions:

* each ``<cpu>`` is a NUMA node with exactly one host bridge (NCCL files list no host bridges;
  NCCL itself classes GPUs below different switches of one CPU as ``PHB``);
* switches keep their nesting; any other class of ``<pci>`` is skipped but its children are
  still read;
* GPU ids come from ``<gpu dev=>``; GPUs without one are numbered in PCI bus id order (as
  ``nvidia-smi`` and ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` do), taking the lowest free numbers;
* NICs are ``NIC0``, ``NIC1``... in bus id order (NICs without a bus id last), labelled with
  the name of their first ``<net>`` (else the bus id), at its ``speed`` (Mb/s) / 8000 GB/s;
* GPU-GPU NVLinks become ``nvlink`` edges (each link is listed from both ends; the larger
  count is kept, not the sum); links to an NVSwitch (``tclass=0x068000``) go into one NVSwitch
  fabric vertex. A link whose target is the GPU's own bus id (a quirk of some NCCL dumps, e.g.
  Azure's NC A100 v4 file) and links to devices not in the file are ignored. NCCL files do
  not name the GPU model, so the per-link bandwidth is the NVLink 2-4 default.

Every class-``0x03`` device counts as a GPU: NCCL only ever writes the CUDA devices it sees.
"""

from __future__ import annotations

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
    CLASS_PCI_BRIDGE,
    assign_ids,
    bus_key,
    canonical_busid,
)
from interplace.topology._units import nvlink_link_gbps, parse_link_speed
from interplace.topology._xml import parse_xml

__all__ = ["from_nccl_xml", "read_nccl_xml"]


def _mask_to_cpulist(mask: str, what: str) -> str | None:
    """CPU list (``"0-23,48-71"``) of a comma-separated hex mask, most significant word first.

    Empty words count as zero (hwloc writes ``0x00000303,,0x0``). Returns None for an empty
    mask.

    >>> _mask_to_cpulist("000000ff,ffff0000,00ffffff", "demo")
    '0-23,48-71'
    >>> _mask_to_cpulist("0x00000303,,0x3", "demo")
    '0-1,64-65,72-73'
    """
    words = [w.strip() for w in mask.strip().split(",")]
    value = 0
    for word in words:
        digits = word[2:] if word.lower().startswith("0x") else word
        if digits == "":
            digits = "0"
        if not re.fullmatch(r"[0-9a-fA-F]{1,8}", digits):
            raise InputError(f"{what}: malformed CPU mask {mask!r} (expected 32-bit hex words)")
        value = (value << 32) | int(digits, 16)
    ranges: list[str] = []
    bit = 0
    while value >> bit:
        if (value >> bit) & 1:
            start = bit
            while (value >> (bit + 1)) & 1:
                bit += 1
            ranges.append(str(start) if start == bit else f"{start}-{bit}")
        bit += 1
    return ",".join(ranges) or None


@dataclass
class _PendingGpu:
    busid: str
    parent: str
    bandwidth: float | None
    dev: int | None
    nvlinks: list[tuple[str, int, int]] = field(default_factory=list)  # target, count, tclass


@dataclass
class _PendingNic:
    busid: str | None
    parent: str
    label: str | None
    speed: float | None
    bandwidth: float | None


class _Reader:
    """One pass over the document: NUMA nodes, host bridges and switches go straight into the
    builder; GPUs and NICs wait until every id can be assigned."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.b = TopologyBuilder()
        self.gpus: list[_PendingGpu] = []
        self.nics: list[_PendingNic] = []

    def fail(self, problem: str) -> InputError:
        return InputError(f"{self.what}: {problem}")

    def int_attr(self, el: ET.Element, attr: str, base: int = 10) -> int | None:
        raw = el.get(attr)
        if raw is None or raw.strip() == "":
            return None
        try:
            return int(raw.strip(), base)
        except ValueError:
            raise self.fail(f"<{el.tag} {attr}={raw!r}> is not an integer") from None

    def link(self, el: ET.Element) -> float | None:
        try:
            return parse_link_speed(el.get("link_speed"), el.get("link_width"))
        except InputError as exc:
            raise self.fail(f"<pci busid={el.get('busid')!r}>: {exc}") from None

    def pci_class(self, el: ET.Element, busid: str) -> tuple[int, int]:
        """(base class, class+subclass) of a ``<pci>``, e.g. ``(0x06, 0x0604)``."""
        raw = el.get("class")
        if raw is None or raw.strip() == "":
            raise self.fail(f"<pci busid={busid}> has no class attribute")
        digits = raw.strip().lower().removeprefix("0x")
        if not re.fullmatch(r"[0-9a-f]{2}|[0-9a-f]{4}|[0-9a-f]{6}", digits):
            raise self.fail(f"<pci busid={busid}> has a malformed class {raw!r}")
        # NCCL itself writes class="0x02" (base class only) on the NICs it adds.
        top = int(digits.ljust(4, "0")[:4], 16)
        return top >> 8, top

    def read_cpu(self, cpu: ET.Element) -> None:
        numaid = self.int_attr(cpu, "numaid")
        if numaid == -1:
            # NCCL writes numaid="-1" when the kernel reports no NUMA node (single-socket VMs):
            # that is one CPU, which we number like the kernel would, from 0.
            numaid = 0
        if numaid is None or numaid < 0:
            raise self.fail(f"<cpu> has a missing or invalid numaid {cpu.get('numaid')!r}")
        if f"numa:{numaid}" in self.b.graph:
            raise self.fail(f"two <cpu> elements have numaid={numaid}")
        affinity = cpu.get("affinity")
        cpus = _mask_to_cpulist(affinity, self.what) if affinity else None
        numa = self.b.add_numa(numaid, cpus=cpus)
        hb = self.b.add_host_bridge(numa, key=str(numaid))
        self.walk(cpu, hb)

    def walk(self, el: ET.Element, parent: str) -> None:
        for child in el:
            if child.tag == "pci":
                self.read_pci(child, parent)
            elif child.tag == "nic":
                self.read_nic(child, None, parent, None)

    def read_pci(self, el: ET.Element, parent: str) -> None:
        raw_busid = el.get("busid")
        if raw_busid is None or raw_busid.strip() == "":
            raise self.fail("a <pci> element has no busid attribute")
        busid = canonical_busid(raw_busid)
        base, top = self.pci_class(el, busid)
        if top == CLASS_PCI_BRIDGE:
            if f"sw:{busid}" in self.b.graph:
                raise self.fail(f"two PCIe switches have busid {busid}")
            sw = self.b.add_switch(parent, busid=busid, bandwidth=self.link(el))
            self.walk(el, sw)
        elif base == CLASS_BASE_DISPLAY:
            self.read_gpu(el, busid, parent)
        elif base == CLASS_BASE_NETWORK:
            nic = el.find("nic")
            self.read_nic(nic if nic is not None else el, busid, parent, self.link(el))
        else:
            self.walk(el, parent)

    def read_gpu(self, el: ET.Element, busid: str, parent: str) -> None:
        gpu_el = el.find("gpu")
        dev = None if gpu_el is None else self.int_attr(gpu_el, "dev")
        if dev is not None and dev < 0:
            raise self.fail(f"<gpu dev={dev}> at {busid} is negative")
        pending = _PendingGpu(busid=busid, parent=parent, bandwidth=self.link(el), dev=dev)
        for nv in gpu_el.iter("nvlink") if gpu_el is not None else ():
            target = nv.get("target")
            count = self.int_attr(nv, "count")
            tclass = self.int_attr(nv, "tclass", base=16)
            if target is None or count is None or tclass is None:
                raise self.fail(f"<nvlink> of GPU {busid} needs target, count and tclass")
            if count <= 0:
                raise self.fail(f"<nvlink> of GPU {busid} has a non-positive count {count}")
            pending.nvlinks.append((canonical_busid(target), count, tclass))
        self.gpus.append(pending)

    def read_nic(self, el: ET.Element, busid: str | None, parent: str,
                 bandwidth: float | None) -> None:
        net = el.find("net") if el.tag == "nic" else None
        label = speed = None
        if net is not None:
            label = net.get("name") or None
            raw = net.get("speed")
            if raw is not None and raw.strip() != "":
                try:
                    mbps = float(raw)
                except ValueError:
                    raise self.fail(f"<net name={label!r}> has a malformed speed {raw!r}") from None
                if not mbps >= 0:  # negative or NaN (0: not known, as a link that is down)
                    raise self.fail(f"<net name={label!r}> has a malformed speed {raw!r}")
                if mbps > 0 and mbps != float("inf"):
                    speed = mbps / 8000.0
        self.nics.append(_PendingNic(busid=busid, parent=parent, label=label or busid,
                                     speed=speed, bandwidth=bandwidth))

    def finish(self, name: str, source: str) -> Topology:
        if not self.gpus:
            raise self.fail("no GPU found (no <pci> with a class 0x03xxxx)")
        devs = [g.dev for g in self.gpus]
        explicit = [d for d in devs if d is not None]
        if len(set(explicit)) != len(explicit):
            raise self.fail("two GPUs have the same <gpu dev=> number")
        ids = assign_ids(devs, [g.busid for g in self.gpus])
        by_bus: dict[str, str] = {}
        model = None  # NCCL files do not name the GPU model
        for gid, g in zip(ids, self.gpus, strict=True):
            if g.busid in by_bus:
                raise self.fail(f"two GPUs have busid {g.busid}")
            by_bus[g.busid] = self.b.add_gpu(str(gid), g.parent, busid=g.busid,
                                             bandwidth=g.bandwidth)
        seen_bus: set[str] = set()
        named: set[str] = set()
        nics = []
        for nic in self.nics:
            if nic.busid is not None:
                if nic.busid in seen_bus:
                    raise self.fail(f"two NICs have busid {nic.busid}")
                seen_bus.add(nic.busid)
            elif nic.label in named:
                continue  # one NIC without a bus id listed under each <cpu> (NCCL 2.27's dumps)
            else:
                named.add(str(nic.label))
            nics.append(nic)
        order = sorted(range(len(nics)), key=lambda k: bus_key(nics[k].busid))
        for i, k in enumerate(order):
            nic = nics[k]
            self.b.add_nic(f"NIC{i}", nic.parent, label=nic.label, busid=nic.busid,
                           bandwidth=nic.bandwidth, speed=nic.speed)
        per_link = nvlink_link_gbps(model)
        pairs: dict[tuple[str, str], int] = {}
        to_fabric: dict[str, int] = {}
        for g in self.gpus:
            me = by_bus[g.busid]
            for target, count, tclass in g.nvlinks:
                if tclass >> 8 == CLASS_OTHER_BRIDGE:
                    to_fabric[me] = to_fabric.get(me, 0) + count
                elif tclass >> 16 == CLASS_BASE_DISPLAY and target != g.busid and target in by_bus:
                    a, b = sorted((me, by_bus[target]))
                    pairs[a, b] = max(pairs.get((a, b), 0), count)
                # links to the CPU (POWER) or to devices missing from the file are ignored
        for (a, b), count in pairs.items():
            self.b.add_nvlink(a, b, count, link_bandwidth=per_link)
        if to_fabric:
            fabric = self.b.add_nvswitch()
            for gpu, count in to_fabric.items():
                self.b.add_nvlink(gpu, fabric, count, link_bandwidth=per_link)
        return self.b.build(name=name, source=source)


def _from_nccl(data: str | bytes, name: str, source: str) -> Topology:
    what = f"NCCL topology {name}"
    root = parse_xml(data, what)
    if root.tag != "system":
        raise InputError(f"{what}: root element is <{root.tag}>, expected <system>")
    cpus = root.findall("cpu")
    if not cpus:
        raise InputError(f"{what}: no <cpu> element")
    reader = _Reader(what)
    for cpu in cpus:
        reader.read_cpu(cpu)
    return reader.finish(name, source)


def from_nccl_xml(data: str | bytes, name: str = "nccl") -> Topology:
    """A :class:`~interplace.topology.Topology` from the text of an NCCL topology XML file.

    >>> xml = '''<system version="1">
    ...   <cpu numaid="0" affinity="0000ffff">
    ...     <pci busid="ffff:ff:01.0" class="0x060400" link_speed="16 GT/s" link_width="16">
    ...       <pci busid="0000:1b:00.0" class="0x030200"/>
    ...       <pci busid="0000:1a:00.0" class="0x030200"/>
    ...       <pci busid="0000:1c:00.0" class="0x020700">
    ...         <nic><net name="mlx5_0" speed="200000"/></nic>
    ...       </pci>
    ...     </pci>
    ...   </cpu>
    ... </system>'''
    >>> t = from_nccl_xml(xml, name="demo")
    >>> t.gpus(), t.gpu("0").busid, t.connection("0", "1")
    (['0', '1'], '0000:1a:00.0', 'PIX')
    >>> t.nearest_nic("0"), t.graph.nodes["nic:NIC0"]["speed"]
    ('nic:NIC0', 25.0)
    """
    return _from_nccl(data, name, source=f"NCCL topology XML ({name})")


def read_nccl_xml(path: str | os.PathLike[str]) -> Topology:
    """Read an NCCL topology XML file; the topology is named after the file's stem.

    >>> read_nccl_xml("/nonexistent/p4d.xml")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: no such file: /nonexistent/p4d.xml
    """
    p = Path(path)
    data = read_input(p)
    return _from_nccl(data, p.stem, source=f"NCCL topology XML: {p}")
