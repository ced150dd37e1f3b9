"""The collect, profile and ingest subcommands end to end: signals, early output checks, notes."""

from __future__ import annotations

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
from interplace.collectors.collect import Terminated
from interplace.collectors.host import HostSampler
from interplace.collectors.nvml import PynvmlSampler
from interplace.collectors.sampler import partial_path, read_partial
from interplace.collectors.table import read_samples
from interplace.errors import InputError
from tests.collectors.test_nvml import FakeNvml
from tests.collectors.toys import TOY_JOB, WAITS, alive, collect_module, fake_cuda, profile_module

FIXTURES = Path(__file__).parent.parent / "fixtures" / "collectors"

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")


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
         "--interval-ms", "20", "--", sys.executable, "-c", WAITS, str(pid_file)],
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
    # The fallback rate appears from a GPU's second read on, so the ticks run on a fake clock:
    # on the wall clock a loaded machine's first read can outlast the whole 0.1 s (seen once,
    # 2026-11-29, with only that one read written).
    t = [0.0]

    def tick(seconds: float) -> None:
        t[0] += seconds

    real_sample = collect_module.sample
    monkeypatch.setattr(collect_module, "sample", lambda *a, **k: real_sample(
        *a, **{**k, "clock": lambda: t[0], "sleep": tick}))
    out = tmp_path / "s.csv"
    code, _, err = run(capsys, "collect", "--out", str(out), "--duration", "0.1",
                       "--interval-ms", "20")  # fmt: skip
    assert t[0] == pytest.approx(0.08)  # five ticks (0, 0.02, ... 0.08), all on the fake clock
    assert code == 0
    note = "interplace: note: GPU 0 does not report pcie_rx_bytes_total, pcie_tx_bytes_total, "
    assert err.count(note + "power_mw\n") == 1
    metrics = set(read_samples(out)["metric"])
    assert "pcie_tx_kbps" in metrics and "power_mw" not in metrics  # the throughput fallback


def _no_nvml() -> PynvmlSampler:
    raise InputError("NVML is not available: none in this test")


@pytest.mark.parametrize(("exc", "how", "code"), [
    (KeyboardInterrupt, "interrupted", 130),
    (Terminated, "terminated", 128 + signal.SIGTERM),
])
def test_collect_stopped_during_set_up_says_no_samples_were_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    exc: type[BaseException], how: str, code: int,
) -> None:
    out = tmp_path / "s.csv"
    partial_path(out).write_text("an older run's\n")  # not this run's samples: never named

    def stopped_in_nvml_init() -> PynvmlSampler:
        raise exc()

    monkeypatch.setattr(collect_module, "PynvmlSampler", stopped_in_nvml_init)
    got, text, err = run(capsys, "collect", "--out", str(out), "--duration", "5")
    assert (got, text, err) == (code, "", f"interplace: {how}; no samples were written\n")
    assert partial_path(out).read_text() == "an older run's\n" and not out.exists()


