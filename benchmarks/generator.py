"""Is the generator ever the bottleneck? latbench against wrk, hey and Locust (a script, not a test).

Starts nginx (one worker, a fixed 200 on 127.0.0.1; installed with apt-get when missing and possible)
or, failing that, a trivial uvloop server in a subprocess. Then, interleaved, ``--rounds`` times:

1. closed loop, 32 connections, ``--duration`` seconds each: wrk (1 thread), hey, Locust FastHttpUser
   (headless, 32 users, ``wait_time = constant(0)``), latbench on each transport (and the lean one on 2
   processes): req/s, requests per client CPU-second, p50/p99, each as a ratio to wrk;
2. latbench open loop (lean, Poisson arrivals) at 1k, 5k, 20k and 50k req/s: achieved rate and send lag
   (``sent - scheduled``) p50/p99/max.

``--baseline REF`` (a commit, or another checkout's path; repeatable) runs REF's lean rows interleaved with this
checkout's; a commit is checked out with ``git worktree add`` into a temporary folder. ``--quick`` is the guard to
run before finishing a change to the hot path: wrk and the lean closed loop only, at this checkout and at each
REF, 2 s runs, 3 rounds in alternating order (about 30 s): req/s, req per client CPU-second and the ratio to REF.

Client CPU: wrk's and hey's whole process (``wait4`` rusage; their start-up is negligible); Locust's
rusage less the CPU of a Locust start-up with no users (its imports cost about a second); latbench's
engine CPU over the run (``EngineResult.cpu_seconds``, summed over processes). Medians over the rounds.
Every latbench run is its own subprocess (``_latbench`` mode), so runs do not share a heap.

    python benchmarks/generator.py [--duration 5] [--rounds 3] [--skip locust,hey] [--baseline REF]...
    python benchmarks/generator.py --quick --baseline main
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's loadgen, also for --baseline
import loadgen  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CONNECTIONS = 32
RATES = (1_000, 5_000, 20_000, 50_000)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {limit:g} s")


# --- the server --------------------------------------------------------------------------------------

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fcgi;
  uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  keepalive_requests 100000000;
  keepalive_timeout 75s;
  server {{ listen 127.0.0.1:{port}; location / {{ return 200 "ok\\n"; }} }}
}}
"""

TRIVIAL_SERVER = """
import asyncio, sys, uvloop
RESP = b"HTTP/1.1 200 OK\\r\\nContent-Length: 3\\r\\nContent-Type: text/plain\\r\\n\\r\\nok\\n"
class P(asyncio.Protocol):
    def connection_made(self, t): self.t = t
    def data_received(self, d): self.t.write(RESP * d.count(b"\\r\\n\\r\\n"))
async def main():
    await (await asyncio.get_running_loop().create_server(P, "127.0.0.1", int(sys.argv[1]))).serve_forever()
uvloop.run(main())
"""


def ensure_tools(want: list[str]) -> dict[str, str | None]:
    """Path of each tool; tries ``apt-get install`` once for the missing ones (nginx, wrk, hey)."""
    found = {t: shutil.which(t) or (f"/usr/sbin/{t}" if os.path.exists(f"/usr/sbin/{t}") else None) for t in want}
    missing = [t for t, p in found.items() if p is None]
    if missing and shutil.which("apt-get") and os.geteuid() == 0:
        print(f"installing {', '.join(missing)} with apt-get ...", flush=True)
        subprocess.run(["apt-get", "update"], capture_output=True, timeout=300)
        for t in missing:  # one by one: a package that does not exist must not block the others
            subprocess.run(["apt-get", "install", "-y", t], capture_output=True, timeout=300)
            found[t] = shutil.which(t) or (f"/usr/sbin/{t}" if os.path.exists(f"/usr/sbin/{t}") else None)
    return found


def start_server(nginx: str | None, tmp: Path) -> tuple[subprocess.Popen, int, str]:
    port = free_port()
    if nginx:
        conf = tmp / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=tmp, port=port))
        proc = subprocess.Popen([nginx, "-c", str(conf), "-p", str(tmp)], stderr=subprocess.DEVNULL)
        kind = "nginx (1 worker)"
    else:
        proc = subprocess.Popen([sys.executable, "-c", TRIVIAL_SERVER, str(port)])
        kind = "trivial uvloop server (nginx unavailable)"
    wait_port(port)
    return proc, port, kind


