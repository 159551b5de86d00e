"""Benchmark of the reference server's architectures (a script, not a test).

1. naive vs optimized, closed loop at concurrency 1, 4 and 16, per backend: throughput, p50/p99 end-to-end
   latency, p50 TTFT, plus the naive server's cold first request (it pays the model load).
2. Decode step time at batch 1/4/16/32 per backend, measured in-process on the model itself.
3. The optimized server's step mix after its closed-loop cells (from its /metrics): passes that were
   prefill only, decode only, or mixed (decodes and prompt chunks in one pass), with their mean times.

``--prompt-chars`` pads the prompts (the byte-level tokenizer makes one token per character): latbench's
synthetic prompts of N "tokens" are about 4N characters, so ``--prompt-chars 256 --model tiny
--max-tokens 16`` is the shape of ``scenarios/burst.yaml``.

The client is aiohttp only (not latbench's loadgen), streaming chat requests with unique prompts (so the
optimized server's result cache never hits: this measures batching, not caching).

    python benchmarks/reference_arch.py [--model small] [--backends numpy,torch] [--duration-s 8] [--prompt-chars N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` in [0, 100] of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))]


def start_server(arch: str, backend: str, model: str, cache_dir: str) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, "-m", "reference_server", "--arch", arch, "--backend", backend, "--model", model,
            "--port", "0", "--cache-dir", cache_dir]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    url = proc.stdout.readline().strip().split("=", 1)[1]
    proc.stdout.readline()
    return proc, url


async def wait_health(session: aiohttp.ClientSession, url: str, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            async with session.get(url + "/health") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError(url)


async def one_request(session, url: str, model: str, prompt: str, max_tokens: int) -> tuple[float, float]:
    """(end-to-end seconds, TTFT seconds) of one streaming chat request."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "stream": True, "temperature": 0.8}
    t0 = time.perf_counter()
    ttft = None
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.content:
            if ttft is None and line.startswith(b"data: {") and b'"content"' in line:
                ttft = time.perf_counter() - t0
    return time.perf_counter() - t0, ttft or 0.0


PAD = "the quick brown fox jumps over a lazy dog and then "


async def step_mix(url: str) -> str:
    """The server's step counts and mean step times by phase, from /metrics."""
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as resp:
        text = await resp.text()
    sums: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("refserver:step_duration_seconds_") and 'phase="' in line:
            kind = line.split("{")[0].rsplit("_", 1)[1]
            phase = line.split('phase="')[1].split('"')[0]
            sums[(phase, kind)] = float(line.rsplit(" ", 1)[1])
    parts = []
    for phase in ("prefill", "decode", "mixed"):
        n = sums.get((phase, "count"), 0.0)
        if n:
            parts.append(f"{phase} {n:.0f} steps, mean {sums[(phase, 'sum')] / n * 1e3:.1f} ms")
    return "; ".join(parts)


