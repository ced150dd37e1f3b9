"""Profile workloads alone and in pairs on one device: the library side of ``interplace profile``.

:func:`profile` runs every workload alone and every unordered pair (a workload with itself
too) on one device, for each sharing ``mode``, and writes a co-location data set in the runs
format (``runs.csv``: ``run_id, job, throughput, mode, device, unit``; ``samples.csv``:
``run_id, t_s, metric, value, device, host``) that ``interplace.datasets.read_dir`` reads.

``device`` follows one convention in both files: a GPU is named by its NVML index as a string
(``"0"``, as ``nvidia-smi`` and :mod:`interplace.topology` number it), machine-wide counters by
``"host"``. A ``cuda`` profile runs every workload on GPU ``gpu`` (its environment gets
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and ``CUDA_VISIBLE_DEVICES=<gpu>``, so that CUDA's device 0 is
NVML's GPU ``gpu``; an inherited ``CUDA_VISIBLE_DEVICES`` is replaced) and writes ``str(gpu)``
in ``runs.csv``; of the GPUs only GPU ``gpu`` is sampled (``samples.csv`` holds devices
``str(gpu)`` and ``"host"``), so that no other GPU's counters are credited to the run. A ``cpu``
profile ran on no GPU: its ``runs.csv`` ``device`` cells are empty (missing), and its samples
are host counters (``device`` ``"host"``) only.

Each run:

1. starts the co-runners with ``INTERPLACE_WAIT_GO=1`` and waits until every one has printed
   ``INTERPLACE_UNIT`` (set-up done; see :mod:`interplace.collectors.workloads` for the
   protocol), then writes ``GO`` to all their stdins at one instant :math:`t_0`;
2. samples counters (NVML when it can be initialised, host counters always) from :math:`t_0`;
3. waits until every co-runner has reported progress past :math:`t_1 = t_0 + w + m`
   (``w`` = ``warmup_s``, ``m`` = ``measure_s``), then stops them all.

The throughput of a co-runner is the units it did in the common window
:math:`[t_0 + w, t_1]` over :math:`m`, with its progress curve :math:`U(t)` interpolated
linearly between reports (:func:`window_units`):
:math:`T = (U(t_1) - U(t_0 + w)) / m`.

A workload that crashes, never reports ``INTERPLACE_UNIT`` or stops reporting progress before
:math:`t_1` raises :class:`InputError` naming it; its co-runners are killed and nothing is
written. The output directory is checked before any workload starts: it must not exist yet, or
be an empty directory.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from interplace.collectors.host import HostSampler
from interplace.collectors.nvml import GpuCounterBackend, PynvmlSampler
from interplace.collectors.sampler import SampleSummary, sample
from interplace.collectors.workloads import BUILTINS, PROGRESS_TAG, UNIT_TAG, WAIT_GO_ENV
from interplace.errors import InputError, atomic_write, first_line, is_int, is_real, read_input

__all__ = [
    "MODES",
    "CudaUnavailableError",
    "ProfileResult",
    "Progress",
    "WorkloadSpec",
    "cuda_device_count",
    "mps_unavailable_reason",
    "parse_progress",
    "parse_workloads",
    "profile",
    "window_units",
]

MODES = ("timeslice", "mps")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload: a ``name`` (letters, digits, ``_ . -``) and the command ``argv`` to run.

    ``{device}`` and ``{seconds}`` in ``argv`` are replaced by the device (``cuda`` / ``cpu``)
    and the seconds the profiler needs the job to run after ``GO``. ``builtin``: one of the
    reference PyTorch workloads (:func:`parse_workloads` sets it), which run on this
    interpreter's torch, so that :func:`profile` can check up front that they find CUDA.

    >>> WorkloadSpec("toy", ("python", "toy.py", "--device", "{device}")).name
    'toy'
    >>> WorkloadSpec("a b", ("x",))
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: workload name 'a b' must be letters, digits, '_', '.' or '-'
    """

    name: str
    argv: tuple[str, ...]
    builtin: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InputError(f"workload name {self.name!r} must be letters, digits, '_', '.' "
                             "or '-'")
        if not isinstance(self.argv, tuple) or not self.argv or not all(
                isinstance(a, str) for a in self.argv) or not self.argv[0]:
            raise InputError(f"workload {self.name!r}: the command must be a non-empty list "
                             "of strings")
        if not isinstance(self.builtin, bool):
            raise InputError(f"workload {self.name!r}: builtin must be True or False, not "
                             f"{self.builtin!r}")


