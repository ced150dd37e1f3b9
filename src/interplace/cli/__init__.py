"""The ``interplace`` command line.

One module per command (``interplace place`` lives in :mod:`interplace.cli.place`), each with a
``register(sub)`` that adds its parser and handler; :func:`main` registers them in
:data:`COMMANDS` order. Command modules import their heavy dependencies inside the handler, so
``interplace --help`` (and importing this package inside a host scheduler) stays cheap.

Every subcommand reports bad input as one line on stderr (``interplace: error: ...``) and
exits with status 2, without a traceback (``--debug`` shows it) and without leaving a partial
output file behind.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import NoReturn

from interplace import __version__
from interplace.errors import InputError, first_line

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS: tuple[str, ...] = (
    "topo",
    "ingest",
    "collect",
    "profile",
    "fit",
    "predict",
    "evaluate",
    "place",
    "train_policy",
    "simulate",
    "serve",
    "stability",
    "demo",
    "tune",
)
"""The command modules of :mod:`interplace.cli`, in the order ``--help`` lists them."""


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line, as every other error of the command is:
    ``interplace fit: error: argument --steps: ... (interplace fit --help)``, exit status 2
    (argparse prints the whole usage block first)."""

    commands: Mapping[str, argparse.ArgumentParser] = {}
    """Each command's own parser (set on the top-level one by :func:`build_parser`)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but an argument no parser knows is reported by the command's parser,
        which points to that command's ``--help``, not the top level's."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            where = self.commands.get(getattr(parsed, "command", None) or "", self)
            where.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def build_parser() -> argparse.ArgumentParser:
    """The ``interplace`` argument parser with every command of :data:`COMMANDS` registered.

    >>> sorted(build_parser().parse_args(["topo", "p4d"]).__dict__)[:3]
    ['command', 'debug', 'discover']
    """
    parser = _Parser(
        prog="interplace",
        description="Interference-aware placement of GPU jobs.",
    )
    parser.add_argument("--version", action="version", version=f"interplace {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"interplace.cli.{name}").register(sub)
    parser.commands = dict(sub.choices)
    return parser


class _Terminated(BaseException):
    """SIGTERM, raised where the command is (as Ctrl-C raises KeyboardInterrupt), so that
    what it was writing is removed on the way out (:func:`~interplace.errors.atomic_write`)
    instead of left as a temporary file. Not an ``Exception``: nothing catches it on the way."""


def _terminated(signum: int, frame: object) -> NoReturn:
    raise _Terminated


def _out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says an allocation failed (Python's MemoryError, torch's)."""
    text = str(exc)
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text.lower()))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``interplace`` console command; returns the exit status
    (2 for bad input or too little memory, 130 for Ctrl-C, 143 for SIGTERM)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handles = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if handles else None
    try:
        return int(args.func(args))
    except (InputError, OSError) as exc:
        if args.debug:
            raise
        msg = first_line(exc)
        if isinstance(exc, OSError) and exc.filename and exc.strerror:
            msg = f"{exc.strerror}: {exc.filename}"
        sys.stderr.write(f"interplace: error: {msg}\n")
        return 2
    except (MemoryError, RuntimeError) as exc:
        if args.debug or not _out_of_memory(exc):
            raise
        sys.stderr.write(f"interplace: error: out of memory ({first_line(exc)[:120]}): ask "
                         "for fewer samples, or give a smaller input\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interplace: interrupted\n")
        return 130
    except _Terminated:
        sys.stderr.write("interplace: terminated\n")
        return 128 + signal.SIGTERM
    finally:
        if handles:
            signal.signal(signal.SIGTERM, previous)
