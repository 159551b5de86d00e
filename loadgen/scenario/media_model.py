"""What a scenario may say about a request beyond its text: ``workload.images``, ``workload.audio``,
``workload.tools`` and ``workload.response_format``.

Validated at the edge like every scenario field (a width of 0 or 10^6 is an error at its line); the files an
image source names are read and checked before anything is sent (:func:`loadgen.scenario.images.check_images`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from loadgen.scenario.json_schema import schema_problem
from loadgen.scenario.strict import Strict
from loadgen.units import parse_duration

__all__ = ["MAX_IMAGES", "MAX_IMAGE_SIDE", "MAX_TOOLS", "ImageCount", "ImageSide", "Images", "ToolDefinition",
           "ToolFunction", "ToolGeneration", "Tools", "ToolsField", "ResponseFormat", "Audio", "AudioSeconds"]

#: Pixels a side at most: an 8192 x 8192 RGB image is 200 MB in memory while it is made (larger than any vision
#: model's input; servers resize far below it).
MAX_IMAGE_SIDE = 8192
MAX_IMAGES = 64  # images one request carries at most
MAX_DISTINCT_IMAGES = 10_000  # synthetic images made up front at most
MAX_AUDIO_SECONDS = 3600.0  # one audio clip at most (an hour)


class ImageSide(Strict):
    """A side in pixels drawn per image: Normal(mean, stddev), rounded, clipped to [min, max]."""

    mean: float = Field(examples=[512], gt=0, le=MAX_IMAGE_SIDE, description="the mean side in pixels")
    stddev: float = Field(0.0, examples=[128], ge=0, le=MAX_IMAGE_SIDE,
                          description="its standard deviation (0: every side the mean)")
    min: int = Field(1, examples=[64], ge=1, le=MAX_IMAGE_SIDE, description="the smallest side drawn")
    max: Optional[int] = Field(None, examples=[1024], ge=1, le=MAX_IMAGE_SIDE,
                               description="the largest side drawn (unset: 8192)")


class ImageCount(Strict):
    """Images per request, drawn per prompt: Normal(mean, stddev), rounded, clipped to [min, max]."""

    mean: float = Field(examples=[2], ge=0, le=MAX_IMAGES, description="the mean number of images a request")
    stddev: float = Field(0.0, examples=[1], ge=0, le=MAX_IMAGES, description="its standard deviation")
    min: int = Field(0, examples=[1], ge=0, le=MAX_IMAGES, description="the fewest images a request")
    max: Optional[int] = Field(None, examples=[4], ge=0, le=MAX_IMAGES, description="the most (unset: 64)")


def _number(lo: int, hi: int, what: str):
    """A plain number is the mean of a distribution without spread; one out of [lo, hi] is refused as it is
    written (not as the ``mean`` it would become)."""
    def before(v: Any) -> Any:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if not lo <= v <= hi:
                raise ValueError(f"expected {what} from {lo} to {hi}, got {v!r}")
            return {"mean": v}
        return v
    return before


def _seconds(v: Any) -> Any:
    """A duration ('5s', '500ms', 5) is a constant clip length, refused when out of (0, 1 h]."""
    if isinstance(v, (int, float, str)) and not isinstance(v, bool):
        seconds = parse_duration(v)
        if not 0 < seconds <= MAX_AUDIO_SECONDS:
            raise ValueError(f"expected a duration above 0 and at most 1h, got {v!r}")
        return {"mean": seconds, "min": min(seconds, 0.1)}
    return v


def _http_urls(v: list[str] | None) -> list[str] | None:
    """URLs an image or audio source gives: http(s), without spaces."""
    for u in v or []:
        if not u.startswith(("http://", "https://")) or any(c in u for c in " \r\n\t"):
            raise ValueError(f"expected http:// or https:// URLs without spaces, got {u!r:.80}")
    return v


_SIZE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def _size(v: Any) -> tuple[int, int]:
    """'512x384' (width x height), or [512, 384]."""
    if isinstance(v, str) and (m := _SIZE.match(v)):
        w, h = int(m.group(1)), int(m.group(2))
    elif (isinstance(v, (list, tuple)) and len(v) == 2
          and all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
        w, h = v
    else:
        raise ValueError(f"expected a size as 'WIDTHxHEIGHT' (e.g. '512x512') or [width, height], got {v!r}")
    if not (1 <= w <= MAX_IMAGE_SIDE and 1 <= h <= MAX_IMAGE_SIDE):
        raise ValueError(f"expected each side from 1 to {MAX_IMAGE_SIDE} pixels, got {w}x{h}")
    return w, h


ImageSize = Annotated[tuple[int, int], BeforeValidator(_size)]


SOURCES = ("folder", "file", "urls", "hf")  # where workload.images come from, when not made by latbench


class Images(Strict):
    """Images sent with each chat request, as OpenAI ``image_url`` content parts after the prompt's text: synthetic
    ones made with the seed (Pillow), a folder of image files, a JSON-lines file naming a request's images, the
    rows of a Hugging Face dataset's image column, or
    plain http(s) URLs passed through as they are (the server fetches them; latbench never does). A file's image
    goes as a base64 ``data:`` URL. Each record keeps the images, pixels and bytes its request sent."""

    count: Annotated[ImageCount, BeforeValidator(_number(0, MAX_IMAGES, "a number of images"))] = Field(
        default_factory=lambda: ImageCount(mean=1), examples=[{"mean": 2, "min": 1, "max": 4}],
        description="images a request: a number, or {mean, stddev, min, max} drawn per prompt (not with file: "
                    "each of its lines is a request's images)")
    width: Annotated[ImageSide, BeforeValidator(_number(1, MAX_IMAGE_SIDE, "a width in pixels"))] = Field(
        default_factory=lambda: ImageSide(mean=512), examples=[{"mean": 512, "stddev": 128, "min": 64}],
        description="synthetic images: width in pixels, a number or {mean, stddev, min, max} (1 to 8192)")
    height: Annotated[ImageSide, BeforeValidator(_number(1, MAX_IMAGE_SIDE, "a height in pixels"))] = Field(
        default_factory=lambda: ImageSide(mean=512), examples=[384],
        description="synthetic images: height in pixels, a number or {mean, stddev, min, max} (1 to 8192)")
    sizes: Optional[list[ImageSize]] = Field(
        None, examples=[["256x256", "512x512"]], min_length=1, max_length=64,
        description="synthetic images: sizes as 'WIDTHxHEIGHT', each image one of them in turn (image i has "
                    "size i % len), instead of width and height")
    format: Literal["jpeg", "png"] = Field("jpeg", description="synthetic images: the file format sent")
    quality: int = Field(85, examples=[60], ge=1, le=100,
                         description="synthetic JPEG images: the encoder's quality (1-100), which sets the bytes an "
                                     "image takes")
    distinct: int = Field(16, examples=[64], ge=1, le=MAX_DISTINCT_IMAGES,
                          description="synthetic images: how many different images are made; requests cycle "
                                      "through them (a repeated image is what an image cache serves)")
    folder: Optional[str] = Field(None, examples=["images/"],
                                  description="a folder of image files (relative to the scenario), in name order; "
                                              "every file must be an image (hidden files are skipped)")
    file: Optional[str] = Field(None, examples=["images.jsonl"],
                                description="JSON lines, relative to the scenario, one request's images each: "
                                            "{\"image\": PATH_OR_URL} or {\"images\": [...]} (paths relative "
                                            "to the file)")
    urls: Optional[list[str]] = Field(None, examples=[["https://example.com/cat.jpg"]], min_length=1,
                                      description="http(s) URLs sent as they are, in turn (never fetched by "
                                                  "latbench; their size is unknown to it)")
    hf: Optional[str] = Field(None, examples=["./data/my_images"],
                              description="a Hugging Face dataset of images: an id in the local cache, or a local "
                                          "folder (save_to_disk) or data file (parquet), loaded with `datasets` "
                                          "(never downloaded; pip install 'latbench[datasets]'); each row one "
                                          "image, in row order")
    split: str = Field("train", examples=["test"], description="hf: the split to read")
    column: str = Field("image", examples=["img"], description="hf: the column holding the images (an Image "
                                                               "feature, or image file bytes)")
    detail: Optional[Literal["auto", "low", "high"]] = Field(
        None, description="OpenAI's image_url.detail (unset: not sent)")

    _urls = field_validator("urls")(classmethod(lambda cls, v: _http_urls(v)))

    @model_validator(mode="after")
    def _one_source(self):
        given = [k for k in SOURCES if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"expected at most one image source (folder, file, urls or hf), got {', '.join(given)}")
        if self.hf is None and {"split", "column"} & self.model_fields_set:
            raise ValueError("split and column: only with hf (a Hugging Face dataset of images)")
        if self.sizes is not None and {"width", "height"} & self.model_fields_set:
            raise ValueError("sizes: give either sizes or width and height")
        if given and {"width", "height", "sizes", "format", "quality", "distinct"} & self.model_fields_set:
            raise ValueError(f"width, height, sizes, format, quality and distinct describe synthetic images, not "
                             f"those of {given[0]}")
        if self.file is not None and "count" in self.model_fields_set:
            raise ValueError("count: not with file (each of its lines is one request's images)")
        for name in ("width", "height"):
            side = getattr(self, name)
            if side.max is not None and side.max < side.min:
                raise ValueError(f"{name}: max ({side.max}) is below min ({side.min})")
        if self.count.max is not None and self.count.max < self.count.min:
            raise ValueError(f"count: max ({self.count.max}) is below min ({self.count.min})")
        return self

    @property
    def synthetic(self) -> bool:
        """Whether latbench makes the images (no folder, file, urls or hf given)."""
        return all(getattr(self, k) is None for k in SOURCES)


MAX_TOOLS = 128  # tool definitions a request carries at most
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _json_schema(v: dict) -> dict:
    problem = schema_problem(v)
    if problem:
        raise ValueError(f"not a JSON Schema: {problem}")
    if v.get("type", "object") != "object":
        raise ValueError(f"a tool's parameters are an object schema (type: object), got type {v.get('type')!r}")
    return v


class ToolFunction(Strict):
    """The function a tool offers, as OpenAI's chat API describes it."""

    name: str = Field(examples=["get_weather"], description="the function's name (letters, digits, _ and -, "
                                                             "at most 64)")
    description: str = Field("", examples=["Current weather of a city"], description="what it does, for the model")
    parameters: Annotated[dict[str, Any], AfterValidator(_json_schema)] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        examples=[{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}],
        description="its arguments as a JSON Schema of type object")
    strict: Optional[bool] = Field(None, examples=[True], description="OpenAI's strict mode (unset: not sent)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _TOOL_NAME.match(v):
            raise ValueError(f"expected 1-64 letters, digits, _ or -, got {v!r:.80}")
        return v


class ToolDefinition(Strict):
    """One tool definition, as OpenAI's chat API takes it (latbench converts it for Responses and Anthropic)."""

    type: Literal["function"] = Field("function", examples=["function"], description="the kind of tool (function)")
    function: ToolFunction = Field(examples=[{"name": "get_weather", "parameters": {"type": "object"}}],
                                   description="the function: name, description, parameters")


class ToolGeneration(Strict):
    """Tool definitions made by latbench (the same every run): ``count`` functions ``tool_0``..., each a JSON
    definition of about ``tokens`` tokens (its description is what grows), with a string, an integer and an enum
    parameter."""

    count: int = Field(examples=[8], ge=1, le=MAX_TOOLS, description="how many tools")
    tokens: int = Field(100, examples=[300], ge=16, le=10_000,
                        description="each definition's length in tokens, approximately (4 characters a token)")


def _tools(v: Any) -> Any:
    return {"definitions": v} if isinstance(v, list) else v


class Tools(Strict):
    """Tools offered with each request (OpenAI ``tools`` and ``tool_choice``; converted for Responses and
    Anthropic). Streamed tool-call deltas are parsed: the first one's time (``ttftc``), the calls and their
    argument tokens are recorded per request. With conversations, a tool call is answered with a tool result
    (``result`` or ``result_tokens`` of generated text) and the session continues."""

    definitions: Optional[list[ToolDefinition]] = Field(
        None, max_length=MAX_TOOLS,
        examples=[[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]],
        description="the tool definitions (a plain list under workload.tools means these)")
    generate: Optional[ToolGeneration] = Field(None, examples=[{"count": 8, "tokens": 200}],
                                               description="or: tool definitions made by latbench")
    choice: str = Field("auto", examples=["required"],
                        description="tool_choice: auto, none, required, or the name of one tool (always called)")
    result: Optional[str] = Field(None, examples=['{"temperature": 21}'],
                                  description="conversations: the content of every tool result (default: "
                                              "result_tokens of generated text)")
    result_tokens: int = Field(32, examples=[256], ge=1, le=100_000,
                               description="conversations: a generated tool result's length in tokens "
                                           "(approximately, 4 characters a token)")
    max_rounds: int = Field(4, ge=0, le=32, examples=[2],
                            description="conversations: tool calls answered in a row within one user turn at "
                                        "most; past it the session ends (0: tool calls are not answered)")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.definitions is None) == (self.generate is None):
            raise ValueError("expected exactly one of definitions (a list of tools) or generate ({count, tokens})")
        names = [d.function.name for d in self.definitions or []]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique: {sorted(n for n in set(names) if names.count(n) > 1)}")
        if self.choice not in ("auto", "none", "required"):
            known = names or [f"tool_{i}" for i in range(self.generate.count)]
            if self.choice not in known:
                raise ValueError(f"choice: expected auto, none, required or a tool's name ({', '.join(known)}), "
                                 f"got {self.choice!r}")
        return self


