"""Markdown shared by the report's pages: a table as summary.md, the sweep summary and their sections write it."""

from __future__ import annotations

import pandas as pd


def markdown_table(table: pd.DataFrame) -> str:
    header = "| " + " | ".join(str(column) for column in table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    body = ["| " + " | ".join(str(value) for value in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *body])
