"""Link bandwidths: PCIe generation x width, NVLink per-link rates, and the documented defaults.

All bandwidths are GB/s in one direction (10^9 bytes per second), after line encoding.

PCIe: ``GT/s x lanes x encoding / 8``. Gen1 and Gen2 use 8b/10b encoding, Gen3-Gen5
128b/130b, Gen6 FLIT mode (242/256). A Gen3 x16 link gives 15.75 GB/s, which is the figure
hwloc stores as ``pci_link_speed="15.753846"``.

NVLink: one link carries 20 GB/s per direction on NVLink 1 (P100), 25 GB/s on NVLink 2-4
(V100, A100, H100) and 50 GB/s on NVLink 5 (B100/B200/GB200), so ``NV12`` on an A100 is
300 GB/s and ``NV18`` on an H100 is 450 GB/s.

Defaults, used where a source gives no figure (``nvidia-smi topo -m`` gives none at all):
PCIe Gen4 x16 for a GPU or switch link, 64 GB/s for the inter-socket link (3 UPI links or
xGMI), and 25 GB/s (200 Gb/s) for a NIC.
"""

from __future__ import annotations

import re

from interplace.errors import InputError, is_int, is_real

__all__ = [
    "DEFAULT_NIC_GBPS",
    "DEFAULT_PCIE_GBPS",
    "DEFAULT_SMP_GBPS",
    "nvlink_link_gbps",
    "parse_gts",
    "parse_link_speed",
    "pcie_gbps",
]


def pcie_gbps(gts: float, width: int) -> float:
    """Bandwidth in GB/s of a PCIe link of ``gts`` GT/s per lane and ``width`` lanes.

    >>> round(pcie_gbps(8.0, 16), 2)
    15.75
    >>> round(pcie_gbps(32.0, 16), 1)
    63.0
    >>> pcie_gbps(2.5, 1)
    0.25
    """
    if not (is_real(gts) and gts > 0 and is_int(width, 1)):
        raise InputError(f"invalid PCIe link: {gts!r} GT/s x{width!r} (a positive finite rate, "
                         f"a positive integer width)")
    if gts <= 5.0:
        efficiency = 8 / 10
    elif gts <= 32.0:
        efficiency = 128 / 130
    else:
        efficiency = 242 / 256
    return gts * width * efficiency / 8.0


DEFAULT_PCIE_GBPS = pcie_gbps(16.0, 16)
DEFAULT_SMP_GBPS = 64.0
DEFAULT_NIC_GBPS = 25.0

_GTS = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s", re.IGNORECASE)


def parse_link_speed(speed: str | None, width: str | int | None) -> float | None:
    """Bandwidth from NCCL-style ``link_speed="16 GT/s"`` and ``link_width="16"``, or None.

    Returns None when either part is missing or empty (NCCL files leave them blank for
    virtual devices); raises :class:`InputError` when a part is present but malformed.

    >>> round(parse_link_speed("32.0 GT/s PCIe", "16"), 1)
    63.0
    >>> parse_link_speed("", "0") is None, parse_link_speed("Unknown", "0") is None
    (True, True)
    """
    if speed is None or width is None or str(speed).strip() == "" or str(width).strip() == "":
        return None
    try:
        lanes = int(str(width).strip())
    except ValueError:
        raise InputError(f"unrecognised PCIe link width {width!r}") from None
    gts = parse_gts(str(speed))
    if lanes == 0 or gts is None:
        return None
    return pcie_gbps(gts, lanes)


def parse_gts(speed: str) -> float | None:
    """GT/s from a link-speed string, None for "Unknown" (sysfs and NCCL both write it).

    >>> parse_gts("16.0 GT/s PCIe"), parse_gts("Unknown")
    (16.0, None)
    """
    text = speed.strip()
    if text == "" or text.lower().startswith("unknown"):
        return None
    m = _GTS.match(text)
    if m is None:
        raise InputError(f"unrecognised PCIe link speed {speed!r} (expected e.g. '16 GT/s')")
    value = float(m.group(1))
    return value if value > 0 else None


def nvlink_link_gbps(gpu_model: str | None) -> float:
    """Per-link, per-direction NVLink bandwidth in GB/s for a GPU model name.

    >>> nvlink_link_gbps("Tesla P100-SXM2-16GB")
    20.0
    >>> nvlink_link_gbps("NVIDIA A100-SXM4-40GB"), nvlink_link_gbps("NVIDIA B200")
    (25.0, 50.0)
    >>> nvlink_link_gbps("NVIDIA GeForce RTX 3090"), nvlink_link_gbps("NVIDIA A40")
    (14.0625, 14.0625)
    """
    model = (gpu_model or "").upper()
    if "P100" in model:
        return 20.0
    if re.search(r"RTX 3090|RTX A[56]000\b|\bA40\b", model):
        # GA102 boards' NVLink bridge: 4 links, 112.5 GB/s both ways (nvidia-smi nvlink -s
        # shows 14.062 GB/s a link)
        return 14.0625
    if re.search(r"\bG?B(100|200|300)\b", model):
        return 50.0  # NVLink 5 (Blackwell): 18 links x 50 GB/s = 900 GB/s per direction
    return 25.0
