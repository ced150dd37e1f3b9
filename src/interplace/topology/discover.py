"""Live topology discovery on a GPU machine from NVML and sysfs.

.. note::
   The test fixture of this module (``tests/topology/test_discover.py``) is a synthetic sysfs
   tree and NVML recording, modelled on a real two-socket box, because no GPU machine was
   available when it was written. ``interplace topo --discover --record DIR`` captures a real
   machine's readings (:func:`record_discovery`: ``DIR/nvml.json`` and ``DIR/sysfs/``) so that
   they can replace it; :func:`replay_discovery` turns such a directory back into a topology.

Where each part of the graph comes from:

* GPUs (in NVML index order, ids ``"0".."n-1"``), their model, memory and PCI bus id, and
  their NVLinks come from an :class:`NvmlBackend`: :class:`PynvmlBackend` on a live machine,
  :class:`ReplayBackend` for recorded readings.
* The PCIe tree comes from sysfs. ``/sys/bus/pci/devices/<busid>`` links to
  ``/sys/devices/pci<domain>:<bus>/<root port>/<switch up>/<switch down>/.../<busid>``; the
  ``pci<domain>:<bus>`` component is the host bridge (root complex), the root port below it
  belongs to the host bridge, and below it each upstream port starts a PCIe switch that owns
  the downstream port directly below it (the same rule lspci uses), nested switches repeating
  the pattern. A device on the way down whose ``class`` is not a PCI bridge (``0x0604xx``) is
  skipped; where several ``pci<domain>:<bus>`` components appear (Intel VMD), the last one is
  the host bridge.
* NUMA nodes come from each device's ``numa_node`` (``-1``, unknown, counts as node 0) and
  their CPU lists from ``/sys/devices/system/node/node<N>/cpulist``. A node with CPUs and no
  device still gets a vertex; a CPU-less node (GPU or CXL memory) only when a device names it.
* NICs are every PCI device of class ``0x02xxxx`` (SR-IOV virtual functions left out),
  labelled by their ``/sys/class/infiniband`` name, else their ``/sys/class/net`` name, else
  their bus id; their network speed comes from the InfiniBand port ``rate`` or the interface
  ``speed`` (default :data:`~interplace.topology._units.DEFAULT_NIC_GBPS`).
* PCIe bandwidths come from ``current_link_speed`` x ``current_link_width`` of the device at
  the lower end of each link (a switch's upstream port for its uplink, the GPU or NIC for its
  own link); a missing or unknown reading gives the default. A GPU lowers its link speed when
  idle, so a GPU link is read at the highest speed both of its ends support
  (``max_link_speed``) when that is above the current one. A host bridge's link to its socket
  gets the bandwidth of its fastest link below it.
* NVLink: an active link whose remote end is another GPU counts towards that pair's bond (the
  larger of the two ends' counts); a link whose remote end is an NVSwitch (or, where the driver
  gives no remote device type, a bus id that is no GPU) joins the machine's NVSwitch fabric.
  Links to a GPU NVML does not show (a container with some GPUs hidden) and to IBM NPUs are
  left out. Per-link bandwidth is :func:`~interplace.topology._units.nvlink_link_gbps`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal, Protocol, cast, runtime_checkable

from interplace.errors import InputError, atomic_write, is_int, parse_json, read_json
from interplace.topology._graph import Topology, TopologyBuilder
from interplace.topology._pci import CLASS_BASE_NETWORK, CLASS_PCI_BRIDGE, format_busid
from interplace.topology._units import nvlink_link_gbps, parse_gts, pcie_gbps

__all__ = [
    "NvLink",
    "NvmlBackend",
    "PynvmlBackend",
    "RemoteType",
    "ReplayBackend",
    "discover",
    "normalize_busid",
    "record_discovery",
    "replay_discovery",
    "snapshot_sysfs",
]

#: Remote end of an NVLink as NVML reports it (``None`` where the driver does not say).
RemoteType = Literal["gpu", "ibmnpu", "switch"]

_REMOTE_TYPES: tuple[RemoteType, ...] = ("gpu", "ibmnpu", "switch")
_REPLAY_FORMAT = "interplace-nvml"
_REPLAY_VERSION = 1
_NVML_FILE = "nvml.json"
_SYSFS_DIR = "sysfs"

_BUSID = re.compile(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$")
_HOST_BRIDGE = re.compile(r"^pci([0-9a-f]{4,8}:[0-9a-f]{2})$")
_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_IB_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/s", re.IGNORECASE)
_NODE_DIR = re.compile(r"^node([0-9]+)$")


def normalize_busid(busid: str) -> str:
    """A PCI bus id in sysfs form: lowercase, 4-hex-digit domain (``"0000:17:00.0"``).

    NVML writes the domain with 8 digits; a missing domain means domain 0.

    >>> normalize_busid("00000000:1B:00.0")
    '0000:1b:00.0'
    >>> normalize_busid("17:00.0")
    '0000:17:00.0'
    """
    m = _BUSID.match(str(busid).strip().lower())
    if m is None:
        raise InputError(f"malformed PCI bus id {busid!r} (expected e.g. '0000:17:00.0')")
    domain, bus, dev, fn = m.groups()
    return format_busid(int(domain or "0", 16), int(bus, 16), int(dev, 16), int(fn))


# --------------------------------------------------------------------------- NVML backends
@dataclass(frozen=True)
class NvLink:
    """One active NVLink of a GPU: its link index and what sits at the other end.

    >>> NvLink(0, "0000:1c:00.0", "gpu").remote_type
    'gpu'
    """

    link: int
    remote_busid: str
    remote_type: RemoteType | None = None


@runtime_checkable
class NvmlBackend(Protocol):
    """The NVML readings discovery needs, per device index ``0..device_count()-1``."""

    def device_count(self) -> int:
        """Number of GPUs."""
        ...

    def pci_bus_id(self, index: int) -> str:
        """PCI bus id in sysfs form (see :func:`normalize_busid`)."""
        ...

    def name(self, index: int) -> str:
        """Model name, e.g. ``"NVIDIA A100-SXM4-40GB"``."""
        ...

    def memory_total(self, index: int) -> int:
        """Total memory in bytes."""
        ...

    def nvlinks(self, index: int) -> Sequence[NvLink]:
        """The active NVLinks (empty where the GPU or driver has no NVLink)."""
        ...


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class PynvmlBackend:
    """Live readings through NVML (``pynvml`` from nvidia-ml-py); use it as a context manager.

    ``with PynvmlBackend() as nvml:`` initialises NVML and shuts it down on exit. A missing
    library or driver raises :class:`InputError` ``"NVML is not available: <reason>"``. NVLink
    calls that fail (not supported, no such link, an old driver) count as "no link".
    """

    def __init__(self) -> None:
        self._nv: Any = None
        self._depth = 0
        self._handles: dict[int, Any] = {}

    @property
    def active(self) -> bool:
        """Whether NVML is initialised (inside the ``with`` block)."""
        return self._nv is not None

    def __enter__(self) -> PynvmlBackend:
        if self._nv is not None:
            self._depth += 1
            return self
        try:
            import pynvml
        except ImportError as exc:
            raise InputError(f"NVML is not available: {exc}") from None
        try:
            pynvml.nvmlInit()
        except (pynvml.NVMLError, OSError) as exc:
            raise InputError(f"NVML is not available: {exc}") from None
        self._nv = pynvml
        self._depth = 1
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._depth = max(self._depth - 1, 0)
        if self._depth > 0:
            return
        nv, self._nv = self._nv, None
        self._handles.clear()
        if nv is not None:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlShutdown()

    def _call(self, what: str, fn: str, *args: Any) -> Any:
        if self._nv is None:
            raise InputError("NVML is not initialised: use PynvmlBackend in a 'with' block")
        try:
            return getattr(self._nv, fn)(*args)
        except self._nv.NVMLError as exc:
            raise InputError(f"NVML {fn} failed for {what}: {exc}") from None

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._call(f"GPU {index}", "nvmlDeviceGetHandleByIndex", index)
        return self._handles[index]

    def device_count(self) -> int:
        """Number of GPUs NVML sees."""
        return int(self._call("the machine", "nvmlDeviceGetCount"))

    def pci_bus_id(self, index: int) -> str:
        """Bus id of GPU ``index``."""
        info = self._call(f"GPU {index}", "nvmlDeviceGetPciInfo", self._handle(index))
        return _pci_info_busid(info)

    def name(self, index: int) -> str:
        """Model name of GPU ``index``."""
        return _text(self._call(f"GPU {index}", "nvmlDeviceGetName", self._handle(index)))

    def memory_total(self, index: int) -> int:
        """Total memory of GPU ``index`` in bytes."""
        info = self._call(f"GPU {index}", "nvmlDeviceGetMemoryInfo", self._handle(index))
        return int(info.total)

    def nvlinks(self, index: int) -> list[NvLink]:
        """Active NVLinks of GPU ``index``, probing links ``0..NVML_NVLINK_MAX_LINKS-1``."""
        h = self._handle(index)
        nv = self._nv
        types: dict[int, RemoteType] = {
            int(getattr(nv, "NVML_NVLINK_DEVICE_TYPE_GPU", 0)): "gpu",
            int(getattr(nv, "NVML_NVLINK_DEVICE_TYPE_IBMNPU", 1)): "ibmnpu",
            int(getattr(nv, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)): "switch",
        }
        out: list[NvLink] = []
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                if not nv.nvmlDeviceGetNvLinkState(h, link):
                    continue
                remote = _pci_info_busid(nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link))
            except (nv.NVMLError, AttributeError, InputError):
                continue
            try:
                rtype: RemoteType | None = types.get(
                    int(nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)))
            except (nv.NVMLError, AttributeError):
                rtype = None
            out.append(NvLink(link=link, remote_busid=remote, remote_type=rtype))
        return out


def _pci_info_busid(info: Any) -> str:
    """Bus id of an ``nvmlPciInfo_t``: ``busId``, else ``busIdLegacy``, else its numbers."""
    for attr in ("busId", "busIdLegacy"):
        raw = _text(getattr(info, attr, "") or "").strip("\x00 ")
        if raw:
            with contextlib.suppress(InputError):
                return normalize_busid(raw)
    return normalize_busid(f"{int(info.domain):x}:{int(info.bus):x}:{int(info.device):x}.0")


class ReplayBackend:
    """Recorded NVML readings served through the :class:`NvmlBackend` interface.

    The document is ``{"format": "interplace-nvml", "version": 1, "hostname": ...,
    "devices": [{"busid", "name", "memory_bytes", "nvlinks": [{"link", "remote_busid",
    "remote_type"}]}]}`` (``format``, ``version`` and ``hostname`` optional;
    ``remote_type`` is ``"gpu"``, ``"ibmnpu"``, ``"switch"`` or null).
    :meth:`record` writes it from any backend.

    >>> rb = ReplayBackend({"devices": [{"busid": "00000000:1B:00.0", "memory_bytes": 1024,
    ...     "name": "NVIDIA A100-SXM4-40GB",
    ...     "nvlinks": [{"link": 0, "remote_busid": "0000:1c:00.0", "remote_type": "gpu"}]}]})
    >>> rb.device_count(), rb.pci_bus_id(0), rb.nvlinks(0)[0].remote_busid
    (1, '0000:1b:00.0', '0000:1c:00.0')
    >>> ReplayBackend.record(rb)["devices"] == ReplayBackend(ReplayBackend.record(rb)).record(rb)[
    ...     "devices"]
    True
    """

    def __init__(self, data: Mapping[str, Any], what: str = "NVML recording") -> None:
        self.what = what
        if not isinstance(data, Mapping):
            raise InputError(f"malformed {what}: expected a JSON object")
        fmt = data.get("format", _REPLAY_FORMAT)
        if fmt != _REPLAY_FORMAT:
            raise InputError(f"malformed {what}: format is {fmt!r}, expected {_REPLAY_FORMAT!r}")
        version = data.get("version", _REPLAY_VERSION)
        if version != _REPLAY_VERSION:
            raise InputError(f"unsupported {what}: version {version!r} (this release reads 1)")
        hostname = data.get("hostname")
        if hostname is not None and not isinstance(hostname, str):
            raise InputError(f"malformed {what}: hostname must be a string")
        self.hostname: str | None = hostname
        devices = data.get("devices")
        if not isinstance(devices, list):
            raise InputError(f"malformed {what}: 'devices' must be a list")
        self._devices = [self._device(d, f"devices[{i}]") for i, d in enumerate(devices)]

    def _device(self, d: Any, where: str) -> tuple[str, str, int, tuple[NvLink, ...]]:
        what = self.what
        if not isinstance(d, Mapping):
            raise InputError(f"malformed {what}: {where} must be an object")
        busid, name, mem, links = (d.get(k) for k in ("busid", "name", "memory_bytes", "nvlinks"))
        if not isinstance(busid, str):
            raise InputError(f"malformed {what}: {where}.busid must be a string")
        if not isinstance(name, str):
            raise InputError(f"malformed {what}: {where}.name must be a string")
        if not is_int(mem, 0):
            raise InputError(f"malformed {what}: {where}.memory_bytes must be a non-negative "
                             f"integer")
        if not isinstance(links, list):
            raise InputError(f"malformed {what}: {where}.nvlinks must be a list")
        out: list[NvLink] = []
        for j, lk in enumerate(links):
            at = f"{where}.nvlinks[{j}]"
            if not isinstance(lk, Mapping):
                raise InputError(f"malformed {what}: {at} must be an object")
            idx, remote, rtype = lk.get("link"), lk.get("remote_busid"), lk.get("remote_type")
            if not is_int(idx, 0):
                raise InputError(f"malformed {what}: {at}.link must be a non-negative integer")
            if not isinstance(remote, str):
                raise InputError(f"malformed {what}: {at}.remote_busid must be a string")
            if rtype is not None and rtype not in _REMOTE_TYPES:
                raise InputError(f"malformed {what}: {at}.remote_type must be one of "
                                 f"{', '.join(_REMOTE_TYPES)} or null, got {rtype!r}")
            out.append(NvLink(link=idx, remote_busid=self._busid(remote, f"{at}.remote_busid"),
                              remote_type=rtype))
        return self._busid(busid, f"{where}.busid"), name, mem, tuple(out)

    def _busid(self, busid: str, where: str) -> str:
        try:
            return normalize_busid(busid)
        except InputError as exc:
            raise InputError(f"malformed {self.what}: {where}: {exc}") from None

    @classmethod
    def from_json(cls, text: str | bytes, what: str = "NVML recording") -> ReplayBackend:
        """Parse a JSON document."""
        return cls(parse_json(text, what), what=what)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ReplayBackend:
        """Load a recording written by :meth:`record` (or :func:`record_discovery`)."""
        what = "NVML recording"
        return cls(read_json(path, what), what=f"{what} {path}")

    @staticmethod
    def record(backend: NvmlBackend, hostname: str | None = None) -> dict[str, Any]:
        """Every reading of ``backend`` as a JSON-ready document for :class:`ReplayBackend`."""
        devices = []
        for i in range(backend.device_count()):
            devices.append({
                "busid": normalize_busid(backend.pci_bus_id(i)),
                "name": backend.name(i),
                "memory_bytes": int(backend.memory_total(i)),
                "nvlinks": [{"link": lk.link, "remote_busid": normalize_busid(lk.remote_busid),
                             "remote_type": lk.remote_type} for lk in backend.nvlinks(i)],
            })
        doc: dict[str, Any] = {"format": _REPLAY_FORMAT, "version": _REPLAY_VERSION}
        if hostname is not None:
            doc["hostname"] = hostname
        doc["devices"] = devices
        return doc

    def _dev(self, index: int) -> tuple[str, str, int, tuple[NvLink, ...]]:
        if not 0 <= index < len(self._devices):
            raise InputError(f"{self.what} has no GPU {index} ({len(self._devices)} recorded)")
        return self._devices[index]

    def device_count(self) -> int:
        """Number of recorded GPUs."""
        return len(self._devices)

    def pci_bus_id(self, index: int) -> str:
        """Recorded bus id of GPU ``index``."""
        return self._dev(index)[0]

    def name(self, index: int) -> str:
        """Recorded model name of GPU ``index``."""
        return self._dev(index)[1]

    def memory_total(self, index: int) -> int:
        """Recorded memory of GPU ``index`` in bytes."""
        return self._dev(index)[2]

    def nvlinks(self, index: int) -> list[NvLink]:
        """Recorded active NVLinks of GPU ``index``."""
        return list(self._dev(index)[3])


@contextlib.contextmanager
def _nvml_session(nvml: NvmlBackend | None) -> Iterator[NvmlBackend]:
    """``nvml`` ready to read: live NVML when None, a :class:`PynvmlBackend` entered if needed.

    >>> rb = ReplayBackend({"devices": []})
    >>> with _nvml_session(rb) as nv:
    ...     nv is rb
    True
    """
    live = PynvmlBackend() if nvml is None else nvml
    if isinstance(live, PynvmlBackend) and not live.active:
        with live:
            yield live
    else:
        yield live


# --------------------------------------------------------------------------- sysfs
class _Sysfs:
    """Reads below a sysfs root, remembering what it read so that a snapshot can copy it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.real_root = os.path.realpath(root)
        self.files: dict[str, str] = {}  # what each logged read returned
        self.links: dict[str, str] = {}

    def read(self, rel: str, log: bool = True) -> str | None:
        try:
            text = (self.root / rel).read_text(errors="replace").strip()
        except (OSError, ValueError):
            return None
        if log:
            self.files[rel] = text
        return text

    def resolve(self, rel: str, log: bool = True) -> str | None:
        """Path (relative to the root) that ``rel`` resolves to, None if missing or outside."""
        p = self.root / rel
        if not os.path.lexists(p):
            return None
        real = os.path.realpath(p)
        if not os.path.exists(real):
            return None
        target = os.path.relpath(real, self.real_root).replace(os.sep, "/")
        if target == ".." or target.startswith("../"):
            return None
        if log and os.path.islink(p):
            self.links[rel] = target
        return target

    def listdir(self, rel: str) -> list[str]:
        try:
            return sorted(os.listdir(self.root / rel))
        except OSError:
            return []

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self.root / rel)


