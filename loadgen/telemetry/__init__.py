"""Server and GPU telemetry: an engine's own Prometheus names mapped onto one set of quantities.

:mod:`~loadgen.telemetry.adapters` says, per engine (vLLM, SGLang, TGI, Triton/KServe, the bundled reference server)
and per GPU source (NVML, a DCGM exporter), which of its samples give each quantity of the metric registry's
``server.*`` and ``gpu.*`` entries; :mod:`~loadgen.telemetry.promseries` turns raw scraped samples (``time, metric,
labels, value``) into per-phase figures and a time series. Pure data and arithmetic: no I/O, no threads.
"""
