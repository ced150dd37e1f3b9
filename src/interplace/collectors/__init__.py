"""Counter data as one tidy long table, and parsers of cluster counter formats into it.

- :mod:`~interplace.collectors.table`: the long sample table (``t_s, host, device, metric,
  value`` [+ ``run_id``, ``scale``]), its canonical metric names and units
  (:data:`CANONICAL_METRICS`), validation, and CSV / Parquet files (:func:`read_samples`,
  :func:`write_samples`, written atomically).
- :mod:`~interplace.collectors.formats`: parsers of ``nvidia-smi --query-gpu`` CSV,
  ``nvidia-smi dmon``, ``perf stat -x, -I`` and dcgm-exporter's Prometheus text.
- :mod:`~interplace.collectors.ingest`: format detection and :func:`ingest` (file -> table).

- :mod:`~interplace.collectors.nvml`: GPU counters live through NVML (:class:`PynvmlSampler`)
  or replayed from a recording (:class:`ReplayGpuBackend`).
- :mod:`~interplace.collectors.host`: host CPU busy % and memory from ``/proc``
  (:class:`HostSampler`).
- :mod:`~interplace.collectors.sampler`: :func:`sample`, backends at a fixed interval into a
  chunked, crash-safe table file (:func:`read_partial` reads what a crash left).
- :mod:`~interplace.collectors.collect`: :func:`collect`, run a command while sampling.

Live perf collection is not implemented yet. This is the lowest layer: it imports nothing from
interplace but :mod:`interplace.errors`.
"""

from interplace.collectors.collect import CollectResult, collect
from interplace.collectors.host import HostSampler
from interplace.collectors.ingest import FORMATS, Format, detect_format, ingest
from interplace.collectors.nvml import (
    DeviceLost,
    EndOfRecording,
    GpuCounterBackend,
    PynvmlSampler,
    ReplayGpuBackend,
)
from interplace.collectors.sampler import SampleSummary, partial_path, read_partial, sample
from interplace.collectors.table import (
    CANONICAL_METRICS,
    OPTIONAL_COLUMNS,
    SAMPLE_COLUMNS,
    read_samples,
    validate_samples,
    write_samples,
)

__all__ = [
    "CANONICAL_METRICS",
    "FORMATS",
    "OPTIONAL_COLUMNS",
    "SAMPLE_COLUMNS",
    "CollectResult",
    "DeviceLost",
    "EndOfRecording",
    "Format",
    "GpuCounterBackend",
    "HostSampler",
    "PynvmlSampler",
    "ReplayGpuBackend",
    "SampleSummary",
    "collect",
    "detect_format",
    "ingest",
    "partial_path",
    "read_partial",
    "read_samples",
    "sample",
    "validate_samples",
    "write_samples",
]
