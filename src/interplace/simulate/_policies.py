"""The schedulers the simulator compares, by name, all fed the same arrivals.

- ``fifo-exclusive``: no sharing (one job per GPU), least-loaded GPUs, arrival order.
- ``random``, ``pack``, ``spread``, ``lucid``, ``gandiva``: those placement baselines, at most
  two jobs per GPU (``lucid`` reads utilisations from the model; ``gandiva`` takes the model's
  speeds for what it would observe).
- ``interplace``: ``local-search`` on the model, the scheduler's own measurements (the fit's
  training pairs) taking precedence over its predictions of those pairs, and ``min_gain=0``: a
  job shares a GPU only when that raises the total predicted speed, so with an idle queue it
  waits for a free GPU instead of slowing a running job.
- ``interplace-greedy``: the same with ``greedy``; ``interplace-rl``: the packaged ``rl``
  policy on the model (it places every job it can).
- ``oracle``: the ``interplace`` decision procedure fed the measured speeds themselves.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from interplace.placement import MeasuredOverModel, SpeedSource
from interplace.simulate._sim import GroundTruth, PlacementScheduler
from interplace.topology import Topology

__all__ = ["SIM_POLICIES", "make_scheduler"]

SIM_POLICIES = (
    "fifo-exclusive",
    "random",
    "pack",
    "spread",
    "lucid",
    "gandiva",
    "interplace",
    "interplace-greedy",
    "interplace-rl",
    "oracle",
)


def make_scheduler(
    name: str,
    topology: Topology,
    model: SpeedSource,
    truth: GroundTruth,
    *,
    measured: pd.DataFrame | None = None,
    seed: int = 0,
    max_per_gpu: int = 2,
) -> PlacementScheduler:
    """The scheduler called ``name`` (module docstring); ``measured``: the model's fit pairs."""
    share: Callable[[str, str], bool] = truth.speeds.can_share
    informed: SpeedSource = model if measured is None else MeasuredOverModel(model, measured)

    def mk(policy: str, source: SpeedSource, k: int = max_per_gpu,
           min_gain: float | None = None) -> PlacementScheduler:
        return PlacementScheduler(name, topology, source, policy, k, min_gain, share, seed)

    if name == "fifo-exclusive":
        return mk("spread", model, 1)
    if name in ("random", "pack", "spread", "lucid", "gandiva"):
        return mk(name, model)
    if name == "interplace":
        return mk("local-search", informed, min_gain=0.0)
    if name == "interplace-greedy":
        return mk("greedy", informed, min_gain=0.0)
    if name == "interplace-rl":
        return mk("rl", informed)
    if name == "oracle":
        return mk("local-search", truth.speeds, min_gain=0.0)
    from interplace.errors import InputError

    raise InputError(f"unknown policy {name!r} (choose from {', '.join(SIM_POLICIES)})")
