"""Sample counter backends at a fixed interval into a long table on disk, in bounded memory.

:func:`sample` reads every device of every backend once per tick, ticks falling at
``t0 + k * interval_s`` on a monotonic clock (a tick missed because reads were slow is
skipped, not made up), and writes one row per reading to ``out`` (``.parquet`` or ``.csv``,
the columns of :mod:`interplace.collectors.table`; ``t_s`` is seconds since the first tick,
``run_id`` only when given).

Crash safety: rows are held in memory only up to ``chunk_rows``, then written to
``<out>.partial`` as one chunk:

- ``.csv`` output: ``<out>.partial`` is a CSV sample table (header first) that grows by one
  ``write`` of whole lines per chunk;
- ``.parquet`` output: ``<out>.partial`` is a directory of complete Parquet files
  ``part-00000.parquet``, ``part-00001.parquet``, ..., one per chunk, each written beside its
  name and renamed onto it, so a part is there whole or not at all.

A clean run then writes ``out`` (CSV: renames ``<out>.partial`` onto it; Parquet: copies the
parts in order into one file, one row group per chunk, written atomically) and removes
``<out>.partial``. If sampling raises (a backend error, ``KeyboardInterrupt``), the rows still
in memory are written as a last chunk, ``<out>.partial`` is KEPT and ``out`` is not created (an
existing ``out`` is left untouched). A process killed outright (``SIGKILL``, power loss) loses
at most the rows of one chunk, those not yet written. Either way :func:`read_partial` reads what
``<out>.partial`` holds as a sample table (it drops a CSV line cut short by a power loss). An
old ``<out>.partial`` is removed when sampling into ``out`` starts.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import re
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, cast

import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from interplace._sorting import natural_key
from interplace.collectors.nvml import DeviceLost, EndOfRecording, GpuCounterBackend
from interplace.collectors.table import (
    SAMPLE_COLUMNS,
    _extension,
    _read_csv,
    _read_parquet,
    validate_samples,
)
from interplace.errors import InputError, atomic_write, check_output_file, is_int

__all__ = [
    "SampleSummary",
    "check_arguments",
    "check_output_path",
    "partial_path",
    "read_partial",
    "sample",
    "unsupported_notes",
]

_Row = tuple[float, str, str, str, float]
_PART = re.compile(r"^part-(\d+)\.parquet$")


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
    """The file (``.csv``) or directory (``.parquet``) :func:`sample` writes before ``out``.

    >>> partial_path("runs/samples.parquet").as_posix()
    'runs/samples.parquet.partial'
    """
    p = Path(out)
    return p.with_name(p.name + ".partial")


def check_output_path(out: str | os.PathLike[str]) -> Path:
    """``out`` as a path, or an :class:`InputError` if a sample table cannot be written there.

    Checks that the directory exists and can be written, that ``out`` is not a directory,
    and its extension (``.csv`` or ``.parquet``); called before anything is started.

    >>> check_output_path("/nonexistent-dir/s.csv")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: output directory does not exist: /nonexistent-dir
    >>> import tempfile
    >>> check_output_path(Path(tempfile.mkdtemp()) / "s.txt")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: .../s.txt: unknown sample-table extension '.txt' (expected ...)
    """
    p = check_output_file(out)  # first: a directory has no extension to complain about
    _extension(p)
    return p


def unsupported_notes(pairs: Iterable[tuple[str, str]]) -> list[str]:
    """One line per device naming the metrics it does not report, devices in natural order.

    ``pairs`` are ``(device, metric)`` as in :attr:`SampleSummary.unsupported`; the device
    ``"host"`` is named as such, any other as a GPU.

    >>> unsupported_notes({("10", "temp_c"), ("2", "power_mw"), ("2", "pcie_rx_bytes_total"),
    ...                    ("host", "host_cpu_busy_pct")})  # doctest: +NORMALIZE_WHITESPACE
    ['GPU 2 does not report pcie_rx_bytes_total, power_mw', 'GPU 10 does not report temp_c',
     'host does not report host_cpu_busy_pct']
    """
    by_device: dict[str, set[str]] = {}
    for device, metric in pairs:
        by_device.setdefault(device, set()).add(metric)
    order = sorted(by_device, key=lambda d: (d == "host", natural_key(d)))
    return [f"{'host' if d == 'host' else f'GPU {d}'} does not report "
            f"{', '.join(sorted(by_device[d]))}" for d in order]


def _parts(directory: Path) -> list[Path]:
    """The ``part-N.parquet`` files of a partial directory, by ``N``."""
    found = [(int(m.group(1)), f) for f in directory.iterdir() if (m := _PART.match(f.name))]
    return [f for _, f in sorted(found)]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def read_partial(out: str | os.PathLike[str]) -> pd.DataFrame:
    """The samples a failed or killed :func:`sample` into ``out`` left in ``<out>.partial``.

    Validated as :func:`~interplace.collectors.table.read_samples` does; a last CSV line
    without its newline (cut by a power loss) is dropped. Raises :class:`InputError` when
    there is no partial file.

    >>> read_partial("/nonexistent-dir/s.csv")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: no partial samples for /nonexistent-dir/s.csv: ... does not exist
    """
    p = Path(out)
    ext = p.suffix.lower()
    partial = partial_path(p)
    if not partial.exists():
        raise InputError(f"no partial samples for {p}: {partial} does not exist")
    what = str(partial)
    if ext == ".parquet" and partial.is_dir():
        frames = [_read_parquet(f, str(f)) for f in _parts(partial)]
        if not frames:
            return validate_samples(pd.DataFrame({c: [] for c in SAMPLE_COLUMNS}), what)
        return validate_samples(pd.concat(frames, ignore_index=True), what)
    if ext != ".csv" or not partial.is_file():
        raise InputError(f"{what}: not a partial sample table of {p}")
    data = partial.read_bytes()
    data = data[: data.rfind(b"\n") + 1]
    return validate_samples(_read_csv(io.BytesIO(data), what), what)


class _ChunkWriter:
    """Writes chunks of rows to ``<out>.partial``; :meth:`commit` turns them into ``out``."""

    def __init__(self, out: Path, run_id: str | None) -> None:
        self.out = check_output_path(out)
        self.partial = partial_path(out)
        self.run_id = run_id
        self.chunks = 0
        self.csv = out.suffix.lower() == ".csv"
        self._fd: int | None = None
        fields = [("t_s", pa.float64()), ("host", pa.string()), ("device", pa.string()),
                  ("metric", pa.string()), ("value", pa.float64())]
        if run_id is not None:
            fields.append(("run_id", pa.string()))
        self._schema = pa.schema(fields)
        try:
            _remove(self.partial)
            if self.csv:
                self._fd = os.open(self.partial,
                                   os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o666)
                self._append(",".join(self._schema.names) + "\n")
            else:
                self.partial.mkdir()
        except OSError as exc:
            raise InputError(f"cannot write {self.partial}: {exc.strerror or exc}") from None

    def _append(self, text: str) -> None:
        """Append ``text`` to the CSV partial file, all of it (one ``write`` unless short)."""
        assert self._fd is not None
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(self._fd, data):]

    def write(self, rows: list[_Row]) -> None:
        if not rows:
            return
        if self.csv:
            buf = io.StringIO()
            extra = () if self.run_id is None else (self.run_id,)
            csv.writer(buf, lineterminator="\n").writerows(
                (*(repr(x) if isinstance(x, float) else x for x in r), *extra) for r in rows)
            self._append(buf.getvalue())
        else:
            cols: dict[str, list[Any]] = {n: [r[i] for r in rows]
                                          for i, n in enumerate(self._schema.names[:5])}
            if self.run_id is not None:
                cols["run_id"] = [self.run_id] * len(rows)
            name = f"part-{self.chunks:05d}.parquet"
            tmp = self.partial / f".{name}.tmp"
            pq.write_table(pa.table(cols, schema=self._schema), tmp)
            os.replace(tmp, self.partial / name)
        self.chunks += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def commit(self) -> None:
        self.close()
        if self.csv:
            os.replace(self.partial, self.out)
            return
        with atomic_write(self.out, "wb") as fh, pq.ParquetWriter(cast(IO[bytes], fh),
                                                                  self._schema) as w:
            for part in _parts(self.partial):
                w.write_table(pq.read_table(part, schema=self._schema))
        shutil.rmtree(self.partial)


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


def check_arguments(interval_s: float, duration_s: float | None, chunk_rows: int,
                    host: str | None = None, run_id: str | None = None) -> None:
    """Raise :class:`InputError` for arguments :func:`sample` would refuse (but ``out``).

    >>> check_arguments(0.1, None, 100, run_id="")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: the run id must not be empty
    """
    if isinstance(interval_s, bool) or not (math.isfinite(interval_s) and interval_s > 0):
        raise InputError(f"the sampling interval must be a positive number of seconds, "
                         f"got {interval_s!r}")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise InputError(f"the duration must be a positive number of seconds, got {duration_s!r}")
    if not is_int(chunk_rows, 1):
        raise InputError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    if host is not None and not host:
        raise InputError("the host name must not be empty")
    if run_id is not None and not str(run_id).strip():
        raise InputError("the run id must not be empty")


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
    check_arguments(interval_s, duration_s, chunk_rows, host, run_id)
    hostname = socket.gethostname() if host is None else host
    if not hostname:
        raise InputError("the host name must not be empty")
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
