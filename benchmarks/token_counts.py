"""Do the prompts latbench sends have the lengths it asks for, by the server's own count?

The reference server is started with ``--tokenizer`` (a small BPE shaped like Llama 3's, trained on the
spot by ``loadgen.scenario.sample_data``), so its ``usage.prompt_tokens`` is what a server of that model
would report. Against it, ``--requests`` requests of mixed lengths (1 to 400 tokens) per run:

- ``tokenizer`` (latbench counts with the same tokenizer): usage should equal the requested length plus the
  special tokens (BOS) for completions, plus the chat template's overhead for chat, for every request;
- ``server`` (latbench asks the target's /tokenize): the same, without a local copy of the tokenizer;
- ``approximation`` (no tokenizer: 4 characters a token): how far the requested lengths are from the
  server's count of the content (its usage less the overhead measured in the counted runs), the figure the
  issue measured against vLLM (2.2x there, with that model's tokenizer).

Each run is a real ``latbench run`` of a generated scenario; the table is read back from its RunDir.

    python benchmarks/token_counts.py [--requests 1000] [--apis openai-completions,openai-chat]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import yaml

from loadgen.analysis.metrics import records_frame
from loadgen.records.schema import read_records
from loadgen.run.runner import run_scenario
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.sample_data import train_sample_tokenizer

MIXED = {"mean": 60, "stddev": 60, "min": 1, "max": 400}


def scenario(api: str, tok_dir: Path, counting: str, n: int, qps: float) -> dict:
    workload = {"prompts": {"input_tokens": MIXED, "output_tokens": 1, "distinct": n}}
    if counting != "approximation":
        workload["tokenizer"] = str(tok_dir) if counting == "tokenizer" else "server"
    return {
        "name": f"tokens-{api}-{counting}",
        "target": {"reference": {"arch": "optimized", "model": "tiny", "options": {"tokenizer": str(tok_dir)}},
                   "api": api, "stream": False},
        "workload": workload,
        "load": {"arrival": "constant", "grace": "600s",
                 "phases": [{"name": "main", "duration": f"{n / qps:g}s", "qps": qps}]},
    }


def one(api: str, tok_dir: Path, counting: str, n: int, qps: float, out: Path, overhead: dict) -> dict:
    """One run; ``overhead[api]``: what the server adds to a prompt, as measured by a counted run before it."""
    path = out / f"{api}-{counting}.yaml"
    path.write_text(yaml.safe_dump(scenario(api, tok_dir, counting, n, qps)))
    res = run_scenario(load_scenario(path), out=str(out / "runs"))
    tdir = res.rundir.path / res.targets[0].dir
    s = json.loads((tdir / "summary.json").read_text())
    df = records_frame(read_records(tdir / "requests.parquet"))
    ok = df[df["ok"]]
    diff = ok["prompt_tokens"] - ok["input_tokens"] - ok["added_tokens"].clip(lower=0)
    if (ok["added_tokens"] >= 0).all():
        overhead[api] = ok["added_tokens"].to_numpy()
    added = ok["added_tokens"].to_numpy() if (ok["added_tokens"] >= 0).all() else overhead.get(api)
    content = (ok["prompt_tokens"].sum() - added.sum()) / ok["input_tokens"].sum() if added is not None else None
    return {"api": api, "counting": counting, "requests": len(df), "ok": len(ok),
            "input min/mean/max": f"{ok['input_tokens'].min()}/{ok['input_tokens'].mean():.1f}/"
                                  f"{ok['input_tokens'].max()}",
            "added": (f"{ok['added_tokens'].min()}-{ok['added_tokens'].max()}" if (ok["added_tokens"] >= 0).all()
                      else "unknown"),
            "usage = input+added": f"{int((diff == 0).sum())}/{len(ok)}",
            "server's count of the content / requested": f"{content:.3f}" if content is not None else "-",
            "special tokens": " ".join((s.get("tokens") or {}).get("special_tokens") or []) or "-",
            "rundir": str(res.rundir.path)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--qps", type=float, default=20.0)
    ap.add_argument("--apis", default="openai-completions,openai-chat")
    ap.add_argument("--countings", default="tokenizer,server,approximation")
    ap.add_argument("--out", default=None, help="keep the RunDirs here (default: a temporary folder)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(a.out or tmp)
        tok_dir = train_sample_tokenizer(out / "tokenizer")
        overhead: dict = {}
        rows = [one(api, tok_dir, c, a.requests, a.qps, out, overhead) for api in a.apis.split(",")
                for c in a.countings.split(",")]
    cols = [c for c in rows[0] if c != "rundir"]
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths)))
    print(f"mixed lengths: input_tokens {MIXED}; seed 0; numpy {np.__version__}")


if __name__ == "__main__":
    main()
