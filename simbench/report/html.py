"""report.html: the whole report in one self-contained file (no network: script, styles and data
inline) with the summary, sortable tables and interactive charts (hover for values, click a legend
entry to hide or show a strategy).

    >>> import pandas as pd
    >>> frame = pd.DataFrame({"strategy": ["none", "spfhp"], "devices": [1, 1], "speedup": [1.0, 1.7]})
    >>> chart = line_chart("Speed-up", frame, "devices", "speedup", "strategy", x_label="devices", y_label="x")
    >>> page = report_html("demo", "# Answer\\n\\nPacking wins.", [("scaling.csv", frame)], [chart], [])
    >>> "<h1>Answer</h1>" in page and "data-sortable" in page and " src=" not in page
    True
"""

from __future__ import annotations

import base64
import html as html_escape
import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from simbench.report.units import DEVICE, DeviceUnit
from simbench.strategies.packing import efficiency_text


# A heading for each plot of the report (its file name is added), so that none repeats a table's or section's.
PLOT_HEADINGS = {"histogram": "sequence lengths", "packing": "packing efficiency and solve time",
                 "scaling": "speed-up against cluster size", "gumbel": "stragglers: Gumbel fit",
                 "timeline": "VTS pipeline timeline", "breakdown": "where the time goes"}
def table_notes(unit: DeviceUnit = DEVICE) -> dict[str, str]:
    """What a row of each table is, in the report's words for its unit (with a layout, `devices` counts replicas)."""
    counted = (f"{unit.name} count" if unit.gpus_each is None else
               f"{unit.name} count (`devices`: replicas of {unit.gpus_each:,} GPUs; `gpus`: all of them)")
    return {"scaling.csv": f"a row per strategy and {counted}", "packing.csv": "a row per packing",
            "breakdown.csv": f"seconds per step by cause, a row per strategy and {counted}"}


def report_html(title: str, summary_markdown: str, tables: list[tuple[str, pd.DataFrame]],
                charts: list[dict], images: list[Path], unit: DeviceUnit = DEVICE) -> str:
    """The page: summary (Markdown rendered), one interactive chart per entry of `charts` (see
    `line_chart`), the report's PNG plots inline, then every table (`tables`: file name and frame) folded
    away, scrollable and formatted by its columns' units. Every table sorts by a click on its header."""
    from markdown_it import MarkdownIt

    # The answer first, then the charts, then the summary's detailed sections.
    answer, headings, details = summary_markdown.partition("\n## ")
    markdown = MarkdownIt("commonmark").enable("table")
    sections = [f'<section class="summary">{_sortable(markdown.render(answer))}</section>']
    for index, chart in enumerate(charts):
        sections.append(f'<section><h2>{html_escape.escape(chart["title"])}</h2>'
                        f'<div class="chart" id="chart-{index}"></div></section>')
    if details:
        sections.append(f'<section class="summary">{_sortable(markdown.render(headings.lstrip() + details))}'
                        f'</section>')
    if images:
        figures = []
        for image in images:
            name = Path(image).stem
            encoded = base64.b64encode(Path(image).read_bytes()).decode("ascii")
            heading = f"{Path(image).name}: {PLOT_HEADINGS[name]}" if name in PLOT_HEADINGS else Path(image).name
            figures.append(f'<figure><h3>{html_escape.escape(heading)}</h3><img alt="{html_escape.escape(name)} plot" '
                           f'src="data:image/png;base64,{encoded}"></figure>')
        sections.append(f'<section><h2>Plots</h2>{"".join(figures)}</section>')
    notes = table_notes(unit)
    folded = [f'<details><summary>{html_escape.escape(name)}: {notes.get(name, "every row")} '
              f'({len(frame):,} rows, {len(frame.columns)} columns)</summary>'
              f'<div class="table-scroll tall">{_table(frame)}</div></details>'
              for name, frame in tables if not frame.empty]
    if folded:
        sections.append('<section><h2>Tables as written</h2><p>Every column of the CSV files beside this page; '
                        'numbers rounded to the digits that matter, units in the headers; click a header to '
                        'sort.</p>' + "".join(folded) + "</section>")
    script = resources.files("simbench.report").joinpath("report.js").read_text(encoding="utf-8")
    style = resources.files("simbench.report").joinpath("report.css").read_text(encoding="utf-8")
    data = json.dumps(charts, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{html_escape.escape(title)}'
            f"</title><style>{style}</style></head>\n<body>\n" + "\n".join(sections)
            + f"\n<script>const CHARTS = {data};\n{script}</script>\n</body></html>\n")


def _sortable(rendered: str) -> str:
    """The summary's tables, sortable like the others and scrolling on their own when wider than the page."""
    return rendered.replace("<table>", '<div class="table-scroll"><table data-sortable>').replace(
        "</table>", "</table></div>")


