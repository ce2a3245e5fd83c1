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
    # The default baseline, pad-to-longest; vts alone has no rival over its padded pipeline.
    assert {winner["over"] for winner in record["winners"]} == {"pad-to-longest"}
    references = {row["strategy"]: row["reference"] for row in record["scaling"]}
    assert references["sort"] == references["unpad"] == references["none"] == "pad-to-longest"
    assert references["vts"] == "vts-padded"
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


# Injected first: every script error and console.error is kept, for the check below to report.
ERRORS = ('<script>window.caught = []; addEventListener("error", (e) => caught.push(String(e.message)));'
          'const logged = console.error; console.error = (...a) => { caught.push(a.join(" ")); logged(...a); };'
          '</script>')
# Injected last, run once the page has loaded: what a reader at a 1,280-pixel window gets.
CHECK = """<script>addEventListener("load", () => {
  // The value a cell stands for: its data-value where it has one (a rate shown "25.97 k"), else its text.
  const number = (cell) => parseFloat(cell.dataset.value ?? cell.textContent.replace(/,/g, ""));
  const tables = [...document.querySelectorAll("table")].map((table) => {
    const headers = [...table.querySelectorAll("thead th")];
    const sorted = headers.map((header, column) => {
      header.click();
      const values = [...table.tBodies[0].rows].map((row) => number(row.cells[column]));
      const numbers = values.filter(Number.isFinite);
      if (numbers.length !== values.length || numbers.length < 2) return null;  // a column of words or blanks
      return numbers.every((value, index) => !index || numbers[index - 1] <= value);
    });
    return {sortable: table.hasAttribute("data-sortable"), numeric: sorted.filter((s) => s !== null).length,
            unsorted: headers.filter((_, column) => sorted[column] === false).map((header) => header.textContent)};
  });
  const charts = [...document.querySelectorAll(".chart")].map((chart) => ({
    lines: chart.querySelectorAll("polyline").length, points: chart.querySelectorAll(".series title").length,
    yTicks: chart.querySelectorAll(".axes text[text-anchor=end]").length,
    colours: [...new Set([...chart.querySelectorAll("polyline")].map((line) => line.getAttribute("stroke")))].length}));
  // A reader hides a line, then drags across the first chart to zoom into a band of it.
  const first = document.querySelector(".chart");
  first.querySelector(".legend").dispatchEvent(new MouseEvent("click"));
  const hidden = first.querySelectorAll(".series.hidden").length;
  const box = first.querySelector(".zoom-area").getBoundingClientRect();
  const at = (type, fraction) => first.querySelector(".zoom-area").dispatchEvent(new PointerEvent(type,
    {clientX: box.left + box.width / 2, clientY: box.top + fraction * box.height, pointerId: 1, bubbles: true}));
  const ticksBefore = [...first.querySelectorAll(".axes text[text-anchor=end]")].map((t) => t.textContent);
  at("pointerdown", 0.2); at("pointermove", 0.4); at("pointerup", 0.4);
  const zoomed = first.querySelector(".chart-hint").textContent.includes("Zoomed in") &&
    [...first.querySelectorAll(".axes text[text-anchor=end]")].map((t) => t.textContent).join() !== ticksBefore.join();
  first.querySelector(".zoom-area").dispatchEvent(new MouseEvent("dblclick"));
  const unzoomed = !first.querySelector(".chart-hint").textContent.includes("Zoomed in");
  document.body.dataset.check = JSON.stringify({width: document.documentElement.scrollWidth, window: innerWidth,
    interaction: {hidden, zoomed, unzoomed},
    errors: window.caught, headings: [...document.querySelectorAll("h1, h2, h3")].map((h) => h.textContent),
    tables, charts, details: document.querySelectorAll("details .table-scroll").length});
});</script>"""


def browser_check(page: Path, tmp_path: Path, width: int = 1280) -> tuple[dict, str]:
    """What CHECK found on `page` in a headless Chromium window `width` pixels wide, and Chromium's log."""
    import html

    checked = tmp_path / "checked.html"
    text = page.read_text()
    checked.write_text(text.replace("<head>", "<head>" + ERRORS, 1).replace("</body>", CHECK + "</body>"))
    result = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         f"--window-size={width},900", "--hide-scrollbars", "--virtual-time-budget=10000",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", checked.as_uri()],
        capture_output=True, text=True, timeout=120)
    found = re.search(r'data-check="([^"]*)"', result.stdout)
    assert found, result.stderr[-2000:]
    return json.loads(html.unescape(found.group(1))), result.stderr


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed")
def test_the_page_fits_a_1280_pixel_window_draws_every_chart_and_sorts_every_table(report, tmp_path):
    check, log = browser_check(report / "report.html", tmp_path)
    assert check["errors"] == [] and "Uncaught" not in log, (check["errors"], log[-2000:])
    assert check["width"] <= check["window"] == 1280  # no sideways scrolling: wide tables scroll on their own
    headings = check["headings"]
    assert len(headings) == len(set(headings)), sorted(h for h in headings if headings.count(h) > 1)
    assert check["details"] == 3  # scaling.csv, packing.csv and breakdown.csv, folded away
    assert [table for table in check["tables"] if not table["sortable"] or table["unsorted"]] == []
    assert sum(table["numeric"] for table in check["tables"]) >= 20
    # Speed-up over padding, over VTS's padded pipeline, and the lengths: each drawn, its lines told apart.
    assert len(check["charts"]) == 3
    for chart in check["charts"]:
        assert chart["lines"] >= 1 and chart["points"] >= 2 * chart["lines"] and chart["yTicks"] >= 5, chart
        assert chart["colours"] == chart["lines"], chart
    assert check["interaction"] == {"hidden": 1, "zoomed": True, "unzoomed": True}


def test_table_numbers_carry_their_units_and_only_the_digits_that_matter():
    import pandas as pd

    from simbench.report.html import _column

    assert _column("waiting_seconds", pd.Series([0.06832, 7.79e-16, 0.0])) == \
        ("waiting_seconds (ms)", ["68.32", "0.00", "0.00"])
    assert _column("tokens_per_s", pd.Series([1.61145e6, 25967.0, 60.5])) == \
        ("tokens_per_s", ["1.611 M", "25.97 k", "60.5"])
    assert _column("efficiency", pd.Series([0.999494, 0.4997])) == ("efficiency (%)", ["99.949", "49.970"])
    assert _column("speedup", pd.Series([1.97712, 1.0])) == ("speedup (x)", ["1.977", "1.000"])
    assert _column("packs", pd.Series([16279552.0, float("nan")])) == ("packs", ["16,279,552", ""])
    assert _column("throughput_noise", pd.Series([0.01118, 0.0038])) == ("throughput_noise (%)", ["1.12", "0.38"])
    assert _column("proof", pd.Series(["proven optimal (LP bound)", None])) == \
        ("proof", ["proven optimal (LP bound)", ""])


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
