"""Counter collection (NVML, host /proc and perf) and parsers of nvidia-smi, dmon, perf and dcgm-exporter output into one long table. Not yet implemented: see the project's data issue.

This layer holds no code yet; importing it is safe and does nothing.
"""
