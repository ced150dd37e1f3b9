"""``interplace fit``, ``predict`` and ``evaluate``: round trips, JSON, one-line errors."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest

from interplace.cli import main
from interplace.datasets import synthetic, write_runs

if TYPE_CHECKING:
    from interplace.model import InterferenceModel

STEPS = "200"
EVAL_STEPS = "100"  # each evaluate fits its own model; the JSON shape is what is tested


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, message: str) -> None:
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("interplace: error: "), err
    assert message in err


@dataclass(frozen=True)
class Fitted:
    data: Path
    model: Path
    code: int
    out: str
    err: str


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Fitted:
    """One small model, fitted once through the CLI for every test."""
    root = tmp_path_factory.mktemp("fit")
    data = root / "toy"
    data.mkdir()
    write_runs(synthetic(4, seed=0, samples_per_run=3), data)
    model = root / "model"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(
            [
                "fit",
                "--runs",
                str(data / "runs.csv"),
                "--samples",
                str(data / "samples.csv"),
                "--out",
                str(model),
                "--steps",
                STEPS,
            ]
        )
    return Fitted(data, model, code, out.getvalue(), err.getvalue())


def test_fit_writes_a_model_and_prints_a_summary(fitted: Fitted) -> None:
    assert fitted.code == 0
    assert sorted(p.name for p in fitted.model.iterdir()) == ["model.json", "posterior.safetensors"]
    assert fitted.out.count("\n") == 1
    assert fitted.out.startswith("fitted 4 jobs to 20 co-located observations")
    # Small data: the default pools four restarts of 200 steps each.
    assert "of toy: 800 steps in all over 4 restarts" in fitted.out
    assert fitted.out.endswith(f"-> {fitted.model}\n")
    assert "measured pairs kept" in fitted.out
    assert fitted.err == ""  # the tqdm bar shows only on a terminal
    meta = json.loads((fitted.model / "model.json").read_text())
    assert meta["jobs"] == ["job0", "job1", "job2", "job3"] and meta["info"]["data"] == "toy"
    # Nothing but the model directory (no temporary directories) is left beside it.
    assert sorted(p.name for p in fitted.model.parent.iterdir()) == ["model", "toy"]


PAIRS = pd.DataFrame(
    {
        "job": ["job2", "job0", "job1", "job3", "job2", "job0"],
        "co_runner": ["job3", "job1", "job0+job2", "job3", "job3", "job1+job2+job3"],
    }
)


def test_predict_round_trip_keeps_the_row_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    pairs = tmp_path / "pairs.csv"
    PAIRS.to_csv(pairs, index=False)
    out = tmp_path / "pred.csv"
    code, text, err = run(
        capsys, "predict", "--model", str(fitted.model), "--pairs", str(pairs), "--out", str(out)
    )
    assert (code, err) == (0, "")
    assert text == f"predicted 6 co-locations with 500 posterior draws each -> {out}\n"
    pred = pd.read_csv(out, dtype={"job": str, "co_runner": str})
    assert pred.columns.tolist() == ["job", "co_runner", "speed_mean", "speed_q05", "speed_q95"]
    pd.testing.assert_frame_equal(pred[["job", "co_runner"]], PAIRS)
    assert pred[["speed_mean", "speed_q05", "speed_q95"]].notna().all().all()
    assert ((pred["speed_mean"] > 0) & (pred["speed_mean"] <= 1.0 + 1e-9)).all()
    assert (pred["speed_q05"] < pred["speed_q95"]).all()
    # One set of posterior draws serves every row: a repeated query has the same mean.
    assert pred["speed_mean"][0] == pred["speed_mean"][4]
    # Three co-runners slow job0 down more than one of them.
    assert pred["speed_mean"][5] < pred["speed_mean"][1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.csv", "pred.csv"]


def test_predict_reads_a_pairs_table_written_with_spaces_after_commas(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    # "job, co_runner" named its columns " co_runner" (refused as lacking co_runner) while
    # every other table of ours read it as without the spaces.
    outs = []
    for name, sep in (("plain", ","), ("spaced", ", ")):
        pairs = tmp_path / f"{name}.csv"
        rows = [sep.join(row) for row in PAIRS.itertuples(index=False)]
        pairs.write_text("\n".join([sep.join(PAIRS.columns), *rows]) + "\n")
        outs.append(tmp_path / f"{name}-pred.csv")
        code, _, err = run(capsys, "predict", "--model", str(fitted.model), "--pairs",
                           str(pairs), "--seed", "1", "--out", str(outs[-1]))
        assert (code, err) == (0, "")
    assert outs[0].read_bytes() == outs[1].read_bytes()


def test_predict_is_deterministic_for_a_seed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    pairs = tmp_path / "pairs.parquet"
    PAIRS.to_parquet(pairs, index=False)
    common = [
        "predict",
        "--model",
        str(fitted.model),
        "--pairs",
        str(pairs),
        "--samples-per-query",
        "200",
    ]
    outs = [tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.parquet", tmp_path / "d.csv"]
    for out, seed in zip(outs, ["3", "3", "3", "4"], strict=True):
        code, _, err = run(capsys, *common, "--seed", seed, "--out", str(out))
        assert (code, err) == (0, "")
    assert outs[0].read_bytes() == outs[1].read_bytes()
    a = pd.read_csv(outs[0])
    pd.testing.assert_frame_equal(pd.read_parquet(outs[2]), a, check_exact=False, rtol=1e-12)
    assert not a.equals(pd.read_csv(outs[3]))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("pairs_text", "message"),
    [
        ("job,co_runner\njob0,job1\njob1,job9\n", "pairs row 1: unknown job 'job9'"),
        # "NA" is a job name like any other (not a missing value), and the model lacks it.
        ("job,co_runner\njob0,job1+NA\n", "pairs row 0: unknown job 'NA'"),
        ("job,co_runner\nnope,job1\n", "pairs row 0: unknown job 'nope'"),
        ("job,corunner\njob0,job1\n", "pairs table lacks column(s) co_runner"),
        ("job,co_runner\njob0,job1\n,job2\n", "pairs row 1 has no job"),
        ("job,co_runner\njob0,\n", "pairs row 0 has no co_runner"),
        ("job,co_runner\njob0,job1+\n", "pairs row 0: co_runner 'job1+' has an empty name"),
        ("job,co_runner\n", "pairs table has no rows"),
        ("", "pairs table is empty"),
    ],
)
def test_bad_pairs_are_one_line_errors_and_leave_no_output(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    fitted: Fitted,
    pairs_text: str,
    message: str,
) -> None:
    pairs = _write(tmp_path / "pairs.csv", pairs_text)
    out = tmp_path / "pred.csv"
    code, text, err = run(
        capsys, "predict", "--model", str(fitted.model), "--pairs", str(pairs), "--out", str(out)
    )
    assert_one_line_error(code, text, err, message)
    assert str(pairs) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.csv"]


def test_predict_refuses_bad_paths(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    pairs = _write(tmp_path / "pairs.csv", "job,co_runner\njob0,job1\n")
    model = str(fitted.model)
    cases = [
        ([model, str(pairs), str(tmp_path / "pred.txt")], "unknown output file type '.txt'"),
        ([model, str(tmp_path / "pairs.json"), str(tmp_path / "p.csv")], "no such file"),
        (
            [
                model,
                str(_write(tmp_path / "pairs.tsv", "job\tco_runner\n")),
                str(tmp_path / "p.csv"),
            ],
            "unknown pairs table file type '.tsv'",
        ),
        (
            [str(tmp_path / "no-model"), str(pairs), str(tmp_path / "p.csv")],
            "no such model directory",
        ),
        ([str(tmp_path), str(pairs), str(tmp_path / "p.csv")], "not an interplace model"),
        (
            [model, str(pairs), str(tmp_path / "missing" / "p.csv")],
            "output directory does not exist",
        ),
    ]
    for (m, p, o), message in cases:
        code, text, err = run(capsys, "predict", "--model", m, "--pairs", p, "--out", o)
        assert_one_line_error(code, text, err, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.csv", "pairs.tsv"]


def test_a_tampered_model_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    import shutil

    model = tmp_path / "model"
    shutil.copytree(fitted.model, model)
    pairs = _write(tmp_path / "pairs.csv", "job,co_runner\njob0,job1\n")
    out = tmp_path / "pred.csv"
    argv = ["predict", "--model", str(model), "--pairs", str(pairs), "--out", str(out)]
    (model / "posterior.safetensors").write_bytes(b"\x00garbage, not safetensors" * 4)
    assert_one_line_error(*run(capsys, *argv), "not a readable safetensors file")
    shutil.copy(fitted.model / "posterior.safetensors", model / "posterior.safetensors")
    (model / "model.json").write_text("{not json")
    assert_one_line_error(*run(capsys, *argv), "not valid JSON")
    assert not out.exists()


@pytest.mark.parametrize(
    ("split", "kind"),
    # The peers (with the peers extra, a dev dependency) on one split; --no-peers on the
    # other, which leaves them out of the JSON.
    [
        (["--holdout-frac", "0.4", "--no-peers"], "random_runs"),
        (["--cold-jobs", "1"], "cold_start"),
    ],
)
def test_evaluate_prints_json(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    fitted: Fitted,
    split: list[str],
    kind: str,
) -> None:
    out = tmp_path / "eval.json"
    code, text, err = run(
        capsys,
        "evaluate",
        "--runs",
        str(fitted.data / "runs.csv"),
        "--samples",
        str(fitted.data / "samples.csv"),
        *split,
        "--steps",
        EVAL_STEPS,
        "--seed",
        "1",
        "--quiet",
        "--out",
        str(out),
    )
    assert (code, err) == (0, "")
    result = json.loads(text)
    assert {"model", "baselines", "best_baseline"} <= set(result)
    assert result["split"]["kind"] == kind and result["data"] == "toy"
    assert result["best_baseline"] in result["baselines"]
    assert {"mae", "coverage_90", "interval_width_90"} <= set(result["model"])
    if "--no-peers" in split:
        assert "peers" not in result and "best_peer" not in result
    else:
        assert set(result["peers"]) == {"soft_impute", "boosted_trees", "ebm"}
        assert result["best_peer"] in result["peers"]
    assert out.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.json"]


def test_fit_with_samples_of_unknown_runs_fails_before_fitting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    samples = tmp_path / "samples.csv"
    _write(samples, "run_id,t_s,metric,value\niso/job0,0.0,gpu_util_pct,50\nghost,0.0,x,1\n")
    model = tmp_path / "model"
    code, out, err = run(
        capsys,
        "fit",
        "--runs",
        str(fitted.data / "runs.csv"),
        "--samples",
        str(samples),
        "--out",
        str(model),
        "--quiet",
    )
    assert_one_line_error(code, out, err, "samples row 1 has run_id 'ghost'")
    assert str(samples) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["samples.csv"]


def test_fit_refuses_bad_outputs_and_topologies_before_fitting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    runs = str(fitted.data / "runs.csv")
    occupied = _write(tmp_path / "model", "a file")
    cases = [
        (["--out", str(occupied)], "exists and is not a directory"),
        (["--out", str(tmp_path / "missing" / "m")], "output directory does not exist"),
        (
            ["--out", str(tmp_path / "m"), "--topology", "dgx-z9000"],
            "unknown built-in topology 'dgx-z9000'",
        ),
    ]
    for extra, message in cases:
        assert_one_line_error(*run(capsys, "fit", "--runs", runs, "--quiet", *extra), message)
    code, out, err = run(
        capsys, "evaluate", "--runs", runs, "--out", str(tmp_path / "missing" / "e.json")
    )
    assert_one_line_error(code, out, err, "output directory does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["fit", "--runs", "r.csv", "--out", "m", "--steps", "0"],
            "argument --steps: must be an integer >= 1, not '0'",
        ),
        (
            ["fit", "--runs", "r.csv", "--out", "m", "--steps", "1.5"],
            "argument --steps: must be an integer >= 1, not '1.5'",
        ),
        (["fit", "--runs", "r.csv", "--out", "m", "--device", "tpu"], "argument --device"),
        (
            ["fit", "--runs", "r.csv", "--out", "m", "--restarts", "0"],
            "argument --restarts: must be an integer >= 1, not '0'",
        ),
        (
            ["evaluate", "--runs", "r.csv", "--temper", "0"],
            "argument --temper: must be a finite number > 0, not '0'",
        ),
        (["fit", "--runs", "r.csv", "--out", "m", "--temper", "inf"], "argument --temper"),
        (
            ["fit", "--runs", "r.csv", "--out", "m", "--workers", "0"],
            "argument --workers: must be an integer >= 1, not '0'",
        ),
        (
            [
                "predict",
                "--model",
                "m",
                "--pairs",
                "p.csv",
                "--out",
                "o.csv",
                "--samples-per-query",
                "1",
            ],
            "argument --samples-per-query: must be an integer >= 2",
        ),
        (
            ["evaluate", "--runs", "r.csv", "--holdout-frac", "1"],
            "argument --holdout-frac: must be a number between 0 and 1, not '1'",
        ),
        (["evaluate", "--runs", "r.csv", "--holdout-frac", "nan"], "argument --holdout-frac"),
        (["evaluate", "--runs", "r.csv", "--cold-jobs", "0"], "argument --cold-jobs"),
        (
            ["evaluate", "--runs", "r.csv", "--cold-jobs", "2", "--holdout-frac", "0.2"],
            "not allowed with argument",
        ),
        (["evaluate", "--runs", "r.csv", "--seed", "-1"], "argument --seed"),
        (["profile", "--workloads", "launch", "--out", "p", "--warmup", "-1"],
         "argument --warmup: must be a finite number >= 0, not '-1'"),
        (["profile", "--workloads", "launch", "--out", "p", "--measure", "0"],
         "argument --measure: must be a finite number > 0, not '0'"),
        (["profile", "--workloads", "launch", "--out", "p", "--measure", "nan"],
         "argument --measure: must be a finite number > 0, not 'nan'"),
        (["fit", "--runs", "r.csv", "--out", "m", "--direct-weight", "1.5"],
         "argument --direct-weight: must be a number in [0, 1], not '1.5'"),
        (["evaluate", "--runs", "r.csv", "--direct-weight", "nan"],
         "argument --direct-weight: must be a number in [0, 1], not 'nan'"),
        # past the seed range: refused as the option (was named as a problem of the input file)
        (["fit", "--runs", "r.csv", "--out", "m", "--seed", str(2**63)],
         "argument --seed: must be an integer in [0, 2**63)"),
    ],
)
def test_bad_numbers_are_usage_errors_with_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[-1].startswith(f"interplace {argv[0]}: error: ")
    assert message in err.splitlines()[-1]


def test_fit_refuses_mixed_modes_and_fits_one_with_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = []
    for mode in ("timeslice", "mps"):
        rows += [
            (f"{mode}-a", "a", 10.0, mode),
            (f"{mode}-b", "b", 5.0, mode),
            (f"{mode}-a+b", "a", 5.0 if mode == "timeslice" else 8.0, mode),
            (f"{mode}-a+b", "b", 2.5 if mode == "timeslice" else 4.0, mode),
        ]
    runs = tmp_path / "runs.csv"
    pd.DataFrame(rows, columns=["run_id", "job", "throughput", "mode"]).to_csv(runs, index=False)
    out = tmp_path / "model"
    code = main(["fit", "--runs", str(runs), "--out", str(out), "--steps", "50", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "mix sharing modes (mps, timeslice)" in err and err.count("\n") == 1
    assert not out.exists()
    argv = ["fit", "--runs", str(runs), "--out", str(out), "--steps", "50", "--quiet"]
    assert main([*argv, "--mode", "mps"]) == 0
    assert json.loads((out / "model.json").read_text())["info"]["mode"] == "mps"


def test_fit_and_evaluate_take_job_families(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    runs = pd.read_csv(fitted.data / "runs.csv")
    runs["model"] = ["even" if int(j[-1]) % 2 == 0 else "odd" for j in runs["job"]]
    runs_path = tmp_path / "runs.csv"
    runs.to_csv(runs_path, index=False)
    samples = str(fitted.data / "samples.csv")
    code, text, err = run(
        capsys,
        "evaluate",
        "--runs",
        str(runs_path),
        "--samples",
        samples,
        "--cold-jobs",
        "1",
        "--family",
        "model",
        "--steps",
        EVAL_STEPS,
        # What is checked is how families pass through the commands: one restart each (the
        # default mixture's restarts are tests/model/test_restarts.py's), and no peers (their
        # families are tests/model/test_peers.py's).
        "--restarts",
        "1",
        "--no-peers",
        "--quiet",
    )
    assert (code, err) == (0, "")
    result = json.loads(text)
    assert result["family"] == "model" and "mae" in result["family_baseline"]
    model = tmp_path / "model"
    code, _, err = run(
        capsys,
        "fit",
        "--runs",
        str(runs_path),
        "--samples",
        samples,
        "--family",
        "model",
        "--out",
        str(model),
        "--steps",
        STEPS,
        "--restarts",
        "1",
        "--quiet",
    )
    assert (code, err) == (0, "")
    assert json.loads((model / "model.json").read_text())["families"] == [
        "even",
        "odd",
        "even",
        "odd",
    ]
    missing = tmp_path / "other"
    assert_one_line_error(
        *run(
            capsys,
            "fit",
            "--runs",
            str(runs_path),
            "--family",
            "team",
            "--out",
            str(missing),
            "--quiet",
        ),
        "runs table has no column 'team' to take job families from",
    )
    assert not missing.exists()


def _fit_with(
    capsys: pytest.CaptureFixture[str], fitted: Fitted, model: Path, *flags: str
) -> tuple[str, InterferenceModel]:
    """``interplace fit`` on the fixture's data with ``flags``, into ``model``: it must
    succeed silently on stderr; returns its stdout and the saved model, loaded."""
    from interplace.model import InterferenceModel

    data = fitted.data
    inputs = ["--runs", str(data / "runs.csv"), "--samples", str(data / "samples.csv")]
    code, out, err = run(capsys, "fit", *inputs, "--out", str(model), *flags)
    assert (code, err) == (0, "")
    return out, InterferenceModel.load(model)


def test_fit_takes_rank_structure_only_and_no_cold_scale(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    from interplace.model import InterferenceModel

    assert InterferenceModel.load(fitted.model).measured is not None  # the default keeps them
    _, loaded = _fit_with(
        capsys, fitted, tmp_path / "model", "--rank", "0", "--structure-only", "--no-cold-scale",
        "--steps", STEPS, "--restarts", "1", "--quiet",
    )
    assert loaded.rank == 0 and loaded.measured is None
    assert loaded.info["cold_scale"] is False and loaded.info["cold_demand_shift"] == {}
    assert InterferenceModel.load(fitted.model).info["cold_scale"] is True


def test_fit_takes_no_lift_ceilings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    from interplace.model import InterferenceModel

    _, loaded = _fit_with(
        capsys, fitted, tmp_path / "model", "--no-lift-ceilings", "--steps", STEPS,
        "--restarts", "1", "--quiet",
    )
    assert loaded.measured is not None and loaded.info["lift_ceilings"] is False
    assert loaded.info["ceiling_lift"] == {} and loaded.measured.spread is None
    # By default, the synthetic data's noisy isolated references leave some job faster next
    # to a co-runner than alone: it is lifted, and the lift and its pairs' narrowed spreads
    # survive the save.
    default = InterferenceModel.load(fitted.model)
    lift = default.info["ceiling_lift"]
    assert default.info["lift_ceilings"] is True and lift and all(v > 0 for v in lift.values())
    assert default.measured is not None and default.measured.spread is not None


def test_fit_takes_no_counter_kernel(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    _, loaded = _fit_with(
        capsys, fitted, tmp_path / "model", "--no-counter-kernel", "--steps", STEPS,
        "--restarts", "1", "--quiet",
    )
    assert loaded.hyper.cold_kernel_weight == 0.0
    assert loaded.measured is not None and loaded.measured.kernel is None
    assert "counter_kernel" not in loaded.info["completion"]


def test_fit_takes_a_direct_weight_beside_no_counter_kernel(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    _, loaded = _fit_with(
        capsys, fitted, tmp_path / "model", "--direct-weight", "0.5", "--no-counter-kernel",
        "--steps", STEPS, "--restarts", "1", "--quiet",
    )
    assert (loaded.hyper.direct_weight, loaded.hyper.cold_kernel_weight) == (0.5, 0.0)
    # every pair of the toy data was measured: no warm pair for the completion to move
    # (what it does to one: tests/model/test_cells.py)
    assert "direct" not in loaded.info["completion"]


def test_fit_takes_restarts_and_temper(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    out, loaded = _fit_with(
        capsys, fitted, tmp_path / "model", "--restarts", "2", "--temper", "1.5",
        "--lr", "0.02", "--steps", STEPS, "--quiet",
    )
    assert "over 2 restarts" in out
    assert loaded.components == 2
    # --lr: a diverging fit's message said "lower --lr", an option the CLI did not have
    assert (loaded.info["restarts"], loaded.info["temper"], loaded.info["lr"]) == (2, 1.5, 0.02)


def _shallow_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the fit's NUTS chains build trees of depth 2 at most: the CLI's go up to depth 8,
    and depth 2 keeps a test to seconds."""
    import dataclasses

    from interplace.model import _fit as fit_module

    real = fit_module.run_chain

    def shallow(*args: Any, **kwargs: Any) -> Any:
        settings = dataclasses.replace(args[3], max_tree_depth=2)
        return real(*args[:3], settings, *args[4:], **kwargs)

    monkeypatch.setattr(fit_module, "run_chain", shallow)


