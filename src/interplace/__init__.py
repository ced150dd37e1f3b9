"""interplace: interference-aware placement of GPU jobs.

Layers, lowest first (a layer never imports a higher one)::

    collectors -> datasets -> topology -> model -> placement

This release delivers :mod:`interplace.topology`; the other layers are filled in by later
releases. The command-line entry point is :mod:`interplace.cli` (``interplace --help``).
"""

from interplace.errors import InputError

__version__ = "0.1.0"
__all__ = ["InputError", "__version__"]
