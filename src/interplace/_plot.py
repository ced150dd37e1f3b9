"""What every figure interplace draws shares: text drawn as written.

Names in a figure come from the user (a job, a data set's folder, a NIC label, a file name);
matplotlib reads text between two ``$`` as math and fails on what it cannot parse
(``ParseFatalException: Unknown symbol``), so :func:`plain_text` turns that reading off.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["plain_text"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def plain_text(draw: Callable[_P, _R]) -> Callable[_P, _R]:
    """``draw`` run with matplotlib's math text off (``text.parse_math``), so that every
    text it places is drawn as written, ``$`` included.

    >>> from matplotlib.figure import Figure
    >>> @plain_text
    ... def title() -> bool:
    ...     return Figure().add_subplot().set_title("a$\\\\foo$b").get_parse_math()
    >>> title()
    False
    """

    @functools.wraps(draw)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return wrapper