# --- external tools ----------------------------------------------------------------------------------


class Children:
    """CPU of finished child processes, from the RUSAGE_CHILDREN deltas around each run."""

    @staticmethod
    def run(argv: list[str], limit: float, **kw) -> tuple[str, float]:
        import resource

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=limit, **kw)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return proc.stdout, cpu


def _seconds(text: str) -> float:
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}
    for u in ("us", "ms", "s", "m"):
        if text.endswith(u):
            return float(text[: -len(u)]) * units[u]
    return float(text)


def bench_wrk(wrk: str, url: str, dur: float) -> dict:
    out, cpu = Children.run([wrk, "-t1", f"-c{CONNECTIONS}", f"-d{dur:g}s", "--latency", url], dur + 30)
    res = {"cpu": cpu}
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("Requests/sec:"):
            res["rps"] = float(parts[1])
        elif len(parts) == 2 and parts[0] in ("50%", "99%"):
            res["p" + parts[0][:-1]] = _seconds(parts[1])
    res["requests"] = res["rps"] * dur
    return res


def bench_hey(hey: str, url: str, dur: float) -> dict:
    out, cpu = Children.run([hey, "-z", f"{dur:g}s", "-c", str(CONNECTIONS), "-disable-compression", url], dur + 30)
    res = {"cpu": cpu}
    for line in out.splitlines():
        s = line.strip()
        if s.startswith("Requests/sec:"):
            res["rps"] = float(s.split()[1])
        elif s.startswith("50% in") or s.startswith("99% in"):
            res["p" + s[:2]] = float(s.split()[2])
    res["requests"] = res["rps"] * dur
    return res


LOCUSTFILE = """
from locust import FastHttpUser, constant, task
class U(FastHttpUser):
    wait_time = constant(0)
    @task
    def get(self):
        self.client.get("/")
"""


