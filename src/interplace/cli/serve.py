"""``interplace serve``: the Kubernetes scheduler extender (needs ``interplace[serve]``)."""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from interplace.cli._common import Subparsers, int_at_least, positive_number
from interplace.errors import InputError, check_input_dir, first_line

if TYPE_CHECKING:
    from interplace.topology import Topology

__all__ = ["node_topologies", "register"]


def node_topologies(
    topology: str | None, node_dir: str | None
) -> dict[str, Topology] | Topology:
    """One topology for every node, or a topology per node from a directory of files (or
    ``--discover --record`` folders) named after the nodes: a node's file is the one named
    exactly as the node, else the one named as the node plus an extension."""
    from interplace.topology import load

    if topology is not None and node_dir is not None:
        raise InputError("give --topology or --node-topology, not both")
    if topology is None and node_dir is None:
        raise InputError("give --topology (one for every node) or --node-topology (a file per "
                         "node)")
    if topology is not None:
        return load(topology)
    assert node_dir is not None
    d = check_input_dir(node_dir)
    out: dict[str, Topology] = {}
    stems: dict[str, list[Path]] = {}
    for entry in sorted(d.iterdir()):
        if entry.name.startswith("."):
            continue
        # A file is found by its whole name (a node name may hold dots: gpu-1.example.com)
        # and, failing that, by its name less its extension (gpu-1.xml for node gpu-1).
        out[entry.name] = load(entry)
        if entry.is_file() and entry.suffix:
            stems.setdefault(entry.stem, []).append(entry)
    for stem, files in stems.items():
        if stem in out:
            continue
        if len(files) > 1:
            raise InputError(
                f"{d}: two topology files for node {stem}: {', '.join(f.name for f in files)}"
            )
        out[stem] = out[files[0].name]
    if not out:
        raise InputError(f"{d}: no node topology files")
    return out


def _run(args: argparse.Namespace) -> int:
    from interplace.model import InterferenceModel
    from interplace.placement import POLICIES
    from interplace.serve import Extender, KubeSync, build_app, connect

    try:
        import uvicorn
    except ImportError:
        raise InputError('interplace serve needs its extra: pip install "interplace[serve]"') \
            from None
    if args.policy not in POLICIES:
        raise InputError(f"unknown policy {args.policy!r} (choose from {', '.join(POLICIES)})")
    if args.port > 65535:
        raise InputError(f"--port must be at most 65535, not {args.port}")
    try:
        family, kind, proto, _, where = socket.getaddrinfo(
            args.host, args.port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError(f"--host {args.host!r}: cannot listen there ({first_line(exc)})") \
            from None
    with socket.socket(family, kind, proto) as probe:  # as uvicorn will (it exits 3 otherwise)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(where)
        except OSError as exc:
            raise InputError(f"cannot listen on {args.host}:{args.port}: "
                             f"{exc.strerror or exc}") from None
    topologies = node_topologies(args.topology, args.node_topology)
    model = InterferenceModel.load(args.model)

    def topology_for(node: str) -> Topology | None:
        if isinstance(topologies, dict):
            return topologies.get(node)
        return topologies

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                        stream=sys.stderr)
    extender = Extender(model, topology_for, policy=args.policy, max_per_gpu=args.max_per_gpu,
                        deadline_s=args.deadline, assume_ttl_s=args.assume_ttl)
    sync = None
    if not args.standalone:
        sync = KubeSync(connect(), extender)
        extender.binder = sync.bind
        extender.fetch_pod = sync.read
        sync.start()
    app = build_app(extender, health=None if sync is None else sync.problem)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    if sync is not None:
        sync.stop()
    return 0


def register(sub: Subparsers) -> None:
    """Add the ``serve`` command to the ``interplace`` parser."""
    p = sub.add_parser(
        "serve",
        help="serve placement to kube-scheduler as a scheduler extender",
        description="Run the HTTP scheduler extender (filter, prioritize, bind, preempt): "
        "pods labelled interplace.io/job-type get the GPUs whose predicted slowdown is "
        "smallest; see deploy/kubernetes/ for the scheduler configuration.",
    )
    p.add_argument("--model", required=True, metavar="M", help="model directory (fit)")
    p.add_argument("--topology", metavar="T", help="every node's topology: file or built-in")
    p.add_argument("--node-topology", metavar="DIR",
                   help="a topology file (or recording) per node, named after the node "
                   "(exactly, or with an extension: gpu-1 or gpu-1.xml for node gpu-1)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1, this machine only; "
                   "0.0.0.0 to serve a cluster's scheduler through a Service)")
    p.add_argument("--port", type=int_at_least(1), default=8888, help="port (default: 8888)")
    p.add_argument("--policy", default="local-search", metavar="NAME",
                   help="placement policy (default: local-search)")
    p.add_argument("--max-per-gpu", type=int_at_least(1), default=2, metavar="K",
                   help="jobs per GPU at most (default: 2)")
    p.add_argument("--deadline", type=positive_number, default=2.0, metavar="S",
                   help="most seconds a prioritize call takes, from the request's "
                   "arrival; nodes not scored by then get the neutral score (default: 2)")
    # serve._extender.ASSUME_TTL_S (not imported here: the serve extra may be absent)
    p.add_argument("--assume-ttl", type=positive_number, default=300.0, metavar="S",
                   help="seconds a bind's booking waits for the pod watch to show the pod "
                   "bound before it is dropped (default: 300)")
    p.add_argument("--standalone", action="store_true",
                   help="no API server: bind only records (trials and tests)")
    p.set_defaults(func=_run)