@dataclass(frozen=True)
class _Place:
    """Where a PCI device sits: its sysfs path, host bridge and the bridges above it."""

    busid: str
    path: str
    host_bridge: str
    bridges: tuple[str, ...]


@dataclass
class _Device:
    busid: str
    host_bridge: str
    numa: int
    switches: list[tuple[str, float | None]]  # (upstream port bus id, uplink GB/s), top-down
    bandwidth: float | None
    label: str | None = None
    speed: float | None = None


@dataclass
class _SysfsView:
    gpus: list[_Device] = field(default_factory=list)
    nics: list[_Device] = field(default_factory=list)
    cpulists: dict[int, str] = field(default_factory=dict)


def _locate(fs: _Sysfs, busid: str, log: bool = True) -> _Place | None:
    path = fs.resolve(f"bus/pci/devices/{busid}", log=log)
    if path is None:
        return None
    parts = path.split("/")
    hb = max((i for i, p in enumerate(parts) if _HOST_BRIDGE.match(p)), default=None)
    if hb is None:
        return None
    m = _HOST_BRIDGE.match(parts[hb])
    assert m is not None
    bridges = tuple("/".join(parts[: k + 1]) for k in range(hb + 1, len(parts) - 1)
                    if _BDF.match(parts[k]))
    return _Place(busid=busid, path=path, host_bridge=m.group(1), bridges=bridges)


