"""Import and export the connection matrix printed by ``nvidia-smi topo -m``.

The input format
----------------
``nvidia-smi topo -m`` prints a header row naming the device columns (``GPU0``, ``GPU1``...
then the NICs, named ``NIC0``, ``NIC1``... with a "NIC Legend" giving their real names, or
directly ``mlx5_0``, ``mlx5_1``... on older drivers), optionally followed by the columns
``CPU Affinity``, ``NUMA Affinity`` and ``GPU NUMA ID`` (any subset; values may be ``N/A``;
``GPU NUMA ID``, the NUMA node of the GPU's own memory, is read but not used).
One row per device follows; GPU rows carry the affinity values, NIC rows do not. A legend
closes the output. The parser accepts tabs or runs of spaces between cells (text pasted from
web pages), ANSI escape codes (a terminal underlines the header and the row labels), CRLF line
ends, blank lines, a leading ``$ nvidia-smi topo -m`` prompt line, the summary line
``interplace topo`` prints above its matrix (``p4d: 8 GPUs, 1 machine, ...``, so that its
saved output reads back) and the older legend
aliases ``SOC`` (= ``SYS``) and ``CPU`` (= ``PHB``). Anything else it cannot make sense of (an
empty file, garbage, a non-square matrix, a row with the wrong number of entries, an unknown
class, an asymmetric matrix) raises :class:`~interplace.errors.InputError` naming the line or
the cell. ``NET`` is refused: it is interplace's own class for GPUs on different machines and
a single ``nvidia-smi`` never prints it.

Reconstruction
--------------
The matrix gives only a connection class per pair of devices, so :func:`from_nvidia_smi`
builds the *canonical* (smallest) PCIe tree that reproduces every class. Each PCIe class has
a level: ``PIX`` = 1, ``PXB`` = 2, ``PHB`` = 3, ``NODE`` = 4, ``SYS`` = 5 (``X`` and ``NV#``
carry no PCIe information). Over all devices, GPUs *and* NICs:

1. NUMA nodes are the union of the connected components of the pairs with level <= ``NODE``
   and of the GPUs that show the same ``NUMA Affinity`` value. Two groups whose GPUs show the
   same ``CPU Affinity`` are also merged, unless the matrix shows ``SYS`` between them.
2. Within a NUMA node, one host bridge per component of the pairs with level <= ``PHB``.
3. Within a host bridge, the components of the pairs with level <= ``PXB`` ("PXB groups"),
   and within those the components of the pairs ``PIX`` ("PIX groups"). A PXB group made of
   several PIX groups becomes an upper switch below the host bridge with one leaf switch per
   PIX group below it (even a single device gets its own leaf switch); a PXB group that is a
   single PIX group of several devices becomes one switch below the host bridge; a lone
   device hangs directly below the host bridge.

A NUMA node's index is its ``NUMA Affinity`` (the smallest one when several values fall into
one node); nodes without one get the smallest unused integers, in the order of their first
device (GPUs first, in column order). Its ``cpus`` is the ``CPU Affinity`` of its GPUs (the
distinct values joined by commas). GPU ids are the numbers of the ``GPU#`` columns; NIC
vertices are keyed ``NIC#`` (``nic:NIC0``...) with the legend name, or the column name, as
their ``label``. The built topology is checked against every cell, so a matrix no tree can
produce (for instance ``NODE`` between A-B and B-C but ``SYS`` between A-C) is refused.

NVLink: ``NV#`` between two GPUs becomes a direct NVLink edge with ``#`` bonded links, except
that when *every* pair of the machine's GPUs (three or more) shows ``NV#`` with one and the
same count, the GPUs are taken to meet on an NVSwitch fabric (DGX/HGX A100 and H100 boards):
one ``nvswitch`` vertex with an ``#``-link edge to each GPU. So are GPUs whose counts are a
fabric's with some GPUs' links down: each pair's count the smaller of its two GPUs' (a DGX
A100 whose GPU 7 shows ``NV11`` to every peer, the others ``NV12``, is a fabric with 11 links
to GPU 7). A fully connected NVLink mesh
without switches (a 4-GPU board with ``NV4`` everywhere, say) is indistinguishable from it and
is modelled as a fabric too. Link bandwidth is the NVLink 2-4 figure of 25 GB/s per link,
because the matrix names no GPU model; PCIe links get the default bandwidths of
:mod:`interplace.topology._units`.

Limitation: ``NV#`` hides the PCIe relation of the two GPUs it joins. It is recovered when
other cells reveal it (the NICs usually do, as does a shared ``NUMA Affinity``); otherwise two
NVLink-connected GPUs end up below separate host bridges of their NUMA node (or on separate
NUMA nodes when nothing ties them together at all). Every class the matrix shows is still
reproduced exactly, but routes that the matrix hides may differ from the real machine.

>>> t = from_nvidia_smi(
...     "\\tGPU0\\tGPU1\\tNIC0\\tCPU Affinity\\tNUMA Affinity\\n"
...     "GPU0\\t X \\tNV4\\tPIX\\t0-15\\t0\\n"
...     "GPU1\\tNV4\\t X \\tPXB\\t0-15\\t0\\n"
...     "NIC0\\tPIX\\tPXB\\t X \\n")
>>> t.connection("0", "1"), t.connection("0", "nic:NIC0"), t.connection("1", "nic:NIC0")
('NV4', 'PIX', 'PXB')
>>> to_nvidia_smi(t).splitlines()[2].split("\\t")
['GPU1', 'NV4', ' X ', 'PXB', '0-15', '0']
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from interplace.errors import InputError, read_input
from interplace.topology._graph import MAX_NVLINKS, NodeKind, Topology, TopologyBuilder

__all__ = ["from_nvidia_smi", "read_nvidia_smi", "to_nvidia_smi"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
_GPU_COLUMN = re.compile(r"GPU(\d+)")
_NIC_COLUMN = re.compile(r"NIC\d+")
_NV = re.compile(r"NV(\d+)")
_NIC_LEGEND = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*")
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_SUMMARY = re.compile(r"[^\t]*: \d+ GPUs?(, .*)?")  # interplace topo's line above the matrix

_LEVEL: dict[str, int] = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
_ALIASES: dict[str, str] = {"SOC": "SYS", "CPU": "PHB"}
_CPU, _NUMA = "CPU Affinity", "NUMA Affinity"
_ATTRIBUTES: tuple[tuple[str, ...], ...] = (("CPU", "Affinity"), ("NUMA", "Affinity"),
                                            ("GPU", "NUMA", "ID"))
_PIX, _PXB, _PHB, _NODE, _SYS = 1, 2, 3, 4, 5

_LEGEND = """\
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""  # noqa: E501
_NET_LEGEND = "  NET  = Different machines (interplace's class; nvidia-smi never prints it)"


