"""Draw a topology in layers: machine and sockets on top, bridges and switches, then GPUs/NICs.

Uses matplotlib's object API (no pyplot, no global backend change), so it is safe to call
from a library or a server. Edges are coloured by kind: PCIe grey, NVLink green (thicker
for more links), inter-socket blue, network orange.
"""

from __future__ import annotations

import os
from pathlib import Path as FsPath
from typing import Any

from interplace._plot import plain_text
from interplace.errors import InputError, atomic_write
from interplace.topology._graph import EdgeKind, NodeKind, Topology, natural_key

__all__ = ["layout", "plot_topology"]

_COLOURS = {
    NodeKind.NUMA: "#4c72b0", NodeKind.HOST_BRIDGE: "#8172b2", NodeKind.PCIE_SWITCH: "#937860",
    NodeKind.GPU: "#55a868", NodeKind.NIC: "#dd8452", NodeKind.NVSWITCH: "#2ca02c",
    NodeKind.NODE: "#333333", NodeKind.NETWORK: "#c44e52",
}
_EDGE_COLOURS = {EdgeKind.PCIE: "#999999", EdgeKind.NVLINK: "#2ca02c",
                 EdgeKind.SMP: "#4c72b0", EdgeKind.NETWORK: "#dd8452"}


def layout(topo: Topology) -> dict[str, tuple[float, float]]:
    """Layered positions: x from a left-to-right walk of each PCIe tree, y by layer.

    >>> from interplace.topology import builtin
    >>> pos = layout(builtin("pcie-8gpu"))
    >>> pos["gpu:0"][1] < pos["sw:0.0"][1] < pos["hb:0"][1] < pos["numa:0"][1]
    True
    """
    g = topo.graph
    children: dict[str, list[str]] = {}
    for child, parent in topo._parent.items():
        children.setdefault(parent, []).append(child)
    depth: dict[str, int] = {}

    def set_depth(n: str, d: int) -> None:
        depth[n] = d
        for c in children.get(n, []):
            set_depth(c, d + 1)

    numas = topo.nodes_of_kind(NodeKind.NUMA)
    for r in numas:
        set_depth(r, 0)
    bottom = max(depth.values(), default=0)
    pos: dict[str, tuple[float, float]] = {}
    cursor = 0.0

    def place(n: str) -> float:
        nonlocal cursor
        kids = sorted(children.get(n, []), key=lambda c: (
            g.nodes[c]["kind"] == NodeKind.NIC, natural_key(c)))
        if not kids:
            x = cursor
            cursor += 1.0
        else:
            x = sum(place(c) for c in kids) / len(kids)
        leaf = g.nodes[n]["kind"] in (NodeKind.GPU, NodeKind.NIC)
        pos[n] = (x, -float(bottom if leaf else depth[n]))
        return x

    machines = sorted({g.nodes[n]["machine"] for n in numas}, key=natural_key)
    for m in machines:
        mine = [n for n in numas if g.nodes[n]["machine"] == m]
        xs = [place(n) for n in mine]
        node = f"{m}/node" if m else "node"
        if node in g:
            pos[node] = (sum(xs) / len(xs), 1.0)
        for s in (n for n in topo.nodes_of_kind(NodeKind.NVSWITCH) if g.nodes[n]["machine"] == m):
            gx = [pos[x][0] for x in g.neighbors(s) if x in pos]
            pos[s] = (sum(gx) / max(len(gx), 1), -bottom - 1.2)
        cursor += 1.0
    for n in topo.nodes_of_kind(NodeKind.NETWORK):
        pos[n] = (max(cursor - 2.0, 0.0) / 2.0, 2.0)
    return pos


def _label(topo: Topology, n: str) -> str:
    d = topo.graph.nodes[n]
    kind = d["kind"]
    if kind == NodeKind.GPU:
        return f"GPU{d['gpu_id']}"
    if kind == NodeKind.NIC:
        return str(d.get("label", n))
    if kind == NodeKind.NUMA:
        return f"NUMA{d['index']}"
    if kind == NodeKind.NODE:
        return d["machine"] or "machine"
    return {NodeKind.HOST_BRIDGE: "HB", NodeKind.PCIE_SWITCH: "SW",
            NodeKind.NVSWITCH: "NVSwitch", NodeKind.NETWORK: "network"}.get(kind, n)


@plain_text
def plot_topology(topo: Topology, out: str | os.PathLike[str], title: str | None = None) -> None:
    """Write a layered drawing of ``topo`` to ``out`` (format from the suffix: png, svg, pdf)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    target = FsPath(out)
    fmt = target.suffix.lower().lstrip(".")
    if fmt not in {"png", "svg", "pdf"}:
        raise InputError(f"plot file must end in .png, .svg or .pdf: {target}")
    pos = layout(topo)
    g = topo.graph
    width = max(8.0, 0.7 * (max(x for x, _ in pos.values()) + 2))
    fig = Figure(figsize=(min(width, 40.0), 6.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for u, v, d in g.edges(data=True):
        if u not in pos or v not in pos:
            continue
        (x0, y0), (x1, y1) = pos[u], pos[v]
        kind = d["kind"]
        lw = 1.0 + (float(d.get("links") or 0) / 4.0 if kind == EdgeKind.NVLINK else 0.0)
        style: dict[str, Any] = {"color": _EDGE_COLOURS[kind], "lw": lw, "alpha": 0.8}
        if kind == EdgeKind.NVLINK and y0 == y1:
            ax.annotate("", xy=(x1, y1), xytext=(x0, y0), zorder=1, arrowprops={
                "arrowstyle": "-", "connectionstyle": "arc3,rad=-0.35", **style})
        else:
            ax.plot([x0, x1], [y0, y1], zorder=1, **style)
    for n, (x, y) in pos.items():
        kind = g.nodes[n]["kind"]
        ax.scatter([x], [y], s=160, c=_COLOURS[kind], zorder=2, edgecolors="white")
        leaf = kind in (NodeKind.GPU, NodeKind.NIC, NodeKind.NVSWITCH)
        ax.annotate(_label(topo, n), (x, y), xytext=(0, -11 if leaf else 9),
                    textcoords="offset points", ha="center", va="top" if leaf else "bottom",
                    fontsize=7, rotation=45 if leaf and len(_label(topo, n)) > 5 else 0,
                    color="#222222", zorder=3)
    handles = [Line2D([0], [0], color=c, lw=2, label=str(k)) for k, c in _EDGE_COLOURS.items()]
    ax.legend(handles=handles, loc="upper right", fontsize=8, title="links")
    ax.set_title(title or f"{topo.name}: {len(topo.gpus())} GPUs, {topo.numa_nodes} NUMA nodes, "
                 f"{topo.pcie_switches} PCIe switches")
    ax.set_axis_off()
    ax.margins(0.08)
    fig.tight_layout()
    with atomic_write(target, "wb") as fh:
        fig.savefig(fh, format=fmt, dpi=130)
