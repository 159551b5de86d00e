"""latbench: latency benchmarking and load testing for AI inference APIs."""

__version__ = "0.1.0"
