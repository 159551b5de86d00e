"""``target.reset``: empty the engine's prefix cache before a run, so that no run starts warm from the last one.

A prefix cache warmed by one run makes the next one faster: the repeats of ``--repeat`` against one server, or
two runs in a row against a deployment, would then measure different servers. With ``reset: prefix_cache``
latbench POSTs to the engine's reset endpoint before each run, each repetition and each capacity step (and once
before a watch's probe), after the pre-flight check, through its one non-load client (:mod:`loadgen.fetch`: a
deadline, a size cap, the target's headers sent to its own origin only), and records what happened
(:class:`~loadgen.records.results.StateReset`, in meta.json and summary.json):

- vLLM: ``POST /reset_prefix_cache``, served only when the server runs with ``VLLM_SERVER_DEV_MODE=1`` (latbench
  sets it for a ``command:`` target it starts itself with a reset asked);
- SGLang: ``POST /flush_cache``;
- the bundled reference server: ``POST /reset_prefix_cache`` (its prefix, result and image caches).

The endpoint sits at the server's root, not under the API's ``/v1``. The engine is the one a managed reference
target is, else the one its ``/metrics`` names, detected as the telemetry detects it
(:func:`loadgen.telemetry.adapters.detect`: one table of engines and their names), else the ``owned_by`` of its
``/v1/models`` (a server without /metrics); ``reset.url`` names the endpoint outright (a proxy, an unknown
engine). One idea at two stages: :mod:`loadgen.scenario.reset` (what a scenario may ask) and this module (the call).

An engine that cannot reset while requests hold its cache (vLLM answers ``{"success": false}``, SGLang 400) is
asked again for a few seconds: the last run's cancelled requests end within moments. A reset that cannot be
made is not a server failure: it never fails the run. The summary then says that the
cache carried over, and why (an endpoint that answers 404 or 405, an engine without one, a refusal).
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from loadgen.engine.scrape import MAX_BODY, parse_samples
from loadgen.fetch import FetchError, Response, fetch, safe_url
from loadgen.records.results import StateReset
from loadgen.scenario.reset import Reset
from loadgen.scenario.urls import join_url
from loadgen.telemetry import adapters

RESET_DEADLINE_S = 30.0  # a reset waits for the engine's step in progress; generous, and never more than this
BUSY_RETRY_S, BUSY_PAUSE_S = 10.0, 0.25  # an engine busy with requests is asked again, this long at most
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}  # what vLLM needs to serve /reset_prefix_cache

#: engine (as :mod:`loadgen.telemetry.adapters` names it) -> the path of its prefix-cache reset (absent: it has none)
RESET_PATHS: dict[str, str] = {"vllm": "/reset_prefix_cache", "sglang": "/flush_cache",
                               "refserver": "/reset_prefix_cache"}
#: ``owned_by`` of an engine's /v1/models entries -> the engine, where its /metrics cannot tell
OWNERS = {"vllm": "vllm", "sglang": "sglang", "latbench": "refserver"}
WHAT = {"prefix_cache": "prefix cache"}


def server_root(url: str) -> str:
    """``scheme://host:port`` of ``url``: where an engine's own endpoints are (not under ``/v1``)."""
    p = urlsplit(url)
    return f"{p.scheme}://{p.netloc.rsplit('@', 1)[-1]}"


def detect_engine(url: str, metrics_url: str | None, headers: dict[str, str]) -> tuple[str | None, str | None]:
    """(engine, how it was found: ``metrics`` or ``models``), or (None, None): the engine whose names
    ``metrics_url`` (default: the server root's ``/metrics``) exposes most, as the telemetry reads it
    (:func:`loadgen.telemetry.adapters.detect`), else the ``owned_by`` of ``url``'s ``/models``."""
    try:
        resp = fetch("GET", metrics_url or server_root(url) + "/metrics", headers=headers, max_bytes=MAX_BODY)
        found = adapters.detect({n for n, _, _ in parse_samples(resp.body.decode("utf-8", "replace"))}) \
            if resp.ok else None
        if found is not None:
            return found.engine, "metrics"
    except (FetchError, ValueError):  # no /metrics, or not Prometheus text: the model list may tell
        pass
    try:
        resp = fetch("GET", join_url(url, "/models"), headers=headers)
        owners = {str(m.get("owned_by", "")).lower() for m in resp.json().get("data", [])} if resp.ok else set()
    except (FetchError, ValueError, AttributeError, TypeError):
        return None, None
    engine = next((OWNERS[o] for o in sorted(owners) if o in OWNERS), None)
    return engine, ("models" if engine else None)


