"""The long sample table: validation, canonical names, CSV / Parquet round trips, atomic writes."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interplace.collectors import (
    CANONICAL_METRICS,
    SAMPLE_COLUMNS,
    read_samples,
    validate_samples,
    write_samples,
)
from interplace.errors import InputError


def table(**over: object) -> pd.DataFrame:
    cols: dict[str, object] = {
        "t_s": [0.0, 0.5, 1.0],
        "host": ["node1", "node1", "NA"],
        "device": ["0", "1", "host"],
        "metric": ["power_mw", "fb_used_bytes", "cycles:u"],
        "value": [250000.0, 1293942784.0, 0.1 + 0.2],
    }
    cols.update(over)
    return pd.DataFrame(cols)


def test_canonical_metrics_cover_the_documented_names() -> None:
    expected = {
        "gpu_util_pct", "mem_util_pct", "fb_used_bytes", "sm_clock_mhz", "mem_clock_mhz",
        "power_mw", "temp_c", "pcie_tx_kbps", "pcie_rx_kbps", "pcie_tx_bytes_total",
        "pcie_rx_bytes_total", "nvlink_tx_kbps", "nvlink_rx_kbps", "host_cpu_busy_pct",
        "host_mem_used_bytes",
    }  # fmt: skip
    assert set(CANONICAL_METRICS) == expected
    assert all(isinstance(v, str) and v for v in CANONICAL_METRICS.values())


def test_validate_normalises_dtypes_and_drops_missing_values() -> None:
    df = table(t_s=[0, 1, 2], value=[1, None, 3])
    df.index = [10, 20, 30]
    out = validate_samples(df, "t")
    assert list(out.columns) == list(SAMPLE_COLUMNS)
    assert out["t_s"].dtype == np.float64 and out["value"].dtype == np.float64
    assert all(pd.api.types.is_string_dtype(out[c]) for c in ("host", "device", "metric"))
    assert out["value"].tolist() == [1.0, 3.0]  # the NaN row is a missing sample
    assert out.index.tolist() == [0, 1]
    assert df["value"].isna().sum() == 1  # the input is not modified


def test_validate_keeps_optional_and_extra_columns_in_order() -> None:
    df = table(note=["a", "b", "c"], scale=[1.0, 0.5, None], run_id=["r1", "r1", "r2"])
    out = validate_samples(df, "t")
    assert list(out.columns) == [*SAMPLE_COLUMNS, "run_id", "scale", "note"]
    assert math.isnan(out["scale"].iloc[2])


@pytest.mark.parametrize(
    ("df", "message"),
    [
        (table().drop(columns=["metric"]), "t: missing column metric"),
        (table(t_s=[0.0, float("nan"), 1.0]), "t: column 't_s' row 1: nan is not a finite time"),
        (table(t_s=[0.0, 1.0, float("inf")]), "column 't_s' row 2"),
        (table(t_s=["0", "x", "1"]), "column 't_s' row 1: 'x' is not a number"),
        (table(value=[1.0, "12 W", 3.0]), "column 'value' row 1: '12 W' is not a number"),
        (table(value=[1.0, 2.0, float("inf")]), "column 'value' row 2"),
        (table(value=[True, False, True]), "column 'value' has dtype bool"),
        (table(device=[0, 1, 2]), "column 'device' row 0: expected a string, got 0 (int64)"),
        (table(host=["a", None, "c"]), "column 'host' row 1: expected a string"),
        (table(metric=["a", "b", ""]), "column 'metric' row 2 is empty"),
        (table(scale=[1.0, 1.5, 0.2]), "column 'scale' row 1: 1.5 is not in (0, 1]"),
        (table(t_s=pd.to_datetime(["2024-05-01"] * 3)), "column 't_s' has dtype datetime64"),
    ],
)
def test_validate_names_the_column_and_row(df: pd.DataFrame, message: str) -> None:
    with pytest.raises(InputError) as err:
        validate_samples(df, "t")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_validate_refuses_a_non_frame() -> None:
    with pytest.raises(InputError, match="expected a pandas DataFrame, got list"):
        validate_samples([1, 2], "t")  # type: ignore[arg-type]


@pytest.mark.parametrize("ext", [".csv", ".parquet", ".CSV"])
def test_round_trip_gives_an_equal_frame(tmp_path: Path, ext: str) -> None:
    df = table(run_id=["r1", "r1", "r2"], scale=[1.0, 0.4994, None])
    path = tmp_path / f"samples{ext}"
    write_samples(df, path)
    back = read_samples(path)
    pd.testing.assert_frame_equal(back, validate_samples(df, "t"))
    assert back["value"].iloc[2] == 0.1 + 0.2  # floats survive CSV exactly
    assert back["host"].iloc[2] == "NA"  # strings are not read as missing
    assert back["device"].tolist() == ["0", "1", "host"]  # ids stay strings
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left over


def test_csv_with_an_empty_value_cell_reads_as_a_missing_sample(tmp_path: Path) -> None:
    p = tmp_path / "s.csv"
    p.write_text("t_s,host,device,metric,value\n0,h,0,temp_c,40\n1,h,0,temp_c,\n")
    assert read_samples(p)["value"].tolist() == [40.0]


def test_csv_with_a_bad_number_names_file_column_and_row(tmp_path: Path) -> None:
    p = tmp_path / "s.csv"
    p.write_text("t_s,host,device,metric,value\n0,h,0,temp_c,40\n1,h,0,temp_c,warm\n")
    with pytest.raises(InputError, match=r"s\.csv: column 'value' row 1: 'warm' is not a number"):
        read_samples(p)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("s.json", "[]", "unknown sample-table extension '.json' (expected .csv or .parquet)"),
        ("s", "", "unknown sample-table extension '(none)'"),
        ("s.csv", "", "file is empty"),
        ("s.csv", "t_s,host,device\n0,h,0\n", "missing columns metric, value"),
        ("s.parquet", "this is not parquet", "cannot read as Parquet"),
    ],
)
def test_read_refuses_bad_files(tmp_path: Path, name: str, content: str, message: str) -> None:
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(InputError) as err:
        read_samples(p)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_read_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_samples(tmp_path / "nope.csv")


@pytest.mark.parametrize("name", ["plain", "looks.csv"])
def test_a_directory_is_named_as_one_not_by_its_extension(tmp_path: Path, name: str) -> None:
    # "plain" was "unknown sample-table extension '(none)'": true, and no help
    d = tmp_path / name
    d.mkdir()
    message = f"^{re.escape(str(d))} is a directory, not a file$"
    with pytest.raises(InputError, match=message):
        read_samples(d)
    with pytest.raises(InputError, match=message):
        write_samples(table(), d)
    assert list(d.iterdir()) == []


def test_write_refuses_an_unknown_extension_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"unknown sample-table extension '\.txt'"):
        write_samples(table(), tmp_path / "s.txt")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ext", [".csv", ".parquet"])
def test_failed_write_leaves_no_partial_file(tmp_path: Path, ext: str) -> None:
    path = tmp_path / f"s{ext}"
    with pytest.raises(InputError, match="column 't_s' row 1"):
        write_samples(table(t_s=[0.0, float("nan"), 1.0]), path)
    assert list(tmp_path.iterdir()) == []


def test_parquet_failure_mid_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "s.parquet"
    write_samples(table(), path)
    before = path.read_bytes()
    # pyarrow cannot store a column mixing ints and strings: it fails inside the write
    with pytest.raises(InputError, match=r"s\.parquet: cannot write as parquet"):
        write_samples(table(note=[1, "a", 2.5]), path)
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]


def test_write_into_a_missing_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="output directory does not exist"):
        write_samples(table(), tmp_path / "no" / "s.csv")
