"""Writing a benchmark's results: JSON, atomically (a run cut short leaves no partial file).

Imported by the scripts beside it (``python benchmarks/<name>.py`` puts this folder first on
``sys.path``).
"""

from __future__ import annotations

import json
import sys
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
