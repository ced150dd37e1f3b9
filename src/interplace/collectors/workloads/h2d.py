"""Host-to-device copy over PCIe / NVLink-C2C: a pinned ``size`` MiB host buffer copied to the
device. On CPU there is no device: a host memcpy stands in (a note says so on stderr). One unit
is one byte copied. Default 256 MiB on CUDA, 16 MiB on CPU.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch

from interplace.collectors.workloads._common import Workload, main

__all__ = ["build", "copy_workload"]

MIB = 1 << 20


def copy_workload(args: argparse.Namespace, device: torch.device, to_device: bool) -> Workload:
    """A copy between a pinned host buffer and the device (``to_device``: host -> device).

    >>> import argparse, torch
    >>> w = copy_workload(argparse.Namespace(size=1), torch.device("cpu"), True)
    >>> (w.unit, w.step())
    ('bytes', 1048576.0)
    """
    mib = args.size or (256 if device.type == "cuda" else 16)
    n = mib * MIB
    if device.type == "cuda":
        host = torch.ones(n, dtype=torch.uint8).pin_memory()
        dev = torch.ones(n, dtype=torch.uint8, device=device)
    else:
        print("interplace workload: note: no device on cpu; a host memcpy stands in for "
              f"{'h2d' if to_device else 'd2h'}", file=sys.stderr, flush=True)
        host = torch.ones(n, dtype=torch.uint8)
        dev = torch.empty(n, dtype=torch.uint8)
    src, dst = (host, dev) if to_device else (dev, host)

    def step() -> float:
        dst.copy_(src, non_blocking=True)
        return float(n)

    return Workload("bytes", step)


def build(args: argparse.Namespace, device: torch.device) -> Workload:
    """The host-to-device copy workload."""
    return copy_workload(args, device, True)


def cli(argv: Sequence[str] | None = None) -> None:
    main(build, __doc__ or "", argv)


if __name__ == "__main__":
    cli()