def _builtin(name: str, size: int | None) -> WorkloadSpec:
    argv = [sys.executable, "-m", f"interplace.collectors.workloads.{name}",
            "--device", "{device}", "--seconds", "{seconds}"]
    if size is not None:
        argv += ["--size", str(size)]
    return WorkloadSpec(name if size is None else f"{name}-{size}", tuple(argv), builtin=True)


def _from_file(path: Path) -> list[WorkloadSpec]:
    text = read_input(path)
    try:
        if path.suffix.lower() == ".toml":
            doc: Any = tomllib.loads(text.decode("utf-8"))
        else:
            doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "TOML" if path.suffix.lower() == ".toml" else "JSON"  # the format parsed
        raise InputError(f"{path}: not valid {kind} (a workload file is .json or .toml): "
                         f"{first_line(exc)}") from None
    if isinstance(doc, dict):
        doc = doc.get("workloads", doc.get("workload"))
    if not isinstance(doc, list) or not doc:
        raise InputError(f"{path}: expected a non-empty list of {{name, command}} workloads "
                         "(top level, or under 'workloads')")
    specs = []
    for i, item in enumerate(doc):
        if not isinstance(item, dict) or "name" not in item or "command" not in item:
            raise InputError(f"{path}: workload {i} needs 'name' and 'command'")
        cmd = item["command"]
        if isinstance(cmd, str):
            try:
                cmd = shlex.split(cmd)
            except ValueError as exc:  # an unclosed quote
                raise InputError(f"{path}: workload {item['name']!r}: 'command' {cmd!r}: "
                                 f"{exc}") from None
        if not isinstance(cmd, list):
            raise InputError(f"{path}: workload {item['name']!r}: 'command' must be a string "
                             "or a list of strings")
        specs.append(WorkloadSpec(str(item["name"]), tuple(cmd)))
    return specs


