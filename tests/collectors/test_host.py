"""Host counters from a /proc tree written by the test, and from this machine's /proc."""

from __future__ import annotations

from pathlib import Path

import pytest

from interplace.collectors.host import HostSampler
from interplace.errors import InputError

MEMINFO = "MemTotal:       16000 kB\nMemFree:         1000 kB\nMemAvailable:    6000 kB\n"


def _proc(tmp_path: Path, stat: str) -> Path:
    (tmp_path / "stat").write_text(stat)
    (tmp_path / "meminfo").write_text(MEMINFO)
    return tmp_path


def test_busy_percent_from_two_snapshots(tmp_path: Path) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    proc = _proc(tmp_path, "cpu  100 0 50 800 50 0 0 0 30 0\ncpu0 100 0 50 800 50 0 0 0 30 0\n")
    h = HostSampler(proc)
    first = h.read(0)
    assert first == {"host_mem_used_bytes": (16000 - 6000) * 1024.0}
    # deltas: user +60, system +10, idle +100, iowait +20, irq +5, steal +5, guest +40
    # total (guest excluded: already in user) = 60+10+100+20+5+5 = 200; idle' = 120
    (proc / "stat").write_text("cpu  160 0 60 900 70 5 0 5 70 0\n")
    second = h.read(0)
    assert second["host_cpu_busy_pct"] == pytest.approx(100.0 * (200 - 120) / 200)
    # no time elapsed: no busy value
    assert "host_cpu_busy_pct" not in h.read(0)
    assert h.unsupported == frozenset()
    assert h.device_count() == 1 and h.device_id(0) == "host"


def test_file_vanishing_marks_metric_unsupported(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "cpu  1 0 1 8 0 0 0 0 0 0\n")
    h = HostSampler(proc)
    (proc / "meminfo").write_text("MemTotal: 5 kB\n")  # MemAvailable gone
    assert "host_mem_used_bytes" not in h.read(0)
    (proc / "meminfo").write_text(MEMINFO)
    assert "host_mem_used_bytes" not in h.read(0)  # remembered, not retried
    assert h.unsupported == frozenset({("host", "host_mem_used_bytes")})


def test_bad_proc_root_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot read .*stat"):
        HostSampler(tmp_path)
    _proc(tmp_path, "intr 5\n")
    with pytest.raises(InputError, match=r"malformed .*stat: no aggregate 'cpu' line"):
        HostSampler(tmp_path)
    with pytest.raises(InputError, match="one device"):
        HostSampler(_proc(tmp_path, "cpu 1 2 3 4 5\n")).read(1)


def test_real_proc() -> None:
    if not Path("/proc/stat").exists():
        pytest.skip("no /proc on this system")
    h = HostSampler()
    first = h.read(0)
    total = sum(1 for _ in range(200_000))  # burn a little CPU so jiffies move
    assert total == 200_000
    import time

    time.sleep(0.05)
    second = h.read(0)
    assert 0 < first["host_mem_used_bytes"] < 1 << 50
    assert "host_cpu_busy_pct" not in first
    if "host_cpu_busy_pct" in second:
        assert 0.0 <= second["host_cpu_busy_pct"] <= 100.0
