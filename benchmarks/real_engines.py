"""latbench, ``vllm bench serve`` and AIPerf measuring one real vLLM at the same load, interleaved (a script).

What it does, start to end (nothing is downloaded but the two peers' packages, once):

1. Sets up vLLM's CPU build and AIPerf in their own venvs under ``$LATBENCH_PEERS`` (``peer_setup.py``:
   the work-arounds the CPU wheel needs are explained there).
2. Writes a tiny Llama-shaped model folder (``tiny_llama.py``: config, a BPE tokenizer trained here on
   latbench's prompt words and AIPerf's Shakespeare corpus, a chat template); no weights.
3. Starts ``vllm serve MODEL --load-format dummy`` on 127.0.0.1, pinned to core 0 (``taskset``; vLLM's
   OpenMP threads bound there too), and warms it up (one request at a time, then batches of 2 to 8).
4. Runs latbench (its CLI, a generated scenario), ``vllm bench serve`` and ``aiperf profile`` at the same
   load -- Poisson arrivals at ``--rate`` req/s, ``--requests`` requests, ``--isl`` prompt tokens and
   exactly ``--osl`` output tokens (``ignore_eos``), streaming chat -- interleaved as a Latin square,
   A B C, B C A, C A B, ... (``--rounds``; no tool always runs first), every client pinned to core 1, so
   that a multi-process client cannot slow the engine it measures. Before and after each run it reads
   vLLM's /metrics, so the engine's own count of requests, prompt tokens and its own TTFT, inter-token and
   E2E means referee each tool's run: a tool's mean over the engine's own mean for the same requests does
   not move with the engine's state (other load, a slower round), so it is what shows whether two tools
   measure alike.
5. Prints per-round figures, then the table: medians over the rounds, and latbench's figure over each
   peer's; then where the definitions differ, in numbers from the same runs.

latbench's prompts: when ``latbench schema`` has ``workload.tokenizer``, latbench makes prompts of exact
length with the model's tokenizer; until then the script gives it a JSONL dataset of prompts cut to exactly
``--isl`` tokens with that tokenizer, and reports how long latbench's own synthetic prompts (4 characters
per token, no tokenizer) come out. ``ignore_eos`` goes through ``workload.ignore_eos`` (or
``target.extra_body`` where that is what the schema offers).

    python benchmarks/real_engines.py [--rounds 3] [--requests 80] [--rate 4] [--out DIR]
    python benchmarks/real_engines.py --model-only DIR     # just the model folder (for scenarios/engines/)

Needs ``taskset`` and two cores; on 2 cores a run takes about 12 minutes after the one-time install (about
5 GB on disk: vLLM with its CPU torch, and AIPerf).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import peer_setup  # noqa: E402
from benchmarks.peer_setup import peer_bin, venv_python  # noqa: E402

MODEL_NAME = "tiny-llama"
SERVER_CORE, CLIENT_CORE = "0", "1"
TOOLS = ("latbench", "vllm", "aiperf")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


# --- the model and the prompts ---------------------------------------------------------------------


def _latbench_prompts(tokens: int, n: int) -> list[str]:
    """latbench's own synthetic prompts asked for ``tokens`` tokens (4 characters of words per token)."""
    from loadgen.scenario.model import Workload
    from loadgen.scenario.prompts import make_prompt_source

    w = Workload.model_validate({"prompts": {"input_tokens": tokens, "output_tokens": 1, "distinct": n}})
    src = make_prompt_source(w, 0, None)
    return [src.get(i).text for i in range(n)]


def write_model(folder: Path) -> None:
    """The tiny model folder: tokenizer trained on latbench's words and AIPerf's corpus (when installed)."""
    corpus = folder.parent / "corpus.txt"
    parts = _latbench_prompts(256, 400)
    shakespeare = (peer_setup.PEERS / "aiperf" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
                   / "site-packages" / "aiperf" / "dataset" / "generator" / "assets" / "shakespeare.txt")
    if shakespeare.exists():
        parts.append(shakespeare.read_text())
    corpus.write_text("\n".join(parts) + "\n")
    subprocess.run([venv_python("vllm"), ROOT / "benchmarks" / "tiny_llama.py", "model", folder, corpus], check=True,
                   env={**os.environ, **OFFLINE})


