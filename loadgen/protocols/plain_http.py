"""The plain ``http`` protocol: any HTTP endpoint, ``target.request``'s method, path and body; success by status alone.

An HTTP error status (>= 400) or a redirect (3xx, never followed) keeps the status's error class; the body is
counted, never parsed.
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote

from loadgen.protocols.base import ApiProtocol, Request, ResponseHandler
from loadgen.protocols.shared import base_url_of, dumps, path_of, target_headers
from loadgen.scenario.model import HttpRequest, Target, Workload
from loadgen.scenario.prompts import Prompt
from loadgen.scenario.tokenizer import Tokenizer
from loadgen.scenario.urls import join_url

__all__ = ["HttpProtocol"]

_FIELD = re.compile(r"(\{seq\}|\{prompt\})")


class HttpProtocol(ApiProtocol):
    """Any HTTP endpoint: ``target.request``'s method, path and body, ``{seq}`` and ``{prompt}`` filled per request.

    In a ``body`` (JSON) the placeholders are filled inside the encoded JSON, the prompt JSON-escaped.
    In a ``template`` the prompt is JSON-escaped when ``content_type`` says JSON, else inserted as is.
    In the path the prompt is percent-encoded. Without ``request``: ``GET`` the target URL.
    Success is the status alone.
    """

    name = "http"

    def __init__(self, target: Target, workload: Workload, model: str | None = None, base_url: str | None = None,
                 tokenizer: Tokenizer | None = None):
        req = target.request
        base = base_url_of(target, base_url)
        self.method = req.method if req else "GET"
        self._url = _FIELD.split(join_url(base, req.path if req else ""))
        body_text, self._json = self._body_text(req)
        self._body = _FIELD.split(body_text) if body_text is not None else None
        base_headers = {"Content-Type": req.content_type} if self._body is not None else {}
        self.headers = target_headers(base_headers, target)
        # with {seq} the request differs per request; else it depends on its prompt alone (loadgen.protocols.reqcache)
        self.per_request = "{seq}" in self._url or (self._body is not None and "{seq}" in self._body)

    @staticmethod
    def _body_text(req: HttpRequest | None) -> tuple[str | None, bool]:
        if req is None:
            return None, False
        if req.template is not None:
            return req.template, "json" in req.content_type.lower()
        if req.body is not None:
            return json.dumps(req.body, ensure_ascii=False, separators=(",", ":")), True
        return None, False

    @staticmethod
    def _fill(parts: list[str], seq: int, prompt: str) -> str:
        if len(parts) == 1:
            return parts[0]
        return "".join(str(seq) if p == "{seq}" else prompt if p == "{prompt}" else p for p in parts)

    def build(self, seq: int, prompt: Prompt) -> Request:
        url = self._fill(self._url, seq, quote(prompt.text, safe="") if "{prompt}" in self._url else "")
        body = b""
        if self._body is not None:
            text = prompt.text
            if self._json and "{prompt}" in self._body:
                text = dumps(text)[1:-1]
            body = self._fill(self._body, seq, text).encode()
        return Request(self.method, url, path_of(url), self.headers, body, False)

    def handler(self) -> ResponseHandler:
        return _STATUS_ONLY  # it holds no state: one for every request


_STATUS_ONLY = ResponseHandler()
