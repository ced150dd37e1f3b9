"""Helpers shared by the format parsers: line splitting and building the validated long table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from interplace.collectors.table import validate_samples


def lines(text: str) -> list[tuple[int, str]]:
    """Non-blank lines of ``text`` with 1-based line numbers, stripped (CRLF and BOM too).

    >>> lines("\\ufeffa \\r\\n\\r\\n b\\n")
    [(1, 'a'), (3, 'b')]
    """
    text = text.removeprefix("\ufeff")
    return [(i, ln.strip()) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]


def samples_frame(
    what: str,
    t_s: Sequence[float] | np.ndarray[tuple[int], np.dtype[np.float64]],
    host: Sequence[str] | str,
    device: Sequence[str],
    metric: Sequence[str],
    value: Sequence[float],
    *,
    scale: Sequence[float] | None = None,
    unsupported: Iterable[str] = (),
) -> pd.DataFrame:
    """The validated long table from parallel columns; ``attrs["unsupported"]`` sorted, unique.

    >>> df = samples_frame("x", [0.0], "h", ["0"], ["temp_c"], [40.0], unsupported=["b", "a"])
    >>> df.columns.tolist(), df.attrs["unsupported"]
    (['t_s', 'host', 'device', 'metric', 'value'], ['a', 'b'])
    """
    n = len(device)
    cols: dict[str, object] = {
        "t_s": np.asarray(t_s, dtype=np.float64),
        "host": pd.Series([host] * n if isinstance(host, str) else list(host), dtype=object),
        "device": pd.Series(list(device), dtype=object),
        "metric": pd.Series(list(metric), dtype=object),
        "value": np.asarray(value, dtype=np.float64),
    }
    if scale is not None:
        cols["scale"] = np.asarray(scale, dtype=np.float64)
    df = pd.DataFrame(cols)
    df.attrs["unsupported"] = sorted(set(unsupported))
    return validate_samples(df, what, ranges=True)


def parse_float(token: str) -> float | None:
    """``token`` as a float, or None when it is not a number.

    >>> parse_float("1.5e3"), parse_float("P0")
    (1500.0, None)
    """
    try:
        return float(token)
    except ValueError:
        return None
