"""profile(): co-runners released together, window throughputs, runs/samples files."""

from __future__ import annotations

import json
import pickle
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from interplace.collectors.host import HostSampler
from interplace.collectors.profile import (
    CudaUnavailableError,
    WorkloadSpec,
    cuda_device_count,
    mps_unavailable_reason,
    parse_progress,
    parse_workloads,
    profile,
    window_units,
)
from interplace.datasets import read_dir
from interplace.errors import InputError
from tests.collectors.toys import TOY_JOB, fake_cuda, profile_module


def _py(name: str, script: str) -> WorkloadSpec:
    return WorkloadSpec(name, (sys.executable, "-c", script, "{seconds}"))


# ---------------------------------------------------------------- protocol and interpolation


def test_parse_progress_ignores_other_lines_and_checks_order() -> None:
    p = parse_progress(["loss 0.3", "INTERPLACE_UNIT bytes", "INTERPLACE_PROGRESS 10.0 0",
                        "INTERPLACE_PROGRESS 10.1 5e3", ""], "j")
    assert p.unit == "bytes"
    assert p.times.tolist() == [10.0, 10.1]
    assert p.units.tolist() == [0.0, 5000.0]
    with pytest.raises(InputError, match="'j': progress went backwards"):
        parse_progress(["INTERPLACE_PROGRESS 2 5", "INTERPLACE_PROGRESS 3 4"], "j")
    with pytest.raises(InputError, match="malformed progress line"):
        parse_progress(["INTERPLACE_PROGRESS 2 5 7"], "j")
    with pytest.raises(InputError, match="malformed unit line"):
        parse_progress(["INTERPLACE_UNIT"], "j")


def test_window_units_interpolates_at_both_edges() -> None:
    t = np.array([0.0, 1.0, 3.0])
    u = np.array([0.0, 10.0, 50.0])
    # U(0.25) = 2.5; U(2.0) = 10 + 40 * (1/2) = 30
    assert window_units(t, u, 0.25, 2.0) == pytest.approx(27.5)
    assert window_units(t, u, 1.0, 3.0) == pytest.approx(40.0)
    # before the first report nothing is credited
    assert window_units(t + 1.0, u, 0.0, 2.0) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="after the last report"):
        window_units(t, u, 0.0, 3.5)


