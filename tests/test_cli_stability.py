"""``interplace stability``: the summary, the JSON and the plots, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interplace.cli import main
from interplace.datasets import synthetic, write_runs


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, message: str) -> None:
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("interplace: error: "), err
    assert message in err


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stab") / "toy"
    root.mkdir()
    write_runs(synthetic(3, seed=1, samples_per_run=3), root)
    return root


def test_stability_prints_the_summary_and_writes_json_and_plots(
    capsys: pytest.CaptureFixture[str], toy: Path, tmp_path: Path
) -> None:
    out_json = tmp_path / "report.json"
    plots = tmp_path / "figures" / "stability"  # a results folder: created with its parents
    code, out, err = run(
        capsys,
        "stability",
        "--runs", str(toy / "runs.csv"),
        "--samples", str(toy / "samples.csv"),
        "--n", "1",
        "--steps", "40",
        "--perturbations", "seed, drop_samples",
        "--workers", "1",
        "--out", str(out_json),
        "--plot", str(plots),
        "--quiet",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("interplace stability: toy: 3 fits (reference + 2 perturbations x 1)")
    assert "verdict: " in out
    report = json.loads(out_json.read_text())
    assert report["perturbations"] == ["drop_samples", "seed"]
    assert report["steps"] == 40 and report["n"] == 1
    assert [r["perturbation"] for r in report["replicates"]] == ["drop_samples", "seed"]
    assert report["stable"] in (True, False)
    assert sorted(p.name for p in plots.iterdir()) == ["stability_jobs.png", "stability_moves.png"]
    assert list(tmp_path.glob(".*.tmp")) == []


def test_stability_refuses_bad_input_in_one_line_before_fitting(
    capsys: pytest.CaptureFixture[str], toy: Path, tmp_path: Path
) -> None:
    base = ["stability", "--runs", str(toy / "runs.csv"), "--steps", "10", "--quiet"]
    code, out, err = run(capsys, *base, "--perturbations", "seed,shake")
    assert_one_line_error(code, out, err, "unknown perturbation 'shake'")
    code, out, err = run(capsys, *base, "--perturbations", "drop_samples")
    assert_one_line_error(code, out, err, "drop_samples needs counter samples")
    code, out, err = run(capsys, *base, "--out", str(tmp_path / "no" / "r.json"))
    assert_one_line_error(code, out, err, "output directory does not exist")
    code, out, err = run(capsys, *base, "--plot", str(toy / "runs.csv"))
    assert_one_line_error(code, out, err, "runs.csv exists and is not a directory")
    code, out, err = run(capsys, *base, "--plot", str(toy / "runs.csv" / "plots"))
    assert_one_line_error(code, out, err, "Not a directory")
    code, out, err = run(capsys, "stability", "--runs", str(tmp_path / "missing.csv"))
    assert code == 2 and out == "" and err.startswith("interplace: error: ")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("bad", [["--n", "0"], ["--perturbations", ","], ["--workers", "x"]])
def test_bad_numbers_and_lists_are_usage_errors(
    capsys: pytest.CaptureFixture[str], toy: Path, bad: list[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["stability", "--runs", str(toy / "runs.csv"), *bad])
    assert exc.value.code == 2
    assert "interplace stability: error:" in capsys.readouterr().err
