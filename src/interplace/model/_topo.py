"""Which resources two placed jobs share, read off the topology's contention domains."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from interplace.errors import InputError
from interplace.topology import DomainKind, Topology

__all__ = ["DOMAIN_RESOURCES", "share_table", "shared_resources"]

DOMAIN_RESOURCES: dict[DomainKind, tuple[str, ...]] = {
    DomainKind.GPU: ("gpu_compute", "gpu_membw", "pcie_h2d", "pcie_d2h", "host_cpu"),
    DomainKind.PCIE_UPLINK: ("pcie_h2d", "pcie_d2h"),
    DomainKind.HOST_BRIDGE: ("pcie_h2d", "pcie_d2h"),
    DomainKind.SOCKET: ("host_cpu",),
}
"""Model resources that jobs on two GPUs contend for when the GPUs share a domain of each kind.

One GPU shares everything (its jobs also share the GPU's PCIe link and, being one machine, the
host). GPUs behind one PCIe switch or host bridge share its uplink in both directions; GPUs of
one socket share its host CPU and memory. NVLink, NVSwitch, NIC and network domains carry
traffic of multi-GPU jobs, which the single-GPU resource vector does not describe, so they add
nothing.
"""


def shared_resources(topology: Topology, gpu_a: str, gpu_b: str) -> tuple[str, ...]:
    """Resources that a job on ``gpu_a`` and one on ``gpu_b`` contend for, in a fixed order.

    >>> from interplace.topology import load
    >>> t = load("p4d")
    >>> shared_resources(t, "0", "0")
    ('gpu_compute', 'gpu_membw', 'pcie_h2d', 'pcie_d2h', 'host_cpu')
    >>> shared_resources(t, "0", "1")  # one PCIe switch, one socket
    ('pcie_h2d', 'pcie_d2h', 'host_cpu')
    >>> shared_resources(t, "0", "4")  # other socket
    ()
    >>> shared_resources(load("p4d*2"), "n0:0", "n1:0")  # other machines
    ()

    GPUs of two machines share nothing: the route between them (their PCIe uplinks to the
    NICs, the network) carries only traffic between them, which two jobs placed there do not
    send (a job's own multi-GPU traffic is its communication cost, not contention).
    """
    known = set(topology.gpus())
    for g in (gpu_a, gpu_b):
        if g not in known:
            raise InputError(f"GPU {g!r} is not in the topology")
    if gpu_a == gpu_b:
        return DOMAIN_RESOURCES[DomainKind.GPU]
    if topology.gpu(gpu_a).machine != topology.gpu(gpu_b).machine:
        return ()
    found: set[str] = set()
    for domain in topology.domains([gpu_a, gpu_b]):
        if set(domain.gpus) >= {gpu_a, gpu_b}:
            found.update(DOMAIN_RESOURCES.get(domain.kind, ()))
    order = DOMAIN_RESOURCES[DomainKind.GPU]
    return tuple(r for r in order if r in found)


def share_table(topology: Topology, devices: Iterable[str]) -> dict[tuple[str, str], Sequence[str]]:
    """:func:`shared_resources` of every ordered pair of distinct ``devices``."""
    devs = sorted(set(devices))
    return {(a, b): shared_resources(topology, a, b) for a in devs for b in devs if a != b}
