"""Memory for every scenario: each strategy's largest microbatch against HBM (memory.csv), the `memory` policies
(refuse, recompute, auto), validate's refusal and what it suggests, the Answer skipping what does not fit, and
every bundled scenario and sweep cell fitting its hardware or refused."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simbench.cli import app
from simbench.costmodels import TransformerCostModel
from simbench.costmodels.hardware import load_hardware
from simbench.costmodels.layout import RECOMPUTE, ParallelLayout
from simbench.costmodels.memory import GIB, peak_memory
from simbench.errors import InputError, InputErrors
from simbench.experiment import run_experiment
from simbench.report.summary import summary_markdown, summary_record
from simbench.resolved import _cost_model, resolve
from simbench.scenario import Scenario, bundled_scenarios
from simbench.checked import load_checked_scenarios as load_scenarios, parse_checked_scenarios as parse_scenarios
from simbench.sim.replica import ReplicaCostModel
from simbench.strategies.group_by_length import sequences_per_batch
from simbench.sweep import bundled_sweeps, load_sweep

# Squad's lengths (the longest 384) padded to 1,024: padded rows hold 1,024 slots, un-padded ones at most 384.
GPT2 = """\
name: fit
dataset: {histogram: squad_1_1_384, max_length: 1024}
model: gpt2
hardware: {profile: h100-sxm, overrides: {hbm_capacity_bytes: CAPACITY}}
strategies: [spfhp:3, unpad]
devices: DEVICES
batch_size: 32
steps: 5
compare_at: as-configured
outputs: {lp_bounds: false, plots: []}
"""


def scenario_of(tmp_path: Path, text: str) -> Scenario:
    (scenario,) = parse_scenarios(text, source="s.yaml", base_dir=tmp_path)
    return scenario


def gpt2(capacity_gib: float, devices: str = "[1]", extra: str = "") -> str:
    return GPT2.replace("CAPACITY", str(int(capacity_gib * GIB))).replace("DEVICES", devices) + extra


def peak_gib(layout: ParallelLayout, tokens: int, replicas: int = 1, model: str = "gpt2") -> float:
    return peak_memory(model, layout, tokens_per_microbatch=tokens, replicas=replicas).peak_bytes / GIB


def test_the_table_is_peak_memory_of_each_strategys_largest_microbatch(tmp_path):
    text = GPT2.replace("[spfhp:3, unpad]", "[spfhp:3, unpad, sort, group-by-length, token-budget:budget_tokens=5000]")
    scenario = scenario_of(tmp_path, text.replace("CAPACITY", str(80 * GIB)).replace("DEVICES", "[2, 8]"))
    histogram = scenario.dataset.load()
    table = run_experiment(scenario).memory.set_index("strategy")
    expected_tokens = {"none": 32 * 1024, "pad-to-longest": 32 * 384, "spfhp:3": 32 * 1024, "unpad": 32 * 384,
                       "sort": 32 * 384,
                       "group-by-length": sequences_per_batch(histogram, 32, 1024) * 384,
                       "token-budget:budget_tokens=5000": 5000}
    assert table["tokens_per_microbatch"].to_dict() == expected_tokens
    for strategy, tokens in expected_tokens.items():
        # At the fewest replicas simulated (2), the layout's defaults: one GPU, ZeRO 1, no recompute.
        assert table.loc[strategy, "peak_memory_gib"] == pytest.approx(peak_gib(ParallelLayout(), tokens, 2))
    assert (table["verdict"] == "fits").all() and (table["hbm_capacity_gib"] == 80).all()
    assert (table["replicas"] == 2).all() and (table["zero_stage"] == 1).all() and (table["recompute"] == "none").all()


def capacity_between(low: float, high: float) -> float:
    assert low < high
    return (low + high) / 2


@pytest.mark.parametrize("policy", ["refuse", "recompute", "auto"])
def test_each_policy_does_what_it_says_for_a_strategy_over_hbm(tmp_path, policy):
    padded, unpadded = 32 * 1024, 32 * 384
    # unpad fits as configured; the packs (and padding) need recompute full, which makes them fit
    full = peak_gib(ParallelLayout(recompute="full"), padded)
    capacity = capacity_between(max(peak_gib(ParallelLayout(), unpadded), full),
                                peak_gib(ParallelLayout(recompute="selective"), padded))
    scenario = scenario_of(tmp_path, gpt2(capacity, extra=f"memory: {policy}\n"))
    run = resolve(scenario)
    table = run.memory.table().set_index("strategy")
    assert table.loc["unpad", "verdict"] == "fits"
    if policy == "refuse":
        assert table.loc["spfhp:3", "verdict"] == "does not fit" and table.loc["spfhp:3", "made_to_fit"] == ""
        assert run.layout is None and isinstance(run.cost_model, TransformerCostModel)
        assert table.loc["spfhp:3", "peak_memory_gib"] > capacity
    else:
        # One replica: auto has no replicas to shard over, so it recomputes as `recompute` does.
        assert table.loc["spfhp:3", "verdict"] == "needs recompute"
        assert table.loc["spfhp:3", "made_to_fit"] == "recompute full"
        assert run.layout == ParallelLayout(recompute="full")  # without `parallel`: a 1 x 1 x 1 layout
        assert isinstance(run.cost_model, ReplicaCostModel) and run.gpus_per_replica == 1
        assert (table["peak_memory_gib"] <= capacity).all() and (table["recompute"] == "full").all()


def test_auto_shards_with_zero_where_recompute_alone_does_not_fit(tmp_path):
    tokens, replicas, model = 1024, 8, "llama-3.1-8b"  # one padded row: the model's state is the most of it
    # Recompute full at ZeRO 1 is not enough; ZeRO 2 (gradients sharded too) with no recompute is.
    capacity = capacity_between(peak_gib(ParallelLayout(zero_stage=2), tokens, replicas, model),
                                peak_gib(ParallelLayout(recompute="full"), tokens, replicas, model))
    text = gpt2(capacity, devices="[8, 16]").replace("gpt2", model).replace("batch_size: 32", "batch_size: 1")
    auto = resolve(scenario_of(tmp_path, text))
    assert auto.memory.priced == ParallelLayout(zero_stage=2) == auto.layout
    assert auto.memory.table().set_index("strategy").loc["spfhp:3", "made_to_fit"] == "ZeRO 2"
    with pytest.raises(InputErrors, match=r"s.yaml:11: memory: no strategy fits .* it fits with `memory: auto` "
                                          r"\(ZeRO 2, recompute none\)"):
        scenario_of(tmp_path, text + "memory: recompute\n")


def test_validate_and_run_refuse_what_fits_nowhere_saying_what_would(tmp_path):
    text = """\
