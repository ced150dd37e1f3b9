"""PCI bus ids and class codes, shared by the NCCL and hwloc importers and live discovery.

A bus id is ``domain:bus:device.function`` in hex. Every source is brought to one canonical
form, lower case with a 4-digit domain and 2-digit bus and device (``"0000:1b:00.0"``; a
domain above ``ffff`` keeps its digits), so that one device matches across sources: NVML
writes ``"00000000:1B:00.0"``, sysfs ``"0000:1b:00.0"``.

Class codes are ``base class << 8 | subclass`` (sysfs and NCCL append a programming-interface
byte: ``0x060400``); the ones the topology needs are :data:`CLASS_BASE_NETWORK` and
:data:`CLASS_BASE_DISPLAY` (base classes), :data:`CLASS_PCI_BRIDGE` (PCIe root and switch
ports) and :data:`CLASS_OTHER_BRIDGE` (NVSwitch chips).
"""

from __future__ import annotations

import re

__all__ = [
    "CLASS_BASE_DISPLAY",
    "CLASS_BASE_NETWORK",
    "CLASS_OTHER_BRIDGE",
    "CLASS_PCI_BRIDGE",
    "assign_ids",
    "bus_key",
    "canonical_busid",
    "format_busid",
]

#: Base class of network controllers (Ethernet ``0x0200``, InfiniBand ``0x0207``).
CLASS_BASE_NETWORK = 0x02
#: Base class of display controllers: GPUs (``0x0300`` VGA, ``0x0302`` 3D controller).
CLASS_BASE_DISPLAY = 0x03
#: Class and subclass of a PCI-to-PCI bridge: PCIe root ports and switch ports.
CLASS_PCI_BRIDGE = 0x0604
#: Class and subclass "other bridge", which NVIDIA NVSwitch chips report.
CLASS_OTHER_BRIDGE = 0x0680

# Any number of hex digits per field: unparsable ids are kept as they are (lower-cased).
_BUSID = re.compile(r"^([0-9a-f]+):([0-9a-f]+):([0-9a-f]+)\.([0-9a-f]+)$")


def format_busid(domain: int, bus: int, device: int, function: int) -> str:
    """The canonical text of a bus id from its numbers.

    >>> format_busid(0, 0x1b, 0, 0), format_busid(0x10000, 0xe0, 0x1d, 1)
    ('0000:1b:00.0', '10000:e0:1d.1')
    """
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def canonical_busid(busid: str) -> str:
    """Canonical form of a ``domain:bus:device.function`` bus id (other strings lower-cased).

    >>> canonical_busid("00000000:1A:00.0"), canonical_busid(" PCI-X ")
    ('0000:1a:00.0', 'pci-x')
    """
    s = busid.strip().lower()
    m = _BUSID.match(s)
    if m is None:
        return s
    dom, bus, dev, fn = (int(x, 16) for x in m.groups())
    return format_busid(dom, bus, dev, fn)


def bus_key(busid: str | None) -> tuple[int, tuple[int, ...], str]:
    """Sort key putting bus ids in numeric order, unparsable ones after, missing ones last.

    >>> sorted(["0000:84:00.0", None, "x", "0000:1b:00.0"], key=bus_key)
    ['0000:1b:00.0', '0000:84:00.0', 'x', None]
    """
    if busid is None:
        return (2, (), "")
    m = _BUSID.match(busid)
    if m is None:
        return (1, (), busid)
    return (0, tuple(int(x, 16) for x in m.groups()), busid)


def assign_ids(explicit: list[int | None], busids: list[str | None]) -> list[int]:
    """Ids for devices: the explicit ones as given, the rest the lowest free numbers in bus order.

    This is how ``nvidia-smi`` and ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` number GPUs.

    >>> assign_ids([None, 0, None], ["0000:03:00.0", "0000:84:00.0", "0000:02:00.0"])
    [2, 0, 1]
    """
    used = {e for e in explicit if e is not None}
    out: list[int | None] = list(explicit)
    free = (i for i in range(len(explicit) + len(used) + 1) if i not in used)
    for k in sorted((k for k, e in enumerate(explicit) if e is None),
                    key=lambda k: bus_key(busids[k])):
        out[k] = next(free)
    return [int(x) for x in out if x is not None]
