"""The generated parts of the documentation: each lies between two markers in a Markdown page and is
written from the code or a run's results, so that the page cannot drift from what it describes.

    >>> page = "Intro.\\n<!-- generated: demo -->\\nold\\n<!-- end generated: demo -->\\nOutro.\\n"
    >>> print(replace_section(page, "demo", "new\\n"), end="")
    Intro.
    <!-- generated: demo -->
    new
    <!-- end generated: demo -->
    Outro.

`python -m simbench.report.docs_pages` rewrites the generated parts of a checkout's docs/ pages from the
code; with `--check` it only names the stale ones and exits with status 1.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- generated: {name} -->\n", f"<!-- end generated: {name} -->"


def section_names(text: str) -> list[str]:
    """The names of the generated sections in `text`, in order."""
    return re.findall(r"^<!-- generated: (\S+) -->$", text, flags=re.MULTILINE)


def section(text: str, name: str) -> str:
    """The body of the generated section `name` (a ValueError where the page has no such section)."""
    begin, end = _markers(name)
    start = text.find(begin)
    stop = text.find(end, start + len(begin))
    if start < 0 or stop < 0:
        raise ValueError(f"no generated section {name!r}: it lies between the lines {begin.strip()!r} "
                         f"and {end!r}")
    return text[start + len(begin):stop]


def replace_section(text: str, name: str, body: str) -> str:
    """`text` with the body of the generated section `name` replaced by `body`."""
    old = section(text, name)
    begin, _ = _markers(name)
    start = text.find(begin) + len(begin)
    return text[:start] + body + text[start + len(old):]


def _scenario_keys(model: str) -> str:
    from simbench.report.scenario_docs import key_table

    return key_table(model)


def _validation_table(root: Path) -> str:
    from simbench.report.validation_table import markdown
    from simbench.validation_runs import validation_table

    return markdown(validation_table(root / "tests" / "data" / "mlperf"))


# Section name (before any `:`) -> how its body is made from the checkout's root and the name's argument.
GENERATORS: dict[str, Callable[[Path, str], str]] = {
    "scenario-keys": lambda root, model: _scenario_keys(model),
    "validation-table": lambda root, _: _validation_table(root),
}

# The pages whose generated sections come from the code (the README's main-job table comes from a run:
# simbench.report.main_job_table).
PAGES = ("docs/scenarios.md", "docs/validation.md")


def render(text: str, root: Path = REPOSITORY) -> str:
    """`text` with every generated section written anew."""
    for name in section_names(text):
        kind, _, argument = name.partition(":")
        text = replace_section(text, name, GENERATORS[kind](root, argument))
    return text


def stale_pages(root: Path = REPOSITORY, pages: tuple[str, ...] = PAGES) -> dict[str, str]:
    """The pages whose generated sections differ from what the code generates now, with their new text."""
    rendered = {page: render((root / page).read_text(), root) for page in pages}
    return {page: text for page, text in rendered.items() if text != (root / page).read_text()}


def main(arguments: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if arguments is None else arguments
    stale = stale_pages()
    for page, text in stale.items():
        if "--check" in arguments:
            print(f"{page} is stale: regenerate it with `python -m simbench.report.docs_pages`", file=sys.stderr)
        else:
            (REPOSITORY / page).write_text(text)
            print(f"rewrote {page}")
    return 1 if stale and "--check" in arguments else 0


if __name__ == "__main__":
    sys.exit(main())
