"""``python -m reference_server [flags]``: the single definition of the server's command-line flags.

``latbench serve`` passes its arguments straight to :func:`main`. Every knob flag defaults to "not given",
so the ``--arch`` preset decides unless a flag overrides it. Times given in milliseconds on the command line
(``--max-queue-delay-ms``, ``--slow-ms``, ``--stall-ms``) become seconds in :class:`ServerConfig`.
"""

from __future__ import annotations

import argparse
import os
import sys

from .config import ARCHS, PRECISIONS, ServerConfig
from .models.modelspec import get_spec
from .serving.lifeline import watch_parent

_MS_FLAGS = {"max_queue_delay_ms": "max_queue_delay_s", "slow_ms": "slow_s", "stall_ms": "stall_s"}


def build_parser(exit_on_error: bool = True) -> argparse.ArgumentParser:
    """The argument parser of the server (also used by ``latbench serve``)."""
    p = argparse.ArgumentParser(prog="reference_server", description="latbench reference inference server",
                                exit_on_error=exit_on_error)
    p.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="TCP port; 0 picks a free one (default 0)")
    p.add_argument("--grpc-port", type=int, default=None,
                   help="also serve KServe v2 over gRPC on this port; 0 picks a free one (default: no gRPC; "
                        "needs grpcio and protobuf)")
    p.add_argument("--arch", choices=ARCHS, default="naive", help="architecture preset (default naive)")
    p.add_argument("--model", default=None,
                   help="tiny | small | medium | large | 1b | 3b (default: small on CPU, 1b on CUDA)")
    p.add_argument("--backend", default=None, help="auto | numpy | torch | sim:<gpu>-<model>, e.g. sim:h200-8b")
    p.add_argument("--cache-dir", default=None,
                   help="weights cache (default $LATBENCH_CACHE_DIR or ~/.cache/latbench/weights)")
    p.add_argument("--served-model-name", default=None, help="model id in the API (default: the preset name)")
    p.add_argument("--weights-seed", type=int, default=None, help="seed of the random weights (default 0)")
    p.add_argument("--tokenizer", default=None,
                   help="count usage (and serve /tokenize) with this tokenizer.json or model folder, as a server of "
                        "that model would; the model itself still works on bytes (default: one token per byte)")
    p.add_argument("--parent-fd", type=int, default=None,
                   help="the read end of a pipe held by the program that started the server: at its EOF the "
                        "server ends (it dies with its parent, however the parent ended)")
    p.add_argument("--prepare-weights", action="store_true",
                   help="write the weights file if it is missing, print LATBENCH_WEIGHTS={path, bytes, "
                        "generated_s} and exit (no server)")
    k = p.add_argument_group("architecture knobs (override the preset)")
    k.add_argument("--preload", action=argparse.BooleanOptionalAction, default=None, help="load the model at start")
    k.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=None,
                   help="warm up before /health is 200")
    k.add_argument("--max-batch-size", type=int, default=None, help="running batch bound; 1 = one request at a time")
    k.add_argument("--max-queue-delay-ms", type=float, default=None, help="max wait for the oldest request when idle")
    k.add_argument("--max-step-tokens", type=int, default=None,
                   help="tokens per forward pass: every decode plus prompt chunks up to this (default 256)")
    k.add_argument("--cache-size", type=int, default=None, help="LRU result cache entries; 0 = off")
    k.add_argument("--prefix-cache", action=argparse.BooleanOptionalAction, default=None,
                   help="prefix (KV) cache: prompt blocks of 16 tokens whose keys and values another request "
                        "computed are copied, not prefilled (on in the optimized preset)")
    k.add_argument("--prefix-cache-blocks", type=int, default=None,
                   help="prefix cache capacity in blocks, least recently used evicted first "
                        "(default 0: as many as 256 MiB of keys and values hold)")
    k.add_argument("--image-patch-size", type=int, default=None,
                   help="pixels a side of an image patch, the vision encoder's unit of work (default 16)")
    k.add_argument("--image-merge", type=int, default=None,
                   help="merge x merge image patches become one prompt token (default 2)")
    k.add_argument("--image-encoder-layers", type=int, default=None,
                   help="MLP blocks of the vision encoder: its work per patch (default 4)")
    k.add_argument("--audio-tokens-per-s", type=int, default=None,
                   help="prompt tokens a second of input audio: the audio encoder's frames (default 25)")
    k.add_argument("--image-cache-size", type=int, default=None,
                   help="images whose encoder output is kept by content hash, LRU; 0 = off (256 in optimized)")
    k.add_argument("--precision", choices=PRECISIONS, default=None)
    k.add_argument("--threads", type=int, default=None, help="torch CPU intra-op threads (default 1)")
    k.add_argument("--step-threads", type=int, default=None,
                   help="numpy backend: threads splitting each forward pass by sequence "
                        "(default 1; 2 for optimized/batching)")
    k.add_argument("--max-queue-size", type=int, default=None, help="waiting requests before 429")
    k.add_argument("--request-timeout-s", type=float, default=None, help="whole-request deadline; 0 = none")
    k.add_argument("--default-max-tokens", type=int, default=None, help="max_tokens when a request omits it")
    k.add_argument("--max-body-bytes", type=int, default=None, help="request body limit (413 beyond)")
    f = p.add_argument_group("fault injection")
    f.add_argument("--error-rate", type=float, default=None, help="fraction of requests answered 500")
    f.add_argument("--slow-rate", type=float, default=None, help="fraction of requests delayed by --slow-ms")
    f.add_argument("--slow-ms", type=float, default=None)
    f.add_argument("--cut-stream-rate", type=float, default=None, help="fraction of streams closed mid-way")
    f.add_argument("--stall-ms", type=float, default=None, help="all processing pauses this long ...")
    f.add_argument("--stall-every-s", type=float, default=None, help="... every this many seconds")
    f.add_argument("--seed", type=int, default=None, help="seed of fault draws and unseeded sampling")
    return p


