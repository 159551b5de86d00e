"""The pre-flight check: before any load, is the target there, at this URL, with this model, answering in its API's
shape? A wrong URL costs a few seconds and says what is wrong, instead of a scenario's worth of failed requests.

Per target, through latbench's one non-load client (:mod:`loadgen.fetch`):

1. ``GET {url}/models`` where the API has it (the OpenAI-style ones): unreachable, a 401/403, a model the server
   does not list, or an answer that is not JSON stop the run here.
2. One minimal request, built by the target's own protocol (a one-word prompt, one output token; for
   ``openai-transcriptions`` a quarter second of WAV uploaded) and read by the protocol's own response handler:
   the same rules decide whether its answer is a success as during the run. It is not recorded. A 404/405, a
   401/403, another 4xx, a redirect or a body that is not the API's shape stop the run; a 5xx, a 429 or a timeout
   are the service's own and only noted (the run measures them).

A fresh-start study (``load.starts``) measures the first request a server ever serves, so there nothing touches
the model before it: only the model list is asked (``generate=False``).

When the URL has no ``/v1`` and an OpenAI-style API answers 404 there but answers under ``{url}/v1``, the check
says so; for a ``--target`` given on the command line (``fix_prefix``) it uses the prefixed URL and says that.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from loadgen.errors import UsageError
from loadgen.fetch import FetchError, fetch, safe_url
from loadgen.protocols.base import StopResponse
from loadgen.protocols.registry import make_protocol
from loadgen.records.results import Preflight
from loadgen.records.schema import Outcome
from loadgen.redact import escape_control
from loadgen.scenario.audio import minimal_clip
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.prompts import Prompt
from loadgen.scenario.tokenizer import ServerTokenizer, TokenizerError
from loadgen.scenario.urls import join_url

MODELS_APIS = ("openai-chat", "openai-completions", "embeddings", "openai-responses", "openai-transcriptions")
PREFIXED_APIS = MODELS_APIS + ("anthropic-messages", "rerank")  # served under /v1 by the servers latbench knows
DEADLINE_S = 5.0  # the model list, a connect
GENERATE_DEADLINE_S = 10.0  # the minimal request: slower than this, it is the service's (measured by the run)
SHOWN_BYTES = 120
REDACTED_BYTES = 8192  # of a body, redacted whole before its first SHOWN_BYTES are shown
PREFLIGHT_HEADER = "X-Latbench-Preflight"  # on the minimal request, so a server's log can tell it from the load


@dataclass
class Check:
    """The outcome of one target's pre-flight. ``problem`` None: go ahead (``notes`` may still warn).
    ``kind``: unreachable | not_found | auth | model | shape | refused | redirect."""

    url: str
    problem: str | None = None
    kind: str | None = None
    notes: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    model: str | None = None  # the model to send when the scenario names none: the first one listed here
    generated: bool = False  # the minimal request was sent
    status: int = 0  # the HTTP status that answered it
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.problem is None

    def result(self) -> Preflight:
        """The check as a summary and meta.json's target entry hold it."""
        return Preflight(ok=self.ok, url=self.url, problem=self.problem, kind=self.kind, notes=self.notes,
                         models=self.models, model=self.model, generated=self.generated, seconds=self.seconds)


def shown(body: bytes, redact: Callable[[str], str] = str) -> str:
    """The first bytes of a body as they may be printed: redacted before it is cut (a secret the server echoed is
    never cut into a prefix the redactor cannot know), control characters escaped."""
    text = redact(body[:REDACTED_BYTES].decode("utf-8", "replace"))
    out = escape_control(text[:SHOWN_BYTES])
    return repr(out + ("…" if len(text) > SHOWN_BYTES or len(body) > REDACTED_BYTES else ""))


def check_tokenizer(target: Target, url: str, model: str | None, workload: Workload) -> None:
    """``workload.tokenizer: server``: the target's ``/tokenize`` answers, before anything is sent to its API
    (prompts are built with it). A UsageError otherwise: the scenario asks what the target does not serve."""
    if workload.tokenizer != "server" or not url.startswith(("http://", "https://")):
        return
    tok = ServerTokenizer(url, dict(target.headers), model or None)
    try:
        tok.encode("Hello")
    except TokenizerError as exc:
        raise UsageError(f"workload.tokenizer: {exc}") from None
    finally:
        tok.close()