def test_parse_workloads_builtins_and_files(tmp_path: Path) -> None:
    specs = parse_workloads("gemm,launch:8")
    assert [s.name for s in specs] == ["gemm", "launch-8"]
    assert specs[1].argv[-2:] == ("--size", "8")
    assert "{device}" in specs[0].argv
    js = tmp_path / "w.json"
    js.write_text(json.dumps({"workloads": [{"name": "a", "command": "python a.py --x 1"},
                                            {"name": "b", "command": ["b", "{device}"]}]}))
    assert [(s.name, s.argv) for s in parse_workloads(str(js))] == [
        ("a", ("python", "a.py", "--x", "1")), ("b", ("b", "{device}"))]
    tm = tmp_path / "w.toml"
    tm.write_text('[[workloads]]\nname = "t"\ncommand = ["run", "{seconds}"]\n')
    assert parse_workloads(str(tm)) == [WorkloadSpec("t", ("run", "{seconds}"))]
    with pytest.raises(InputError, match="unknown workload 'bogus'"):
        parse_workloads("gemm,bogus")
    with pytest.raises(InputError, match=r"is a directory: give a \.json / \.toml file"):
        parse_workloads(str(tmp_path))
    with pytest.raises(InputError, match="given twice: gemm"):
        parse_workloads("gemm,gemm")
    with pytest.raises(InputError, match="no such file"):
        parse_workloads(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('[{"name": "x"}]')
    with pytest.raises(InputError, match="needs 'name' and 'command'"):
        parse_workloads(str(bad))
    bad.write_text('[{"name": "q", "command": "python -c \'print(1)"}]')  # unclosed quote
    with pytest.raises(InputError, match=r"workload 'q': 'command' .*No closing quotation"):
        parse_workloads(str(bad))  # was shlex's ValueError, with a traceback
    bad.write_text("workloads: [gemm]")  # YAML is not a workload file format
    with pytest.raises(InputError, match=r"bad\.json: not valid JSON"):
        parse_workloads(str(bad))


def test_a_builtin_name_wins_over_a_file_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A binary called gemm in the working directory is plausible where people run GPUs.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gemm").write_bytes(b"\x7fELF")
    assert [s.name for s in parse_workloads("gemm")] == ["gemm"]


def test_mps_reason(tmp_path: Path) -> None:
    assert mps_unavailable_reason(which=lambda _: None) == \
        "nvidia-cuda-mps-control is not on PATH"
    (tmp_path / "12").mkdir()
    (tmp_path / "12" / "comm").write_text("python\n")
    found = mps_unavailable_reason(which=lambda _: "/usr/bin/x", proc_root=tmp_path)
    assert found is not None and "not running" in found
    (tmp_path / "34").mkdir()
    (tmp_path / "34" / "comm").write_text("nvidia-cuda-mps\n")
    assert mps_unavailable_reason(which=lambda _: "/usr/bin/x", proc_root=tmp_path) is None


# ---------------------------------------------------------------- profile() end to end


def test_profile_alone_and_in_pairs(tmp_path: Path) -> None:
    # Toy jobs keep this fast; the built-in workloads go through profile in
    # tests/test_cli.py::test_profile_on_cpu_writes_a_runs_dataset and speak the protocol in
    # test_workloads.py.
    other_unit = TOY_JOB.replace("INTERPLACE_UNIT steps", "INTERPLACE_UNIT x")
    jobs = [_py("a", TOY_JOB), _py("b", other_unit)]
    result = profile(jobs, tmp_path / "prof", warmup_s=0.1, measure_s=0.2, device="cpu")
    assert result.out == tmp_path / "prof" and result.runs == 5
    assert result.unsupported == frozenset()
    data = read_dir(result.out)
    runs = data.runs
    sizes = runs.groupby("run_id")["job"].size()
    assert (sizes == 1).sum() == 2 and (sizes == 2).sum() == 3
    assert sorted(runs.loc[runs["run_id"] == "timeslice-a+a", "job"]) == ["a", "a"]
    assert (runs["throughput"] > 0).all()
    # a CPU profile ran on no GPU: its device cells are missing; its samples are host-wide
    assert set(runs["mode"]) == {"timeslice"} and runs["device"].isna().all()
    assert dict(zip(runs["job"], runs["unit"], strict=True)) == {"a": "steps", "b": "x"}
    assert data.samples is not None
    assert set(data.samples["run_id"]) == set(runs["run_id"])
    assert "host_mem_used_bytes" in set(data.samples["metric"])
    assert set(data.samples["device"]) == {"host"}


def test_profile_user_job_from_json(tmp_path: Path) -> None:
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps([{"name": "toy",
                                 "command": [sys.executable, "-c", TOY_JOB, "{seconds}"]}]))
    result = profile(parse_workloads(str(spec)), tmp_path / "o", warmup_s=0.2, measure_s=0.5,
                     device="cpu", pairs=False)
    runs = read_dir(result.out).runs
    assert runs["run_id"].tolist() == ["timeslice-toy"]
    assert runs["unit"].tolist() == ["steps"]
    # 10 ms sleeps: at most 100 steps/s; even a loaded 2-core VM manages well over 20
    assert 20.0 < runs["throughput"].iloc[0] <= 101.0


_CRASH = """
import sys
print("INTERPLACE_UNIT steps", flush=True)
sys.stdin.readline()
print("boom", file=sys.stderr)
raise SystemExit(3)
"""

_SILENT = """
import sys, time
print("INTERPLACE_UNIT steps", flush=True)
sys.stdin.readline()
time.sleep(30)
"""


