"""Tokenizers: the model's own token counts, from a local file, the Hugging Face cache, or the target itself.

``workload.tokenizer`` names one of:

- a ``tokenizer.json`` file, or a model folder holding one (loaded with the ``tokenizers`` library; the
  folder's ``tokenizer_config.json`` / ``chat_template.jinja`` give the chat template and special tokens);
- a Hugging Face model id (``org/name``) already in the local huggingface_hub cache: latbench never
  downloads (an id that is not cached is an error naming it, and how to fetch it);
- ``server``: the target's ``/tokenize`` and ``/detokenize`` endpoints, as vLLM and SGLang serve them.

A folder that ships only a SentencePiece ``tokenizer.model`` is loaded through ``transformers`` (the
``latbench[sentencepiece]`` extra); without it the error says so.

Counts never include special tokens: :meth:`Tokenizer.count` is the content's length. What a server adds
around a prompt is counted apart: the special tokens the tokenizer adds to a plain prompt (BOS, for
completions: :meth:`Tokenizer.special_tokens`) and the chat template's whole rendering
(:meth:`Tokenizer.chat_tokens`, for chat APIs; the template writes its own BOS). Loading errors are
:class:`TokenizerError` (a ValueError), which the scenario loader reports at ``workload.tokenizer``.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from loadgen.fetch import Client, FetchError

__all__ = ["Tokenizer", "TokenizerError", "load_tokenizer", "resolve_local"]

#: The files a model folder or cache snapshot may hold for its tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "tokenizer.model")
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*(/[A-Za-z0-9][A-Za-z0-9._\-]*)?$")
_SERVER_TIMEOUT_S = 30.0
_SERVER_MAX_BYTES = 64 << 20  # a /tokenize answer of a long prompt: a few MB of ids at most


class TokenizerError(ValueError):
    """A tokenizer that cannot be loaded or used as asked; the message says what to do."""


class Tokenizer:
    """The counting latbench needs from a tokenizer. Subclasses implement the five methods."""

    name = ""  # what the summary calls it: a path, a model id, or "server"
    counts_output = True  # output text can be counted in-process, during the run

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without special tokens."""
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def special_tokens(self) -> list[str]:
        """The tokens the tokenizer adds to a plain prompt (e.g. ``['<s>']``): what a completions server adds."""
        raise NotImplementedError

    def chat_tokens(self, messages: list[dict]) -> int | None:
        """Tokens of ``messages`` rendered with the chat template (generation prompt added); None: no template."""
        raise NotImplementedError

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode_batch(self, batch: list[list[int]]) -> list[str]:
        return [self.decode(ids) for ids in batch]

    def chat_tokens_batch(self, conversations: list[list[dict]]) -> list[int | None]:
        return [self.chat_tokens(m) for m in conversations]


# --- chat templates (rendered as Hugging Face's apply_chat_template does) ---------------------------


def _raise(message: str):
    raise TokenizerError(f"the chat template raised: {message}")


def _tojson(x, indent=None, ensure_ascii=False, separators=None, sort_keys=False):
    return json.dumps(x, indent=indent, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys)


def compile_chat_template(source: str):
    """A jinja2 template compiled the way transformers compiles chat templates (sandboxed, trimmed blocks)."""
    import jinja2  # a core dependency, imported only when a template is compiled
    import jinja2.sandbox

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise TokenizerError(f"the chat template is not valid jinja2: {exc}") from None


