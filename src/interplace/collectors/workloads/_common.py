"""The shared driver of the built-in workloads: argument parsing and the progress loop.

A workload is a :class:`Workload`: a ``unit`` and a ``step()`` that enqueues some work and
returns the units it does. :func:`run` prints ``INTERPLACE_UNIT``, waits for ``GO`` when
``INTERPLACE_WAIT_GO=1``, then calls ``step()`` for ``seconds``, synchronising the device and
printing ``INTERPLACE_PROGRESS <monotonic_s> <units_total>`` every ``report_s`` (0.1 s).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

import torch

from interplace.collectors.workloads import PROGRESS_TAG, UNIT_TAG, WAIT_GO_ENV

__all__ = ["Workload", "main", "parse_args", "run"]


@dataclass(frozen=True)
class Workload:
    """``step()`` enqueues work on the device and returns the units it does."""

    unit: str
    step: Callable[[], float]


def parse_args(argv: Sequence[str] | None, description: str) -> argparse.Namespace:
    """``--device cpu|cuda``, ``--seconds S`` (> 0) and ``--size N`` (> 0; default per workload).

    >>> a = parse_args(["--device", "cpu", "--seconds", "0.5", "--size", "8"], "x")
    >>> (a.device, a.seconds, a.size)
    ('cpu', 0.5, 8)
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--size", type=int, default=None)
    a = p.parse_args(argv)
    if not a.seconds > 0:
        p.error("--seconds must be > 0")
    if a.size is not None and a.size < 1:
        p.error("--size must be >= 1")
    return a


def device_of(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("interplace workload: error: --device cuda but CUDA is not available")
    return torch.device(name)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(work: Workload, device: torch.device, seconds: float, *, out: TextIO = sys.stdout,
        stdin: TextIO = sys.stdin, report_s: float = 0.1) -> float:
    """Run ``work`` for ``seconds`` speaking the progress protocol on ``out``; the units done.

    >>> import io, torch
    >>> buf = io.StringIO()
    >>> n = run(Workload("steps", lambda: 1.0), torch.device("cpu"), 0.05, out=buf)
    >>> lines = buf.getvalue().splitlines()
    >>> lines[0], lines[1].split()[2], float(lines[-1].split()[2]) == n > 0
    ('INTERPLACE_UNIT steps', '0.0', True)
    """
    work.step()  # warm the caches / kernels once before timing
    sync(device)
    print(f"{UNIT_TAG} {work.unit}", file=out, flush=True)
    if os.environ.get(WAIT_GO_ENV) == "1":
        stdin.readline()
    done = 0.0
    start = time.monotonic()
    print(f"{PROGRESS_TAG} {start!r} {done!r}", file=out, flush=True)
    last = start
    while True:
        done += work.step()
        now = time.monotonic()
        if now - last >= report_s or now - start >= seconds:
            sync(device)
            now = time.monotonic()
            print(f"{PROGRESS_TAG} {now!r} {done!r}", file=out, flush=True)
            last = now
            if now - start >= seconds:
                return done


def main(build: Callable[[argparse.Namespace, torch.device], Workload], description: str,
         argv: Sequence[str] | None = None) -> None:
    """Parse arguments, build the workload on the device and :func:`run` it."""
    args = parse_args(argv, description)
    device = device_of(args.device)
    torch.manual_seed(0)
    run(build(args, device), device, args.seconds)
