"""pytest configuration for the whole tree: ``tests/`` and the doctests of ``src/``."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _temporary_files_under_pytest_basetemp(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[None]:
    """What the run makes with :mod:`tempfile` goes under pytest's own base directory.

    The docstrings' examples make their files with ``tempfile.mkdtemp()``, as a user would
    at a prompt, and the commands some tests run spawn processes that make their own; each
    of those would otherwise stay in the system's temporary directory after every run (about
    twenty directories a run). pytest keeps only its last three base directories. ``TMPDIR``
    carries the place to the processes a test starts.
    """
    base = tmp_path_factory.mktemp("tempfile", numbered=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(base))
        patch.setenv("TMPDIR", str(base))
        yield