def _token_text(v) -> str | None:
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def read_chat_config(folder: Path) -> tuple[str | None, dict[str, str]]:
    """(chat template source or None, special tokens by name such as ``bos_token``) of a model folder."""
    config: dict = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):  # the tokenizer's config wins
        try:
            loaded = json.loads((folder / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            raise TokenizerError(f"{folder / name}: not readable JSON: {exc}") from None
        if isinstance(loaded, dict):
            config.update(loaded)
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        template = jinja_file.read_text(encoding="utf-8")
    specials = {k: _token_text(v) for k, v in config.items() if k.endswith("_token") and _token_text(v) is not None}
    return (template if isinstance(template, str) else None), specials


# --- local tokenizers ------------------------------------------------------------------------------


class LocalTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` (a tokenizer.json), with the chat template of its folder when it has one."""

    def __init__(self, tok, name: str, template: str | None, specials: dict[str, str]):
        self._tok = tok
        self.name = name
        self._template = compile_chat_template(template) if template else None
        self._specials = specials

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def decode_batch(self, batch: list[list[int]]) -> list[str]:
        return self._tok.decode_batch(batch, skip_special_tokens=False)

    def special_tokens(self) -> list[str]:
        probe = "a"
        plain = self._tok.encode(probe, add_special_tokens=False).ids
        full = self._tok.encode(probe, add_special_tokens=True).ids
        if len(full) <= len(plain):
            return []
        extra = list(full)
        for t in plain:  # what remains once the content's own ids are taken out, in order
            extra.remove(t)
        return [self._tok.id_to_token(t) or str(t) for t in extra]

    def chat_tokens(self, messages: list[dict]) -> int | None:
        return self.chat_tokens_batch([messages])[0]

    def chat_tokens_batch(self, conversations: list[list[dict]]) -> list[int | None]:
        if self._template is None:
            return [None] * len(conversations)
        texts = [self._template.render(messages=m, add_generation_prompt=True, **self._specials) for m in conversations]
        return [len(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]


class TransformersTokenizer(Tokenizer):
    """A tokenizer that only ``transformers`` can load (a SentencePiece ``tokenizer.model``)."""

    def __init__(self, tok, name: str):
        self._tok, self.name = tok, name

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)

    def special_tokens(self) -> list[str]:
        plain, full = self._tok.encode("a", add_special_tokens=False), self._tok.encode("a", add_special_tokens=True)
        extra = list(full)
        for t in plain:
            if t in extra:
                extra.remove(t)
        return self._tok.convert_ids_to_tokens(extra)

    def chat_tokens(self, messages: list[dict]) -> int | None:
        if not getattr(self._tok, "chat_template", None):
            return None
        return len(self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))


def _import_tokenizers():
    try:
        return importlib.import_module("tokenizers")
    except ImportError:
        raise TokenizerError("the `tokenizers` library is not installed: pip install tokenizers "
                             "(or remove workload.tokenizer to use the 4-characters-a-token approximation)") from None


def resolve_local(spec: str, base_dir: Path) -> Path:
    """The folder or tokenizer.json file that ``spec`` names: a path (relative to ``base_dir``), or a model id
    found in the local Hugging Face cache. Never downloads; TokenizerError naming the path or id otherwise."""
    path = Path(os.path.expanduser(spec))
    if not path.is_absolute():
        path = Path(base_dir) / path
    if path.exists():
        return path
    pathlike = spec.startswith((".", "/", "~")) or spec.endswith(".json") or spec.count("/") > 1
    if pathlike or not _HF_ID.match(spec):
        raise TokenizerError(f"{path}: no such tokenizer file or folder")
    try:
        hub = importlib.import_module("huggingface_hub")
    except ImportError:
        raise TokenizerError(f"{spec!r} is not a file or folder, and huggingface_hub (to look the id up in the "
                             "local cache) is not installed: pip install huggingface_hub") from None
    try:
        # the cache folder as the environment says now (huggingface_hub reads it once, when first imported)
        return Path(hub.snapshot_download(spec, local_files_only=True, allow_patterns=list(TOKENIZER_FILES),
                                          cache_dir=os.environ.get("HF_HUB_CACHE")))
    except Exception:  # LocalEntryNotFoundError, or an id the hub's validator refuses
        raise TokenizerError(f"{spec!r} is neither a file nor a folder here, and no tokenizer of the Hugging Face "
                             f"model {spec!r} is in the local cache (latbench never downloads): fetch it first, "
                             f"e.g. `huggingface-cli download {spec} tokenizer.json tokenizer_config.json`, "
                             "or give the path of a tokenizer.json") from None


@functools.lru_cache(maxsize=8)
def _load_local(path: Path, name: str) -> Tokenizer:
    folder = path if path.is_dir() else path.parent
    template, specials = read_chat_config(folder)
    file = path / "tokenizer.json" if path.is_dir() else path
    if file.is_file():
        tk = _import_tokenizers()
        try:
            tok = tk.Tokenizer.from_file(str(file))
        except Exception as exc:  # the Rust side raises a plain Exception for a malformed file
            raise TokenizerError(f"{file}: not a tokenizer.json the tokenizers library can load: {exc}") from None
        return LocalTokenizer(tok, name, template, specials)
    if (folder / "tokenizer.model").is_file():
        try:
            transformers = importlib.import_module("transformers")
        except ImportError:
            raise TokenizerError(f"{folder} has only a SentencePiece tokenizer.model, which needs transformers and "
                                 "sentencepiece: pip install 'latbench[sentencepiece]'") from None
        try:
            tok = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except Exception as exc:
            raise TokenizerError(f"{folder}: transformers could not load its tokenizer: {exc}") from None
        return TransformersTokenizer(tok, name)
    raise TokenizerError(f"{path}: no tokenizer.json (or SentencePiece tokenizer.model) in it")


# --- the target's own tokenizer -----------------------------------------------------------------------


class ServerTokenizer(Tokenizer):
    """The target's ``/tokenize`` and ``/detokenize`` (vLLM, SGLang, the reference server), over one connection.

    Used before the run, to build prompts; output is not counted with it during the run (that would load
    the server being measured), so streamed output without usage is counted in chunks."""

    name = "server"
    counts_output = False

    def __init__(self, url: str, headers: dict[str, str] | None = None, model: str | None = None):
        parts = urlsplit(url)
        base = parts.path.rstrip("/")
        prefix = base[: -len("/v1")] if base.endswith("/v1") else base  # vLLM serves /tokenize at the root
        self._base = f"{parts.scheme}://{parts.netloc}{prefix}"
        self._model = model
        self._client = Client(headers, deadline_s=_SERVER_TIMEOUT_S, max_bytes=_SERVER_MAX_BYTES)

    def _post(self, path: str, body: dict) -> dict:
        if self._model:
            body = {"model": self._model, **body}
        try:
            resp = self._client.post(self._base + path, json=body)
        except FetchError as exc:
            raise TokenizerError(f"tokenizer: server: {path} did not answer: {exc.detail}") from None
        if resp.status != 200:
            raise TokenizerError(f"tokenizer: server: POST {path} answered {resp.status} (does the target serve "
                                 f"vLLM's /tokenize and /detokenize?): {resp.body[:200].decode('utf-8', 'replace')}")
        try:
            return resp.json()
        except ValueError:
            raise TokenizerError(f"tokenizer: server: {path} did not answer JSON") from None

    def _tokens(self, body: dict) -> list[int]:
        tokens = self._post("/tokenize", body).get("tokens")
        if not isinstance(tokens, list):
            raise TokenizerError("tokenizer: server: /tokenize answered without a 'tokens' list")
        return tokens

    def encode(self, text: str) -> list[int]:
        return self._tokens({"prompt": text, "add_special_tokens": False})

    def decode(self, ids: list[int]) -> str:
        text = self._post("/detokenize", {"tokens": list(ids)}).get("prompt")
        if not isinstance(text, str):
            raise TokenizerError("tokenizer: server: /detokenize answered without a 'prompt' string")
        return text

    def special_tokens(self) -> list[str]:
        plain = self._tokens({"prompt": "a", "add_special_tokens": False})
        extra = self._tokens({"prompt": "a", "add_special_tokens": True})
        for t in plain:
            if t in extra:
                extra.remove(t)
        return [self.decode([t]) or f"id {t}" for t in extra]

    def chat_tokens(self, messages: list[dict]) -> int | None:
        return len(self._tokens({"messages": messages, "add_generation_prompt": True, "add_special_tokens": False}))

    def close(self) -> None:
        self._client.close()


def load_tokenizer(spec: str | None, base_dir: Path, url: str | None = None, headers: dict[str, str] | None = None,
                   model: str | None = None) -> Tokenizer | None:
    """The tokenizer ``workload.tokenizer`` names (None for none). ``url``, ``headers`` and ``model`` are the
    target's, for ``server``; a local tokenizer is loaded once per process. Raises TokenizerError."""
    if spec is None:
        return None
    if spec == "server":
        if not url:
            raise TokenizerError("tokenizer: server needs the target's URL")
        return ServerTokenizer(url, headers, model)
    path = resolve_local(spec, Path(base_dir)).resolve()
    return _load_local(path, spec)