name: sft
dataset: {histogram: {synthetic: lognormal, sequences: 2000, median_length: 2000, sigma: 1.0}, max_length: 8192}
model: llama-3.1-8b
hardware: h100-sxm
strategies: [ffd]
devices: [1, 8]
batch_size: 2
"""
    path = tmp_path / "sft.yaml"
    path.write_text(text)
    capacity = load_hardware("h100-sxm").hbm_capacity_bytes / GIB
    # What would fit, from the memory model: the fewest GPUs at ZeRO 3 with the least recomputation, and no
    # smaller batch at one GPU (the state alone, 16 bytes a parameter, is over 80 GiB).
    tokens = 2 * 8192
    fewest = min((count, RECOMPUTE.index(recompute), recompute) for recompute in RECOMPUTE
                 for count in (2**power for power in range(12))
                 if peak_gib(ParallelLayout(zero_stage=3, recompute=recompute), tokens, count, "llama-3.1-8b")
                 <= capacity)
    assert peak_gib(ParallelLayout(recompute="full"), 8192, 1, "llama-3.1-8b") > capacity
    needs = peak_gib(ParallelLayout(zero_stage=1, recompute="full"), tokens, 1, "llama-3.1-8b")
    message = (f"sft.yaml:6: devices: no strategy fits h100-sxm's 80 GiB of HBM per GPU: ffd:max's largest microbatch "
               f"(16,384 tokens) needs {needs:.0f} GiB per GPU on 1 GPU (ZeRO 1, recompute full); it fits with ZeRO 3 "
               f"(parallel.zero_stage) and recompute {fewest[2]} from {fewest[0]} GPUs (devices)")
    for command in ("validate", "run"):
        result = CliRunner().invoke(app, [command, str(path), "-o", str(tmp_path / "out")] if command == "run"
                                    else [command, str(path)])
        # The command line prints the error in one line and exits 2 (cli.main); here it comes back as raised.
        assert isinstance(result.exception, InputError) and message in str(result.exception), command
    assert not (tmp_path / "out").exists()
    fixed = text.replace("devices: [1, 8]", f"devices: [{fewest[0]}, 16]") + (
        f"parallel: {{zero_stage: 3, recompute: {fewest[2]}}}\n")
    assert resolve(scenario_of(tmp_path, fixed)).memory.does_not_fit() == []


def test_a_strategy_that_does_not_fit_is_never_the_answer(tmp_path):
    scenario = scenario_of(tmp_path, gpt2(80, devices="[1, 4]"))
    histogram = scenario.dataset.load()
    tables = run_experiment(scenario, histogram)
    fastest = tables.scaling.sort_values("speedup").iloc[-1].strategy
    memory = tables.memory.assign(verdict=lambda frame: frame["verdict"].where(frame["strategy"] != fastest,
                                                                               "does not fit"))
    text = summary_markdown(scenario, histogram, replace(tables, memory=memory))
    answer = next(part for part in text.split("\n\n") if part.startswith("**Answer:**"))
    assert f"**{fastest}**" not in answer
    assert f"**Not ranked:** {fastest} does not fit" in text
    winners = text.split("## Winner at each scale")[1].split("##")[0]
    assert f"| {fastest} |" not in winners
    assert all(row["fastest"] != fastest for row in summary_record(scenario, histogram,
                                                                   replace(tables, memory=memory))["winners"])
    assert "## Memory" in text and "| does not fit |" in text


def test_end_to_end_refuse_keeps_the_fastest_packer_out_of_the_answer(tmp_path):
    padded, unpadded = 32 * 1024, 32 * 384
    capacity = capacity_between(peak_gib(ParallelLayout(), unpadded), peak_gib(ParallelLayout(), padded))
    scenario = scenario_of(tmp_path, gpt2(capacity, extra="memory: refuse\n"))
    histogram = scenario.dataset.load()
    tables = run_experiment(scenario, histogram)
    assert set(tables.memory.loc[tables.memory["verdict"] == "does not fit", "strategy"]) == {"none", "spfhp:3"}
    answer = next(part for part in summary_markdown(scenario, histogram, tables).split("\n\n")
                  if part.startswith("**Answer:**"))
    assert "**unpad**" in answer and "**spfhp:3**" not in answer


def test_a_1x1x1_layout_prices_as_the_plain_path_but_for_zero_1s_sharded_update(tmp_path):
    """A scenario that must recompute runs as a 1 x 1 x 1 layout. With nothing changed and ZeRO 0 it prices as
    the plain path does, to the digit (the plain path's all-reduce and full optimizer update are ZeRO 0's); at
    ZeRO 1, the layout's default, the optimizer update is sharded over the replicas, so steps of 8 GPUs are
    shorter (the difference docs/scenarios.md states), and one GPU is priced alike."""
    run = resolve(scenario_of(tmp_path, gpt2(80, devices="[1, 8]")))
    assert run.layout is None
    plain = run.simulate().summary.set_index(["strategy", "devices"])["step_seconds_mean"]
    for zero_stage in (0, 1):
        layout = ParallelLayout(zero_stage=zero_stage)
        one = replace(run, layout=layout, cost_model=_cost_model(run.cost_model_name, run.model, run.hardware, 1,
                                                                 layout))
        priced = one.simulate().summary.set_index(["strategy", "devices"])["step_seconds_mean"]
        assert priced.xs(1, level="devices").to_numpy() == pytest.approx(plain.xs(1, level="devices").to_numpy(),
                                                                         rel=1e-9)
        eight = (priced.xs(8, level="devices") / plain.xs(8, level="devices")).to_numpy()
        if zero_stage == 0:
            assert eight == pytest.approx(1.0, rel=1e-9)
        else:
            assert ((eight < 1) & (eight > 0.8)).all()


def _bundled_scenarios() -> list[Scenario]:
    return [scenario for name in bundled_scenarios() for scenario in load_scenarios(name)]


@pytest.mark.parametrize("scenario", _bundled_scenarios(), ids=lambda scenario: scenario.name)
def test_every_bundled_scenario_fits_every_strategy_it_ranks(scenario):
    run = resolve(scenario)
    capacity = run.hardware.hbm_capacity_bytes
    if capacity is None:
        assert run.memory is None
        return
    # The run is priced on the settings the check chose, and every strategy that is not marked is within HBM.
    if run.memory.raised or scenario.layout is not None:
        assert (run.layout.zero_stage, run.layout.recompute) == (run.memory.priced.zero_stage,
                                                                 run.memory.priced.recompute)
    table = run.memory.table()
    ranked = table[table["verdict"] != "does not fit"]
    assert not ranked.empty
    assert (ranked["peak_memory_gib"] * GIB <= capacity).all()
    for row in ranked.itertuples():
        direct = peak_memory(run.model, replace(run.memory.priced, microbatches=row.microbatches),
                             tokens_per_microbatch=row.tokens_per_microbatch, replicas=min(run.devices))
        assert direct.peak_bytes <= capacity
    # Sizing cuts a step so that its largest microbatch of whole rows holds no more than memory gave it (a row
    # alone, or a budget of the longest sequence, may hold more).
    slots = run.footing.microbatch_slots
    if slots is not None:
        longest = run.histogram.longest
        assert all(row.tokens_per_microbatch <= max(slots, longest) or row.rows_per_microbatch == 1
                   for row in table.itertuples())


def test_every_cell_of_the_bundled_sweeps_fits():
    for name in bundled_sweeps():
        sweep = load_sweep(name)
        checked = {}
        for cell in sweep.cells:
            scenario = cell.scenario
            key = (scenario.model, scenario.dataset.max_length, scenario.batch_size, min(scenario.replica_devices))
            if key not in checked:
                run = resolve(scenario)
                table = run.memory.table()
                ranked = table[table["verdict"] != "does not fit"]
                checked[key] = bool((ranked["peak_memory_gib"] * GIB <= run.hardware.hbm_capacity_bytes).all()
                                    and not ranked.empty)
        assert all(checked.values()), name


def test_a_budget_from_memory_still_fits(tmp_path):
    text = gpt2(80, extra="").replace("[spfhp:3, unpad]", "[{name: token-budget, budget_tokens: memory}]")
    run = resolve(scenario_of(tmp_path, text))
    (plan,) = [plan for plan in run.plans if plan.name.startswith("token-budget")]
    table = run.memory.table().set_index("strategy")
    assert table.loc[plan.name, "tokens_per_microbatch"] == plan.budget_tokens
    assert table.loc[plan.name, "verdict"] == "fits"


def test_a_replica_of_several_gpus_without_parallel_is_checked_but_not_raised(tmp_path):
    text = gpt2(80).replace("devices: [1]", "devices: [1]\ngpus_per_replica: 4")
    padded = 32 * 1024
    tp4 = peak_gib(ParallelLayout(tp=4), padded)
    scenario = scenario_of(tmp_path, text.replace(str(80 * GIB), str(int(tp4 * 0.9 * GIB))) + "memory: auto\n")
    run = resolve(scenario)
    assert run.layout is None and not run.memory.raised
    assert run.memory.table().set_index("strategy").loc["spfhp:3", "peak_memory_gib"] == pytest.approx(tp4)
    assert "spfhp:3" in run.memory.does_not_fit()


def test_the_parallel_schema_states_the_layouts_defaults():
    from simbench.scenario import ParallelSpec

    assert ParallelSpec().layout() == ParallelLayout()
    with pytest.raises(InputError):
        ParallelLayout(zero_stage=4)


def test_a_sweep_checks_each_pair_of_batch_size_and_devices(tmp_path):
    # Each value fits with the base's other one; the large batch on the few GPUs does not, even with ZeRO 3
    # and full recompute.
    rows = 2
    while peak_gib(ParallelLayout(zero_stage=3, recompute="full"), rows * 384, 2, "llama-3.1-8b") <= 80:
        rows *= 2
    assert peak_gib(ParallelLayout(zero_stage=3, recompute="full"), rows * 384, 16, "llama-3.1-8b") <= 80
    (tmp_path / "pairs.yaml").write_text(f"""\
