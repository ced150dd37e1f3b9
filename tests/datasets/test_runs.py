"""The runs format: validation messages, derived views and the directory round trip."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from interplace.datasets import (
    CoLocationData,
    read_dir,
    read_runs,
    read_samples,
    validate_runs,
    validate_samples_for_runs,
    write_runs,
)
from interplace.errors import InputError

TOY = Path(__file__).parents[1] / "fixtures" / "datasets" / "toy"


def _runs(**columns: list[Any]) -> pd.DataFrame:
    base: dict[str, list[Any]] = {
        "run_id": ["a", "b", "p", "p"],
        "job": ["x", "y", "x", "y"],
        "throughput": [10.0, 4.0, 5.0, 3.0],
    }
    base.update(columns)
    return pd.DataFrame(base)


def _samples(**columns: list[Any]) -> pd.DataFrame:
    base: dict[str, list[Any]] = {
        "run_id": ["a", "p"],
        "t_s": [0.0, 0.2],
        "metric": ["gpu_util_pct", "gpu_util_pct"],
        "value": [50.0, 90.0],
    }
    base.update(columns)
    return pd.DataFrame(base)


# --- validation: every bad case names its problem --------------------------------------------


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        (_runs().drop(columns="throughput"), "bad: runs table lacks column(s) throughput"),
        (_runs().drop(columns=["run_id", "job"]), "lacks column(s) run_id, job"),
        (_runs().iloc[:0], "bad: runs table has no rows"),
        (
            _runs(throughput=[10.0, 4.0, 0.0, 3.0]),
            "bad: throughput must be finite and > 0, but row 2 (run_id 'p') has 0.0",
        ),
        (
            _runs(throughput=[10.0, -4.0, 5.0, 3.0]),
            "but row 1 (run_id 'b') has -4.0",
        ),
        (_runs(throughput=[10.0, 4.0, 5.0, math.nan]), "but row 3 (run_id 'p') has nan"),
        (_runs(throughput=[math.inf, 4.0, 5.0, 3.0]), "but row 0 (run_id 'a') has inf"),
        (_runs(throughput=[10.0, "4", 5.0, 3.0]), "runs row 1 has throughput '4', not a number"),
        (_runs(throughput=[10.0, None, 5.0, 3.0]), "but row 1 (run_id 'b') has nan"),
        (_runs(job=["x", "y", "x", ""]), "bad: runs row 3 has no job"),
        (_runs(run_id=["a", None, "p", "p"]), "bad: runs row 1 has no run_id"),
        (
            _runs(mode=["timeslice", "mig", None, None]),
            "bad: mode must be one of mps, timeslice or empty, but row 1 (run_id 'b') has 'mig'",
        ),
        (
            _runs(mode=["timeslice", None, "mps", "timeslice"]),
            "bad: run_id 'p' mixes modes 'mps' and 'timeslice' (row 3)",
        ),
        (
            _runs(run_id=["a", "b", "p", "p"], job=["x", "x", "x", "y"]),
            "bad: job 'y' runs co-located (run_id 'p') but has no isolated run",
        ),
    ],
)
def test_validate_runs_names_the_problem(runs: pd.DataFrame, message: str) -> None:
    with pytest.raises(InputError) as info:
        validate_runs(runs, "bad")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_validate_runs_refuses_a_non_dataframe() -> None:
    with pytest.raises(InputError, match="must be a pandas DataFrame, not dict"):
        validate_runs({"run_id": []}, "bad")  # type: ignore[arg-type]


def test_validate_runs_accepts_missing_modes_and_self_pairs() -> None:
    runs = pd.DataFrame(
        {
            "run_id": ["a", "s", "s"],
            "job": ["x", "x", "x"],
            "throughput": [2.0, 1.0, 1.0],
            "mode": [None, "mps", "mps"],
        }
    )
    validate_runs(runs, "ok")


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        (_samples().drop(columns="metric"), "bad: samples table lacks column(s) metric"),
        (_samples(run_id=["a", "zz"]), "bad: samples row 1 has run_id 'zz', not a run"),
        (_samples(t_s=[0.0, math.nan]), "bad: samples row 1 has t_s nan, not a finite number"),
        (_samples(t_s=["0", 1.0]), "bad: samples row 0 has t_s '0', not a number"),
        (_samples(t_s=["0", "soon"]), "bad: samples row 1 has t_s 'soon', not a number"),
        (_samples(value=[1.0, "high"]), "bad: samples row 1 has value 'high', not a number"),
        (_samples(metric=["gpu_util_pct", None]), "bad: samples row 1 has no metric"),
        (
            _samples(value=[1.0, math.inf]),
            "bad: samples row 1 has value inf, not a finite number or missing",
        ),
        (
            _samples(value=[-math.inf, 1.0]),
            "bad: samples row 0 has value -inf, not a finite number or missing",
        ),
        (
            _samples(value=np.array([np.float32(np.inf), 1.0], dtype=np.float32)),
            "bad: samples row 0 has value inf, not a finite number or missing",
        ),
        # A counter's share of the interval: text was read as no scale and 5 divided the
        # reading by 5 (the model's counters then 0.24 where the readings said 0.40).
        (_samples(scale=["x", 0.5]), "bad: samples row 0 has scale 'x', not a number in (0, 1]"),
        (_samples(scale=[0.5, 5.0]), "bad: samples row 1 has scale 5.0, not a number in (0, 1]"),
        (_samples(scale=[0.0, 1.0]), "bad: samples row 0 has scale 0.0, not a number in (0, 1]"),
        (_samples(scale=[True, 1.0]), "bad: samples row 0 has scale True, not a number in (0, 1]"),
    ],
)
def test_validate_samples_names_the_problem(samples: pd.DataFrame, message: str) -> None:
    with pytest.raises(InputError) as info:
        validate_samples_for_runs(samples, _runs(), "bad")
    assert message in str(info.value)


def test_identical_rows_without_an_isolated_run_are_named_so() -> None:
    # It read as the job co-located with itself "but has no isolated run"; a self-pair of
    # Gavel's (both copies at one speed) looks the same, so the message names both.
    runs = pd.DataFrame({"run_id": ["a", "a", "p", "p"], "job": ["x", "x", "x", "x"],
                         "throughput": [2.0, 2.0, 1.0, 1.1]})
    with pytest.raises(InputError, match="job 'x' has no isolated run: run_id 'a' holds 2 "
                                         r"identical rows of it \(copies of the job sharing"):
        validate_runs(runs, "bad")


def test_samples_may_miss_values() -> None:
    # The one convention (runs module docstring): a missing value is NaN, None or pd.NA and
    # the row is kept; only a present value must be a finite number.
    validate_samples_for_runs(_samples(value=[np.nan, None]), _runs(), "ok")
    validate_samples_for_runs(
        _samples(value=pd.array([pd.NA, 1.5], dtype="Float64")), _runs(), "ok"
    )
    validate_samples_for_runs(_samples(scale=[np.nan, 0.25]), _runs(), "ok")
    validate_samples_for_runs(_samples(scale=[None, 1]), _runs(), "ok")
    data = CoLocationData(_runs(), _samples(value=[np.nan, 2.0]), "ok")
    assert data.samples is not None and data.samples["value"].isna().tolist() == [True, False]


def test_runs_docs_use_canonical_metric_names() -> None:
    from interplace.collectors import CANONICAL_METRICS
    from interplace.datasets import runs as runs_module

    text = Path(runs_module.__file__).read_text()
    named = set(re.findall(r"\b(?:gpu|mem|pcie|host)_[a-z_]+", text)) - {"gpu_type"}
    assert named, "the docstrings name metrics"
    assert named <= set(CANONICAL_METRICS), named - set(CANONICAL_METRICS)


def test_colocation_data_validates_on_construction() -> None:
    with pytest.raises(InputError, match=r"toy: throughput must be finite and > 0, but row 0"):
        CoLocationData(_runs(throughput=[0.0, 4.0, 5.0, 3.0]), None, "toy")
    with pytest.raises(InputError, match="toy: samples row 0 has run_id 'q'"):
        CoLocationData(_runs(), _samples(run_id=["q", "a"]), "toy")
    with pytest.raises(InputError, match="name must be a non-empty string"):
        CoLocationData(_runs(), None, "")


def test_colocation_data_is_frozen() -> None:
    data = CoLocationData(_runs(), None, "toy")
    with pytest.raises(AttributeError):
        data.name = "other"  # type: ignore[misc]


# --- derived views ------------------------------------------------------------------------------


def test_isolated_throughput_is_the_mean_over_isolated_runs() -> None:
    runs = pd.DataFrame(
        {
            "run_id": ["a1", "a2", "b", "p", "p"],
            "job": ["x", "x", "y", "x", "y"],
            "throughput": [9.0, 11.0, 4.0, 5.0, 3.0],
        }
    )
    iso = CoLocationData(runs, None, "toy").isolated_throughput()
    assert iso.name == "isolated"
    assert iso.to_dict() == {"x": 10.0, "y": 4.0}


def test_pairs_gives_both_sides_of_every_two_row_run() -> None:
    # Interleaved rows: the co-runner must come from the same run, not the neighbouring row.
    runs = pd.DataFrame(
        {
            "run_id": ["q", "a", "p", "q", "b", "p", "t", "t", "t"],
            "job": ["y", "x", "x", "x", "y", "y", "x", "y", "x"],
            "throughput": [2.0, 10.0, 5.0, 8.0, 4.0, 3.0, 1.0, 1.0, 1.0],
            "device": ["1", "0", "0", "1", "0", "0", "2", "2", "2"],
        }
    )
    pairs = CoLocationData(runs, None, "toy").pairs()
    assert list(pairs.columns) == [
        "run_id",
        "job",
        "co_runner",
        "throughput",
        "isolated",
        "speed",
        "device",
    ]
    assert pairs[["run_id", "job", "co_runner", "device"]].values.tolist() == [
        ["q", "y", "x", "1"],
        ["p", "x", "y", "0"],
        ["q", "x", "y", "1"],
        ["p", "y", "x", "0"],
    ]
    np.testing.assert_allclose(pairs["isolated"], [4.0, 10.0, 10.0, 4.0])
    np.testing.assert_allclose(pairs["speed"], [0.5, 0.5, 0.8, 0.75])


def test_pairs_of_data_without_pairs_is_empty() -> None:
    runs = pd.DataFrame({"run_id": ["a"], "job": ["x"], "throughput": [1.0]})
    pairs = CoLocationData(runs, None, "toy").pairs()
    assert len(pairs) == 0
    assert list(pairs.columns) == ["run_id", "job", "co_runner", "throughput", "isolated", "speed"]


# --- reading and writing --------------------------------------------------------------------


def test_read_dir_reads_the_toy_fixture() -> None:
    data = read_dir(TOY)
    assert data.name == "toy"
    runs = data.runs
    # A job called "NA" and run ids that look like numbers stay strings.
    assert runs["job"].tolist()[0] == "NA"
    assert runs["run_id"].tolist()[:3] == ["001", "002", "003"]
    assert (
        runs["mode"].isna().tolist()
        == [False, True, False, False, False] + [False] * 2 + [True] * 3
    )
    assert data.isolated_throughput().to_dict() == {"NA": 20.0, "bert": 8.25}
    pairs = data.pairs()
    assert sorted(set(pairs["run_id"])) == ["pair-1", "pair-2"]  # "trio" is not a pair
    self_pair = pairs[pairs["run_id"] == "pair-2"]
    assert (self_pair["job"] == self_pair["co_runner"]).all()
    np.testing.assert_allclose(self_pair["speed"], [4.0 / 8.25] * 2)
    assert data.samples is not None
    assert data.samples["value"].isna().tolist() == [False, True, False, False]


def test_write_then_read_dir_round_trips(tmp_path: Path) -> None:
    original = read_dir(TOY)
    out = tmp_path / "copy"
    out.mkdir()
    written = write_runs(original, out)
    assert [p.name for p in written] == ["runs.csv", "samples.csv"]
    back = read_dir(out)
    assert back.name == "copy"
    pd.testing.assert_frame_equal(back.runs, original.runs)
    assert back.samples is not None and original.samples is not None
    pd.testing.assert_frame_equal(back.samples, original.samples)
    pd.testing.assert_frame_equal(back.pairs(), original.pairs())


def test_parquet_round_trip(tmp_path: Path) -> None:
    original = read_dir(TOY)
    original.runs.to_parquet(tmp_path / "runs.parquet")
    back = read_dir(tmp_path)
    pd.testing.assert_frame_equal(back.runs, original.runs)
    assert back.samples is None
    assert read_runs(tmp_path / "runs.parquet").equals(back.runs)


def test_write_runs_removes_stale_samples_and_refuses_parquet(tmp_path: Path) -> None:
    shutil.copy(TOY / "samples.csv", tmp_path / "samples.csv")
    runs = pd.DataFrame({"run_id": ["a"], "job": ["x"], "throughput": [1.0]})
    assert [p.name for p in write_runs(CoLocationData(runs, None, "t"), tmp_path)] == ["runs.csv"]
    assert not (tmp_path / "samples.csv").exists()
    assert read_dir(tmp_path).samples is None
    runs.to_parquet(tmp_path / "runs.parquet")
    with pytest.raises(InputError, match=r"holds runs\.parquet"):
        write_runs(CoLocationData(runs, None, "t"), tmp_path)
    with pytest.raises(InputError, match=r"both runs\.csv and runs\.parquet exist"):
        read_dir(tmp_path)


def test_write_runs_leaves_nothing_behind_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = read_dir(TOY)
    real = pd.DataFrame.to_csv
    calls: list[int] = []

    def failing(self: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the samples table, after runs.csv was written to its temp file
            raise OSError("disk full")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", failing)
    with pytest.raises(OSError, match="disk full"):
        write_runs(data, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_read_errors_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_runs(tmp_path / "runs.csv")
    (tmp_path / "runs.txt").write_text("run_id,job,throughput\n")
    with pytest.raises(InputError, match=r"unknown runs table file type '\.txt'"):
        read_runs(tmp_path / "runs.txt")
    (tmp_path / "runs.csv").write_text("run_id,job,throughput\na,x,fast\n")
    with pytest.raises(InputError, match="runs row 0 has throughput 'fast', not a number"):
        read_runs(tmp_path / "runs.csv")
    # The text cell is named, not the first row (whose number the text column holds as text).
    (tmp_path / "runs.csv").write_text("run_id,job,throughput\na,x,7.5\nb,x,2\nc,y,fast\n")
    with pytest.raises(InputError, match="runs row 2 has throughput 'fast', not a number"):
        read_runs(tmp_path / "runs.csv")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match="cannot read runs table"):
        read_runs(tmp_path / "bad.parquet")
    (tmp_path / "samples.csv").write_text("run_id,t_s\n")
    with pytest.raises(InputError, match="samples table lacks column"):
        read_samples(tmp_path / "samples.csv")
    with pytest.raises(InputError, match="no such directory"):
        read_dir(tmp_path / "nowhere")
    with pytest.raises(InputError, match=r"^not a directory: .*samples\.csv$"):
        read_dir(tmp_path / "samples.csv")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"no runs\.csv or runs\.parquet"):
        read_dir(empty)


def test_read_dir_checks_samples_against_runs(tmp_path: Path) -> None:
    shutil.copy(TOY / "runs.csv", tmp_path / "runs.csv")
    (tmp_path / "samples.csv").write_text("run_id,t_s,metric,value\nghost,0,gpu_util_pct,1\n")
    with pytest.raises(InputError, match="samples row 0 has run_id 'ghost', not a run"):
        read_dir(tmp_path)


def test_a_bad_cell_is_named_where_it_is(tmp_path: Path) -> None:
    # One text cell turns the whole value column to text: the first valid row was named.
    (tmp_path / "runs.csv").write_text("run_id,job,throughput\na,x,2\n")
    (tmp_path / "samples.csv").write_text(
        "run_id,t_s,metric,value\na,0,m,1.5\na,1,m,n/a\na,2,m,oops\n")
    with pytest.raises(InputError, match="samples row 2 has value 'oops', not a number"):
        read_dir(tmp_path)
    # A Parquet run_id of numbers is not text (a CSV's is read as text): say so.
    pq = tmp_path / "runs.parquet"
    pd.DataFrame({"run_id": [1, 2], "job": ["x", "y"], "throughput": [1.0, 2.0]}).to_parquet(pq)
    with pytest.raises(InputError, match="runs row 0 has run_id 1, a int; run_id must be text"):
        read_runs(pq)


def test_a_table_written_with_spaces_after_its_commas_reads_as_without(tmp_path: Path) -> None:
    # "run_id, job, throughput" lacked the columns job and throughput.
    p = tmp_path / "runs.csv"
    p.write_text("run_id, job, throughput\na, x, 2\nb, y, 1\np, x, 1\np, y, 0.5\n")
    runs = read_runs(p)
    assert runs.columns.tolist()[:3] == ["run_id", "job", "throughput"]
    assert runs["job"].tolist() == ["x", "y", "x", "y"]
    # Spaces before a comma too: "x " was a job of its own beside "x".
    q = tmp_path / "aligned.csv"
    q.write_text("run_id ,job ,throughput\na  ,x  ,2\nb  ,y  ,1\np  ,x  ,1\np  ,y\t,0.5\n")
    pd.testing.assert_frame_equal(read_runs(q), runs)


def test_an_isolated_mean_near_the_float_maximum_does_not_overflow() -> None:
    # Two solo runs of 1.7e308 summed to inf: speeds of 0.0 and a fit error that named
    # neither the data set nor the cause.
    runs = pd.DataFrame({"run_id": ["a", "b", "p", "p"], "job": ["x", "x", "x", "y"],
                         "throughput": [1.7e308, 1.7e308, 0.85e308, 1.0]})
    runs = pd.concat([runs, pd.DataFrame({"run_id": ["c"], "job": ["y"], "throughput": [2.0]})])
    data = CoLocationData(runs.reset_index(drop=True), None, "huge")
    assert data.isolated_throughput().to_dict() == pytest.approx({"x": 1.7e308, "y": 2.0})
    assert data.pairs()["speed"].tolist() == pytest.approx([0.5, 0.5])
