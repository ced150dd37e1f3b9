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
import sys
from collections.abc import Sequence
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

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``interplace`` console command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
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
    except KeyboardInterrupt:
        sys.stderr.write("interplace: interrupted\n")
        return 130
