"""collect(): run a real short command while sampling host counters."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from interplace.collectors.collect import Terminated, collect
from interplace.collectors.host import HostSampler
from interplace.collectors.sampler import partial_path, read_partial
from interplace.collectors.table import read_samples
from interplace.errors import InputError
from tests.collectors.toys import alive

# the module, not the function of the same name that interplace.collectors exports
collect_module = importlib.import_module("interplace.collectors.collect")

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


_WAITS = """
import pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text(str(__import__("os").getpid()))
time.sleep(30)
"""



def _kill_self_once(ready: Callable[[], bool], times: int = 1) -> threading.Thread:
    """SIGTERM this process ``times`` times once ``ready()``."""

    def run() -> None:
        deadline = time.monotonic() + 10.0
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(times):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.fixture
def sigterm_guard() -> Iterator[list[int]]:
    """A SIGTERM handler of our own for the test: records instead of killing pytest.

    collect() must replace it while it runs and put it back afterwards.
    """
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        yield got
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("ext", [".parquet", ".csv"])
def test_sigterm_stops_the_command_and_keeps_the_samples(
        tmp_path: Path, ext: str, sigterm_guard: list[int]) -> None:
    out, pid_file = tmp_path / f"s{ext}", tmp_path / "pid"
    before = signal.getsignal(signal.SIGTERM)
    killer = _kill_self_once(pid_file.exists)
    start = time.monotonic()
    try:
        r = collect([sys.executable, "-c", _WAITS, str(pid_file)], out, interval_s=0.02,
                    backends=[HostSampler()], term_grace_s=2.0)
    finally:
        killer.join()  # no signal may come after the guard is gone
    assert time.monotonic() - start < 5.0
    assert sigterm_guard == []  # our handler was replaced while collect() ran ...
    assert signal.getsignal(signal.SIGTERM) is before  # ... and is back
    assert r.terminated and r.stopped and r.returncode == -signal.SIGTERM
    assert not alive(int(pid_file.read_text()))
    df = read_samples(out)  # committed: everything sampled up to the signal
    assert r.summary.rows == len(df) > 0
    assert not partial_path(out).exists()


def test_second_sigterm_raises_and_leaves_a_readable_partial(
        tmp_path: Path, sigterm_guard: list[int]) -> None:
    out, pid_file = tmp_path / "s.parquet", tmp_path / "pid"

    stuck = threading.Event()

    class Stuck(HostSampler):
        """Sampling that hangs (a wedged driver call) once the command is up."""

        def read(self, index: int) -> dict[str, float]:
            if pid_file.exists():
                stuck.set()
                time.sleep(5.0)  # the first SIGTERM cannot end this; the second one's raise does
            return super().read(index)

    killer = _kill_self_once(stuck.is_set, times=2)
    start = time.monotonic()
    try:
        with pytest.raises(Terminated):
            collect([sys.executable, "-c", _WAITS, str(pid_file)], out, interval_s=0.02,
                    backends=[Stuck()], chunk_rows=1)
    finally:
        killer.join()
    assert time.monotonic() - start < 4.0
    assert sigterm_guard == []
    assert not alive(int(pid_file.read_text()))
    assert not out.exists()
    assert len(read_partial(out)) > 0


@pytest.mark.parametrize(("out_name", "kw", "msg"), [
    ("nodir/s.csv", {}, "output directory does not exist"),
    ("s.txt", {}, "unknown sample-table extension '.txt'"),
    ("isdir.csv", {}, "is a directory, not a file"),
    ("s.csv", {"interval_s": 0.0}, "interval must be a positive"),
    ("s.csv", {"run_id": ""}, "run id must not be empty"),
])
def test_bad_output_or_arguments_are_refused_before_the_command_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out_name: str, kw: dict[str, Any],
        msg: str) -> None:
    (tmp_path / "isdir.csv").mkdir()
    started: list[object] = []
    monkeypatch.setattr(collect_module.subprocess, "Popen",
                        lambda *a, **k: started.append(a))
    with pytest.raises(InputError, match=msg):
        collect(["sh", "-c", "echo STARTED"], tmp_path / out_name, backends=[HostSampler()],
                **kw)
    assert started == []