def exact_dataset(model: Path, work: Path, isl: int) -> tuple[Path, dict]:
    """A JSONL dataset of latbench's word prompts cut to exactly ``isl`` tokens, and the token counts."""
    long_lines, asked = work / "long.txt", work / "asked.txt"
    long_lines.write_text("\n".join(_latbench_prompts(isl * 2, 500)) + "\n")
    asked.write_text("\n".join(_latbench_prompts(isl, 500)) + "\n")
    out = work / f"prompts_{isl}.jsonl"
    res = subprocess.run([venv_python("vllm"), ROOT / "benchmarks" / "tiny_llama.py", "prompts", model, long_lines,
                          asked, out, str(isl)], check=True, capture_output=True, text=True,
                         env={**os.environ, **OFFLINE})
    return out, json.loads(res.stdout.strip().splitlines()[-1])


def latbench_features() -> set[str]:
    """Which of ``workload.tokenizer``, ``workload.ignore_eos``, ``target.extra_body`` this latbench has."""
    res = subprocess.run([sys.executable, "-m", "loadgen.cli", "schema"], capture_output=True, text=True, check=True)
    schema = json.loads(res.stdout)
    defs = schema.get("$defs") or schema.get("definitions") or {}
    found = set()
    for owner, key in (("Workload", "tokenizer"), ("Workload", "ignore_eos"), ("Target", "extra_body")):
        if key in (defs.get(owner) or {}).get("properties", {}):
            found.add(f"{owner.lower()}.{key}")
    return found


# --- the engine ------------------------------------------------------------------------------------


