"""``interplace tune``: trials appended as they finish, resuming, failures, batches, errors."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from interplace.cli import main
from interplace.cli.tune import run_trial

SPACE = {"params": [{"name": "g0", "type": "choice", "values": [0, 1, 2, 4, 8]},
                    {"name": "mps_pct", "type": "int", "low": 10, "high": 90},
                    {"name": "x", "type": "float", "low": 0.0, "high": 1.0}]}

# CMD: the trial's parameters on stdin, the objective on the last stdout line.
OBJECTIVE = ("import json, sys; p = json.load(sys.stdin); print('log line');"
             "print(p['g0'] * p['x'] - abs(p['mps_pct'] - 50) / 100)")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def space(tmp_path: Path) -> Path:
    f = tmp_path / "space.json"
    f.write_text(json.dumps(SPACE))
    return f


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def tune(capsys: pytest.CaptureFixture[str], space: Path, out: Path, budget: int,
         code: str = OBJECTIVE, *extra: str) -> tuple[int, str, str]:
    return run(capsys, "tune", "--space", str(space), "--budget", str(budget), "--maximize",
               "--seed", "3", "--init", "4", *extra, "--out", str(out), "--",
               sys.executable, "-c", code)


def test_tune_writes_every_trial_in_space_order(capsys: pytest.CaptureFixture[str],
                                                space: Path, tmp_path: Path) -> None:
    out = tmp_path / "trials.csv"
    code, stdout, err = tune(capsys, space, out, 6)
    assert code == 0, err
    assert out.read_text().splitlines()[0] == "g0,mps_pct,x,value,status,error"
    got = rows(out)
    assert len(got) == 6 and all(r["status"] == "ok" and r["error"] == "" for r in got)
    for r in got:  # the value is what the command computed from these very params
        expect = int(r["g0"]) * float(r["x"]) - abs(int(r["mps_pct"]) - 50) / 100
        assert float(r["value"]) == pytest.approx(expect, abs=1e-12)
    best = max(float(r["value"]) for r in got)
    assert stdout.startswith(f"6 trials in {out}") and f"best {best!r}" in stdout


def test_rerunning_continues_and_matches_one_run(capsys: pytest.CaptureFixture[str],
                                                 space: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    assert tune(capsys, space, one, 6)[0] == 0
    assert tune(capsys, space, two, 4)[0] == 0
    first = two.read_text()
    code, stdout, err = tune(capsys, space, two, 6)
    assert code == 0 and "continuing" in err and "4 finished trials of 6" in err
    assert two.read_text().startswith(first)  # appended, never rewritten
    assert two.read_text() == one.read_text()  # and the same trials as one run of 6
    code, stdout, _ = tune(capsys, space, two, 6)  # the budget is spent: nothing runs
    assert code == 0 and "(0 run now" in stdout and len(rows(two)) == 6


def test_failing_trials_are_recorded_reported_and_not_fatal(
        capsys: pytest.CaptureFixture[str], space: Path, tmp_path: Path) -> None:
    out = tmp_path / "trials.csv"
    code = ("import json, sys; p = json.load(sys.stdin); g = p['g0']\n"
            "if g == 0: sys.exit('no GPUs, no job')\n"
            "print('nan' if g == 1 else 'done' if g == 2 else p['x'])")
    status, stdout, err = run(capsys, "tune", "--space", str(space), "--budget", "8",
                              "--seed", "0", "--init", "8", "--out", str(out), "--",
                              sys.executable, "-c", code)
    assert status == 0
    got = rows(out)
    assert len(got) == 8
    for r in got:
        g = int(r["g0"])
        if g == 0:
            assert r["status"] == "failed" and r["error"] == "exit status 1: no GPUs, no job"
        elif g == 1:
            assert r["status"] == "failed" and r["error"] == "the objective is nan"
        elif g == 2:
            assert r["error"] == "the last line of stdout is not a number: 'done'"
        else:
            assert r["status"] == "ok" and float(r["value"]) == float(r["x"])
    n_failed = sum(r["status"] == "failed" for r in got)
    assert n_failed >= 1 and err.count("failed:") == n_failed
    assert f"{n_failed} failed now" in stdout


def test_batch_runs_trials_in_parallel_and_the_budget_holds(
        capsys: pytest.CaptureFixture[str], space: Path, tmp_path: Path) -> None:
    out, log = tmp_path / "trials.csv", tmp_path / "log.txt"
    code = ("import json, sys, time, os; p = json.load(sys.stdin)\n"
            f"log = {str(log)!r}\n"
            "open(log, 'a').write(f'start {time.monotonic()!r}\\n'); time.sleep(0.4)\n"
            "open(log, 'a').write(f'end {time.monotonic()!r}\\n'); print(p['x'])")
    status, _, err = tune(capsys, space, out, 5, code, "--batch", "2")
    assert status == 0, err
    assert len(rows(out)) == 5
    events = sorted((float(t), kind == "start") for kind, t in
                    (ln.split() for ln in log.read_text().splitlines()))
    running = peak = 0
    for _, start in events:
        running += 1 if start else -1
        peak = max(peak, running)
    assert peak == 2  # two at a time (each sleeps 0.4 s, so started together they overlap)
    assert sum(start for _, start in events) == 5


@pytest.mark.parametrize(("spec", "message"), [
    ({"params": [{"name": "a", "type": "int", "low": 1}]}, "parameter 'a': missing 'high'"),
    ({"params": [{"name": "b", "type": "float", "low": 2, "high": 1}]},
     "parameter 'b': low 2 must be below high 1"),
    ({"params": [{"name": "c", "type": "choice", "values": "abc"}]},
     "parameter 'c': values must be a list"),
])
def test_a_malformed_space_is_one_line_naming_the_parameter(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, spec: object, message: str) -> None:
    f = tmp_path / "space.json"
    f.write_text(json.dumps(spec))
    out = tmp_path / "trials.csv"
    code, stdout, err = run(capsys, "tune", "--space", str(f), "--budget", "3", "--out",
                            str(out), "--", "true")
    assert code == 2 and stdout == ""
    assert err.count("\n") == 1 and err.startswith("interplace: error: ") and message in err
    assert not out.exists()


def test_other_bad_input(capsys: pytest.CaptureFixture[str], space: Path,
                         tmp_path: Path) -> None:
    out = tmp_path / "trials.csv"
    out.write_text("a,b,value,status,error\n1,2,3.0,ok,\n")
    code, _, err = run(capsys, "tune", "--space", str(space), "--budget", "3", "--out",
                       str(out), "--", "true")
    assert code == 2 and "do not match the space" in err and err.count("\n") == 1
    code, _, err = run(capsys, "tune", "--space", str(space), "--budget", "3", "--out",
                       str(tmp_path / "new.csv"))
    assert code == 2 and "no command given" in err
    code, _, err = run(capsys, "tune", "--space", str(tmp_path / "none.json"), "--budget", "3",
                       "--out", str(tmp_path / "new.csv"), "--", "true")
    assert code == 2 and "none.json" in err
    code, _, err = run(capsys, "tune", "--space", str(space), "--budget", "2", "--out",
                       str(tmp_path / "nodir" / "t.csv"), "--", "true")
    assert code == 2 and "output directory does not exist" in err
    with pytest.raises(SystemExit):
        main(["tune", "--space", str(space), "--budget", "0", "--out", "x.csv", "--", "true"])
    capsys.readouterr()


def test_a_trial_that_prints_bytes_that_are_not_utf8_still_reports(
        capsys: pytest.CaptureFixture[str], space: Path, tmp_path: Path) -> None:
    script = tmp_path / "garbage.py"
    script.write_text("import sys\nsys.stderr.buffer.write(b'\\xff warn\\n')\n"
                      "sys.stdout.buffer.write(b'\\xff\\xfe junk\\n1.5\\n')\n")
    out = tmp_path / "trials.csv"
    code, stdout, _ = run(capsys, "tune", "--space", str(space), "--budget", "2", "--out",
                          str(out), "--", sys.executable, str(script))
    assert code == 0 and "best 1.5" in stdout
    assert [r["status"] for r in rows(out)] == ["ok", "ok"]


def test_a_missing_command_is_refused_and_a_failing_one_fails_the_command(
        capsys: pytest.CaptureFixture[str], space: Path, tmp_path: Path) -> None:
    out = tmp_path / "trials.csv"
    code, _, err = run(capsys, "tune", "--space", str(space), "--budget", "2", "--out",
                       str(out), "--", str(tmp_path / "no-such-program"))
    assert code == 2 and "cannot run" in err and "no-such-program" in err and not out.exists()
    # A command that runs but never reports: every trial recorded as failed, exit status 1.
    code, stdout, _ = run(capsys, "tune", "--space", str(space), "--budget", "2", "--out",
                          str(out), "--", "false")
    assert code == 1 and "no trial succeeded" in stdout
    assert [r["status"] for r in rows(out)] == ["failed", "failed"]


def test_ctrl_c_loses_no_finished_trial(capsys: pytest.CaptureFixture[str], space: Path,
                                        tmp_path: Path) -> None:
    out = tmp_path / "trials.csv"
    code = "import json, sys, time; p = json.load(sys.stdin); time.sleep(0.3); print(p['x'])"
    # A shell's background job (CI run with `&`) inherits SIGINT ignored, and Python then
    # installs no KeyboardInterrupt handler: restore it, as an interactive terminal has it.
    start = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "runpy.run_module('interplace.cli', run_name='__main__', alter_sys=True)")
    argv = [sys.executable, "-c", start, "tune", "--space", str(space), "--budget",
            "50", "--init", "50", "--out", str(out), "--", sys.executable, "-c", code]
    proc, err = _signal_when(argv, lambda: out.exists() and len(rows(out)) >= 3, signal.SIGINT)
    assert proc.returncode == 130 and "interrupted" in err
    kept = rows(out)
    assert len(kept) >= 3 and all(r["status"] == "ok" for r in kept)
    status, stdout, _ = tune(capsys, space, out, len(kept) + 1)
    assert status == 0 and "(1 run now" in stdout and len(rows(out)) == len(kept) + 1


def test_sigterm_stops_every_trial_and_what_it_started(space: Path, tmp_path: Path) -> None:
    out = tmp_path / "trials.csv"
    pids = tmp_path / "pids"
    pids.mkdir()
    # A shell trial that starts a child of its own and waits: both must go with tune.
    trial = f"sleep 300 & echo $! > {pids}/$$; wait"
    argv = [sys.executable, "-m", "interplace.cli", "tune", "--space", str(space), "--budget",
            "4", "--batch", "2", "--out", str(out), "--", "sh", "-c", trial]
    # (once both pid files are there and written, both sleeps run)
    proc, err = _signal_when(argv, lambda: len(list(pids.iterdir())) >= 2 and all(
        f.read_text().strip() for f in pids.iterdir()), signal.SIGTERM)
    assert proc.returncode == 130 and "interrupted" in err
    started = [int(f.name) for f in pids.iterdir()]
    started += [int(f.read_text()) for f in pids.iterdir() if f.read_text().strip()]
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in started):
        assert time.monotonic() < deadline, [pid for pid in started if _alive(pid)]
        time.sleep(0.05)


def test_a_trial_ends_when_its_command_exits_and_takes_what_it_left_running(
        tmp_path: Path) -> None:
    # A trial that leaves a background process holding its stdout once kept tune waiting
    # until that process ended (300 s here), and a leftover outlived its trial (competing
    # with the next one for the machine). Now the trial ends with its command, and what it
    # left in its session is stopped.
    pid_file = tmp_path / "bg"
    trial = f"sleep 300 & echo $! > {pid_file}; cat > /dev/null; echo 2.5"
    start = time.monotonic()
    assert run_trial(["sh", "-c", trial], {"x": 1}) == 2.5
    assert time.monotonic() - start < 30
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # Output larger than a pipe's buffer, and a large stdin, still pass whole.
    big = [sys.executable, "-c", "import json, sys; d = json.load(sys.stdin); "
           "sys.stdout.write('x' * 200000 + '\\n' + str(len(d['s'])) + '\\n')"]
    assert run_trial(big, {"s": "y" * 300000}) == 300000.0


def _signal_when(
    argv: list[str], ready: Callable[[], bool], sig: int
) -> tuple[subprocess.Popen[str], str]:
    """Run ``argv``, send it ``sig`` once ``ready()``, and return it finished with its stderr."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc, err


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, waiting for its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_progress_bar_shows_the_best_so_far_on_a_terminal(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, space: Path,
        tmp_path: Path) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, _, err = tune(capsys, space, tmp_path / "t.csv", 3)
    assert code == 0 and "tuning" in err and "best " in err and "3/3" in err
    code, _, err = tune(capsys, space, tmp_path / "u.csv", 6, OBJECTIVE, "--quiet", "--noisy")
    assert code == 0 and "tuning" not in err
