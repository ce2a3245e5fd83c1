"""report.html: the whole report in one self-contained file (no network: script, styles and data
inline) with the summary, sortable tables and interactive charts (hover for values, click a legend
entry to hide or show a strategy).

    >>> import pandas as pd
    >>> frame = pd.DataFrame({"strategy": ["none", "spfhp"], "devices": [1, 1], "speedup": [1.0, 1.7]})
    >>> chart = line_chart("Speed-up", frame, "devices", "speedup", "strategy", x_label="devices", y_label="x")
    >>> page = report_html("demo", "# Answer\\n\\nPacking wins.", [("scaling", frame)], [chart], [])
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

import pandas as pd


def report_html(title: str, summary_markdown: str, tables: list[tuple[str, pd.DataFrame]],
                charts: list[dict], images: list[Path]) -> str:
    """The page: summary (Markdown rendered), one interactive chart per entry of `charts` (see
    `line_chart`), the report's PNG plots inline, then every table, sortable by clicking its header."""
    from markdown_it import MarkdownIt

    # The answer first, then the charts, then the summary's detailed sections.
    answer, headings, details = summary_markdown.partition("\n## ")
    markdown = MarkdownIt("commonmark").enable("table")
    sections = [f'<section class="summary">{markdown.render(answer)}</section>']
    for index, chart in enumerate(charts):
        sections.append(f'<section><h2>{html_escape.escape(chart["title"])}</h2>'
                        f'<div class="chart" id="chart-{index}"></div></section>')
    if details:
        sections.append(f'<section class="summary">{markdown.render(headings.lstrip() + details)}</section>')
    for image in images:
        encoded = base64.b64encode(Path(image).read_bytes()).decode("ascii")
        sections.append(f'<section><h2>{html_escape.escape(Path(image).stem)}</h2>'
                        f'<img alt="{html_escape.escape(Path(image).stem)} plot" src="data:image/png;base64,{encoded}">'
                        f"</section>")
    for name, frame in tables:
        if not frame.empty:
            sections.append(f"<section><h2>{html_escape.escape(name)}</h2>{_table(frame)}</section>")
    script = resources.files("simbench.report").joinpath("report.js").read_text(encoding="utf-8")
    style = resources.files("simbench.report").joinpath("report.css").read_text(encoding="utf-8")
    data = json.dumps(charts, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html_escape.escape(title)}'
            f"</title><style>{style}</style></head>\n<body>\n" + "\n".join(sections)
            + f"\n<script>const CHARTS = {data};\n{script}</script>\n</body></html>\n")


def line_chart(title: str, frame: pd.DataFrame, x: str, y: str, series: str, *, x_label: str, y_label: str,
               log2_x: bool = False, reference: float | None = None, reference_label: str = "") -> dict:
    """A chart of `y` against `x`, one line per value of `series`; a horizontal `reference` line
    (a bound) when given. Non-finite values are left out, never drawn."""
    lines = []
    for name, rows in frame.groupby(series, sort=False):
        rows = rows.sort_values(x)
        points = [[float(a), float(b)] for a, b in zip(rows[x], rows[y]) if math.isfinite(a) and math.isfinite(b)]
        lines.append({"name": str(name), "points": points})
    chart = {"title": title, "x_label": x_label, "y_label": y_label, "log2_x": log2_x, "lines": lines}
    if reference is not None and math.isfinite(reference):
        chart["reference"] = {"value": float(reference), "label": reference_label}
    return chart


def _table(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html_escape.escape(str(column))}</th>" for column in frame.columns)
    rows = []
    for values in frame.itertuples(index=False):
        cells = "".join(f'<td data-value="{_sort_key(value)}">{html_escape.escape(_shown(value))}</td>'
                        for value in values)
        rows.append(f"<tr>{cells}</tr>")
    return f'<table data-sortable><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _shown(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def _sort_key(value) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return repr(float(value))
    return html_escape.escape(str(value), quote=True)
