"""Read a counter file in any supported format into the validated long sample table.

:data:`FORMATS` is the registry, name -> :class:`Format` (its parse and sniff functions).
:func:`detect_format` asks each format's ``sniff`` in the registry's order and takes the first
that answers yes; :func:`ingest` reads a file, detects or checks the format, parses and
validates.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "dmon.txt"
>>> _ = p.write_text("# gpu   pwr  gtemp\\n# Idx     W      C\\n    0    43     35\\n")
>>> df = ingest(p, host="n1")
>>> df.attrs["format"], sorted(df["metric"])
('dmon', ['power_mw', 'temp_c'])
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from interplace.collectors.formats import dmon, nvsmi_query, perf_stat, prometheus
from interplace.collectors.table import validate_samples
from interplace.errors import InputError, is_real, plain_number, read_input

__all__ = ["FORMATS", "Format", "OptionError", "detect_format", "ingest"]


class OptionError(InputError):
    """An :class:`InputError` about one keyword option of :func:`ingest`: :attr:`option` is
    its name (``fields``, ``interval_s``) and :attr:`problem` the rest of the message, so that
    a caller with its own names for the options (``interplace ingest``: ``--fields``,
    ``--interval``) can say the same in its own words.

    >>> e = OptionError("interval_s", "does not apply to the perf-stat format")
    >>> str(e), e.option
    ('option interval_s does not apply to the perf-stat format', 'interval_s')
    """

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"option {option} {problem}")
        self.option = option
        self.problem = problem

    def __reduce__(self) -> tuple[type[OptionError], tuple[str, str]]:
        return type(self), (self.option, self.problem)


@dataclass(frozen=True)
class Format:
    """One input format: its parser, its sniffer and the keyword options its parser takes.

    >>> FORMATS["dmon"].options
    frozenset({'interval_s'})
    """

    name: str
    description: str
    parse: Callable[..., pd.DataFrame]
    sniff: Callable[[str], bool]
    options: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.name or not callable(self.parse) or not callable(self.sniff):
            raise ValueError(f"bad format registration {self.name!r}")


#: The supported formats, in detection order.
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("prometheus", "dcgm-exporter Prometheus text exposition",
               prometheus.parse, prometheus.sniff, frozenset({"interval_s"})),
        Format("dmon", "nvidia-smi dmon", dmon.parse, dmon.sniff, frozenset({"interval_s"})),
        Format("perf-stat", "perf stat -x, -I <ms>", perf_stat.parse, perf_stat.sniff),
        Format("nvsmi-query", "nvidia-smi --query-gpu=... --format=csv",
               nvsmi_query.parse, nvsmi_query.sniff, frozenset({"fields"})),
    )
}  # fmt: skip


def detect_format(text: str, what: str = "the input") -> str:
    """The name of the first format in :data:`FORMATS` whose sniffer recognises ``text``.

    ``what`` names the input in the error message. Header-less ``nvidia-smi --query-gpu``
    output is never recognised: name the format and pass ``fields``; the error says so when
    the text looks like it (``interplace ingest --format nvsmi-query --fields ...``).

    >>> detect_format("1.001,123,,cycles,1000,100.00,,\\n")
    'perf-stat'
    >>> detect_format("hello world\\n", "x.txt")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: cannot recognise the format of x.txt: expected one of ...
    >>> detect_format("2024/05/01 12:00:00.000, 0, 45\\n")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: ...; header-less nvidia-smi --query-gpu CSV? give --format ...
    >>> detect_format("# gpu  pid  type  sm  mem  command\\n")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: ...; this is nvidia-smi pmon output (per process), which ...
    """
    for name, fmt in FORMATS.items():
        if fmt.sniff(text):
            return name
    hint = ""
    if dmon.looks_pmon(text):
        hint = (
            "; this is nvidia-smi pmon output (per process), which interplace does not read: "
            "record nvidia-smi dmon (per GPU) instead"
        )
    elif nvsmi_query.looks_headerless(text):
        hint = (
            "; header-less nvidia-smi --query-gpu CSV? give --format nvsmi-query --fields "
            "<the --query-gpu list> (in Python: format='nvsmi-query', fields=[...])"
        )
    raise InputError(
        f"cannot recognise the format of {what}: expected one of {', '.join(FORMATS)} "
        f"(with a header line){hint}"
    )


def _read_text(p: Path) -> str:
    try:
        text = read_input(p).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    if not text.strip():
        raise InputError(f"{p}: file is empty")
    return text


def ingest(
    path: str | os.PathLike[str],
    format: str = "auto",
    host: str | None = None,
    *,
    fields: Sequence[str] | None = None,
    interval_s: float | None = None,
) -> pd.DataFrame:
    """Read the counter file ``path`` into the validated long sample table.

    ``format`` is ``"auto"`` (detect) or a name in :data:`FORMATS`. ``host`` names the machine
    (default: the parser's, ``"localhost"``; a Prometheus ``Hostname`` label wins over it).
    ``fields`` (``nvsmi-query`` only) names the columns of header-less output; ``interval_s``
    (``dmon``, ``prometheus``) is the sampling interval used when the file has no time stamps.
    The result's ``attrs`` hold ``format``, ``source`` (the path) and ``unsupported`` (metrics
    the file marked unavailable). Any problem raises :class:`~interplace.errors.InputError`
    whose message starts with the path; so does a file that yields no samples at all. A bad
    ``fields`` or ``interval_s`` (one the format does not take, or an interval that is not a
    positive number) raises :class:`OptionError` instead, before the file is parsed.

    >>> ingest("counters.txt", interval_s=-1.0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.collectors.ingest.OptionError: option interval_s must be a positive number ...
    """
    p = Path(path)
    if format != "auto" and format not in FORMATS:
        raise InputError(f"unknown format {format!r} (expected auto, {', '.join(FORMATS)})")
    seconds = plain_number(interval_s)  # a numpy float too
    if seconds is not None and not (is_real(seconds) and seconds > 0):
        got = f"{seconds:g}" if isinstance(seconds, float) else repr(seconds)
        raise OptionError("interval_s", f"must be a positive number of seconds, got {got}")
    text = _read_text(p)
    name = detect_format(text, str(p)) if format == "auto" else format
    fmt = FORMATS[name]
    options: dict[str, Any] = {}
    for opt, val in (("fields", fields), ("interval_s", interval_s)):
        if val is None:
            continue
        if opt not in fmt.options:
            raise OptionError(opt, f"does not apply to the {name} format")
        options[opt] = val
    if host is not None:
        if not host:
            raise InputError("host name is empty")
        options["host"] = host
    try:
        df = fmt.parse(text, **options)
    except InputError as e:
        raise InputError(f"{p}: {e}") from e
    unsupported = [str(m) for m in df.attrs.get("unsupported", [])]
    if df.empty:
        unsup = f" (unavailable: {', '.join(unsupported)})" if unsupported else ""
        raise InputError(f"{p}: no samples in this {name} file{unsup}")
    out = validate_samples(df, str(p), ranges=True)
    out.attrs = {**df.attrs, "format": name, "source": str(p), "unsupported": unsupported}
    return out
