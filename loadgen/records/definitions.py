"""What every metric in a RunDir means and in which unit: written to metrics.json, one definition each.

The definitions live in :mod:`loadgen.metric_registry`, with everything else said about a metric; this module
gives metrics.json its shape."""

from loadgen import metric_registry

SCHEMA_VERSION = 1


def metric_definitions() -> dict[str, dict[str, str]]:
    """metrics.json's ``metrics``: name -> unit and definition, of every registered metric."""
    return metric_registry.definitions()
