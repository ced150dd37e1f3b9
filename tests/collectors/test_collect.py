"""collect(): run a real short command while sampling host counters."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from interplace.collectors.collect import collect
from interplace.collectors.host import HostSampler
from interplace.collectors.table import read_samples
from interplace.errors import InputError

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")


def test_command_runs_and_is_sampled(tmp_path: Path) -> None:
    out = tmp_path / "s.parquet"
    r = collect([sys.executable, "-c", "import time; time.sleep(0.3)"], out, interval_s=0.05,
                backends=[HostSampler()])
    assert r.returncode == 0 and not r.stopped
    assert r.backends == ("HostSampler",)
    df = read_samples(out)
    assert r.summary.rows == len(df) > 0
    assert set(df["device"]) == {"host"}
    assert 0.2 <= r.summary.seconds < 2.0
    assert r.summary.samples >= 3


def test_exit_code_is_returned(tmp_path: Path) -> None:
    r = collect([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "s.csv",
                backends=[HostSampler()])
    assert r.returncode == 3


def test_duration_stops_a_long_command(tmp_path: Path) -> None:
    r = collect([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "s.csv",
                interval_s=0.05, duration_s=0.2, backends=[HostSampler()])
    assert r.stopped and r.returncode is not None and r.returncode != 0
    assert r.summary.seconds < 1.0


def test_default_backends_and_no_command(tmp_path: Path) -> None:
    r = collect(None, tmp_path / "s.csv", interval_s=0.05, duration_s=0.15)
    assert r.returncode is None and "HostSampler" in r.backends
    if "PynvmlSampler" not in r.backends:
        assert r.note.startswith("NVML is not available: ")
    assert r.summary.samples >= 2


def test_bad_commands(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^command not found: no-such-cmd-xyz$"):
        collect(["no-such-cmd-xyz"], tmp_path / "s.csv", backends=[HostSampler()])
    with pytest.raises(InputError, match="give a command to run or a duration"):
        collect(None, tmp_path / "s.csv")
    with pytest.raises(InputError, match="empty"):
        collect([], tmp_path / "s.csv")
    assert not (tmp_path / "s.csv").exists()