async def closed_loop(url, model, concurrency, duration_s, max_requests, max_tokens, tag, prompt_chars=0) -> dict:
    counter = 0
    lat, ttfts = [], []

    def prompt() -> str:
        nonlocal counter
        counter += 1
        text = f"request {tag}-{counter}: write a short story about the number {counter} and a lighthouse."
        if len(text) < prompt_chars:
            text += " " + (PAD * (prompt_chars // len(PAD) + 1))[: prompt_chars - len(text) - 1]
        return text

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(one_request(session, url, model, prompt(), max_tokens) for _ in range(concurrency)))
        t_start = time.perf_counter()
        deadline = t_start + duration_s

        async def worker():
            while time.perf_counter() < deadline and len(lat) < max_requests:
                e2e, ttft = await one_request(session, url, model, prompt(), max_tokens)
                lat.append(e2e)
                ttfts.append(ttft)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    return {"n": len(lat), "rps": len(lat) / elapsed, "tok_s": len(lat) * max_tokens / elapsed,
            "p50": pct(lat, 50), "p99": pct(lat, 99), "ttft50": pct(ttfts, 50)}


async def first_requests(url, model, max_tokens) -> tuple[float, float]:
    """End-to-end seconds of the first request after /health is 200 (cold) and of the second (warm)."""
    async with aiohttp.ClientSession() as session:
        await wait_health(session, url)
        cold = (await one_request(session, url, model, "cold start", max_tokens))[0]
        warm = (await one_request(session, url, model, "warm start", max_tokens))[0]
        return cold, warm


def bench_archs(backend, model, cache_dir, concurrencies, duration_s, max_tokens, prompt_chars=0) -> list[dict]:
    rows = []
    for arch in ("naive", "optimized"):
        proc, url = start_server(arch, backend, model, cache_dir)
        try:
            cold, warm = asyncio.run(first_requests(url, model, max_tokens))
            for c in concurrencies:
                r = asyncio.run(closed_loop(url, model, c, duration_s, 2000, max_tokens, f"{arch}{c}", prompt_chars))
                rows.append(dict(r, backend=backend, arch=arch, concurrency=c, cold=cold, warm=warm))
                print(f"  {backend:10s} {arch:9s} c={c:<3d} {r['rps']:7.2f} req/s  p50 {r['p50']*1e3:8.1f} ms  "
                      f"p99 {r['p99']*1e3:8.1f} ms  ttft50 {r['ttft50']*1e3:8.1f} ms  (n={r['n']})", file=sys.stderr)
            if arch == "optimized":
                print(f"{backend} optimized step mix: {asyncio.run(step_mix(url))}")
        finally:
            proc.terminate()
            proc.wait(30)
    return rows


def bench_steps(backend, model, cache_dir, batches, context=128, reps=10) -> dict[int, float]:
    """Median decode step seconds at each batch size, with ``context`` tokens already in every cache."""
    from reference_server.config import ServerConfig
    from reference_server.models.backends import load_model, resolve_backend

    config = ServerConfig.from_preset("naive", backend=backend, model=model, cache_dir=cache_dir)
    m = load_model(resolve_backend(config), config)
    out = {}
    for b in batches:
        caches = [m.new_cache(context + reps + 4) for _ in range(b)]
        for c in caches:
            m.prefill([65 + (i % 26) for i in range(context)], c)
        m.decode([66] * b, caches)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            m.decode([67] * b, caches)
            times.append(time.perf_counter() - t0)
        out[b] = statistics.median(times)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="small")
    ap.add_argument("--backends", default=None, help="comma list (default: numpy, and torch when installed)")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--duration-s", type=float, default=8.0, help="seconds per closed-loop cell")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-chars", type=int, default=0, help="pad prompts to this many characters (= tokens)")
    ap.add_argument("--step-batches", default="1,4,16,32")
    ap.add_argument("--cache-dir", default=None, help="weights cache (default: a temp dir)")
    ap.add_argument("--skip-archs", action="store_true", help="only the decode step table")
    args = ap.parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # like the server: one compute thread, before numpy loads
    sys.path.insert(0, str(ROOT))
    from reference_server.models.backends import torch_available

    backends = args.backends.split(",") if args.backends else ["numpy"] + (["torch"] if torch_available() else [])
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="latbench-weights-")
    conc = [int(c) for c in args.concurrency.split(",")]
    print(f"model={args.model} max_tokens={args.max_tokens} prompt_chars={args.prompt_chars} cpus={os.cpu_count()} "
          f"backends={backends} load={os.getloadavg()[0]:.2f}\n")
    rows = []
    if not args.skip_archs:
        for backend in backends:
            rows += bench_archs(backend, args.model, cache_dir, conc, args.duration_s, args.max_tokens,
                                args.prompt_chars)
        print("| backend | arch | conc | req/s | tok/s | p50 ms | p99 ms | TTFT p50 ms "
              "| cold 1st req ms | warm 1st req ms |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['backend']} | {r['arch']} | {r['concurrency']} | {r['rps']:.2f} | {r['tok_s']:.0f} | "
                  f"{r['p50']*1e3:.0f} | {r['p99']*1e3:.0f} | {r['ttft50']*1e3:.0f} | "
                  f"{r['cold']*1e3:.0f} | {r['warm']*1e3:.0f} |")
        print()
        for backend in backends:
            by = {(r["arch"], r["concurrency"]): r["rps"] for r in rows if r["backend"] == backend}
            c = max(conc)
            print(f"{backend}: optimized/naive throughput at concurrency {c}: "
                  f"{by[('optimized', c)] / by[('naive', c)]:.2f}x")
        print()
    batches = [int(b) for b in args.step_batches.split(",")]
    print("| backend | model | " + " | ".join(f"decode step b={b} ms" for b in batches)
          + " | per-token gain at max b |")
    print("|---|---|" + "---|" * (len(batches) + 1))
    for backend in backends:
        steps = bench_steps(backend, args.model, cache_dir, batches)
        gain = steps[batches[0]] * batches[-1] / steps[batches[-1]]
        print(f"| {backend} | {args.model} | " + " | ".join(f"{steps[b]*1e3:.2f}" for b in batches)
              + f" | {gain:.1f}x |")
    print(json.dumps({"rows": rows}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
