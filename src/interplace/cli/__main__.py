"""``python -m interplace.cli``: the same as the ``interplace`` command."""

from interplace.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
