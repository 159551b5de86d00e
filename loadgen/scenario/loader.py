"""Loading scenario files: YAML -> ${ENV} expansion -> pydantic -> the dataset, with every mistake located.

Each error is one line, ``file:line:column: field.path: message``. All mistakes are collected and
raised together as :class:`ScenarioError`, before any traffic is sent.

**Limits of the file.** A scenario is a regular file of at most 8 MiB (:data:`MAX_SCENARIO_BYTES`), nested at most
:data:`MAX_YAML_DEPTH` levels deep, and at most :data:`MAX_YAML_NODES` values once every alias (``*name``) is
expanded, wherever in the document the aliases are: a "billion laughs" of nested aliases, or a 5,000-level
nesting, is an error at its line, found before the document is built.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import yaml
from pydantic import ValidationError

from loadgen.errors import ScenarioError
from loadgen.redact import ENV_REF, PLACEMENTS, Placement, Redactor
from loadgen.scenario.audio import check_audio
from loadgen.scenario.datasets import check_dataset
from loadgen.scenario.files import MAX_SCENARIO_BYTES, UnreadableFile, read_capped
from loadgen.scenario.image_tokens import image_token_rule
from loadgen.scenario.images import check_images
from loadgen.scenario.media_model import SOURCES
from loadgen.scenario.model import Scenario
from loadgen.scenario.reset import Reset
from loadgen.scenario.tokenizer import TokenizerError, resolve_local
from loadgen.scenario.trace import Limits, TraceError, read_trace, resolve_trace_path, select, too_long_rows

_ITEM = re.compile(r"^(slo|goodput)\[(\d+)\]:? ")
MAX_YAML_DEPTH = 64  # mappings and lists nested in one another, at most
MAX_YAML_NODES = 100_000  # values (keys, scalars, mappings, lists) of the document with its aliases expanded


@dataclass
class LoadedScenario:
    """A validated scenario, where it was read from, and what of it is secret.

    ``${ENV}`` is expanded in the target fields that :data:`loadgen.redact.PLACEMENTS` lists, and nowhere else.
    """

    scenario: Scenario
    path: Path
    raw: dict  # as written, ${ENV} unexpanded; see redacted()
    redactor: Redactor = field(default_factory=Redactor)  # the run's one redaction path (loadgen.redact)

    @property
    def secrets(self) -> list[str]:
        """The secret values: every expanded ``${ENV}`` value and every literal credential."""
        return self.redactor.secrets

    def redacted(self) -> dict:
        """The scenario as written (``${ENV}`` references kept), each placement redacted by its own rule."""
        data = copy.deepcopy(self.raw)
        for t in _target_dicts(data):
            for name, placement in PLACEMENTS.items():
                if name in t:
                    t[name] = placement.redact(self.redactor, t[name])
        return data

    def with_reset(self, what: str) -> "LoadedScenario":
        """This scenario with ``reset: what`` on every target that names no reset of its own (``--reset``), in its
        model and as written."""
        raw = copy.deepcopy(self.raw)
        for t in _target_dicts(raw):
            t.setdefault("reset", what)
        sc = self.scenario

        def reset(t):
            return t if t.reset is not None else t.model_copy(update={"reset": Reset(what=what)})

        update = ({"targets": [reset(t) for t in sc.targets]} if sc.targets is not None
                  else {"target": reset(sc.target)})
        return LoadedScenario(sc.model_copy(update=update), self.path, raw, self.redactor)


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
              or part.startswith("function-")):
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


def _shape_problem(text: str) -> tuple[yaml.Mark, tuple, str] | None:
    """Where (mark, field path) and why the YAML in ``text`` nests too deep or expands too far (None when it does
    neither), read from its events, before a node is composed: composing recurses once a level (RecursionError
    past ~1,000), and what reads the document walks each alias as a copy of its anchor (9 levels of 9 aliases
    are 387 million values). An alias inside its own anchor (a value that holds itself) is refused too."""
    sizes: dict[str, int] = {}  # anchor -> values of its node, aliases expanded
    open_: list[list] = []  # each open mapping or list: [anchor, count at its start, is a mapping, children, key]
    count = 0

    def path() -> tuple:
        return tuple((o[4] if o[2] else o[3] - 1) for o in open_ if o[3])

    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, yaml.NodeEvent) and open_:  # a child of the innermost open collection
            parent = open_[-1]
            parent[3] += 1
            if parent[2] and parent[3] % 2:  # a mapping's key
                parent[4] = str(ev.value) if isinstance(ev, yaml.ScalarEvent) else "?"
        if isinstance(ev, yaml.CollectionStartEvent):
            open_.append([ev.anchor, count, isinstance(ev, yaml.MappingStartEvent), 0, None])
            count += 1
            if len(open_) > MAX_YAML_DEPTH:
                return ev.start_mark, path()[:3], f"nested more than {MAX_YAML_DEPTH} levels deep (mappings and lists)"
        elif isinstance(ev, yaml.CollectionEndEvent):
            anchor, start = open_.pop()[:2]
            if anchor is not None:
                sizes[anchor] = count - start
        elif isinstance(ev, yaml.AliasEvent):
            if any(o[0] == ev.anchor for o in open_):
                why = f"the alias *{ev.anchor} is inside its own anchor (a value that holds itself)"
                return ev.start_mark, path(), why
            count += sizes.get(ev.anchor, 1)  # an undefined alias: the composer says so
        elif isinstance(ev, yaml.ScalarEvent):
            count += 1
            if ev.anchor is not None:
                sizes[ev.anchor] = 1
        if count > MAX_YAML_NODES:
            return ev.start_mark, path(), (f"more than {MAX_YAML_NODES:,} values with its aliases expanded (each "
                                           "alias is a copy of its anchor)")
    return None


def _expand(data: dict, raw: dict, root: yaml.Node, fname: str, env: dict, errors: list[str],
            redactor: Redactor) -> None:
    """Expand ``${ENV}`` in every string of each placement field of each target (however nested), registering
    each value that is a secret (all but where :meth:`~loadgen.redact.Placement.public` says it only names a host
    or a port); register each field's literal credentials (as written), what it implies once expanded, and, for
    every string whose expansion holds a secret, how it is written instead (its secrets as ``${NAME}``)."""
    def sub(value: str, loc: tuple, placement: Placement) -> tuple[str, str]:
        """``value`` expanded, and as it may be shown: its secrets' references kept, the rest expanded."""
        expanded, shown, pos = [], [], 0
        for m in ENV_REF.finditer(value):
            name, lead = m.group(1), value[pos:m.start()]
            pos = m.end()
            expanded.append(lead)
            shown.append(lead)
            if name not in env:
                errors.append(f"{fname}:{_mark(_locate(root, loc))}: {_path(loc)}: "
                              f"environment variable {name} is not set")
                shown.append(m.group(0))
            elif placement.public(value, m, env[name]):
                expanded.append(env[name])
                shown.append(env[name])  # where requests go (a host): printed as it is, usable
            else:
                redactor.add(env[name], "${" + name + "}")  # never written out: its reference stands in its place
                expanded.append(env[name])
                shown.append(m.group(0))
        return "".join(expanded) + value[pos:], "".join(shown) + value[pos:]

    def expand(obj: Any, loc: tuple, placement: Placement) -> tuple[Any, Any]:
        if isinstance(obj, str):
            return sub(obj, loc, placement)
        if isinstance(obj, dict):
            pairs = {k: expand(v, loc + (k,), placement) for k, v in obj.items()}
            return {k: e for k, (e, _) in pairs.items()}, {k: s for k, (_, s) in pairs.items()}
        if isinstance(obj, list):
            pairs = [expand(v, loc + (i,), placement) for i, v in enumerate(obj)]
            return [e for e, _ in pairs], [s for _, s in pairs]
        return obj, obj

    fields = []
    for (prefix, t), (_, rt) in zip(_target_locs(data), _target_locs(raw)):
        for name, placement in PLACEMENTS.items():
            if name in t:
                t[name], shown = expand(t[name], prefix + (name,), placement)
                placement.collect(redactor, rt[name])  # literal credentials, as written
                placement.implied(redactor, t[name])  # what it is sent as (a URL's userinfo: Basic credentials)
                fields.append((t[name], shown, placement))
    for expanded, shown, placement in fields:  # once every secret is known: each expanded string, as redacted
        _expansions(expanded, shown, placement.redact(redactor, shown), redactor)