def reset_state(spec: Reset, url: str, metrics_url: str | None = None, headers: dict[str, str] | None = None,
                engine: str | None = None) -> StateReset:
    """Empty what ``spec`` names on the server of API base ``url``; never raises for the server's sake.

    ``engine``: known already (a managed reference server), else detected (:func:`detect_engine`) unless
    ``spec.url`` gives the endpoint. ``headers``: the target's own, sent to that server only and never written."""
    headers = headers or {}
    found_by = "given" if spec.url else ("managed" if engine else None)
    if spec.url is None and engine is None:
        engine, found_by = detect_engine(url, metrics_url, headers)
    label = adapters.BY_NAME[engine].label if engine in adapters.BY_NAME else None
    path = RESET_PATHS.get(engine) if engine else None
    base = StateReset(what=spec.what, done=False, engine=engine, found_by=found_by, at=time.time())
    if spec.url is None and engine is None:
        return _carried(base, "not available", "latbench cannot tell the engine (neither its /metrics nor its "
                                               "/v1/models names vLLM, SGLang or the reference server); give "
                                               "reset.url")
    if spec.url is None and path is None:
        return _carried(base, "not available", f"{label} has no endpoint that empties its prefix cache")
    endpoint = spec.url or server_root(url) + path
    base.url = safe_url(endpoint)
    t0 = time.perf_counter()
    while True:
        try:
            resp = fetch("POST", endpoint, headers=headers, deadline_s=RESET_DEADLINE_S)
        except FetchError as exc:
            base.seconds = time.perf_counter() - t0
            return _carried(base, "failed", f"POST {base.url}: {exc.detail}")
        if not _busy(resp) or time.perf_counter() - t0 > BUSY_RETRY_S:
            break
        time.sleep(BUSY_PAUSE_S)  # the last run's requests still hold blocks: they end within moments
    base.seconds, base.status = time.perf_counter() - t0, resp.status
    return _judged(base, resp, label or "the server")


def _refused(resp: Response) -> bool:
    """vLLM's answer to a reset it could not make: HTTP 200 with ``{"success": false}``."""
    try:
        return resp.ok and resp.json().get("success") is False
    except (ValueError, AttributeError):
        return False


def _busy(resp: Response) -> bool:
    """The engine could not reset now because requests still run: vLLM's ``success: false``, SGLang's 400."""
    return _refused(resp) or resp.status == 400


def _judged(base: StateReset, resp: Response, label: str) -> StateReset:
    where = f"POST {urlsplit(base.url).path}"
    if resp.ok and not _refused(resp):
        base.done = True
        base.text = f"{WHAT[base.what]} reset before the run ({label}, {where}: HTTP {resp.status})"
        return base
    if resp.status in (404, 405):
        hint = " (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)" if base.engine == "vllm" else ""
        return _carried(base, "not available", f"{label} answered HTTP {resp.status} to {where}{hint}")
    busy = f" for {BUSY_RETRY_S:g} s (requests still held its blocks)" if _busy(resp) else ""
    said = "success: false" if _refused(resp) else f"HTTP {resp.status}"
    return _carried(base, "failed", f"{label} answered {said} to {where}{busy}")


def _carried(base: StateReset, how: str, why: str) -> StateReset:
    base.reason = why
    base.text = f"{WHAT[base.what]} carried over from earlier runs (reset {how}: {why})"
    return base
