"""Co-location datasets.

Gavel, Lucid and cluster traces, and a synthetic generator with a known ground truth. This
layer is being built (the data issue); what exists so far:

- :mod:`~interplace.datasets.runs`: the "runs" table (rows sharing a ``run_id`` ran together
  on one GPU; one row = the job alone), optional counter samples, :class:`CoLocationData`
  with its :meth:`~CoLocationData.pairs` and :meth:`~CoLocationData.isolated_throughput`
  views, and CSV/Parquet reading and writing.
- :mod:`~interplace.datasets.gavel`: Gavel's (OSDI 2020, MIT) isolated and pairwise
  throughputs on K80, P100 and V100, packaged with interplace (:func:`load_gavel`).
- :mod:`~interplace.datasets.traces`: job traces for simulation (Philly via Chronus, Alibaba
  openb 2023, Venus arrivals via Lucid) as one canonical :class:`JobTrace` table.
- :mod:`~interplace.datasets.synthetic`: :func:`synthetic` co-location data drawn from a known
  demand/sensitivity ground truth, with noisy, missing, clock-shifted and multiplexed samples.
- :mod:`~interplace.datasets.lucid`: Lucid's (ASPLOS 2023) measured pairs with NVML means;
  non-commercial licence, so never shipped: :func:`load_lucid` reads a directory you supply.
- :mod:`~interplace.datasets.truth`: :func:`write_truth` / :func:`read_truth` store a synthetic
  data set's ground truth (``truth.json``, versioned, plus CSV tables) beside its runs.

>>> g = load_gavel("v100")
>>> sorted(g.data.pairs().columns)[:4]
['batch_size', 'co_runner', 'gpu_type', 'isolated']
"""

from interplace.datasets.gavel import (
    GPU_TYPES,
    GavelData,
    convert_gavel,
    load_gavel,
    read_gavel_json,
)
from interplace.datasets.lucid import load_lucid, lucid_job_name
from interplace.datasets.runs import (
    MODES,
    RUN_COLUMNS,
    SAMPLE_COLUMNS,
    CoLocationData,
    read_dir,
    read_runs,
    read_samples,
    validate_runs,
    validate_samples_for_runs,
    write_runs,
)
from interplace.datasets.synthetic import DomainSource, contention_speed, synthetic
from interplace.datasets.traces import (
    TRACE_COLUMNS,
    JobTrace,
    load_alibaba_openb,
    load_philly,
    load_venus,
)
from interplace.datasets.truth import TRUTH_FILE, TRUTH_FORMAT_VERSION, read_truth, write_truth

__all__ = [
    "GPU_TYPES",
    "MODES",
    "RUN_COLUMNS",
    "SAMPLE_COLUMNS",
    "TRACE_COLUMNS",
    "TRUTH_FILE",
    "TRUTH_FORMAT_VERSION",
    "CoLocationData",
    "DomainSource",
    "GavelData",
    "JobTrace",
    "contention_speed",
    "convert_gavel",
    "load_alibaba_openb",
    "load_gavel",
    "load_lucid",
    "load_philly",
    "load_venus",
    "lucid_job_name",
    "read_dir",
    "read_gavel_json",
    "read_runs",
    "read_samples",
    "read_truth",
    "synthetic",
    "validate_runs",
    "validate_samples_for_runs",
    "write_runs",
    "write_truth",
]