def config_from_args(argv: list[str] | None = None) -> ServerConfig:
    """Parse ``argv`` into a validated ServerConfig (argparse exits with status 2 on a bad flag)."""
    return _config(vars(build_parser().parse_args(argv)))


def check_config(argv: list[str]) -> list[str]:
    """What is wrong with a server command line, found without starting a server: an unknown or malformed flag,
    a setting out of range, an unknown model or backend. Empty when the server would start with it. Flags are
    named as a scenario's ``reference.options`` keys name them (``max_batch_size``). latbench's CLI asks this
    when it validates a scenario (this package imports nothing of loadgen; the CLI is where the two meet)."""
    try:
        args, unknown = build_parser(exit_on_error=False).parse_known_args(argv)
    except argparse.ArgumentError as exc:
        name = (exc.argument_name or "").split("/")[0].lstrip("-").replace("-", "_")
        return [f"{name}: {exc.message}" if name else exc.message]
    problems = [f"{u.lstrip('-').replace('-', '_')}: not a setting of the reference server"
                for u in unknown if u.startswith("--")]
    if problems:
        return problems
    try:
        config = _config(vars(args))
    except (ValueError, TypeError) as exc:
        return [str(exc)]
    from .models import backends  # here, not at the top: numpy must load after main() has set BLAS to one thread

    if config.backend in ("auto", "torch") and backends.torch_available():  # resolving imports torch: check less
        try:
            if config.model:
                get_spec(config.model)
        except ValueError as exc:
            return [f"model: {exc}"]
        return []
    try:
        backends.resolve_backend(config)
    except ValueError as exc:
        msg = str(exc)
        return [f"model: {msg}" if msg.startswith("unknown model") else msg]
    return []


def _config(args: dict) -> ServerConfig:
    for process_option in ("parent_fd", "prepare_weights"):  # how the process runs, not server knobs
        args.pop(process_option, None)
    arch = args.pop("arch")
    overrides = {}
    for name, value in args.items():
        if value is None:
            continue
        if name in _MS_FLAGS:
            name, value = _MS_FLAGS[name], value / 1000.0
        overrides[name] = value
    return ServerConfig.from_preset(arch, **overrides)


def main(argv: list[str] | None = None) -> int:
    """Run the server until SIGINT/SIGTERM; return the exit status (2 for an invalid configuration)."""
    args = vars(build_parser().parse_args(argv))
    if args["parent_fd"] is not None:  # first: a parent killed while the model loads takes the server with it
        watch_parent(args["parent_fd"])
    prepare = args.pop("prepare_weights")
    try:
        config = _config(args)
    except ValueError as exc:
        print(f"reference_server: error: {exc}", file=sys.stderr)
        return 2
    if "numpy" not in sys.modules:  # BLAS reads its thread count once, when numpy first loads
        # BLAS stays single-threaded: the numpy backend's parallelism is ``step_threads`` (each runs part
        # of a step's sequences), torch's is ``threads`` (set by the torch backend itself). A
        # BLAS thread pool spin-waits for cores the load generator needs (measured: 2 BLAS threads on 2
        # shared cores cut the tiny model's throughput under load from ~16 to ~2 req/s).
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")
    if prepare:
        from .models.backends import prepare_weights

        try:
            return prepare_weights(config, sys.stdout)
        except ValueError as exc:
            print(f"reference_server: error: {exc}", file=sys.stderr)
            return 2
    from .server import run_server

    try:
        return run_server(config)
    except ValueError as exc:  # impossible combination found while resolving (e.g. torch missing)
        print(f"reference_server: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
