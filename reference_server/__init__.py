"""latbench reference inference server.

A real (small) decoder-only transformer behind an OpenAI-compatible HTTP API, with switchable serving
architectures (lazy vs preloaded, warm-up, continuous batching, result cache, precision, fault injection),
so that latbench users can measure architectures against something that does real model work.

This package is a separate program: it imports nothing from ``loadgen`` or ``reports``. Importing it has no
side effects; start it with ``python -m reference_server`` or :func:`reference_server.server.run_server`.
"""
