"""The collect, profile and ingest subcommands end to end: signals, early output checks, notes."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pynvml
import pytest

from interplace.cli import main
from interplace.collectors.nvml import PynvmlSampler
from interplace.collectors.sampler import partial_path
from interplace.collectors.table import read_samples
from tests.collectors.test_nvml import FakeNvml
from tests.collectors.toys import TOY_JOB, alive

# the modules, not the functions of the same names that interplace.collectors exports
collect_module = importlib.import_module("interplace.collectors.collect")
profile_module = importlib.import_module("interplace.collectors.profile")

FIXTURES = Path(__file__).parent.parent / "fixtures" / "collectors"

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")

_WAITS = """
import os, pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
time.sleep(30)
"""



def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err



def _fake_gpus_without_pcie_counters() -> FakeNvml:
    nv = FakeNvml(n=1)
    nv.field_fail = {pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES}
    return nv


# ---------------------------------------------------------------- collect


@pytest.mark.parametrize("ext", [".parquet", ".csv"])
def test_sigterm_to_collect_stops_the_command_and_writes_the_table(
    tmp_path: Path, ext: str
) -> None:
    out, pid_file = tmp_path / f"samples{ext}", tmp_path / "pid"
    cli = subprocess.Popen(
        [sys.executable, "-m", "interplace.cli", "collect", "--out", str(out),
         "--interval-ms", "20", "--", sys.executable, "-c", _WAITS, str(pid_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20.0
        while not pid_file.exists() and cli.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pid_file.exists(), cli.stderr.read() if cli.stderr else ""
        time.sleep(0.1)  # a few samples
        cli.send_signal(signal.SIGTERM)
        _, err = cli.communicate(timeout=20)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 128 + signal.SIGTERM, err
    assert "terminated by SIGTERM" in err and "Traceback" not in err
    assert not alive(int(pid_file.read_text()))
    assert len(read_samples(out)) > 0
    assert not partial_path(out).exists()


def test_collect_checks_the_output_before_starting_the_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[object] = []
    monkeypatch.setattr(collect_module.subprocess, "Popen", lambda *a, **k: started.append(a))
    for out, msg in [
        (tmp_path / "nonexist" / "x.csv", "output directory does not exist"),
        (tmp_path / "x.xlsx", "unknown sample-table extension '.xlsx'"),
    ]:
        code, text, err = run(capsys, "collect", "--out", str(out), "--", "sh", "-c",
                              "echo STARTED")  # fmt: skip
        assert code == 2 and text == ""
        assert err.startswith("interplace: error: ") and msg in err and err.count("\n") == 1
    assert started == []
    assert list(tmp_path.iterdir()) == []


def test_collect_notes_unsupported_gpu_metrics_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nv = _fake_gpus_without_pcie_counters()
    nv.fail[(0, "nvmlDeviceGetPowerUsage")] = pynvml.NVML_ERROR_NOT_SUPPORTED
    monkeypatch.setattr(collect_module, "PynvmlSampler", lambda: PynvmlSampler(nv))
    out = tmp_path / "s.csv"
    code, _, err = run(capsys, "collect", "--out", str(out), "--duration", "0.1",
                       "--interval-ms", "20")  # fmt: skip
    assert code == 0
    note = "interplace: note: GPU 0 does not report pcie_rx_bytes_total, pcie_tx_bytes_total, "
    assert err.count(note + "power_mw\n") == 1
    metrics = set(read_samples(out)["metric"])
    assert "pcie_tx_kbps" in metrics and "power_mw" not in metrics  # the throughput fallback


# ---------------------------------------------------------------- profile


def _toy_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "jobs.json"
    spec.write_text(
        json.dumps([{"name": "toy", "command": [sys.executable, "-c", TOY_JOB, "{seconds}"]}])
    )
    return spec


def test_profile_refuses_an_existing_output_before_running(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = _toy_spec(tmp_path)
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "keep.txt").write_text("mine")
    (tmp_path / "file").write_text("x")
    for out, msg in [
        ("prof", "already exists and is not empty"),
        ("file", "exists and is not a directory"),
    ]:
        start = time.monotonic()
        code, _, err = run(
            capsys,
            "profile",
            "--workloads",
            str(spec),
            "--out",
            str(tmp_path / out),
            "--device",
            "cpu",
            "--warmup",
            "5",
        )
        assert code == 2 and msg in err and err.count("\n") == 1
        assert time.monotonic() - start < 2.0  # refused before the 5 s warm-up
    assert sorted(p.name for p in (tmp_path / "prof").iterdir()) == ["keep.txt"]


def test_profile_names_the_gpu_in_runs_as_in_samples_and_notes_unsupported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nv = _fake_gpus_without_pcie_counters()
    monkeypatch.setattr(profile_module, "PynvmlSampler", lambda: PynvmlSampler(nv))
    monkeypatch.setattr(profile_module, "mps_unavailable_reason", lambda: "no MPS in tests")
    out = tmp_path / "prof"
    code, text, err = run(capsys, "profile", "--workloads", str(_toy_spec(tmp_path)), "--out",
                          str(out), "--device", "cuda", "--no-pairs", "--warmup", "0.1",
                          "--measure", "0.2")  # fmt: skip
    assert code == 0, err
    assert "profiled 1 workloads alone" in text
    assert err == ("interplace: note: GPU 0 does not report pcie_rx_bytes_total, "
                   "pcie_tx_bytes_total\n")  # fmt: skip
    runs = pd.read_csv(out / "runs.csv", dtype=str)
    samples = pd.read_csv(out / "samples.csv", dtype={"device": str})
    assert runs["device"].tolist() == ["0"]
    assert set(samples["device"]) == {"0", "host"}


# ---------------------------------------------------------------- ingest


def test_ingest_reports_unavailable_readings_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "s.csv"
    code, text, err = run(capsys, "ingest", str(FIXTURES / "dmon_default.txt"), "--out", str(out))
    assert code == 0
    assert text.count("\n") == 1 and "dmon" in text and "unavailable" not in text
    assert err == ("interplace: note: readings marked unavailable in the input for: "
                   "gpu_util_pct, mem_util_pct, mtemp\n")  # fmt: skip


def test_ingest_hints_at_fields_for_headerless_query_csv(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    src = FIXTURES / "nvsmi_query_noheader.csv"
    code, _, err = run(capsys, "ingest", str(src), "--out", str(tmp_path / "s.csv"))
    assert code == 2 and err.count("\n") == 1
    assert "--format nvsmi-query --fields" in err
    code, _, err = run(capsys, "ingest", str(src), "--out", str(tmp_path / "s.csv"), "--format",
                       "nvsmi-query", "--fields",
                       "timestamp,index,utilization.gpu,memory.used,power.draw")  # fmt: skip
    assert (code, err) == (0, "")
    assert os.path.getsize(tmp_path / "s.csv") > 0
