"""The :class:`Topology` graph, its builder, and the queries the model and placement consume.

Graph conventions
-----------------
A topology is an undirected :class:`networkx.Graph`. Every vertex has a ``kind``
(:class:`NodeKind`) and a ``machine`` (``""`` on a single machine, ``"n<k>"`` in a cluster);
every edge has a ``kind`` (:class:`EdgeKind`) and a ``bandwidth`` in GB/s (one direction).

* The PCIe edges form a forest, one tree per NUMA node: ``numa -> host_bridge ->
  pcie_switch* -> gpu | nic``. Every GPU and NIC hangs below a host bridge.
* Each machine has one ``node`` vertex joined to each of its NUMA nodes by an ``smp`` edge: a
  star that stands for the inter-socket interconnect (QPI/UPI/xGMI).
* NVLink: a ``gpu - gpu`` edge of kind ``nvlink`` with ``links`` (the bonded link count), or a
  ``gpu - nvswitch`` edge when the GPUs meet on an NVSwitch fabric. All NVSwitch chips of a
  machine are one ``nvswitch`` vertex (the fabric is non-blocking; its ``chips`` attribute
  counts the physical switches).
* In a cluster every NIC joins the one ``network`` vertex by a ``network`` edge.

GPU ids are strings: ``"0".."7"`` on one machine, ``"n<k>:<i>"`` in a cluster. Vertex ids are
``"gpu:<gpu id>"``, ``"numa:<i>"``, ``"sw:<key>"``... (prefixed ``"n<k>/"`` in a cluster).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import networkx as nx

from interplace._sorting import natural_key
from interplace.errors import InputError, is_int, is_real
from interplace.topology._units import DEFAULT_NIC_GBPS, DEFAULT_PCIE_GBPS, DEFAULT_SMP_GBPS

__all__ = [
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
    "cluster",
    "natural_key",
]


class NodeKind(StrEnum):
    """Kinds of vertex in a topology graph."""

    NUMA = "numa"
    HOST_BRIDGE = "host_bridge"
    PCIE_SWITCH = "pcie_switch"
    GPU = "gpu"
    NIC = "nic"
    NVSWITCH = "nvswitch"
    NODE = "node"
    NETWORK = "network"


class EdgeKind(StrEnum):
    """Kinds of edge: PCIe links, NVLinks, the inter-socket link, network links."""

    PCIE = "pcie"
    NVLINK = "nvlink"
    SMP = "smp"
    NETWORK = "network"


class DomainKind(StrEnum):
    """Kinds of shared contention domain returned by :meth:`Topology.domains`."""

    GPU = "gpu"
    PCIE_UPLINK = "pcie_uplink"
    HOST_BRIDGE = "host_bridge"
    SOCKET = "socket"
    SMP = "smp"
    NVLINK = "nvlink"
    NVSWITCH = "nvswitch"
    NIC = "nic"
    NETWORK = "network"


#: nvidia-smi connection classes from nearest to farthest (``NV#`` stands for any NVLink).
CONNECTION_ORDER: tuple[str, ...] = ("X", "NV#", "PIX", "PXB", "PHB", "NODE", "SYS", "NET")

_ROUTE_CACHE = 65_536

#: Most machines in a cluster (:func:`cluster`, ``"NAME*N"``): a size typed by hand past it is
#: a slip, and would hold the whole graph of that many machines in memory (4,096 DGX A100s
#: are 32,768 GPUs and some 150,000 vertices).
MAX_CLUSTER_MACHINES = 4096


def _positive_bandwidth(value: float, what: str) -> float:
    if not (is_real(value) and value > 0):
        raise InputError(
            f"{what}: bandwidth must be a positive finite number of GB/s, got {value!r}"
        )
    return float(value)


@dataclass(frozen=True)
class Gpu:
    """One GPU of a topology.

    >>> Gpu(id="0", node="gpu:0", model="NVIDIA A100-SXM4-40GB", numa=0).numa
    0
    """

    id: str
    node: str
    model: str | None = None
    busid: str | None = None
    memory_bytes: int | None = None
    numa: int | None = None
    machine: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str):
            raise InputError(f"GPU id must be a string, got {self.id!r}")
        if not self.id or any(c.isspace() for c in self.id) or "," in self.id:
            raise InputError(f"invalid GPU id {self.id!r}: non-empty, no spaces or commas")
        if self.memory_bytes is not None and not is_int(self.memory_bytes, 0):
            raise InputError(f"GPU {self.id}: memory must be a non-negative integer of bytes, "
                             f"got {self.memory_bytes!r}")
        if self.numa is not None and not is_int(self.numa):
            raise InputError(f"GPU {self.id}: NUMA node must be an integer, got {self.numa!r}")


@dataclass(frozen=True)
class Link:
    """One edge of the graph: its two vertices, kind, bandwidth (GB/s) and NVLink count."""

    u: str
    v: str
    kind: EdgeKind
    bandwidth: float
    links: int | None = None

    def __post_init__(self) -> None:
        _positive_bandwidth(self.bandwidth, f"link {self.u}-{self.v}")
        if self.links is not None and not is_int(self.links, 1):
            raise InputError(f"link {self.u}-{self.v}: NVLink count must be a positive integer, "
                             f"got {self.links!r}")


@dataclass(frozen=True)
class Path:
    """The route data takes between two devices and its bottleneck bandwidth (GB/s)."""

    nodes: tuple[str, ...]
    links: tuple[Link, ...]
    connection: str

    @property
    def bottleneck(self) -> float:
        """Smallest bandwidth along the route (``inf`` for a device to itself)."""
        return min((link.bandwidth for link in self.links), default=math.inf)


@dataclass(frozen=True)
class Domain:
    """A shared contention domain: a resource that the listed GPUs' traffic passes through.

    ``name`` is stable across queries (``"uplink:sw:ffff:ff:01.0"``, ``"socket:numa:0"``),
    ``gpus`` are the GPUs of the query that use it, ``bandwidth`` is GB/s or None where the
    resource has no single link figure (a GPU's own compute, a socket).
    """

    name: str
    kind: DomainKind
    gpus: tuple[str, ...]
    bandwidth: float | None = None

    def __post_init__(self) -> None:
        if not self.gpus:
            raise InputError(f"domain {self.name}: no GPU uses it")
        if self.bandwidth is not None:
            _positive_bandwidth(self.bandwidth, f"domain {self.name}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "kind": str(self.kind),
            "gpus": list(self.gpus),
            "bandwidth_gbps": self.bandwidth,
        }


#: One domain a route passes: (name, kind, bandwidth, the GPU id when only that GPU uses it).
_Entry = tuple[str, DomainKind, float | None, str | None]


class _Halves(NamedTuple):
    """A GPU's route to the network and back, as the domains met on the way."""

    nic: str
    out_edges: list[_Entry]
    out_nodes: list[_Entry]
    in_edges: list[_Entry]
    in_nodes: list[_Entry]


class Topology:
    """An immutable machine (or cluster) description wrapping a networkx graph.

    Build one with an importer (:func:`interplace.topology.load`), a built-in
    (:func:`interplace.topology.builtin`) or a :class:`TopologyBuilder`.

    >>> from interplace.topology import builtin
    >>> t = builtin("pcie-8gpu")
    >>> t.gpus()[:3]
    ['0', '1', '2']
    >>> t.connection("0", "1"), t.connection("0", "2"), t.connection("0", "4")
    ('PIX', 'PHB', 'SYS')
    >>> [d.name for d in t.domains(["0", "1"]) if d.kind == "pcie_uplink"]
    ['uplink:sw:0.0']
    """

    def __init__(self, graph: nx.Graph, name: str = "topology", source: str = "") -> None:
        if not isinstance(graph, nx.Graph):
            raise InputError(
                f"a topology is built from a networkx graph, not {type(graph).__name__}"
            )
        g = nx.Graph(graph)
        self.name = name
        self.source = source
        self._validate(g)
        self._graph: nx.Graph = nx.freeze(g)
        self._gpu_node: dict[str, str] = {}
        for n, d in g.nodes(data=True):
            if d["kind"] == NodeKind.GPU:
                gid = d.get("gpu_id")
                if not isinstance(gid, str) or gid in self._gpu_node:
                    raise InputError(
                        f"topology {name!r}: GPU vertex {n} has a missing or duplicate id"
                    )
                Gpu(id=gid, node=n)  # validates the id
                self._gpu_node[gid] = n
        if not self._gpu_node:
            raise InputError(f"topology {name!r} has no GPU")
        self._gpu_ids = sorted(self._gpu_node, key=natural_key)
        self._parent, self._numa_of = self._pcie_forest(g)
        for gid, n in self._gpu_node.items():
            if n not in self._numa_of:
                raise InputError(f"topology {name!r}: GPU {gid} is not attached to any NUMA node")
        self._nic_ids = sorted(
            (n for n, d in g.nodes(data=True) if d["kind"] == NodeKind.NIC), key=natural_key
        )
        for n in self._nic_ids:
            if n not in self._numa_of:
                raise InputError(f"topology {name!r}: NIC {n} is not attached to any NUMA node")
        numas_per_machine: dict[str, int] = {}
        for _, d in g.nodes(data=True):
            if d["kind"] == NodeKind.NUMA:
                numas_per_machine[d["machine"]] = numas_per_machine.get(d["machine"], 0) + 1
        for m, count in numas_per_machine.items():
            node = f"{m}/node" if m else "node"
            if count > 1 and (node not in g or g.nodes[node]["kind"] != NodeKind.NODE):
                raise InputError(f"topology {name!r}: machine {m or '(single)'} has {count} "
                                 f"NUMA nodes but no {node!r} vertex linking them")
        self._machine_of: dict[str, str] = {n: str(m) for n, m in g.nodes(data="machine")}
        self._machine_nics: dict[str, list[str]] = {}  # each machine's NICs, in NIC order
        for n in self._nic_ids:
            self._machine_nics.setdefault(self._machine_of[n], []).append(n)
        self._nearest_nic: dict[str, str | None] = {}
        self._routes: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}

    # ----------------------------------------------------------------- validation
    @staticmethod
    def _validate(g: nx.Graph) -> None:
        kinds = set(NodeKind)
        for n, d in g.nodes(data=True):
            if d.get("kind") not in kinds:
                raise InputError(f"vertex {n!r} has unknown kind {d.get('kind')!r}")
            d.setdefault("machine", "")
        ekinds = set(EdgeKind)
        for u, v, d in g.edges(data=True):
            if d.get("kind") not in ekinds:
                raise InputError(f"edge {u}-{v} has unknown kind {d.get('kind')!r}")
            _positive_bandwidth(d.get("bandwidth"), f"edge {u}-{v}")

    @staticmethod
    def _pcie_forest(g: nx.Graph) -> tuple[dict[str, str], dict[str, str]]:
        pcie = nx.Graph()
        pcie.add_edges_from((u, v) for u, v, k in g.edges(data="kind") if k == EdgeKind.PCIE)
        parent: dict[str, str] = {}
        numa_of: dict[str, str] = {}
        for root in (n for n, k in g.nodes(data="kind") if k == NodeKind.NUMA):
            if root not in pcie:
                continue
            for u, v in nx.bfs_edges(pcie, root):
                if v in parent or g.nodes[v]["kind"] == NodeKind.NUMA:
                    raise InputError(f"PCIe links around {v} form a cycle or join two NUMA nodes")
                parent[v] = u
                numa_of[v] = root
        if pcie.number_of_nodes() and not nx.is_forest(pcie):  # no PCIe links: no forest to test
            raise InputError("PCIe links do not form a tree below each NUMA node")
        return parent, numa_of

    # ----------------------------------------------------------------- basic views
    @property
    def graph(self) -> nx.Graph:
        """The underlying (frozen) networkx graph."""
        return self._graph

    def gpus(self) -> list[str]:
        """GPU ids in natural order (``"0".."7"`` or ``"n0:0".."n3:7"``)."""
        return list(self._gpu_ids)

    def gpu(self, gpu_id: str) -> Gpu:
        """The :class:`Gpu` record of ``gpu_id``."""
        n = self._node(gpu_id)
        d = self._graph.nodes[n]
        numa = self._numa_of.get(n)
        return Gpu(
            id=gpu_id,
            node=n,
            model=d.get("model"),
            busid=d.get("busid"),
            memory_bytes=d.get("memory_bytes"),
            numa=None if numa is None else int(self._graph.nodes[numa]["index"]),
            machine=d.get("machine", ""),
        )

    def nodes_of_kind(self, kind: NodeKind | str) -> list[str]:
        """Vertex ids of one kind, in natural order."""
        return sorted((n for n, k in self._graph.nodes(data="kind") if k == kind), key=natural_key)

    @property
    def numa_nodes(self) -> int:
        """Number of NUMA nodes (all machines)."""
        return len(self.nodes_of_kind(NodeKind.NUMA))

    @property
    def pcie_switches(self) -> int:
        """Number of PCIe switches (all machines)."""
        return len(self.nodes_of_kind(NodeKind.PCIE_SWITCH))

    def machines(self) -> list[str]:
        """Machine keys: ``[""]`` for one machine, ``["n0", "n1", ...]`` for a cluster."""
        return sorted({d["machine"] for _, d in self._graph.nodes(data=True)
                       if d["kind"] == NodeKind.GPU}, key=natural_key)

    def nics(self) -> list[str]:
        """NIC vertex ids in natural order."""
        return list(self._nic_ids)

    def links(self) -> list[Link]:
        """Every edge as a :class:`Link`."""
        return [self._link(u, v) for u, v in self._graph.edges()]

    def __repr__(self) -> str:
        return (f"Topology(name={self.name!r}, gpus={len(self._gpu_ids)}, "
                f"numa_nodes={self.numa_nodes}, pcie_switches={self.pcie_switches})")

    # ----------------------------------------------------------------- helpers
    def _node(self, gpu_id: str) -> str:
        try:
            return self._gpu_node[gpu_id]
        except KeyError:
            shown = ", ".join(self._gpu_ids[:8]) + (", ..." if len(self._gpu_ids) > 8 else "")
            raise InputError(
                f"no GPU {gpu_id!r} in topology {self.name!r} (GPUs: {shown})"
            ) from None

    def _link(self, u: str, v: str) -> Link:
        d = self._graph.edges[u, v]
        return Link(u=u, v=v, kind=EdgeKind(d["kind"]), bandwidth=float(d["bandwidth"]),
                    links=d.get("links"))

    def _ancestors(self, n: str) -> list[str]:
        """PCIe ancestors of ``n`` from its parent up to its NUMA node."""
        out = []
        while n in self._parent:
            n = self._parent[n]
            out.append(n)
        return out

    def _machine(self, n: str) -> str:
        return self._machine_of[n]

    def _nv_route(self, a: str, b: str) -> tuple[int, tuple[str, ...]] | None:
        g = self._graph
        if g.has_edge(a, b) and g.edges[a, b]["kind"] == EdgeKind.NVLINK:
            return int(g.edges[a, b].get("links") or 1), (a, b)
        best: tuple[int, tuple[str, ...]] | None = None
        for s in g.neighbors(a):
            if g.nodes[s]["kind"] != NodeKind.NVSWITCH or not g.has_edge(s, b):
                continue
            count = min(int(g.edges[a, s].get("links") or 1), int(g.edges[s, b].get("links") or 1))
            if best is None or count > best[0]:
                best = (count, (a, s, b))
        return best

    def _pcie_class(self, a: str, b: str) -> str:
        if self._numa_of[a] != self._numa_of[b]:
            return "SYS"
        up_a = [a, *self._ancestors(a)]
        up_b = set([b, *self._ancestors(b)])
        lca = next(n for n in up_a if n in up_b)
        kind = self._graph.nodes[lca]["kind"]
        if kind == NodeKind.NUMA:
            return "NODE"
        if kind == NodeKind.HOST_BRIDGE:
            return "PHB"
        bridges = {n for n in self._tree_route(a, b) if
                   self._graph.nodes[n]["kind"] == NodeKind.PCIE_SWITCH}
        return "PIX" if len(bridges) <= 1 else "PXB"

    def _tree_route(self, a: str, b: str) -> list[str]:
        """Route through the PCIe tree (and the SMP star across sockets) on one machine."""
        up_a = [a, *self._ancestors(a)]
        up_b = [b, *self._ancestors(b)]
        common = set(up_b)
        for i, n in enumerate(up_a):
            if n in common:
                j = up_b.index(n)
                return up_a[: i + 1] + list(reversed(up_b[:j]))
        node = f"{self._prefix(a)}node"
        return [*up_a, node, *reversed(up_b)]

    def _prefix(self, n: str) -> str:
        m = self._machine(n)
        return f"{m}/" if m else ""

    def _device(self, x: str) -> str:
        """Vertex of a GPU id, or a NIC vertex id passed as is."""
        if x in self._gpu_node:
            return self._gpu_node[x]
        if x in self._graph and self._graph.nodes[x]["kind"] == NodeKind.NIC:
            return x
        return self._node(x)

    def nearest_nic(self, gpu_id: str) -> str | None:
        """NIC vertex closest to a GPU over PCIe, None if its machine has none.

        GPUs equally close to the same several NICs are spread over them in turn, in GPU
        order (NIC order within the tie), as NCCL gives each of a DGX A100 switch's two GPUs
        its own NIC: GPUs 0 and 1 get NICs 0 and 1, not both NIC 0. Only the GPU's own
        machine's NICs are compared (memoised per machine): :math:`O(g k)` for :math:`g` GPUs
        and :math:`k` NICs per machine, whatever the cluster's size.

        >>> from interplace.topology import builtin
        >>> t = builtin("dgx-a100")
        >>> [t.nearest_nic(g) for g in ("0", "1", "2")]
        ['nic:0', 'nic:1', 'nic:2']
        """
        n = self._node(gpu_id)
        if n not in self._nearest_nic:
            self._nearest_nic.update(self._machine_nearest_nics(self._machine(n)))
        return self._nearest_nic[n]

    def _machine_nearest_nics(self, machine: str) -> dict[str, str | None]:
        """Each GPU vertex of ``machine`` -> its NIC (:meth:`nearest_nic`)."""
        mine = self._machine_nics.get(machine, [])
        rank = {c: i for i, c in enumerate(CONNECTION_ORDER)}
        out: dict[str, str | None] = {}
        tied_gpus: dict[tuple[str, ...], list[str]] = {}
        for gid in self._gpu_ids:
            v = self._node(gid)
            if self._machine(v) != machine:
                continue
            if not mine:
                out[v] = None
                continue
            cls = {c: rank[self._pcie_class(v, c)] for c in mine}
            best = min(cls.values())
            tie = tuple(sorted((c for c in mine if cls[c] == best), key=natural_key))
            tied_gpus.setdefault(tie, []).append(v)
        for tie, members in tied_gpus.items():
            for k, v in enumerate(members):
                out[v] = tie[k % len(tie)]
        return out

    # ----------------------------------------------------------------- queries
    def connection(self, a: str, b: str) -> str:
        """nvidia-smi connection class between two GPUs (or a GPU and a NIC vertex).

        One of ``X``, ``NV#`` (``#`` = bonded NVLinks, direct or through NVSwitch), ``PIX``,
        ``PXB``, ``PHB``, ``NODE``, ``SYS`` and ``NET`` (different machines).
        """
        na, nb = self._device(a), self._device(b)
        if na == nb:
            return "X"
        if self._machine(na) != self._machine(nb):
            return "NET"
        nv = self._nv_route(na, nb)
        if nv is not None:
            return f"NV{nv[0]}"
        return self._pcie_class(na, nb)

    def _route(self, na: str, nb: str) -> tuple[str, tuple[str, ...]]:
        """(connection class, vertices of the route) between two device vertices, memoised."""
        key = (na, nb)
        hit = self._routes.get(key)
        if hit is not None:
            return hit
        nodes: list[str] | tuple[str, ...]
        if na == nb:
            conn, nodes = "X", [na]
        elif self._machine(na) != self._machine(nb):
            conn = "NET"
            nic_a, nic_b = self._nic_for(na), self._nic_for(nb)
            net = next(iter(set(self._graph.neighbors(nic_a)) & set(self._graph.neighbors(nic_b))))
            nodes = [*self._tree_route(na, nic_a), net, *self._tree_route(nic_b, nb)]
            nodes = [n for i, n in enumerate(nodes) if i == 0 or n != nodes[i - 1]]
        else:
            nv = self._nv_route(na, nb)
            if nv is not None:
                conn, nodes = f"NV{nv[0]}", nv[1]
            else:
                conn, nodes = self._pcie_class(na, nb), self._tree_route(na, nb)
        result = (conn, tuple(nodes))
        if len(self._routes) >= _ROUTE_CACHE:
            self._routes.clear()  # bounded: a 512-GPU cluster has 262,144 ordered pairs
        self._routes[key] = result
        return result

    def path(self, a: str, b: str) -> Path:
        """Route between two GPUs: NVLink when they have one, else PCIe/SMP, else the network.

        Across machines the route goes from each GPU to its nearest NIC and over the network.
        """
        conn, nodes = self._route(self._device(a), self._device(b))
        links = tuple(self._link(u, v) for u, v in itertools.pairwise(nodes))
        return Path(nodes=nodes, links=links, connection=conn)

    def _nic_for(self, n: str) -> str:
        if self._graph.nodes[n]["kind"] == NodeKind.NIC:
            return n
        gid = str(self._graph.nodes[n]["gpu_id"])
        nic = self.nearest_nic(gid)
        if nic is None or not any(
            self._graph.nodes[x]["kind"] == NodeKind.NETWORK for x in self._graph.neighbors(nic)
        ):
            raise InputError(f"GPU {gid} has no NIC on the network in topology {self.name!r}")
        return nic

    def _edge_entries(self, u: str, v: str) -> tuple[_Entry, ...]:
        """The domains an edge of a route stands for: an NVLink bond, a switch's uplink."""
        g = self._graph
        d = g.edges[u, v]
        out: list[_Entry] = []
        if d["kind"] == EdgeKind.NVLINK and {g.nodes[u]["kind"], g.nodes[v]["kind"]} == {
            NodeKind.GPU
        }:
            x, y = sorted((g.nodes[u]["gpu_id"], g.nodes[v]["gpu_id"]), key=natural_key)
            out.append((f"nvlink:{x}-{y}", DomainKind.NVLINK, float(d["bandwidth"]), None))
        for child, par in ((u, v), (v, u)):
            if g.nodes[child]["kind"] == NodeKind.PCIE_SWITCH and self._parent.get(child) == par:
                out.append((f"uplink:{child}", DomainKind.PCIE_UPLINK, float(d["bandwidth"]),
                            None))
        return tuple(out)

    def _node_entries(self, n: str) -> tuple[_Entry, ...]:
        """The domain a vertex of a route stands for (a GPU's is used by that GPU alone)."""
        g = self._graph
        kind = g.nodes[n]["kind"]
        if kind == NodeKind.GPU:
            gid = g.nodes[n]["gpu_id"]
            return ((f"gpu:{gid}", DomainKind.GPU, None, gid),)
        if kind == NodeKind.HOST_BRIDGE:
            up = self._parent.get(n)
            bw = float(g.edges[n, up]["bandwidth"]) if up else None
            return ((f"host_bridge:{n}", DomainKind.HOST_BRIDGE, bw, None),)
        if kind == NodeKind.NUMA:
            return ((f"socket:{n}", DomainKind.SOCKET, None, None),)
        if kind == NodeKind.NODE:
            bw = min((float(g.edges[n, x]["bandwidth"]) for x in g.neighbors(n)), default=None)
            return ((f"smp:{n}", DomainKind.SMP, bw, None),)
        if kind == NodeKind.NVSWITCH:
            return ((f"nvswitch:{n}", DomainKind.NVSWITCH, None, None),)
        if kind == NodeKind.NIC:
            net_bw = [float(g.edges[n, x]["bandwidth"]) for x in g.neighbors(n)
                      if g.edges[n, x]["kind"] == EdgeKind.NETWORK]
            return ((f"nic:{n}", DomainKind.NIC, min(net_bw, default=None), None),)
        if kind == NodeKind.NETWORK:
            return ((f"network:{n}", DomainKind.NETWORK, None, None),)
        return ()

    def domains(self, gpus: Iterable[str]) -> list[Domain]:
        """Shared contention domains that a set of GPUs uses to reach host memory and each other.

        For each GPU: the GPU itself, the uplink of every PCIe switch above it, its host bridge
        and its socket. For each pair, the route between them adds the NVLink bond or NVSwitch
        fabric, the inter-socket link (``smp``), or the NICs and network. The result is sorted
        by name; a superset of GPUs always yields a superset of domain names.

        A route across machines is GPU ``a`` -> its NIC -> network -> NIC -> GPU ``b``; neither
        half depends on the other end, so each GPU's halves are read once, a domain on ``a``'s
        half is used by ``a`` and every GPU it is paired with across machines, and a pair costs
        a few set insertions instead of a walk of its route (a 512-GPU cluster has 130,816
        pairs).

        >>> from interplace.topology import builtin
        >>> [(d.name, d.gpus) for d in builtin("pcie-8gpu*2").domains(["n0:0", "n1:0"])
        ...  if d.kind == "network"]
        [('network:network', ('n0:0', 'n1:0'))]
        """
        if isinstance(gpus, str):  # "01" would be GPUs "0" and "1"
            raise InputError(f"domains: give a list of GPU ids, not the string {gpus!r}")
        try:
            ids = list(dict.fromkeys(gpus))
        except TypeError:
            raise InputError(f"domains: give a list of GPU ids, not {gpus!r}") from None
        users: dict[str, set[str]] = {}
        meta: dict[str, tuple[DomainKind, float | None]] = {}
        node_cache: dict[str, tuple[_Entry, ...]] = {}
        edge_cache: dict[tuple[str, str], tuple[_Entry, ...]] = {}

        def edge_entries(nodes: Sequence[str]) -> list[_Entry]:
            out: list[_Entry] = []
            for e in itertools.pairwise(nodes):
                if e not in edge_cache:
                    edge_cache[e] = self._edge_entries(*e)
                out.extend(edge_cache[e])
            return out

        def node_entries(nodes: Sequence[str]) -> list[_Entry]:
            out: list[_Entry] = []
            for n in nodes:
                if n not in node_cache:
                    node_cache[n] = self._node_entries(n)
                out.extend(node_cache[n])
            return out

        def declare(es: Iterable[_Entry]) -> None:
            """Register new domains; ``users`` keeps the order a walk of the routes meets them."""
            for name, kind, bw, _ in es:
                if name not in users:
                    users[name] = set()
                    meta[name] = (kind, bw)

        def use(es: Sequence[_Entry], who: Iterable[str]) -> None:
            declare(es)
            for name, _, _, own in es:
                users[name].update(who if own is None else (own,))

        def walk(route: Sequence[str], who: tuple[str, ...]) -> None:
            use([*edge_entries(route), *node_entries(route)], who)

        for gid in ids:
            n = self._node(gid)
            walk([n, *self._ancestors(n)], (gid,))

        # Across machines a route is the out-half of a (a .. its NIC), the network and the
        # in-half of b (b's NIC .. b); each half is read once and used by its GPU and partners.
        halves: dict[str, _Halves] = {}
        nic_neighbours: dict[str, set[str]] = {}
        out_partners: dict[str, set[str]] = {}
        in_partners: dict[str, set[str]] = {}
        declared_out: set[str] = set()
        declared_in: set[str] = set()

        def halves_of(n: str) -> _Halves:
            if n not in halves:
                nic = self._nic_for(n)
                out_route, in_route = self._tree_route(n, nic), self._tree_route(nic, n)
                halves[n] = _Halves(nic, edge_entries(out_route), node_entries(out_route),
                                    edge_entries(in_route), node_entries(in_route))
                nic_neighbours.setdefault(nic, set(self._graph.neighbors(nic)))
            return halves[n]

        for a, b in itertools.combinations(ids, 2):
            na, nb = self._gpu_node[a], self._gpu_node[b]
            if self._machine(na) == self._machine(nb):
                walk(self._route(na, nb)[1], (a, b))
                continue
            ha, hb = halves_of(na), halves_of(nb)
            net = next(iter(nic_neighbours[ha.nic] & nic_neighbours[hb.nic]))
            links = edge_entries((ha.nic, net, hb.nic))
            hub = node_entries((net,))
            if (na not in declared_out or nb not in declared_in
                    or any(e[0] not in users for e in (*links, *hub))):
                declare([*ha.out_edges, *links, *hb.in_edges, *ha.out_nodes, *hub,
                         *hb.in_nodes])
                declared_out.add(na)
                declared_in.add(nb)
            use([*links, *hub], (a, b))
            out_partners.setdefault(na, set()).add(b)
            in_partners.setdefault(nb, set()).add(a)
        for n, others in out_partners.items():
            who = others | {self._graph.nodes[n]["gpu_id"]}
            use(halves[n].out_edges, who)
            use(halves[n].out_nodes, who)
        for n, others in in_partners.items():
            who = others | {self._graph.nodes[n]["gpu_id"]}
            use(halves[n].in_edges, who)
            use(halves[n].in_nodes, who)

        rank = {g: i for i, g in enumerate(sorted(ids, key=natural_key))}  # natural order, once
        return [
            Domain(name=name, kind=meta[name][0], gpus=tuple(sorted(who, key=rank.__getitem__)),
                   bandwidth=meta[name][1])
            for name, who in sorted(users.items(), key=lambda kv: natural_key(kv[0]))
        ]

    def nvlinks(self) -> list[tuple[str, str, int]]:
        """Every GPU pair joined by NVLink (directly or through NVSwitch) with its link count."""
        out = []
        for a, b in itertools.combinations(self._gpu_ids, 2):
            if self._machine(self._gpu_node[a]) != self._machine(self._gpu_node[b]):
                continue
            nv = self._nv_route(self._gpu_node[a], self._gpu_node[b])
            if nv is not None:
                out.append((a, b, nv[0]))
        return out

    def gpu_pairs(self) -> dict[str, str]:
        """Connection class of every unordered GPU pair, keyed ``"a,b"``."""
        return {f"{a},{b}": self.connection(a, b)
                for a, b in itertools.combinations(self._gpu_ids, 2)}

    def relabel(self, mapping: Mapping[str, str]) -> Topology:
        """A copy with GPU ids renamed by ``mapping`` (ids not in it keep their name)."""
        if not isinstance(mapping, Mapping):
            raise InputError(f"relabel: the renaming must be a mapping of old GPU id to new, "
                             f"not {type(mapping).__name__}")
        unknown = [g for g in mapping if g not in self._gpu_node]
        if unknown:
            shown = sorted(unknown, key=lambda g: natural_key(str(g)))
            raise InputError(f"relabel: unknown GPU ids {shown}")
        for old, new in mapping.items():
            if not isinstance(new, str):
                raise InputError(f"relabel: the new id of GPU {old!r} must be a string, "
                                 f"got {new!r}")
        new_ids = [mapping.get(g, g) for g in self._gpu_ids]
        if len(set(new_ids)) != len(new_ids):
            raise InputError("relabel: two GPUs would get the same id")
        def vertex(old: str, new_id: str) -> str:
            prefix = self._prefix(old)
            local = new_id.split(":", 1)[1] if prefix and ":" in new_id else new_id
            return f"{prefix}gpu:{local}"

        node_map = {self._gpu_node[g]: vertex(self._gpu_node[g], mapping[g]) for g in mapping}
        clash = set(node_map.values()) & (set(self._graph.nodes) - set(node_map))
        if clash:
            raise InputError(f"relabel: new ids collide with existing vertices {sorted(clash)}")
        g2 = nx.relabel_nodes(nx.Graph(self._graph), node_map, copy=True)
        for old, new in node_map.items():
            g2.nodes[new]["gpu_id"] = mapping[self._graph.nodes[old]["gpu_id"]]
        return Topology(g2, name=self.name, source=self.source)

    def to_json(self) -> dict[str, Any]:
        """Summary in the documented JSON shape (see ``interplace topo --json``)."""
        return {
            "name": self.name,
            "source": self.source,
            "gpus": self.gpus(),
            "machines": len(self.machines()),
            "numa_nodes": self.numa_nodes,
            "pcie_switches": self.pcie_switches,
            "nics": [self._graph.nodes[n].get("label", n) for n in self._nic_ids],
            "nvlinks": [[a, b, c] for a, b, c in self.nvlinks()],
            "gpu_pairs": self.gpu_pairs(),
            "domains": [d.as_dict() for d in self.domains(self._gpu_ids)],
        }


