"""``interplace.errors``: the shared output-path check every command runs before its work."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from interplace.datasets import synthetic
from interplace.errors import InputError, check_output_file, check_seed, is_int, is_real
from interplace.model import fit
from interplace.placement import MeasuredSpeeds


def test_a_writable_new_file_passes(tmp_path: Path) -> None:
    assert check_output_file(tmp_path / "out.csv") == tmp_path / "out.csv"
    (tmp_path / "old.csv").write_text("x")
    assert check_output_file(str(tmp_path / "old.csv")) == tmp_path / "old.csv"  # replaced later


def test_bad_output_paths_are_one_line_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cases = [
        (tmp_path / "missing" / "out.csv", "output directory does not exist"),
        (blocker / "out.csv", "output directory is not a directory"),
        (tmp_path, "is a directory, not a file"),
    ]
    for path, message in cases:
        with pytest.raises(InputError, match=message):
            check_output_file(path)
    # Root may write anywhere, so the permission branch is driven through os.access.
    monkeypatch.setattr(os, "access", lambda *_: False)
    with pytest.raises(InputError, match=f"cannot write to {tmp_path}: permission denied"):
        check_output_file(tmp_path / "out.csv")



def test_a_folder_that_refuses_files_fails_before_the_work(tmp_path: Path) -> None:
    # /proc passes os.access for root but takes no new file: the check tries one.
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc")
    with pytest.raises(InputError, match=r"^cannot write to /proc: "):
        check_output_file("/proc/interplace-out.csv")


def test_a_failed_write_names_the_users_file_not_the_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interplace.errors import atomic_write

    target = tmp_path / "out.csv"

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device", str(src))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left") as info, atomic_write(target) as fh:
        fh.write("x")
    assert info.value.filename == str(target)
    assert sorted(tmp_path.iterdir()) == []  # nor is the temporary file left


@pytest.mark.parametrize(
    ("value", "low", "expected"),
    [
        (0, None, True), (-5, None, True), (5, 5, True), (4, 5, False), (0, 0, True),
        (-1, 0, False),
        # A bool is an int to Python, never a count here; floats and numpy integers are
        # refused, not cast (the error then names the value as given).
        (True, None, False), (False, 0, False), (2.0, None, False), (2.0, 1, False),
        (np.int64(3), None, False), ("3", None, False), (None, None, False),
    ],
)
def test_is_int(value: object, low: int | None, expected: bool) -> None:
    assert is_int(value, low) is expected


@pytest.mark.parametrize(
    ("value", "finite", "expected"),
    [
        (0, True, True), (-2.5, True, True), (1e308, True, True), (np.float64(0.5), True, True),
        # NaN and the infinities only when the caller asks for them (its own message).
        (float("nan"), True, False), (float("inf"), True, False), (-float("inf"), True, False),
        (float("nan"), False, True), (float("inf"), False, True),
        # A bool is never a number here; strings, None and numpy's narrower floats are
        # refused, not cast.
        (True, True, False), (False, False, False), ("1.5", True, False), (None, False, False),
        (np.float32(0.5), True, False), (np.int64(3), True, False),
    ],
)
def test_is_real(value: object, finite: bool, expected: bool) -> None:
    assert is_real(value, finite=finite) is expected



def test_a_bool_is_not_a_number_where_it_was_taken_as_one() -> None:
    # Three arguments that took True as 1 before they shared is_real (2026-11-29).
    with pytest.raises(InputError, match="lr must be a finite number > 0, not True"):
        fit(synthetic(3, seed=0), lr=True)
    with pytest.raises(InputError, match="measured speed of 'a' next to 'b' is True"):
        MeasuredSpeeds({("a", "b"): True})
    with pytest.raises(InputError, match=r"multiplex_frac must be in \[0, 1\], not True"):
        synthetic(3, seed=0, multiplex_frac=True)


@pytest.mark.parametrize(
    ("reader", "header", "row"),
    [
        ("runs", "run_id,job,throughput", "r1,a,1.0,9"),
        ("samples", "run_id,t_s,metric,value", "r1,0,gpu_util_pct,50,9"),
        ("jobs", "job_id,job,gpus", "j1,a,1,extra"),
        ("state", "job_id,job,gpu", "r1,a,0,extra"),
    ],
)
def test_a_row_longer_than_the_header_is_refused_not_shifted(
    tmp_path: Path, reader: str, header: str, row: str
) -> None:
    # pandas reads a first row with one field more than the header as an index column plus
    # the rest shifted by one (a job read next to the wrong co-runner, without a word).
    from interplace.datasets.runs import read_runs, read_samples
    from interplace.placement.io import read_jobs, read_state

    read = {"runs": read_runs, "samples": read_samples, "jobs": read_jobs,
            "state": read_state}[reader]
    path = tmp_path / f"{reader}.csv"
    path.write_text(f"{header}\n{row}\n")
    with pytest.raises(InputError, match="a row has more fields than the header"):
        read(path)


@pytest.mark.parametrize("reader", ["runs", "samples", "jobs", "state", "philly"])
def test_every_table_reader_names_an_empty_file(tmp_path: Path, reader: str) -> None:
    # One reader (errors.read_table) behind them all: an empty file is named as empty, not
    # as pandas' "No columns to parse from file".
    from interplace.datasets.runs import read_runs, read_samples
    from interplace.datasets.traces import load_philly
    from interplace.placement.io import read_jobs, read_state

    read = {"runs": read_runs, "samples": read_samples, "jobs": read_jobs,
            "state": read_state, "philly": load_philly}[reader]
    path = tmp_path / f"{reader}.csv"
    path.write_text("")
    with pytest.raises(InputError, match=rf"^{path}: \w+ (table )?is empty$"):
        read(path)


@pytest.mark.parametrize("header", ["job,job,gpus", "job,job ,gpus", "job, gpus,job"])
def test_a_header_naming_a_column_twice_is_refused(tmp_path: Path, header: str) -> None:
    # pandas read "job,job" as job and job.1, and "job,job " as two columns named alike.
    from interplace.placement.io import read_jobs

    path = tmp_path / "jobs.csv"
    path.write_text(f"{header}\na,b,1\n")
    with pytest.raises(InputError, match=f"^{path}: jobs table names column 'job' twice$"):
        read_jobs(path)


def test_a_directory_where_a_file_goes_is_named_as_such(tmp_path: Path) -> None:
    from interplace.errors import atomic_write, check_input_file

    d = tmp_path / "out.csv"
    d.mkdir()
    with pytest.raises(InputError, match=r"out\.csv is a directory, not a file"), \
            atomic_write(d) as fh:
        fh.write("x")  # pragma: no cover - refused before
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]  # no temporary left
    with pytest.raises(InputError, match=r"out\.csv is a directory, not a file"):
        check_input_file(d)


def test_replacing_a_directory_keeps_the_old_one_when_the_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A model saved over an existing one: the old was moved aside, the new failed to move in,
    # and the path held nothing (the old model stranded in a hidden .model.old.* folder).
    from interplace.errors import replace_dir

    target, built = tmp_path / "model", tmp_path / ".model.new"
    target.mkdir()
    (target / "f").write_text("old")
    built.mkdir()
    (built / "f").write_text("new")
    real = Path.rename

    def rename(self: Path, dest: str | os.PathLike[str]) -> Path:
        if self == built:
            raise OSError(28, "No space left on device")
        return real(self, dest)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="No space left"):
        replace_dir(built, target)
    assert (target / "f").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.new", "model"]


def test_the_seed_limit_is_exclusive() -> None:
    assert check_seed(2**63 - 1) == 2**63 - 1
    with pytest.raises(InputError, match=r"seed must be an integer in \[0, 2\*\*63\)"):
        check_seed(2**63)
