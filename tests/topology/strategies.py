"""Hypothesis strategies: random machine trees built with TopologyBuilder."""

from __future__ import annotations

from hypothesis import strategies as st

from interplace.topology import Topology, TopologyBuilder


@st.composite
def machines(draw: st.DrawFn, max_gpus: int = 10, nvlink: bool = True) -> Topology:
    """A random machine: 1-3 NUMA nodes, host bridges, nested switches, GPUs, NICs, NVLinks."""
    b = TopologyBuilder()
    gpus: list[str] = []
    next_gpu = 0
    n_numa = draw(st.integers(1, 3))
    bw = st.sampled_from([7.88, 15.75, 31.5, 63.0])
    for s in range(n_numa):
        numa = b.add_numa(s, cpus=f"{8 * s}-{8 * s + 7}")
        for h in range(draw(st.integers(1, 2))):
            hb = b.add_host_bridge(numa, key=f"{s}.{h}", bandwidth=draw(bw))
            stack = [(hb, 0)]
            while stack:
                parent, depth = stack.pop()
                for _ in range(draw(st.integers(0, 2)) if next_gpu < max_gpus else 0):
                    b.add_gpu(str(next_gpu), parent, bandwidth=draw(bw))
                    gpus.append(str(next_gpu))
                    next_gpu += 1
                if draw(st.booleans()):
                    b.add_nic(f"{s}.{h}.{len(b.graph)}", parent, bandwidth=draw(bw))
                if depth < 2:
                    for k in range(draw(st.integers(0, 2))):
                        sw = b.add_switch(parent, key=f"{parent}.{k}", bandwidth=draw(bw))
                        stack.append((sw, depth + 1))
    if not gpus:
        hb = next(n for n, k in b.graph.nodes(data="kind") if k == "host_bridge")
        b.add_gpu("0", hb)
        gpus.append("0")
    if nvlink and len(gpus) >= 2:
        for _ in range(draw(st.integers(0, 3))):
            i, j = draw(st.lists(st.sampled_from(gpus), min_size=2, max_size=2, unique=True))
            b.add_nvlink(f"gpu:{i}", f"gpu:{j}", draw(st.integers(1, 4)))
    return b.build(name="random")
