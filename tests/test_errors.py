"""``interplace.errors``: the shared output-path check every command runs before its work."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from interplace.errors import InputError, check_output_file, is_int


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
