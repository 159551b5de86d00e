"""junit.xml for CI systems: one testsuite per target, one testcase per objective that applies to it,
a <failure> for each objective missed. Run-level warnings (incomplete, generator-limited) go to
the suite's system-err, so the test counts stay one per objective."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from loadgen.records.rundir import write_text
from reports import fmt, model
from reports.loader import RunData


def _measured(r: dict) -> str:
    kind = fmt.slo_kind(r)
    unit = " ms" if kind == "ms" else ""
    text = f"measured {fmt.fmt(r.get('value'), kind)}{unit}"
    if r.get("ci"):
        text += f", 95% CI {fmt.ci(r['ci'], kind)}{unit}"
    if r.get("reason"):
        text += f" ({r['reason']})"
    return text


def render_junit(run: RunData) -> str:
    root = ET.Element("testsuites", name=f"latbench: {run.name}")
    v = model.verdict(run)
    total = failures = 0
    for td in run.targets:
        s = td.summary or {}
        results = [r for r in s.get("slo") or [] if r.get("applies", True)]
        nfail = sum(1 for r in results if not r.get("passed"))
        suite = ET.SubElement(root, "testsuite", name=f"{run.name} / {td.name}", tests=str(len(results)),
                              failures=str(nfail), errors="0", skipped="0",
                              time=f"{float(s.get('duration_s') or 0):.3f}")
        for r in results:
            case = ET.SubElement(suite, "testcase", name=str(r.get("expr")), classname=f"latbench.{td.name}")
            if not r.get("passed"):
                f = ET.SubElement(case, "failure", message=f"{r.get('expr')}: {_measured(r)}", type="SLO")
                f.text = f"{td.name}: objective {r.get('expr')} missed; {_measured(r)}"
            else:
                ET.SubElement(case, "system-out").text = _measured(r)
        warn = [w for w in v["warnings"] if w.startswith(td.name + ":") or "INCOMPLETE" in w]
        if warn:
            ET.SubElement(suite, "system-err").text = "\n".join(warn)
        total += len(results)
        failures += nfail
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(run: RunData, out: Path) -> Path:
    return write_text(out, render_junit(run))
