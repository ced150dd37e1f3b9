r"""Placement: which GPUs each job gets, so that predicted slowdown is smallest.

A scheduler calls :func:`place` with the cluster's :class:`~interplace.topology.Topology`, a
fitted :class:`~interplace.model.InterferenceModel`, the jobs waiting (:class:`Job`) and what
already runs (:class:`ClusterState`); it gets a :class:`Placement`: each job's GPUs with its
predicted speed (posterior mean and a 90% interval), the jobs left pending, and the
objective with its interval. :func:`score` evaluates any placement, including one the
scheduler made itself.

What a placement is worth
-------------------------
Jobs :math:`i` (new and running) sit on GPU sets :math:`G_i` (a gang job on several). For a
GPU :math:`g \in G_i`, job :math:`i`'s co-runners are every other job on :math:`g` (sharing
every resource) and every job on a GPU :math:`h` that shares a contention domain with
:math:`g` (sharing what :func:`interplace.model.shared_resources` says: a PCIe switch's uplink,
a socket). That is one :class:`~interplace.model.Query`, and its posterior draws
:math:`v^{(s)}_{i,g}` come from the model. A job runs at its slowest GPU, times its
communication factor :math:`f_i(G_i)` (the all-reduce cost model of
:mod:`interplace.placement._comm`; 1 for one GPU):

.. math:: v^{(s)}_i = f_i(G_i)\, \min_{g \in G_i} v^{(s)}_{i,g}.

Objectives, over posterior draws :math:`s = 1..S` (one set of draws for every candidate, so
two candidates differ only by what they place where, never by Monte Carlo noise):

- ``"sum"`` (default): :math:`\mathbb E_s \sum_i v^{(s)}_i`, the expected total speed;
- ``"max-min"``: :math:`\mathbb E_s \min_i v^{(s)}_i`, the worst job's speed;
- ``"risk-averse"``: the 10% quantile over draws of :math:`\sum_i v^{(s)}_i`.

Running jobs count: a new co-runner that slows one is charged for it. Jobs that cannot be
placed (no free slot under ``max_per_gpu``, or only forbidden partners) come back in
``Placement.pending``; every policy places as many jobs as it can.

Multi-GPU jobs are gang-placed inside one machine when they fit (when larger, on any GPUs
that can take them: whole free machines first, ``exact`` every such set up to a limit);
among candidate GPU sets the communication model prefers faster, less shared links
(``NV# < PIX < PXB < PHB < NODE < SYS < NET``).

Policies
--------
One file each, one signature (``policy(problem, *, seed) -> State``), selectable by name
(:data:`POLICIES`) or by passing the function, networkx's ``flow_func=`` way:
``exact`` (matching or branch and bound; the tests' oracle), ``greedy``, ``local-search``
(default), ``rl`` (a policy trained by gradient-sampling reinforcement learning on the model,
:mod:`interplace.placement.rl`), and the baselines ``random``, ``pack``, ``spread``,
``lucid`` and ``gandiva``. Each module's docstring gives its algorithm and complexity.

>>> from interplace.topology import builtin
>>> truth = MeasuredSpeeds({("a", "a"): 0.5, ("a", "b"): 0.9, ("b", "a"): 0.9, ("b", "b"): 0.6})
>>> jobs = [Job(str(k), "a" if k < 2 else "b") for k in range(4)]
>>> p = place(builtin("pcie-8gpu*1"), truth, jobs, max_per_gpu=2, policy="exact")
>>> len(p.jobs), p.pending
(4, ())
"""

from interplace.placement import (
    exact as _exact,
)
from interplace.placement import (
    gandiva as _gandiva,
)
from interplace.placement import (
    greedy as _greedy,
)
from interplace.placement import (
    local_search as _local_search,
)
from interplace.placement import (
    lucid as _lucid,
)
from interplace.placement import (
    pack as _pack,
)
from interplace.placement import (
    random as _random,
)
from interplace.placement import (
    rl as _rl,
)
from interplace.placement import (
    spread as _spread,
)
from interplace.placement._comm import comm_factor, comm_time
from interplace.placement._place import POLICIES, Policy, place, resolve_policy, score
from interplace.placement._problem import RISK_QUANTILE, Problem, SpeedCache, State
from interplace.placement._sources import MeasuredOverModel, MeasuredSpeeds, SpeedSource
from interplace.placement._types import (
    DEFAULT_COMM_SHARE,
    OBJECTIVES,
    ClusterState,
    Job,
    JobPlacement,
    Placement,
    Running,
)

POLICIES.update(
    {
        "exact": _exact.exact,
        "greedy": _greedy.greedy,
        "local-search": _local_search.local_search,
        "random": _random.random_policy,
        "pack": _pack.pack,
        "spread": _spread.spread,
        "lucid": _lucid.lucid,
        "gandiva": _gandiva.gandiva,
        "rl": _rl.default_policy,
    }
)

__all__ = [
    "DEFAULT_COMM_SHARE",
    "OBJECTIVES",
    "POLICIES",
    "RISK_QUANTILE",
    "ClusterState",
    "Job",
    "JobPlacement",
    "MeasuredOverModel",
    "MeasuredSpeeds",
    "Placement",
    "Policy",
    "Problem",
    "Running",
    "SpeedCache",
    "SpeedSource",
    "State",
    "comm_factor",
    "comm_time",
    "place",
    "resolve_policy",
    "score",
]