@dataclass
class _Matrix:
    """The parsed table: device columns, cells, GPU attributes and NIC names."""

    columns: list[str]
    gpu_ids: dict[str, str]
    cells: dict[tuple[str, str], str] = field(default_factory=dict)
    row_line: dict[str, int] = field(default_factory=dict)
    cpus: dict[str, str | None] = field(default_factory=dict)
    numa: dict[str, int | None] = field(default_factory=dict)
    nic_key: dict[str, str] = field(default_factory=dict)
    nic_label: dict[str, str] = field(default_factory=dict)

    def level(self, a: str, b: str) -> int | None:
        """PCIe level of a pair, None for ``X`` and ``NV#``."""
        return _LEVEL.get(self.cells[a, b])

    def vertex(self, col: str) -> str:
        """What :meth:`Topology.connection` takes for a column: a GPU id or a NIC vertex id."""
        return self.gpu_ids[col] if col in self.gpu_ids else f"nic:{self.nic_key[col]}"


def _lines(text: str) -> list[str]:
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    return [_ANSI.sub("", line) for line in text.split("\n")]


def _header(tokens: list[str], ln: int) -> tuple[list[str], list[str]]:
    """Device columns and attribute columns of the header row."""
    columns: list[str] = []
    attrs: list[str] = []
    i = 0
    while i < len(tokens):
        for seq in _ATTRIBUTES:
            if tuple(tokens[i:i + len(seq)]) == seq:
                name = " ".join(seq)
                if name in attrs:
                    raise InputError(f"line {ln}: column {name!r} appears twice in the header")
                attrs.append(name)
                i += len(seq)
                break
        else:
            if attrs:
                raise InputError(f"line {ln}: device column {tokens[i]!r} comes after the "
                                 f"affinity columns of the header")
            if tokens[i] in columns:
                raise InputError(f"line {ln}: column {tokens[i]!r} appears twice in the header")
            columns.append(tokens[i])
            i += 1
    return columns, attrs


