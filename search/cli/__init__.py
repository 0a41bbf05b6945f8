"""The ``search`` command line: click commands over :mod:`search.api`.

Imports here stay light so that ``search --help`` answers at once.
"""

from search.cli._group import cli
from search.cli._main import EXIT_INTERRUPTED, EXIT_USAGE, main, run

__all__ = ["EXIT_INTERRUPTED", "EXIT_USAGE", "cli", "main", "run"]
