"""The README and docs/ say what the code does: generated parts are current, marked examples run."""

import json
import os
import re
import subprocess
import sys

import pytest

from simbench.report.docs_pages import REPOSITORY, render, replace_section, section, section_names
from simbench.report.main_job_table import DEVICES, SECTION, STRATEGIES, main, main_job_table

README = REPOSITORY / "README.md"
DOCS = REPOSITORY / "docs"


def test_docs_scenarios_md_reference_is_generated_from_the_schema():
    page = (DOCS / "scenarios.md").read_text()
    assert {"scenario-keys:Scenario", "scenario-keys:StrategySpec"} <= set(section_names(page))
    assert render(page) == page, "docs/scenarios.md is stale: regenerate it with `python -m simbench.report.docs_pages`"
    # The schema's newest keys are documented like the others.
    assert "| `shapes` | `auto` |" in page and "| `training_steps` | `10000` |" in page


def test_a_generated_section_is_replaced_whole_and_a_missing_one_is_named():
    page = "a\n<!-- generated: x -->\nold\nlines\n<!-- end generated: x -->\nb\n"
    assert replace_section(page, "x", "new\n") == "a\n<!-- generated: x -->\nnew\n<!-- end generated: x -->\nb\n"
    with pytest.raises(ValueError, match="no generated section 'y'"):
        section(page, "y")


def test_the_readme_is_short_and_keeps_the_fresh_machine_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    assert "pip install -e . && simbench run scenarios/wiki512.yaml\n" in text
    assert "pip install -e '.[dev]' && pytest\n" in text
    assert "pip install simbench-seq" in text and "download.pytorch.org/whl/cpu" in text


def _summary() -> dict:
    """A summary.json's records as a run writes them, for every strategy and device count of the table."""
    scaling = [{"strategy": strategy, "devices": devices, "speedup": 1.0 + index / 10 - devices / 1e4,
                "packer": {"unpad": None}.get(strategy, strategy.split(":")[-2 if strategy.startswith("packed") else 0])}
               for index, strategy in enumerate(STRATEGIES) for devices in DEVICES]
    packing = [{"label": "none", "packs": 1000, "lower_bound_packs": 1000.0, "gap_to_bound": 0.0, "packing_factor": 1.0},
               {"label": "greedy:max", "packs": 1278, "lower_bound_packs": 1000.0, "gap_to_bound": 0.278,
                "packing_factor": 1.5},
               {"label": "nnlshp:3", "packs": 1001, "lower_bound_packs": 1000.0, "gap_to_bound": 0.00076,
                "packing_factor": 2.0},
               {"label": "optimal:3", "packs": 8143831, "lower_bound_packs": 8143829.0, "gap_to_bound": 2.5e-7,
                "packing_factor": 2.0}]
    return {"scaling": scaling, "packing": packing}


def test_the_main_job_table_is_made_from_a_summary():
    lines = main_job_table(_summary()).splitlines()
    assert lines[0] == "| strategy | 1 device | 2 | 32 | 2048 | packs | gap to LP bound |"
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:]}
    assert rows["none (padding)"] == "| none (padding) | 1.000 | 1.000 | 0.997 | 0.795 | 1,000 |  |"
    assert rows["greedy:max"].endswith("| 1,278 | 27.8 % |")
    assert rows["nnlshp:3"].endswith("| 1,001 | 0.08 % |") and rows["optimal:3"].endswith("| 8,143,831 | 2 packs |")
    assert rows["packed-varlen:lpfhp:max"].endswith("|  |  |") and "unpad-exchange-overlap" in rows
    summary = _summary()
    summary["scaling"] = [row for row in summary["scaling"] if row["strategy"] != "sort" or row["devices"] != 32]
    with pytest.raises(KeyError, match=r"no speed-up of 'sort' at \[32\] devices"):
        main_job_table(summary)


