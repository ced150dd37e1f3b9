"""Job-trace loaders: real traces from ../shared (skipped without it) and hand-made error cases.

Every CSV written here is invented for the test (no row comes from any trace, Lucid included).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interplace.datasets import JobTrace, load_alibaba_openb, load_philly, load_venus
from interplace.errors import InputError

SHARED = Path(__file__).parents[3] / "shared" / "datasets"
PHILLY = SHARED / "chronus" / "trace_job_Philly_MIX1.csv"
OPENB = SHARED / "alibaba-openb-gpu-2023"
VENUS = SHARED / "lucid" / "cluster_throughput.csv"


def _need(path: Path) -> None:
    if not path.is_file():
        pytest.skip(f"{path} not found (shared data sets are not part of the repo)")


def _canonical_ok(trace: JobTrace) -> None:
    jobs = trace.jobs
    assert list(jobs.columns[:4]) == ["job_id", "submit_s", "duration_s", "gpus"]
    assert jobs["job_id"].is_unique
    assert jobs["submit_s"].is_monotonic_increasing
    d = jobs["duration_s"].to_numpy()
    assert ((d > 0) | np.isnan(d)).all()
    assert (jobs["gpus"] >= 0).all()


def test_philly_rows_and_columns() -> None:
    _need(PHILLY)
    trace = load_philly(PHILLY)
    _canonical_ok(trace)
    assert len(trace) == 30940  # SOURCE.md: 30,940 jobs
    assert trace.name == "philly"
    assert {"user", "model_name", "iterations", "job_type"} <= set(trace.jobs.columns)
    assert trace.jobs["duration_s"].notna().all()  # every Philly job has a duration > 0
    raw = pd.read_csv(PHILLY)
    assert trace.jobs["gpus"].sum() == raw["num_gpu"].sum()
    assert sorted(trace.jobs["job_id"]) == sorted(raw["job_id"].astype(str))


@pytest.mark.parametrize("variant", ["default", "gpushare100", "gpuspec33"])
def test_alibaba_openb_rows(variant: str) -> None:
    path = OPENB / f"openb_pod_list_{variant}.csv"
    _need(path)
    trace = load_alibaba_openb(path)
    _canonical_ok(trace)
    assert len(trace) == 8152  # SOURCE.md: 8152 tasks per pod list
    raw = pd.read_csv(path)
    unscheduled = int(raw["scheduled_time"].isna().sum())
    assert trace.jobs["duration_s"].isna().sum() >= unscheduled
    assert len(load_alibaba_openb(path, drop_unscheduled=True)) == 8152 - unscheduled
    expect = (raw["num_gpu"] * raw["gpu_milli"] / 1000).sum()
    assert trace.jobs["gpus"].sum() == pytest.approx(expect)
    sharing = trace.jobs.loc[(trace.jobs["gpus"] > 0) & (trace.jobs["gpus"] < 1)]
    assert len(sharing) > 0  # fractional GPUs survive


def test_venus_expands_arrival_counts() -> None:
    _need(VENUS)
    trace = load_venus(VENUS)
    _canonical_ok(trace)
    raw = pd.read_csv(VENUS)
    assert len(raw) == 26064  # SOURCE.md: 26064 ten-minute bins
    assert len(trace) == raw["submit_gpu_job"].sum()
    assert trace.jobs["gpus"].sum() == pytest.approx(raw["submit_gpu_num"].sum())
    assert trace.jobs["duration_s"].isna().all()
    # Every job lies inside its 10-minute bin.
    start = trace.jobs["bin"].to_numpy() * 600.0
    assert ((trace.jobs["submit_s"] > start) & (trace.jobs["submit_s"] < start + 600)).all()


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


PHILLY_HEAD = "job_id,user,num_gpu,submit_time,model_name,duration\n"


def test_philly_sorts_and_keeps_zero_gpu_jobs(tmp_path: Path) -> None:
    p = _write(tmp_path, PHILLY_HEAD + "a,u1,0,20,vgg16,5\nb,u2,4,10,alexnet,0\n")
    jobs = load_philly(p).jobs
    assert jobs["job_id"].tolist() == ["b", "a"]
    assert jobs["gpus"].tolist() == [4.0, 0.0]
    assert np.isnan(jobs["duration_s"].iloc[0])  # duration 0 means unknown


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("job_id,user,num_gpu,submit_time,model_name\na,u,1,0,m\n", "lacks column(s) duration"),
        (PHILLY_HEAD + "a,u,1,0,m,5\nb,u,1,,m,5\n", "column 'submit_time' row 1 has nan"),
        (PHILLY_HEAD + "a,u,1,0,m,-5\n", "column 'duration' row 0 has -5.0"),
        (PHILLY_HEAD + "a,u,x,0,m,5\n", "column 'num_gpu' row 0: 'x' is not a number"),
        (PHILLY_HEAD + "a,u,1,0,m,5\na,u,1,1,m,5\n", "repeats job_id 'a'"),
    ],
)
def test_philly_malformed(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_philly(_write(tmp_path, text))


OPENB_HEAD = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (OPENB_HEAD + "a,1,1,1,500,,LS,Running,10,5,10\n", "column 'deletion_time' row 0"),
        (OPENB_HEAD + "a,1,1,1,500,,LS,Running,,5,10\n", "column 'creation_time' row 0"),
        (OPENB_HEAD + "a,1,1,1,1500,,LS,Running,0,5,0\n", "column 'gpu_milli' row 0"),
        (OPENB_HEAD.replace(",gpu_milli", "") + "a,1,1,1,,LS,Running,0,5,0\n", "gpu_milli"),
    ],
)
def test_openb_malformed(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_alibaba_openb(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("time,submit_gpu_job\n2020-01-01,1\n", "lacks column"),
        ("time,submit_gpu_job,submit_gpu_num\nnot-a-time,1,1\n", "column 'time' row 0"),
        ("time,submit_gpu_job,submit_gpu_num\n2020-01-01,-1,1\n", "column 'submit_gpu_job' row 0"),
        ("time,submit_gpu_job,submit_gpu_num\n2020-01-01,0,3\n", "column 'submit_gpu_num' row 0"),
        (
            "time,submit_gpu_job,submit_gpu_num\n2020-01-01 00:10,1,1\n2020-01-01 00:00,1,1\n",
            "column 'time' row 1 is not after row 0",
        ),
    ],
)
def test_venus_malformed(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_venus(_write(tmp_path, text))


def test_a_problem_the_trace_finds_names_the_file_and_its_row(tmp_path: Path) -> None:
    # The trace checks its rows after sorting by submission: the message named "philly" and
    # the sorted row (a job submitted later than the one below it was off by one).
    head = "job_id,user,num_gpu,submit_time,model_name,duration\n"
    p = _write(tmp_path, head + "a,u,1,5,m,10\nb,u,1,1,m,10\nc,u,1,3,m,inf\n")
    with pytest.raises(InputError, match=r"t\.csv: duration_s must be > 0 or missing, but row 2 "
                                         r"\(job_id 'c'\) has inf"):
        load_philly(p)


def test_venus_times_of_several_formats_and_offsets(tmp_path: Path) -> None:
    head = "time,submit_gpu_job,submit_gpu_num\n"
    # Offsets that change (a daylight-saving change; pandas refuses the column as it is) are
    # compared in UTC: 00:50+01 and 01:00+01 are 23:50Z and 00:00Z, 03:10+02 is 01:10Z.
    dst = head + "2020-03-29 00:50:00+01:00,1,1\n2020-03-29 01:00:00+01:00,1,1\n"
    dst += "2020-03-29 03:10:00+02:00,1,1\n"
    assert load_venus(_write(tmp_path, dst)).jobs["submit_s"].tolist() == [300.0, 2700.0, 6000.0]
    # Each row in its own ISO form (pandas infers one from the first row).
    iso = head + "2020-01-01 00:00:00,1,1\n2020-01-01T00:10:00,1,1\n"
    assert load_venus(_write(tmp_path, iso)).jobs["submit_s"].tolist() == [300.0, 900.0]
    east = head + "2020-01-01 00:00:00+00:00,1,1\n2020-01-01 00:10:00+08:00,1,1\n"
    with pytest.raises(InputError, match="row 1 is not after row 0"):  # 16:10Z the day before
        load_venus(_write(tmp_path, east))
    mixed = head + "2020-01-01 00:00:00,1,1\n2020-01-01 00:10:00+08:00,1,1\n"
    with pytest.raises(InputError, match="row 0: '2020-01-01 00:00:00' has no UTC offset, row 1"):
        load_venus(_write(tmp_path, mixed))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_philly(tmp_path / "nope.csv")


def test_jobtrace_validation() -> None:
    ok = pd.DataFrame({"job_id": ["a"], "submit_s": [0.0], "duration_s": [1.0], "gpus": [1.0]})
    assert len(JobTrace(ok, "ok")) == 1
    with pytest.raises(InputError, match="duration_s must be > 0 or missing, but row 0"):
        JobTrace(ok.assign(duration_s=[-1.0]), "bad")
    with pytest.raises(InputError, match="submit_s must be a finite number, but row 0"):
        JobTrace(ok.assign(submit_s=[np.nan]), "bad")
    with pytest.raises(InputError, match="lacks column"):
        JobTrace(ok.drop(columns="gpus"), "bad")


def test_a_repeated_job_id_is_named_at_its_row_in_the_file(tmp_path: Path) -> None:
    # The loader sorts by submission time: the row named was the sorted one.
    p = tmp_path / "philly.csv"
    p.write_text("job_id,user,num_gpu,submit_time,model_name,duration\n"
                 "7,a,1,50,x,10\n7,a,1,5,x,10\n8,a,1,40,x,10\n")
    with pytest.raises(InputError, match=r"philly\.csv: row 1 repeats job_id '7'"):
        load_philly(p)


def test_a_parquet_trace_reads_as_the_same_csv(tmp_path: Path) -> None:
    # Any name was read as CSV: a Parquet file failed on its bytes ("'utf-8' codec can't
    # decode"). Now *.parquet is Parquet, its text columns read as a CSV's (a job id stored
    # as a number is the text "7"; a missing user stays missing).
    csv = _write(tmp_path, PHILLY_HEAD + "7,u1,2,30,vgg16,100\n8,,1,10,alexnet,5\n")
    pq = tmp_path / "t.parquet"
    pd.read_csv(csv).to_parquet(pq)
    assert pd.read_parquet(pq)["job_id"].dtype.kind == "i"
    pd.testing.assert_frame_equal(load_philly(pq).jobs, load_philly(csv).jobs)
    assert load_philly(pq).jobs["job_id"].tolist() == ["8", "7"]
    assert load_philly(pq).jobs["user"].isna().tolist() == [True, False]
    pods = _write(tmp_path, OPENB_HEAD + "a,1,1,1,460,,LS,Running,0,100,0\n")
    pd.read_csv(pods).to_parquet(tmp_path / "pods.parquet")
    pd.testing.assert_frame_equal(load_alibaba_openb(tmp_path / "pods.parquet").jobs,
                                  load_alibaba_openb(pods).jobs)
    # Venus times stored as times (with a zone) read as their text does.
    times = pd.to_datetime(["2020-04-01 00:00", "2020-04-01 00:10"]).tz_localize("Asia/Shanghai")
    pd.DataFrame({"time": times, "submit_gpu_job": [2, 0], "submit_gpu_num": [3, 0]}).to_parquet(
        tmp_path / "venus.parquet")
    assert load_venus(tmp_path / "venus.parquet").jobs[["submit_s", "gpus"]].values.tolist() == [
        [150.0, 1.5], [450.0, 1.5]]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        # was "lacks column(s) job_id, ...": the CSV reader read its bytes as a header
        ("t.parquet", b"job_id,user,num_gpu,submit_time,model_name,duration\n", "cannot read "
         "trace .*t\\.parquet: .*Parquet"),
        ("t.parquet", b"", "cannot read trace .*t\\.parquet"),
        ("t.csv", None, "t\\.csv: a Parquet file; name it \\*\\.parquet to read it as Parquet"),
    ],
)
def test_an_unreadable_or_misnamed_parquet_trace_is_named(
    tmp_path: Path, name: str, content: bytes | None, message: str
) -> None:
    if content is None:  # a good Parquet file under a CSV name
        pd.DataFrame({"job_id": ["a"]}).to_parquet(tmp_path / "good.parquet")
        content = (tmp_path / "good.parquet").read_bytes()
    (tmp_path / name).write_bytes(content)
    for load in (load_philly, load_alibaba_openb, load_venus):
        with pytest.raises(InputError, match=message) as info:
            load(tmp_path / name)
        assert "\n" not in str(info.value) and "lacks column" not in str(info.value)