def test_fit_samples_by_nuts_when_asked(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    fitted: Fitted,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _shallow_chains(monkeypatch)
    model = tmp_path / "m"
    code, out, err = run(
        capsys, "fit", "--runs", str(fitted.data / "runs.csv"), "--samples",
        str(fitted.data / "samples.csv"), "--out", str(model), "--steps", "50", "--restarts",
        "1", "--nuts", "2", "--nuts-draws", "3", "--nuts-warmup", "2", "--workers", "1",
        "--quiet",
    )
    # Three shallow draws a chain: no R-hat (it needs four), and an acceptance that measures
    # nothing, which may be noted; nothing else goes to stderr.
    assert code == 0
    assert all(line.startswith("interplace: note: NUTS chain") for line in err.splitlines())
    assert "50 steps, then 6 NUTS draws of 2 chains (" in out and " divergent)" in out
    meta = json.loads((model / "model.json").read_text())
    assert meta["components"] == 6
    assert meta["info"]["nuts"]["chains"] == 2 and meta["info"]["nuts"]["draws"] == 3
    assert meta["info"]["nuts"]["warmup"] == 2
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--runs", str(fitted.data / "runs.csv"), "--out", str(tmp_path / "n"),
              "--nuts", "0"])
    assert exc.value.code == 2
    assert "--nuts: must be an integer >= 1" in capsys.readouterr().err
    # --workers runs only NUTS chains (the SVI restarts run in one process): without --nuts
    # it would be silently ignored.
    for flag in ("--nuts-draws", "--nuts-warmup", "--workers"):
        code, _, err = run(capsys, "fit", "--runs", str(fitted.data / "runs.csv"), "--out",
                           str(tmp_path / "n"), flag, "10")
        assert code == 2 and err == f"interplace: error: {flag} needs --nuts CHAINS\n"
    assert not (tmp_path / "n").exists()


