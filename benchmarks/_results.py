"""Writing a benchmark's results: JSON, atomically (a run cut short leaves no partial file);
and running a snippet against another checkout's ``src`` in a fresh process.

Imported by the scripts beside it (``python benchmarks/<name>.py`` puts this folder first on
``sys.path``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, cast

from interplace.errors import atomic_write


def save_json(results: Any, out: str | Path, indent: int = 1) -> str:
    """Write ``results`` as JSON to ``out`` through a temporary file renamed onto it;
    returns the text written."""
    text = json.dumps(results, indent=indent) + "\n"
    with atomic_write(Path(out)) as fh:
        cast(IO[str], fh).write(text)
    return text


def split_rows(path: Path, producer: str) -> list[dict[str, Any]]:
    """The ``splits`` rows (a non-empty list of objects) of the benchmark JSON at ``path``;
    exits with a one-line error on a file that is missing, not JSON, or has no such rows
    (``producer`` names the script whose JSON to give)."""
    from interplace.errors import InputError, read_json

    try:
        data = read_json(path, "benchmark results")
    except InputError as e:
        sys.exit(str(e))
    rows = data.get("splits") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        sys.exit(f"{path}: no 'splits' rows (give the JSON of {producer})")
    return rows


def report(rows: list[Any], summary: Any, out: str | Path | None, *, rows_key: str = "rows",
           summary_key: str = "summary") -> dict[str, Any]:
    """The end of a benchmark run: each row printed as a JSON line, then ``{rows_key: rows,
    summary_key: summary, "command": ...}`` saved to ``out`` (when given) and the summary
    printed; returns that dict."""
    for r in rows:
        print(json.dumps(r), flush=True)
    results = {rows_key: rows, summary_key: summary, "command": " ".join(sys.argv)}
    if out is not None:
        save_json(results, out)
    print(json.dumps(summary, indent=1))
    return results


def start_snippet(
    src: Path, code: str, argv: Sequence[str], cwd: str | Path, *, one_thread: bool = False
) -> subprocess.Popen[str]:
    """Start ``python -c code argv...`` in a fresh process that imports interplace from
    ``src`` (``PYTHONPATH``), in ``cwd``; with ``one_thread``, its BLAS libraries on one
    thread (two such processes on two cores otherwise stall each other). Read its result
    with :func:`snippet_result`."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    if one_thread:
        env.update({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    return subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
    )


def snippet_result(proc: subprocess.Popen[str], failed: str) -> dict[str, Any]:
    """The JSON object a :func:`start_snippet` process printed last, once it has exited;
    when it failed, exits with ``failed`` and the last line of its stderr."""
    out, err = proc.communicate()
    if proc.returncode != 0:
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{failed}: {last}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result
