"""report.html and summary.json: self-contained, every plot shown, no script errors, no impossible numbers."""

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simbench.cli import app

SCENARIO = """name: small
dataset: {histogram: squad_1_1_384}
strategies: [sort, spfhp:3, unpad, vts]
devices: [1, 8, 64]
steps: 3
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("html")
    (root / "small.yaml").write_text(SCENARIO)
    result = CliRunner().invoke(app, ["run", str(root / "small.yaml"), "--out", str(root / "report")])
    assert result.exit_code == 0, result.output
    return root / "report"


def test_the_page_is_one_file_that_loads_nothing_from_elsewhere(report):
    page = (report / "report.html").read_text()
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)=["'](?!data:)""", page)
    assert len(page.encode()) < 5 * 2**20
    for plot in ("scaling", "packing", "histogram"):
        assert f'alt="{plot} plot"' in page


def test_summary_json_has_every_speedup_finite_and_says_what_it_is_over(report):
    record = json.loads((report / "summary.json").read_text())
    assert {winner["over"] for winner in record["winners"]} == {"padding"}  # vts alone has no rival
    references = {row["strategy"]: row["reference"] for row in record["scaling"]}
    assert references["sort"] == references["unpad"] == "none" and references["vts"] not in ("none", None)
    assert all(math.isfinite(row["speedup"]) and row["speedup"] > 0 for row in record["scaling"])
    assert record["dataset"]["theoretical_speedup"] > 1


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed")
def test_chromium_draws_every_chart_without_script_errors(report, tmp_path):
    result = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         f"--user-data-dir={tmp_path}", "--dump-dom", (report / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120)
    dom, log = result.stdout, result.stderr
    assert "Uncaught" not in log and "CONSOLE" not in log.upper().replace("CONSOLE_", ""), log[-2000:]
    summary = json.loads((report / "summary.json").read_text())
    assert summary["winners"][0]["fastest"] in dom and "Answer:" in dom
    charts = re.findall(r'<div class="chart" id="chart-\d+">(.*?)</div>', dom, flags=re.S)
    assert charts and all("<svg" in chart and "<polyline" in chart for chart in charts)
    strategies = {row["strategy"] for row in summary["scaling"]}
    assert all(f'data-name="{strategy}"' in dom for strategy in strategies)
