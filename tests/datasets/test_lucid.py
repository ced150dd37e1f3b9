"""Lucid's pairs: read from ../shared only (non-commercial data, never copied into the repo).

The error-path tests write small CSVs with invented models and numbers; they are not Lucid data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interplace.datasets import CoLocationData, load_lucid, lucid_job_name, read_dir, write_runs
from interplace.errors import InputError

SHARED = Path(__file__).parents[2].parent / "shared" / "datasets" / "lucid"
needs_shared = pytest.mark.skipif(
    not (SHARED / "colocate_info.csv").is_file(),
    reason=f"Lucid data not found at {SHARED} (non-commercial licence: never shipped)",
)


@needs_shared
def test_lucid_pairs_and_speeds() -> None:
    data = load_lucid(SHARED)
    assert data.name == "lucid"
    sizes = data.run_sizes()
    assert (sizes == 2).sum() == 1388
    assert (sizes == 1).sum() == 66  # one isolated run per solo profile
    assert set(sizes) == {1, 2}
    pairs = data.pairs()
    assert len(pairs) == 2 * 1388
    assert ((pairs["speed"] > 0) & (pairs["speed"] <= 1.5)).all()
    assert (data.runs["unit"] == "samples/s").all()  # every paired job has a solo profile
    assert pairs["job"].nunique() == 56


@needs_shared
def test_lucid_speeds_are_the_published_normalised_speeds() -> None:
    raw = pd.read_csv(SHARED / "colocate_info.csv", index_col=0)
    pairs = load_lucid(SHARED).pairs()
    first, second = pairs.iloc[0::2], pairs.iloc[1::2]
    assert first["run_id"].tolist() == [f"lucid/pair/{i}" for i in raw.index]
    assert second["run_id"].tolist() == first["run_id"].tolist()
    np.testing.assert_allclose(first["speed"], raw["speed1"], rtol=1e-12)
    np.testing.assert_allclose(second["speed"], raw["speed2"], rtol=1e-12)
    expected = [
        lucid_job_name(m, d, b, bool(a))
        for m, d, b, a in zip(
            raw["model1"], raw["dataset1"], raw["batchsize1"], raw["amp1"], strict=True
        )
    ]
    assert first["job"].tolist() == expected


@needs_shared
def test_lucid_samples_hold_the_nvml_means() -> None:
    raw = pd.read_csv(SHARED / "colocate_info.csv", index_col=0)
    data = load_lucid(SHARED)
    s = data.samples
    assert s is not None
    assert (s["t_s"] == 0.0).all()
    assert set(s["metric"]) == {"gpu_util_pct", "mem_util_pct", "fb_used_max_bytes"}
    assert len(s) == 3 * (66 + 1388)
    first = s[s["run_id"] == f"lucid/pair/{raw.index[0]}"].set_index("metric")["value"]
    assert first["gpu_util_pct"] == raw["gpu_util"].iloc[0]
    assert first["mem_util_pct"] == raw["gmem_util"].iloc[0]
    assert first["fb_used_max_bytes"] == raw["gmem"].iloc[0] * 2**20


def _assert_round_trips(data: CoLocationData, directory: Path) -> None:
    """write_runs then read_dir gives back equal tables, dtypes included."""
    write_runs(data, directory)
    back = read_dir(directory)
    pd.testing.assert_frame_equal(back.runs, data.runs, check_exact=True)
    assert back.samples is not None and data.samples is not None
    pd.testing.assert_frame_equal(back.samples, data.samples, check_exact=True)


@needs_shared
def test_lucid_round_trips_through_the_runs_format(tmp_path: Path) -> None:
    data = load_lucid(SHARED)
    assert data.runs["label"].dtype == np.int64  # every Lucid job has a solo profile and class
    _assert_round_trips(data, tmp_path)


def _write(tmp_path: Path, single: str, pairs: str) -> Path:
    (tmp_path / "single_data.csv").write_text(single)
    (tmp_path / "colocate_info.csv").write_text(pairs)
    return tmp_path


SINGLE = (
    "model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label\n"
    "Foo,Set,8,0,100.0,90.0,40.0,1000.0,1\n"
    "Bar,Set,16,1,50.0,80.0,30.0,,2\n"
)
HEADER = (
    ",model1,dataset1,gpu_num1,batchsize1,amp1,speed1,"
    "model2,dataset2,gpu_num2,batchsize2,amp2,speed2,gpu_util,gmem_util,gmem\n"
)


def test_synthetic_directory_converts(tmp_path: Path) -> None:
    src = _write(
        tmp_path,
        SINGLE,
        HEADER
        + "7,Foo,Set,1,8,0,0.5,Bar,Set,1,16,1,0.8,95.0,50.0,2000\n"
        + "9,Foo,Set,1,8,0,0.9,Baz,Set,1,4,0,0.7,70.0,20.0,1500\n",
    )
    data = load_lucid(src)
    runs = data.runs.set_index("run_id")
    assert runs.loc["lucid/iso/Foo/Set bs8", "throughput"] == 100.0
    # Baz has no solo profile: isolated 1.0, throughput = normalised speed, unit "normalised".
    assert runs.loc["lucid/iso/Baz/Set bs4", "throughput"] == 1.0
    assert runs.loc["lucid/iso/Baz/Set bs4", "unit"] == "normalised"
    pairs = data.pairs().set_index(["run_id", "job"])
    assert pairs.loc[("lucid/pair/7", "Foo/Set bs8"), "throughput"] == 50.0
    assert pairs.loc[("lucid/pair/7", "Bar/Set bs16 amp"), "speed"] == pytest.approx(0.8)
    assert pairs.loc[("lucid/pair/9", "Baz/Set bs4"), "speed"] == 0.7
    assert pairs.loc[("lucid/pair/7", "Bar/Set bs16 amp"), "label"] == 2
    assert pd.isna(pairs.loc[("lucid/pair/9", "Baz/Set bs4"), "label"])
    assert data.runs["label"].dtype == np.float64  # a class is missing: NaN, as CSV reads it
    out = tmp_path / "out"
    out.mkdir()
    _assert_round_trips(data, out)
    complete = tmp_path / "complete"
    complete.mkdir()
    only_foo = HEADER + "7,Foo,Set,1,8,0,0.5,Bar,Set,1,16,1,0.8,95.0,50.0,2000\n"
    full = load_lucid(_write(complete, SINGLE, only_foo))
    assert full.runs["label"].tolist() == [1, 2, 1, 2]
    assert full.runs["label"].dtype == np.int64
    _assert_round_trips(full, complete)
    assert data.samples is not None
    # Bar's solo gmem is empty: a missing row, not a NaN value.
    bar = data.samples[data.samples["run_id"] == "lucid/iso/Bar/Set bs16 amp"]
    assert sorted(bar["metric"]) == ["gpu_util_pct", "mem_util_pct"]


@pytest.mark.parametrize(
    ("single", "pairs", "message"),
    [
        (SINGLE, HEADER + "0,Foo,Set,2,8,0,0.5,Bar,Set,1,16,1,0.8,1,1,1\n", "gpu_num1 is 2"),
        (
            SINGLE,
            HEADER + "0,Foo,Set,1,8,0,0.0,Bar,Set,1,16,1,0.8,1,1,1\n",
            "row 0: speed1 must be finite and > 0, got 0.0",
        ),
        (SINGLE, HEADER + "0,Foo,Set,1,8,2,0.5,Bar,Set,1,16,1,0.8,1,1,1\n", "amp1 must be 0 or 1"),
        (SINGLE + "Foo,Set,8,0,99.0,1,1,1,1\n", HEADER, "job 'Foo/Set bs8' is profiled twice"),
        (SINGLE.replace(",speed,", ",rate,"), HEADER, "single_data.csv: lacks column(s) speed"),
        (SINGLE, HEADER.replace(",gmem\n", "\n"), "colocate_info.csv: lacks column(s) gmem"),
        # An infinite utilisation names the file's row (it was "samples row 198" of the table
        # the loader builds, a row the user cannot find).
        (
            SINGLE,
            HEADER + "0,Foo,Set,1,8,0,0.5,Bar,Set,1,16,1,0.8,inf,1,1\n",
            "colocate_info.csv row 0: gpu_util inf is not a finite number",
        ),
    ],
)
def test_malformed_input_is_refused(tmp_path: Path, single: str, pairs: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        load_lucid(_write(tmp_path, single, pairs))
    assert message in str(info.value)


def test_missing_directory_or_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no Lucid data directory"):
        load_lucid(tmp_path / "nowhere")
    (tmp_path / "single_data.csv").write_text(SINGLE)
    with pytest.raises(InputError, match=r"no such file: .*colocate_info\.csv"):
        load_lucid(tmp_path)


def test_no_lucid_data_in_the_repository() -> None:
    repo = Path(__file__).parents[2]
    names = {"colocate_info.csv", "single_data.csv", "cluster_throughput.csv", "vc_config.csv"}
    for sub in ("src", "tests"):
        found = [p for p in (repo / sub).rglob("*") if p.name in names]
        assert found == [], found
