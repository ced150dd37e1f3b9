"""A CPU input pipeline feeding the device: each step makes ``size`` raw uint8 3 x 40 x 40
images on the host, preprocesses them there (random 32 x 32 crop, random horizontal flip,
scale to float, per-channel normalisation), copies the batch to the device and runs a small
CNN training step on it. The host work dominates at small models, as in data-loader-bound
jobs. Default batch 64 on CUDA, 8 on CPU. One unit is one training sample.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
from torch import nn

from interplace.collectors.workloads._common import Workload, main
from interplace.collectors.workloads.cnn import train_step

__all__ = ["build", "preprocess"]

_MEAN = torch.tensor([0.49, 0.48, 0.45]).view(1, 3, 1, 1)
_STD = torch.tensor([0.25, 0.24, 0.26]).view(1, 3, 1, 1)


def preprocess(raw: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Crop ``(B, 3, 40, 40)`` uint8 images to 32 x 32, flip half, normalise: ``(B, 3, 32, 32)``.

    >>> g = torch.Generator().manual_seed(0)
    >>> preprocess(torch.zeros(2, 3, 40, 40, dtype=torch.uint8), g).shape
    torch.Size([2, 3, 32, 32])
    """
    out = torch.empty(raw.shape[0], 3, 32, 32)
    offs = torch.randint(0, 9, (raw.shape[0], 2), generator=gen).tolist()
    flips = torch.rand(raw.shape[0], generator=gen).tolist()
    for i, ((dy, dx), f) in enumerate(zip(offs, flips, strict=True)):
        img = raw[i, :, dy:dy + 32, dx:dx + 32].float().div_(255.0)
        out[i] = img.flip(-1) if f < 0.5 else img
    return (out - _MEAN) / _STD


def build(args: argparse.Namespace, device: torch.device) -> Workload:
    """The input-pipeline workload.

    >>> import argparse, torch
    >>> w = build(argparse.Namespace(size=2), torch.device("cpu"))
    >>> (w.unit, w.step())
    ('samples', 2.0)
    """
    batch = args.size or (64 if device.type == "cuda" else 8)
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(8 * 16, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    y = torch.randint(0, 10, (batch,), device=device)

    def step() -> float:
        raw = torch.randint(0, 256, (batch, 3, 40, 40), dtype=torch.uint8, generator=gen)
        x = preprocess(raw, gen)
        if device.type == "cuda":
            x = x.pin_memory().to(device, non_blocking=True)
        train_step(model, opt, x, y)
        return float(batch)

    return Workload("samples", step)


def cli(argv: Sequence[str] | None = None) -> None:
    main(build, __doc__ or "", argv)


if __name__ == "__main__":
    cli()