def preflight(target: Target, url: str, model: str | None, workload: Workload, *, generate: bool = True,
              fix_prefix: bool = False, redact: Callable[[str], str] = str) -> Check:
    """Check ``target`` at ``url`` (resolved) before any load; see the module's docstring. ``redact``: the run's
    redaction, applied to what a server said before any of it is quoted."""
    t0 = time.perf_counter()
    check = _check(target, url, model, workload, generate, redact)
    if check.kind in ("not_found", NO_MODELS) and target.api in PREFIXED_APIS and not _has_v1(url):
        prefixed = url.rstrip("/") + "/v1"
        again = _check(target, prefixed, model, workload, generate, redact)
        if again.ok and again.kind != NO_MODELS:
            if fix_prefix:
                again.notes.insert(0, f"{safe_url(url)} has no /v1 and answers 404; {safe_url(prefixed)} answers: "
                                      "using it")
                check = again
            else:
                check.kind = "not_found"
                check.problem = ((check.problem or f"{safe_url(join_url(url, '/models'))} answered HTTP 404")
                                 + f"; {safe_url(prefixed)} answers: add /v1 to the target's url")
    if check.kind == NO_MODELS:  # no model list, and nothing else said the URL is wrong: a note only
        check.kind = None
    check.seconds = time.perf_counter() - t0
    return check


NO_MODELS = "no_model_list"


def _has_v1(url: str) -> bool:
    return urlsplit(url).path.rstrip("/").endswith("/v1")


def _check(target: Target, url: str, model: str | None, workload: Workload, generate: bool,
           redact: Callable[[str], str]) -> Check:
    check = Check(url)
    if url.startswith(("grpc://", "grpcs://")):
        _connect(check, url)
        return check
    headers = dict(target.headers)
    if target.api in MODELS_APIS:
        _models(check, target, url, headers, model, redact)
        unlisted = check.kind == "model"
        if unlisted and generate:  # the minimal request decides: refused, the list is what the user needs
            listed, check.kind, check.problem = check.problem, None, None
            _generate(check, target, url, model, workload, redact)
            if check.ok:
                check.notes.append(listed.replace("the server does not list", "the server does not list the") +
                                   "; it answered a request for it all the same")
            elif check.kind in ("not_found", "refused"):
                check.problem = f"{listed} (a request for it answered HTTP {check.status})"
                check.kind = "model"
            return check
        if not check.ok or not generate:
            return check
    if generate:
        neutral = "" if target.api == "http" else "default"  # no model named, none listed: what the run sends
        _generate(check, target, url, check.model or model or neutral, workload, redact)
    elif target.api not in MODELS_APIS:
        _connect(check, url)
    return check


def _fail(check: Check, kind: str, problem: str) -> None:
    check.kind, check.problem = kind, problem


def _unreachable(check: Check, exc: FetchError) -> None:
    if exc.kind in ("connect", "dns", "tls", "timeout"):
        _fail(check, "unreachable", f"{exc.url} is unreachable: {exc.detail}")
    elif exc.kind == "redirect":
        _fail(check, "redirect", f"{exc.url}: {exc.detail}")
    else:
        _fail(check, "shape", f"{exc.url}: {exc.detail}")


def _auth(check: Check, asked: str, status: int, headers: dict) -> None:
    sent = ", ".join(sorted(headers)) or "none"
    _fail(check, "auth", f"{asked} answered HTTP {status}: the server wants other credentials (headers sent: {sent}; "
                         "values never shown). Give the key as ${ENV} in the target's headers, e.g. "
                         "Authorization: 'Bearer ${OPENAI_API_KEY}'")


def _connect(check: Check, url: str) -> None:
    p = urlsplit(url)
    try:
        port = p.port or (443 if p.scheme in ("https", "grpcs") else 80)
        with socket.create_connection((p.hostname or "", port), timeout=DEADLINE_S):
            pass
    except (OSError, ValueError) as exc:
        _fail(check, "unreachable", f"{safe_url(url)} is unreachable: {getattr(exc, 'strerror', None) or exc}")


