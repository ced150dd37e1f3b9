"""Run a command and sample counters while it runs: the library side of ``interplace collect``.

:func:`collect` checks ``out`` and the sampling arguments, then starts ``cmd`` (inheriting
stdin, stdout and stderr), samples the backends with
:func:`~interplace.collectors.sampler.sample` until the command exits, and returns its exit
code with the sampling summary. With ``duration_s`` sampling also stops when that much time
has passed; a command still running then is sent ``SIGTERM`` (``SIGKILL`` after
``term_grace_s`` seconds) and its exit code is what :class:`subprocess.Popen` reports (the
negative signal number on POSIX). With no command, sampling runs for ``duration_s``.

Signals (when called from the main thread; elsewhere the handlers are left alone):

- the first ``SIGTERM`` sent to this process ends sampling as if the command had exited: the
  command is stopped as above, ``out`` is written with everything sampled so far and the
  result says :attr:`CollectResult.terminated`;
- a second ``SIGTERM`` (sampling stuck, say) kills the command and, while sampling has not
  returned, raises :class:`Terminated` where the program is, as ``KeyboardInterrupt`` does for
  ``SIGINT``: the command is stopped, ``out`` is not written and ``<out>.partial`` keeps what
  was sampled (:func:`~interplace.collectors.sampler.read_partial` reads it; raised during
  set-up, before sampling started, there is no ``.partial``). Once sampling has returned,
  ``out`` is written and the result stands: a further ``SIGTERM`` (while :func:`collect` waits
  for the command to exit, say) only kills the command, and :func:`collect` returns.

The previous ``SIGTERM`` handler is restored before :func:`collect` returns or raises. If
sampling fails or is interrupted, the command is stopped before the exception propagates.

By default the backends are :class:`~interplace.collectors.nvml.PynvmlSampler` when NVML can be
initialised, plus :class:`~interplace.collectors.host.HostSampler`; without NVML only host
counters are sampled, and :attr:`CollectResult.note` says why.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType

from interplace.collectors.host import HostSampler
from interplace.collectors.nvml import GpuCounterBackend, PynvmlSampler
from interplace.collectors.sampler import (
    SampleSummary,
    check_arguments,
    check_output_path,
    sample,
)
from interplace.errors import InputError

__all__ = ["CollectResult", "Terminated", "collect"]


class Terminated(BaseException):
    """A second ``SIGTERM`` arrived while :func:`collect` was still running.

    Like ``KeyboardInterrupt`` it derives from ``BaseException``, so that no ``except
    Exception`` on the way swallows it.
    """


@dataclass(frozen=True)
class CollectResult:
    """What :func:`collect` did.

    ``returncode`` of the command (``None`` when there was none), ``summary`` of the sampling,
    ``backends``: the names of the backend classes sampled, ``stopped``: whether the command was
    still running when sampling ended and was stopped, a one-line ``note`` (empty, or why
    GPU counters are missing), and ``terminated``: whether a ``SIGTERM`` ended sampling.
    """

    returncode: int | None
    summary: SampleSummary
    backends: tuple[str, ...]
    stopped: bool = False
    note: str = ""
    terminated: bool = False


def _stop(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _SigtermGuard:
    """While entered (in the main thread): SIGTERM sets ``stop``; a second one kills ``proc``
    and raises, unless ``sampled`` (the output is written: nothing is left to interrupt)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.count = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.sampled = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            if self.proc is not None and self.proc.poll() is None:
                with contextlib.suppress(OSError):
                    self.proc.kill()
            if not self.sampled:
                raise Terminated("terminated by a second SIGTERM")
            return
        # Event.set() takes the event's lock, which this (main) thread may hold right now
        # inside Event.wait(): setting it from another thread cannot deadlock.
        threading.Thread(target=self.stop.set, name="interplace-sigterm", daemon=True).start()

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGTERM, self._handle)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


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

    Everything :func:`~interplace.collectors.sampler.sample` would refuse (``out``'s extension
    or directory, the interval...) is checked before ``cmd`` starts. Raises
    :class:`InputError` ``"command not found: X"`` if ``cmd[0]`` cannot be found,
    ``"command is not executable: X"`` if it cannot be run, and an :class:`InputError` when
    there is neither a command nor a duration (or the command is empty). See the module
    docstring for ``SIGTERM``.

    >>> import sys, tempfile, pathlib
    >>> from interplace.collectors.host import HostSampler
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "s.parquet"
    >>> r = collect([sys.executable, "-c", "raise SystemExit(3)"], out, backends=[HostSampler()])
    >>> r.returncode, r.backends, r.terminated, out.exists()
    (3, ('HostSampler',), False, True)
    """
    if cmd is not None and len(cmd) == 0:
        raise InputError("the command to run is empty")
    if cmd is None and duration_s is None:
        raise InputError("nothing to wait for: give a command to run or a duration")
    check_output_path(out)
    check_arguments(interval_s, duration_s, chunk_rows, host, run_id)
    stop = threading.Event()
    guard = _SigtermGuard(stop)
    with guard.installed(), contextlib.ExitStack() as stack:
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
        if cmd is not None and guard.count == 0:  # not after a SIGTERM during set-up
            try:
                proc = subprocess.Popen(list(cmd))
            except FileNotFoundError:
                raise InputError(f"command not found: {cmd[0]}") from None
            except PermissionError:
                raise InputError(f"command is not executable: {cmd[0]}") from None
            except OSError as exc:
                raise InputError(f"cannot run {cmd[0]}: {exc.strerror or exc}") from None
        still_running = False
        try:  # from here on, whatever is raised (Terminated, say), the command is stopped
            if proc is not None:
                guard.proc = watched = proc

                def watch() -> None:
                    watched.wait()
                    stop.set()

                threading.Thread(target=watch, name="interplace-collect-wait",
                                 daemon=True).start()
            summary = sample(backends, interval_s, duration_s, stop, out=out,
                             chunk_rows=chunk_rows, sleep=stop.wait, host=host, run_id=run_id,
                             progress=progress)
            guard.sampled = True
        finally:
            if proc is not None:
                still_running = proc.poll() is None
                _stop(proc, term_grace_s)
        terminated = guard.count > 0
        if proc is None:
            return CollectResult(None, summary, names, note=note, terminated=terminated)
        return CollectResult(proc.returncode, summary, names, stopped=still_running, note=note,
                             terminated=terminated)
