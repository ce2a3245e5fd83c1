"""The README and docs/ say what the code does: generated parts are current, marked examples run."""

import pytest

from simbench.report.docs_pages import REPOSITORY, render, replace_section, section, section_names

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