def _cell(raw: str, row: str, col: str, ln: int) -> str:
    cls = _ALIASES.get(raw, raw)
    if cls == "X" or cls in _LEVEL:
        return cls
    m = _NV.fullmatch(cls)
    if m is not None and 0 < int(m.group(1)) <= MAX_NVLINKS:
        return f"NV{int(m.group(1))}"
    if m is not None:
        raise InputError(f"line {ln}: cell {row}/{col} is {raw!r}: a GPU pair bonds 1 to "
                         f"{MAX_NVLINKS} NVLinks")
    if cls == "NET":
        raise InputError(f"line {ln}: cell {row}/{col} is NET (GPUs on different machines); "
                         f"import each machine's nvidia-smi output on its own")
    raise InputError(f"line {ln}: cell {row}/{col} is {raw!r}, not a connection class "
                     f"(X, NV#, PIX, PXB, PHB, NODE, SYS)")


def _parse(text: str) -> _Matrix:
    lines = _lines(text)
    ln = 0
    while ln < len(lines) and (not lines[ln].strip() or lines[ln].lstrip().startswith("$")
                               or _SUMMARY.fullmatch(lines[ln].strip()) is not None):
        ln += 1
    if ln == len(lines):
        raise InputError("empty nvidia-smi topo -m output")
    tokens = lines[ln].split()
    header_ln = ln + 1
    if _GPU_COLUMN.fullmatch(tokens[0]) is None:
        shown = lines[ln].strip()[:40]
        raise InputError(f"line {header_ln}: expected the nvidia-smi topo -m header row "
                         f"(GPU0 GPU1 ...), got {shown!r}")
    if len(tokens) > 1 and tokens[1] == "X":
        raise InputError(f"line {header_ln}: found the matrix row {tokens[0]} where the header "
                         f"row (GPU0 GPU1 ...) should be")
    columns, attrs = _header(tokens, header_ln)
    gpu_ids: dict[str, str] = {}
    for c in columns:
        m = _GPU_COLUMN.fullmatch(c)
        if m is not None:
            gid = str(int(m.group(1)))
            if gid in gpu_ids.values():
                raise InputError(f"line {header_ln}: two columns name GPU {gid}")
            gpu_ids[c] = gid
    mat = _Matrix(columns=columns, gpu_ids=gpu_ids)
    nics = [c for c in columns if c not in gpu_ids]
    named = all(_NIC_COLUMN.fullmatch(c) for c in nics)
    for k, c in enumerate(nics):
        mat.nic_key[c] = c if named else f"NIC{k}"

    n = len(columns)
    rows: dict[str, list[str]] = {}
    ln += 1
    while ln < len(lines):
        line = lines[ln]
        ln += 1
        stripped = line.strip()
        if stripped.startswith("Legend"):
            break
        if not stripped:
            if len(rows) >= n:
                break
            continue
        toks = line.split()
        label = toks[0]
        if len(rows) >= n and label not in columns and not (
                _GPU_COLUMN.fullmatch(label) or _NIC_COLUMN.fullmatch(label)):
            break  # text after a complete matrix without a legend
        if label not in columns:
            raise InputError(f"line {ln}: row {label!r} is not a device column of the header "
                             f"(line {header_ln}: {' '.join(columns)})")
        if label in rows:
            raise InputError(f"line {ln}: second row for {label}")
        width = n + len(attrs)
        allowed = (width,) if label in gpu_ids else (n, width)
        if len(toks) - 1 not in allowed:
            what = f"{n} devices" + "".join(f" + {a}" for a in attrs)
            raise InputError(f"line {ln}: row {label} has {len(toks) - 1} entries, expected "
                             f"{' or '.join(map(str, allowed))} ({what})")
        rows[label] = toks[1:]
        mat.row_line[label] = ln
        if label in gpu_ids:
            values = dict(zip(attrs, toks[1 + n:], strict=True))
            cpu = values.get(_CPU)
            mat.cpus[label] = None if cpu is None or cpu.upper() == "N/A" else cpu
            numa = values.get(_NUMA)
            if numa is None or numa.upper() == "N/A":
                mat.numa[label] = None
            elif numa.isdecimal():
                mat.numa[label] = int(numa)
            else:
                raise InputError(f"line {ln}: NUMA Affinity of {label} is {numa!r}, not a NUMA "
                                 f"node number or N/A")
    missing = [c for c in columns if c not in rows]
    if missing:
        raise InputError(f"non-square matrix: the header (line {header_ln}) has {n} device "
                         f"columns but there is no row for {', '.join(missing)}")

    for line in lines[ln:]:
        m = _NIC_LEGEND.fullmatch(line)
        if m is not None and m.group(1) in mat.nic_key:
            mat.nic_label[m.group(1)] = m.group(2)
    for c in nics:
        mat.nic_label.setdefault(c, c)

    for r in columns:
        for j, c in enumerate(columns):
            mat.cells[r, c] = _cell(rows[r][j], r, c, mat.row_line[r])
    for r in columns:
        if mat.cells[r, r] != "X":
            raise InputError(f"line {mat.row_line[r]}: diagonal cell {r}/{r} is "
                             f"{mat.cells[r, r]}, expected X")
    for r, c in itertools.combinations(columns, 2):
        a, b = mat.cells[r, c], mat.cells[c, r]
        if a != b:
            raise InputError(f"asymmetric matrix: {r}/{c} is {a} (line {mat.row_line[r]}) but "
                             f"{c}/{r} is {b} (line {mat.row_line[c]})")
        if a == "X":
            raise InputError(f"line {mat.row_line[r]}: cell {r}/{c} is X off the diagonal")
        if a.startswith("NV") and not (r in gpu_ids and c in gpu_ids):
            raise InputError(f"line {mat.row_line[r]}: cell {r}/{c} is {a}, but NVLink only "
                             f"joins GPUs")
    return mat


