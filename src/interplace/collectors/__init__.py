"""Counter collection and parsing.

NVML, host ``/proc`` and perf counters, and parsers of nvidia-smi, dmon, perf and
dcgm-exporter output, all into one long table. This layer is being built (the data issue).
"""
