"""latbench's version (its own module, so that reading it imports nothing else)."""

__version__ = "0.1.0"