class _Groups:
    """Union-find over device columns."""

    def __init__(self, items: Sequence[str]) -> None:
        self.order = {x: i for i, x in enumerate(items)}
        self.parent = {x: x for x in items}

    def find(self, x: str) -> str:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            first, second = sorted((ra, rb), key=self.order.__getitem__)
            self.parent[second] = first

    def groups(self) -> list[list[str]]:
        out: dict[str, list[str]] = {}
        for x in sorted(self.parent, key=self.order.__getitem__):
            out.setdefault(self.find(x), []).append(x)
        return list(out.values())


def _components(items: Sequence[str], joined: Callable[[str, str], bool]) -> list[list[str]]:
    uf = _Groups(items)
    for a, b in itertools.combinations(items, 2):
        if joined(a, b):
            uf.union(a, b)
    return uf.groups()


def _within(mat: _Matrix, limit: int) -> Callable[[str, str], bool]:
    def joined(a: str, b: str) -> bool:
        lv = mat.level(a, b)
        return lv is not None and lv <= limit

    return joined


def _numa_groups(mat: _Matrix) -> list[list[str]]:
    cols = mat.columns
    uf = _Groups(cols)
    for a, b in itertools.combinations(cols, 2):
        if _within(mat, _NODE)(a, b):
            uf.union(a, b)
    by_numa: dict[int, str] = {}
    for g, idx in mat.numa.items():
        if idx is not None:
            uf.union(by_numa.setdefault(idx, g), g)
    for group in uf.groups():
        for a, b in itertools.combinations(group, 2):
            if mat.level(a, b) == _SYS:
                raise InputError(f"inconsistent matrix: {a}/{b} is SYS (line {mat.row_line[a]}) "
                                 f"but their NUMA Affinity or NODE-or-closer cells put them on "
                                 f"one NUMA node")
    by_cpus: dict[str, list[str]] = {}
    for g, cpus in mat.cpus.items():
        if cpus is not None:
            by_cpus.setdefault(cpus, []).append(g)
    for members in by_cpus.values():
        for g in members[1:]:
            ra, rb = uf.find(members[0]), uf.find(g)
            if ra == rb:
                continue
            group_a = [x for x in cols if uf.find(x) == ra]
            group_b = [x for x in cols if uf.find(x) == rb]
            if all(mat.level(a, b) != _SYS for a in group_a for b in group_b):
                uf.union(ra, rb)
    return uf.groups()


