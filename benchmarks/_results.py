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
