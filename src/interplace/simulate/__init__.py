r"""Trace-driven cluster simulation on measured ground truth.

A simulation runs the same arrivals (:mod:`._workload`: the packaged Philly-derived excerpt,
any :class:`~interplace.datasets.JobTrace`, or synthetic Poisson arrivals) through each
scheduler under test (:mod:`._policies`) on a :class:`~interplace.topology.Topology`, with
every job progressing at its *measured* co-located speed (:mod:`._sim`: Gavel's measured
pairs, or a runs table). The schedulers see only what a real one would: the model fitted on a
split of the measurements, the topology, the queue and what runs where.

>>> from interplace.topology import builtin
>>> truth = ground_truth("gavel-v100")
>>> jobs = assign_types(synthetic(6, seed=0), truth.types, seed=0)
>>> from interplace.placement import MeasuredSpeeds
>>> oracle = make_scheduler("oracle", builtin("dgx-a100"), truth.speeds, truth)
>>> r = simulate(jobs, builtin("dgx-a100"), truth, oracle)
>>> sorted(r.metrics())[:3], len(r.jobs)
(['avg_jct_s', 'avg_queue_s', 'colocated_share'], 6)
"""

from interplace.simulate._policies import MODEL_FREE, SIM_POLICIES, make_scheduler
from interplace.simulate._run import compare, run_workload
from interplace.simulate._sim import (
    GroundTruth,
    PlacementScheduler,
    Scheduler,
    SimResult,
    ground_truth,
    simulate,
)
from interplace.simulate._workload import (
    SimJob,
    assign_types,
    from_trace,
    packaged_philly,
    synthetic,
)

__all__ = [
    "MODEL_FREE",
    "SIM_POLICIES",
    "GroundTruth",
    "PlacementScheduler",
    "Scheduler",
    "SimJob",
    "SimResult",
    "assign_types",
    "compare",
    "from_trace",
    "ground_truth",
    "make_scheduler",
    "packaged_philly",
    "run_workload",
    "simulate",
    "synthetic",
]