def _build(mat: _Matrix, name: str, source: str) -> Topology:
    b = TopologyBuilder()
    numa_groups = _numa_groups(mat)
    given: list[int | None] = []
    for group in numa_groups:
        values = [v for g in group if (v := mat.numa.get(g)) is not None]
        given.append(min(values) if values else None)
    used = {v for v in given if v is not None}
    free = (i for i in itertools.count() if i not in used)
    indices = [v if v is not None else next(free) for v in given]

    gpu_vertex: dict[str, str] = {}

    def place(col: str, parent: str) -> None:
        if col in mat.gpu_ids:
            gpu_vertex[col] = b.add_gpu(mat.gpu_ids[col], parent)
        else:
            b.add_nic(mat.nic_key[col], parent, label=mat.nic_label[col])

    for index, group in sorted(zip(indices, numa_groups, strict=True)):
        cpus = list(dict.fromkeys(c for g in group if (c := mat.cpus.get(g)) is not None))
        numa = b.add_numa(index, cpus=",".join(cpus) if cpus else None)
        for hb_group in _components(group, _within(mat, _PHB)):
            hb = b.add_host_bridge(numa)
            for pxb_group in _components(hb_group, _within(mat, _PXB)):
                pix_groups = _components(pxb_group, _within(mat, _PIX))
                if len(pix_groups) > 1:
                    upper = b.add_switch(hb)
                    for pix_group in pix_groups:
                        leaf = b.add_switch(upper)
                        for col in pix_group:
                            place(col, leaf)
                elif len(pxb_group) > 1:
                    sw = b.add_switch(hb)
                    for col in pxb_group:
                        place(col, sw)
                else:
                    place(pxb_group[0], hb)

    gpus = list(mat.gpu_ids)
    nv = {(a, c): int(cls[2:]) for (a, c), cls in mat.cells.items()
          if a < c and cls.startswith("NV")}
    pairs = list(itertools.combinations(gpus, 2))
    fabric_links = _fabric_links(gpus, nv)
    if fabric_links is not None:
        fabric = b.add_nvswitch()
        for g in gpus:
            b.add_nvlink(gpu_vertex[g], fabric, fabric_links[g])
    else:
        for a, c in pairs:
            links = nv.get((min(a, c), max(a, c)))
            if links is not None:
                b.add_nvlink(gpu_vertex[a], gpu_vertex[c], links)

    topo = b.build(name=name, source=source)
    for a, c in itertools.combinations(mat.columns, 2):
        want, got = mat.cells[a, c], topo.connection(mat.vertex(a), mat.vertex(c))
        if want != got:
            raise InputError(f"inconsistent matrix: {a}/{c} is {want} (line {mat.row_line[a]}) "
                             f"but the other cells imply {got}")
    return topo


def _fabric_links(gpus: list[str], nv: dict[tuple[str, str], int]) -> dict[str, int] | None:
    """Each GPU's links to an NVSwitch fabric, where the ``NV#`` cells are a fabric's (module
    docstring): three or more GPUs, every pair joined, each pair's count the smaller of its
    two GPUs' link counts (a GPU's count the largest of its row). One count everywhere is a
    healthy fabric; a GPU with a link down shows its lower count to every peer.

    >>> _fabric_links(["0", "1", "2"], {("0", "1"): 12, ("0", "2"): 11, ("1", "2"): 11})
    {'0': 12, '1': 12, '2': 11}
    >>> _fabric_links(["0", "1", "2"], {("0", "1"): 2, ("0", "2"): 1, ("1", "2"): 2}) is None
    True
    """
    if len(gpus) < 3:
        return None
    count: dict[tuple[str, str], int] = {}
    for a, c in itertools.combinations(gpus, 2):
        k = nv.get((min(a, c), max(a, c)))
        if k is None:
            return None
        count[a, c] = k
    links = {g: max(k for pair, k in count.items() if g in pair) for g in gpus}
    if any(k != min(links[a], links[c]) for (a, c), k in count.items()):
        return None
    return links


def from_nvidia_smi(text: str, name: str = "nvidia-smi") -> Topology:
    r"""Build a :class:`Topology` from the text printed by ``nvidia-smi topo -m``.

    See the module docstring for the accepted format and how the PCIe tree is reconstructed.

    >>> t = from_nvidia_smi("\tGPU0\tGPU1\tCPU Affinity\n"
    ...                     "GPU0\t X \tSYS\t0-7\nGPU1\tSYS\t X \t8-15\n")
    >>> t.gpus(), t.numa_nodes, t.connection("0", "1")
    (['0', '1'], 2, 'SYS')
    >>> from_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tABC\nGPU1\tPHB\t X \n")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: line 2: cell GPU0/GPU1 is 'ABC', not a connection class (X, NV#, PIX, PXB, PHB, NODE, SYS)
    """  # noqa: E501
    return _build(_parse(text), name=name, source="nvidia-smi topo -m")


