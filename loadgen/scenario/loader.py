"""Loading scenario files: YAML -> ${ENV} expansion -> pydantic, with every mistake located.

Each error is one line, ``file:line:column: field.path: message``. All mistakes are collected and
raised together as :class:`ScenarioError`, before any traffic is sent.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from loadgen.errors import ScenarioError
from loadgen.redact import REDACTED, is_secret_header, url_password
from loadgen.scenario.datasets import check_dataset
from loadgen.scenario.model import Scenario
from loadgen.scenario.tokenizer import TokenizerError, resolve_local

_ITEM = re.compile(r"^(slo|goodput)\[(\d+)\]:? ")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: Where ${ENV} is expanded. Everything else is taken literally.
_ENV_FIELDS = ("url", "metrics_url", "headers")
@dataclass
class LoadedScenario:
    scenario: Scenario
    path: Path
    raw: dict  # as written, ${ENV} unexpanded; see redacted()
    secrets: list[str] = field(default_factory=list)  # expanded values to scrub from any output
    #: ${ENV} values expanded into request bodies (``extra_body``), by where they were placed: secret there only
    placed: list[tuple[tuple, str]] = field(default_factory=list)

    def redacted(self) -> dict:
        """The scenario as written, with literal secret header values replaced by '***'."""
        data = copy.deepcopy(self.raw)
        for t in _target_dicts(data):
            headers = t.get("headers")
            if isinstance(headers, dict):
                for k, v in headers.items():
                    if isinstance(k, str) and is_secret_header(k) and isinstance(v, str) and not _ENV.search(v):
                        headers[k] = REDACTED
            for key in ("url", "metrics_url"):
                password = url_password(t.get(key))
                if password and not _ENV.search(password):
                    t[key] = t[key].replace(":" + password + "@", ":" + REDACTED + "@")
        return data


def _target_dicts(data: Any):
    if not isinstance(data, dict):
        return
    if isinstance(data.get("target"), dict):
        yield data["target"]
    if isinstance(data.get("targets"), list):
        yield from (t for t in data["targets"] if isinstance(t, dict))


def _locate(node: yaml.Node | None, loc: tuple) -> yaml.Node | None:
    """The deepest YAML node along a pydantic error location."""
    best = node
    for part in loc:
        if node is None:
            break
        nxt = None
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for k, v in node.value:
                if getattr(k, "value", None) == part:
                    nxt = v
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if 0 <= part < len(node.value):
                nxt = node.value[part]
        if nxt is None:
            continue  # a union tag such as 'float' or 'function-before[...]': skip it
        node = best = nxt
    return best


def _key_node(node: yaml.Node | None, loc: tuple) -> yaml.Node | None:
    """For 'unknown field' errors: the key node itself, which is where the typo is."""
    parent = _locate(node, loc[:-1])
    if isinstance(parent, yaml.MappingNode):
        for k, _ in parent.value:
            if getattr(k, "value", None) == loc[-1]:
                return k
    return parent


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_\-]+$")


def _path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif (part in ("float", "str", "int", "bool", "Ramp", "list[str]") or "[" in str(part)
              or part.startswith("function")):
            continue
        else:  # a key from the file is quoted unless plain: a newline or escape in it must not break the line
            out += ("." if out else "") + (part if _PLAIN_KEY.match(part) else repr(part))
    return out or "(top level)"


def _message(err: dict) -> str:
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "missing":
        return "required field is missing"
    inp = err.get("input")
    if (err["type"] not in ("value_error", "assertion_error") and isinstance(inp, (str, int, float, bool))
            and inp is not None):
        msg += f", got {inp!r}"
    return msg


def _offset_mark(text, offset: int) -> str:
    """'line:column' (1-based) of ``offset`` into ``text`` (str or bytes)."""
    nl = "\n" if isinstance(text, str) else b"\n"
    before = text[:offset]
    return f"{before.count(nl) + 1}:{offset - (before.rfind(nl) + 1) + 1}"


def _mark(node: yaml.Node | None) -> str:
    if node is None:
        return "1:1"
    return f"{node.start_mark.line + 1}:{node.start_mark.column + 1}"


def _expand(data: dict, root: yaml.Node, fname: str, env: dict, errors: list[str], secrets: list[str],
            placed: list[tuple[tuple, str]]) -> None:
    def sub(value: str, loc: tuple, into: list[str] = secrets) -> str:
        def repl(m: re.Match) -> str:
            name = m.group(1)
            if name not in env:
                errors.append(f"{fname}:{_mark(_locate(root, loc))}: {_path(loc)}: "
                              f"environment variable {name} is not set")
                return ""
            into.append(env[name])  # every expanded value, in a header or a URL, is never written out
            return env[name]

        return _ENV.sub(repl, value)

    def body(value, loc: tuple):
        """${ENV} in the string values of a request body (keys are taken literally), each placement recorded."""
        if isinstance(value, str):
            found: list[str] = []
            out = sub(value, loc, found)
            placed.extend((loc, v) for v in found)
            secrets.extend(found)
            return out
        if isinstance(value, dict):
            return {k: body(v, loc + (k,)) for k, v in value.items()}
        if isinstance(value, list):
            return [body(v, loc + (i,)) for i, v in enumerate(value)]
        return value

    for prefix, t in _target_locs(data):
        headers = t.get("headers")
        if isinstance(headers, dict):  # literal credentials are scrubbed wherever they might resurface
            secrets += [v for k, v in headers.items()
                        if isinstance(k, str) and is_secret_header(k) and isinstance(v, str)
                        and not _ENV.search(v)]
        for key in _ENV_FIELDS:
            v = t.get(key)
            if isinstance(v, str):
                t[key] = sub(v, prefix + (key,))
                password = url_password(t[key])
                if password:
                    secrets.append(password)
            elif isinstance(v, dict):
                for hk, hv in v.items():
                    if isinstance(hv, str):
                        v[hk] = sub(hv, prefix + (key, hk))
        if isinstance(t.get("extra_body"), dict):
            t["extra_body"] = body(t["extra_body"], prefix + ("extra_body",))


def _target_locs(data: dict):
    if isinstance(data.get("target"), dict):
        yield ("target",), data["target"]
    if isinstance(data.get("targets"), list):
        for i, t in enumerate(data["targets"]):
            if isinstance(t, dict):
                yield ("targets", i), t


def load_scenario(path: str | os.PathLike, env: dict | None = None) -> LoadedScenario:
    """Read, expand and validate a scenario file. Raises ScenarioError listing every mistake."""
    path = Path(path)
    fname = str(path)
    env = dict(os.environ) if env is None else env
    try:
        raw_bytes = path.read_bytes()
    except OSError as exc:
        raise ScenarioError([f"{fname}: cannot read: {exc.strerror or exc}"]) from None
    try:
        text = raw_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError([f"{fname}:{_offset_mark(raw_bytes, exc.start)}: not UTF-8 text: {exc.reason}"]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f"{mark.line + 1}:{mark.column + 1}"
        elif isinstance(getattr(exc, "position", None), int):  # a ReaderError: a character YAML forbids
            where = _offset_mark(text, exc.position)
        else:
            where = "1:1"
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
        raise ScenarioError([f"{fname}:{where}: invalid YAML: "
                             f"{problem.splitlines()[0] if problem.strip() else 'unreadable'}"]) from None
    if not isinstance(data, dict):
        raise ScenarioError([f"{fname}:1:1: (top level): expected a mapping with name, target and load, "
                             f"got {type(data).__name__}"])
    raw = copy.deepcopy(data)
    errors: list[str] = []
    secrets: list[str] = []
    placed: list[tuple[tuple, str]] = []
    _expand(data, root, fname, env, errors, secrets, placed)
    load = data.get("load")
    expected = load.get("expected_qps") if isinstance(load, dict) else None
    ctx = {"expected_qps": expected if isinstance(expected, (int, float)) and not isinstance(expected, bool) else None}
    scenario = None
    try:
        scenario = Scenario.model_validate(data, context=ctx)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(err["loc"])
            msg = _message(err)
            for part in msg.split("\n") if _ITEM.match(msg) else [msg]:
                m = _ITEM.match(part)  # a model-level check that names the list item it is about
                ploc = (m.group(1), int(m.group(2))) if m else loc
                node = _key_node(root, ploc) if err["type"] == "extra_forbidden" else _locate(root, ploc)
                errors.append(f"{fname}:{_mark(node)}: {_path(ploc)}: {part[m.end():] if m else part}")
    if scenario is not None and not errors:
        errors += _check_workload(scenario, path, root, fname)
    if errors:
        raise ScenarioError(errors)
    return LoadedScenario(scenario=scenario, path=path, raw=raw, secrets=list(dict.fromkeys(s for s in secrets if s)),
                          placed=[(loc, v) for loc, v in placed if v])


def _check_workload(scenario: Scenario, path: Path, root: yaml.Node, fname: str) -> list[str]:
    """The workload's files, before anything is sent: a local tokenizer resolves (a file, a folder, a model id in
    the local cache) and a dataset reads without a mistake (its own file:line, or the scenario's line)."""
    wl, base = scenario.workload, path.parent
    errors = []
    if wl.tokenizer is not None and wl.tokenizer != "server":
        try:
            resolve_local(wl.tokenizer, base)
        except TokenizerError as exc:
            loc = ("workload", "tokenizer")
            errors.append(f"{fname}:{_mark(_locate(root, loc))}: {_path(loc)}: {exc}")
    where = f"{fname}:{_mark(_locate(root, ('workload', 'dataset')))}: workload.dataset"
    errors += [f"{where}: {msg}" for msg in check_dataset(wl, base)]  # each with the dataset's own file:line
    return errors


def scenario_schema() -> dict:
    """The JSON Schema of a scenario file, for editors."""
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "latbench scenario"
    return schema
