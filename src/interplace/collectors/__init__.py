"""Counter data as one tidy long table, and parsers of cluster counter formats into it.

- :mod:`~interplace.collectors.table`: the long sample table (``t_s, host, device, metric,
  value`` [+ ``run_id``, ``scale``]), its canonical metric names and units
  (:data:`CANONICAL_METRICS`), validation, and CSV / Parquet files (:func:`read_samples`,
  :func:`write_samples`, written atomically).
- :mod:`~interplace.collectors.formats`: parsers of ``nvidia-smi --query-gpu`` CSV,
  ``nvidia-smi dmon``, ``perf stat -x, -I`` and dcgm-exporter's Prometheus text.
- :mod:`~interplace.collectors.ingest`: format detection and :func:`ingest` (file -> table).

Live collection (NVML, host ``/proc``, perf) is not implemented yet. This is the lowest layer:
it imports nothing from interplace but :mod:`interplace.errors`.
"""

from interplace.collectors.ingest import FORMATS, Format, detect_format, ingest
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
    "Format",
    "detect_format",
    "ingest",
    "read_samples",
    "validate_samples",
    "write_samples",
]
