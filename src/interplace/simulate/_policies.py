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
  policy on the same source, the model under the measured pairs (it places every job it
  can).
- ``oracle``: the ``interplace`` decision procedure fed the measured speeds themselves.

The first four and ``oracle`` read no fitted model for a decision (:data:`MODEL_FREE`): a
comparison of only those fits none, and the blind four then score their placements (a number
no decision of theirs reads) on the measured speeds.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from interplace.errors import InputError, check_count
from interplace.placement import MeasuredOverModel, SpeedSource
from interplace.simulate._sim import GroundTruth, PlacementScheduler
from interplace.topology import Topology

__all__ = ["MODEL_FREE", "SIM_POLICIES", "make_scheduler"]

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

MODEL_FREE = frozenset({"fifo-exclusive", "random", "pack", "spread", "oracle"})
"""The policies whose decisions read no fitted model: placement blind to speeds, or (``oracle``)
the measured speeds. :func:`make_scheduler` builds them without one."""


def make_scheduler(
    name: str,
    topology: Topology,
    model: SpeedSource | None,
    truth: GroundTruth,
    *,
    measured: pd.DataFrame | None = None,
    seed: int = 0,
    max_per_gpu: int = 2,
) -> PlacementScheduler:
    """The scheduler called ``name`` (module docstring); ``measured``: the model's fit pairs.

    ``model`` may be None for the :data:`MODEL_FREE` policies (the measured speeds stand in
    where they score a placement); the others need it. ``max_per_gpu`` (an integer >= 1) is
    every sharing policy's; ``fifo-exclusive`` runs one job a GPU whatever it is.
    """
    if name not in SIM_POLICIES:
        raise InputError(f"unknown policy {name!r} (choose from {', '.join(SIM_POLICIES)})")
    if not isinstance(topology, Topology):
        raise InputError(f"topology must be a Topology, not {type(topology).__name__}")
    if not isinstance(truth, GroundTruth):
        raise InputError(f"truth must be a GroundTruth, not {type(truth).__name__}")
    if measured is not None and not isinstance(measured, pd.DataFrame):
        raise InputError(f"measured must be a pandas DataFrame of measured pairs or None, not "
                         f"{type(measured).__name__}")
    check_count(max_per_gpu, "max_per_gpu")
    if model is None:
        if name not in MODEL_FREE:
            raise InputError(f"policy {name!r} needs a fitted model")
        model = truth.speeds
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
    assert name == "oracle", name  # every name of SIM_POLICIES is handled above
    return mk("local-search", truth.speeds, min_gain=0.0)