def _models(check: Check, target: Target, url: str, headers: dict, model: str | None,
            redact: Callable[[str], str]) -> None:
    asked = join_url(url, "/models")
    try:
        resp = fetch("GET", asked, headers=headers, deadline_s=DEADLINE_S)
    except FetchError as exc:
        _unreachable(check, exc)
        return
    if resp.status in (401, 403):
        _auth(check, safe_url(asked), resp.status, headers)
    elif resp.status in (404, 405):
        check.notes.append(f"{safe_url(asked)} answered HTTP {resp.status} (no model list)")
        check.kind = NO_MODELS  # decided by the minimal request, or by the /v1 probe without one
    elif resp.ok:
        try:
            ids = [str(c["id"]) for c in resp.json()["data"]]
        except (ValueError, KeyError, TypeError):
            _fail(check, "shape", f"{safe_url(asked)} answered HTTP {resp.status} with something other than a model "
                                  f"list: {shown(resp.body, redact)}")
            return
        check.models = ids
        if not target.model and ids:
            check.model = ids[0]
        if target.model and ids and target.model not in ids:  # decided by the minimal request, where one is sent:
            # a router or an alias may serve a model it does not list
            _fail(check, "model", f"the server does not list model {target.model!r}; it lists: "
                                  + ", ".join(repr(i) for i in ids[:20]) + (" …" if len(ids) > 20 else ""))
    else:
        check.notes.append(f"{safe_url(asked)} answered HTTP {resp.status}")


def _minimal_prompt(api: str) -> Prompt:
    """A one-word prompt asking one token; for the transcription endpoint, one tiny WAV clip to upload."""
    if api == "openai-transcriptions":
        return Prompt("Hello", None, 1, 1, audio=(minimal_clip(),))
    return Prompt("Hello", None, 1, 1)


def _generate(check: Check, target: Target, url: str, model: str | None, workload: Workload,
              redact: Callable[[str], str]) -> None:
    try:
        protocol = make_protocol(target, workload, model, base_url=url)
        req = protocol.build(0, _minimal_prompt(target.api))
    except Exception as exc:  # a protocol that cannot build without its run-time parts: nothing to ask
        check.notes.append(f"no minimal request sent ({type(exc).__name__})")
        return
    asked = safe_url(req.url)
    try:
        resp = fetch(req.method, req.url, headers={**dict(req.headers), PREFLIGHT_HEADER: "1"}, body=req.body or None,
                     deadline_s=min(GENERATE_DEADLINE_S, target.timeout), max_bytes=4 << 20, max_redirects=0)
    except FetchError as exc:
        if exc.kind == "timeout":
            check.notes.append(f"the minimal request to {asked} got no answer in "
                               f"{min(GENERATE_DEADLINE_S, target.timeout):g} s (the run measures it)")
            check.kind = None
            return
        _unreachable(check, exc)
        return
    check.generated, check.status = True, resp.status
    check.kind = None
    out = Outcome()
    handler = protocol.handler()
    handler.on_status(resp.status, out)
    try:
        handler.on_body(resp.body, time.perf_counter(), out)
        handler.on_end(out)
    except StopResponse:
        pass
    status = resp.status
    if status in (401, 403):
        _auth(check, asked, status, dict(target.headers))
    elif status in (404, 405):
        _fail(check, "not_found", f"{asked} answered HTTP {status}: no {target.api} endpoint there "
                                  f"({req.method} {asked})")
    elif 300 <= status < 400:
        where = safe_url(resp.headers.get("location", ""))
        _fail(check, "redirect", f"{asked} answered HTTP {status} (a redirect to {where}): latbench sends to the "
                                 "endpoint itself and follows none; use the URL it names")
    elif status == 429 or status >= 500:
        check.notes.append(f"the minimal request to {asked} answered HTTP {status} (the service's own: measured)")
    elif status >= 400:
        _fail(check, "refused", f"{asked} answered HTTP {status} to a minimal {target.api} request: "
                                f"{shown(resp.body, redact)}")
    elif out.error in ("bad_response", "bad_stream"):
        why = f" ({out.error_detail[:120]})" if out.error_detail else ""
        _fail(check, "shape", f"{asked} answered HTTP {status} but not as {target.api} answers{why}: "
                              f"{shown(resp.body, redact)}")