def _int(text: str | None, base: int = 10) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), base)
    except ValueError:
        return None


def _gts(text: str | None) -> float | None:
    try:
        return parse_gts(text or "")
    except InputError:
        return None


def _link_gbps(fs: _Sysfs, dev: str, upper: str | None, idle_downclocks: bool) -> float | None:
    """GB/s of the link above ``dev`` (``upper`` is the bridge at its other end)."""
    speed = _gts(fs.read(f"{dev}/current_link_speed"))
    width = _int(fs.read(f"{dev}/current_link_width"))
    if idle_downclocks:
        caps = [s for s in (_gts(fs.read(f"{dev}/max_link_speed")),
                            _gts(fs.read(f"{upper}/max_link_speed")) if upper else None) if s]
        if caps and (speed is None or min(caps) > speed):
            speed = min(caps)
    if speed is None or width is None or width <= 0:
        return None
    return pcie_gbps(speed, width)


def _is_bridge(fs: _Sysfs, path: str) -> bool:
    """Whether a device on the way down is a PCI bridge (class ``0x0604xx``; no class: yes)."""
    cls = _int(fs.read(f"{path}/class"), 16)
    return cls is None or cls >> 8 == CLASS_PCI_BRIDGE


def _numa(fs: _Sysfs, place: _Place) -> int:
    for d in (*place.bridges, place.path):
        n = _int(fs.read(f"{d}/numa_node"))
        if n is not None and n >= 0:
            return n
    return 0


