"""The Locust master process of one target's run: ``python -m loadgen.engine.locust.master ...``.

Started by :func:`loadgen.engine.locust.run_target_locust`, never imported by the process that runs
the native engine (locust monkey-patches the standard library through gevent). It:

1. binds Locust's ``MasterRunner`` (guarded: a process that joins must prove the run's secret, from
   ``$LATBENCH_WORKER_SECRET``, before it counts as a worker or is sent anything; see
   :mod:`loadgen.engine.locust.handshake`) and starts ``--workers`` local worker processes, the secret in
   their environment; waits until those and ``--expect-workers`` remote ones have joined (``lb_hello``).
   A local worker that exits before the run starts ends the wait at once (nothing is sent);
2. numbers the workers ``k = 0..n-1``, picks the run's start ``t0_wall`` a moment ahead, sends each its
   ``lb_start``, and has Locust spawn one :class:`LatbenchUser` per worker (``runner.start(n, ...)``);
3. writes every ``lb_records`` batch into ``<out>/requests.parquet`` as it arrives (RecordWriter);
4. watches the workers: one that exits, or that Locust marks missing (3 s without a heartbeat),
   before its ``lb_done`` is noted as dead; its records received so far are kept, and the run is
   marked interrupted (incomplete);
5. ends when every worker is done or dead, quits Locust (final stats reach the master), writes
   Locust's own stats to ``<out>/locust_stats.csv``, and prints one ``LATBENCH_RESULT {json}`` line.

SIGTERM or SIGINT: the first stops sending (``lb_stop``: in-flight requests get the grace period), a
second aborts (``lb_abort``: in-flight requests are recorded as ``cancelled``).
Run only as its own process: importing this module imports locust (gevent's monkey-patching).
Stdout carries only ``LATBENCH_MASTER``, ``LATBENCH_PROGRESS`` and ``LATBENCH_RESULT`` lines.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import gevent
from locust.env import Environment
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV

from loadgen.engine.locust.auth import SECRET_ENV, SECRET_FILE_ENV
from loadgen.engine.locust.handshake import GuardedMaster
from loadgen.engine.locust.launch import URL_ENV
from loadgen.engine.locust.worker import DEFAULT_PORT, make_user_class, parse_master, warm_up
from loadgen.engine.logs import configure_logging
from loadgen.records.schema import RecordWriter
from loadgen.records.wire import batch_from_bytes
from loadgen.records.workers import LostWorker
from loadgen.scenario.loader import load_scenario
from loadgen.schedule.arrivals import plan_phases
from loadgen.schedule.sharding import open_counts, plans_to_wire, seq_bases

START_LEAD_S = 0.5  # between lb_start and t0: time for every worker to get its part ready
TOKENIZER_LEAD_S = 5.0  # more of it when workers count prompts with a tokenizer first (server: HTTP calls)
PROGRESS_EVERY_S = 1.0
RESULT_CSV = "locust_stats.csv"


def _say(kind: str, data: dict) -> None:
    print(f"{kind} {json.dumps(data)}", flush=True)


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def run_config(scenario_path: str, target_index: int, url: str, model: str) -> tuple[dict, list]:
    """What every worker needs to send its share (JSON-able), and the phase plans."""
    loaded = load_scenario(scenario_path)
    sc = loaded.scenario
    target = sc.target_list()[target_index].model_copy(update={"url": url, "reference": None, "command": None})
    plans = plan_phases(sc.load)
    ld = sc.load
    cfg = {
        "target": target.model_dump(mode="json"),
        "workload": sc.workload.model_dump(mode="json"),
        "trace": ld.trace.model_dump(mode="json") if ld.trace else None,  # its file resolved: it must exist there
        "url": url,
        "model": model,
        "base_dir": str(Path(scenario_path).resolve().parent),  # datasets must exist there on remote workers
        "plans": plans_to_wire(plans),
        "bases": seq_bases(open_counts(plans, ld.seed, ld.burstiness)),
        "seed": ld.seed,
        "burstiness": ld.burstiness,
        "max_in_flight": ld.max_in_flight,
        "timeout": target.timeout,
        "grace": ld.grace,
    }
    return cfg, plans


def _local_worker(connect: str, label: str, secret: str) -> subprocess.Popen:
    """A local worker process; the run's secret goes in its environment, never on its command line (and no
    secret file of the caller's, which the worker would read first)."""
    argv = [sys.executable, "-m", "loadgen.engine.locust.worker", "--master", connect, "--label", label]
    env = {k: v for k, v in os.environ.items() if k != SECRET_FILE_ENV}
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env={**env, SECRET_ENV: secret})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="loadgen.engine.locust.master")
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--target-index", type=int, default=0)
    ap.add_argument("--url", default=os.environ.get(URL_ENV),
                    help=f"the target's base URL (default: ${URL_ENV}, which keeps it off the command line)")
    ap.add_argument("--model", default="")
    ap.add_argument("--out", required=True, help="the target's RunDir folder")
    ap.add_argument("--workers", type=int, default=1, help="local worker processes to start")
    ap.add_argument("--expect-workers", type=int, default=0, help="remote workers to wait for")
    ap.add_argument("--bind", default="127.0.0.1", help="HOST[:PORT]; port default 5557 with remote workers, else free")
    ap.add_argument("--connect-timeout", type=float, default=60.0)
    a = ap.parse_args(argv)
    if not a.url:
        ap.error(f"give --url or set {URL_ENV}")
    secret = os.environ.get(SECRET_ENV)
    if not secret:
        ap.error(f"set {SECRET_ENV}: the secret the workers prove they know")
    configure_logging()

    warm_up()  # before any worker's records arrive
    cfg, plans = run_config(a.scenario, a.target_index, a.url, a.model)
    out = Path(a.out)
    writer = RecordWriter(out / "requests.parquet")
    host, port = parse_master(a.bind, DEFAULT_PORT if a.expect_workers else 0)
    env = Environment(user_classes=[make_user_class({})], host=_origin(a.url))
    runner = GuardedMaster(env, host, port, secret)
    port = runner.server.port
    _say("LATBENCH_MASTER", {"host": host, "port": port})

    workers: dict[str, dict] = {}  # Locust client id -> what we know of it
    notes: list[str] = []
    lost: list[LostWorker] = []  # workers that died before they finished

    def on_hello(environment, msg, **kw) -> None:
        workers.setdefault(msg.node_id, {"k": None, "rows": 0, "done": None, "dead": False, "sent": 0,
                                         "in_flight": 0, "errors": 0, **msg.data})

    def on_records(environment, msg, **kw) -> None:
        d = msg.data
        w = workers.get(msg.node_id)
        if d["rows"]:
            writer.write(batch_from_bytes(d["data"]))  # every batch is kept, whoever sent it
        if w is not None:
            w["rows"] += d["rows"]
            w.update(sent=d["sent"], in_flight=d["in_flight"], errors=d["errors"])

    def on_done(environment, msg, **kw) -> None:
        if msg.node_id in workers:
            workers[msg.node_id]["done"] = msg.data

    runner.register_message("lb_hello", on_hello)
    runner.register_message("lb_records", on_records)
    runner.register_message("lb_done", on_done)

    connect = f"{'127.0.0.1' if host in ('*', '0.0.0.0', '') else host}:{port}"
    procs = {}
    labels = {}  # pid -> label, of the local workers
    for i in range(a.workers):
        p = _local_worker(connect, f"local-{i}", secret)
        procs[p.pid], labels[p.pid] = p, f"local-{i}"
    n_expected = a.workers + a.expect_workers
    stop = {"count": 0, "sent": 0}

    def on_signal() -> None:
        stop["count"] += 1

    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, on_signal)

    deadline = time.time() + a.connect_timeout
    while (len(workers) < n_expected and time.time() < deadline and not stop["count"]
           and all(p.poll() is None for p in procs.values())):  # a local worker that exits ends the wait at once
        gevent.sleep(0.05)
    exited = [p for p in procs.values() if p.poll() is not None]  # also one that joined, then died
    interrupted = False
    t0_wall = time.time()
    t0 = time.perf_counter()
    if exited:
        interrupted = True
        for p in exited:
            lost.append(LostWorker(labels[p.pid], "start-up", host=socket.gethostname(), pid=p.pid,
                                   exit_code=p.returncode))
            notes.append(lost[-1].sentence())
    elif len(workers) < n_expected:
        interrupted = True
        notes.append(f"only {len(workers)} of {n_expected} Locust workers joined within {a.connect_timeout:g} s; "
                     "nothing was sent")
    else:
        order = sorted(workers, key=lambda cid: workers[cid]["label"])[:n_expected]  # k by name, reproducibly
        n = len(order)
        lead = START_LEAD_S + (TOKENIZER_LEAD_S if cfg["workload"].get("tokenizer") else 0.0)
        t0_wall = time.time() + lead + 0.01 * n
        t0 = time.perf_counter() + (t0_wall - time.time())
        for k, cid in enumerate(order):
            workers[cid]["k"] = k
            runner.send_message("lb_start", {**cfg, "k": k, "n": n, "t0_wall": t0_wall}, client_id=cid)
        gevent.spawn(runner.start, n, spawn_rate=max(n, 1) * 50.0)
        total_end = max((p.end for p in plans), default=0.0)
        hard_end = t0 + total_end + cfg["grace"] + 30.0
        next_progress = 0.0
        while True:
            gevent.sleep(0.1)
            now = time.perf_counter()
            active = [w for w in workers.values() if w["k"] is not None and not w["done"] and not w["dead"]]
            for cid, w in workers.items():
                if w not in active:
                    continue
                p = procs.get(w.get("pid")) if w.get("host") == socket.gethostname() else None
                gone = p is not None and p.poll() is not None
                node = runner.clients.get(cid)
                if gone or node is None or node.state == "missing":
                    w["dead"] = True
                    interrupted = True
                    w.update(dead_at=now - t0, exit_code=p.returncode if gone else None)
                    notes.append(_lost(w).sentence())  # the records received by now
            if not any(w["k"] is not None and not w["done"] and not w["dead"] for w in workers.values()):
                break
            if stop["count"] > stop["sent"]:
                stop["sent"] = stop["count"]
                interrupted = True
                runner.send_message("lb_stop" if stop["count"] == 1 else "lb_abort")
                notes.append(f"stopped at {now - t0:.1f} s: " + ("no new requests after it" if stop["count"] == 1
                                                                 else "requests in flight were cancelled"))
            if now >= hard_end:
                interrupted = True
                notes.append("some workers did not finish 30 s after the run's end; their later records are missing")
                break
            if now >= next_progress:
                next_progress = now + PROGRESS_EVERY_S
                live = [w for w in workers.values() if w["k"] is not None]
                _say("LATBENCH_PROGRESS", {"t": now - t0, "records": writer.rows,
                                           "sent": sum(w["sent"] for w in live),
                                           "in_flight": sum(w["in_flight"] for w in live if not w["dead"]),
                                           "errors": sum(w["errors"] for w in live),
                                           "workers": sum(not w["dead"] for w in live), "of": len(live)})
    gevent.sleep(0.2)  # records still on the wire from a worker that just finished
    runner.quit()
    writer.close()
    _write_locust_csv(env, out / RESULT_CSV)
    if not any(w["k"] is not None for w in workers.values()):  # the run never started: nothing to wait for
        for p in procs.values():
            p.terminate()
    for p in procs.values():
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
    if runner.refused:
        notes.append(f"{len(runner.refused)} process(es) that joined the Locust master without proving the run's "
                     f"secret were refused and sent nothing: {', '.join(sorted(runner.refused))}")
    done = [w["done"] for w in workers.values() if w["done"]]
    for d in done:
        notes.extend(d["notes"])
        interrupted = interrupted or d["interrupted"]
    ends = [d["end"] for d in done]
    members = [w for w in workers.values() if w["k"] is not None]
    lost += [_lost(w) for w in members if w["dead"]]  # with every record that reached the master
    _say("LATBENCH_RESULT", {
        "t0": t0, "wall_start": t0_wall,
        "duration": max(ends) if ends else max(time.perf_counter() - t0, 0.0),
        "requests": sum(w["done"]["requests"] if w["done"] else w["rows"] for w in members),
        "interrupted": interrupted,
        "cpu_seconds": sum(d["cpu"] for d in done),
        "notes": notes,
        "processes": max(len(done), 1),
        "workers": [{"k": w["k"], "label": w["label"], "host": w["host"], "pid": w["pid"], "records": w["rows"],
                     "state": "done" if w["done"] else "dead" if w["dead"] else "unfinished"} for w in members],
        "lost_workers": [w.to_json() for w in lost],
    })
    return 0


def _lost(w: dict) -> LostWorker:
    """A worker found dead mid-run, from what the master knows of it."""
    return LostWorker(w["label"], "run", index=w["k"], host=w.get("host"), pid=w.get("pid"),
                      exit_code=w["exit_code"], at=w["dead_at"], records=w["rows"])


def _write_locust_csv(env, path: Path) -> None:
    """Locust's own request statistics (what ``locust --csv`` writes as ``_stats.csv``)."""
    import csv


    with open(path, "w", newline="") as f:
        StatsCSV(env, PERCENTILES_TO_REPORT).requests_csv(csv.writer(f))


if __name__ == "__main__":
    sys.exit(main())
