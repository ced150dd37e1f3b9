"""``interplace topo``: show a machine topology (file, built-in or live)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from interplace.cli._common import Subparsers, summary
from interplace.errors import InputError

if TYPE_CHECKING:
    from interplace.topology import Topology


__all__ = ["register"]



def _topology_from_args(args: argparse.Namespace) -> Topology:
    from interplace.topology import load

    if args.discover:
        from interplace.topology.discover import (
            PynvmlBackend,
            discover,
            record_discovery,
            replay_discovery,
        )

        with PynvmlBackend() as nvml:
            if args.record:
                # Show exactly what was saved: one NVML read, not a second live one.
                return replay_discovery(record_discovery(args.record, nvml))
            return discover(nvml)
    if args.spec is None:
        raise InputError("topo needs a FILE or built-in name, or --discover")
    return load(args.spec, format=args.format)


def _run(args: argparse.Namespace) -> int:
    from interplace.topology.nvsmi import to_nvidia_smi

    if args.spec is not None and args.discover:
        raise InputError("give either FILE_OR_BUILTIN or --discover, not both")
    if args.record and not args.discover:
        raise InputError("--record only works with --discover")
    topo = _topology_from_args(args)
    if args.plot:
        from interplace.topology.plot import plot_topology

        plot_topology(topo, args.plot)
    if args.json:
        sys.stdout.write(json.dumps(topo.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write(summary(topo) + "\n" + to_nvidia_smi(topo))
        if args.plot:
            sys.stdout.write(f"\nplot written to {args.plot}\n")
    return 0


def register(sub: Subparsers) -> None:
    """Add the ``topo`` command to the ``interplace`` parser."""
    from interplace.topology import builtin_names

    topo = sub.add_parser(
        "topo",
        help="show a machine topology (file, built-in or live)",
        description="Show a topology as an nvidia-smi-style matrix, JSON or a plot. "
        f"Built-ins: {', '.join(builtin_names())} (NAME*N for N machines on one network).",
    )
    topo.add_argument(
        "spec",
        nargs="?",
        metavar="FILE_OR_BUILTIN",
        help="nvidia-smi topo -m text, NCCL topology XML, hwloc XML, or a built-in",
    )
    topo.add_argument(
        "--format",
        default="auto",
        choices=["auto", "nvidia-smi", "nccl", "hwloc"],
        help="file format (default: detect from content)",
    )
    topo.add_argument("--json", action="store_true", help="print the topology summary as JSON")
    topo.add_argument("--plot", metavar="OUT", help="write a layered drawing (.png, .svg, .pdf)")
    topo.add_argument(
        "--discover", action="store_true", help="read this machine's topology from NVML and sysfs"
    )
    topo.add_argument(
        "--record",
        metavar="DIR",
        help="with --discover: save the NVML and sysfs readings to DIR as a fixture",
    )
    topo.set_defaults(func=_run)