name: pairs
base:
  dataset: {{histogram: squad_1_1_384}}
  model: llama-3.1-8b
  hardware: h100-sxm
  strategies: [spfhp:3]
  devices: [16]
  batch_size: 1
  steps: 2
axes:
  batch_size: [1, {rows}]
  devices: [16, 2]
""")
    with pytest.raises(InputError, match=rf"cell 3 \(batch_size={rows}, devices=2\): .*no strategy fits"):
        load_sweep(tmp_path / "pairs.yaml")


def test_memory_is_checked_at_the_microbatch_each_strategy_runs_once_sized(tmp_path):
    """Equal tokens give un-padding three times the rows of the packs (squad's sequences fill a third of a 1,024
    row), cut into as many microbatches as the scenario's own microbatch of 32 x 1,024 slots needs: 48 of the
    longest sequence. Its configured 32 fit HBM; the 48 it runs do not, and the check says so and makes them fit."""
    capacity = capacity_between(peak_gib(ParallelLayout(), 32 * 384), peak_gib(ParallelLayout(), 48 * 384))
    text = gpt2(capacity, extra="memory: auto\n").replace("compare_at: as-configured\n", "")
    run = resolve(scenario_of(tmp_path, text))  # validation checks the scenario's own sizes: they pass
    table = run.memory.table().set_index("strategy")
    for name, plan in run.footing.plans.items():
        rows = -(-plan.rows // plan.microbatches)
        assert table.loc[run.label(name), ["rows_per_microbatch", "microbatches"]].tolist() == [rows, plan.microbatches]
    unpad = run.footing.plans["unpad"]
    rows = -(-unpad.rows // unpad.microbatches)
    assert rows > 32 and table.loc["unpad", "tokens_per_microbatch"] == rows * 384
    assert table.loc["unpad", "verdict"] == "needs recompute" and table.loc["unpad", "made_to_fit"] == "recompute full"
    assert peak_gib(ParallelLayout(), rows * 384) > capacity
    # The run is priced at the setting that makes it fit, and nothing ranked is over HBM.
    assert run.layout == run.memory.priced == ParallelLayout(recompute="full")
    ranked = run.memory.table().query("verdict != 'does not fit'")
    assert set(ranked["strategy"]) >= {"unpad"} and (ranked["peak_memory_gib"] <= capacity).all()
    # `refuse` keeps the scenario's settings: nothing it runs fits, and the run says what would.
    with pytest.raises(InputError, match=r"no strategy fits .* it fits with `memory: auto` \(ZeRO 1, recompute full\)"):
        resolve(scenario_of(tmp_path, text.replace("memory: auto", "memory: refuse")))


def test_a_device_of_several_gpus_holds_its_share_of_weights_and_activations(tmp_path):
    """Without `parallel`, gpus_per_replica GPUs split the model tensor parallel: on a small case, parameters,
    gradients and optimizer state (16 bytes a parameter, ZeRO 1 over one replica: unsharded) and every layer's
    activations and the logits per GPU are halved on 2 GPUs; the token ids are not split."""
    from simbench.costmodels.memory import activation_bytes_per_token, max_tokens_per_microbatch
    from simbench.costmodels.model import get_model

    text = gpt2(80).replace("devices: [1]", "devices: [1]\ngpus_per_replica: 2").replace(
        "[spfhp:3, unpad]", "[spfhp:3, {name: token-budget, budget_tokens: memory}]")
    run = resolve(scenario_of(tmp_path, text))
    model, tokens = get_model("gpt2"), 32 * 1024
    layers = model.layers * activation_bytes_per_token(model, "none") * tokens
    logits_and_norm = tokens * (4 * model.vocab + 2 * 2 * model.hidden)
    closed_form = 16 * model.parameters / 2 + (layers + logits_and_norm) / 2 + 8 * tokens
    table = run.memory.table().set_index("strategy")
    assert table.loc["spfhp:3", "peak_memory_gib"] * GIB == pytest.approx(closed_form, rel=1e-12)
    assert table.loc["spfhp:3", "tp"] == 2
    # A budget from memory is what 2 GPUs hold, not one.
    (budget,) = [plan.budget_tokens for plan in run.plans if plan.name.startswith("token-budget")]
    assert budget == max_tokens_per_microbatch("gpt2", run.hardware, ParallelLayout(tp=2))
    assert budget > max_tokens_per_microbatch("gpt2", run.hardware, ParallelLayout())


def test_the_report_names_the_layout_memory_raised_the_run_to(tmp_path):
    """A 1 x 1 x 1 layout that must recompute: the 4D answer, the replica section and the decision block say the
    layout it ran with, not the scenario's settings."""
    full = peak_gib(ParallelLayout(recompute="full"), 32 * 1024)
    capacity = capacity_between(full, peak_gib(ParallelLayout(recompute="selective"), 32 * 1024))
    text = gpt2(capacity, devices="[1, 2]", extra="parallel: {}\nmemory: recompute\n")
    scenario = scenario_of(tmp_path, text)
    histogram = scenario.dataset.load()
    tables = run_experiment(scenario, histogram)
    assert set(tables.memory["recompute"]) == {"full"}
    summary = summary_markdown(scenario, histogram, tables)
    answer = next(part for part in summary.split("\n\n") if part.startswith("**4D answer:**"))
    assert "recompute full" in answer and "recompute none" not in answer
    assert "## Inside a replica (TP 1 x PP 1 x CP 1" in summary and "recompute full; ms" in summary
    from simbench.report.decision import decision_table

    decision = decision_table(tables, histogram).set_index("strategy")
    for row in tables.memory.itertuples():
        assert decision.loc[row.strategy, "layout"] == (f"TP 1 x PP 1 x CP 1, ZeRO 1, recompute full, "
                                                        f"{row.microbatches} microbatch"
                                                        + ("" if row.microbatches == 1 else "es"))
    block = summary.split("## Decision")[1].split("\n## ")[0]
    assert "| ran as |" in block and "recompute full, 1 microbatch" in block


