"""`simbench measure` works from the scenario's resolved `Run`: its packs are the simulator's (the cost model's
attention parity for a balancing packer) and its `memory` token budgets are resolved. No torch needed: these
build the batches measure would time."""

import pytest

from simbench.calibrate.measure_run import _measure_source
from simbench.calibrate.strategy_batches import strategy_batches
from simbench.sim.plans import PLANS

SCENARIO = """\
name: measured-as-run
dataset: {histogram: squad_1_1_384}
model: bert-large
strategies: [wlb, {name: token-budget, budget_tokens: memory}]
devices: [1]
batch_size: 8
steps: 5
"""


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("measure") / "scenario.yaml"
    path.write_text(SCENARIO)
    return _measure_source(str(path), None)


def _built(source, **keywords):
    histogram = source.histogram
    return strategy_batches(source.plans, histogram, histogram.max_length, 6, source.batch_size, source.seed,
                            **keywords)


def test_a_measured_wlb_packs_the_batches_the_simulation_packs(source):
    (wlb,) = [plan for _, plan in source.plans if plan.packer == "wlb"]
    packing = source.run.packings[wlb.name]  # what the run simulates
    assert packing.details["attention_parity_tokens"] == pytest.approx(source.run.cost_model.attention_parity_tokens)
    repacked = _built(source, cost_model=source.run.cost_model)  # packed again, as measure does on other rows
    reused = _built(source, cost_model=source.run.cost_model, packings=source.run.packings)
    label = source.run.label(wlb.name)
    assert repacked.layouts[label] == reused.layouts[label]
    assert all(layout.kind == "packed" for layout in repacked.layouts[label])
    by_options = _built(source)  # without the cost model: the packer's own parity (max_length), other packs
    assert by_options.layouts[label] != repacked.layouts[label]


def test_a_memory_token_budget_is_measured_at_the_budget_the_run_resolved(source):
    (budget,) = [plan for _, plan in source.plans if plan.kind == "token-budget"]
    assert isinstance(budget.budget_tokens, int) and budget.budget_tokens >= source.histogram.longest
    built = _built(source, cost_model=source.run.cost_model)
    label = source.run.label(budget.name)
    assert label not in built.refused and len(built.layouts[label]) == 6
    assert all(layout.slots <= budget.budget_tokens for layout in built.layouts[label])
    # Unresolved (no run to resolve it), the budget has no number to build batches at: refused with the reason.
    unresolved = PLANS.get("token-budget").build({"budget_tokens": "memory"})
    histogram = source.histogram
    bare = strategy_batches([("budget", unresolved)], histogram, histogram.max_length, 2, 8, 0)
    assert "resolved by a run" in bare.refused["budget"]