def read_nvidia_smi(path: str | os.PathLike[str]) -> Topology:
    """Read a file holding ``nvidia-smi topo -m`` output; the topology is named after the file.

    >>> read_nvidia_smi("/nonexistent/topo.txt")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: no such file: /nonexistent/topo.txt
    """
    p = Path(path)
    data = read_input(p)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"cannot read {p}: not UTF-8 text") from None
    return _build(_parse(text), name=p.stem, source=str(p))


def to_nvidia_smi(topo: Topology) -> str:
    """Render a topology as ``nvidia-smi topo -m`` prints it (tab-separated, no ANSI codes).

    Rows and columns are the GPUs (``GPU<id>``, or ``GPU<position>`` when the ids are not plain
    numbers) then the NICs (``NIC0``, ``NIC1``... in :meth:`Topology.nics` order, named in the
    "NIC Legend" by their ``label``). Cells come from :meth:`Topology.connection`. GPU rows end
    with ``CPU Affinity`` and ``NUMA Affinity``, taken from the ``cpus`` and ``index``
    attributes of the GPU's NUMA vertex (``N/A`` when missing).

    A cluster (several :meth:`Topology.machines`) is rendered as one matrix over the GPUs and
    NICs of all machines, numbered by position, with ``NET`` between devices of different
    machines and NIC names prefixed by their machine (``n1/mlx5_0``). ``nvidia-smi`` itself
    never prints ``NET``: it is interplace's class for different machines, so such a matrix
    cannot be read back by :func:`from_nvidia_smi`.

    >>> b = TopologyBuilder()
    >>> hb = b.add_host_bridge(b.add_numa(0, cpus="0-15"))
    >>> sw = b.add_switch(hb)
    >>> _ = b.add_gpu("0", sw), b.add_gpu("1", sw), b.add_nic("ib0", hb, label="mlx5_0")
    >>> lines = to_nvidia_smi(b.build()).splitlines()
    >>> lines[0].split("\\t")
    ['', 'GPU0', 'GPU1', 'NIC0', 'CPU Affinity', 'NUMA Affinity']
    >>> lines[1].split("\\t")
    ['GPU0', ' X ', 'PIX', 'PHB', '0-15', '0']
    >>> lines[3].split("\\t"), lines[-1]
    (['NIC0', 'PHB', 'PHB', ' X '], '  NIC0: mlx5_0')
    """
    g = topo.graph
    multi = len(topo.machines()) > 1
    gpus = topo.gpus()
    nics = topo.nics()
    plain = not multi and all(_DECIMAL.fullmatch(x) for x in gpus)
    labels = [f"GPU{x}" if plain else f"GPU{i}" for i, x in enumerate(gpus)]
    labels += [f"NIC{i}" for i in range(len(nics))]
    devices = [*gpus, *nics]

    cpus_of: dict[tuple[str, int], str | None] = {}
    for v in topo.nodes_of_kind(NodeKind.NUMA):
        d = g.nodes[v]
        cpus_of[str(d["machine"]), int(d["index"])] = d.get("cpus")

    out = ["\t" + "\t".join([*labels, _CPU, _NUMA])]
    for label, dev in zip(labels, devices, strict=True):
        cells = [" X " if dev == other else topo.connection(dev, other) for other in devices]
        row = [label, *cells]
        if dev in gpus:
            info = topo.gpu(dev)
            cpus = None if info.numa is None else cpus_of.get((info.machine, info.numa))
            row += [cpus or "N/A", "N/A" if info.numa is None else str(info.numa)]
        out.append("\t".join(row))
    out += ["", _LEGEND]
    if multi:
        out.append(_NET_LEGEND)
    if nics:
        out += ["", "NIC Legend:", ""]
        for i, nic in enumerate(nics):
            d = g.nodes[nic]
            label = str(d.get("label", nic))
            if multi:
                label = f"{d['machine']}/{label}"
            out.append(f"  NIC{i}: {label}")
    return "\n".join(out) + "\n"