def _device(fs: _Sysfs, place: _Place, is_gpu: bool) -> _Device:
    """Read a device's NUMA node, the switches above it and the bandwidths of their links."""
    bridges = [b for b in place.bridges if _is_bridge(fs, b)]
    below_root = bridges[1:]  # the root port belongs to the host bridge
    switches = [(up.rsplit("/", 1)[-1], _link_gbps(fs, up, None, idle_downclocks=False))
                for up in below_root[0::2]]
    upper = bridges[-1] if bridges else None
    return _Device(busid=place.busid, host_bridge=place.host_bridge, numa=_numa(fs, place),
                   switches=switches,
                   bandwidth=_link_gbps(fs, place.path, upper, idle_downclocks=is_gpu))


def _nic_names(fs: _Sysfs, cls: str) -> dict[str, list[tuple[str, str]]]:
    """``{device path: [(name, entry dir), ...]}`` for ``class/<cls>/*/device``."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name in fs.listdir(f"class/{cls}"):
        dev = fs.resolve(f"class/{cls}/{name}/device", log=False)
        if dev is not None:
            out.setdefault(dev, []).append((name, f"class/{cls}/{name}"))
    return out


def _names_of(names: Mapping[str, list[tuple[str, str]]], path: str) -> list[tuple[str, str]]:
    """Entries whose device is the PCI function at ``path`` or below it (virtio: ``virtio2``)."""
    return [e for dev, entries in sorted(names.items())
            if dev == path or dev.startswith(path + "/") for e in entries]


def _nic_speed(fs: _Sysfs, ib: Sequence[tuple[str, str]], net: Sequence[tuple[str, str]]
               ) -> float | None:
    """Network speed in GB/s from InfiniBand port rates or the interface speed (Mb/s)."""
    rates: list[float] = []
    for _, entry in ib:
        for port in fs.listdir(f"{entry}/ports"):
            m = _IB_RATE.match(fs.read(f"{entry}/ports/{port}/rate") or "")
            if m and float(m.group(1)) > 0:
                rates.append(float(m.group(1)) / 8.0)
    if not rates:
        for _, entry in net:
            mbps = _int(fs.read(f"{entry}/speed"))
            if mbps is not None and mbps > 0:
                rates.append(mbps / 8000.0)
    return max(rates, default=None)


def _scan_sysfs(fs: _Sysfs, gpu_busids: Sequence[str]) -> _SysfsView:
    view = _SysfsView()
    for i, busid in enumerate(gpu_busids):
        place = _locate(fs, busid)
        if place is None:
            raise InputError(f"GPU {i} ({busid}) is not a PCI device under "
                             f"{fs.root / 'bus/pci/devices'} (or has no PCI host bridge)")
        view.gpus.append(_device(fs, place, is_gpu=True))

    gpu_set = set(gpu_busids)
    ib_names, net_names = _nic_names(fs, "infiniband"), _nic_names(fs, "net")
    for entry in fs.listdir("bus/pci/devices"):
        if entry in gpu_set or not _BDF.match(entry):
            continue
        path = fs.resolve(f"bus/pci/devices/{entry}", log=False)
        if path is None or fs.exists(f"{path}/physfn"):
            continue  # missing, or an SR-IOV virtual function
        cls = _int(fs.read(f"{path}/class", log=False), 16)
        if cls is None or cls >> 16 != CLASS_BASE_NETWORK:
            continue
        place = _locate(fs, entry)
        if place is None:
            continue
        fs.read(f"{path}/class")
        nic = _device(fs, place, is_gpu=False)
        ib, net = _names_of(ib_names, path), _names_of(net_names, path)
        for _, e in (*ib, *net):
            fs.resolve(f"{e}/device")
        names = [n for n, _ in ib] or [n for n, _ in net]
        nic.label = names[0] if names else entry
        nic.speed = _nic_speed(fs, ib, net)
        view.nics.append(nic)

    for name in fs.listdir("devices/system/node"):
        m = _NODE_DIR.match(name)
        if m:
            cpus = fs.read(f"devices/system/node/{name}/cpulist")
            if cpus:
                view.cpulists[int(m.group(1))] = cpus
    return view


# --------------------------------------------------------------------------- discovery
@dataclass(frozen=True)
class _GpuReading:
    busid: str
    model: str
    memory_bytes: int
    nvlinks: tuple[NvLink, ...]


def _read_nvml(nvml: NvmlBackend) -> list[_GpuReading]:
    count = nvml.device_count()
    if count <= 0:
        raise InputError("NVML reports no GPU on this machine")
    out = [_GpuReading(busid=normalize_busid(nvml.pci_bus_id(i)), model=nvml.name(i),
                       memory_bytes=int(nvml.memory_total(i)), nvlinks=tuple(nvml.nvlinks(i)))
           for i in range(count)]
    seen: dict[str, int] = {}
    for i, g in enumerate(out):
        if g.busid in seen:
            raise InputError(f"GPUs {seen[g.busid]} and {i} report the same bus id {g.busid}")
        seen[g.busid] = i
    return out


def _build(gpus: Sequence[_GpuReading], view: _SysfsView, name: str, source: str) -> Topology:
    b = TopologyBuilder()
    devices = [*view.gpus, *view.nics]
    hb_numa: dict[str, int] = {}
    for d in devices:
        hb_numa.setdefault(d.host_bridge, d.numa)
    numa_vertex = {i: b.add_numa(i, cpus=view.cpulists.get(i))
                   for i in sorted(set(view.cpulists) | set(hb_numa.values()))}

    def top_link(d: _Device) -> float | None:
        return d.switches[0][1] if d.switches else d.bandwidth

    hb_vertex: dict[str, str] = {}
    for hb, numa in hb_numa.items():
        bws = [bw for d in devices if d.host_bridge == hb and (bw := top_link(d)) is not None]
        hb_vertex[hb] = b.add_host_bridge(numa_vertex[numa], key=hb,
                                          bandwidth=max(bws, default=None))

    sw_vertex: dict[str, str] = {}

    def parent_of(d: _Device) -> str:
        parent = hb_vertex[d.host_bridge]
        for busid, bw in d.switches:
            if busid not in sw_vertex:
                sw_vertex[busid] = b.add_switch(parent, key=busid, bandwidth=bw, busid=busid)
            parent = sw_vertex[busid]
        return parent

    for i, (g, d) in enumerate(zip(gpus, view.gpus, strict=True)):
        b.add_gpu(str(i), parent_of(d), model=g.model, busid=g.busid,
                  memory_bytes=g.memory_bytes, bandwidth=d.bandwidth)
    for d in view.nics:
        b.add_nic(d.busid, parent_of(d), label=d.label, busid=d.busid, bandwidth=d.bandwidth,
                  speed=d.speed)
    _add_nvlinks(b, gpus)
    return b.build(name=name, source=source)


def _add_nvlinks(b: TopologyBuilder, gpus: Sequence[_GpuReading]) -> None:
    index = {g.busid: i for i, g in enumerate(gpus)}
    directed: dict[tuple[int, int], int] = {}
    to_switch: dict[int, int] = {}
    switch_ids: set[str] = set()
    for i, g in enumerate(gpus):
        for lk in g.nvlinks:
            remote = normalize_busid(lk.remote_busid)
            j = index.get(remote)
            if lk.remote_type == "switch" or (lk.remote_type is None and j is None):
                to_switch[i] = to_switch.get(i, 0) + 1
                switch_ids.add(remote)
            elif lk.remote_type in (None, "gpu") and j is not None and j != i:
                directed[(i, j)] = directed.get((i, j), 0) + 1
    for i, j in sorted({(min(p), max(p)) for p in directed}):
        links = max(directed.get((i, j), 0), directed.get((j, i), 0))
        b.add_nvlink(f"gpu:{i}", f"gpu:{j}", links, link_bandwidth=nvlink_link_gbps(gpus[i].model))
    if to_switch:
        chips = len(switch_ids - {"0000:00:00.0"}) or None
        fabric = b.add_nvswitch("0", chips=chips)
        for i, links in sorted(to_switch.items()):
            b.add_nvlink(f"gpu:{i}", fabric, links, link_bandwidth=nvlink_link_gbps(gpus[i].model))


def discover(nvml: NvmlBackend | None = None, sysfs_root: str | os.PathLike[str] = "/sys",
             name: str | None = None) -> Topology:
    """The topology of this machine from NVML (``nvml``, live by default) and sysfs.

    ``name`` defaults to the host name. Raises :class:`InputError` when NVML is not available
    or a GPU's bus id is not found under ``sysfs_root``. See the module docstring for where
    each part of the graph comes from.
    """
    with _nvml_session(nvml) as nv:
        gpus = _read_nvml(nv)
    view = _scan_sysfs(_Sysfs(sysfs_root), [g.busid for g in gpus])
    return _build(gpus, view, name=name or socket.gethostname() or "localhost",
                  source=f"discover:{os.fspath(sysfs_root)}")


# --------------------------------------------------------------------------- recording
def snapshot_sysfs(sysfs_root: str | os.PathLike[str], busids: Iterable[str],
                   dest_dir: str | os.PathLike[str]) -> None:
    """Copy the sysfs files discovery reads for GPUs ``busids`` into ``dest_dir``.

    Device directories are recreated at their real paths (``devices/pci0000:16/...``) and the
    ``bus/pci/devices``, ``class/infiniband`` and ``class/net`` entries become relative
    symlinks to them, so ``discover(nvml, sysfs_root=dest_dir)`` gives the same topology as on
    ``sysfs_root``. Each file holds what discovery read from it (a GPU's link speed changes
    with its power state, so it is not read twice). ``dest_dir`` must be empty or not exist
    yet; the copy is built in a hidden directory beside it and renamed onto it when complete,
    so a failure leaves neither a partial copy nor the hidden directory behind.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> snapshot_sysfs(d / "sys", ["0000:1b:00.0"], d / "snap")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: GPU 0 (0000:1b:00.0) is not a PCI device under ...
    >>> sorted(p.name for p in d.iterdir())
    []
    """
    ids = [normalize_busid(x) for x in busids]
    dest = Path(dest_dir)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InputError(f"sysfs snapshot directory {dest} is not an empty directory")
    fs = _Sysfs(sysfs_root)
    _scan_sysfs(fs, ids)
    missing = _missing_dirs(dest.parent)
    scratch: Path | None = None
    done = False
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.parent / f".{dest.name}.{secrets.token_hex(8)}.tmp"
        tmp.mkdir()  # the mode a plain mkdir gives (mkdtemp would make it 0700)
        scratch = tmp
        _write_snapshot(fs, scratch)
        os.replace(scratch, dest)  # POSIX rename replaces an empty directory, fails on any other
        done = True
    except OSError as exc:
        raise InputError(f"cannot write sysfs snapshot in {dest}: {exc}") from None
    finally:
        if not done:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            _remove_dirs(missing)


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, deepest first."""
    return [p for p in (path, *path.parents) if not os.path.lexists(p)]


