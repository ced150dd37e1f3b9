"""Natural sort order of device and job ids; every layer may use it, like ``interplace.errors``."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["natural_key"]

_DIGITS = re.compile(r"(\d+)")


def natural_key(s: str) -> tuple[Any, ...]:
    """Sort key that orders ``"2" < "10"`` and ``"n2:7" < "n10:0"``.

    >>> sorted(["10", "2", "n1:0", "n0:3"], key=natural_key)
    ['2', '10', 'n0:3', 'n1:0']
    """
    parts = _DIGITS.split(s)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p != "")
