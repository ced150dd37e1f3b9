"""Errors raised on bad input, the atomic file writes every output goes through, and the
strict CSV read every input table goes through.

Every problem with what a user handed us (a missing file, malformed XML, an unknown GPU id)
raises :class:`InputError` with a one-line message naming the problem. The CLI turns it into
``interplace: error: <message>`` on stderr and exit code 2.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import numbers
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DIGEST_KEY",
    "InputError",
    "atomic_write",
    "check_digest",
    "check_input_file",
    "check_output_file",
    "check_output_parent",
    "check_replaceable_dir",
    "check_seed",
    "files_digest",
    "first_line",
    "is_int",
    "is_real",
    "open_saved_dir",
    "output_dir",
    "parse_json",
    "read_csv",
    "read_input",
    "read_json",
    "read_table",
    "replace_dir",
    "save_dir",
]


class InputError(ValueError):
    """Bad input from a user: the message is one line that names the problem.

    >>> str(InputError("no GPU 9 in topology 'p4d' (GPUs: 0..7)"))
    "no GPU 9 in topology 'p4d' (GPUs: 0..7)"
    """


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its type's name when the message is empty.

    Third-party errors (pandas, pyarrow, XML parsers) often carry several lines; an
    :class:`InputError` built from one quotes only this line.

    >>> first_line(ValueError("bad row\\n  at line 3"))
    'bad row'
    >>> first_line(KeyError())
    'KeyError'
    """
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_int(value: object, low: int | None = None) -> TypeGuard[int]:
    """Whether ``value`` is a Python ``int``, and at least ``low`` when ``low`` is given.

    The test behind every integer argument's one-line error: a ``bool`` is an ``int`` to
    Python but never a count here, and a float (even ``2.0``) or a numpy integer is refused
    rather than silently cast.

    >>> is_int(3), is_int(3, 1), is_int(0, 1), is_int(-2)
    (True, True, False, True)
    >>> is_int(True), is_int(2.0), is_int("2")
    (False, False, False)
    """
    return isinstance(value, int) and not isinstance(value, bool) and (
        low is None or value >= low
    )


SEED_LIMIT = 2**63
"""Seeds are integers in ``[0, SEED_LIMIT)``: what numpy's and torch's generators both take
(torch's takes less than 2^64; a model's predictions also seed with ``seed + 2``)."""


def check_count(value: object, what: str, low: int = 1) -> int:
    """``value`` if it is an integer >= ``low`` (a count: draws, slots, jobs; 1 unless
    said); otherwise an :class:`InputError` naming it as ``what``.

    >>> check_count(3, "num_samples")
    3
    >>> check_count(0, "num_samples")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: num_samples must be an integer >= 1, not 0
    >>> check_count(0, "budget", low=0)
    0
    """
    if is_int(value, low):
        return value
    raise InputError(f"{what} must be an integer >= {low}, not {value!r}")


def check_seed(seed: object) -> int:
    """``seed`` if it is an integer in ``[0, 2^63)``; otherwise an :class:`InputError`.

    >>> check_seed(7)
    7
    >>> check_seed(-1)
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: seed must be an integer in [0, 2**63), not -1
    """
    if is_int(seed, 0) and seed < SEED_LIMIT:
        return seed
    raise InputError(f"seed must be an integer in [0, 2**63), not {seed!r}")


def is_real(value: object, *, finite: bool = True) -> TypeGuard[float]:
    """Whether ``value`` is a Python ``int`` or ``float`` (and finite, unless ``finite=False``).

    The test behind every numeric argument's one-line error, :func:`is_int`'s twin: a
    ``bool`` is never a number here, and neither is a string such as ``"1.5"``. NaN and the
    infinities are refused unless ``finite=False`` (for callers with their own message for
    them). Range checks stay with the caller.

    >>> is_real(1), is_real(0.5), is_real(float("nan")), is_real(float("inf"), finite=False)
    (True, True, False, True)
    >>> is_real(True), is_real("1.5"), is_real(None)
    (False, False, False)
    """
    return isinstance(value, int | float) and not isinstance(value, bool) and (
        not finite or isinstance(value, int) or math.isfinite(value)  # an int: finite (10**400
    )                                                                  # overflows isfinite)