#: NVLinks one GPU pair (or a GPU and the NVSwitch fabric) can bond: far above any GPU's own
#: (an H100 or a B200 has 18 in all), so that a count past it is a malformed file.
MAX_NVLINKS = 64


@dataclass
class TopologyBuilder:
    """Assembles one machine's graph vertex by vertex; importers and built-ins use it.

    >>> b = TopologyBuilder()
    >>> s0 = b.add_numa(0, cpus="0-15")
    >>> hb = b.add_host_bridge(s0)
    >>> sw = b.add_switch(hb, key="0")
    >>> g0 = b.add_gpu("0", sw, model="NVIDIA A100-SXM4-40GB")
    >>> g1 = b.add_gpu("1", sw)
    >>> t = b.build(name="tiny")
    >>> t.connection("0", "1")
    'PIX'
    """

    machine: str = ""
    smp_bandwidth: float = DEFAULT_SMP_GBPS
    graph: nx.Graph = field(default_factory=nx.Graph)
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def prefix(self) -> str:
        return f"{self.machine}/" if self.machine else ""

    def _add(self, node: str, kind: NodeKind, **attrs: Any) -> str:
        if node in self.graph:
            raise InputError(f"duplicate device {node!r}")
        clean = {k: v for k, v in attrs.items() if v is not None}
        self.graph.add_node(node, kind=kind, machine=self.machine, **clean)
        return node

    def _attach(self, child: str, parent: str, bandwidth: float | None) -> None:
        pk = self.graph.nodes[parent]["kind"] if parent in self.graph else None
        allowed = {NodeKind.NUMA} if self.graph.nodes[child]["kind"] == NodeKind.HOST_BRIDGE else {
            NodeKind.HOST_BRIDGE, NodeKind.PCIE_SWITCH}
        if pk not in allowed:
            raise InputError(f"{child} cannot hang below {parent!r} (a {pk})")
        bw = DEFAULT_PCIE_GBPS if bandwidth is None else _positive_bandwidth(bandwidth, child)
        self.graph.add_edge(child, parent, kind=EdgeKind.PCIE, bandwidth=bw)

    def add_numa(self, index: int, cpus: str | None = None, **attrs: Any) -> str:
        """A NUMA node (socket). ``cpus`` is its CPU list, e.g. ``"0-23,48-71"``."""
        return self._add(f"{self.prefix}numa:{index}", NodeKind.NUMA, index=index, cpus=cpus,
                         **attrs)

    def add_host_bridge(self, numa: str, key: str | None = None,
                        bandwidth: float | None = None, **attrs: Any) -> str:
        """A PCIe host bridge (root complex) on ``numa``; ``bandwidth`` of its link to the CPU."""
        if not isinstance(numa, str) or self.graph.nodes.get(numa, {}).get("kind") != NodeKind.NUMA:
            raise InputError(f"a host bridge cannot hang below {numa!r}: not a NUMA node here")
        k = key if key is not None else f"{self.graph.nodes[numa]['index']}.{next(self._counter)}"
        n = self._add(f"{self.prefix}hb:{k}", NodeKind.HOST_BRIDGE, **attrs)
        self._attach(n, numa, bandwidth)
        return n

    def add_switch(self, parent: str, key: str | None = None, bandwidth: float | None = None,
                   busid: str | None = None, **attrs: Any) -> str:
        """A PCIe switch below a host bridge or switch; ``bandwidth`` of its uplink."""
        k = key if key is not None else (busid or str(next(self._counter)))
        n = self._add(f"{self.prefix}sw:{k}", NodeKind.PCIE_SWITCH, busid=busid, **attrs)
        self._attach(n, parent, bandwidth)
        return n

    def add_gpu(self, gpu_id: str, parent: str, model: str | None = None,
                busid: str | None = None, memory_bytes: int | None = None,
                bandwidth: float | None = None, **attrs: Any) -> str:
        """A GPU below a host bridge or switch; ``bandwidth`` of its own PCIe link."""
        full = f"{self.machine}:{gpu_id}" if self.machine else gpu_id
        Gpu(id=full, node="", memory_bytes=memory_bytes)
        n = self._add(f"{self.prefix}gpu:{gpu_id}", NodeKind.GPU, gpu_id=full, model=model,
                      busid=busid, memory_bytes=memory_bytes, **attrs)
        self._attach(n, parent, bandwidth)
        return n

    def add_nic(self, key: str, parent: str, label: str | None = None, busid: str | None = None,
                bandwidth: float | None = None, speed: float | None = None, **attrs: Any) -> str:
        """A NIC below a host bridge or switch; ``speed`` is its network rate in GB/s."""
        n = self._add(f"{self.prefix}nic:{key}", NodeKind.NIC, label=label or key, busid=busid,
                      speed=DEFAULT_NIC_GBPS if speed is None else speed, **attrs)
        self._attach(n, parent, bandwidth)
        return n

    def add_nvswitch(self, key: str = "0", chips: int | None = None, **attrs: Any) -> str:
        """The machine's NVSwitch fabric (all switch chips as one non-blocking vertex)."""
        return self._add(f"{self.prefix}nvswitch:{key}", NodeKind.NVSWITCH, chips=chips, **attrs)

    def add_nvlink(self, a: str, b: str, links: int, link_bandwidth: float = 25.0) -> None:
        """``links`` bonded NVLinks between two GPU vertices, or a GPU and the NVSwitch fabric
        (at most :data:`MAX_NVLINKS` on one such edge, added up where given twice)."""
        if not is_int(links, 1):
            raise InputError(
                f"NVLink {a}-{b}: link count must be a positive integer, got {links!r}"
            )
        total = links + int(self.graph.edges[a, b].get("links", 0) if self.graph.has_edge(a, b)
                            else 0)
        if total > MAX_NVLINKS:
            raise InputError(f"NVLink {a}-{b}: {total} links; a GPU has at most {MAX_NVLINKS}")
        if not {a, b} <= set(self.graph):
            raise InputError(f"NVLink {a}-{b}: both ends must already be in the topology")
        kinds = [self.graph.nodes[x]["kind"] for x in (a, b)]
        if not (set(kinds) <= {NodeKind.GPU, NodeKind.NVSWITCH} and NodeKind.GPU in kinds):
            raise InputError(f"NVLink {a}-{b}: needs two GPUs, or a GPU and an NVSwitch")
        if self.graph.has_edge(a, b):
            links += int(self.graph.edges[a, b].get("links", 0))
        self.graph.add_edge(a, b, kind=EdgeKind.NVLINK, links=links,
                            bandwidth=links * _positive_bandwidth(link_bandwidth, f"{a}-{b}"))

    def build(self, name: str = "topology", source: str = "") -> Topology:
        """Add the machine vertex with its SMP links and return the :class:`Topology`."""
        numas = [n for n, k in self.graph.nodes(data="kind") if k == NodeKind.NUMA]
        if not numas:
            raise InputError(f"topology {name!r} has no NUMA node / CPU socket")
        if not any(k == NodeKind.GPU for _, k in self.graph.nodes(data="kind")):
            raise InputError(f"topology {name!r} has no GPU")
        node = f"{self.prefix}node"
        if node not in self.graph:
            self._add(node, NodeKind.NODE)
        for n in numas:
            self.graph.add_edge(n, node, kind=EdgeKind.SMP, bandwidth=self.smp_bandwidth)
        return Topology(self.graph, name=name, source=source)


