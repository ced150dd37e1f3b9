"""``interplace place``: the command a scheduler or an operator runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from interplace.cli import main
from interplace.datasets import CoLocationData, synthetic
from interplace.model import InterferenceModel, fit


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = fit(synthetic(4, seed=2, samples_per_run=8), seed=0, steps=200, min_steps=200)
    return model.save(tmp_path_factory.mktemp("m") / "model")


def _jobs(tmp_path: Path, rows: str) -> Path:
    p = tmp_path / "jobs.csv"
    p.write_text("job_id,job,gpus\n" + rows)
    return p


def test_place_writes_one_row_per_job_gpu(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = _jobs(tmp_path, "a,job0,1\nb,job1,2\nc,job2,1\n")
    state = tmp_path / "state.csv"
    state.write_text("job_id,job,gpu\nr,job3,0\n")
    out = tmp_path / "p.csv"
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu", "--jobs",
                 str(jobs), "--state", str(state), "--out", str(out)])
    assert code == 0
    table = pd.read_csv(out, dtype=str)
    assert sorted(table["job_id"]) == ["a", "b", "b", "c"]
    assert set(table.columns) == {"job_id", "job", "gpu", "speed_mean", "speed_q05", "speed_q95"}
    printed = capsys.readouterr().out
    assert "local-search placement on pcie-8gpu: 3 jobs placed, 0 pending, 1 running" in printed
    assert "r (running)" in printed


def test_pending_goes_to_stderr_and_file(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = "".join(f"j{k},job{k % 4},1\n" for k in range(10))
    jobs = _jobs(tmp_path, rows)
    out, pend = tmp_path / "p.csv", tmp_path / "pending.csv"
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu", "--jobs",
                 str(jobs), "--max-per-gpu", "1", "--policy", "greedy", "--out", str(out),
                 "--pending-out", str(pend)])
    assert code == 0
    err = capsys.readouterr().err
    assert err.count("interplace: pending:") == 2
    assert len(pd.read_csv(pend)) == 2 and len(pd.read_csv(out)) == 8


@pytest.mark.parametrize(
    ("rows", "extra", "message"),
    [
        ("a,resnet,1\n", [], "unknown job type(s) 'resnet'"),
        ("a,job0,1\na,job1,1\n", [], "duplicate job_id 'a'"),
        ("a,job0,9\n", [], "needs 9 GPUs"),
        ("a,job0,1\n", ["--policy", "nope"], "unknown policy 'nope'"),
        ("a,job0,1\n", ["--objective", "bogus"],
         "unknown objective 'bogus' (choose from sum, max-min, risk-averse)"),
        ("a,job0,1\n", ["--policy-file", "x"], "--policy-file only works with --policy rl"),
    ],
)
def test_bad_input_is_one_line_and_no_output(
    tmp_path: Path,
    model_dir: Path,
    capsys: pytest.CaptureFixture[str],
    rows: str,
    extra: list[str],
    message: str,
) -> None:
    jobs = _jobs(tmp_path, rows)
    out = tmp_path / "p.csv"
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu", "--jobs",
                 str(jobs), "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_state_naming_missing_gpu(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = _jobs(tmp_path, "a,job0,1\n")
    state = tmp_path / "s.csv"
    state.write_text("job_id,job,gpu\nr,job1,42\n")
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu", "--jobs",
                 str(jobs), "--state", str(state), "--out", str(tmp_path / "p.csv")])
    assert code == 2 and "GPU '42', which topology" in capsys.readouterr().err
    assert isinstance(InterferenceModel.load(model_dir), InterferenceModel)


def test_measured_runs_take_precedence(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from interplace.datasets import write_runs

    data = synthetic(4, seed=2, samples_per_run=8)
    runs_dir = tmp_path / "measured"
    runs_dir.mkdir()
    write_runs(data, runs_dir)
    jobs = _jobs(tmp_path, "a,job0,1\nb,job1,1\n")
    out = tmp_path / "p.csv"
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu", "--jobs",
                 str(jobs), "--measured", str(runs_dir / "runs.csv"), "--out", str(out)])
    assert code == 0
    assert "note" not in capsys.readouterr().err
    # Pairs of jobs the model does not know were taken without a word: they change nothing.
    other = synthetic(4, seed=3, samples_per_run=2)
    other = CoLocationData(other.runs.assign(job=other.runs["job"].str.replace("job", "x")),
                           None, "other")
    (tmp_path / "other").mkdir()
    write_runs(other, tmp_path / "other")
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu", "--jobs",
                 str(jobs), "--measured", str(tmp_path / "other" / "runs.csv"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0 and "name a job the model was not fitted on (first: x0 next to x0)" in err
    code = main(["place", "--model", str(model_dir), "--topology", "pcie-8gpu", "--jobs",
                 str(jobs), "--measured", str(tmp_path / "nope.csv"), "--out", str(out)])
    assert code == 2 and "no such file" in capsys.readouterr().err


def test_lucid_notes_classes_that_no_counter_measured(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without GPU counters a job's demand is not identified (only its product with the
    # intensity enters a speed), so lucid's classes from it carry no measurement: say so.
    data = synthetic(4, seed=2, samples_per_run=8)
    bare = fit(CoLocationData(data.runs, None, "no counters"), seed=0, steps=200, min_steps=200)
    assert bare.metrics == ()
    jobs = _jobs(tmp_path, "".join(f"j{k},job{k % 4},1\n" for k in range(6)))
    note = "note: lucid's utilisation classes are the model's demand, which no GPU counters"
    for model, noted in ((bare.save(tmp_path / "bare"), True), (model_dir, False)):
        code = main(["place", "--model", str(model), "--topology", "pcie-8gpu", "--jobs",
                     str(jobs), "--policy", "lucid", "--out", str(tmp_path / "p.csv")])
        assert code == 0
        captured = capsys.readouterr()
        assert (note in captured.out + captured.err) is noted


def test_bad_pending_out_and_state_errors_name_their_file(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = _jobs(tmp_path, "a,job0,1\n")
    out = tmp_path / "p.csv"
    base = ["place", "--model", str(model_dir), "--topology", "pcie-8gpu", "--jobs", str(jobs),
            "--out", str(out)]
    # Refused before the placement is written: nothing is left behind.
    for pending, message in ((tmp_path / "pending.txt", "unknown output file type '.txt'"),
                             (out, "is the --out file too")):
        assert main([*base, "--pending-out", str(pending)]) == 2
        assert message in capsys.readouterr().err and not out.exists()
    # An error in the state table names the state file, not the jobs file.
    for rows, message in (("r,job3,99\n", "running job r is on GPU '99'"),
                          ("r,nosuch,0\n", "unknown job type(s) 'nosuch'")):
        state = tmp_path / "state.csv"
        state.write_text("job_id,job,gpu\n" + rows)
        assert main([*base, "--state", str(state)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"interplace: error: {state}: ") and message in err, err
        assert "a running job's type must be one the model knows" in err or "GPU" in err