def bench_locust(url: str, dur: float, tmp: Path, startup_cpu: float) -> dict:
    lf = tmp / "locustfile.py"
    lf.write_text(LOCUSTFILE)
    prefix = tmp / f"locust{time.monotonic_ns()}"
    argv = [sys.executable, "-m", "locust", "-f", str(lf), "--headless", "-u", str(CONNECTIONS), "-r", "1000",
            "-t", f"{dur:g}s", "--host", url.rstrip("/"), "--csv", str(prefix), "--only-summary", "--loglevel", "ERROR"]
    _, cpu = Children.run(argv, dur + 60)
    import csv

    with open(f"{prefix}_stats.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["Name"] == "Aggregated")
    n = int(row["Request Count"])
    return {"rps": float(row["Requests/s"]), "p50": float(row["50%"]) / 1e3, "p99": float(row["99%"]) / 1e3,
            "cpu": max(cpu - startup_cpu, 1e-9), "requests": n}


def locust_startup_cpu(tmp: Path) -> float:
    lf = tmp / "locustfile.py"
    lf.write_text(LOCUSTFILE)
    argv = [sys.executable, "-m", "locust", "-f", str(lf), "--headless", "-u", "0", "-t", "1s",
            "--host", "http://127.0.0.1:9", "--only-summary", "--loglevel", "ERROR"]
    return Children.run(argv, 60)[1]


# --- latbench ----------------------------------------------------------------------------------------


# Only latbench's public API (``import loadgen``) from here on: the layout behind it may move, and a
# --baseline checkout runs its own copy of this file.


def lean_factory(target):
    return loadgen.LeanTransport()


def aiohttp_factory(target):
    return loadgen.AiohttpTransport()


def httpx_factory(target):
    return loadgen.HttpxTransport(http2=False)


FACTORIES = {"lean": lean_factory, "aiohttp": aiohttp_factory, "httpx": httpx_factory}


def latbench_worker(spec: dict) -> dict:
    """One latbench run, in this (sub)process; spec: url, transport, processes, and concurrency or rate."""

    import numpy as np
    import pyarrow as pa

    lb = loadgen
    pa.array(np.zeros(1))  # pyarrow imports pandas at its first conversion: not at the run's first flush
    tmp = Path(tempfile.mkdtemp(prefix="latbench-gen-"))
    load = f"concurrency: {spec['concurrency']}" if spec.get("concurrency") else f"qps: {spec['rate']}"
    (tmp / "s.yaml").write_text(textwrap.dedent(f"""
        name: gen
        target: {{url: "{spec['url']}", api: http, stream: false}}
        load:
          arrival: poisson
          max_in_flight: 20000
          grace: 2s
          phases: [{{name: main, duration: {spec['duration']}s, {load}}}]
        """))
    loaded = lb.load_scenario(tmp / "s.yaml")
    target = loaded.scenario.target_list()[0]
    factory = FACTORIES[spec["transport"]]
    if spec.get("processes", 1) > 1:
        mt = lb.MeasuredTarget(loaded, target, target.url, "", tmp)
        res = lb.MultiProcess(spec["processes"], transport_factory=factory).run(mt)
    else:
        async def go():
            sc = loaded.scenario
            settings = lb.EngineSettings(lb.plan_phases(sc.load), max_in_flight=sc.load.max_in_flight,
                                         seed=sc.load.seed, grace=2.0)
            transport = factory(target)
            await transport.start()
            engine = lb.NativeEngine(settings, lb.make_protocol(target, sc.workload, None),
                                     lb.make_prompt_source(sc.workload, 0, tmp), transport,
                                     lb.RecordWriter(tmp / "requests.parquet"))
            try:
                return await engine.run()
            finally:
                await transport.close()

        res = lb.run_async(go())
    t = lb.read_records(tmp / "requests.parquet")
    err = np.asarray(t.column("error").to_pylist(), dtype=object)
    sched, sent, done = (t.column(c).to_numpy() for c in ("scheduled", "sent", "done"))
    ok = err == ""
    lat = np.sort((done - sched)[ok])
    lag = np.sort((sent - sched)[err != "dropped"])
    q = lambda a, p: float(a[min(len(a) - 1, int(np.ceil(p * len(a))) - 1)]) if len(a) else float("nan")  # noqa: E731
    dur = float(spec["duration"])
    shutil.rmtree(tmp, ignore_errors=True)
    return {"rps": ok.sum() / dur, "sent_rate": (err != "dropped").sum() / dur, "scheduled": len(err),
            "requests": int(ok.sum()),
            "errors": int((~ok).sum()), "cpu": res.cpu_seconds, "p50": q(lat, 0.5), "p99": q(lat, 0.99),
            "lag50": q(lag, 0.5), "lag99": q(lag, 0.99), "lagmax": float(lag[-1]) if len(lag) else float("nan")}


def bench_latbench(spec: dict, dur: float, root: Path = ROOT) -> dict:
    """One latbench run in a subprocess, of the checkout at ``root`` (its loadgen first on the path, whatever
    PYTHONPATH or an editable install say); a run that does not end in time counts as nothing achieved."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH")))))
    try:
        out = subprocess.run([sys.executable, str(root / "benchmarks" / "generator.py"), "_latbench", json.dumps(spec)],
                             stdout=subprocess.PIPE, text=True, timeout=dur + 90, cwd=root, env=env)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, IndexError, ValueError) as exc:
        print(f"  latbench run {spec} failed: {type(exc).__name__}", flush=True)
        nan = float("nan")
        return {"rps": 0.0, "sent_rate": 0.0, "requests": 0, "errors": 0, "cpu": nan, "p50": nan, "p99": nan,
                "lag50": nan, "lag99": nan, "lagmax": nan}


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout.strip()


def describe(root: Path) -> str:
    """A checkout's short commit, ``+`` when its tracked files differ from it; its folder's name outside git."""
    try:
        dirty = _git("status", "--porcelain", "--untracked-files=no", cwd=root)
        return _git("rev-parse", "--short", "HEAD", cwd=root) + ("+" if dirty else "")
    except (subprocess.CalledProcessError, OSError):
        return root.name


def checkout(ref: str, stack: contextlib.ExitStack) -> Path:
    """The checkout to run as baseline ``ref``: a folder as it is, else a commit of this repository checked out with
    ``git worktree add`` into a temporary folder (removed when ``stack`` closes)."""
    if Path(ref).is_dir():
        return Path(ref).resolve()
    tree = Path(tempfile.mkdtemp(prefix="latbench-base-")) / "tree"
    _git("worktree", "add", "--detach", "--quiet", str(tree), ref)
    stack.callback(shutil.rmtree, tree.parent, ignore_errors=True)
    stack.callback(subprocess.run, ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                   capture_output=True)
    return tree


# --- the tables --------------------------------------------------------------------------------------


def med(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if key in r and r[key] == r[key]]
    return statistics.median(vals) if vals else float("nan")


def print_closed(results: dict[str, list[dict]]) -> None:
    base = {k: med(results.get("wrk", []), k) for k in ("rps", "p50", "p99")}
    base["per_cpu"] = med([{"v": r["requests"] / r["cpu"]} for r in results.get("wrk", [])], "v")
    print(f"\nclosed loop, {CONNECTIONS} connections (medians of {max(len(v) for v in results.values())} rounds; "
          "x = ratio to wrk)")
    print(f"{'client':<18}{'req/s':>10}{'x':>7}{'req/CPU-s':>12}{'x':>7}{'p50 ms':>9}{'x':>7}{'p99 ms':>9}{'x':>7}")
    for name, rows in results.items():
        rps, p50, p99 = med(rows, "rps"), med(rows, "p50"), med(rows, "p99")
        per = med([{"v": r["requests"] / r["cpu"] if r["cpu"] else float("nan")} for r in rows], "v")
        print(f"{name:<18}{rps:>10.0f}{rps / base['rps']:>7.2f}{per:>12.0f}{per / base['per_cpu']:>7.2f}"
              f"{p50 * 1e3:>9.2f}{p50 / base['p50']:>7.2f}{p99 * 1e3:>9.2f}{p99 / base['p99']:>7.2f}")


def print_open(results: dict[str, list[dict]]) -> None:
    print("\nlatbench open loop, Poisson arrivals (medians)")
    print(f"{'run':<22}{'sent/s':>10}{'ok/s':>10}{'achieved':>10}{'lag p50 ms':>12}"
          f"{'p99 ms':>9}{'max ms':>9}{'CPU s':>8}")
    for name, rows in results.items():
        sent, ok = med(rows, "sent_rate"), med(rows, "rps")
        # of the schedule
        achieved = med([{"v": r["requests"] / r["scheduled"]} for r in rows if r.get("scheduled")], "v")
        print(f"{name:<22}{sent:>10.0f}{ok:>10.0f}{achieved:>9.1%}{med(rows, 'lag50') * 1e3:>12.3f}"
              f"{med(rows, 'lag99') * 1e3:>9.3f}{med(rows, 'lagmax') * 1e3:>9.1f}{med(rows, 'cpu'):>8.2f}")


def print_quick(results: dict[str, list[dict]], labels: list[str]) -> None:
    """The guard's lines: this checkout against each baseline, per client CPU-second, round by round."""
    print_closed(results)
    this = results[labels[0]]
    for base in labels[1:]:
        per = [a["requests"] / a["cpu"] / (b["requests"] / b["cpu"]) for a, b in zip(this, results[base])]
        rps = statistics.median(a["rps"] / b["rps"] for a, b in zip(this, results[base]))
        print(f"{labels[0]} / {base}: {statistics.median(per):.2f}x req per client CPU-s (rounds "
              f"{', '.join(f'{x:.2f}' for x in per)}), {rps:.2f}x req/s")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=None, help="seconds per run (default 5; 2 with --quick)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma-separated: wrk,hey,locust,aiohttp,lean,httpx,lean-2p,open")
    ap.add_argument("--baseline", action="append", default=[], metavar="REF",
                    help="a commit of this repository (checked out with `git worktree add` into a temporary folder) "
                         "or another checkout's path: its lean runs interleaved with this one's; repeatable")
    ap.add_argument("--quick", action="store_true",
                    help="the guard before finishing a change to the hot path: wrk and the lean closed loop only, at "
                         "this checkout and each --baseline, rounds in alternating order, ratios to the baseline")
    a = ap.parse_args(argv)
    skip = set(filter(None, a.skip.split(",")))
    if a.quick:
        skip |= {"hey", "locust", "aiohttp", "httpx", "lean-2p", "open"}
    dur = a.duration or (2.0 if a.quick else 5.0)
    tools = ensure_tools(["nginx"] + [t for t in ("wrk", "hey") if t not in skip])
    for t, p in tools.items():
        if p is None:
            print(f"note: {t} is not installed and could not be installed: skipped")
    tmp = Path(tempfile.mkdtemp(prefix="latbench-gen-"))
    with contextlib.ExitStack() as stack:
        roots = [(f"lean {describe(ROOT)}" if a.quick else "lean", ROOT)]
        for ref in a.baseline:
            root = checkout(ref, stack)
            roots.append((f"lean {ref if root.name == 'tree' else describe(root)}", root))
        server, port, kind = start_server(tools["nginx"], tmp)
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        stack.callback(server.wait, 10)
        stack.callback(server.terminate)
        run(a, skip, tools, roots, f"http://127.0.0.1:{port}/", kind, dur, tmp)