def plain_number(value: object) -> object:
    """A numpy integer or float as the Python number it holds (a row of a pandas table gives
    them), anything else as it is (a numpy bool stays one: never a number here). For
    arguments kept or converted as numbers, so that :func:`is_int` and :func:`is_real`
    accept a table's values.

    >>> import numpy as np
    >>> plain_number(np.int64(2)), plain_number(np.float32(0.5)), plain_number(np.True_)
    (2, 0.5, np.True_)
    """
    # numpy registers its integers and floats as numbers.Real (not its bool); no numpy
    # import here, which every command loads.
    if type(value) not in (int, float) and isinstance(value, numbers.Real):
        item = getattr(value, "item", None)
        got = item() if callable(item) else None
        if isinstance(got, int | float) and not isinstance(got, bool):
            return got
    return value


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_output_parent(parent: Path) -> None:
    """Refuse a folder to write an output into that is missing or not a folder.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "f"
    >>> _ = f.write_text("a file")
    >>> check_output_parent(f)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: output directory is not a directory: .../f
    """
    if not parent.exists():
        raise InputError(f"output directory does not exist: {parent}")
    if not parent.is_dir():
        raise InputError(f"output directory is not a directory: {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):  # a read-only mount too
        raise InputError(f"cannot write to {parent}: permission denied")
    try:  # what access() cannot see: /proc, /sys, a full disk, root on a read-only folder
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise InputError(f"cannot write to {parent}: {exc.strerror or first_line(exc)}") from exc


DIGEST_KEY = "sha256"
"""The key of a saved directory's description that holds :func:`files_digest`."""


def files_digest(meta: dict[str, Any], paths: Sequence[Path]) -> str:
    """SHA-256 of a saved directory's description ``meta`` (less :data:`DIGEST_KEY`, as
    JSON with sorted keys) and the bytes of its other files ``paths``, in that order.

    Saves record it in the description, loads recompute it (:func:`check_digest`): a bit
    flipped in a weight, a truncated number, an edited value all load as something else
    otherwise, and predict wrong without a word.

    >>> import tempfile
    >>> w = Path(tempfile.mkdtemp()) / "w.bin"
    >>> _ = w.write_bytes(b"weights")
    >>> files_digest({"a": 1}, [w]) == files_digest({"a": 1, DIGEST_KEY: "x"}, [w])
    True
    """
    h = hashlib.sha256()
    rest = json.loads(json.dumps({k: v for k, v in meta.items() if k != DIGEST_KEY}))
    h.update(json.dumps(rest, sort_keys=True).encode())
    for path in paths:
        h.update(path.read_bytes())
    return h.hexdigest()


def check_digest(meta: dict[str, Any], paths: Sequence[Path], where: Path, what: str) -> None:
    """Raise :class:`InputError` unless the :func:`files_digest` recorded in ``meta`` (read
    from ``where``) matches the files; a description without one (saved before digests were
    recorded) passes. ``what`` names the saved thing in the message."""
    want = meta.get(DIGEST_KEY)
    if want is None:
        return
    if want != files_digest(meta, paths):
        raise InputError(f"{where.parent}: the {what}'s files do not match the {DIGEST_KEY} in "
                         f"{where.name}: they were damaged or changed after it was saved")


def replace_dir(built: Path, target: Path) -> None:
    """Rename the directory ``built`` onto ``target`` (beside it), replacing what is there:
    the old directory is moved aside first and put back if the rename fails, so ``target``
    always holds a whole directory, the old or the new.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "new").mkdir(); (root / "dst").mkdir()
    >>> _ = (root / "new" / "f").write_text("new")
    >>> replace_dir(root / "new", root / "dst")
    >>> (root / "dst" / "f").read_text(), sorted(p.name for p in root.iterdir())
    ('new', ['dst'])
    """
    if not target.exists():
        built.rename(target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    old.rmdir()
    target.rename(old)
    try:
        built.rename(target)
    except BaseException:
        old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def save_dir(
    target: Path, meta: dict[str, Any], meta_name: str, write: Callable[[Path], Sequence[Path]]
) -> None:
    """Build a saved directory (a model, a policy) beside ``target`` and put it in place with
    :func:`replace_dir`: ``write(folder)`` writes its data files into the folder and returns
    their paths; ``meta`` then records their :func:`files_digest` and is written as
    ``meta_name`` (indented JSON). The files are made readable by all (safetensors writes
    0600: a server user reads them). On any failure nothing is left beside ``target``.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> def write(folder):
    ...     _ = (folder / "w").write_text("weights")
    ...     return [folder / "w"]
    >>> save_dir(root / "m", {"a": 1}, "m.json", write)
    >>> sorted(p.name for p in (root / "m").iterdir()), sorted(p.name for p in root.iterdir())
    (['m.json', 'w'], ['m'])
    """
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        files = list(write(tmp))
        meta[DIGEST_KEY] = files_digest(meta, files)
        (tmp / meta_name).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        for f in (*files, tmp / meta_name):
            os.chmod(f, 0o644)
        os.chmod(tmp, 0o755)
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def open_saved_dir(
    directory: str | os.PathLike[str], meta_name: str, weights_name: str, *, format_name: str,
    what: str, made_by: str,
) -> tuple[Path, dict[str, Any], Path]:
    """What :func:`save_dir` wrote, checked as far as every saved kind shares: the path of
    the description ``meta_name``, the description (a JSON object whose ``format`` is
    ``format_name``) and the path of the data file ``weights_name``. Raises
    :class:`InputError` naming ``what`` (``"model"``, ``"policy"``) for a missing or plain
    file, a directory without both files, invalid JSON or another format; ``made_by`` says
    where such a directory comes from. The caller checks the version and the data.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> def write(folder):
    ...     _ = (folder / "w").write_text("weights")
    ...     return [folder / "w"]
    >>> save_dir(root / "m", {"format": "f"}, "m.json", write)
    >>> meta_path, meta, weights = open_saved_dir(root / "m", "m.json", "w", format_name="f",
    ...                                          what="model", made_by="fit writes one")
    >>> meta["format"], weights.name
    ('f', 'w')
    >>> open_saved_dir(root / "x", "m.json", "w", format_name="f", what="model",
    ...                made_by="fit writes one")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    interplace.errors.InputError: no such model directory: .../x
    """
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise InputError(f"{d} is a file, not a {what} directory ({made_by})")
    if not d.is_dir():
        raise InputError(f"no such {what} directory: {d}")
    meta_path, weights = d / meta_name, d / weights_name
    if not meta_path.is_file() or not weights.is_file():
        raise InputError(f"{d}: not an interplace {what} (needs {meta_name} and {weights_name})")
    try:
        meta = json.loads(meta_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{meta_path}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != format_name:
        raise InputError(f"{meta_path}: not an interplace {what} description")
    return meta_path, meta, weights


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[str] | IO[bytes]]:
    """Open a temporary file beside ``path`` and rename it onto ``path`` only on success.

    If the body raises, the temporary file is removed and ``path`` is left untouched, so a
    failed command never leaves a partial output file behind.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> with atomic_write(d / "out.txt") as f:
    ...     _ = f.write("hello")
    >>> (d / "out.txt").read_text()
    'hello'
    """
    target = Path(path)
    check_output_parent(target.parent)
    if target.is_dir():
        raise InputError(f"{target} is a directory, not a file")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        # mkstemp creates 0600 files; give the output the mode an ordinary open() would.
        os.chmod(tmp, target.stat().st_mode & 0o777 if target.exists() else 0o666 & ~_umask())
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename == tmp:  # name the user's file
            raise OSError(exc.errno, exc.strerror, str(target)) from exc
        raise


def check_replaceable_dir(
    path: str | os.PathLike[str], own: tuple[str, ...], what: str
) -> Path:
    """``path`` as an absolute Path if a save of ``what`` may replace it: absent, an empty
    directory, or one that holds only the files ``own`` a save writes. Anything else would be
    deleted with it, so it is refused; so are the current directory and those above it (the
    replacement is built beside the target and renamed onto it).

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "model.json").write_text("{}"); _ = (d / "notes.txt").write_text("mine")
    >>> check_replaceable_dir(d, ("model.json",), "an interplace model")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: ... holds notes.txt, which is not part of an interplace model: ...
    """
    target = Path(path).absolute()
    resolved, cwd = target.resolve(), Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise InputError(f"{path} is the current directory or above it: give {what} a "
                         "directory of its own")
    if not target.exists():
        return target
    if not target.is_dir():
        raise InputError(f"{path} exists and is not a directory")
    other = sorted(set(os.listdir(target)) - set(own))
    if other:
        raise InputError(f"{path} holds {other[0]}, which is not part of {what}: refusing to "
                         "replace it (give a new or empty directory)")
    return target


def prepare_output_dir(path: str | os.PathLike[str], name: str) -> Path:
    """Create a folder of results with its parents and check that it takes files; returns it.

    Commands that write a folder of results (``demo --out``, the ``--plot`` folders of
    ``simulate`` and ``stability``) call this before their slow part, so a path that cannot
    hold the results fails at once; ``name`` names the folder in messages (``"--plot
    directory"``). A failure is an :class:`InputError`.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "new" / "plots"
    >>> prepare_output_dir(d, "--plot directory").is_dir()
    True
    >>> _ = (d / "f").write_text("x")
    >>> prepare_output_dir(d / "f", "--plot directory")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: --plot directory .../f exists and is not a directory
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InputError(f"{name} {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise InputError(f"cannot write to {name} {out}: {exc.strerror}") from exc
    return out


@contextlib.contextmanager
def output_dir(path: str | os.PathLike[str] | None, name: str) -> Iterator[Path | None]:
    """:func:`prepare_output_dir` for the ``with`` block (nothing where ``path`` is None); if
    the block fails, the folders it created are removed again where they are still empty, so
    a failed command leaves no empty results folder behind.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "new" / "plots"
    >>> with contextlib.suppress(InputError), output_dir(d, "--plot directory"):
    ...     raise InputError("the simulation failed")
    >>> d.parent.exists()
    False
    """
    if path is None:
        yield None
        return
    out = Path(path)
    new = [p for p in (out, *out.parents) if not p.exists()]  # deepest first
    made = prepare_output_dir(out, name)
    try:
        yield made
    except BaseException:
        for p in new:
            with contextlib.suppress(OSError):  # not empty (or gone): left as it is
                p.rmdir()
        raise


def check_output_file(path: str | os.PathLike[str]) -> Path:
    """Refuse an output file path that could not be written later; returns it as a Path.

    Commands call this before their slow part, so a bad ``--out`` fails at once instead of
    after the work: the directory must exist and be writable, and the path must not be a
    directory. (:func:`atomic_write` then writes beside it and renames.)

    >>> check_output_file("/no/such/dir/x.csv")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: output directory does not exist: /no/such/dir
    """
    p = Path(path)
    check_output_parent(p.parent)
    if p.is_dir():
        raise InputError(f"{p} is a directory, not a file")
    return p


def read_csv(source: Any, **kwargs: Any) -> pd.DataFrame:
    r"""``pandas.read_csv(source, **kwargs)``, where a row with more fields than the header is
    an :class:`InputError`: pandas would take the extra field of the first rows for an index
    column and shift every column by one, silently (``job,co_runner`` over ``a,b,c`` read as
    ``b`` next to ``c``), or, told there is no index, drop the extra fields with a warning.

    >>> import io
    >>> read_csv(io.StringIO("job,speed\na,0.5\n")).to_dict("records")
    [{'job': 'a', 'speed': 0.5}]
    >>> read_csv(io.StringIO("job,co_runner\na,b,c\n"))
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: a row has more fields than the header
    """
    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.ParserWarning)
        try:
            frame: pd.DataFrame = pd.read_csv(source, index_col=False, **kwargs)
            return frame
        except pd.errors.ParserWarning:
            raise InputError("a row has more fields than the header") from None


def read_table(
    path: str | os.PathLike[str],
    what: str,
    *,
    text: Collection[str] | None = (),
    missing: Sequence[str] = ("",),
    never_missing: Collection[str] = (),
    suffixes: Collection[str] | None = (".csv", ".parquet"),
) -> pd.DataFrame:
    r"""The input table ``path`` (CSV, or Parquet by its suffix) as a DataFrame, or an
    :class:`InputError` naming the file and the problem; every table a user hands us is read
    through here.

    In a CSV, the columns named in ``text`` are read as text exactly as written (``text=None``:
    every column); a cell that reads as one of ``missing`` is a missing value, except in the
    columns ``never_missing`` (a job called ``NA`` stays ``"NA"``). Spaces after a comma are
    skipped, so ``run_id, job`` names the columns ``run_id`` and ``job``, and a text cell's
    spaces and tabs around it are dropped (``a , b`` reads as ``a`` and ``b``).
    ``suffixes`` are the accepted file types (``None``: any name, read as CSV). A row with
    more fields than the header is refused (:func:`read_csv`).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "jobs.csv"
    >>> _ = p.write_text("job, gpus\nNA, 2\n")
    >>> read_table(p, "jobs table", text=("job",), never_missing=("job",)).to_dict("records")
    [{'job': 'NA', 'gpus': 2}]
    >>> _ = p.rename(p.with_suffix(".txt"))
    >>> read_table(p.with_suffix(".txt"), "jobs table")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: ...jobs.txt: unknown jobs table file type '.txt' (use ...)
    """
    import pandas as pd

    p = check_input_file(path)
    suffix = p.suffix.lower()
    if suffixes is not None and suffix not in suffixes:
        kinds = " or ".join(sorted(suffixes))
        raise InputError(f"{p}: unknown {what} file type {p.suffix!r} (use {kinds})")
    if suffix != ".parquet" or suffixes is None:
        _check_header(p, what)
    try:
        if suffix == ".parquet" and suffixes is not None:
            return pd.read_parquet(p)
        raw = pd.read_csv(p, nrows=0, skipinitialspace=True).columns.tolist()
        name = {c: str(c).strip(" \t") for c in raw}  # "job ,gpus": the columns job and gpus
        as_text = [c for c in raw if text is None or name[c] in text]
        frame: pd.DataFrame = read_csv(
            p,
            skipinitialspace=True,
            dtype=dict.fromkeys(as_text, str),
            keep_default_na=False,
            na_values={c: list(missing) for c in raw if name[c] not in never_missing},
        )
        for c in as_text:  # "a , b" is a and b, as " b" is (skipinitialspace)
            frame[c] = frame[c].str.strip(" \t")
        frame = frame.rename(columns=name)
        return frame
    except pd.errors.EmptyDataError:
        raise InputError(f"{p}: {what} is empty") from None
    except Exception as exc:  # pandas' parser errors, UnicodeDecodeError, pyarrow's own errors
        raise InputError(f"cannot read {what} {p}: {first_line(exc)}") from exc


def _check_header(path: Path, what: str) -> None:
    """Refuse a CSV header that names a column twice (pandas reads ``a,a`` as ``a`` and
    ``a.1``, and ``a,a `` as two columns that read as one)."""
    import csv

    try:
        with path.open(newline="", encoding="utf-8", errors="replace") as fh:
            header = next(csv.reader(fh, skipinitialspace=True), [])
    except (OSError, csv.Error) as exc:
        raise InputError(f"cannot read {what} {path}: {first_line(exc)}") from None
    seen: set[str] = set()
    for column in header:
        column = column.strip(" \t")
        if column in seen:
            raise InputError(f"{path}: {what} names column {column!r} twice")
        seen.add(column)


def check_input_file(path: str | os.PathLike[str]) -> Path:
    """``path`` as a Path if it is a file; otherwise an :class:`InputError` saying what it is.

    >>> check_input_file("/nonexistent/runs.csv")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: no such file: /nonexistent/runs.csv
    >>> check_input_file("/")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: / is a directory, not a file
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p} is a directory, not a file")
    if not p.is_file():
        raise InputError(f"no such file: {p}")
    return p


def check_input_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` as a Path if it is a directory; otherwise an :class:`InputError` saying what
    it is (:func:`check_input_file`'s twin).

    >>> check_input_dir("/nonexistent/data")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: no such directory: /nonexistent/data
    """
    p = Path(path)
    if not p.is_dir():
        raise InputError(f"not a directory: {p}" if p.exists() else f"no such directory: {p}")
    return p


def read_input(path: str | os.PathLike[str]) -> bytes:
    """The bytes of an input file, or an :class:`InputError` that says what is wrong with it.

    >>> read_input("/nonexistent/topo.xml")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: no such file: /nonexistent/topo.xml
    """
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"no such file: {p}") from None
    except IsADirectoryError:
        raise InputError(f"{p} is a directory, not a file") from None
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from None


def parse_json(text: str | bytes, what: str) -> Any:
    """Decoded JSON, or an :class:`InputError` saying ``what`` is not JSON.

    >>> parse_json('{"version": 1}', "recording")
    {'version': 1}
    >>> parse_json("{oops", "recording")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: malformed recording: not JSON (Expecting property name ...)
    """
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"malformed {what}: not JSON ({exc})") from None


def read_json(path: str | os.PathLike[str], what: str) -> Any:
    """Decoded JSON of the file ``path``; errors name it as ``what`` (e.g. "NVML recording")."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None
    return parse_json(text, f"{what} {path}")
