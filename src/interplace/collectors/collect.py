"""Run a command and sample counters while it runs: the library side of ``interplace collect``.

:func:`collect` starts ``cmd`` (inheriting stdin, stdout and stderr), samples the backends with
:func:`~interplace.collectors.sampler.sample` until the command exits, and returns its exit
code with the sampling summary. With ``duration_s`` sampling also stops when that much time
has passed; a command still running then is sent ``SIGTERM`` (``SIGKILL`` after
``term_grace_s`` seconds) and its exit code is what :class:`subprocess.Popen` reports (the
negative signal number on POSIX). With no command, sampling runs for ``duration_s``. If
sampling fails or is interrupted, the command is stopped the same way before the exception
propagates (and the ``.partial`` file of :mod:`~interplace.collectors.sampler` is kept).

By default the backends are :class:`~interplace.collectors.nvml.PynvmlSampler` when NVML can be
initialised, plus :class:`~interplace.collectors.host.HostSampler`; without NVML only host
counters are sampled, and :attr:`CollectResult.note` says why.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from interplace.collectors.host import HostSampler
from interplace.collectors.nvml import GpuCounterBackend, PynvmlSampler
from interplace.collectors.sampler import SampleSummary, sample
from interplace.errors import InputError

__all__ = ["CollectResult", "collect"]


@dataclass(frozen=True)
class CollectResult:
    """What :func:`collect` did.

    ``returncode`` of the command (``None`` when there was none), ``summary`` of the sampling,
    ``backends``: the names of the backend classes sampled, ``stopped``: whether the command was
    still running when sampling ended and was stopped, and a one-line ``note`` (empty, or why
    GPU counters are missing).
    """

    returncode: int | None
    summary: SampleSummary
    backends: tuple[str, ...]
    stopped: bool = False
    note: str = ""


def _stop(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def collect(
    cmd: Sequence[str] | None,
    out: str | os.PathLike[str],
    interval_s: float = 0.1,
    duration_s: float | None = None,
    backends: Sequence[GpuCounterBackend] | None = None,
    progress: bool = False,
    *,
    host: str | None = None,
    run_id: str | None = None,
    chunk_rows: int = 50_000,
    term_grace_s: float = 5.0,
) -> CollectResult:
    """Run ``cmd`` and sample ``backends`` every ``interval_s`` seconds into ``out``.

    Raises :class:`InputError` ``"command not found: X"`` if ``cmd[0]`` cannot be found,
    ``"command is not executable: X"`` if it cannot be run, and an :class:`InputError` when
    there is neither a command nor a duration (or the command is empty).

    >>> import sys, tempfile, pathlib
    >>> from interplace.collectors.host import HostSampler
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "s.parquet"
    >>> r = collect([sys.executable, "-c", "raise SystemExit(3)"], out, backends=[HostSampler()])
    >>> r.returncode, r.backends, out.exists()
    (3, ('HostSampler',), True)
    """
    if cmd is not None and len(cmd) == 0:
        raise InputError("the command to run is empty")
    if cmd is None and duration_s is None:
        raise InputError("nothing to wait for: give a command to run or a duration")
    with contextlib.ExitStack() as stack:
        note = ""
        if backends is None:
            chosen: list[GpuCounterBackend] = []
            try:
                chosen.append(stack.enter_context(PynvmlSampler()))
            except InputError as exc:
                note = f"{exc}; sampling host counters only"
            chosen.append(HostSampler())
            backends = chosen
        names = tuple(type(b).__name__ for b in backends)
        proc: subprocess.Popen[bytes] | None = None
        stop = threading.Event()
        if cmd is not None:
            try:
                proc = subprocess.Popen(list(cmd))
            except FileNotFoundError:
                raise InputError(f"command not found: {cmd[0]}") from None
            except PermissionError:
                raise InputError(f"command is not executable: {cmd[0]}") from None
            except OSError as exc:
                raise InputError(f"cannot run {cmd[0]}: {exc.strerror or exc}") from None
            watched = proc

            def watch() -> None:
                watched.wait()
                stop.set()

            threading.Thread(target=watch, name="interplace-collect-wait", daemon=True).start()
        try:
            summary = sample(backends, interval_s, duration_s, stop, out=out,
                             chunk_rows=chunk_rows, sleep=stop.wait, host=host, run_id=run_id,
                             progress=progress)
        finally:
            if proc is not None:
                still_running = proc.poll() is None
                _stop(proc, term_grace_s)
        if proc is None:
            return CollectResult(None, summary, names, note=note)
        return CollectResult(proc.returncode, summary, names, stopped=still_running, note=note)
