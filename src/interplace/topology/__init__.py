"""Machine topology: GPUs, PCIe switches, host bridges, sockets, NICs and NVLink as a graph.

A :class:`Topology` wraps a networkx graph and answers what the model and the placement
engine need: :meth:`~Topology.connection` (the ``nvidia-smi topo -m`` class of a GPU pair),
:meth:`~Topology.path` with its bottleneck bandwidth, and :meth:`~Topology.domains`, the
shared contention domains a set of GPUs uses.

Sources, each its own module: ``nvidia-smi topo -m`` text (:mod:`.nvsmi`), NCCL topology
XML (:mod:`.nccl`), hwloc XML (:mod:`.hwloc`), live NVML + sysfs discovery
(:mod:`.discover`) and built-ins (:mod:`.builtins`). :func:`load` picks the right one.

>>> t = load("p4d")
>>> len(t.gpus()), t.numa_nodes, t.pcie_switches
(8, 2, 4)
>>> t.connection("0", "1"), t.connection("0", "2"), t.connection("0", "4")
('NV12', 'NV12', 'NV12')
"""

from __future__ import annotations

import os
from pathlib import Path as _FsPath

from interplace.errors import InputError, read_input
from interplace.topology._graph import (
    CONNECTION_ORDER,
    Domain,
    DomainKind,
    EdgeKind,
    Gpu,
    Link,
    NodeKind,
    Path,
    Topology,
    TopologyBuilder,
    cluster,
    natural_key,
)
from interplace.topology._units import pcie_gbps
from interplace.topology.builtins import BUILTINS, builtin, builtin_names

__all__ = [
    "BUILTINS",
    "CONNECTION_ORDER",
    "Domain",
    "DomainKind",
    "EdgeKind",
    "Gpu",
    "Link",
    "NodeKind",
    "Path",
    "Topology",
    "TopologyBuilder",
    "builtin",
    "builtin_names",
    "cluster",
    "detect_format",
    "load",
    "natural_key",
    "pcie_gbps",
]

#: Formats :func:`load` understands, by the name ``--format`` takes.
FORMATS = ("nvidia-smi", "nccl", "hwloc")


def detect_format(text: str) -> str:
    """Guess the format of a topology document from its content.

    >>> detect_format("<system version='1'><cpu/></system>")
    'nccl'
    >>> detect_format("\\tGPU0\\tGPU1\\nGPU0\\t X \\tPHB\\n")
    'nvidia-smi'
    """
    if not isinstance(text, str):
        raise InputError(f"a topology document to sniff is text, not {type(text).__name__}")
    head = text.lstrip("\ufeff \t\r\n")[:4096]
    if head.startswith("<"):
        low = head.lower()
        if "<topology" in low:
            return "hwloc"
        if "<system" in low:
            return "nccl"
        raise InputError("XML document is neither an NCCL <system> nor an hwloc <topology>")
    if "GPU0" in head:
        return "nvidia-smi"
    raise InputError(
        "unrecognised topology format: expected nvidia-smi topo -m text, NCCL XML or hwloc XML"
    )


def load(spec: str | os.PathLike[str], format: str = "auto") -> Topology:
    """A topology from a file, a recording, or a built-in name (``"p4d"``, ``"p4d*4"``).

    A path that exists is read as a file, or, for a directory written by
    ``interplace topo --discover --record DIR``, replayed; otherwise ``spec`` must name a
    built-in. ``format``
    is ``"auto"`` (sniff the content) or one of ``"nvidia-smi"``, ``"nccl"``, ``"hwloc"``.
    """
    if format not in ("auto", *FORMATS):
        raise InputError(
            f"unknown topology format {format!r} (formats: auto, {', '.join(FORMATS)})"
        )
    if not isinstance(spec, str | os.PathLike):
        raise InputError(f"a topology is a name or a path, got {spec!r}")
    if not str(spec).strip():  # Path("") is the working directory
        raise InputError("no topology given: the name or path is empty")
    path = _FsPath(spec)
    if not path.exists():
        name = str(spec)
        if os.sep in name or name.lower().endswith((".xml", ".txt")):
            raise InputError(f"no such file: {name}")
        return builtin(name)
    if path.is_dir():
        if (path / "nvml.json").is_file():
            from interplace.topology.discover import replay_discovery

            return replay_discovery(path)
        raise InputError(f"{path} is a directory, not a topology file or a --record directory")
    data = read_input(path)
    try:
        return _parse(data, detect_format(_sniffed(data)) if format == "auto" else format,
                      path.stem)
    except InputError as exc:  # name the file: a node's topology may be one of many
        raise InputError(f"{path}: {exc}") from None


def _sniffed(data: bytes) -> str:
    """``data`` as text to tell its format by (not to parse): UTF-16 where it starts with
    that byte-order mark (an XML document may be), else UTF-8, what cannot be read replaced."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")


def _parse(data: bytes, fmt: str, name: str) -> Topology:
    """``data`` parsed as ``fmt``: text must be UTF-8; XML is given its bytes, whose encoding
    its declaration or byte-order mark names (as the ``read_*`` functions read files)."""
    if fmt == "nvidia-smi":
        from interplace.topology.nvsmi import from_nvidia_smi

        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        return from_nvidia_smi(text, name=name)
    if fmt == "nccl":
        from interplace.topology.nccl import from_nccl_xml

        return from_nccl_xml(data, name=name)
    from interplace.topology.hwloc import from_hwloc_xml

    return from_hwloc_xml(data, name=name)
