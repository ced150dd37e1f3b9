"""A small transformer-encoder training step: 2 layers, d_model 64, 4 heads, sequences of 32
tokens from a 1000-word vocabulary, next-token cross-entropy, SGD; ``size`` sequences a batch
(default 32 on CUDA, 4 on CPU; bf16 autocast on CUDA). One unit is one training sequence.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
from torch import nn

from interplace.collectors.workloads._common import Workload, main

__all__ = ["build"]

VOCAB, D_MODEL, SEQ = 1000, 64, 32


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        layer = nn.TransformerEncoderLayer(D_MODEL, 4, 4 * D_MODEL, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))  # type: ignore[no-any-return]


def build(args: argparse.Namespace, device: torch.device) -> Workload:
    """The transformer training workload.

    >>> import argparse, torch
    >>> w = build(argparse.Namespace(size=2), torch.device("cpu"))
    >>> (w.unit, w.step())
    ('sequences', 2.0)
    """
    batch = args.size or (32 if device.type == "cuda" else 4)
    model = _Encoder().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tokens = torch.randint(0, VOCAB, (batch, SEQ + 1), device=device)
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        return float(batch)

    return Workload("sequences", step)


def cli(argv: Sequence[str] | None = None) -> None:
    main(build, __doc__ or "", argv)


if __name__ == "__main__":
    cli()
