"""Ground truth on disk: :func:`write_truth` and :func:`read_truth`.

A synthetic data set's ``truth`` (see :mod:`interplace.datasets.synthetic`) holds numpy arrays,
tuples and a DataFrame, none of which ``json.dumps`` takes, and
:func:`~interplace.datasets.runs.write_runs` writes only the runs and samples. These two
functions store it beside them and read it back equal.

File format (``format_version`` 1)
----------------------------------
``truth.json`` is one JSON object ``{"format_version": 1, "truth": {...}}``. Inside
``"truth"``, strings, numbers, booleans, ``null``, lists and objects (dicts with string keys)
are themselves; the other values are objects tagged with ``"__type__"``:

- a numpy array: ``{"__type__": "ndarray", "dtype": "float64", "shape": [J, R],
  "data": [[...], ...]}``, the values as nested lists (dtypes of kind bool, integer, float or
  text);
- a tuple: ``{"__type__": "tuple", "items": [...]}``;
- a DataFrame, allowed only as a top-level value ``truth[key]``: ``{"__type__": "csv",
  "file": "truth_<key>.csv", "dtypes": {column: dtype, ...}}``, the table in that CSV file
  beside ``truth.json`` (no index column; the columns in ``dtypes`` order, each bool, integer,
  float or text). It is read back with a fresh 0..n-1 index; in a text column an empty string
  and a missing value both come back missing.

Floats are written with Python's ``repr`` (they read back exactly); NaN and infinities as
``NaN`` / ``Infinity``, as Python's :mod:`json` does. numpy scalars come back as Python
numbers. A dict key ``"__type__"`` is refused, so the tags are unambiguous. Readers refuse a
``format_version`` they do not know; bump :data:`TRUTH_FORMAT_VERSION` when the layout changes.

>>> import tempfile, numpy as np
>>> from interplace.datasets.synthetic import synthetic
>>> data = synthetic(3, seed=0, samples_per_run=2)
>>> d = tempfile.mkdtemp()
>>> [p.name for p in write_truth(data.truth, d)]
['truth.json', 'truth_samples.csv']
>>> back = read_truth(d)
>>> sorted(back) == sorted(data.truth)
True
>>> np.array_equal(back["demand"], data.truth["demand"]), back["shared"][-1]
(True, ('gpu_compute', 'gpu_membw', 'pcie_h2d', 'pcie_d2h', 'host_cpu'))
>>> back["samples"].equals(data.truth["samples"])
True
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import pandas as pd

from interplace.errors import InputError, atomic_write, first_line, parse_json, read_csv, read_input

__all__ = ["TRUTH_FILE", "TRUTH_FORMAT_VERSION", "read_truth", "write_truth"]

TRUTH_FILE = "truth.json"
"""Name of the ground-truth file in a data directory."""

TRUTH_FORMAT_VERSION = 1
"""Version of the ``truth.json`` layout that :func:`write_truth` writes and :func:`read_truth`
reads."""

_TAG = "__type__"
_ARRAY_KINDS = frozenset("biufU")
"""numpy dtype kinds an array may have: bool, signed, unsigned, float, text."""
_SAFE_KEY = re.compile(r"[A-Za-z0-9_.-]+")


def _where(path: tuple[str, ...]) -> str:
    return "truth" + "".join(f"[{p}]" for p in path)


def _frame_kind(dtype: Any) -> str | None:
    """``"float"``, ``"number"`` (bool or integer; numpy or nullable), ``"text"``, or None."""
    if isinstance(dtype, pd.StringDtype) or pd.api.types.is_object_dtype(dtype):
        return "text"
    if pd.api.types.is_float_dtype(dtype):
        return "float"
    if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_integer_dtype(dtype):
        return "number"
    return None


def _encode_frame(df: pd.DataFrame, key: str) -> tuple[dict[str, Any], str]:
    where = _where((key,))
    if not _SAFE_KEY.fullmatch(key):
        raise InputError(
            f"cannot write {where}: a DataFrame's key names its file, so it must use only "
            "letters, digits, '_', '.' and '-'"
        )
    columns = df.columns.tolist()
    if not columns or not all(isinstance(c, str) for c in columns):
        raise InputError(f"cannot write {where}: a DataFrame needs columns named by strings")
    if len(set(columns)) != len(columns):
        raise InputError(f"cannot write {where}: the DataFrame repeats a column name")
    dtypes: dict[str, str] = {}
    for c in columns:
        kind = _frame_kind(df[c].dtype)
        if kind is None:
            raise InputError(
                f"cannot write {where}: column {c!r} has dtype {df[c].dtype}; only bool, integer, "
                "float and text columns are stored"
            )
        if kind == "text":
            bad = [v for v in df[c].tolist() if not (isinstance(v, str) or pd.isna(v))]
            if bad:
                raise InputError(
                    f"cannot write {where}: column {c!r} holds {bad[0]!r} "
                    f"({type(bad[0]).__name__}), not text"
                )
        dtypes[c] = str(df[c].dtype)
    file = f"truth_{key}.csv"
    return {_TAG: "csv", "file": file, "dtypes": dtypes}, file


def _encode(value: Any, path: tuple[str, ...], frames: dict[str, pd.DataFrame]) -> Any:
    """``value`` as JSON-ready data; top-level DataFrames go to ``frames`` (file -> frame)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, np.generic):
        value = value.item()  # a Python number (bool, int, float), or refused below
        if isinstance(value, bool):
            return value
    if isinstance(value, int | float):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _ARRAY_KINDS:
            raise InputError(
                f"cannot write {_where(path)}: an array of dtype {value.dtype}; only bool, "
                "integer, float and text arrays are stored"
            )
        return {
            _TAG: "ndarray",
            "dtype": value.dtype.str if value.dtype.kind == "U" else value.dtype.name,
            "shape": list(value.shape),
            "data": value.tolist(),
        }
    if isinstance(value, tuple):
        return {
            _TAG: "tuple",
            "items": [_encode(v, (*path, str(i)), frames) for i, v in enumerate(value)],
        }
    if isinstance(value, list):
        return [_encode(v, (*path, str(i)), frames) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise InputError(f"cannot write {_where(path)}: key {k!r} is not a string")
            if k == _TAG:
                raise InputError(f"cannot write {_where(path)}: the key {_TAG!r} is reserved")
            out[k] = _encode(v, (*path, k), frames)
        return out
    if isinstance(value, pd.DataFrame):
        if len(path) != 1:
            raise InputError(
                f"cannot write {_where(path)}: a DataFrame is stored only as a top-level value"
            )
        spec, file = _encode_frame(value, path[0])
        frames[file] = value
        return spec
    raise InputError(
        f"cannot write {_where(path)}: a {type(value).__name__} is not stored (numbers, text, "
        "lists, tuples, dicts, numpy arrays and top-level DataFrames are)"
    )


def write_truth(truth: Mapping[str, Any], directory: str | os.PathLike[str]) -> list[Path]:
    """Write ``truth`` to ``directory/truth.json`` and its DataFrames to ``truth_<key>.csv``.

    See the module docstring for the format. Every file is written to a temporary file first
    and renamed into place only when all are complete, ``truth.json`` last, so a failure
    leaves the directory as it was. Files of an earlier truth that the new one does not name
    are left alone (:func:`read_truth` reads only the files ``truth.json`` names). Returns the
    paths written, ``truth.json`` first. Raises :class:`InputError` for a missing directory or
    a value the format does not store.

    >>> write_truth({"demand": {1, 2}}, ".")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: cannot write truth[demand]: a set is not stored (numbers, ...
    """
    d = Path(directory)
    if not isinstance(truth, Mapping):
        raise InputError(f"truth must be a dict, not {type(truth).__name__}")
    frames: dict[str, pd.DataFrame] = {}
    body = _encode(truth, (), frames)
    text = json.dumps({"format_version": TRUTH_FORMAT_VERSION, "truth": body}) + "\n"
    if not d.is_dir():
        raise InputError(f"output directory does not exist: {d}")
    written = [d / TRUTH_FILE, *(d / f for f in frames)]
    with contextlib.ExitStack() as stack:
        # Entered first, so renamed last: truth.json appears only after its CSV files.
        fj = cast(IO[str], stack.enter_context(atomic_write(d / TRUTH_FILE)))
        for file, df in frames.items():
            fh = cast(IO[str], stack.enter_context(atomic_write(d / file)))
            df.to_csv(fh, index=False, lineterminator="\n")
        fj.write(text)
    return written


class _Malformed(Exception):
    """A problem in truth.json; :func:`read_truth` adds the file name."""


def _decode_array(obj: dict[str, Any], where: str) -> np.ndarray[Any, Any]:
    try:
        dtype = np.dtype(obj["dtype"])
        shape = tuple(int(n) for n in obj["shape"])
        data = obj["data"]
    except (KeyError, TypeError, ValueError) as exc:
        raise _Malformed(f"{where}: an ndarray needs dtype, shape and data ({exc})") from None
    if dtype.kind not in _ARRAY_KINDS:
        raise _Malformed(f"{where}: array dtype {dtype} is not stored")
    try:
        arr = np.array(data, dtype=dtype)
        if arr.shape != shape and arr.size == 0 and math.prod(shape) == 0:
            arr = arr.reshape(shape)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _Malformed(f"{where}: array data do not fit dtype {dtype} ({exc})") from None
    if arr.shape != shape:
        raise _Malformed(f"{where}: array data have shape {arr.shape}, not {shape}")
    return arr


def _read_frame(obj: dict[str, Any], directory: Path, where: str) -> pd.DataFrame:
    file, given = obj.get("file"), obj.get("dtypes")
    if not (isinstance(file, str) and file == Path(file).name and file.endswith(".csv")):
        raise _Malformed(f"{where}: 'file' must name a .csv file beside truth.json, not {file!r}")
    if not (isinstance(given, dict) and given and all(isinstance(v, str) for v in given.values())):
        raise _Malformed(f"{where}: 'dtypes' must map each column to a dtype name")
    dtypes: dict[str, str] = given
    path = directory / file
    if not path.is_file():
        raise InputError(f"no such file: {path} (named by {directory / TRUTH_FILE}, {where})")
    try:
        kinds = {c: _frame_kind(pd.api.types.pandas_dtype(t)) for c, t in dtypes.items()}
    except TypeError as exc:
        raise _Malformed(f"{where}: unknown dtype ({exc})") from None
    if None in kinds.values():
        raise _Malformed(f"{where}: a column dtype is not stored ({dtypes})")
    try:
        # Floats are read as text and parsed by Python's float(), which is correctly rounded,
        # so every float written with repr comes back bit for bit (whatever pandas' parser).
        try:
            df = read_csv(
                path,
                dtype={c: (t if kinds[c] == "number" else str) for c, t in dtypes.items()},
                keep_default_na=False,
                na_values={c: [""] for c in dtypes if kinds[c] != "float"},
            )
        except InputError as exc:
            raise InputError(f"{path}: {exc}") from None
        if df.columns.tolist() != list(dtypes):
            raise InputError(
                f"{path}: columns {', '.join(map(str, df.columns))} are not the columns "
                f"{', '.join(dtypes)} that {TRUTH_FILE} names"
            )
        for c, t in dtypes.items():
            if kinds[c] == "float":
                values = [math.nan if v == "" else float(v) for v in df[c].tolist()]
                df[c] = pd.Series(values, index=df.index, dtype=pd.api.types.pandas_dtype(t))
            elif kinds[c] == "text" and str(df[c].dtype) != t:
                df[c] = df[c].astype(pd.api.types.pandas_dtype(t))
    except InputError:
        raise
    except (ValueError, TypeError, OSError) as exc:  # pandas' parser errors are ValueErrors
        first = first_line(exc)
        raise InputError(f"cannot read {path}: {first}") from None
    return df


def _decode(value: Any, where: str, directory: Path, top: bool) -> Any:
    if isinstance(value, list):
        return [_decode(v, where, directory, False) for v in value]
    if not isinstance(value, dict):
        return value
    tag = value.get(_TAG)
    if tag is None:
        return {k: _decode(v, f"{where}[{k}]", directory, False) for k, v in value.items()}
    if tag == "ndarray":
        return _decode_array(value, where)
    if tag == "tuple":
        items = value.get("items")
        if not isinstance(items, list):
            raise _Malformed(f"{where}: a tuple needs a list of items")
        return tuple(_decode(v, where, directory, False) for v in items)
    if tag == "csv":
        if not top:
            raise _Malformed(f"{where}: a CSV table is allowed only as a top-level value")
        return _read_frame(value, directory, where)
    raise _Malformed(f"{where}: unknown {_TAG} {tag!r} (known: ndarray, tuple, csv)")


def read_truth(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The ground truth that :func:`write_truth` wrote to ``directory``.

    Arrays come back as numpy arrays of their dtype and shape, tuples as tuples, DataFrames
    from their CSV files with their column dtypes, so the result equals what was written (see
    the module docstring for the exceptions). Raises :class:`InputError` for a missing
    ``truth.json`` or CSV file, a file that is not JSON, an unknown ``format_version`` or a
    malformed entry.

    >>> read_truth("/nonexistent")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: no such file: /nonexistent/truth.json
    """
    d = Path(directory)
    path = d / TRUTH_FILE
    doc = parse_json(read_input(path), f"ground truth {path}")
    if not isinstance(doc, dict) or "format_version" not in doc:
        raise InputError(f"malformed ground truth {path}: not an object with a format_version")
    version = doc["format_version"]
    if version != TRUTH_FORMAT_VERSION or isinstance(version, bool):
        raise InputError(
            f"{path}: format_version {version!r} is not supported (this interplace reads "
            f"{TRUTH_FORMAT_VERSION})"
        )
    body = doc.get("truth")
    if not isinstance(body, dict) or _TAG in body:
        raise InputError(f"malformed ground truth {path}: 'truth' must be an object")
    try:
        return {k: _decode(v, f"truth[{k}]", d, True) for k, v in body.items()}
    except _Malformed as exc:
        raise InputError(f"malformed ground truth {path}: {exc}") from None