ToolsField = Annotated[Tools, BeforeValidator(_tools)]


class ResponseFormat(Strict):
    """Structured output: OpenAI's ``response_format``, sent as written (Responses: as ``text.format``). Each
    answer is checked: whether it parsed as JSON (``json_valid``) and matched the schema (``schema_valid``), per
    request and as rates. An answer that does not is a result, not an error (an SLO on the rates makes it one)."""

    type: Literal["json_object", "json_schema"] = Field(description="json_object: any JSON object; json_schema: "
                                                                     "one matching json_schema.schema")
    json_schema: Optional[dict[str, Any]] = Field(
        None, examples=[{"name": "answer", "schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                                      "required": ["city"]}, "strict": True}],
        description="type json_schema: {name, schema, strict} as OpenAI takes it")

    @field_validator("json_schema")
    @classmethod
    def _schema(cls, v: dict | None) -> dict | None:
        if v is None:
            return v
        if not isinstance(v.get("name", "answer"), str) or "schema" not in v:
            raise ValueError("expected {name: ..., schema: {...}, strict: true|false}")
        problem = schema_problem(v["schema"])
        if problem:
            raise ValueError(f"schema: not a JSON Schema: {problem}")
        return v

    @model_validator(mode="after")
    def _schema_given(self):
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema: give it with type json_schema (and only then)")
        return self

    @property
    def answer_schema(self) -> dict | None:
        """The schema answers must match (None for json_object)."""
        return self.json_schema["schema"] if self.json_schema is not None else None



class AudioSeconds(Strict):
    """A clip's duration in seconds drawn per clip: Normal(mean, stddev), clipped to [min, max]."""

    mean: float = Field(examples=[5.0], gt=0, le=MAX_AUDIO_SECONDS, description="the mean duration in seconds")
    stddev: float = Field(0.0, examples=[2.0], ge=0, le=MAX_AUDIO_SECONDS, description="its standard deviation")
    min: float = Field(0.1, examples=[1.0], gt=0, le=MAX_AUDIO_SECONDS, description="the shortest clip")
    max: float = Field(MAX_AUDIO_SECONDS, examples=[30.0], gt=0, le=MAX_AUDIO_SECONDS, description="the longest clip")


class Audio(Strict):
    """Audio sent with each request: WAV clips made with the seed (a tone sweep with noise, 16-bit mono) or a
    folder of WAV files. openai-chat sends them as ``input_audio`` content parts after the text;
    ``api: openai-transcriptions`` uploads one clip a request to ``/audio/transcriptions``. Each record keeps
    the clips and seconds of audio its request sent."""

    count: Annotated[ImageCount, BeforeValidator(_number(0, MAX_IMAGES, "a number of clips"))] = Field(
        default_factory=lambda: ImageCount(mean=1), examples=[1],
        description="clips a request (openai-chat): a number or {mean, stddev, min, max}; transcriptions: 1")
    duration: Annotated[AudioSeconds, BeforeValidator(_seconds)] = Field(
        default_factory=lambda: AudioSeconds(mean=5.0), examples=["10s", {"mean": 8, "stddev": 3, "min": 1}],
        description="synthetic clips: duration, a duration (5s) or {mean, stddev, min, max} in seconds")
    sample_rate: int = Field(16_000, ge=8_000, le=48_000, examples=[24_000], description="synthetic clips: samples "
                                                                                          "a second")
    distinct: int = Field(8, ge=1, le=1_000, examples=[16], description="synthetic clips: how many are made; "
                                                                        "requests cycle through them")
    folder: Optional[str] = Field(None, examples=["audio/"], description="a folder of WAV files (relative to the "
                                                                          "scenario), in name order")
    urls: Optional[list[str]] = Field(None, examples=[["https://example.com/clip.wav"]], min_length=1,
                                      description="http(s) URLs of WAV files, in turn: openai-chat sends them as they "
                                                  "are (audio_url parts, as vLLM takes them); openai-transcriptions "
                                                  "needs the bytes, so each is downloaded once at the start")

    _urls = field_validator("urls")(classmethod(lambda cls, v: _http_urls(v)))

    @model_validator(mode="after")
    def _source(self):
        if self.folder is not None and self.urls is not None:
            raise ValueError("expected at most one audio source (folder or urls), got folder, urls")
        if not self.synthetic and {"duration", "sample_rate", "distinct"} & self.model_fields_set:
            source = "a folder's" if self.folder is not None else "urls'"
            raise ValueError(f"duration, sample_rate and distinct describe synthetic clips, not {source}")
        if self.duration.max < self.duration.min:
            raise ValueError(f"duration: max ({self.duration.max}) is below min ({self.duration.min})")
        return self

    @property
    def synthetic(self) -> bool:
        return self.folder is None and self.urls is None