def test_collect_interrupted_while_sampling_names_the_partial(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class CtrlC(HostSampler):
        reads = 0

        def read(self, index: int) -> dict[str, float]:
            CtrlC.reads += 1
            if CtrlC.reads == 3:
                raise KeyboardInterrupt
            return super().read(index)

    monkeypatch.setattr(collect_module, "PynvmlSampler", _no_nvml)
    monkeypatch.setattr(collect_module, "HostSampler", CtrlC)
    out = tmp_path / "s.parquet"
    code, _, err = run(capsys, "collect", "--out", str(out), "--interval-ms", "10",
                       "--duration", "30")  # fmt: skip
    assert code == 130
    assert err == (f"interplace: interrupted; the samples taken so far are in "
                   f"{partial_path(out)} (interplace.collectors.read_partial reads them)\n")
    assert len(read_partial(out)) > 0 and not out.exists()


def test_collect_interrupted_after_sampling_names_the_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = collect_module._stop

    def stop_then_ctrl_c(proc: subprocess.Popen[bytes], grace_s: float) -> None:
        stop(proc, grace_s)
        raise KeyboardInterrupt  # while collect() waited for the command, after sampling

    monkeypatch.setattr(collect_module, "PynvmlSampler", _no_nvml)
    monkeypatch.setattr(collect_module, "_stop", stop_then_ctrl_c)
    out = tmp_path / "s.csv"
    out.write_text("an older table\n")
    code, _, err = run(capsys, "collect", "--out", str(out), "--interval-ms", "10", "--",
                       sys.executable, "-c", "import time; time.sleep(0.1)")  # fmt: skip
    assert (code, err) == (130, f"interplace: interrupted; the samples are in {out}\n")
    assert len(read_samples(out)) > 0 and not partial_path(out).exists()


# ---------------------------------------------------------------- profile


def _toy_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "jobs.json"
    spec.write_text(
        json.dumps([{"name": "toy", "command": [sys.executable, "-c", TOY_JOB, "{seconds}"]}])
    )
    return spec


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
    assert "profiled 1 workload alone" in text
    assert err == ("interplace: note: GPU 0 does not report pcie_rx_bytes_total, "
                   "pcie_tx_bytes_total\n")  # fmt: skip
    runs = pd.read_csv(out / "runs.csv", dtype=str)
    samples = pd.read_csv(out / "samples.csv", dtype={"device": str})
    assert runs["device"].tolist() == ["0"]
    assert set(samples["device"]) == {"0", "host"}
    # --gpu means nothing with --device cpu (it was taken and ignored)
    code, _, err = run(capsys, "profile", "--workloads", str(_toy_spec(tmp_path)), "--out",
                       str(tmp_path / "cpu"), "--device", "cpu", "--gpu", "3")
    assert code == 2 and "--gpu picks a GPU for --device cuda" in err


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


def test_collect_says_when_the_command_outlived_duration_or_ended_before_sampling(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "collect", "--out", str(tmp_path / "d.csv"), "--duration",
                       "0.3", "--", "sleep", "30")
    assert code == 128 + signal.SIGTERM  # the command's own status: killed by our SIGTERM
    assert "sleep was still running after --duration 0.3 s and was stopped" in err
    code, _, err = run(capsys, "collect", "--out", str(tmp_path / "t.csv"), "--interval-ms",
                       "1000", "--", sys.executable, "-c", "pass")
    assert code == 0
    samples = len(read_samples(tmp_path / "t.csv"))
    # Python's start-up outlasts the first tick here; if not, it must say nothing was measured.
    assert samples > 0 or "ended before the first sample" in err


# ---------------------------------------------------------------- messages name the options


def _one_error(code: int, text: str, err: str) -> str:
    """The message of a one-line ``interplace: error:`` with exit status 2 and no stdout."""
    assert (code, text) == (2, ""), err
    assert err.startswith("interplace: error: ") and err.count("\n") == 1, err
    return err.removeprefix("interplace: error: ").rstrip("\n")


@pytest.mark.parametrize(
    ("name", "argv", "message"),
    [
        ("nvsmi_query_units.csv", ["--interval", "5"],
         "--interval does not apply to the nvsmi-query format"),
        ("dmon_default.txt", ["--fields", "a,b"], "--fields does not apply to the dmon format"),
        ("dmon_default.txt", ["--interval", "-1"],
         "--interval must be a positive number of seconds, got -1"),
        ("dmon_default.txt", ["--interval", "nan"],
         "--interval must be a positive number of seconds, got nan"),
        ("dmon_default.txt", ["--interval", "0"],
         "--interval must be a positive number of seconds, got 0"),
    ],
)  # fmt: skip
def test_ingest_names_its_options_not_the_librarys(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, argv: list[str], message: str
) -> None:
    out = tmp_path / "x.csv"
    got = _one_error(*run(capsys, "ingest", str(FIXTURES / name), "--out", str(out), *argv))
    assert got == message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([f"--interval-ms={value}"], "--interval-ms must be positive (a finite number of "
         f"milliseconds), got {value}") for value in ("nan", "inf", "-inf", "-5", "0")
    ] + [
        ([f"--duration={value}"], f"--duration must be positive (a finite number of seconds), "
         f"got {value}") for value in ("nan", "inf", "-1", "0")
    ],
)  # fmt: skip
def test_collect_names_its_options_in_its_units(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    argv: list[str], message: str
) -> None:
    started: list[object] = []
    monkeypatch.setattr(collect_module.subprocess, "Popen", lambda *a, **k: started.append(a))
    got = _one_error(*run(capsys, "collect", "--out", str(tmp_path / "c.csv"), *argv, "--",
                          "true"))
    assert got == message
    assert started == [] and list(tmp_path.iterdir()) == []