def parse_workloads(spec: str) -> list[WorkloadSpec]:
    """Workloads from ``spec``: a comma list of built-in names, or a JSON / TOML file.

    A built-in name may carry a size, ``gemm:512`` (passed as ``--size 512``; the job is then
    named ``gemm-512``). A file (``.json`` or ``.toml``) lists ``{name, command}`` items, at the
    top level or under ``workloads`` (TOML: ``[[workloads]]`` tables); ``command`` is a list of
    strings or one shell-quoted string.

    >>> [w.name for w in parse_workloads("gemm, launch:8")]
    ['gemm', 'launch-8']
    >>> parse_workloads("gemm,nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: unknown workload 'nope' (built-ins: gemm, memcpy, ...)
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InputError("no workloads given")
    path = Path(spec.strip())
    # A built-in name wins over a file of that name in the working directory (a binary called
    # gemm, say); a spec file is named by its suffix.
    given = [item.strip().partition(":")[0] for item in spec.split(",") if item.strip()]
    if path.is_dir() and not all(n in BUILTINS for n in given):
        raise InputError(f"workloads {spec!r} is a directory: give a .json / .toml file or "
                         "built-in names")
    if path.suffix.lower() in (".json", ".toml") or (
        path.is_file() and spec.strip().partition(":")[0] not in BUILTINS
    ):
        specs = _from_file(path)
    else:
        specs = []
        for item in (s.strip() for s in spec.split(",")):
            if not item:
                continue
            name, _, size = item.partition(":")
            if name not in BUILTINS:
                raise InputError(f"unknown workload {name!r} (built-ins: {', '.join(BUILTINS)}; "
                                 "or give a .json / .toml file)")
            if size and (not size.isdigit() or int(size) < 1):
                raise InputError(f"workload {item!r}: the size after ':' must be a positive "
                                 "integer")
            specs.append(_builtin(name, int(size) if size else None))
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"workload name(s) given twice: {', '.join(dup)}")
    if not specs:
        raise InputError("no workloads given")
    return specs


@dataclass(frozen=True)
class Progress:
    """A workload's parsed protocol: its ``unit`` (``None`` before ``INTERPLACE_UNIT``) and
    its progress curve, ``times`` (monotonic seconds) and ``units`` (totals), shape ``(n,)``."""

    unit: str | None
    times: np.ndarray[Any, Any]
    units: np.ndarray[Any, Any]


def _progress_point(parts: Sequence[str]) -> tuple[float, float] | None:
    """(time, units) of a progress line split in words, or None where it is malformed (not
    three words, or a number that is not a finite number)."""
    try:
        t, u = (float(x) for x in parts[1:]) if len(parts) == 3 else (math.nan, math.nan)
    except ValueError:
        return None
    return (t, u) if math.isfinite(t) and math.isfinite(u) else None


def parse_progress(lines: Iterable[str], name: str) -> Progress:
    """Parse a workload's stdout lines; other lines are ignored.

    Raises :class:`InputError` naming the workload on a malformed protocol line, times going
    backwards or units decreasing.

    >>> p = parse_progress(["hello", "INTERPLACE_UNIT steps", "INTERPLACE_PROGRESS 1.0 0",
    ...                     "INTERPLACE_PROGRESS 1.5 10"], "toy")
    >>> p.unit, p.times.tolist(), p.units.tolist()
    ('steps', [1.0, 1.5], [0.0, 10.0])
    >>> parse_progress(["INTERPLACE_PROGRESS 1.0 x"], "toy")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: workload 'toy': malformed progress line ...
    """
    unit: str | None = None
    ts: list[float] = []
    us: list[float] = []
    for line in lines:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == UNIT_TAG:
            if len(parts) != 2:
                raise InputError(f"workload {name!r}: malformed unit line {line.strip()!r}")
            unit = parts[1]
        elif parts[0] == PROGRESS_TAG:
            point = _progress_point(parts)
            if point is None:
                raise InputError(f"workload {name!r}: malformed progress line "
                                 f"{line.strip()!r}")
            t, u = point
            if ts and (t < ts[-1] or u < us[-1]):
                raise InputError(f"workload {name!r}: progress went backwards at "
                                 f"{line.strip()!r}")
            ts.append(t)
            us.append(u)
    return Progress(unit, np.asarray(ts, dtype=float), np.asarray(us, dtype=float))


def window_units(times: np.ndarray[Any, Any], units: np.ndarray[Any, Any], start: float,
                 end: float) -> float:
    """Units done in ``[start, end]``: :math:`U(end) - U(start)`, ``U`` interpolated linearly.

    Before the first report ``U`` is the first value (no work is credited before the job
    reports); ``end`` must not be after the last report.

    >>> window_units(np.array([0.0, 1.0, 2.0]), np.array([0.0, 10.0, 30.0]), 0.5, 1.5)
    15.0
    >>> window_units(np.array([1.0, 2.0]), np.array([0.0, 4.0]), 0.0, 3.0)
    Traceback (most recent call last):
    ...
    ValueError: the window ends at 3.0, after the last report at 2.0
    """
    if times.size == 0 or end > times[-1]:
        last = float(times[-1]) if times.size else None
        raise ValueError(f"the window ends at {end!r}, after the last report at {last!r}")
    u = np.interp([start, end], times, units)
    return float(u[1] - u[0])


def mps_unavailable_reason(which: Callable[[str], str | None] = shutil.which,
                           proc_root: Path = Path("/proc")) -> str | None:
    """Why MPS cannot be used here, or ``None`` when its control daemon is running.

    >>> mps_unavailable_reason(which=lambda _: None)
    'nvidia-cuda-mps-control is not on PATH'
    """
    if which("nvidia-cuda-mps-control") is None:
        return "nvidia-cuda-mps-control is not on PATH"
    with contextlib.suppress(OSError):
        for comm in proc_root.glob("[0-9]*/comm"):
            with contextlib.suppress(OSError):
                # the kernel truncates comm to 15 characters: "nvidia-cuda-mps"
                if comm.read_text().strip().startswith("nvidia-cuda-mps"):
                    return None
    return "the MPS control daemon is not running (start it with nvidia-cuda-mps-control -d)"


_CUDA_PROBE = """\
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(n)
print(str(caught[0].message).strip().splitlines()[0] if caught else "")
"""


def cuda_device_count(timeout_s: float = 120.0) -> tuple[int, str]:
    """The CUDA devices the built-in workloads would find, in a child process of this Python:
    their number (0 when ``torch.cuda.is_available()`` is False) and the first line of the
    warning torch gave, if any (why CUDA failed to initialise, say).

    The child sees the devices in PCI bus order, as a ``cuda`` :func:`profile` numbers them
    (an inherited ``CUDA_VISIBLE_DEVICES`` is dropped, as it is replaced for each job), and no
    MPS daemon (``CUDA_MPS_PIPE_DIRECTORY`` points at an empty directory): this process
    stays without CUDA, and no MPS server is started for the check. Raises
    :class:`InputError` when the child fails (torch cannot be imported) or takes longer than
    ``timeout_s``.
    """
    with tempfile.TemporaryDirectory(prefix="interplace-cuda-probe-") as empty:
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        env.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_MPS_PIPE_DIRECTORY=empty)
        try:
            done = subprocess.run([sys.executable, "-c", _CUDA_PROBE], env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  errors="replace", timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise InputError(f"cannot check for CUDA: importing torch took over "
                             f"{timeout_s:g} s") from None
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines or not lines[0].isdigit():
        err = done.stderr.strip().splitlines()
        why = f": {err[-1].strip()}" if err else ""
        raise InputError(f"cannot check for CUDA: {sys.executable} -c 'import torch' failed "
                         f"(exit code {done.returncode}){why}")
    return int(lines[0]), lines[1].strip() if len(lines) > 1 else ""


class CudaUnavailableError(InputError):
    """:func:`profile` was asked to run built-in workloads on ``device="cuda"`` where they
    would find no CUDA device. :attr:`reason` says why (``no CUDA device here
    (torch.cuda.is_available() is False)``); the message adds the remedy in the terms of
    :func:`profile`'s arguments, and a caller with its own names for them (``interplace
    profile --device``) can say the same in its own words.

    >>> str(CudaUnavailableError("no CUDA device here"))
    "device 'cuda': no CUDA device here; use device='cpu'"
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"device 'cuda': {reason}; use device='cpu'")
        self.reason = reason

    def __reduce__(self) -> tuple[type[CudaUnavailableError], tuple[str]]:
        return type(self), (self.reason,)


