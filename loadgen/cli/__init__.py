"""The ``latbench`` command line: thin commands that parse flags, call library functions, and print."""

from loadgen.cli.main import main

__all__ = ["main"]
