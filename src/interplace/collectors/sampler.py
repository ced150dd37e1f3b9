"""Sample counter backends at a fixed interval into a long table on disk, in bounded memory.

:func:`sample` reads every device of every backend once per tick, ticks falling at
``t0 + k * interval_s`` on a monotonic clock (a tick missed because reads were slow is
skipped, not made up), and writes one row per reading to ``out`` (``.parquet`` or ``.csv``,
the columns of :mod:`interplace.collectors.table`; ``t_s`` is seconds since the first tick,
``run_id`` only when given).

Crash safety: rows are held in memory only up to ``chunk_rows``, then appended to
``<out>.partial`` (a Parquet row group, or CSV lines). A clean run renames ``<out>.partial`` onto
``out`` at the end and never leaves it behind. If sampling raises (a backend error,
``KeyboardInterrupt``), the rows still in memory are appended, the file is closed and
``<out>.partial`` is KEPT: it is a readable sample table of everything sampled so far, and ``out``
is not created (an existing ``out`` is left untouched). Only a process killed outright
(``SIGKILL``, power loss) can lose more: a CSV ``.partial`` then still holds every flushed chunk,
a Parquet one lacks its footer and cannot be read. An old ``<out>.partial`` is overwritten.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from interplace.collectors.nvml import DeviceLost, EndOfRecording, GpuCounterBackend
from interplace.errors import InputError

__all__ = ["SampleSummary", "partial_path", "sample"]

_Row = tuple[float, str, str, str, float]


@dataclass(frozen=True)
class SampleSummary:
    """What :func:`sample` did.

    ``rows`` written, ``samples`` (ticks that gave rows or found every device lost) taken,
    ``seconds`` on the clock from the first tick to the end of sampling,
    and the ``(device, metric)`` pairs the backends found ``unsupported``.

    >>> SampleSummary(rows=4, samples=2, seconds=0.2, unsupported=frozenset()).rows
    4
    """

    rows: int
    samples: int
    seconds: float
    unsupported: frozenset[tuple[str, str]]

    def __post_init__(self) -> None:
        if self.rows < 0 or self.samples < 0 or not self.seconds >= 0:
            raise InputError("a sample summary needs non-negative rows, samples and seconds")


def partial_path(out: str | os.PathLike[str]) -> Path:
    """The file :func:`sample` writes to before renaming it onto ``out``.

    >>> partial_path("runs/samples.parquet").as_posix()
    'runs/samples.parquet.partial'
    """
    p = Path(out)
    return p.with_name(p.name + ".partial")


class _ChunkWriter:
    """Appends chunks of rows to a ``.partial`` file; :meth:`commit` renames it onto ``out``."""

    def __init__(self, out: Path, run_id: str | None) -> None:
        ext = out.suffix.lower()
        if ext not in (".csv", ".parquet"):
            raise InputError(f"{out}: unknown sample-table extension {ext or '(none)'!r} "
                             f"(expected .csv or .parquet)")
        if not out.parent.exists():
            raise InputError(f"output directory does not exist: {out.parent}")
        self.out = out
        self.partial = partial_path(out)
        self.run_id = run_id
        self.row_groups = 0
        self._csv: IO[str] | None = None
        self._csv_writer: Any = None
        self._pq: pq.ParquetWriter | None = None
        fields = [("t_s", pa.float64()), ("host", pa.string()), ("device", pa.string()),
                  ("metric", pa.string()), ("value", pa.float64())]
        if run_id is not None:
            fields.append(("run_id", pa.string()))
        self._schema = pa.schema(fields)
        try:
            if ext == ".csv":
                self._csv = open(self.partial, "w", newline="", encoding="utf-8")  # noqa: SIM115
                self._csv_writer = csv.writer(self._csv, lineterminator="\n")
                self._csv_writer.writerow(self._schema.names)
                self._csv.flush()
            else:
                self._pq = pq.ParquetWriter(self.partial, self._schema)
        except OSError as exc:
            raise InputError(f"cannot write {self.partial}: {exc.strerror or exc}") from None

    def write(self, rows: list[_Row]) -> None:
        if not rows:
            return
        if self._csv is not None:
            extra = () if self.run_id is None else (self.run_id,)
            self._csv_writer.writerows((*(repr(x) if isinstance(x, float) else x for x in r),
                                        *extra) for r in rows)
            self._csv.flush()
        elif self._pq is not None:
            cols: dict[str, list[Any]] = {n: [r[i] for r in rows]
                                          for i, n in enumerate(self._schema.names[:5])}
            if self.run_id is not None:
                cols["run_id"] = [self.run_id] * len(rows)
            self._pq.write_table(pa.table(cols, schema=self._schema))
        self.row_groups += 1

    def close(self) -> None:
        if self._csv is not None:
            self._csv.close()
            self._csv = None
        if self._pq is not None:
            self._pq.close()
            self._pq = None

    def commit(self) -> None:
        self.close()
        os.replace(self.partial, self.out)


class _Progress:
    """A tqdm bar on stderr, or nothing."""

    def __init__(self, enabled: bool, duration_s: float | None, interval_s: float) -> None:
        self._bar: Any = None
        if enabled:
            from tqdm import tqdm

            total = None if duration_s is None else math.ceil(duration_s / interval_s)
            self._bar = tqdm(total=total, unit="sample", file=sys.stderr, desc="sampling")

    def update(self, rows: int) -> None:
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(rows=rows, refresh=False)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.close()


def _check(interval_s: float, duration_s: float | None, chunk_rows: int) -> None:
    if isinstance(interval_s, bool) or not (math.isfinite(interval_s) and interval_s > 0):
        raise InputError(f"the sampling interval must be a positive number of seconds, "
                         f"got {interval_s!r}")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise InputError(f"the duration must be a positive number of seconds, got {duration_s!r}")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise InputError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")


def sample(
    backends: Sequence[GpuCounterBackend],
    interval_s: float = 0.1,
    duration_s: float | None = None,
    stop: threading.Event | None = None,
    *,
    out: str | os.PathLike[str],
    chunk_rows: int = 50_000,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
    host: str | None = None,
    run_id: str | None = None,
    progress: bool = False,
    on_flush: Callable[[int], object] | None = None,
) -> SampleSummary:
    """Sample ``backends`` every ``interval_s`` seconds into the sample table ``out``.

    Sampling stops at the first of: ``duration_s`` elapsed (ticks at ``t_s < duration_s``),
    ``stop`` set (checked before each tick), a backend raising
    :class:`~interplace.collectors.nvml.EndOfRecording`, or an exception (then see the module
    docstring: ``<out>.partial`` is kept and the exception propagates). With neither
    ``duration_s`` nor ``stop`` a live backend samples until interrupted. A device raising
    :class:`~interplace.collectors.nvml.DeviceLost` is skipped for that tick; non-finite values
    are left out. ``host`` defaults to ``socket.gethostname()``. ``clock`` (monotonic seconds)
    and ``sleep`` are injectable; ``on_flush(n)`` is called with the size of each chunk written.
    A tqdm bar goes to stderr when ``progress`` is true.

    >>> import tempfile, pathlib
    >>> from interplace.collectors.nvml import ReplayGpuBackend
    >>> from interplace.collectors.table import read_samples
    >>> gpus = ReplayGpuBackend({"devices": [[{"temp_c": 40}, {"temp_c": 41}, {"temp_c": 43}]]})
    >>> t = [0.0]
    >>> def sleep(s): t[0] += s
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "s.csv"
    >>> s = sample([gpus], 0.5, out=out, clock=lambda: t[0], sleep=sleep, host="n1")
    >>> s.rows, s.samples, s.seconds
    (3, 3, 1.5)
    >>> read_samples(out)[["t_s", "value"]].values.tolist()
    [[0.0, 40.0], [0.5, 41.0], [1.0, 43.0]]
    """
    _check(interval_s, duration_s, chunk_rows)
    hostname = socket.gethostname() if host is None else host
    if not hostname:
        raise InputError("the host name must not be empty")
    if run_id is not None and not run_id:
        raise InputError("the run id must not be empty")
    counts = [b.device_count() for b in backends]
    ids = [[b.device_id(i) for i in range(n)] for b, n in zip(backends, counts, strict=True)]
    writer = _ChunkWriter(Path(out), run_id)
    buffer: list[_Row] = []
    rows = samples = 0
    t0 = clock()

    def flush() -> None:
        if buffer:
            writer.write(buffer)
            if on_flush is not None:
                on_flush(len(buffer))
            buffer.clear()

    try:
        with _Progress(progress, duration_s, interval_s) as bar:
            k = 0
            done = False
            while not done:
                if stop is not None and stop.is_set():
                    break
                t = clock() - t0
                if duration_s is not None and t >= duration_s:
                    break
                tick_rows = 0
                for b, dev_ids in zip(backends, ids, strict=True):
                    for i, dev in enumerate(dev_ids):
                        try:
                            reading = b.read(i)
                        except DeviceLost:
                            continue
                        except EndOfRecording:
                            done = True
                            continue
                        for metric, value in reading.items():
                            v = float(value)
                            if not math.isfinite(v):
                                continue
                            buffer.append((t, hostname, dev, metric, v))
                            tick_rows += 1
                            if len(buffer) >= chunk_rows:
                                flush()
                rows += tick_rows
                if done and tick_rows == 0:
                    break
                samples += 1
                bar.update(rows)
                if done:
                    break
                k += 1
                now = clock()
                if t0 + k * interval_s <= now:  # reads overran: skip the missed ticks
                    k = math.floor((now - t0) / interval_s) + 1
                if duration_s is not None and k * interval_s >= duration_s:
                    break
                sleep(t0 + k * interval_s - now)
            seconds = max(clock() - t0, 0.0)
        flush()
    except BaseException:
        with contextlib.suppress(Exception):
            flush()
        with contextlib.suppress(Exception):
            writer.close()
        raise
    writer.commit()
    unsupported = frozenset().union(*(b.unsupported for b in backends))
    return SampleSummary(rows=rows, samples=samples, seconds=seconds, unsupported=unsupported)
