"""The serving engine: the worker thread that schedules every forward pass (continuous batching, chunked
prefill), the result and prefix caches, fault injection, Prometheus metrics, and the parent lifeline. It runs
the model backends of :mod:`reference_server.models` and knows nothing of HTTP or gRPC."""
