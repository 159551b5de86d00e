"""``python -m loadgen.cli``: the same as the ``latbench`` command."""

from loadgen.cli.main import main

main()