def _expansions(expanded: Any, shown: Any, written: Any, redactor: Redactor) -> None:
    """Register, for each string whose expansion holds a secret (it differs from ``shown``), the form it is
    written in instead."""
    if isinstance(expanded, str) and isinstance(shown, str) and isinstance(written, str):
        if expanded != shown:
            redactor.add_expansion(expanded, written)
    elif isinstance(expanded, dict) and isinstance(shown, dict) and isinstance(written, dict):
        for k in expanded:
            if k in shown and k in written:
                _expansions(expanded[k], shown[k], written[k], redactor)
    elif isinstance(expanded, list) and isinstance(shown, list) and isinstance(written, list):
        for e, r, w in zip(expanded, shown, written):
            _expansions(e, r, w, redactor)


def _target_locs(data: dict):
    if isinstance(data.get("target"), dict):
        yield ("target",), data["target"]
    if isinstance(data.get("targets"), list):
        for i, t in enumerate(data["targets"]):
            if isinstance(t, dict):
                yield ("targets", i), t


#: A check a caller adds to validation: ``check(scenario)`` yields ``(field path, message)`` per problem (the path
#: as a tuple, ``("target", "reference", "options")``); the loader locates each in the file. The CLI checks the
#: reference server's settings this way (loadgen does not import reference_server).
Check = Callable[[Scenario], Iterable[tuple[tuple, str]]]


