"""Device-to-host copy: a ``size`` MiB device buffer copied into a pinned host buffer. On CPU
a host memcpy stands in (a note says so on stderr). One unit is one byte copied. Default
256 MiB on CUDA, 16 MiB on CPU.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch

from interplace.collectors.workloads._common import Workload, main
from interplace.collectors.workloads.h2d import copy_workload

__all__ = ["build"]


def build(args: argparse.Namespace, device: torch.device) -> Workload:
    """The device-to-host copy workload."""
    return copy_workload(args, device, False)


def cli(argv: Sequence[str] | None = None) -> None:
    main(build, __doc__ or "", argv)


if __name__ == "__main__":
    cli()