def cluster(machine: Topology, n: int, name: str | None = None) -> Topology:
    """``n`` copies of a one-machine topology on one network switch (GPU ids ``"n<k>:<i>"``).

    Every NIC joins the network at its ``speed`` (GB/s). A machine without a NIC cannot be
    part of a cluster. ``n`` is an integer from 1 to :data:`MAX_CLUSTER_MACHINES`.

    >>> from interplace.topology import builtin
    >>> c = cluster(builtin("pcie-8gpu"), 2)
    >>> c.gpus()[7:9], c.connection("n0:0", "n1:0")
    (['n0:7', 'n1:0'], 'NET')
    """
    if not isinstance(machine, Topology):
        raise InputError(f"a cluster is built from a Topology, not {type(machine).__name__}")
    if not is_int(n):
        raise InputError(f"cluster size must be an integer, got {n!r}")
    if n < 1:
        raise InputError(f"a cluster needs at least one machine, got {n}")
    if n > MAX_CLUSTER_MACHINES:
        raise InputError(f"cluster size must be between 1 and {MAX_CLUSTER_MACHINES}, got {n}")
    if len(machine.machines()) != 1 or machine.machines()[0] != "":
        raise InputError(f"{machine.name!r} is already a cluster; build clusters from one machine")
    if not machine.nics():
        raise InputError(f"cannot make a cluster of {machine.name!r}: it has no NIC")
    g = nx.Graph()
    net = "network"
    g.add_node(net, kind=NodeKind.NETWORK, machine="")
    for k in range(n):
        m = f"n{k}"
        mapping = {v: f"{m}/{v}" for v in machine.graph.nodes}
        part = nx.relabel_nodes(nx.Graph(machine.graph), mapping, copy=True)
        for _, d in part.nodes(data=True):
            d["machine"] = m
            if d["kind"] == NodeKind.GPU:
                d["gpu_id"] = f"{m}:{d['gpu_id']}"
        g.update(part)
        for nic in machine.nics():
            speed = float(machine.graph.nodes[nic].get("speed", DEFAULT_NIC_GBPS))
            g.add_edge(mapping[nic], net, kind=EdgeKind.NETWORK, bandwidth=speed)
    return Topology(g, name=name or f"{machine.name}*{n}", source=machine.source)
