"""`token-budget`'s `budget_tokens`: a number of padded token slots per microbatch or `memory`, what the layout's
HBM allows (`costmodels.memory.max_tokens_per_microbatch`); its names, refusals and the batches it makes."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from simbench.cli import app
from simbench.costmodels.layout import ParallelLayout
from simbench.costmodels.memory import max_tokens_per_microbatch
from simbench.errors import InputError, InputErrors
from simbench.resolved import Run, resolve
from simbench.checked import parse_checked_scenarios as parse_scenarios
from simbench.sim.plans import parse_plan, plan_from_fields

LLAMA = """\
name: budget
dataset: {histogram: {synthetic: lognormal, sequences: 500, median_length: 1000, sigma: 1.0}, max_length: 4096}
model: llama-3.1-8b
hardware: h100-sxm
batch_size: 1
steps: 3
compare_at: as-configured  # the budgets as written, not sized to the other strategies' tokens
"""
LAYOUT = "parallel: {tp: 2, pp: 2, microbatches: 4, dp: 2}\n"


def scenario_of(tmp_path: Path, text: str):
    (scenario,) = parse_scenarios(text, source="s.yaml", base_dir=tmp_path)
    return scenario


def test_text_and_mapping_forms_read_the_same_plan_whose_name_parses_back():
    text = parse_plan("token-budget:budget_tokens=65536")
    assert text == plan_from_fields({"name": "token-budget", "budget_tokens": 65536})
    assert text.name == "token-budget:budget_tokens=65536" and text.budget_tokens == 65536
    assert parse_plan(text.name) == text
    memory = parse_plan("token-budget:budget_tokens=memory")
    assert memory.budget_tokens == "memory" and parse_plan(memory.name) == memory
    # No parameter: today's plan and name.
    assert parse_plan("token-budget").name == "token-budget" and parse_plan("token-budget").budget_tokens is None


@pytest.mark.parametrize("bad", [0, -3, "lots", "1.5", True, 2.5])
def test_a_bad_budget_is_refused_naming_the_strategy_and_key(bad):
    with pytest.raises(InputError, match=r"strategy 'token-budget': budget_tokens: must be a whole number of tokens "
                                         r">= 1 or `memory`"):
        plan_from_fields({"name": "token-budget", "budget_tokens": bad})


def test_a_bad_budget_in_a_scenario_is_refused_at_its_line(tmp_path):
    with pytest.raises(InputErrors) as raised:
        scenario_of(tmp_path, LLAMA + "strategies:\n  - {name: token-budget, budget_tokens: -1}\n")
    assert "s.yaml:9" in str(raised.value) and "budget_tokens" in str(raised.value)


def test_memory_is_the_layouts_max_tokens_per_microbatch_and_the_label_shows_the_number(tmp_path):
    scenario = scenario_of(tmp_path, LLAMA + LAYOUT + "strategies: [{name: token-budget, budget_tokens: memory}]\n")
    direct = max_tokens_per_microbatch("llama-3.1-8b", "h100-sxm", ParallelLayout(tp=2, pp=2, microbatches=4),
                                       replicas=2)
    run = resolve(scenario)
    (plan,) = run.plans
    assert plan.budget_tokens == direct > 0
    assert run.label(plan.name) == f"token-budget:budget_tokens={direct}" == plan.name
    assert parse_plan(plan.name) == plan


def test_memory_without_a_layout_is_one_gpus():
    run = Run.from_options("squad_1_1_384", ["token-budget:budget_tokens=memory"], [2, 8], model="llama-3.1-8b",
                           hardware="h100-sxm", steps=2)
    direct = max_tokens_per_microbatch("llama-3.1-8b", "h100-sxm", ParallelLayout(), replicas=2)
    assert run.plans[0].budget_tokens == direct > 0


def test_memory_where_no_token_fits_names_hbm_capacity_bytes(tmp_path):
    with pytest.raises(InputError) as raised:
        Run.from_options("squad_1_1_384", ["token-budget:budget_tokens=memory"], [1], model="llama-3.1-70b",
                         hardware="h100-sxm", steps=2)
    assert raised.value.parameter == "hbm_capacity_bytes"
    assert "token-budget" in str(raised.value) and "hbm_capacity_bytes" in str(raised.value)
    with pytest.raises(InputErrors, match=r"s.yaml:10: strategies.0.budget_tokens: .*hbm_capacity_bytes"):
        scenario_of(tmp_path, LLAMA.replace("llama-3.1-8b", "llama-3.1-70b")
                    + "strategies:\n  - name: token-budget\n    budget_tokens: memory\n")


def test_a_budget_over_what_the_layouts_hbm_holds_is_refused_with_what_it_holds(tmp_path):
    allowed = max_tokens_per_microbatch("llama-3.1-8b", "h100-sxm", ParallelLayout(tp=2, pp=2, microbatches=4),
                                        replicas=2)
    over = LLAMA + LAYOUT + f"strategies:\n  - name: token-budget\n    budget_tokens: {allowed + 1}\n"
    with pytest.raises(InputErrors, match=rf"s.yaml:11: strategies.0.budget_tokens: .*{allowed + 1:,} tokens a "
                                          rf"microbatch exceed what h100-sxm's HBM holds on TP 2 x PP 2 x CP 1, "
                                          rf"ZeRO 1, recompute none, up to {allowed:,}"):
        scenario_of(tmp_path, over)
    assert scenario_of(tmp_path, over.replace(str(allowed + 1), str(allowed)))


def test_a_budget_below_the_longest_sequence_is_refused():
    with pytest.raises(InputError, match=r"strategy 'token-budget:budget_tokens=100': budget_tokens 100 cannot hold "
                                         r"the dataset's longest sequence of 384 tokens"):
        Run.from_options("squad_1_1_384", ["token-budget:budget_tokens=100"], [1], steps=2)


def test_a_larger_budget_gives_batches_of_more_tokens():
    run = Run.from_options("squad_1_1_384", ["token-budget", "token-budget:budget_tokens=8192"], [1], batch_size=8,
                           steps=20)
    result = run.simulate()
    assert result.packings["token-budget"].details["budget_tokens"] == 8 * 384
    assert result.packings["token-budget:budget_tokens=8192"].details["budget_tokens"] == 8192
    summary = result.summary.set_index("strategy")
    tokens = summary["tokens_per_s"] * summary["step_seconds_mean"]
    assert tokens["token-budget:budget_tokens=8192"] > 2 * tokens["token-budget"]


def test_a_4d_step_holds_the_budget_for_each_microbatch(tmp_path):
    scenario = scenario_of(tmp_path, LLAMA + LAYOUT + "strategies: [token-budget, token-budget:budget_tokens=8192]\n")
    packings = resolve(scenario).simulate(max_rows=10**6).packings
    assert packings["token-budget"].details["budget_tokens"] == 4 * 1 * 4096  # microbatches x batch_size x max_length
    assert packings["token-budget:budget_tokens=8192"].details["budget_tokens"] == 4 * 8192


def test_validate_states_the_memory_budget(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(LLAMA + LAYOUT + "strategies: [ffd]\n")
    direct = max_tokens_per_microbatch("llama-3.1-8b", "h100-sxm", ParallelLayout(tp=2, pp=2, microbatches=4),
                                       replicas=2)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0
    assert (f"Memory allows up to {direct:,} tokens a microbatch (TP 2 x PP 2 x CP 1, ZeRO 1, recompute none)"
            in result.output)
