"""Jobs and state tables in, placement tables out: columns, errors, atomic writes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from interplace.errors import InputError
from interplace.placement import Job, MeasuredSpeeds, place
from interplace.placement.io import read_jobs, read_state, write_placement, write_tables
from interplace.topology import builtin


def test_jobs_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "jobs.csv"
    p.write_text("job_id,job,gpus,comm_share,family\n1,NA,2,,f\n2,b,1,0.3,\n")
    jobs = read_jobs(p)
    assert jobs == [Job("1", "NA", 2, "f", 0.2), Job("2", "b", 1, None, 0.3)]
    q = tmp_path / "jobs.parquet"
    pd.DataFrame({"job_id": ["1"], "job": ["a"]}).to_parquet(q)
    assert read_jobs(q) == [Job("1", "a")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("job,gpus\na,1\n", "lacks column"),
        ("job_id,job,gpus\n1,a,1\n1,b,1\n", "row 1: duplicate job_id '1'"),
        ("job_id,job,gpus\n1,a,0\n", "row 0: gpus must be a whole number >= 1"),
        ("job_id,job,gpus\n1,a,x\n", "row 0: gpus 'x' is not a number"),
        ("job_id,job,gpus\n1,,1\n", "row 0: empty job"),
        ("job_id,job,comm_share\n1,a,2\n", r"row 0: comm_share must be in \[0, 1\)"),
        ("job_id,job\n", "has no rows"),
        # a counter under a misspelt name was left out, the job placed as if it had none
        ("job_id,job,gpu_util_pct,mem_utl_pct\n1,a,50,20\n",
         "column 'mem_utl_pct' is no counter interplace reads"),
    ],
)
def test_bad_jobs(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "jobs.csv"
    p.write_text(text)
    with pytest.raises(InputError, match=message):
        read_jobs(p)


def test_state(tmp_path: Path) -> None:
    p = tmp_path / "state.csv"
    p.write_text("job_id,job,gpu\nr,a,0\ng,b,2\ng,b,3\n")
    s = read_state(p)
    assert [(r.job.job_id, r.job.gpus, r.gpus) for r in s.running] == [
        ("r", 1, ("0",)), ("g", 2, ("2", "3"))
    ]
    p.write_text("job_id,job,gpu\ng,b,2\ng,c,3\n")
    with pytest.raises(InputError, match="row 1: job 'g' is 'c' here and 'b' above"):
        read_state(p)
    p.write_text("job_id,job,gpu\ng,b,2\ng,b,2\n")
    with pytest.raises(InputError, match="lists GPU '2' twice"):
        read_state(p)


def test_missing_and_unknown_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_jobs(tmp_path / "nope.csv")
    (tmp_path / "j.txt").write_text("x")
    with pytest.raises(InputError, match="unknown jobs table file type"):
        read_jobs(tmp_path / "j.txt")


def test_write_placement(tmp_path: Path, toy: MeasuredSpeeds) -> None:
    p = place(builtin("pcie-8gpu"), toy, [Job("1", "hog", gpus=2), Job("2", "mid")])
    out = tmp_path / "p.csv"
    write_placement(p, out)
    table = pd.read_csv(out, dtype={"job_id": str, "gpu": str})
    assert table.columns.tolist() == ["job_id", "job", "gpu", "speed_mean", "speed_q05",
                                      "speed_q95"]
    assert table["job_id"].tolist().count("1") == 2 and len(table) == 3
    with pytest.raises(InputError, match="unknown output file type"):
        write_placement(p, tmp_path / "p.json")
    assert not (tmp_path / "p.json").exists()


def test_write_tables_all_or_none(tmp_path: Path) -> None:
    # The second table cannot be written (Parquet refuses a column of mixed types) after the
    # first was: neither file is replaced, and no temporary file is left.
    first, second = tmp_path / "placement.csv", tmp_path / "pending.parquet"
    first.write_text("before\n")
    good = pd.DataFrame({"job": ["a", "b"]})
    bad = pd.DataFrame({"job": [1, "b"]})
    with pytest.raises(Exception, match="job"):
        write_tables([(good, first), (bad, second)])
    assert first.read_text() == "before\n" and sorted(tmp_path.iterdir()) == [first]
    write_tables([(good, first), (good, second)])
    assert pd.read_csv(first)["job"].tolist() == pd.read_parquet(second)["job"].tolist()
