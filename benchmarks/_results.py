"""Writing a benchmark's results: JSON, atomically (a run cut short leaves no partial file).

Imported by the scripts beside it (``python benchmarks/<name>.py`` puts this folder first on
``sys.path``).
"""

from __future__ import annotations

import json
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


def report(rows: list[Any], key: str, summary: Any, out: str | Path | None) -> dict[str, Any]:
    """The end of a benchmark run: each row printed as a JSON line, then ``{<rows or splits>:
    rows, key: summary, "command": ...}`` saved to ``out`` (when given) and its summary
    printed; returns that dict. ``key`` names the summary; the rows go under ``"rows"``
    unless ``key`` is ``"medians"`` (then ``"splits"``, as the older scripts wrote them)."""
    import sys

    for r in rows:
        print(json.dumps(r), flush=True)
    results = {"splits" if key == "medians" else "rows": rows, key: summary,
               "command": " ".join(sys.argv)}
    if out is not None:
        save_json(results, out)
    print(json.dumps(summary, indent=1))
    return results