def _remove_dirs(dirs: Iterable[Path]) -> None:
    """Remove the directories ``dirs`` (deepest first) that are still empty."""
    for p in dirs:
        with contextlib.suppress(OSError):
            p.rmdir()


def _write_snapshot(fs: _Sysfs, root: Path) -> None:
    """Write the files and symlinks ``fs`` logged below ``root``."""
    for rel, text in sorted(fs.files.items()):
        out = root / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    for rel, target in sorted(fs.links.items()):
        link, real = root / rel, root / target
        real.mkdir(parents=True, exist_ok=True)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(real, link.parent), link)


def record_discovery(dest_dir: str | os.PathLike[str], nvml: NvmlBackend | None = None,
                     sysfs_root: str | os.PathLike[str] = "/sys") -> Path:
    """Record this machine's NVML readings and sysfs view for later :func:`replay_discovery`.

    Writes ``dest_dir/nvml.json`` (:meth:`ReplayBackend.record`, with the host name) and
    ``dest_dir/sysfs/`` (:func:`snapshot_sysfs`); ``dest_dir`` is created if needed and must
    not already hold a recording. Returns ``dest_dir``.
    """
    dest = Path(dest_dir)
    with _nvml_session(nvml) as nv:
        if (dest / _NVML_FILE).exists() or (dest / _SYSFS_DIR).exists():
            raise InputError(f"{dest} already holds a recording")
        doc = ReplayBackend.record(nv, hostname=socket.gethostname() or None)
    # On failure remove what this call wrote: sysfs/ and the directories it created.
    missing = _missing_dirs(dest)
    snapped = False
    try:
        try:
            dest.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create recording directory {dest}: {exc.strerror}"
                             ) from None
        snapshot_sysfs(sysfs_root, [d["busid"] for d in doc["devices"]], dest / _SYSFS_DIR)
        snapped = True
        with atomic_write(dest / _NVML_FILE) as fh:
            cast("IO[str]", fh).write(json.dumps(doc, indent=2) + "\n")
    except BaseException:
        if snapped:
            shutil.rmtree(dest / _SYSFS_DIR, ignore_errors=True)
        _remove_dirs(missing)
        raise
    return dest


def replay_discovery(src_dir: str | os.PathLike[str], name: str | None = None) -> Topology:
    """The topology of a directory written by :func:`record_discovery`.

    ``name`` defaults to the recorded host name.
    """
    src = Path(src_dir)
    nvml = ReplayBackend.from_file(src / _NVML_FILE)
    if not (src / _SYSFS_DIR).is_dir():
        raise InputError(f"recording {src} has no {_SYSFS_DIR}/ directory")
    return discover(nvml, sysfs_root=src / _SYSFS_DIR, name=name or nvml.hostname or src.name)
