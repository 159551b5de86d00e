"""Where the CPU of one ``latbench run`` goes, stage by stage (a script that prints a table, not a test).

    python benchmarks/run_stages.py SCENARIO.yaml [--rounds 3] [-- latbench run options...]

Runs ``latbench run SCENARIO --quiet`` (report included unless ``--no-report`` follows ``--``) ``--rounds`` times,
each in a child process of this checkout, with CPU timers (``time.process_time``: every thread of the process) around
its stages: importing the CLI and the run command, the report's preload, the summary (reading the records, building
it), report.html (and, inside it, each figure drawn: ``to_uri``), summary.md, junit.xml; the rest of the process's
own CPU is the load, its setup and the RunDir's writing, and within it, by the CPU of the thread that ran them
(``time.thread_time``): the pre-flight, the host sampler's samples and the telemetry sampler's thread. The
process's whole CPU (``wait4`` rusage) less what it counted in itself is the interpreter's start and exit. Prints
the medians per stage. The timers wrap functions by their module names of today (:mod:`loadgen.run.runner`,
:mod:`reports.outputs`): a script for this checkout.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import atexit, json, sys, time
T0 = time.process_time()
OUT, stages = sys.argv[1], {}
def timed(owner, name, label, clock=time.process_time):
    f = getattr(owner, name)
    def wrapper(*a, **k):
        t = clock()
        try:
            return f(*a, **k)
        finally:
            stages[label] = stages.get(label, 0.0) + clock() - t
    setattr(owner, name, wrapper)
t = time.process_time()
import loadgen.cli.main as cli
stages["import: CLI"] = time.process_time() - t
t = time.process_time()
import loadgen.cli.run, loadgen.run.runner as runner, reports, reports.outputs as outputs, reports.plots, reports.host
stages["import: run command"] = time.process_time() - t
timed(reports, "preload", "report imports (preload)")
timed(runner, "read_records", "summary: read records")
timed(runner, "build_summary", "summary: build")
for name, label in (("write_report", "report.html"), ("write_markdown", "summary.md"), ("write_junit", "junit.xml")):
    timed(outputs, name, label)
import loadgen.run.measurement as measurement, loadgen.engine.host as host, loadgen.engine.telemetry as telemetry
# by the CPU of the calling thread only: the samplers run beside the load
timed(measurement, "preflight", "  pre-flight", time.thread_time)
timed(host.HostSampler, "sample", "  host sampling", time.thread_time)
timed(telemetry.TelemetrySampler, "_run", "  telemetry sampling", time.thread_time)
for m in list(sys.modules.values()):
    if getattr(m, "__name__", "").startswith("reports.") and "to_uri" in vars(m):
        timed(m, "to_uri", "  of which figures drawn")
def done():
    stages["in-process total"] = time.process_time() - T0
    with open(OUT, "w") as f:
        json.dump(stages, f)
atexit.register(done)
sys.argv = ["latbench"] + sys.argv[2:]
cli.main()
"""

ORDER = ("import: CLI", "import: run command", "report imports (preload)", "summary: read records", "summary: build",
         "report.html", "  of which figures drawn", "summary.md", "junit.xml")


def one(scenario: Path, extra: list[str], tmp: Path) -> dict:
    out = tmp / "stages.json"
    argv = [sys.executable, "-c", CHILD, str(out), "run", str(scenario), "--out", str(tmp / "runs"), "--quiet", *extra]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(argv, cwd=scenario.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, ru = os.wait4(proc.pid, 0)
    st = json.loads(out.read_text())
    whole = ru.ru_utime + ru.ru_stime
    # the load's share: what the process counted in itself less the stages (the summary's read is inside "build"
    # only when build_summary reads; here the runner reads first, so both are stages of their own)
    st["load, its setup, the RunDir"] = st["in-process total"] - sum(st.get(k, 0.0) for k in ORDER if k[0] != " ")
    st["interpreter start and exit"] = whole - st["in-process total"]
    st["whole process"] = whole
    return st


def main() -> None:
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[: args.index("--")] if "--" in args else args
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 3
    given = [a for a in args if a.endswith((".yaml", ".yml"))]
    if "-h" in args or "--help" in args:
        print(__doc__)
        raise SystemExit(0)
    if not given:
        raise SystemExit("usage: " + __doc__.split("\n\n")[1].strip() + "\n(a scenario file is required)")
    scenario = Path(given[0]).resolve()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "loadgen", "reports", "reference_server"], cwd=ROOT,
                   stdout=subprocess.DEVNULL, check=True)  # as installed: no source compiled during the run
    with tempfile.TemporaryDirectory(prefix="latbench-stages-") as d:
        runs = [one(scenario, extra, Path(d)) for _ in range(rounds)]
    keys = [*ORDER, "load, its setup, the RunDir", "  pre-flight", "  host sampling", "  telemetry sampling",
            "interpreter start and exit", "whole process"]
    print(f"latbench run {scenario.name} --quiet {' '.join(extra)}: CPU seconds, median of {rounds}")
    for k in keys:
        vals = [r.get(k, 0.0) for r in runs]
        print(f"  {k:<32}{statistics.median(vals):>7.3f}   ({', '.join(f'{v:.2f}' for v in vals)})")


if __name__ == "__main__":
    main()
