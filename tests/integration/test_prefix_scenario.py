"""scenarios/prefix.yaml, shortened, end to end: two reference servers latbench starts itself (prefix cache off
and on), prompts that open with an exact shared prefix in the server's own tokens, and one report that
shows the time to first token of each, the cached one lower."""

import json
import re
from pathlib import Path

import pytest
import yaml

from loadgen.analysis.metrics import records_frame
from loadgen.records.schema import read_records
from reports import write_outputs
from tests.helpers import pct, run

pytestmark = pytest.mark.alone  # timing-sensitive: no other test runs beside it (conftest.py)

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "prefix.yaml"


def test_prefix_scenario_shows_the_prefix_cache_in_ttft(tmp_path):
    data = yaml.safe_load(SCENARIO.read_text())
    data["workload"]["prefix"]["groups"] = 1  # one cold request per target, the rest find the prefix cached
    data["load"]["phases"] = [{"name": "measure", "duration": "3s", "qps": 2}]
    res, _, _ = run(tmp_path, yaml.safe_dump(data))
    assert res.exit_code == 0, res.reasons
    path = res.rundir.path
    summaries, frames = {}, {}
    for t in ("no_prefix_cache", "prefix_cache"):
        summaries[t] = json.loads((path / t / "summary.json").read_text())
        frames[t] = records_frame(read_records(path / t / "requests.parquet"))
    for df in frames.values():
        ok = df[df["error"].isna() | (df["error"] == "")]
        assert len(ok) == 6
        # the server's tokens are bytes: 1024 of the prefix, 32 of the question, and the server agrees
        assert set(ok["input_tokens"]) == {1024 + 32}
        assert (ok["prompt_tokens"] == ok["input_tokens"] + ok["added_tokens"]).all()
        assert set(ok["prompt_tokens_source"]) == {"usage"}
    off, on = (pct(summaries[t]["overall"], "ttft", "p50") for t in ("no_prefix_cache", "prefix_cache"))
    assert on < 0.5 * off, (on, off)
    metrics_on = (path / "prefix_cache" / "server_metrics.csv").read_text()
    assert "refserver:prefix_cache_hits_total" in metrics_on
    assert "prefix_cache" not in (path / "no_prefix_cache" / "server_metrics.csv").read_text()
    hits = [float(line.rsplit(",", 1)[1]) for line in metrics_on.splitlines()
            if line.split(",")[1] == "refserver:prefix_cache_hits_total"]
    # warm requests found the system message's blocks (scraped once a second: the last ones may come after)
    assert hits[-1] >= 1024 and hits[-1] % 16 == 0
    write_outputs(path)
    html = (path / "report.html").read_text()
    assert "TTFT p50" in html and "prefix cache hit rate" in html
    # the side-by-side TTFT p50 of the cached target: lower, said as a claim from 6 requests each (#30: with its
    # interval, or "no clear difference" when that interval still reaches 1), never "higher"
    table = html[html.index("Side by side"):]
    table = table[:table.index("</table>")]
    rows = [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, re.S)]
            for r in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)]
    col = next(r for r in rows if "TTFT p50 (ms)" in r).index("TTFT p50 (ms)")
    cell = next(r for r in rows if r and r[0].startswith("prefix_cache"))[col]
    assert re.search(r"x lower \(interval|no clear difference \(ratio 0\.\d+x", cell), cell
