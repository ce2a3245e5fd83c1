"""Equal footing (`compare_at`): strategies compared at the same real tokens per optimizer step, or flagged."""

import numpy as np
import pytest

from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.costmodels.transformer import TransformerCostModel
from simbench.experiment import run_experiment
from simbench.resolved import resolve
from simbench.scenario import OutputsSpec, Scenario
from simbench.checked import load_checked_scenario as load_scenario
from simbench.sim.accumulation import accumulating
from simbench.sim.footing import FLAG_ABOVE, TOLERANCE, Footing, PlanFooting

SFT = "scenarios/llama8b-sft-8k.yaml"


def _sft(**update) -> Scenario:
    return load_scenario(SFT).model_copy(update=update)


def _fsdp(compare_at: str, **update) -> Scenario:
    """The issue's case: the SFT scenario on 8 GPUs with ZeRO 3 and a token budget of what memory allows."""
    from simbench.scenario import ParallelSpec, StrategySpec

    scenario = load_scenario(SFT)
    strategies = [StrategySpec(name="token-budget", budget_tokens="memory") if spec.name == "token-budget" else spec
                  for spec in scenario.strategies] + [StrategySpec(name="sort"), StrategySpec(name="unpad")]
    return scenario.model_copy(update={"strategies": tuple(strategies), "devices": (8,), "batch_size": 1,
                                       "parallel": ParallelSpec(zero_stage=3, recompute="full"),
                                       "compare_at": compare_at, **update})


def _spread(values) -> float:
    values = np.asarray(list(values), dtype=float)
    return values.max() / values.min() - 1


def _simulated_tokens_per_step(scenario: Scenario) -> dict[str, float]:
    scaling = run_experiment(scenario, stragglers=False, assumptions=False).scaling
    return dict(zip(scaling["strategy"], scaling["real_tokens_per_device_step"]))


@pytest.mark.parametrize("scenario", [_sft(), _fsdp("equal-tokens")], ids=["sft", "fsdp-token-budget"])
def test_equal_tokens_puts_every_strategy_within_the_tolerance(scenario):
    footing = resolve(scenario).footing
    assert footing.compare_at == "equal-tokens"
    assert _spread(plan.expected_real_tokens_per_step for plan in footing.plans.values()) <= TOLERANCE
    assert footing.warnings() == []
    # Simulated on one device over many independent steps, the real tokens per step agree with the sizing.
    simulated = _simulated_tokens_per_step(scenario.model_copy(update={
        "devices": (8,) if scenario.parallel else (1,), "steps": 3000, "outputs": OutputsSpec(lp_bounds=False)}))
    assert set(simulated) == {resolve(scenario).label(name) for name in footing.plans}
    assert _spread(simulated.values()) <= TOLERANCE


def test_the_issue_case_as_configured_is_flagged_and_equal_tokens_sizes_the_budget_down():
    as_configured = resolve(_fsdp("as-configured"))
    tokens = {as_configured.label(name): plan.expected_real_tokens_per_step
              for name, plan in as_configured.footing.plans.items()}
    budget = next(label for label in tokens if label.startswith("token-budget"))
    assert tokens[budget] > 5 * tokens["lpfhp:max"]  # the issue's 73,091 real tokens against 8,191
    (warning,) = as_configured.footing.warnings(as_configured.label)
    assert budget in warning and "as-configured" in warning
    equal = resolve(_fsdp("equal-tokens")).footing
    sized_budget = next(plan for plan in equal.plans.values() if plan.budget_tokens is not None)
    assert sized_budget.budget_tokens < as_configured.footing.plans[
        next(name for name in as_configured.footing.plans if name.startswith("token-budget"))].budget_tokens


