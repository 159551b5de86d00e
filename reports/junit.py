"""junit.xml for CI systems: one testsuite per target (the fresh starts of a cold-start study: one per
architecture, a testcase per objective and start), one testcase per objective that applies to it,
a <failure> for each objective missed. Run-level warnings (incomplete, generator-limited) go to
the suite's system-err, so the test counts stay one per objective. It always parses: a control character (which XML
1.0 forbids) in a name or a message, from a RunDir written before names were checked or from a server's text, is
written as an escape (``\\x1b``)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from loadgen.records.results import RepeatSlo, SloResult
from loadgen.records.rundir import write_text
from loadgen.redact import escape_control
from reports import fmt, report_model
from reports.rundir_loader import RunData


def _measured(r: SloResult) -> str:
    kind = fmt.slo_kind(r.stat, r.metric)
    unit = " ms" if kind == "ms" else ""
    text = f"measured {fmt.fmt(r.value, kind)}{unit}"
    if isinstance(r, RepeatSlo) and r.basis:  # judged over repeated runs
        text += f" ({r.basis}: {', '.join(fmt.fmt(x, kind) for x in r.values or [])}{unit})"
    if r.ci:
        text += f", 95% CI {fmt.ci(r.ci, kind)}{unit}"
    if r.reason:
        text += f" ({r.reason})"
    return text


def render_junit(run: RunData) -> str:
    root = ET.Element("testsuites", name=f"latbench: {run.name}")
    v = report_model.verdict(run)
    total = failures = 0
    repeated = (run.repeated.targets if run.repeated else None) or {}
    for group, tds in run.groups():  # fresh starts or repetitions of one target: one suite for it
        g = repeated.get(group)
        if g is not None:  # a repeated run: each objective as the verdict judged it, over the runs
            results = [(None, r) for r in g.slo or [] if r.applies is not False]
        else:
            results = [(td, r) for td in tds for r in (td.result.slo if td.result else None) or []
                       if r.applies is not False]
        nfail = sum(1 for _, r in results if not r.passed)
        seconds = sum(float((td.result.duration_s if td.result else None) or 0) for td in tds)
        suite = ET.SubElement(root, "testsuite", name=f"{run.name} / {group}", tests=str(len(results)),
                              failures=str(nfail), errors="0", skipped="0", time=f"{seconds:.3f}")
        for td, r in results:
            start = f" (start {td.meta.start})" if td is not None and td.meta.start is not None else ""
            case = ET.SubElement(suite, "testcase", name=f"{r.expr}{start}", classname=f"latbench.{group}")
            if not r.passed:
                f = ET.SubElement(case, "failure", message=f"{r.expr}{start}: {_measured(r)}", type="SLO")
                who = report_model.target_label(td) if td is not None else group
                f.text = f"{who}: objective {r.expr} missed; {_measured(r)}"
            else:
                ET.SubElement(case, "system-out").text = _measured(r)
        warn = [w for w in v["warnings"] if any(w.startswith(td.name + ":") for td in tds) or "INCOMPLETE" in w]
        if warn:
            ET.SubElement(suite, "system-err").text = "\n".join(warn)
        total += len(results)
        failures += nfail
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", "0")
    ET.indent(root)
    # the serializer leaves control characters as they are (XML 1.0 forbids them): they can only come from the
    # run's text, never from the markup, so the whole document is escaped at once
    body = escape_control(ET.tostring(root, encoding="unicode"), keep="\n\t")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"


def write_junit(run: RunData, out: Path) -> Path:
    return write_text(out, render_junit(run))
