"""Monitoring output of ``latbench watch`` and ``latbench alerts`` / ``dashboards``: the sliding window of recent
records, the Prometheus exposition and its HTTP server, histogram buckets, alert rules and the Grafana dashboard.

A stage after ``analysis`` (it reads records through the one metric definitions there) and before ``run``
(``run.watch`` serves it)."""
