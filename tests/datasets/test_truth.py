"""Ground truth on disk: write_truth / read_truth round trips, the file format and its errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from interplace.datasets import (
    TRUTH_FILE,
    TRUTH_FORMAT_VERSION,
    read_dir,
    read_truth,
    synthetic,
    write_runs,
    write_truth,
)
from interplace.errors import InputError
from interplace.topology import load


def _assert_same(a: Any, b: Any, where: str = "truth") -> None:
    """Equal values of the same types: arrays (dtype, shape, values), frames, tuples, lists."""
    assert type(a) is type(b) or (isinstance(a, float) and isinstance(b, float)), where
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, check_exact=True, obj=where)
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}[{k}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, where


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_jobs": 4, "seed": 1},
        {"n_jobs": 3, "seed": 0, "samples_per_run": 0},
        {"n_jobs": 5, "seed": 2, "topology": "p4d", "cross_gpu": 0.5, "mode": "mps"},
    ],
)
def test_synthetic_truth_round_trips(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    args = dict(kwargs)
    if args.get("topology") == "p4d":
        args["topology"] = load("p4d")
    data = synthetic(**args)
    assert data.truth is not None
    with pytest.raises(TypeError):
        json.dumps(data.truth)  # why a format is needed at all
    written = write_truth(data.truth, tmp_path)
    has_samples = "samples" in data.truth
    assert [p.name for p in written] == [TRUTH_FILE] + (
        ["truth_samples.csv"] if has_samples else []
    )
    back = read_truth(tmp_path)
    _assert_same(data.truth, back)
    # Beside the runs and samples of write_runs, nothing collides and both read back.
    write_runs(data, tmp_path)
    assert read_dir(tmp_path).runs.equals(data.runs)
    _assert_same(data.truth, read_truth(tmp_path))


def test_file_is_versioned_json_with_nested_lists(tmp_path: Path) -> None:
    data = synthetic(3, seed=0, samples_per_run=2)
    assert data.truth is not None
    write_truth(data.truth, tmp_path)
    doc = json.loads((tmp_path / TRUTH_FILE).read_text())
    assert doc["format_version"] == TRUTH_FORMAT_VERSION == 1
    demand = doc["truth"]["demand"]
    assert demand["__type__"] == "ndarray" and demand["dtype"] == "float64"
    assert demand["shape"] == [3, 5]
    assert demand["data"] == data.truth["demand"].tolist()
    assert doc["truth"]["jobs"] == ["job0", "job1", "job2"]
    assert doc["truth"]["noise_metric"] == data.truth["noise_metric"]
    assert doc["truth"]["resources"] == {
        "__type__": "tuple",
        "items": list(data.truth["resources"]),
    }
    frame = doc["truth"]["samples"]
    assert frame["file"] == "truth_samples.csv"
    assert list(frame["dtypes"]) == data.truth["samples"].columns.tolist()
    assert pd.read_csv(tmp_path / "truth_samples.csv").shape == data.truth["samples"].shape


def test_odd_values_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    # Doubles over the whole exponent range, subnormals included: repr and float() are exact.
    bits = rng.integers(0, 2**63 - 2**52, size=2000, dtype=np.int64)  # below the NaN/inf bits
    doubles = bits.view(np.float64) * rng.choice([-1.0, 1.0], size=bits.size)
    truth: dict[str, Any] = {
        "doubles": doubles,
        "ints": np.arange(-3, 9, dtype=np.int64).reshape(3, 4),
        "small_ints": np.array([1, 2, 250], dtype=np.uint8),
        "flags": np.array([True, False]),
        "names": np.array(["a", "NA", ""]),
        "empty": np.zeros((0, 3)),
        "scalar_array": np.array(2.5),
        "special": [math.nan, math.inf, -math.inf, -0.0, 1e-320],
        "numpy_scalars": {"f": np.float64(0.1), "i": np.int64(7), "b": np.bool_(True)},
        "nested": {"a": [(1, "x"), ()], "b": {"c": None, "d": [[1.5], []]}},
        "table": pd.DataFrame(
            {
                "text": ["NA", "None", "0", "n0:1"],
                "maybe": pd.Series(["x", None, "y", "z"], dtype=object),
                "s": pd.Series(["host", "0", None, "nan"], dtype="str"),
                "i": np.array([0, -1, 2**62, 3], dtype=np.int64),
                "ni": pd.array([1, None, 3, 4], dtype="Int64"),
                "f": [0.1, math.nan, math.inf, doubles[0]],
                "nf": pd.array([0.5, None, 1.0, 2.0], dtype="Float64"),
                "b": [True, False, True, True],
            }
        ),
        "no_rows": pd.DataFrame({"x": pd.Series(dtype=np.float64), "y": pd.Series(dtype=str)}),
    }
    write_truth(truth, tmp_path)
    back = read_truth(tmp_path)
    expected = dict(truth)
    # numpy scalars come back as the Python numbers they equal.
    expected["numpy_scalars"] = {"f": 0.1, "i": 7, "b": True}
    _assert_same(expected, back)
    assert back["doubles"].tobytes() == doubles.tobytes()  # bit for bit, -0.0 and all
    assert math.copysign(1.0, back["special"][3]) == -1.0


@pytest.mark.parametrize(
    ("truth", "message"),
    [
        ({"x": {1, 2}}, "cannot write truth[x]: a set is not stored"),
        ({"x": [pd.DataFrame({"a": [1]})]}, "cannot write truth[x][0]: a DataFrame is stored only"),
        ({"x": {"y": pd.DataFrame({"a": [1]})}}, "truth[x][y]: a DataFrame is stored only"),
        ({"x": np.array([1 + 2j])}, "cannot write truth[x]: an array of dtype complex128"),
        ({"x": np.array([None])}, "cannot write truth[x]: an array of dtype object"),
        ({"x": {"__type__": "tuple"}}, "cannot write truth[x]: the key '__type__' is reserved"),
        ({"x": {1: 2}}, "cannot write truth[x]: key 1 is not a string"),
        ({"a/b": pd.DataFrame({"a": [1]})}, "cannot write truth[a/b]: a DataFrame's key names"),
        ({"t": pd.DataFrame({"a": [1, "x"]})}, "column 'a' holds 1 (int), not text"),
        ({"t": pd.DataFrame({0: [1]})}, "a DataFrame needs columns named by strings"),
        (
            {"t": pd.DataFrame({"d": pd.to_datetime(["2020-01-01"])})},
            "column 'd' has dtype datetime64",
        ),
    ],
)
def test_unstorable_truth_is_refused_before_writing(
    tmp_path: Path, truth: dict[Any, Any], message: str
) -> None:
    with pytest.raises(InputError) as info:
        write_truth(truth, tmp_path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_write_needs_a_directory_and_a_dict(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="output directory does not exist"):
        write_truth({"a": 1}, tmp_path / "nowhere")
    with pytest.raises(InputError, match="truth must be a dict, not list"):
        write_truth([1], tmp_path)  # type: ignore[arg-type]


def test_failed_write_leaves_the_directory_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = synthetic(2, seed=0, samples_per_run=2).truth
    new = synthetic(3, seed=1, samples_per_run=2).truth
    assert old is not None and new is not None
    write_truth(old, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def failing(self: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", failing)
    with pytest.raises(OSError, match="disk full"):
        write_truth(new, tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    monkeypatch.undo()
    _assert_same(old, read_truth(tmp_path))


def _write_doc(directory: Path, doc: Any) -> None:
    (directory / TRUTH_FILE).write_text(doc if isinstance(doc, str) else json.dumps(doc))


_ARRAY = {"__type__": "ndarray", "dtype": "float64", "shape": [2], "data": [1.0, 2.0]}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("{not json", "malformed ground truth {path}: not JSON"),
        ("", "malformed ground truth {path}: not JSON"),
        ([1, 2], "malformed ground truth {path}: not an object with a format_version"),
        ({"truth": {}}, "malformed ground truth {path}: not an object with a format_version"),
        (
            {"format_version": 2, "truth": {}},
            "{path}: format_version 2 is not supported (this interplace reads 1)",
        ),
        ({"format_version": True, "truth": {}}, "format_version True is not supported"),
        ({"format_version": 1}, "malformed ground truth {path}: 'truth' must be an object"),
        ({"format_version": 1, "truth": [1]}, "'truth' must be an object"),
        (
            {"format_version": 1, "truth": {"a": _ARRAY | {"shape": [3]}}},
            "truth[a]: array data have shape (2,), not (3,)",
        ),
        (
            {"format_version": 1, "truth": {"a": _ARRAY | {"data": [[1.0], [2.0, 3.0]]}}},
            "truth[a]: array data do not fit dtype float64",
        ),
        (
            {"format_version": 1, "truth": {"a": _ARRAY | {"dtype": "object"}}},
            "truth[a]: array dtype object is not stored",
        ),
        (
            {"format_version": 1, "truth": {"a": {"__type__": "ndarray", "dtype": "float64"}}},
            "truth[a]: an ndarray needs dtype, shape and data",
        ),
        (
            {"format_version": 1, "truth": {"a": {"b": {"__type__": "set", "items": []}}}},
            "truth[a][b]: unknown __type__ 'set' (known: ndarray, tuple, csv)",
        ),
        (
            {"format_version": 1, "truth": {"a": {"__type__": "tuple", "items": 3}}},
            "truth[a]: a tuple needs a list of items",
        ),
        (
            {"format_version": 1, "truth": {"a": [{"__type__": "csv"}]}},
            "truth[a]: a CSV table is allowed only as a top-level value",
        ),
        (
            {"format_version": 1, "truth": {"a": {"__type__": "csv", "file": "../x.csv"}}},
            "truth[a]: 'file' must name a .csv file beside truth.json, not '../x.csv'",
        ),
        (
            {"format_version": 1, "truth": {"a": {"__type__": "csv", "file": "t.csv"}}},
            "truth[a]: 'dtypes' must map each column to a dtype name",
        ),
        (
            {
                "format_version": 1,
                "truth": {"a": {"__type__": "csv", "file": "gone.csv", "dtypes": {"x": "int64"}}},
            },
            "no such file: {dir}/gone.csv (named by {path}, truth[a])",
        ),
    ],
)
def test_malformed_file_is_refused(tmp_path: Path, doc: Any, message: str) -> None:
    _write_doc(tmp_path, doc)
    with pytest.raises(InputError) as info:
        read_truth(tmp_path)
    path = tmp_path / TRUTH_FILE
    assert message.format(path=path, dir=tmp_path) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_or_damaged_files(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        read_truth(tmp_path)
    assert str(info.value) == f"no such file: {tmp_path / TRUTH_FILE}"
    data = synthetic(2, seed=0, samples_per_run=2)
    assert data.truth is not None
    write_truth(data.truth, tmp_path)
    csv = tmp_path / "truth_samples.csv"
    text = csv.read_text().splitlines()
    csv.write_text("\n".join([text[0].replace("run_id", "run"), *text[1:]]) + "\n")
    with pytest.raises(InputError, match=r"truth_samples\.csv: columns sample_id, run, .* are not"):
        read_truth(tmp_path)
    csv.write_text("\n".join([text[0], "x" + text[1], *text[2:]]) + "\n")
    with pytest.raises(InputError, match=r"cannot read .*truth_samples\.csv: "):
        read_truth(tmp_path)