def test_fit_notes_nuts_chains_that_disagree_or_accept_too_little(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    fitted: Fitted,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from interplace.model import _fit as fit_module

    _shallow_chains(monkeypatch)
    real_pooled = fit_module.pooled

    def far_apart(chains: Any) -> Any:
        # Chains of a few shallow steps have no telling R-hat or acceptance; set an R-hat far
        # above 1.1, the chains' noise apart, and one chain accepting too little.
        posterior, info = real_pooled(chains)
        return posterior, {**info, "rhat_speed_noise": 2.5, "chain_speed_noise": [0.012, 0.031],
                           "accept_prob": [0.9, 0.21]}

    monkeypatch.setattr(fit_module, "pooled", far_apart)
    code, out, err = run(
        capsys, "fit", "--runs", str(fitted.data / "runs.csv"), "--samples",
        str(fitted.data / "samples.csv"), "--out", str(tmp_path / "m"), "--steps", "50",
        "--nuts", "2", "--nuts-draws", "3", "--workers", "1", "--quiet",
    )
    assert code == 0
    assert " divergent, R-hat 2.50), " in out
    assert err == (
        "interplace: note: the NUTS chains disagree (R-hat of the speed noise 2.50 > 1.1; each "
        "chain's median 0.012, 0.031): they sit in different modes, and the model pools them; "
        "longer chains (--nuts-draws) may join them\n"
        "interplace: note: NUTS chain 1 accepted 0.21 of its proposals on average, against the "
        "0.8 its step size was adapted for: its warm-up ended before it settled and its draws "
        "move little; a longer warm-up (--nuts-warmup) may help\n"
    )


def test_the_clis_nuts_draws_default_is_the_librarys() -> None:
    from interplace.cli.fit import NUTS_DRAWS
    from interplace.model import Nuts

    assert NUTS_DRAWS == Nuts().draws == Nuts().warmup


def test_fit_says_when_the_samples_gave_no_counters(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    # Samples of metrics the model does not read fitted "0 counter groups" without a word.
    samples = pd.read_csv(fitted.data / "samples.csv")
    samples.assign(metric="gpu_temp_c").to_csv(tmp_path / "samples.csv", index=False)
    code, _, err = run(capsys, "fit", "--runs", str(fitted.data / "runs.csv"), "--samples",
                       str(tmp_path / "samples.csv"), "--out", str(tmp_path / "m"), "--steps",
                       STEPS, "--restarts", "1", "--quiet")
    assert code == 0
    assert err.startswith("interplace: note: the samples gave the model no counters: none of "
                          "its metrics is one the model reads")


def test_fit_says_when_every_sample_value_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    # It said "none of its metrics is one the model reads" of metrics it reads.
    samples = pd.read_csv(fitted.data / "samples.csv")
    samples.assign(value=float("nan")).to_csv(tmp_path / "samples.csv", index=False)
    code, _, err = run(capsys, "fit", "--runs", str(fitted.data / "runs.csv"), "--samples",
                       str(tmp_path / "samples.csv"), "--out", str(tmp_path / "m"), "--steps",
                       STEPS, "--restarts", "1", "--quiet")
    assert code == 0
    assert err == ("interplace: note: the samples gave the model no counters: every value in "
                   "them is missing\n")


@pytest.mark.parametrize(("value", "said"), [(-50.0, "-50, far below 0"),
                                             (500.0, "500, far above 100")])
def test_fit_notes_a_counter_far_outside_its_range(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted, value: float, said: str
) -> None:
    # ingest and place refuse such readings; a runs-format samples table is not range-checked
    # (simulated counters dip just below 0), so the fit says so, and fits.
    samples = pd.read_csv(fitted.data / "samples.csv")
    row = int((samples["metric"] == "gpu_util_pct").to_numpy().argmax())
    samples.loc[row, "value"] = value
    path = tmp_path / "samples.csv"
    samples.to_csv(path, index=False)
    code, _, err = run(capsys, "fit", "--runs", str(fitted.data / "runs.csv"), "--samples",
                       str(path), "--out", str(tmp_path / "m"), "--steps", "20", "--restarts",
                       "1", "--quiet")
    assert code == 0
    assert err.startswith(f"interplace: note: {path}: row {row}: gpu_util_pct is {said} (% of ")
    assert err.count("\n") == 1 and "1 such reading, fitted as noisy readings" in err
    # The synthetic table as written, noise just past the bounds included, gets no note.
    assert fitted.err == ""


def test_errors_about_the_data_name_the_runs_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fitted: Fitted
) -> None:
    # The data set is named after the runs file's folder ("toy"); an error the fit raised
    # about it named "toy", not the file given.
    runs = str(fitted.data / "runs.csv")
    for command, extra in (("fit", ("--out", str(tmp_path / "m"))),
                           ("evaluate", ("--no-peers",))):
        code, out, err = run(capsys, command, "--runs", runs, "--family", "nocol", *extra)
        # evaluate's fit sees its training split: "<runs> (train): ..."
        named = f"{runs}: " if command == "fit" else f"{runs} (train): "
        assert_one_line_error(code, out, err, f"interplace: error: {named}runs table has no "
                                              "column 'nocol'")