def load_scenario(path: str | os.PathLike, env: dict | None = None, checks: Sequence[Check] = ()) -> LoadedScenario:
    """Read, expand and validate a scenario file (and run ``checks`` on it). Raises ScenarioError listing every
    mistake, each with its file, line and field."""
    path = Path(path)
    fname = str(path)
    env = dict(os.environ) if env is None else env
    try:
        raw_bytes = read_capped(path, MAX_SCENARIO_BYTES)
    except UnreadableFile as exc:
        raise ScenarioError([f"{fname}: cannot read: {exc}"]) from None
    try:
        text = raw_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError([f"{fname}:{_offset_mark(raw_bytes, exc.start)}: not UTF-8 text: {exc.reason}"]) from None
    try:
        shape = _shape_problem(text)
        if shape is not None:
            mark, loc, why = shape
            raise ScenarioError([f"{fname}:{mark.line + 1}:{mark.column + 1}: {_path(loc)}: {why}"])
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
    redactor = Redactor()
    _expand(data, raw, root, fname, env, errors, redactor)
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
    if scenario is not None and not errors:  # the workload's files, before anything starts
        errors += _check_workload(scenario, path, root, fname)
        errors += _check_trace(scenario, path, root, fname)
    if scenario is not None:
        for check in checks:
            errors += [f"{fname}:{_mark(_locate(root, loc))}: {_path(loc)}: {msg}" for loc, msg in check(scenario)]
    if errors:  # a message may quote an expanded value (a URL the parser refused): through the redaction path
        raise ScenarioError([redactor.text(e) for e in errors])
    return LoadedScenario(scenario=scenario, path=path, raw=raw, redactor=redactor)


def _check_workload(scenario: Scenario, path: Path, root: yaml.Node, fname: str) -> list[str]:
    """The workload's files, before anything is sent: a local tokenizer resolves (a file, a folder, a model id in
    the local cache) and a dataset reads without a mistake (its own file:line, or the scenario's line)."""
    wl, base = scenario.workload, path.parent
    errors = []
    if wl.tokenizer is not None and wl.tokenizer != "server":
        try:
            resolve_local(wl.tokenizer, base)
            if wl.images is not None:  # its image processor's config too: a broken one is found here, not at run
                image_token_rule(wl.tokenizer, base)
        except TokenizerError as exc:
            loc = ("workload", "tokenizer")
            errors.append(f"{fname}:{_mark(_locate(root, loc))}: {_path(loc)}: {exc}")
    where = f"{fname}:{_mark(_locate(root, ('workload', 'dataset')))}: workload.dataset"
    errors += [f"{where}: {msg}" for msg in check_dataset(wl, base)]  # each with the dataset's own file:line
    if wl.images is not None:  # every image file read and checked: a file that is not an image, named
        images = wl.images
        key = next((k for k in SOURCES if getattr(images, k) is not None), None)
        loc = ("workload", "images") + ((key,) if key else ())
        where = f"{fname}:{_mark(_locate(root, loc))}: {_path(loc)}"
        errors += [f"{where}: {msg}" for msg in check_images(images, base)]
    if wl.audio is not None and wl.audio.folder is not None:
        loc = ("workload", "audio", "folder")
        errors += [f"{fname}:{_mark(_locate(root, loc))}: {_path(loc)}: {msg}" for msg in check_audio(wl.audio, base)]
    return errors


def _check_trace(scenario: Scenario, path: Path, root: yaml.Node, fname: str) -> list[str]:
    """The trace of a trace replay, before anything is sent: it reads without a mistake (its own file:line:
    field), its window holds requests, and with ``too_long: refuse`` every request fits the limits the scenario
    gives. Its path is then made absolute, so that every sender process reads the same file."""
    spec = scenario.load.trace
    if spec is None:
        return []
    where = f"{fname}:{_mark(_locate(root, ('load', 'trace', 'file')))}: load.trace.file"
    file = resolve_trace_path(spec, path.parent)
    try:
        data = read_trace(file)
        sl = select(spec, data)
    except TraceError as exc:
        return [f"{where}: {msg}" for msg in exc.errors]
    spec.file = str(file.resolve())
    if spec.too_long == "refuse" and (spec.max_model_len is not None or spec.max_input_tokens is not None):
        limits = Limits(spec.max_model_len, spec.max_input_tokens, source="scenario")
        return [f"{where}: {msg}" for msg in too_long_rows(data, sl, limits, "load.trace")]
    return []


def scenario_schema() -> dict:
    """The JSON Schema of a scenario file, for editors."""
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "latbench scenario"
    return schema