def test_the_readme_table_check_passes_on_its_own_table_and_names_a_difference(tmp_path, capsys):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(_summary()))
    readme = tmp_path / "README.md"
    readme.write_text(README.read_text())
    assert main([str(summary), "--check", str(readme)]) == 1
    assert "main-job table differs" in capsys.readouterr().err
    assert main([str(summary), "--write", str(readme)]) == 0
    assert main([str(summary), "--check", str(readme)]) == 0
    # Only the table changed.
    assert readme.read_text().replace(section(readme.read_text(), SECTION), "") == \
        README.read_text().replace(section(README.read_text(), SECTION), "")


# Examples that claim to run: a ```bash or ```python block right after a `<!-- runs -->` line. They run
# from the repository's root with `simbench` as this Python's `python -m simbench`; keep them cheap.
RUNS = re.compile(r"^<!-- runs -->\n```(bash|python)\n(.*?)^```$", flags=re.MULTILINE | re.DOTALL)
PAGES = [README, *sorted(DOCS.glob("*.md"))]
EXAMPLES = [pytest.param(language, code, id=f"{page.name}:{text[:match.start()].count(chr(10)) + 2}")
            for page in PAGES for text in [page.read_text()] for match in RUNS.finditer(text)
            for language, code in [match.groups()]]


def test_the_docs_mark_examples_that_run():
    assert len(EXAMPLES) >= 4
    marked = sum(page.read_text().count("<!-- runs -->") for page in PAGES)
    assert marked == len(EXAMPLES), "a `<!-- runs -->` line must sit right before a ```bash or ```python block"


@pytest.mark.parametrize("language, code", EXAMPLES)
def test_a_marked_example_runs(language, code, tmp_path):
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY),
                                                                              os.environ.get("PYTHONPATH")]))}
    if language == "python":
        command = [sys.executable, "-c", code]
    else:
        prelude = (f'simbench() {{ "{sys.executable}" -m simbench "$@"; }}\n'
                   f'python() {{ "{sys.executable}" "$@"; }}\nset -euo pipefail\n')
        command = ["bash", "-c", prelude + code]
    done = subprocess.run(command, cwd=REPOSITORY, env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{code}\nexit status {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


def test_the_commands_page_names_exactly_the_commands_that_take_json_and_their_help_says_json_lines():
    import click
    import typer

    from simbench.cli import build_app

    def commands(group: click.Group, prefix: str = ""):
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                yield from commands(command, f"{prefix}{name} ")
            else:
                yield prefix + name, command

    taking = {}
    for name, command in commands(typer.main.get_command(build_app())):
        option = next((param for param in command.params if "--json" in getattr(param, "opts", ())), None)
        if option is not None:
            taking[name] = option.help
    page = (DOCS / "commands.md").read_text()
    named = re.search(r"`--json` \(on (.*?)\) prints JSON\s+lines", page, re.S)
    assert named, "docs/commands.md no longer says which commands take --json"
    assert set(re.findall(r"`([\w -]+)`", named.group(1))) == set(taking)
    for name, help_text in taking.items():
        assert help_text.startswith("JSON lines"), name


def test_no_file_holds_a_merge_conflict_marker():
    """A conflict left in a file reads as text, not as an error: the changelog once carried one."""
    root = REPOSITORY
    markers = ("<<<<<<< ", ">>>>>>> ", "=======\n")
    found = []
    for path in [*root.glob("*.md"), *root.glob("docs/**/*.md"), *root.glob("simbench/**/*.py"),
                 *root.glob("tests/**/*.py"), *root.glob("simbench/data/**/*.yaml")]:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        found += [f"{path.relative_to(root)}:{number}" for number, line in enumerate(lines, 1)
                  if line.startswith(markers[:2]) or line == markers[2]]
    assert not found, found


def test_every_docs_page_is_in_the_site_nav():
    """`mkdocs build --strict` (CI only: mkdocs is the docs extra) refuses a page missing from the nav."""
    nav = (REPOSITORY / "mkdocs.yml").read_text()
    pages = sorted(path.relative_to(REPOSITORY / "docs").as_posix() for path in (REPOSITORY / "docs").rglob("*.md"))
    missing = [page for page in pages if not re.search(rf":\s*{re.escape(page)}\s*$", nav, re.MULTILINE)]
    assert not missing, missing
