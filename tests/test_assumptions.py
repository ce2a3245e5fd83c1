"""The report's "What could change the answer" section: the run's own figures at the smallest cluster (the
scaling table's), and what each assumption changes on the same batches as a paired simulation of that cluster."""

from pathlib import Path

import pytest

from simbench.checked import parse_checked_scenarios
from simbench.experiment import run_experiment
from simbench.report.precision import speedup_text
from simbench.report.summary import summary_markdown

SCENARIO = """\
name: assumptions
dataset: {histogram: squad_1_1_384}
model: bert-large
hardware: h200
strategies: [sort, spfhp:3, packed-varlen:lpfhp:max]
baseline: none
devices: [1, 4, 16]
batch_size: 16
steps: 20
compare_at: as-configured
outputs: {lp_bounds: false, plots: []}
"""


def _section_rows(markdown: str) -> dict[str, list[str]]:
    section = markdown.split("## What could change the answer", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return {cells[0]: cells[1:] for cells in ([cell.strip() for cell in line.strip("|").split("|")]
                                              for line in lines[2:])}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    (scenario,) = parse_checked_scenarios(SCENARIO, source="s.yaml", base_dir=tmp_path_factory.mktemp("s"))
    result = run_experiment(scenario, stragglers=False)
    return scenario, result


def test_the_first_column_is_the_scaling_tables_figure_and_the_others_paired_changes(report):
    scenario, result = report
    table = result.assumptions.set_index("strategy")
    assert set(table["devices"]) == {1}
    rows = _section_rows(summary_markdown(scenario, scenario.dataset.load(), result))
    scaling = result.scaling[result.scaling["devices"] == 1].set_index("strategy")
    # h200's varlen kernels run below the padded rate: with ideal ones per-document attention gains
    variant = list(table.columns).index("ideal kernels") - list(table.columns).index("as simulated")
    for strategy, cells in rows.items():
        assert cells[0] == speedup_text(scaling.loc[strategy])
        change = table.loc[strategy, "ideal kernels"] / table.loc[strategy, "as simulated"] - 1
        assert cells[variant] == ("0.0 %" if round(100 * change, 1) == 0 else f"{100 * change:+.1f} %")
    assert rows["none"][variant] == "0.0 %"  # every column over the same baseline
    assert rows["packed-varlen:lpfhp:max"][variant].startswith("+")


def test_the_winner_under_an_assumption_is_named_with_its_lead(report):
    scenario, result = report
    markdown = summary_markdown(scenario, scenario.dataset.load(), result)
    table = result.assumptions.set_index("strategy")
    other = table["ideal kernels"].idxmax()
    scaling = result.scaling[result.scaling["devices"] == 1].sort_values("speedup", ascending=False)
    leader = scaling["strategy"].iloc[0]
    if other == leader:
        assert f"With ideal kernels {leader} still wins" in markdown
    else:
        lead = table.loc[other, "ideal kernels"] / table.loc[leader, "ideal kernels"] - 1
        assert f"would be **{other}**, {100 * lead:.1f} % ahead of {leader}." in markdown