def test_crashing_workload_is_named_and_nothing_written(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        profile([_py("ok", TOY_JOB), _py("bad", _CRASH)], tmp_path / "o", warmup_s=0.1,
                measure_s=0.2, device="cpu", backends=[HostSampler()])
    assert str(err.value) == ("workload 'bad' crashed (exit code 3) before the measurement "
                              "window ended; its stderr ends: boom")
    assert not (tmp_path / "o" / "runs.csv").exists()


_QUITS_EARLY = """
import sys, time
print("INTERPLACE_UNIT steps", flush=True)
sys.stdin.readline()
print(f"INTERPLACE_PROGRESS {time.monotonic()!r} 0", flush=True)
print("done already", file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("script", "message"),
    [
        # was "... exited before the measurement window ended before reporting INTERPLACE_UNIT"
        ("pass", "workload 'early' exited before reporting INTERPLACE_UNIT"),
        ("import sys; print('no GPU', file=sys.stderr); raise SystemExit(1)",
         "workload 'early' crashed (exit code 1) before reporting INTERPLACE_UNIT; its stderr "
         "ends: no GPU"),
        (_QUITS_EARLY, "workload 'early' exited before the measurement window ended; its "
         "stderr ends: done already"),
    ],
)  # fmt: skip
def test_a_workload_that_ends_early_is_named_once_with_when(
    tmp_path: Path, script: str, message: str
) -> None:
    with pytest.raises(InputError) as err:
        profile([_py("early", script)], tmp_path / "o", warmup_s=0.1, measure_s=0.2,
                device="cpu", pairs=False, backends=[HostSampler()])
    assert str(err.value) == message
    assert not (tmp_path / "o").exists()


def test_silent_workload_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="'quiet' never reported progress"):
        profile([_py("quiet", _SILENT)], tmp_path / "o", warmup_s=0.1, measure_s=0.2,
                device="cpu", grace_s=0.3)
    no_unit = _py("mute", "import time; time.sleep(30)")
    with pytest.raises(InputError, match="'mute' never reported INTERPLACE_UNIT"):
        profile([no_unit], tmp_path / "o", device="cpu", startup_timeout_s=0.5)
    assert not (tmp_path / "o").exists()


def test_a_malformed_progress_line_is_named_at_once(tmp_path: Path) -> None:
    # It was skipped while waiting: the run waited out the workload (30 s here) and then said
    # the workload "never reported progress", not which line it could not read.
    garbled = _SILENT.replace('sys.stdin.readline()', 'sys.stdin.readline()\n'
                              'print("INTERPLACE_PROGRESS abc 1", flush=True)')
    start = time.monotonic()
    with pytest.raises(InputError, match="'garbled': malformed progress line "
                                         "'INTERPLACE_PROGRESS abc 1'"):
        profile([_py("garbled", garbled)], tmp_path / "o", warmup_s=0.1, measure_s=0.2,
                device="cpu", grace_s=60.0)
    assert time.monotonic() - start < 30.0  # not the workload's 30 s, nor the grace's 60
    assert not (tmp_path / "o").exists()


def test_mps_refused_without_daemon(tmp_path: Path) -> None:
    if mps_unavailable_reason() is None:
        pytest.skip("an MPS daemon is running here")
    with pytest.raises(InputError, match="mode 'mps' is unavailable"):
        profile([_py("toy", TOY_JOB)], tmp_path, modes=("timeslice", "mps"), device="cuda")
    with pytest.raises(InputError, match="needs device 'cuda'"):
        profile([_py("toy", TOY_JOB)], tmp_path, modes=("mps",), device="cpu")
    with pytest.raises(InputError, match="unknown mode 'spatial'"):
        profile([_py("toy", TOY_JOB)], tmp_path, modes=("spatial",), device="cpu")
    assert not (tmp_path / "runs.csv").exists()


def _started(marker: Path) -> WorkloadSpec:
    """A workload that leaves ``marker`` behind if it is ever started."""
    return _py("m", f"open({str(marker)!r}, 'w').close()\n" + TOY_JOB)


def test_output_directory_is_checked_before_any_workload_runs(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "runs.csv").write_text("old")
    (tmp_path / "file").write_text("x")
    for out, msg in [(tmp_path / "full", "already exists and is not empty"),
                     (tmp_path / "file", "exists and is not a directory"),
                     (tmp_path / "file" / "sub", "is not a directory")]:
        with pytest.raises(InputError, match=msg):
            profile([_started(marker)], out, warmup_s=0.1, measure_s=0.2, device="cpu",
                    backends=[HostSampler()])
        assert not marker.exists()
    assert (tmp_path / "full" / "runs.csv").read_text() == "old"
    # an existing empty directory is fine, and nested new directories are created
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new" / "deeper"):
        result = profile([_py("toy", TOY_JOB)], out, warmup_s=0.1, measure_s=0.2, device="cpu",
                         pairs=False, backends=[HostSampler()])
        assert (result.out / "runs.csv").is_file()


_ENV_TOY = """
import os, sys
with open(sys.argv[2], "w") as f:
    f.write(os.environ.get("CUDA_DEVICE_ORDER", "") + " "
            + os.environ.get("CUDA_VISIBLE_DEVICES", ""))
""" + TOY_JOB


def test_cuda_runs_name_the_gpu_as_the_samples_do(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from interplace.collectors.nvml import ReplayGpuBackend

    gpus = ReplayGpuBackend({"devices": [[{"gpu_util_pct": 0.0}] * 200,
                                         [{"gpu_util_pct": 91.0}] * 200],
                             "unsupported": [[0, "power_mw"], [1, "pcie_tx_bytes_total"]]})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # replaced: the runs' GPU is the one named
    env_file = tmp_path / "env.txt"
    job = WorkloadSpec("toy", (sys.executable, "-c", _ENV_TOY, "{seconds}", str(env_file)))
    result = profile([job], tmp_path / "o", warmup_s=0.1, measure_s=0.2, device="cuda", gpu=1,
                     pairs=False, backends=[gpus, HostSampler()])
    data = read_dir(result.out)
    assert data.runs["device"].tolist() == ["1"]
    assert data.samples is not None
    # Only the run's GPU is sampled: the model counts a sample of a GPU no runs.csv row names
    # for the whole run, so idle GPU 0's 0 % would be taken for the job's utilisation too.
    assert set(data.samples["device"]) == {"1", "host"}
    gpu_util = data.samples.loc[data.samples["metric"] == "gpu_util_pct", "value"]
    assert len(gpu_util) > 0 and (gpu_util == 91.0).all()
    assert env_file.read_text() == "PCI_BUS_ID 1"
    assert result.unsupported == frozenset({("1", "pcie_tx_bytes_total")})  # not GPU 0's
    with pytest.raises(InputError, match="no GPU 2: ReplayGpuBackend sees GPUs 0, 1"):
        profile([job], tmp_path / "o2", device="cuda", gpu=2, backends=[gpus])
    with pytest.raises(InputError, match="gpu must be a GPU index"):
        profile([job], tmp_path / "o2", device="cuda", gpu=-1, backends=[gpus])


# ---------------------------------------------------------------- the CUDA check


def test_builtins_are_marked_and_files_are_not(tmp_path: Path) -> None:
    assert [w.builtin for w in parse_workloads("gemm,launch:8")] == [True, True]
    js = tmp_path / "w.json"
    js.write_text(json.dumps([{"name": "a", "command": ["a"]}]))
    assert [w.builtin for w in parse_workloads(str(js))] == [False]
    with pytest.raises(InputError, match="workload 'a': builtin must be True or False"):
        WorkloadSpec("a", ("a",), builtin="yes")  # type: ignore[arg-type]


def test_builtins_on_cuda_without_cuda_are_refused_before_any_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_cuda(monkeypatch, 0, "CUDA initialization: no driver")
    started: list[object] = []
    monkeypatch.setattr(profile_module, "_Proc", lambda *a, **k: started.append(a))
    with pytest.raises(CudaUnavailableError) as err:
        profile(parse_workloads("launch:8"), tmp_path / "o", device="cuda",
                backends=[HostSampler()])
    assert err.value.reason == ("no CUDA device here (torch.cuda.is_available() is False: "
                                "CUDA initialization: no driver)")
    assert str(err.value) == f"device 'cuda': {err.value.reason}; use device='cpu'"
    assert (started, len(calls)) == ([], 1)
    assert not (tmp_path / "o").exists()
    # not cached: a later profile asks again
    with pytest.raises(CudaUnavailableError):
        profile(parse_workloads("launch:8"), tmp_path / "o", device="cuda")
    assert len(calls) == 2
    # the error pickles (as raised in a worker process, say)
    again = pickle.loads(pickle.dumps(err.value))
    assert isinstance(again, CudaUnavailableError) and str(again) == str(err.value)


def test_a_gpu_cuda_does_not_see_is_refused_and_a_count_found_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_cuda(monkeypatch, 2)
    monkeypatch.setattr(profile_module, "_Proc", lambda *a, **k: pytest.fail("started"))
    with pytest.raises(InputError, match=r"^no GPU 2: CUDA sees GPUs 0\.\.1$"):
        profile(parse_workloads("launch"), tmp_path / "o", device="cuda", gpu=2)
    with pytest.raises(InputError, match=r"^no GPU 5: CUDA sees GPUs 0\.\.1$"):
        profile(parse_workloads("launch"), tmp_path / "o", device="cuda", gpu=5)
    assert len(calls) == 1  # the count found is kept (a tuning run profiles many times)
    fake_cuda(monkeypatch, 1)
    with pytest.raises(InputError, match=r"^no GPU 1: CUDA sees GPU 0$"):
        profile(parse_workloads("launch"), tmp_path / "o", device="cuda", gpu=1)


def test_own_workloads_and_cpu_profiles_are_not_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_cuda(monkeypatch, 0)
    # your own job need not use this interpreter's torch (nor any): it is not checked
    result = profile([_py("toy", TOY_JOB)], tmp_path / "own", warmup_s=0.1, measure_s=0.2,
                     device="cuda", pairs=False, backends=[HostSampler()])
    assert (result.out / "runs.csv").is_file()
    with pytest.raises(InputError, match="'mine' exited before reporting"):  # it ran first
        profile([_py("mine", "pass"), *parse_workloads("launch")], tmp_path / "o",
                device="cpu", pairs=False, backends=[HostSampler()])
    assert calls == []


def test_cuda_device_count_asks_this_interpreters_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    n, _ = cuda_device_count()
    assert n == (torch.cuda.device_count() if torch.cuda.is_available() else 0)


def test_cuda_device_count_says_when_it_cannot_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", shutil.which("false") or "/bin/false")
    with pytest.raises(InputError, match=r"^cannot check for CUDA: .*false -c 'import torch' "
                                         r"failed \(exit code 1\)$"):
        cuda_device_count()
