"""report.html and summary.json: self-contained, every plot shown, no script errors, no impossible numbers."""

import itertools
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


def chromium_dom(page: Path, tmp_path: Path, width: int = 1000) -> str:
    result = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},2000",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    return result.stdout


def lab(colour: str) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB hex colour."""
    rgb = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    rows = ((0.4124, 0.3576, 0.1805, 0.95047), (0.2126, 0.7152, 0.0722, 1.0), (0.0193, 0.1192, 0.9505, 1.08883))
    x, y, z = (sum(m * c for m, c in zip(row[:3], linear)) / row[3] for row in rows)
    f = [t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def test_the_charts_colours_stay_apart_and_read_on_white():
    from importlib import resources

    script = resources.files("simbench.report").joinpath("report.js").read_text()
    colours = re.findall(r"#[0-9a-f]{6}", re.search(r"const COLOURS = \[(.*?)\];", script, flags=re.S).group(1))
    assert len(set(colours)) == 20
    for first, second in itertools.combinations(colours, 2):
        assert math.dist(lab(first), lab(second)) >= 25, (first, second)  # the old palette had 4.6 (two blues)
    # No line paler on the white page than the usual palette's palest (olive, L* 74.3).
    assert max(lab(colour)[0] for colour in colours) <= lab("#bcbd22")[0] + 1e-9


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed")
def test_a_chart_of_24_strategies_keeps_every_line_apart_and_its_legend_inside(tmp_path):
    import pandas as pd

    from simbench.report.html import line_chart, report_html

    names = [f"strategy-{number}" for number in range(23)] + ["a-plugin-strategy-with-a-very-long-label"]
    frame = pd.DataFrame([(name, devices, 1 + number / 10 + devices / 100) for number, name in enumerate(names)
                          for devices in (1, 8)], columns=["strategy", "devices", "speedup"])
    chart = line_chart("Speed-up", frame, "devices", "speedup", "strategy", x_label="devices", y_label="x")
    image = tmp_path / "wide.png"
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(16, 2))  # 1,920 pixels wide at 120 dpi: wider than the page
    figure.savefig(image, dpi=120)
    plt.close(figure)
    page = tmp_path / "report.html"
    # After drawing: record whether every image fits the page's width, for the DOM dump to show.
    page.write_text(report_html("many", "# Answer", [], [chart], [image]).replace(
        "</body>", '<script>window.addEventListener("load", () => document.body.dataset.imagesFit = [...document'
                   '.images].every((i) => i.getBoundingClientRect().right <= document.body.getBoundingClientRect()'
                   '.right + 1));</script></body>'))
    dom = chromium_dom(page, tmp_path)
    assert 'data-images-fit="true"' in dom
    height = float(re.search(r'<svg viewBox="0 0 \d+ (\d+)"', dom).group(1))
    strokes = re.findall(r'<polyline points="[^"]*" stroke="(#[0-9a-f]{6})" fill="none" stroke-width="2" '
                         r'stroke-dasharray="([^"]*)"', dom)
    assert len(strokes) == 24 and len(set(strokes)) == 24  # colour and dash tell every line apart
    assert len({colour for colour, _ in strokes[:20]}) == 20 and {dash for _, dash in strokes[20:]} == {"6 3"}
    legend_rows = [float(y) for y in re.findall(r'class="legend" transform="translate\([\d.]+,([\d.]+)\)"', dom)]
    assert len(legend_rows) == 24 and max(legend_rows) + 12 <= height
    assert "a-plugin-strategy-with-…" in dom and "<title>a-plugin-strategy-with-a-very-long-label: click" in dom
