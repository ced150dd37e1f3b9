"""Tensor-core GEMM: ``size`` x ``size`` matmuls, bf16 (fp16 where bf16 is unsupported) on
CUDA, float32 on CPU. One unit is one floating-point operation: a matmul is :math:`2N^3`.
Default size 4096 on CUDA, 256 on CPU.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch

from interplace.collectors.workloads._common import Workload, main

__all__ = ["build"]


def build(args: argparse.Namespace, device: torch.device) -> Workload:
    """The GEMM workload.

    >>> import argparse, torch
    >>> w = build(argparse.Namespace(size=4), torch.device("cpu"))
    >>> (w.unit, w.step())
    ('flop', 128.0)
    """
    n = args.size or (4096 if device.type == "cuda" else 256)
    if device.type == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    else:
        dtype = torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    flop = 2.0 * n**3

    def step() -> float:
        torch.matmul(a, b, out=c)
        return flop

    return Workload("flop", step)


def cli(argv: Sequence[str] | None = None) -> None:
    main(build, __doc__ or "", argv)


if __name__ == "__main__":
    cli()