@functools.cache
def _cuda_devices(timeout_s: float) -> int:
    """:func:`cuda_device_count`'s number, or :class:`CudaUnavailableError` when it is 0.

    A number found is kept for the process (GPUs do not come and go between the profiles of
    a tuning run, each of which would otherwise import torch once more to ask); the error is
    not, so a later call looks again."""
    n, warning = cuda_device_count(timeout_s)
    if n == 0:
        why = f": {warning}" if warning else ""
        raise CudaUnavailableError(f"no CUDA device here (torch.cuda.is_available() is "
                                   f"False{why})")
    return n


def _check_cuda(gpu: int, timeout_s: float) -> None:
    """Refuse a ``cuda`` profile of built-in workloads that would find no CUDA device, or no
    GPU ``gpu``, before any of them starts."""
    n = _cuda_devices(timeout_s)
    if gpu >= n:
        raise InputError(f"no GPU {gpu}: CUDA sees "
                         f"{'GPU 0' if n == 1 else f'GPUs 0..{n - 1}'}")


class _Proc:
    """One running workload: its stdout is read by a thread, stderr goes to a file."""

    def __init__(self, spec: WorkloadSpec, device: str, seconds: float, env: dict[str, str],
                 errdir: Path, index: int) -> None:
        self.spec = spec
        argv = [a.replace("{device}", device).replace("{seconds}", repr(seconds))
                for a in spec.argv]
        self.errpath = errdir / f"{index}-{spec.name}.stderr"
        self._err: IO[bytes] = open(self.errpath, "wb")  # noqa: SIM115
        self.lines: list[str] = []
        self.malformed = False  # a protocol line parse_progress refuses: stop waiting for it
        self.unit_seen = threading.Event()
        self.last_t = -math.inf
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._err, env=env, text=True, bufsize=1,
                                         errors="replace")  # stray bytes in its output
        except OSError as exc:
            self._err.close()
            raise InputError(f"workload {spec.name!r}: cannot run {argv[0]}: "
                             f"{exc.strerror or exc}") from None
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"interplace-profile-{spec.name}")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            parts = line.split()
            if parts and parts[0] == UNIT_TAG:
                self.unit_seen.set()
            elif parts and parts[0] == PROGRESS_TAG:
                point = _progress_point(parts)
                if point is None:
                    self.malformed = True
                else:
                    self.last_t = point[0]

    def go(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write("GO\n")
            self.proc.stdin.flush()
            self.proc.stdin.close()

    def failure(self, before: str) -> str:
        """Why the process is unusable: it exited ``before`` something (``"before reporting
        INTERPLACE_UNIT"``), with the last line of its stderr."""
        rc = self.proc.poll()
        tail = ""
        with contextlib.suppress(OSError):
            err = self.errpath.read_text(errors="replace").strip().splitlines()
            if err:
                tail = f"; its stderr ends: {err[-1].strip()}"
        how = f"crashed (exit code {rc})" if rc else "exited"
        return f"workload {self.spec.name!r} {how} {before}{tail}"

    def stop(self, grace_s: float = 2.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=grace_s)
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        self._err.close()


class _Only:
    """The devices of ``backend`` whose device id is in ``keep``, as a backend of their own.

    >>> from interplace.collectors.nvml import ReplayGpuBackend
    >>> two = ReplayGpuBackend({"devices": [[{"temp_c": 40}], [{"temp_c": 50}]],
    ...                         "unsupported": [[0, "power_mw"], [1, "temp_c"]]})
    >>> one = _Only(two, {"1", "host"})
    >>> one.device_count(), one.device_id(0), one.read(0), sorted(one.unsupported)
    (1, '1', {'temp_c': 50.0}, [('1', 'temp_c')])
    """

    def __init__(self, backend: GpuCounterBackend, keep: set[str]) -> None:
        self._backend = backend
        self._index = [i for i in range(backend.device_count()) if backend.device_id(i) in keep]
        self._ids = [backend.device_id(i) for i in self._index]

    def device_count(self) -> int:
        return len(self._index)

    def device_id(self, index: int) -> str:
        return self._ids[index]

    def read(self, index: int) -> dict[str, float]:
        return self._backend.read(self._index[index])

    @property
    def unsupported(self) -> frozenset[tuple[str, str]]:
        return frozenset(p for p in self._backend.unsupported if p[0] in self._ids)


def _run_group(specs: Sequence[WorkloadSpec], *, run_id: str, device: str, env: dict[str, str],
               warmup_s: float, measure_s: float, startup_timeout_s: float, grace_s: float,
               backends: Sequence[GpuCounterBackend], tmp: Path,
               ) -> tuple[list[tuple[str, float, str]], pd.DataFrame, frozenset[tuple[str, str]]]:
    """Run ``specs`` together: ``[(job, throughput, unit)]``, the samples of the run and the
    ``(device, metric)`` pairs the backends found unsupported."""
    seconds = warmup_s + measure_s + grace_s + 1.0
    procs: list[_Proc] = []
    stop = threading.Event()
    sampler: threading.Thread | None = None
    sample_error: list[BaseException] = []
    summaries: list[SampleSummary] = []
    out = tmp / f"samples-{len(list(tmp.glob('samples-*')))}.csv"
    try:
        for i, s in enumerate(specs):
            procs.append(_Proc(s, device, seconds, env, tmp, i))
        deadline = time.monotonic() + startup_timeout_s
        for p in procs:
            while not p.unit_seen.wait(0.02):
                if p.proc.poll() is not None and not p.unit_seen.is_set():
                    raise InputError(p.failure(f"before reporting {UNIT_TAG}"))
                if time.monotonic() > deadline:
                    raise InputError(f"workload {p.spec.name!r} never reported "
                                     f"{UNIT_TAG} within {startup_timeout_s:g} s")

        def run_sampler() -> None:
            try:
                summaries.append(sample(backends, 0.1, None, stop, out=out, sleep=stop.wait,
                                        run_id=run_id))
            except BaseException as exc:
                sample_error.append(exc)

        t0 = time.monotonic()
        for p in procs:
            p.go()
        sampler = threading.Thread(target=run_sampler, daemon=True,
                                   name="interplace-profile-sampler")
        sampler.start()
        t1 = t0 + warmup_s + measure_s
        while True:
            pending = [p for p in procs if p.last_t < t1]
            if not pending:
                break
            for p in pending:
                if p.malformed:  # parse_progress names the line
                    parse_progress(list(p.lines), p.spec.name)
                if p.proc.poll() is not None:
                    p._reader.join(timeout=1.0)
                    if p.last_t < t1:
                        raise InputError(p.failure("before the measurement window ended"))
            if time.monotonic() > t1 + grace_s:
                p = pending[0]
                raise InputError(f"workload {p.spec.name!r} never reported progress past the "
                                 f"measurement window ({PROGRESS_TAG} lines at least every "
                                 "0.2 s are needed)")
            time.sleep(0.02)
    finally:
        stop.set()
        if sampler is not None:
            sampler.join()
        for p in procs:
            p.stop()
    if sample_error:
        raise sample_error[0]
    rows = []
    for p in procs:
        prog = parse_progress(p.lines, p.spec.name)
        done = window_units(prog.times, prog.units, t0 + warmup_s, t1)
        if not done > 0:
            raise InputError(f"workload {p.spec.name!r} made no progress in the measurement "
                             "window")
        rows.append((p.spec.name, done / measure_s, prog.unit or ""))
    samples = pd.read_csv(out, keep_default_na=False, na_values=[""],
                          dtype={"run_id": str, "host": str, "device": str, "metric": str})
    return rows, samples, summaries[0].unsupported


@dataclass(frozen=True)
class ProfileResult:
    """What :func:`profile` wrote: the directory ``out`` (``runs.csv``, ``samples.csv``), the
    number of ``runs`` made, and the ``(device, metric)`` pairs the counter backends found
    ``unsupported`` over all runs.

    >>> ProfileResult(Path("prof"), 3, frozenset()).runs
    3
    """

    out: Path
    runs: int
    unsupported: frozenset[tuple[str, str]]


def _check_out_dir(out: Path) -> None:
    """Refuse an ``out`` that :func:`profile` could not write afterwards, or would overwrite.

    >>> _check_out_dir(Path(__file__))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: .../profile.py exists and is not a directory
    """
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise InputError(f"{out} exists and is not a directory")
        if any(out.iterdir()):
            raise InputError(f"{out} already exists and is not empty (profile writes a new "
                             "directory)")
        return
    parent = out.parent
    while not parent.exists():  # profile creates the missing directories at the end
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"cannot create {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot create {out}: {parent} is not writable")


