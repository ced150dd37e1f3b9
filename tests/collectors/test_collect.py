"""collect(): run a real short command while sampling host counters."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from interplace.collectors.collect import Terminated, _SigtermGuard, collect
from interplace.collectors.host import HostSampler
from interplace.collectors.sampler import partial_path, read_partial
from interplace.collectors.table import read_samples
from interplace.errors import InputError
from tests.collectors.toys import WAITS, alive, collect_module

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
    # Sampling spans the command (0.3 s) and ends with it; the upper bound only rules out
    # waiting for something else, with room for a loaded CI machine.
    assert 0.2 <= r.summary.seconds < 10.0
    assert r.summary.samples >= 3


def test_exit_code_is_returned(tmp_path: Path) -> None:
    r = collect([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "s.csv",
                backends=[HostSampler()])
    assert r.returncode == 3


def test_duration_stops_a_long_command(tmp_path: Path) -> None:
    r = collect([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "s.csv",
                interval_s=0.05, duration_s=0.2, backends=[HostSampler()])
    assert r.stopped and r.returncode is not None and r.returncode != 0
    assert r.summary.seconds < 10.0  # stopped at the duration, not after the 30 s command


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


def _sigterm_self(*ready: Callable[[], bool]) -> threading.Thread:
    """SIGTERM this process once per ``ready``, each as soon as it returns true."""

    def run() -> None:
        for r in ready:
            deadline = time.monotonic() + 10.0
            while not r() and time.monotonic() < deadline:
                time.sleep(0.01)
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
    killer = _sigterm_self(pid_file.exists)
    start = time.monotonic()
    try:
        r = collect([sys.executable, "-c", WAITS, str(pid_file)], out, interval_s=0.02,
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

    killer = _sigterm_self(stuck.is_set, stuck.is_set)
    start = time.monotonic()
    try:
        with pytest.raises(Terminated):
            collect([sys.executable, "-c", WAITS, str(pid_file)], out, interval_s=0.02,
                    backends=[Stuck()], chunk_rows=1)
    finally:
        killer.join()
    assert time.monotonic() - start < 4.0
    assert sigterm_guard == []
    assert not alive(int(pid_file.read_text()))
    assert not out.exists()
    assert len(read_partial(out)) > 0


_IGNORES_SIGTERM = """
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
""" + WAITS


def test_second_sigterm_after_sampling_kills_the_command_and_keeps_the_result(
        tmp_path: Path, sigterm_guard: list[int]) -> None:
    # The first SIGTERM ends sampling and out is written; collect() then waits for a command
    # that ignores SIGTERM. A second SIGTERM now has nothing left to interrupt: it kills the
    # command and collect() returns what it did.
    out, pid_file = tmp_path / "s.csv", tmp_path / "pid"
    killer = _sigterm_self(pid_file.exists, out.exists)
    try:
        r = collect([sys.executable, "-c", _IGNORES_SIGTERM, str(pid_file)], out,
                    interval_s=0.02, backends=[HostSampler()], term_grace_s=30.0)
    finally:
        killer.join()
    assert sigterm_guard == []
    assert r.terminated and r.stopped and r.returncode == -signal.SIGKILL
    assert not alive(int(pid_file.read_text()))
    assert r.summary.rows == len(read_samples(out)) > 0
    assert not partial_path(out).exists()


def test_command_is_stopped_when_terminated_as_soon_as_it_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[subprocess.Popen[bytes]] = []

    class SigtermAtOnce(_SigtermGuard):
        """As if the second SIGTERM arrived right after Popen returned."""

        @property
        def proc(self) -> subprocess.Popen[bytes] | None:
            return None

        @proc.setter
        def proc(self, proc: subprocess.Popen[bytes] | None) -> None:
            if proc is not None:
                started.append(proc)
                raise Terminated("terminated by a second SIGTERM")

    monkeypatch.setattr(collect_module, "_SigtermGuard", SigtermAtOnce)
    try:
        with pytest.raises(Terminated):
            collect([sys.executable, "-c", WAITS, str(tmp_path / "pid")], tmp_path / "s.csv",
                    backends=[HostSampler()], term_grace_s=5.0)
        assert len(started) == 1
        assert started[0].poll() is not None  # stopped and reaped
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize(("out_name", "kw", "msg"), [
    ("nodir/s.csv", {}, "output directory does not exist"),
    ("s.txt", {}, "unknown sample-table extension '.txt'"),
    ("isdir.csv", {}, "is a directory, not a file"),
    ("s.csv", {"interval_s": 0.0}, "interval must be a positive"),
    ("s.csv", {"run_id": ""}, "run id must not be empty"),
    ("s.csv", {"run_id": " "}, "run id must not be empty"),
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
