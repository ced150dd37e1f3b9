"""A small CNN training step (two conv layers, pooling, a linear classifier, SGD) on a batch
of ``size`` random 3 x 32 x 32 images (default 64 on CUDA, 8 on CPU; bf16 autocast on CUDA).
One unit is one training sample.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
from torch import nn

from interplace.collectors.workloads._common import Workload, main

__all__ = ["build", "train_step"]


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
               y: torch.Tensor) -> None:
    """One step of cross-entropy training (bf16 autocast on CUDA)."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=x.device.type == "cuda"):
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()  # type: ignore[no-untyped-call]
    opt.step()


def build(args: argparse.Namespace, device: torch.device) -> Workload:
    """The CNN training workload.

    >>> import argparse, torch
    >>> w = build(argparse.Namespace(size=2), torch.device("cpu"))
    >>> (w.unit, w.step())
    ('samples', 2.0)
    """
    batch = args.size or (64 if device.type == "cuda" else 8)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(32 * 16, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step() -> float:
        train_step(model, opt, x, y)
        return float(batch)

    return Workload("samples", step)


def cli(argv: Sequence[str] | None = None) -> None:
    main(build, __doc__ or "", argv)


if __name__ == "__main__":
    cli()