class Engine:
    """``vllm serve`` pinned to SERVER_CORE; ``metrics()`` reads its /metrics as {sample name: total}."""

    def __init__(self, model: Path, port: int, log: Path, extra: list[str]):
        env = {**os.environ, **OFFLINE, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_OMP_THREADS_BIND": SERVER_CORE,
               "VLLM_CPU_KVCACHE_SPACE": "1"}
        argv = ["taskset", "-c", SERVER_CORE, str(peer_bin("vllm", "vllm")), "serve", str(model), "--load-format",
                "dummy", "--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL_NAME,
                "--max-model-len", "1024", *extra]
        self.root = f"http://127.0.0.1:{port}"
        self.log = log
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = t0 + 900
        while True:
            if self.proc.poll() is not None:
                tail = log.read_text().splitlines()[-25:]
                raise RuntimeError("vllm serve exited with code %s:\n%s" % (self.proc.returncode, "\n".join(tail)))
            try:
                urllib.request.urlopen(self.root + "/v1/models", timeout=2).read()
                break
            except OSError:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"vllm serve not ready after 900 s; see {log}")
                time.sleep(0.5)
        self.ready_s = time.perf_counter() - t0

    def metrics(self) -> dict[str, float]:
        from loadgen.engine.scrape import parse_samples

        text = urllib.request.urlopen(self.root + "/metrics", timeout=10).read().decode()
        out: dict[str, float] = {}
        for name, labels, value in parse_samples(text):
            if name.endswith("_bucket"):
                continue
            out[name] = out.get(name, 0.0) + value
        return out

    def chat(self, prompt: str, max_tokens: int) -> None:
        body = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": prompt}],
                           "max_tokens": max_tokens, "ignore_eos": True}).encode()
        req = urllib.request.Request(self.root + "/v1/chat/completions", body, {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=60).read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


def engine_view(before: dict, after: dict) -> dict:
    """The engine's own account of one tool's run: deltas of its counters and histogram means."""
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    n = d.get("vllm:request_success_total", 0.0)

    def mean_ms(base):
        c = d.get(base + "_count", 0.0)
        return 1e3 * d.get(base + "_sum", 0.0) / c if c else float("nan")

    return {"requests": n, "prompt_tokens": d.get("vllm:prompt_tokens_total", 0.0) / n if n else float("nan"),
            "output_tokens": d.get("vllm:generation_tokens_total", 0.0) / n if n else float("nan"),
            "ttft_mean_ms": mean_ms("vllm:time_to_first_token_seconds"),
            "itl_mean_ms": mean_ms("vllm:inter_token_latency_seconds"),
            "e2e_mean_ms": mean_ms("vllm:e2e_request_latency_seconds")}


# --- the three clients -----------------------------------------------------------------------------


def _client(argv: list, log: Path, env: dict | None = None, offline: bool = True, ok=(0,)) -> float:
    """Run one client pinned to CLIENT_CORE; returns its wall time (s). Its output goes to ``log``.

    An exit code outside ``ok`` is an error (latbench's 3, a run it judged invalid, is data: see run_latbench).
    """
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(["taskset", "-c", CLIENT_CORE, *map(str, argv)], stdout=f, stderr=subprocess.STDOUT,
                            env={**os.environ, **(OFFLINE if offline else {}), **(env or {})}).returncode
    if rc not in ok:
        raise RuntimeError(f"{argv[0]} exited with {rc}; see {log}")
    return time.perf_counter() - t0


def run_latbench(a, eng: Engine, model: Path, dataset: Path | None, features: set[str], seed: int, out: Path) -> dict:
    import pyarrow.parquet as pq

    if "workload.tokenizer" in features:  # exact lengths from latbench itself (the workloads issue)
        prompts = (f"prompts: {{input_tokens: {a.isl}, output_tokens: {a.osl}, distinct: 1000}}, "
                   f"tokenizer: {json.dumps(str(model))}")
    else:
        prompts = f"dataset: {json.dumps(str(dataset))}, max_tokens: {a.osl}"
    eos_workload = ", ignore_eos: true" if "workload.ignore_eos" in features else ""
    eos_target = "extra_body: {ignore_eos: true}" if not eos_workload and "target.extra_body" in features else ""
    duration = 1.5 * a.requests / a.rate  # long enough that max_requests, not the clock, ends the phase
    scenario = out / "scenario.yaml"
    scenario.write_text(textwrap.dedent(f"""\
        name: vllm-{seed}
        description: latbench beside vllm bench serve and AIPerf (benchmarks/real_engines.py)
        target:
          url: {eng.root}/v1
          model: {MODEL_NAME}
          stream: true
          metrics_url: {eng.root}/metrics
          {eos_target}
        workload: {{{prompts}{eos_workload}}}
        load:
          arrival: poisson
          seed: {seed}
          phases:
            - {{name: main, duration: {duration:g}s, qps: {a.rate:g}, max_requests: {a.requests}}}
        """))
    # exit 3: latbench judged its own run invalid (on a shared machine: generator-limited, its process starved
    # of CPU); the figures are kept and the table marks the run, the peers have no such check to fail
    wall = _client([sys.executable, "-m", "loadgen.cli", "run", scenario, "--out", out / "runs", "--quiet"],
                   out / "latbench.log", ok=(0, 1, 3))
    rundir = next((out / "runs").iterdir())
    s = json.loads((rundir / "target" / "summary.json").read_text())["overall"]
    m = s["metrics"]

    def p(metric, stat):
        v = m[metric]["percentiles"][stat]["value"] if stat.startswith("p") else m[metric][stat]
        return float("nan") if v is None else 1e3 * v

    t = pq.read_table(rundir / "target" / "requests.parquet").to_pandas()
    ok = t[t["error"] == ""]
    from_sent = (ok["first_token"] - ok["sent"]) * 1e3
    return {"ttft_p50": p("ttft", "p50"), "ttft_p99": p("ttft", "p99"), "ttft_mean": p("ttft", "mean"),
            "tpot_p50": p("tpot", "p50"),
            "itl_p50": p("itl", "p50"), "itl_mean": p("itl", "mean"), "e2e_p50": p("latency", "p50"),
            "e2e_mean": p("latency", "mean"), "e2e_p99": p("latency", "p99"), "completed": int(s["ok"]),
            "failed": int(s["count"] - s["ok"]),
            "prompt_tokens": float(ok["prompt_tokens"].mean()), "output_tokens": float(ok["output_tokens"].mean()),
            "chunks": float(ok["token_times"].map(len).mean()),
            "ttft_sent_p50": float(from_sent.median()), "send_lag_p50": p("send_lag", "p50"),
            "send_lag_p99": p("send_lag", "p99"), "service_p50": p("service_time", "p50"), "wall_s": wall,
            "rundir": str(rundir), "verdict": json.loads((rundir / "meta.json").read_text()).get("verdict")}


def run_vllm_bench(a, eng: Engine, model: Path, seed: int, out: Path) -> dict:
    argv = [peer_bin("vllm", "vllm"), "bench", "serve", "--backend", "openai-chat", "--base-url", eng.root,
            "--endpoint", "/v1/chat/completions", "--model", MODEL_NAME, "--tokenizer", model,
            "--dataset-name", "random", "--random-input-len", a.isl, "--random-output-len", a.osl,
            "--random-range-ratio", "0", "--num-prompts", a.requests, "--request-rate", a.rate, "--burstiness", "1",
            "--ignore-eos", "--seed", seed, "--save-result", "--save-detailed", "--result-dir", out,
            "--result-filename", "vllm_bench.json", "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99", "--disable-tqdm"]
    wall = _client(argv, out / "vllm_bench.log", {"VLLM_TARGET_DEVICE": "cpu"})
    r = json.loads((out / "vllm_bench.json").read_text())
    n = max(1, r["completed"])
    itls = [g for per in r.get("itls", []) for g in per]
    return {"ttft_p50": r["median_ttft_ms"], "ttft_p99": r["p99_ttft_ms"], "ttft_mean": r["mean_ttft_ms"],
            "tpot_p50": r["median_tpot_ms"],
            "itl_p50": r["median_itl_ms"], "itl_mean": r["mean_itl_ms"], "e2e_p50": r["median_e2el_ms"],
            "e2e_mean": r["mean_e2el_ms"], "e2e_p99": r["p99_e2el_ms"], "completed": r["completed"],
            "failed": r["failed"],
            "prompt_tokens": r["total_input_tokens"] / n, "output_tokens": r["total_output_tokens"] / n,
            "chunks": len(itls) / n + 1, "wall_s": wall}


def run_aiperf(a, eng: Engine, model: Path, seed: int, out: Path) -> dict:
    art = out / "aiperf"
    argv = [peer_bin("aiperf", "aiperf"), "profile", "--model", MODEL_NAME, "--url", eng.root, "--endpoint-type",
            "chat", "--streaming", "--tokenizer", model, "--request-rate", a.rate, "--arrival-pattern", "poisson",
            "--request-count", a.requests, "--isl", a.isl, "--isl-stddev", "0", "--osl", a.osl, "--osl-stddev", "0",
            "--extra-inputs", "ignore_eos:true", "--random-seed", seed, "--output-artifact-dir", art, "--ui", "none"]
    # not offline: AIPerf 0.13 in HF_HUB_OFFLINE mode cannot load a tokenizer from a local folder ("HFValidationError:
    # Repo id must be in the form 'repo_name' or 'namespace/repo_name'"); online, a local folder loads without a request
    wall = _client(argv, out / "aiperf.log", offline=False)
    r = json.loads((art / "profile_export_aiperf.json").read_text())

    def g(metric, stat):
        v = (r.get(metric) or {}).get(stat)
        return float("nan") if v is None else float(v)

    return {"ttft_p50": g("time_to_first_token", "p50"), "ttft_p99": g("time_to_first_token", "p99"),
            "ttft_mean": g("time_to_first_token", "avg"),
            "tpot_p50": g("inter_token_latency", "p50"), "itl_p50": g("inter_chunk_latency", "p50"),
            "itl_mean": g("inter_chunk_latency", "avg"), "e2e_p50": g("request_latency", "p50"),
            "e2e_mean": g("request_latency", "avg"), "e2e_p99": g("request_latency", "p99"),
            "completed": int(g("request_count", "avg")),
            "failed": sum(int(e.get("count", 1)) for e in r.get("error_summary") or [] if isinstance(e, dict)),
            "prompt_tokens": g("input_sequence_length", "avg"), "output_tokens": g("output_sequence_length", "avg"),
            "usage_prompt_tokens": g("usage_prompt_tokens", "avg"), "wall_s": wall}


# --- the table ---------------------------------------------------------------------------------------

ROWS = (  # key, label, digits
    ("ttft_p50", "TTFT p50 ms", 2), ("ttft_p99", "TTFT p99 ms", 2), ("tpot_p50", "TPOT p50 ms", 3),
    ("itl_p50", "ITL p50 ms (per chunk)", 3), ("e2e_p50", "E2E p50 ms", 1), ("e2e_p99", "E2E p99 ms", 1),
    ("completed", "requests completed", 0), ("prompt_tokens", "prompt tokens/request (its own count)", 1),
    ("output_tokens", "output tokens/request (its own count)", 1), ("chunks", "content chunks/request", 1),
    ("engine.requests", "requests the engine finished", 0),
    ("engine.prompt_tokens", "prompt tokens/request (engine count)", 1),
    ("engine.output_tokens", "output tokens/request (engine count)", 1),
    ("engine.ttft_mean_ms", "engine's own TTFT mean ms", 2),
    ("outside_ttft", "TTFT mean minus the engine's own, ms", 2),
    ("engine.e2e_mean_ms", "engine's own E2E mean ms", 1),
    ("e2e_vs_engine", "E2E mean / the engine's own", 3),
    ("itl_vs_engine", "ITL mean / the engine's own", 3),
)
#: Within a round, the engine's own mean TTFT during the tools' runs may differ by this much before the
#: script says that the engine, not the tools, made the difference (other load on a shared machine).
ENGINE_SPREAD = 0.15


def _get(res: dict, key: str) -> float:
    if key == "outside_ttft":  # the client's share of TTFT: network, HTTP server, client, (latbench) send lag
        return float(res.get("ttft_mean", float("nan"))) - float(res["engine"]["ttft_mean_ms"])
    if key in ("e2e_vs_engine", "itl_vs_engine"):  # the tool's figure over the engine's for the same requests:
        ours, own = key.split("_vs_")[0] + "_mean", key.split("_vs_")[0] + "_mean_ms"  # the engine's state divides out
        return float(res.get(ours, float("nan"))) / float(res["engine"].get(own, float("nan")))
    if key.startswith("engine."):
        return float(res["engine"].get(key.split(".", 1)[1], float("nan")))
    return float(res.get(key, float("nan")))


def _median(vals: list[float]) -> float:
    vals = [v for v in vals if v == v]
    return statistics.median(vals) if vals else float("nan")


def _fmt(v: float, digits: int) -> str:
    return "-" if v != v else f"{v:,.{digits}f}"


def print_tables(rounds: list[dict]) -> dict:
    """Per-round lines, then medians with latbench/peer ratios; returns the medians."""
    print("\nPer round (TTFT p50 / TPOT p50 / E2E p50, ms; latbench/vllm ratio of TPOT and E2E p50):")
    for i, r in enumerate(rounds, 1):
        cells = [f"{t} {_get(r[t], 'ttft_p50'):.2f} / {_get(r[t], 'tpot_p50'):.3f} / {_get(r[t], 'e2e_p50'):.1f}"
                 for t in TOOLS]
        ratio = [f"{_get(r['latbench'], k) / _get(r['vllm'], k):.3f}" for k in ("tpot_p50", "e2e_p50")]
        print(f"  round {i}: " + " | ".join(cells) + f" | latbench/vllm {ratio[0]}, {ratio[1]}")
        norm = [_get(r[t], "e2e_vs_engine") for t in TOOLS]
        print("           E2E mean over the engine's own E2E mean in the same run: "
              + " / ".join(f"{v:.3f}" for v in norm) + f" (latbench/vllm {norm[0] / norm[1]:.3f})")
        if r["latbench"].get("verdict") == "invalid":
            lag = r["latbench"]["send_lag_p99"]
            print(f"           latbench judged its own run invalid (send lag p99 {lag:.1f} ms: its process did not "
                  "get the CPU to send on time); its figures are shown all the same")
        own = [_get(r[t], "engine.ttft_mean_ms") for t in TOOLS]
        spread = (max(own) - min(own)) / min(own)
        print("           engine's own TTFT mean during each run: " + " / ".join(f"{v:.1f}" for v in own)
              + " ms" + (f"  <- {spread:.0%} apart: the engine was not in the same state for the three runs "
                         "(other load, or the CPU engine's own drift between runs); compare the figures "
                         "over the engine's own" if spread > ENGINE_SPREAD else ""))
    med = {t: {k: _median([_get(r[t], k) for r in rounds]) for k, _, _ in ROWS} for t in TOOLS}
    head = (f"| medians of {len(rounds)} rounds | vllm bench serve | AIPerf | latbench | latbench/vllm "
            "| latbench/AIPerf |")
    print("\n" + head + "\n|" + "---|" * 6)
    for key, label, digits in ROWS:
        v, ap, lb = med["vllm"][key], med["aiperf"][key], med["latbench"][key]
        ratio = lambda x: "-" if not (x == x and lb == lb and x) else f"{lb / x:.3f}"  # noqa: E731
        print(f"| {label} | {_fmt(v, digits)} | {_fmt(ap, digits)} | {_fmt(lb, digits)} | {ratio(v)} | {ratio(ap)} |")
    print_agreement(rounds)
    return med


def print_agreement(rounds: list[dict]) -> None:
    """The acceptance line: do latbench and vllm bench agree within 5% in each round, raw and measured against
    the engine's own account of the same requests (which divides out a round in which the engine was slower)?"""
    print("\nlatbench / vllm bench, per round (within 5%?):")
    for i, r in enumerate(rounds, 1):
        raw = [_get(r["latbench"], k) / _get(r["vllm"], k) for k in ("tpot_p50", "e2e_p50")]
        norm = [_get(r["latbench"], k) / _get(r["vllm"], k) for k in ("e2e_vs_engine", "itl_vs_engine")]
        engine = _get(r["latbench"], "engine.e2e_mean_ms") / _get(r["vllm"], "engine.e2e_mean_ms")
        ok = lambda x: "yes" if abs(x - 1) <= 0.05 else "no"  # noqa: E731
        print(f"  round {i}: TPOT p50 {raw[0]:.3f} ({ok(raw[0])}), E2E p50 {raw[1]:.3f} ({ok(raw[1])}); the engine's "
              f"own E2E mean was {engine:.3f}x as long during latbench's run; over the engine's own: E2E mean "
              f"{norm[0]:.3f} ({ok(norm[0])}), ITL mean {norm[1]:.3f} ({ok(norm[1])})")


def print_definitions(med: dict, counts: dict | None) -> None:
    """Where the three tools' definitions differ, with the numbers of these runs."""
    lb, vb, ap = med["latbench"], med["vllm"], med["aiperf"]
    lines = [
        f"TTFT: latbench counts from the intended send time (the Poisson schedule), vllm bench and AIPerf from when "
        f"they actually sent. latbench's send lag p50 {lb['send_lag_p50']:.2f} ms; its TTFT p50 from the actual "
        f"send is {lb['ttft_sent_p50']:.2f} ms (vs {lb['ttft_p50']:.2f} ms from the schedule).",
        "TTFT's end: latbench and AIPerf stop at the first chunk with non-empty content; vllm bench at the first "
        "chunk with `choices`, which is vLLM's role-only chunk (content \"\"), sent just before the first token.",
        f"ITL: latbench and vllm bench list gaps between chunks (vllm bench also counts the role chunk -> first "
        f"token gap and the empty finish chunk: {vb['chunks']:.1f} vs latbench's {lb['chunks']:.1f} chunks per "
        f"request); AIPerf's 'ITL' is per token, (latency - TTFT) / (output tokens - 1), its TPOT: "
        f"{ap['tpot_p50']:.3f} ms here, and its per-chunk figure is 'inter_chunk_latency' (the ITL row above).",
        f"TPOT: latbench (done - first token) / (server's output tokens - 1), done being the last byte after "
        f"[DONE]; vllm bench (last choices chunk - first chunk) / (usage's completion tokens - 1); AIPerf divides "
        f"by its own re-tokenized output count ({ap['output_tokens']:.1f} tokens per request here vs the "
        f"engine's {ap['engine.output_tokens']:.1f}).",
        f"E2E: latbench from the intended send to the last byte (its service time, from the actual send: p50 "
        f"{lb['service_p50']:.1f} ms); vllm bench from its send to the last chunk with choices; AIPerf from its "
        f"send to the last response.",
        f"Prompt tokens: the engine counted {lb['engine.prompt_tokens']:.1f} (latbench), "
        f"{vb['engine.prompt_tokens']:.1f} (vllm bench), {ap['engine.prompt_tokens']:.1f} (AIPerf) per request: "
        f"the asked length plus the chat template's tokens. vllm bench reports the server's usage count "
        f"({vb['prompt_tokens']:.1f}), AIPerf its own count of the prompt before the template "
        f"({ap['prompt_tokens']:.1f}), latbench the server's usage ({lb['prompt_tokens']:.1f}).",
        f"Requests: the engine finished {lb['engine.requests']:.0f} (latbench), {vb['engine.requests']:.0f} "
        f"(vllm bench) and {ap['engine.requests']:.0f} (AIPerf) per run: vllm bench and AIPerf send a count, "
        f"latbench a Poisson phase of 1.5x the expected time that ends at max_requests.",
    ]
    if counts:
        lines.append(f"latbench's own synthetic prompts, asked for {counts['asked']} tokens, are "
                     f"{counts['synthetic_tokens_mean']:.1f} tokens of this tokenizer on average "
                     f"({counts['synthetic_tokens_min']}-{counts['synthetic_tokens_max']}): without a tokenizer in "
                     f"latbench, this script sends it prompts cut to exactly {counts['asked']} tokens (a dataset).")
    print("\nWhere the definitions differ:")
    for line in lines:
        print(textwrap.fill(line, 118, initial_indent="- ", subsequent_indent="  "))


# --- main --------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=80, help="requests per run (each tool, each round)")
    ap.add_argument("--rate", type=float, default=4.0, help="Poisson arrival rate, requests per second")
    ap.add_argument("--isl", type=int, default=64, help="prompt tokens")
    ap.add_argument("--osl", type=int, default=64, help="output tokens (ignore_eos)")
    ap.add_argument("--port", type=int, default=8811)
    ap.add_argument("--out", type=Path, help="folder for every run's files (default: a new temporary folder)")
    ap.add_argument("--model-only", type=Path, metavar="DIR", help="write the model folder to DIR and stop")
    ap.add_argument("--vllm-arg", action="append", default=[], help="extra `vllm serve` argument (repeatable)")
    a = ap.parse_args(argv)

    peer_setup.setup_vllm()
    peer_setup.setup_aiperf()
    if a.model_only:
        write_model(a.model_only)
        print(a.model_only)
        return 0
    work = a.out or Path(tempfile.mkdtemp(prefix="latbench-real-engines-"))
    work.mkdir(parents=True, exist_ok=True)
    model = work / "model"
    write_model(model)
    features = latbench_features()
    dataset, counts = exact_dataset(model, work, a.isl)
    print(f"latbench features: {sorted(features) or 'none'}; prompts: "
          + ("its tokenizer" if "workload.tokenizer" in features else f"{counts['written']} exact-length prompts"))

    eng = Engine(model, a.port, work / "vllm_serve.log", a.vllm_arg)
    print(f"vllm serve ready in {eng.ready_s:.1f} s (core {SERVER_CORE}); clients on core {CLIENT_CORE}; work: {work}")
    rounds = []
    try:
        for i in range(8):  # warm-up: prefill and decode paths compiled and paged in before anything counts
            eng.chat("warm up " * (4 + i), a.osl)
        for width in (2, 3, 4, 6, 8):  # and batches of the sizes the runs reach (a CPU engine's first batch of a
            with ThreadPoolExecutor(width) as pool:  # new size is slow; the first tool of round 1 would pay it)
                list(pool.map(lambda i: eng.chat("warm up " * (8 + i), a.osl), range(2 * width)))
        for r in range(a.rounds):
            res = {}
            for tool in TOOLS[r % 3:] + TOOLS[:r % 3]:  # a Latin square: each tool runs first, second and last once
                out = work / f"round{r + 1}" / tool
                out.mkdir(parents=True, exist_ok=True)
                before = eng.metrics()
                if tool == "latbench":
                    res[tool] = run_latbench(a, eng, model, dataset, features, r + 1, out)
                elif tool == "vllm":
                    res[tool] = run_vllm_bench(a, eng, model, r + 1, out)
                else:
                    res[tool] = run_aiperf(a, eng, model, r + 1, out)
                res[tool]["engine"] = engine_view(before, eng.metrics())
                own = (f"; latbench's verdict: {res[tool]['verdict']}, send lag p99 {res[tool]['send_lag_p99']:.1f} ms"
                       if tool == "latbench" else "")
                print(f"round {r + 1} {tool}: TTFT p50 {res[tool]['ttft_p50']:.2f} ms, E2E p50 "
                      f"{res[tool]['e2e_p50']:.1f} ms, {res[tool]['completed']} ok ({res[tool]['wall_s']:.0f} s){own}",
                      flush=True)
            rounds.append(res)
    finally:
        eng.stop()
    med = print_tables(rounds)
    med["latbench"].update({k: _median([r["latbench"][k] for r in rounds])
                            for k in ("ttft_sent_p50", "send_lag_p50", "service_p50")})
    print_definitions(med, None if "workload.tokenizer" in features else counts)
    (work / "results.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()},
                                                   "features": sorted(features), "prompt_counts": counts,
                                                   "vllm_ready_s": eng.ready_s, "rounds": rounds}, indent=1))
    print(f"\nlast latbench RunDir (report.html with vLLM's own metrics): {rounds[-1]['latbench']['rundir']}")
    print(f"all files: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