def test_as_configured_runs_every_plan_at_the_scenarios_sizes():
    scenario = _sft(compare_at="as-configured", devices=(8, 32), steps=4, outputs=OutputsSpec(lp_bounds=False))
    run = resolve(scenario)
    assert all(plan.sizing is None for plan in run.plans)
    assert [plan.name for plan in run.plans] == [spec.plan().name for spec in scenario.strategies]
    result = run_experiment(scenario, stragglers=False, assumptions=False)
    tables = result.scaling
    assert (tables["rows_per_device_step"] == scenario.batch_size).all()
    assert (tables["microbatches_per_step"] == 1).all()
    expected = tables.drop_duplicates("strategy")["expected_real_tokens_per_device_step"]
    assert _spread(expected) > FLAG_ABOVE  # padding's 2 conversations against 2 full packs: flagged
    from simbench.report.footing import footing_warnings
    assert any("as-configured" in warning for warning in footing_warnings(tables))
    # The decision block says it once, under its bold lead, and not again in the next paragraph.
    from simbench.report.decision import decision_markdown

    block = decision_markdown(result, scenario.dataset.load(), lambda count: f"{count} devices")
    assert block.count("**Not on equal footing** (compare_at: as-configured): expected real tokens") == 1
    assert block.lower().count("not on equal footing") == 1 and "own batch size" not in block


def test_bundled_bert_reproductions_compare_as_configured():
    from simbench.scenario import load_scenarios

    for name in ("wiki512", "squad384", "unpad8gpu", "vts"):
        for scenario in load_scenarios(f"scenarios/{name}.yaml"):
            assert scenario.compare_at == "as-configured", name


def test_equal_tokens_is_deterministic():
    scenario = _sft(devices=(8, 32), steps=6, outputs=OutputsSpec(lp_bounds=False))
    first = run_experiment(scenario, stragglers=False, assumptions=False).scaling
    second = run_experiment(scenario, stragglers=False, assumptions=False).scaling
    assert first.equals(second)


def test_a_step_in_microbatches_costs_its_microbatches_with_the_fixed_cost_once():
    model = TransformerCostModel("bert-large", "a100")
    lengths = np.array([100, 200, 300, 400])
    one_batch = BatchSet(lengths, np.arange(4), np.full(4, 512), np.zeros(4, dtype=np.int64), 1)
    halves = BatchSet(lengths, np.arange(4), np.full(4, 512), np.array([0, 0, 1, 1]), 2)
    together = accumulating(model, 2).step_costs(one_batch, ExecutionMode.PADDED)
    apart = model.step_costs(halves, ExecutionMode.PADDED)
    np.testing.assert_allclose(together.compute_seconds, apart.compute_seconds.sum())
    np.testing.assert_allclose(together.padding_seconds, apart.padding_seconds.sum())
    np.testing.assert_allclose(together.overhead_seconds, apart.overhead_seconds.sum() - model.fixed_step_seconds)
    assert accumulating(model, 1) is model


def test_strategies_out_of_tolerance_are_named():
    footing = Footing("equal-tokens", {"a": PlanFooting(2, 1, None, 1000.0), "b": PlanFooting(3, 1, None, 1200.0)},
                      target_real_tokens_per_step=1000.0)
    (warning,) = footing.warnings()
    assert "b reaches 1,200" in warning and f"{TOLERANCE:.0%}" in warning
    assert Footing("equal-tokens", {"a": PlanFooting(2, 1, None, 1000.0)}).warnings() == []


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 16, 47])
@pytest.mark.parametrize("rows_memory_holds", [1, 2, 3, 5])
@pytest.mark.parametrize("microbatches", [1, 2, 3])
def test_a_sized_step_cuts_into_microbatches_of_whole_rows_that_memory_holds(rows, rows_memory_holds, microbatches):
    """Brute force: the fewest microbatches (a multiple of the run's) whose largest, rows over count rounded up,
    holds no more than memory allows; 4 packs where memory holds 1.7 run one a microbatch, not 2 in one of 3."""
    from simbench.histogram import LengthHistogram
    from simbench.sim.plans import parse_plans

    histogram = LengthHistogram([0] * 99 + [50], name="full")  # every pack one row of max_length 100
    (plan,) = parse_plans(["spfhp:3"])
    slots = int((rows_memory_holds + 0.7) * 100)
    count = plan.source.microbatches_holding(plan, histogram, rows, slots, microbatches)
    fewest = next(each for each in range(microbatches, 100 * microbatches, microbatches)
                  if -(-rows // each) <= rows_memory_holds or each >= rows)
    assert count == fewest and count % microbatches == 0
    assert -(-rows // count) * 100 <= slots or count >= rows
