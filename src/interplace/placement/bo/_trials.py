"""Trials and the trials file: one CSV row per finished trial, appended as each finishes.

Columns: one per parameter, named and ordered as in the space, then ``value`` (the objective
as measured, empty for a failed trial), ``status`` (``ok`` or ``failed``) and ``error`` (one
line: why it failed). Numbers are written so that they read back exactly (``repr`` of a
float), so a resumed tuner sees the very values an uninterrupted one saw.

Each row is written with one ``write``, flushed and ``fsync``-ed before the next trial
starts, so a crash or Ctrl-C loses no finished trial. A crash in the middle of a write can
leave a last line without its newline: reading ignores it, and the next append cuts it off
first.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path

from interplace.errors import InputError, first_line, is_real
from interplace.placement.bo._space import RESERVED, Point, Space

__all__ = ["Trial", "TrialsFile", "columns"]


@dataclass(frozen=True)
class Trial:
    """A finished trial: its ``params``, the measured ``value`` (None when it failed) and, for
    a failed trial, the ``error``.

    >>> Trial({"g": 2}, 1.5).status, Trial({"g": 2}, None, "exit status 1").status
    ('ok', 'failed')
    >>> Trial({"g": 2}, math.nan)
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: a trial's value must be a finite number or None, not nan
    """

    params: Point
    value: float | None
    error: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.params, dict):
            raise InputError(f"a trial's params must be a dict, not {self.params!r}")
        if self.value is not None and not is_real(self.value):
            raise InputError(f"a trial's value must be a finite number or None, not "
                             f"{self.value!r}")
        if not isinstance(self.error, str) or "\n" in self.error:
            raise InputError("a trial's error must be one line of text")

    @property
    def status(self) -> str:
        """``"ok"`` or ``"failed"``."""
        return "ok" if self.value is not None else "failed"


def columns(space: Space) -> list[str]:
    """The header of a trials file for ``space``.

    >>> from interplace.placement.bo._space import Int
    >>> columns(Space((Int("a", 0, 1),)))
    ['a', 'value', 'status', 'error']
    """
    return [*space.names, *RESERVED]


def _cell(v: object) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v)


class TrialsFile:
    """The trials file ``path`` of ``space`` (it need not exist yet).

    >>> import tempfile
    >>> from interplace.placement.bo._space import Choice
    >>> space = Space((Choice("g", (0, 1, 2, 4, 8)),))
    >>> f = TrialsFile(Path(tempfile.mkdtemp()) / "trials.csv", space)
    >>> f.append(Trial({"g": 4}, 2.5)); f.append(Trial({"g": 8}, None, "exit status 1"))
    >>> [t.status for t in f.read()]
    ['ok', 'failed']
    >>> print(f.path.read_text(), end="")
    g,value,status,error
    4,2.5,ok,
    8,,failed,exit status 1
    """

    def __init__(self, path: str | os.PathLike[str], space: Space) -> None:
        self.path = Path(path)
        self.space = space

    def read(self) -> list[Trial]:
        """The finished trials in the file (none when it is missing or empty); an
        :class:`InputError` when its columns do not match the space or a row is bad."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except IsADirectoryError:
            raise InputError(f"{self.path} is a directory, not a trials file") from None
        except OSError as exc:
            raise InputError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{self.path}: not a UTF-8 text file") from None
        if not text.strip():
            return []
        if not text.endswith("\n"):  # a row cut short by a crash: not a finished trial
            text = text[: text.rfind("\n") + 1]
            if not text:  # the header itself cut short: no trial finished (append rewrites it)
                return []
        rows = list(csv.reader(io.StringIO(text)))
        want = columns(self.space)
        if not rows or rows[0] != want:
            got = ",".join(rows[0]) if rows else "(nothing)"
            raise InputError(f"{self.path}: its columns {got} do not match the space "
                             f"(expected {','.join(want)}); use another --out")
        out = []
        for i, row in enumerate(rows[1:], start=2):
            if not row:
                continue
            where = f"{self.path} line {i}"
            if len(row) != len(want):
                raise InputError(f"{where}: {len(row)} cells, expected {len(want)}")
            n = self.space.dim
            try:
                params = {name: self.space.parse_text(name, cell)
                          for name, cell in zip(self.space.names, row[:n], strict=True)}
                params = self.space.check(params)
            except InputError as exc:
                raise InputError(f"{where}: {exc}") from None
            value_s, status, error = row[n:]
            if status == "ok":
                try:
                    value = float(value_s)
                except ValueError:
                    raise InputError(f"{where}: value {value_s!r} is not a number") from None
                if not math.isfinite(value):
                    raise InputError(f"{where}: value {value_s!r} of an ok trial is not finite")
                out.append(Trial(params, value))
            elif status == "failed":
                out.append(Trial(params, None, error.replace("\n", " ")))
            else:
                raise InputError(f"{where}: status must be ok or failed, not {status!r}")
        return out

    def append(self, trial: Trial) -> None:
        """Append ``trial`` (with the header first when the file is new or empty), flushed
        and synced to disk before returning."""
        if self.path.exists():
            self._cut_torn_tail()
        new = not self.path.exists() or self.path.stat().st_size == 0
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if new:
            w.writerow(columns(self.space))
        w.writerow([*(_cell(trial.params[n]) for n in self.space.names),
                    "" if trial.value is None else _cell(float(trial.value)),
                    trial.status, first_line(Exception(trial.error)) if trial.error else ""])
        with open(self.path, "a", encoding="utf-8", newline="") as fh:
            fh.write(buf.getvalue())
            fh.flush()
            os.fsync(fh.fileno())

    def _cut_torn_tail(self) -> None:
        with open(self.path, "rb+") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            if size == 0:
                return
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            fh.seek(0)
            data = fh.read()
            fh.truncate(data.rfind(b"\n") + 1)
