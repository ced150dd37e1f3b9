"""Machine-wide host counters from Linux ``/proc``, one reading per call.

:class:`HostSampler` is a :class:`~interplace.collectors.nvml.GpuCounterBackend` with one
device, ``"host"``, whose readings are

* ``host_cpu_busy_pct`` from the aggregate ``cpu`` line of ``/proc/stat``, whose fields are
  cumulative jiffies ``user nice system idle iowait irq softirq steal guest guest_nice``.
  With ``total = user + ... + steal`` (``guest`` and ``guest_nice`` are already counted in
  ``user`` and ``nice``) and ``idle' = idle + iowait``, between two consecutive reads

  .. math:: \\text{busy} = 100 \\cdot
            \\frac{\\Delta\\text{total} - \\Delta\\text{idle'}}{\\Delta\\text{total}}

  so the first read has no busy value (nor does a read with no jiffies elapsed).
* ``host_mem_used_bytes = (MemTotal - MemAvailable) * 1024`` from ``/proc/meminfo`` (kB).

A file that cannot be read or parsed during sampling marks its metric unsupported for good.
"""

from __future__ import annotations

import os
from pathlib import Path

from interplace.errors import InputError

__all__ = ["HostSampler"]

_DEVICE = "host"


def _cpu_jiffies(text: str) -> tuple[int, int]:
    """``(total, idle + iowait)`` of the aggregate ``cpu`` line of ``/proc/stat``.

    >>> _cpu_jiffies("cpu  10 0 5 80 5 0 0 0 0 0\\ncpu0 10 0 5 80 5 0 0 0 0 0\\n")
    (100, 85)
    """
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            if len(parts) < 5:
                raise ValueError("aggregate cpu line has fewer than 4 fields")
            nums = [int(x) for x in parts[1:9]]
            idle = nums[3] + (nums[4] if len(nums) > 4 else 0)
            return sum(nums), idle
    raise ValueError("no aggregate 'cpu' line")


def _mem_used_bytes(text: str) -> float:
    """``(MemTotal - MemAvailable)`` of ``/proc/meminfo`` in bytes.

    >>> _mem_used_bytes("MemTotal: 1000 kB\\nMemFree: 10 kB\\nMemAvailable: 400 kB\\n")
    614400.0
    """
    fields: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key in ("MemTotal", "MemAvailable") and parts:
            fields[key] = int(parts[0])
    if "MemTotal" not in fields or "MemAvailable" not in fields:
        raise ValueError("no MemTotal or MemAvailable line")
    return float((fields["MemTotal"] - fields["MemAvailable"]) * 1024)


class HostSampler:
    """Host CPU busy % and memory in use, read from ``proc_root`` (default ``/proc``).

    Raises :class:`InputError` at construction if ``proc_root/stat`` or ``proc_root/meminfo``
    cannot be read and parsed.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "meminfo").write_text("MemTotal: 4 kB\\nMemAvailable: 1 kB\\n")
    >>> _ = (d / "stat").write_text("cpu  10 0 10 70 10 0 0 0 0 0\\n")
    >>> h = HostSampler(d)
    >>> h.read(0)
    {'host_mem_used_bytes': 3072.0}
    >>> _ = (d / "stat").write_text("cpu  40 0 10 100 10 0 0 0 0 0\\n")
    >>> h.read(0)["host_cpu_busy_pct"]
    50.0
    """

    def __init__(self, proc_root: str | os.PathLike[str] = "/proc") -> None:
        self.proc_root = Path(proc_root)
        self._unsupported: set[str] = set()
        self._last_cpu: tuple[int, int] | None = None
        for name, parse in (("stat", _cpu_jiffies), ("meminfo", _mem_used_bytes)):
            path = self.proc_root / name
            try:
                parse(path.read_text())
            except OSError as exc:
                raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
            except ValueError as exc:
                raise InputError(f"malformed {path}: {exc}") from None

    def device_count(self) -> int:
        """One device: the whole host."""
        return 1

    def device_id(self, index: int) -> str:
        """``"host"``."""
        return _DEVICE

    @property
    def unsupported(self) -> frozenset[tuple[str, str]]:
        """``("host", metric)`` pairs whose file failed to read or parse."""
        return frozenset((_DEVICE, m) for m in self._unsupported)

    def read(self, index: int = 0) -> dict[str, float]:
        """One reading; ``host_cpu_busy_pct`` only from the second read on."""
        if index != 0:
            raise InputError(f"the host sampler has one device (0), not {index}")
        out: dict[str, float] = {}
        if "host_cpu_busy_pct" not in self._unsupported:
            try:
                cur = _cpu_jiffies((self.proc_root / "stat").read_text())
            except (OSError, ValueError):
                self._unsupported.add("host_cpu_busy_pct")
            else:
                last, self._last_cpu = self._last_cpu, cur
                if last is not None:
                    d_total, d_idle = cur[0] - last[0], cur[1] - last[1]
                    if d_total > 0 and 0 <= d_idle <= d_total:
                        out["host_cpu_busy_pct"] = 100.0 * (d_total - d_idle) / d_total
        if "host_mem_used_bytes" not in self._unsupported:
            try:
                out["host_mem_used_bytes"] = _mem_used_bytes(
                    (self.proc_root / "meminfo").read_text())
            except (OSError, ValueError):
                self._unsupported.add("host_mem_used_bytes")
        return out
