"""The ``interplace`` command line.

Every subcommand reports bad input as one line on stderr (``interplace: error: ...``) and
exits with status 2, without a traceback (``--debug`` shows it) and without leaving a partial
output file behind.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from interplace import __version__
from interplace.errors import InputError

if TYPE_CHECKING:
    from interplace.topology import Topology

__all__ = ["main"]


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


def _cmd_topo(args: argparse.Namespace) -> int:
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
        sys.stdout.write(_summary(topo) + "\n" + to_nvidia_smi(topo))
        if args.plot:
            sys.stdout.write(f"\nplot written to {args.plot}\n")
    return 0


def _summary(topo: Topology) -> str:
    machines = len(topo.machines())
    return (f"{topo.name}: {len(topo.gpus())} GPUs, {machines} machine{'s' * (machines > 1)}, "
            f"{topo.numa_nodes} NUMA nodes, {topo.pcie_switches} PCIe switches, "
            f"{len(topo.nics())} NICs\n")


def _cmd_demo(args: argparse.Namespace) -> int:
    from interplace.topology import builtin
    from interplace.topology.nvsmi import to_nvidia_smi
    from interplace.topology.plot import plot_topology

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    w = sys.stdout.write
    w("interplace demo: a built-in machine, its connection matrix and contention domains\n\n")
    topo = builtin(args.topology)
    w(_summary(topo) + "\n" + to_nvidia_smi(topo) + "\n")
    gpus = topo.gpus()
    far = next((g for g in gpus if topo.connection(gpus[0], g) == "SYS"), gpus[-1])
    sets: list[list[str]] = [gpus[:2], [gpus[0], far], gpus[: len(gpus) // 2]]
    w("Shared contention domains of a few GPU sets (resources two or more of them use):\n")
    for s in sets:
        w(_describe_set(topo, s))
    plot = out / f"{topo.name}.png"
    plot_topology(topo, plot)
    w(f"\nplot written to {plot}\n")
    two = builtin(f"{args.topology}*2")
    a, b = two.gpus()[0], two.gpus()[len(gpus)]
    w(f"\nTwo such machines on one network ({two.name}): GPUs {a} and {b}\n")
    w(_describe_set(two, [a, b]))
    return 0


def _describe_set(topo: Topology, gpus: list[str]) -> str:
    pairs = [(a, b, topo.path(a, b)) for a, b in itertools.combinations(gpus, 2)]
    classes = sorted({p.connection for _, _, p in pairs})
    slowest = min(pairs, key=lambda t: t[2].bottleneck)
    shared = [d for d in topo.domains(gpus) if len(d.gpus) > 1]
    lines = [f"  GPUs {{{','.join(gpus)}}}: connections {'/'.join(classes)}; slowest pair "
             f"{slowest[0]}-{slowest[1]} at {slowest[2].bottleneck:.1f} GB/s"]
    for d in shared:
        bw = "" if d.bandwidth is None else f" ({d.bandwidth:.1f} GB/s)"
        lines.append(f"    {d.kind:<12} {d.name}{bw} used by {','.join(d.gpus)}")
    return "\n".join(lines) + "\n"


def _cmd_ingest(args: argparse.Namespace) -> int:
    from interplace.collectors import ingest, write_samples

    fields = [f.strip() for f in args.fields.split(",") if f.strip()] if args.fields else None
    df = ingest(args.file, format=args.format, host=args.host, fields=fields,
                interval_s=args.interval)
    write_samples(df, args.out)
    n_dev = df["device"].nunique()
    n_met = df["metric"].nunique()
    sys.stdout.write(f"{args.file}: {df.attrs.get('format', args.format)}, {len(df)} samples, "
                     f"{n_met} metrics, {n_dev} devices -> {args.out}\n")
    unsupported = df.attrs.get("unsupported")
    if unsupported:
        names = ", ".join(sorted(unsupported))
        sys.stdout.write(f"readings marked unavailable in the input for: {names}\n")
    return 0


def _cmd_collect(args: argparse.Namespace) -> int:
    from interplace.collectors import collect

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if args.interval_ms <= 0:
        raise InputError(f"--interval-ms must be positive, got {args.interval_ms}")
    result = collect(cmd or None, args.out, interval_s=args.interval_ms / 1000.0,
                     duration_s=args.duration, progress=sys.stderr.isatty(), run_id=args.run_id)
    if result.note:
        sys.stderr.write(f"interplace: {result.note}\n")
    s = result.summary
    sys.stderr.write(f"interplace: {s.rows} readings from {s.samples} samples over "
                     f"{s.seconds:.1f} s ({', '.join(result.backends)}) -> {args.out}\n")
    if result.returncode is None:
        return 0
    return 128 - result.returncode if result.returncode < 0 else result.returncode


def _cmd_profile(args: argparse.Namespace) -> int:
    from interplace.collectors.profile import parse_workloads, profile

    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    workloads = parse_workloads(args.workloads)
    out = profile(workloads, args.out, modes=modes, warmup_s=args.warmup,
                  measure_s=args.measure, device=args.device, pairs=not args.no_pairs,
                  progress=sys.stderr.isatty())
    n = len(workloads)
    sys.stdout.write(f"profiled {n} workloads alone"
                     f"{'' if args.no_pairs else f' and in {n * (n + 1) // 2} pairs'} "
                     f"({', '.join(modes)}) -> {out}/runs.csv, {out}/samples.csv\n")
    return 0


def _build_parser() -> argparse.ArgumentParser:
    from interplace.topology import builtin_names

    parser = argparse.ArgumentParser(
        prog="interplace",
        description="Interference-aware placement of GPU jobs.",
    )
    parser.add_argument("--version", action="version", version=f"interplace {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    topo = sub.add_parser(
        "topo", help="show a machine topology (file, built-in or live)",
        description="Show a topology as an nvidia-smi-style matrix, JSON or a plot. "
        f"Built-ins: {', '.join(builtin_names())} (NAME*N for N machines on one network).",
    )
    topo.add_argument("spec", nargs="?", metavar="FILE_OR_BUILTIN",
                      help="nvidia-smi topo -m text, NCCL topology XML, hwloc XML, or a built-in")
    topo.add_argument("--format", default="auto", choices=["auto", "nvidia-smi", "nccl", "hwloc"],
                      help="file format (default: detect from content)")
    topo.add_argument("--json", action="store_true", help="print the topology summary as JSON")
    topo.add_argument("--plot", metavar="OUT", help="write a layered drawing (.png, .svg, .pdf)")
    topo.add_argument("--discover", action="store_true",
                      help="read this machine's topology from NVML and sysfs")
    topo.add_argument("--record", metavar="DIR",
                      help="with --discover: save the NVML and sysfs readings to DIR as a fixture")
    topo.set_defaults(func=_cmd_topo)

    from interplace.collectors import FORMATS

    ing = sub.add_parser(
        "ingest", help="convert counter output a cluster already produces to the long table",
        description="Convert nvidia-smi --query-gpu CSV, nvidia-smi dmon, perf stat -x, -I or "
        "dcgm-exporter Prometheus text into interplace's long counter table "
        "(t_s, host, device, metric, value).",
    )
    ing.add_argument("file", metavar="FILE", help="captured counter output")
    ing.add_argument("--format", default="auto", choices=["auto", *FORMATS],
                     help="input format (default: detect from content)")
    ing.add_argument("--out", required=True, metavar="OUT",
                     help="output table: .csv or .parquet")
    ing.add_argument("--host", help="host name to record (default: from the input or localhost)")
    ing.add_argument("--fields", metavar="A,B,...",
                     help="nvidia-smi --query-gpu field list, for noheader output")
    ing.add_argument("--interval", type=float, metavar="SECONDS",
                     help="sampling interval, for input without time stamps (dmon, prometheus)")
    ing.set_defaults(func=_cmd_ingest)

    col = sub.add_parser(
        "collect", help="sample GPU (NVML) and host counters, optionally while a command runs",
        description="Sample NVML and host counters into the long table, like `perf stat -- CMD`: "
        "sampling stops when CMD exits (or after --duration) and CMD's exit code is returned.",
    )
    col.add_argument("--out", required=True, metavar="OUT", help="output table: .csv or .parquet")
    col.add_argument("--interval-ms", type=float, default=100.0,
                     help="sampling interval in milliseconds (default: 100)")
    col.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    col.add_argument("--run-id", help="run id to record on every row")
    col.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                     help="command to run while sampling")
    col.set_defaults(func=_cmd_collect)

    prof = sub.add_parser(
        "profile", help="measure workloads alone and in every pair on one GPU",
        description="Run each workload alone and every pair together on one device (co-runners "
        "start at the same instant), measure each one's throughput over the same window from "
        "its INTERPLACE_PROGRESS lines, sample counters throughout, and write runs.csv + "
        "samples.csv. SPEC: built-in names (gemm,memcpy,h2d,d2h,launch,cnn,transformer,"
        "cpu_pipeline; NAME:SIZE sets a size) or a .json/.toml file of {name, command} jobs.",
    )
    prof.add_argument("--workloads", required=True, metavar="SPEC")
    prof.add_argument("--out", required=True, metavar="DIR", help="output directory (new)")
    prof.add_argument("--modes", default="timeslice",
                      help="comma list of sharing modes: timeslice, mps (default: timeslice)")
    prof.add_argument("--warmup", type=float, default=2.0, metavar="S",
                      help="seconds before the measurement window (default: 2)")
    prof.add_argument("--measure", type=float, default=5.0, metavar="S",
                      help="length of the measurement window (default: 5)")
    prof.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    prof.add_argument("--no-pairs", action="store_true", help="only the isolated runs")
    prof.set_defaults(func=_cmd_profile)

    demo = sub.add_parser(
        "demo", help="run interplace end to end on built-in data",
        description="Show a built-in topology, the contention domains of a few GPU sets, and "
        "write its plot.",
    )
    demo.add_argument("--topology", default="dgx1-v100", choices=builtin_names(),
                      help="built-in machine to use (default: dgx1-v100)")
    demo.add_argument("--out", default="interplace-demo", help="output directory for the plot")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``interplace`` console command; returns the exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (InputError, OSError) as exc:
        if args.debug:
            raise
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, OSError) and exc.filename and exc.strerror:
            msg = f"{exc.strerror}: {exc.filename}"
        sys.stderr.write(f"interplace: error: {msg}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interplace: interrupted\n")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