def line_chart(title: str, frame: pd.DataFrame, x: str, y: str, series: str, *, x_label: str, y_label: str,
               log2_x: bool = False, reference: float | None = None, reference_label: str = "",
               styles: dict | None = None, y_format: str = "", y_max: float | None = None) -> dict:
    """A chart of `y` against `x`, one line per value of `series`; a horizontal `reference` line
    (a bound) when given. Non-finite values are left out, never drawn. `styles` (series value ->
    simbench.report.styles.Style) gives each line its colour, marker and dashes, else report.js picks them;
    `y_format` ("x", "%") is how values are written; points above `y_max` are drawn at the top, labelled."""
    lines = []
    for name, rows in frame.groupby(series, sort=False):
        rows = rows.sort_values(x)
        points = [[float(a), float(b)] for a, b in zip(rows[x], rows[y]) if math.isfinite(a) and math.isfinite(b)]
        line = {"name": str(name), "points": points}
        style = (styles or {}).get(name)
        if style is not None:
            line.update(colour=style.colour, marker=style.marker, dashed=style.dashed, family=style.family)
        lines.append(line)
    if styles:  # families together, in the legend and the drawing order alike
        order = {name: index for index, name in enumerate(styles)}
        lines.sort(key=lambda line: order.get(line["name"], len(order)))
    chart = {"title": title, "x_label": x_label, "y_label": y_label, "log2_x": log2_x, "lines": lines,
             "y_format": y_format}
    if reference is not None and math.isfinite(reference):
        chart["reference"] = {"value": float(reference), "label": reference_label}
    if y_max is not None and math.isfinite(y_max):
        chart["y_max"] = float(y_max)
    return chart


def _table(frame: pd.DataFrame) -> str:
    columns = [_column(str(name), frame[name]) for name in frame.columns]
    head = "".join(f"<th>{html_escape.escape(header)}</th>" for header, _ in columns)
    rows = []
    for index, values in enumerate(frame.itertuples(index=False)):
        cells = "".join(f'<td data-value="{_sort_key(value)}">{html_escape.escape(shown[index])}</td>'
                        for value, (_, shown) in zip(values, columns))
        rows.append(f"<tr>{cells}</tr>")
    return f'<table data-sortable><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


# Column names that say their unit: durations in seconds, rates per second, ratios, shares.
TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
RATE_UNITS = (("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0))
SIGNIFICANT_DIGITS = 4  # of a column's largest value; smaller ones get as many decimals, so noise reads 0


def _column(name: str, values: pd.Series) -> tuple[str, list[str]]:
    """A column's header (with its unit) and its values as shown: durations in one time unit per column,
    rates with a k/M/G multiplier, speed-ups with 3 decimals, shares as percentages, whole numbers with
    thousands separators, other numbers to `SIGNIFICANT_DIGITS` of the column's largest."""
    if values.dtype == bool or not pd.api.types.is_numeric_dtype(values):
        return name, ["" if _missing(value) else str(value) for value in values]
    numbers = values.astype(float).to_numpy()
    finite = numbers[np.isfinite(numbers)]
    largest = float(np.abs(finite).max()) if finite.size else 0.0
    if "seconds" in name.split("_"):
        unit, scale = next(((unit, scale) for unit, scale in TIME_UNITS if largest >= scale),
                           TIME_UNITS[0] if largest == 0 else TIME_UNITS[-1])
        return f"{name} ({unit})", _decimals(numbers / scale, largest / scale)
    if "_per_s" in name:  # rates span decades (1 to 2,048 devices): each keeps its own 4 digits
        return name, [_rate(value) for value in numbers]
    if name.endswith("_noise"):  # relative standard errors
        return f"{name} (%)", _decimals(100 * numbers, 100 * largest, digits=3)
    if "speedup" in name or name == "packing_factor":
        return f"{name} (x)", [_or_blank(value, "{:.3f}") for value in numbers]
    if name == "efficiency":  # 3 decimals, and never 100 with any padding
        return f"{name} (%)", [_or_blank(value, "{}") if not math.isfinite(value) else efficiency_text(value, 3)
                               for value in numbers]
    if name == "gap_to_bound":
        return f"{name} (%)", _decimals(100 * numbers, 100 * largest, digits=5)
    if finite.size and np.all(finite == np.round(finite)):
        return name, [_or_blank(value, "{:,.0f}") for value in numbers]
    return name, _decimals(numbers, largest)


def _rate(value: float) -> str:
    """A rate with `SIGNIFICANT_DIGITS` and a k/M/G multiplier: 25.97 k, 60.51 M."""
    if not math.isfinite(value):
        return _or_blank(value, "{}")
    prefix, scale = next(((prefix, scale) for prefix, scale in RATE_UNITS if abs(value) >= scale), RATE_UNITS[-1])
    return f"{value / scale:.{SIGNIFICANT_DIGITS}g} {prefix}".rstrip()


def _decimals(numbers: np.ndarray, largest: float, digits: int = SIGNIFICANT_DIGITS) -> list[str]:
    """Every number of a column with the decimals that give its largest `digits` significant digits."""
    decimals = min(max(digits - 1 - math.floor(math.log10(largest)), 0), 9) if largest > 0 else 0
    return [_or_blank(value + 0.0, f"{{:,.{decimals}f}}") for value in numbers]  # + 0.0: no "-0.000"


def _or_blank(value: float, number_format: str) -> str:
    if not math.isfinite(value):
        return "" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    shown = number_format.format(value)
    return shown[1:] if shown.startswith("-") and not shown.strip("-0.,") else shown  # a rounded -0.000 reads 0.000


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _sort_key(value) -> str:
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and math.isfinite(value):
        return repr(float(value))
    return "" if _missing(value) else html_escape.escape(str(value), quote=True)