def test_simulate_checks_memory_as_run_does(tmp_path):
    """`simbench.simulate` and `simbench simulate` take the run's check: the same table as the scenario's, a verdict
    on every row, the run priced at the settings `auto` chose, and a refusal where nothing fits."""
    import simbench

    padded, unpadded = 32 * 1024, 32 * 384
    capacity = capacity_between(max(peak_gib(ParallelLayout(), unpadded),
                                    peak_gib(ParallelLayout(recompute="full"), padded)),
                                peak_gib(ParallelLayout(recompute="selective"), padded))
    overrides = {"hbm_capacity_bytes": int(capacity * GIB)}
    options = dict(model="gpt2", hardware="h100-sxm", batch_size=32, steps=5, hardware_overrides=overrides)
    lengths = scenario_of(tmp_path, gpt2(capacity)).dataset.load()  # squad padded to 1,024
    for policy in ("refuse", "auto"):
        scenario = scenario_of(tmp_path, gpt2(capacity, devices="[1, 2]", extra=f"memory: {policy}\n"))
        tables = run_experiment(scenario)
        result = simbench.simulate(lengths, ["spfhp:3", "unpad"], [1, 2], memory=policy, **options)
        assert result.memory.drop(columns="strategy").equals(tables.memory.drop(columns="strategy"))
        verdicts = result.summary.set_index("strategy")["memory_verdict"]
        assert verdicts["unpad"].eq("fits").all()
        assert verdicts["spfhp:3"].eq("does not fit" if policy == "refuse" else "needs recompute").all()
        # The same settings price both: the same speed-ups.
        simulated = result.summary.set_index(["strategy", "devices"])["speedup"]
        assert simulated.to_numpy() == pytest.approx(
            tables.scaling.set_index(["strategy", "devices"]).loc[simulated.index, "speedup"].to_numpy(), rel=1e-9)
    # On squad at its own 384 tokens every strategy's largest microbatch is 32 x 384, a budget of 2,000 less.
    between = capacity_between(peak_gib(ParallelLayout(), 2000), peak_gib(ParallelLayout(), 32 * 384))
    command = CliRunner().invoke(app, ["simulate", "squad_1_1_384", "-s", "spfhp:3,token-budget:budget_tokens=2000",
                                       "-n", "1", "--model", "gpt2", "--hardware", "h100-sxm", "--steps", "5",
                                       "--memory", "refuse", "--set", f"hbm_capacity_bytes={int(between * GIB)}",
                                       "--json"])
    assert command.exit_code == 0, command.output
    rows = {record["strategy"]: record["memory_verdict"] for record in map(json.loads, command.stdout.splitlines())}
    assert rows["spfhp:3"] == "does not fit" and rows["token-budget:budget_tokens=2000"] == "fits"
    assert "memory: spfhp:3 does not fit" in command.stderr
    with pytest.raises(InputError, match="no strategy fits"):
        simbench.simulate(lengths, ["spfhp:3"], [1], memory="refuse",
                          **{**options, "hardware_overrides": {"hbm_capacity_bytes": int(GIB)}})
