"""Kernel-launch bound: a loop of tiny in-place adds on a ``size``-element tensor (default 16),
64 per step, so the host's launch path (Python, the CUDA driver) is the bottleneck. One unit
is one kernel launched.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch

from interplace.collectors.workloads._common import Workload, main

__all__ = ["build"]

OPS_PER_STEP = 64


def build(args: argparse.Namespace, device: torch.device) -> Workload:
    """The launch-bound workload.

    >>> import argparse, torch
    >>> w = build(argparse.Namespace(size=None), torch.device("cpu"))
    >>> (w.unit, w.step())
    ('kernels', 64.0)
    """
    x = torch.zeros(args.size or 16, device=device)

    def step() -> float:
        for _ in range(OPS_PER_STEP):
            x.add_(1.0)
        return float(OPS_PER_STEP)

    return Workload("kernels", step)


def cli(argv: Sequence[str] | None = None) -> None:
    main(build, __doc__ or "", argv)


if __name__ == "__main__":
    cli()
