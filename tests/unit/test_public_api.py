"""The public API, pinned (as httpx pins its exported members): a name added or removed is a decision."""

import subprocess
import sys

import loadgen
import reports

LOADGEN = [
    "AiohttpTransport", "Engine", "EngineOptions", "EngineResult", "EngineSettings", "HttpxTransport", "LatbenchError",
    "LeanTransport", "LoadedScenario", "LocustEngine", "MeasuredTarget", "MultiProcess", "NativeEngine", "Reason",
    "RecordWriter", "RunControl", "RunDir", "RunDirError", "RunDirWriteError", "RunResult", "SLO", "Scenario",
    "ScenarioError", "SingleProcess", "Target", "TargetError", "TargetStartError", "TransportError", "UsageError",
    "Verdict", "__version__", "gate_rundir", "load_scenario", "make_prompt_source", "make_protocol", "make_transport",
    "parse_slo", "plan_phases", "read_records", "run_async", "run_capacity", "run_scenario", "scenario_schema",
    "summarize",
]


def test_loadgen_exports_exactly_its_public_names():
    assert sorted(loadgen.__all__) == sorted(LOADGEN)
    for name in loadgen.__all__:
        value = getattr(loadgen, name)
        assert value is not None and (name.startswith("__") or getattr(value, "__module__", "").startswith("loadgen"))


def test_reports_exports():
    assert sorted(reports.__all__) == ["RunDirError", "load_rundir", "render_report", "write_capacity_report",
                                       "write_compare", "write_outputs"]
    assert all(callable(getattr(reports, n)) for n in reports.__all__)


def test_an_unknown_name_is_an_attribute_error():
    for pkg in (loadgen, reports):
        try:
            pkg.no_such_name  # noqa: B018
        except AttributeError as exc:
            assert "no_such_name" in str(exc)
        else:
            raise AssertionError("expected AttributeError")


def test_importing_the_package_and_the_cli_loads_nothing_heavy():
    code = ("import sys, loadgen, reports, loadgen.cli.main; "
            "heavy = {'pandas', 'pyarrow', 'matplotlib', 'numpy', 'aiohttp', 'jinja2'} & set(sys.modules); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_rendering_a_report_needs_no_matplotlib():
    """Its figures are latbench's own SVG (reports.svg): what ``latbench run`` preloads for its report holds none."""
    code = "import sys, reports; reports.preload(); assert not [m for m in sys.modules if m.startswith('matplotlib')]"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_version_needs_no_heavy_import():
    out = subprocess.run([sys.executable, "-m", "loadgen.cli", "--version"], capture_output=True, text=True, check=True)
    assert loadgen.__version__ in out.stdout
