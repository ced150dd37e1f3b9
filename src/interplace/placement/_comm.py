r"""The all-reduce cost model of a gang (multi-GPU) job on a set of GPUs.

A data-parallel job spends a share :math:`c` of its step time (``Job.comm_share``) in
collective communication when it runs on the best-connected GPU set of its size; the rest is
computation, which does not depend on where the GPUs are. A ring all-reduce over GPUs
:math:`g_1 \dots g_n` (in the order of the cheapest ring) moves :math:`2(n-1)/n` times the
gradient size over every ring edge, so its time is set by the slowest edge:

.. math::
    T(G) = \max_{i} \Bigl(\alpha\, h(g_i, g_{i+1}) + \frac{1}{B(g_i, g_{i+1})}\Bigr),

with :math:`B` the edge's effective bandwidth and :math:`h` its hop class (a small latency
term that breaks ties between routes of equal bandwidth). The effective bandwidth is the
topology's path bottleneck (:meth:`Topology.path`) for NVLink, NVSwitch and PCIe peer-to-peer
routes below one host bridge (``NV#``, ``PIX``, ``PXB``); routes through the host (``PHB``,
``NODE``, ``SYS``) stage data in host memory, crossing each GPU's PCIe link twice, so they get
half the bottleneck; across machines (``NET``) the route's bottleneck is the NIC. The job's
speed on :math:`G` relative to the best set is

.. math::
    f(G) = \frac{1}{(1 - c) + c\, T(G) / T^\ast},

where :math:`T^\ast` is the time on the best set of that size in the topology. So
:math:`f = 1` on the best set and falls toward :math:`1 - c` as the links slow down; the
ranking follows the classes ``NV# < PIX < PXB < PHB < NODE < SYS < NET``.

>>> from interplace.topology import builtin
>>> t = builtin("pcie-8gpu")
>>> round(comm_time(t, ("0", "1")), 4) < round(comm_time(t, ("0", "2")), 4)  # PIX < PHB
True
>>> round(comm_factor(t, ("0", "1"), 0.2, best=comm_time(t, ("0", "1"))), 3)
1.0
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from interplace.errors import InputError, is_real
from interplace.topology import Topology

__all__ = ["HOP_CLASS", "LATENCY_S_PER_HOP", "comm_factor", "comm_time", "edge_time"]

HOP_CLASS = {"X": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "NET": 6}
"""Hop class of each connection (``NV#`` counts 0): the latency term's multiplier."""

LATENCY_S_PER_HOP = 1e-4
"""Latency weight :math:`\\alpha` per hop class, in units of ``1 / (GB/s)`` (so one hop weighs
as much as the per-GB time at 10,000 GB/s: it breaks ties, never outweighs a bandwidth
difference of more than a few percent)."""

_THROUGH_HOST = frozenset({"PHB", "NODE", "SYS"})


def edge_time(topology: Topology, a: str, b: str) -> float:
    """Time per unit of all-reduce traffic over the route ``a -> b`` (``1 / (GB/s)`` + latency).

    >>> from interplace.topology import builtin
    >>> t = builtin("dgx-a100")
    >>> edge_time(t, "0", "1") < edge_time(t, "0", "7") + 1e-12  # all NV12: equal bandwidth
    True
    """
    path = topology.path(a, b)
    conn = path.connection
    bw = path.bottleneck
    if not math.isfinite(bw):
        return 0.0
    if conn in _THROUGH_HOST:
        bw = bw / 2.0
    hops = 0 if conn.startswith("NV") else HOP_CLASS.get(conn, 6)
    return LATENCY_S_PER_HOP * hops + 1.0 / bw


def comm_time(topology: Topology, gpus: Sequence[str]) -> float:
    """All-reduce time :math:`T(G)` of the cheapest ring through ``gpus`` (0 for one GPU).

    Up to 8 GPUs every ring order is tried (the first GPU fixed, mirror images skipped);
    larger sets keep machine-contiguous natural order, which is what NCCL builds. ``gpus``
    must be distinct GPU ids (a string is refused, not read as one id per character).

    >>> from interplace.topology import builtin
    >>> comm_time(builtin("dgx-a100"), ["0"])
    0.0
    >>> comm_time(builtin("dgx-a100"), ["0", "0"])
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: comm_time: GPU '0' given twice
    """
    if isinstance(gpus, str):
        raise InputError(f"comm_time: gpus must be a sequence of GPU ids, not the string {gpus!r}")
    g = list(gpus)
    n = len(g)
    if len(set(g)) != n:
        twice = next(x for x in g if g.count(x) > 1)
        raise InputError(f"comm_time: GPU {twice!r} given twice")
    if n <= 1:
        return 0.0
    if n == 2:
        return max(edge_time(topology, g[0], g[1]), edge_time(topology, g[1], g[0]))
    cost: dict[tuple[str, str], float] = {}

    def e(a: str, b: str) -> float:
        key = (a, b) if a <= b else (b, a)
        if key not in cost:
            cost[key] = edge_time(topology, a, b)
        return cost[key]

    def ring(order: Sequence[str]) -> float:
        return max(e(order[i], order[(i + 1) % n]) for i in range(n))

    if n > 8:  # the topology's order of its GPUs (machine by machine), however they are given
        pos = {x: k for k, x in enumerate(topology.gpus())}
        return ring(sorted(g, key=lambda x: pos.get(x, len(pos))))
    first, rest = g[0], g[1:]
    best = math.inf
    for perm in itertools.permutations(rest):
        if perm[0] > perm[-1]:  # a ring and its mirror image cost the same
            continue
        best = min(best, ring((first, *perm)))
    return best


def comm_factor(topology: Topology, gpus: Sequence[str], share: float, *, best: float) -> float:
    """Speed factor :math:`f(G)` of a job spending ``share`` of its step communicating.

    ``best`` is :math:`T^\\ast`, the all-reduce time on the best set of this size (>= 0);
    ``share`` lies in ``[0, 1)``, as :class:`~interplace.placement.Job`'s ``comm_share``.
    """
    if not (is_real(share) and 0 <= share < 1):
        raise InputError(f"comm_factor: share must be in [0, 1), not {share!r}")
    if not (is_real(best) and best >= 0):
        raise InputError(f"comm_factor: best must be a finite time >= 0, not {best!r}")
    if len(gpus) <= 1 or share <= 0:
        return 1.0
    t = comm_time(topology, gpus)
    if best <= 0 or not math.isfinite(t):
        return 1.0
    return 1.0 / ((1.0 - share) + share * max(t / best, 1.0))