def run(a, skip: set[str], tools: dict, roots: list[tuple[str, Path]], url: str, kind: str, dur: float,
        tmp: Path) -> None:
    """The interleaved rounds and their tables (``roots``: this checkout's label and root first, then the baselines)."""
    print(f"server: {kind} on {url}; {os.cpu_count()} CPUs; load average at start {os.getloadavg()[0]:.2f}")
    for label, root in roots[1:]:
        print(f"baseline {label}: {root}")
    clients = []
    if tools.get("wrk") and "wrk" not in skip:
        clients.append(("wrk", lambda: bench_wrk(tools["wrk"], url, dur)))
    if tools.get("hey") and "hey" not in skip:
        clients.append(("hey", lambda: bench_hey(tools["hey"], url, dur)))
    if "locust" not in skip:
        startup = locust_startup_cpu(tmp)
        print(f"Locust start-up CPU (subtracted): {startup:.2f} s")
        clients.append(("locust FastHttp", lambda: bench_locust(url, dur, tmp, startup)))
    for tr in ("aiohttp", "httpx"):
        if tr not in skip:
            clients.append((f"latbench {tr}", lambda tr=tr: bench_latbench(
                {"url": url, "transport": tr, "concurrency": CONNECTIONS, "duration": dur}, dur)))
    lean = [] if "lean" in skip else [
        (label if a.quick or i else "latbench lean", lambda root=root: bench_latbench(
            {"url": url, "transport": "lean", "concurrency": CONNECTIONS, "duration": dur}, dur, root))
        for i, (label, root) in enumerate(roots)]
    tail = [] if "lean-2p" in skip else [("latbench lean x2p", lambda: bench_latbench(
        {"url": url, "transport": "lean", "concurrency": CONNECTIONS, "duration": dur, "processes": 2}, dur))]
    closed: dict[str, list[dict]] = {name: [] for name, _ in clients + lean + tail}
    opened: dict[str, list[dict]] = {}
    loads = []
    for rnd in range(a.rounds):
        # the checkouts in turn, in alternating order: a load that drifts over a round weighs on each alike
        for name, fn in clients + (lean if rnd % 2 == 0 else lean[::-1]) + tail:
            r = fn()
            closed[name].append(r)
            print(f"  round {rnd + 1} {name:<18} {r['rps']:>9.0f} req/s  cpu {r['cpu']:.2f} s", flush=True)
        if "open" not in skip:
            for rate in RATES:
                for (tag, root), procs in ((rt, p) for p in ((1, 2) if rate >= 20_000 else (1,)) for rt in roots):
                    name = f"{tag} {procs}p {rate}/s"
                    r = bench_latbench({"url": url, "transport": "lean", "rate": rate, "duration": dur,
                                        "processes": procs}, dur, root)
                    opened.setdefault(name, []).append(r)
                    print(f"  round {rnd + 1} {name:<18} sent {r['sent_rate']:>8.0f}/s  lag p99 "
                          f"{r['lag99'] * 1e3:.2f} ms", flush=True)
        loads.append(os.getloadavg()[0])
    if a.quick and len(lean) > 1:
        print_quick(closed, [name for name, _ in lean])
    else:
        print_closed(closed)
    if opened:
        print_open(opened)
    print(f"\nload average (1 min) after each round: {', '.join(f'{x:.2f}' for x in loads)}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "_latbench":
        print(json.dumps(latbench_worker(json.loads(sys.argv[2]))))
    else:
        main()
