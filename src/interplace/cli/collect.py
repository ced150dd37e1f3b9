"""``interplace collect``: sample NVML and host counters, optionally while a command runs."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from interplace.cli._common import Subparsers, write_unsupported_notes
from interplace.errors import InputError

__all__ = ["register"]



def _run(args: argparse.Namespace) -> int:
    import os
    import signal

    from interplace.collectors import collect, partial_path
    from interplace.collectors.collect import Terminated

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    # Checked here, not left to collect(), whose messages speak of the sampling interval in
    # seconds: this command's options are --interval-ms (milliseconds) and --duration.
    if not (math.isfinite(args.interval_ms) and args.interval_ms > 0):
        raise InputError("--interval-ms must be positive (a finite number of milliseconds), "
                         f"got {args.interval_ms:g}")
    if args.duration is not None and not (math.isfinite(args.duration) and args.duration > 0):
        raise InputError("--duration must be positive (a finite number of seconds), "
                         f"got {args.duration:g}")
    if args.run_id is not None and not args.run_id.strip():
        raise InputError("--run-id must not be empty")

    def stamp(path: os.PathLike[str]) -> tuple[int, int] | None:
        """Identifies this version of ``path``: a file or directory written since differs."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    out, partial = Path(args.out), partial_path(args.out)
    before = {p: stamp(p) for p in (out, partial)}
    try:
        result = collect(
            cmd or None,
            args.out,
            interval_s=args.interval_ms / 1000.0,
            duration_s=args.duration,
            progress=sys.stderr.isatty(),
            run_id=args.run_id,
        )
    except (KeyboardInterrupt, Terminated) as exc:
        how = "interrupted" if isinstance(exc, KeyboardInterrupt) else "terminated"
        if stamp(out) not in (None, before[out]):  # after sampling had written the table
            where = f"the samples are in {out}"
        elif stamp(partial) not in (None, before[partial]):
            where = (f"the samples taken so far are in {partial} "
                     "(interplace.collectors.read_partial reads them)")
        else:  # before sampling started (an older .partial is not this run's)
            where = "no samples were written"
        sys.stderr.write(f"interplace: {how}; {where}\n")
        return 130 if isinstance(exc, KeyboardInterrupt) else 128 + signal.SIGTERM
    if result.note:
        sys.stderr.write(f"interplace: {result.note}\n")
    if result.summary.samples == 0 and cmd:
        sys.stderr.write(f"interplace: {cmd[0]} ended before the first sample: nothing of it "
                         "was measured\n")
    if result.stopped and args.duration is not None:
        sys.stderr.write(f"interplace: {cmd[0]} was still running after --duration "
                         f"{args.duration:g} s and was stopped (its exit status follows)\n")
    write_unsupported_notes(result.summary.unsupported)
    s = result.summary
    sys.stderr.write(
        f"interplace: {'terminated by SIGTERM: ' if result.terminated else ''}"
        f"{s.rows} readings from {s.samples} samples over "
        f"{s.seconds:.1f} s ({', '.join(result.backends)}) -> {args.out}\n"
    )
    if result.terminated:
        return 128 + signal.SIGTERM
    if result.returncode is None:
        return 0
    return 128 - result.returncode if result.returncode < 0 else result.returncode


def register(sub: Subparsers) -> None:
    """Add the ``collect`` command to the ``interplace`` parser."""
    col = sub.add_parser(
        "collect",
        help="sample GPU (NVML) and host counters, optionally while a command runs",
        description="Sample NVML and host counters into the long table, like `perf stat -- CMD`: "
        "sampling stops when CMD exits (or after --duration) and CMD's exit code is returned.",
    )
    col.add_argument("--out", required=True, metavar="OUT", help="output table: .csv or .parquet")
    col.add_argument(
        "--interval-ms",
        type=float,
        default=100.0,
        help="sampling interval in milliseconds (default: 100)",
    )
    col.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    col.add_argument("--run-id", help="run id to record on every row")
    col.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="command to run while sampling"
    )
    col.set_defaults(func=_run)
