"""Small child processes and helpers shared by the collector tests (no GPU, no torch)."""

from __future__ import annotations

import functools
import importlib
from pathlib import Path

import pytest

#: The module, not the function of the same name that ``interplace.collectors`` exports.
collect_module = importlib.import_module("interplace.collectors.collect")
#: The module, not the function of the same name that ``interplace.collectors`` exports.
profile_module = importlib.import_module("interplace.collectors.profile")

WAITS = """
import os, pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
time.sleep(30)
"""
"""A command that writes its pid to the file ``argv[1]`` names, then sleeps 30 s."""

TOY_JOB = """
import os, sys, time
print("INTERPLACE_UNIT steps", flush=True)
if os.environ.get("INTERPLACE_WAIT_GO") == "1":
    sys.stdin.readline()
end = time.monotonic() + float(sys.argv[1])
n = 0
print(f"INTERPLACE_PROGRESS {time.monotonic()!r} 0", flush=True)
while time.monotonic() < end:
    time.sleep(0.01)
    n += 1
    print(f"INTERPLACE_PROGRESS {time.monotonic()!r} {n}", flush=True)
"""
"""A job following the profile protocol: one step per 10 ms sleep, so at most 100 steps/s."""


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def fake_cuda(monkeypatch: pytest.MonkeyPatch, count: int, warning: str = "") -> list[float]:
    """Make :func:`~interplace.collectors.profile.profile`'s CUDA check see ``count`` devices
    (and torch's ``warning``) for this test; returns the list of the probe's calls (their
    timeouts). The check's cache of a count found is fresh for the test and the real one's
    is left as it was."""
    calls: list[float] = []

    def probe(timeout_s: float = 120.0) -> tuple[int, str]:
        calls.append(timeout_s)
        return count, warning

    monkeypatch.setattr(profile_module, "cuda_device_count", probe)
    monkeypatch.setattr(profile_module, "_cuda_devices",
                        functools.cache(profile_module._cuda_devices.__wrapped__))
    return calls