def test_a_directory_as_output_is_named_as_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # both said "<dir>: unknown sample-table extension '(none)' (expected .csv or .parquet)"
    started: list[object] = []
    monkeypatch.setattr(collect_module.subprocess, "Popen", lambda *a, **k: started.append(a))
    for d in (tmp_path, tmp_path / "looks.csv"):
        d.mkdir(exist_ok=True)
        message = f"{d} is a directory, not a file"
        assert _one_error(*run(capsys, "ingest", str(FIXTURES / "dmon_default.txt"), "--out",
                               str(d))) == message
        assert _one_error(*run(capsys, "collect", "--out", str(d), "--", "true")) == message
    assert started == []
    assert [p.name for p in tmp_path.iterdir()] == ["looks.csv"]
    assert list((tmp_path / "looks.csv").iterdir()) == []


def test_ingest_checks_its_output_before_reading_the_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The input is not counter output at all: a bad --out is what is said, first.
    got = _one_error(*run(capsys, "ingest", str(tmp_path / "missing.txt"), "--out",
                          str(tmp_path / "s.xlsx")))
    assert got.endswith("unknown sample-table extension '.xlsx' (expected .csv or .parquet)")


def test_ingest_counts_in_the_singular_and_the_plural(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    one = tmp_path / "one.txt"
    one.write_text("# gpu   pwr\n# Idx     W\n    0    43\n")
    code, text, err = run(capsys, "ingest", str(one), "--out", str(tmp_path / "one.csv"))
    assert (code, err) == (0, "")
    assert text == f"{one}: dmon, 1 sample, 1 metric, 1 device -> {tmp_path / 'one.csv'}\n"
    code, text, _ = run(capsys, "ingest", str(FIXTURES / "dmon_default.txt"), "--out",
                        str(tmp_path / "two.csv"))
    assert code == 0 and ": dmon, 46 samples, 8 metrics, 2 devices -> " in text


# ---------------------------------------------------------------- profile and CUDA


def test_profile_on_cuda_without_cuda_says_so_up_front(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was: workload 'gemm' crashed (exit code 1): interplace workload: error: --device cuda
    # but CUDA is not available before reporting INTERPLACE_UNIT
    fake_cuda(monkeypatch, 0)
    monkeypatch.setattr(profile_module, "_Proc", lambda *a, **k: pytest.fail("started"))
    out = tmp_path / "prof"
    got = _one_error(*run(capsys, "profile", "--workloads", "gemm", "--out", str(out)))
    assert got == ("--device cuda: no CUDA device here (torch.cuda.is_available() is False); "
                   "use --device cpu")
    fake_cuda(monkeypatch, 1)
    got = _one_error(*run(capsys, "profile", "--workloads", "gemm", "--out", str(out), "--gpu",
                          "1"))
    assert got == "no GPU 1: CUDA sees GPU 0"
    assert list(tmp_path.iterdir()) == []


def test_profile_on_cuda_without_cuda_says_so_for_real(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    got = _one_error(*run(capsys, "profile", "--workloads", "launch:8", "--out",
                          str(tmp_path / "prof"), "--device", "cuda"))
    assert got.startswith("--device cuda: no CUDA device here (torch.cuda.is_available() is "
                          "False") and got.endswith("; use --device cpu")
    assert list(tmp_path.iterdir()) == []


def test_profile_help_documents_workloads_and_no_fallback(
    capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["profile", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("--workloads SPEC the workloads: a comma list of built-in names, each NAME or "
            "NAME:SIZE") in text
    assert "cuda (the default) needs a CUDA GPU" in text and "no automatic fallback" in text
    assert "cpu on a machine without a GPU" not in text  # read like a fallback
