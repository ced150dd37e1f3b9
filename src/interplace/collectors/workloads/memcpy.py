"""Device-memory copy: an ``size`` MiB buffer copied to another on the device (device-memory
bandwidth). One unit is one byte copied. Default 256 MiB on CUDA, 16 MiB on CPU.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch

from interplace.collectors.workloads._common import Workload, main

__all__ = ["build"]

MIB = 1 << 20


def build(args: argparse.Namespace, device: torch.device) -> Workload:
    """The device-to-device copy workload.

    >>> import argparse, torch
    >>> w = build(argparse.Namespace(size=1), torch.device("cpu"))
    >>> (w.unit, w.step())
    ('bytes', 1048576.0)
    """
    mib = args.size or (256 if device.type == "cuda" else 16)
    src = torch.ones(mib * MIB, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)

    def step() -> float:
        dst.copy_(src)
        return float(mib * MIB)

    return Workload("bytes", step)


def cli(argv: Sequence[str] | None = None) -> None:
    main(build, __doc__ or "", argv)


if __name__ == "__main__":
    cli()