def profile(
    workloads: Sequence[WorkloadSpec],
    out_dir: str | os.PathLike[str],
    *,
    modes: Sequence[str] = ("timeslice",),
    warmup_s: float = 2.0,
    measure_s: float = 5.0,
    device: str = "cuda",
    gpu: int = 0,
    pairs: bool = True,
    progress: bool = False,
    startup_timeout_s: float = 120.0,
    grace_s: float = 5.0,
    backends: Sequence[GpuCounterBackend] | None = None,
) -> ProfileResult:
    """Run ``workloads`` alone and in pairs; write ``out_dir/runs.csv`` and ``samples.csv``.

    Runs, per mode: each workload alone (``run_id`` ``<mode>-<name>``), then with ``pairs``
    every unordered pair including a workload with itself (``<mode>-<a>+<b>``). ``mps`` needs
    ``device="cuda"`` and a running MPS control daemon; in ``timeslice`` mode the jobs are kept
    off a running daemon (``CUDA_MPS_PIPE_DIRECTORY`` points at an empty directory). With
    ``device="cuda"`` every job runs on the GPU whose NVML index is ``gpu`` (see the module
    docstring; ``gpu`` is unused on ``cpu``).
    ``backends`` (default: NVML if it initialises, plus host counters) are sampled every 0.1 s
    during each run, of their devices only ``str(gpu)`` (``cuda`` only) and ``"host"``. A
    workload must report ``INTERPLACE_UNIT`` within ``startup_timeout_s`` and progress past
    the window within ``grace_s`` of its end. ``out_dir`` must not exist or be empty: that,
    like every argument, is checked before the first workload starts. So is CUDA, when
    built-in workloads are to run on ``device="cuda"``: without a CUDA device (see
    :func:`cuda_device_count`) :class:`CudaUnavailableError` is raised, and without GPU
    ``gpu`` an :class:`InputError`. (Your own workloads are not checked: they need not use
    this interpreter's torch.)
    """
    if not workloads:
        raise InputError("no workloads given")
    names = [w.name for w in workloads]
    if len(set(names)) != len(names):
        raise InputError("workload names must be unique")
    if device not in ("cuda", "cpu"):
        raise InputError(f"device must be 'cuda' or 'cpu', got {device!r}")
    if not is_int(gpu, 0):
        raise InputError(f"gpu must be a GPU index (an integer >= 0), got {gpu!r}")
    modes = list(dict.fromkeys(modes))
    if not modes:
        raise InputError("no sharing modes given")
    for m in modes:
        if m not in MODES:
            raise InputError(f"unknown mode {m!r} (modes: {', '.join(MODES)})")
    for name, v, zero_ok in (("warmup", warmup_s, True), ("measure", measure_s, False)):
        if not is_real(v) or (v < 0 if zero_ok else v <= 0):
            kind = "non-negative" if zero_ok else "positive"
            raise InputError(f"the {name} time must be a {kind} number of seconds, got {v!r}")
    out = Path(out_dir)
    _check_out_dir(out)
    daemon = mps_unavailable_reason() is None
    if "mps" in modes:
        if device != "cuda":
            raise InputError("mode 'mps' needs device 'cuda'")
        reason = mps_unavailable_reason()
        if reason is not None:
            raise InputError(f"mode 'mps' is unavailable: {reason}")
    if device == "cuda" and any(w.builtin for w in workloads):
        _check_cuda(gpu, startup_timeout_s)
    groups: list[tuple[str, str, tuple[WorkloadSpec, ...]]] = []
    for m in modes:
        groups += [(m, f"{m}-{w.name}", (w,)) for w in workloads]
        if pairs:
            groups += [(m, f"{m}-{a.name}+{b.name}", (a, b))
                       for i, a in enumerate(workloads) for b in workloads[i:]]
    run_device = str(gpu) if device == "cuda" else None
    run_rows: list[dict[str, Any]] = []
    sample_frames: list[pd.DataFrame] = []
    unsupported: set[tuple[str, str]] = set()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="interplace-prof-")))
        nomps = tmp / "no-mps"
        nomps.mkdir()
        gpus: list[GpuCounterBackend] = []
        if backends is None and device == "cuda":
            with contextlib.suppress(InputError):
                gpus.append(stack.enter_context(PynvmlSampler()))
        for b in gpus if backends is None else backends:
            ids = [b.device_id(i) for i in range(b.device_count())]
            if device == "cuda" and ids and ids != ["host"] and run_device not in ids:
                raise InputError(f"no GPU {gpu}: {type(b).__name__} sees GPUs "
                                 f"{', '.join(i for i in ids if i != 'host')}")
        # Samples of a device no runs.csv row names count for the whole run (the model's
        # counters_from_samples): sample only the run's GPU, and the host.
        keep = {"host"} if run_device is None else {run_device, "host"}
        chosen: list[GpuCounterBackend] = [_Only(b, keep)
                                           for b in (gpus if backends is None else backends)]
        bar: Any = None
        if progress:
            from tqdm import tqdm

            bar = stack.enter_context(tqdm(total=len(groups), unit="run", file=sys.stderr,
                                           desc="profiling"))
        for mode, run_id, specs in groups:
            env = dict(os.environ, **{WAIT_GO_ENV: "1", "PYTHONUNBUFFERED": "1"})
            if mode == "timeslice" and daemon:
                env["CUDA_MPS_PIPE_DIRECTORY"] = str(nomps)
            if device == "cuda":
                env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
                env["CUDA_VISIBLE_DEVICES"] = str(gpu)
            used = chosen if backends is not None else [*chosen, HostSampler()]
            rows, samples, missing = _run_group(
                specs, run_id=run_id, device=device, env=env, warmup_s=warmup_s,
                measure_s=measure_s, startup_timeout_s=startup_timeout_s, grace_s=grace_s,
                backends=used, tmp=tmp)
            run_rows += [{"run_id": run_id, "job": job, "throughput": thr, "mode": mode,
                          "device": run_device, "unit": unit} for job, thr, unit in rows]
            sample_frames.append(samples)
            unsupported |= missing
            if bar is not None:
                bar.update(1)
    out.mkdir(parents=True, exist_ok=True)
    cols = ["run_id", "t_s", "metric", "value", "device", "host"]
    samples_all = pd.concat(sample_frames, ignore_index=True) if sample_frames else None
    if samples_all is None or samples_all.empty:
        samples_all = pd.DataFrame({c: [] for c in cols})
    with atomic_write(out / "samples.csv") as fh:
        samples_all[cols].to_csv(fh, index=False)
    with atomic_write(out / "runs.csv") as fh:
        pd.DataFrame(run_rows, columns=["run_id", "job", "throughput", "mode", "device",
                                        "unit"]).to_csv(fh, index=False)
    return ProfileResult(out, len(groups), frozenset(unsupported))
