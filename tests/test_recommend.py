"""`simbench recommend`: every strategy family in every stack's own settings, which parse, name only the stack's
real options, and carry the run's figures (the Decision block's choice, the step the run was sized at, the layout
it priced); a strategy a stack cannot run gives way to the fastest it can."""

import ast
import json
import math
import re
import shlex
import shutil
from dataclasses import replace

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from simbench.cli import app
from simbench.errors import InputError
from simbench.experiment import run_experiment
from simbench.report.decision import decision_choice
from simbench.report.recommend import STACKS, rate_text, recommend, recommend_from
from simbench.report.recommend.plan import Family, family_of, rows_at, run_facts, training_plan
from simbench.report.recommend.stacks import Expression
from simbench.report.folder import write_report
from simbench.report.tables import read_tables
from simbench.sim.memory_fit import DOES_NOT_FIT
from simbench.scenario import Scenario
from simbench.checked import load_checked_scenario as load_scenario
from simbench.strategies.group_by_length import sequences_per_batch

RUNNER = CliRunner()
# One strategy of every family a built-in plan has (padding, `none`, is always simulated).
STRATEGIES = ["sort", "group-by-length", "token-budget", "greedy", {"name": "spfhp", "max_depth": 3},
              {"name": "packed-varlen", "packer": "ffd"}, "unpad", "unpad-exchange", "vts"]
BATCH_SIZE = 4


@pytest.fixture(scope="module")
def scenario():
    return Scenario(name="every-family", dataset={"histogram": "squad_1_1_384"}, strategies=STRATEGIES,
                    devices=[1, 8], steps=5, batch_size=BATCH_SIZE, outputs={"plots": [], "lp_bounds": False})


@pytest.fixture(scope="module")
def report(scenario, tmp_path_factory):
    histogram = scenario.dataset.load()
    return write_report(tmp_path_factory.mktemp("reports") / "every-family", scenario, histogram,
                        run_experiment(scenario, histogram))


@pytest.fixture(scope="module")
def tables(report):
    return read_tables(report)


def labels_of(tables):
    return list(dict.fromkeys(tables.scaling["strategy"]))


def test_the_run_covers_every_family_of_the_built_in_plans(report, tables):
    scenario = load_scenario(report / "resolved.yaml")
    families = {family_of(spec.plan()) for spec in scenario.strategies}
    assert families == set(Family) - {Family.PAD_TO_LONGEST, Family.PAD_TO_MAX, Family.OTHER}
    assert {"none", "pad-to-longest"} <= set(labels_of(tables))  # padding and the baseline, always simulated


def parsed_options(stack, snippet):
    """The option names a snippet sets, read back the way its stack reads it."""
    if stack in ("trl", "axolotl"):
        settings = yaml.safe_load(snippet)
        assert isinstance(settings, dict)
        return settings, _keys(settings)
    if stack == "megatron":
        words = shlex.split(snippet, comments=True)
        assert words[0] == "SIMBENCH_ARGS=(" and words[-1] == ")"
        return words, {word for word in words[1:-1] if word.startswith("--")}
    tree = ast.parse(snippet)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if function in ("TrainingArguments", "from_pretrained") or function.startswith("DataCollator"):
                names |= {keyword.arg for keyword in node.keywords}
            if function.startswith("DataCollator"):
                names.add(function)
        if isinstance(node, ast.ImportFrom):
            names |= {alias.name for alias in node.names} - {"Trainer", "TrainingArguments"}
    return tree, names


def _keys(settings):
    keys = set()
    for key, value in settings.items():
        keys.add(key)
        if isinstance(value, dict) and key != "deepspeed":
            keys |= _keys(value)
    return keys


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_snippet_parses_and_names_only_the_stacks_real_options(stack, report, tables):
    for label in labels_of(tables):
        recommendation = recommend(report, stack, strategy=label)
        parsed, names = parsed_options(stack, recommendation.snippet)
        assert names and names <= STACKS[stack].options, (label, names - STACKS[stack].options)
        assert STACKS[stack].option_names(recommendation.settings) <= STACKS[stack].options
        if stack in ("trl", "axolotl"):
            assert parsed == recommendation.settings  # the YAML reads back as the settings
        if stack == "megatron":
            flags = [word for word in parsed[1:-1] if word.startswith("--")]
            assert flags == list(recommendation.settings)


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_the_figures_are_the_decision_blocks_and_the_step_the_scaling_tables(stack, report, tables, scenario):
    histogram = scenario.dataset.load()
    decision = pd.read_csv(report / "decision.csv").set_index("strategy")
    smallest = int(tables.scaling["gpus"].min())
    scaling = tables.scaling[tables.scaling["gpus"] == smallest].set_index("strategy")
    for label in labels_of(tables):
        recommendation = recommend(report, stack, strategy=label)
        plan = recommendation.plan
        assert plan.gpus == smallest  # the Decision block's cluster by default
        row = decision.loc[plan.strategy]
        assert plan.tokens_per_s_per_gpu == row.tokens_per_s_per_gpu
        assert plan.tokens_per_s_per_gpu * plan.relative_error == pytest.approx(row.tokens_per_s_per_gpu_spread)
        assert plan.real_tokens_per_step == row.real_tokens_per_step
        comments = comment_text(recommendation.snippet)
        assert f"Expected: {rate_text(plan)}" in comments
        assert f"{row.real_tokens_per_step:,.0f} real tokens per optimizer step" in comments
        assert plan.max_length == histogram.max_length
        sized = scaling.loc[plan.strategy]
        rows = (sequences_per_batch(histogram, int(sized.rows_per_device_step), histogram.max_length)
                if plan.family is Family.GROUP_BY_LENGTH else int(sized.rows_per_device_step))
        assert plan.rows_per_device * plan.accumulation_steps == rows  # the step the run simulated
        assert plan.rows_per_device <= max(1, rows // sized.microbatches_per_step)  # no microbatch larger
        if rows % sized.microbatches_per_step == 0:
            assert plan.accumulation_steps == sized.microbatches_per_step
        if stack == "megatron":
            assert recommendation.settings["--micro-batch-size"] == plan.rows_per_device
            assert recommendation.settings["--global-batch-size"] == (plan.rows_per_device * plan.accumulation_steps
                                                                      * plan.gpus)
            assert recommendation.settings["--seq-length"] == histogram.max_length


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_a_strategy_the_stack_cannot_run_gives_way_to_the_fastest_it_can(stack, report, tables, scenario):
    histogram = scenario.dataset.load()
    facts = run_facts(scenario, tables)
    _, rows, _ = rows_at(tables, histogram, None)
    fitting_first = sorted(rows, key=lambda row: (row["memory_verdict"] == DOES_NOT_FIT,
                                                  -row["tokens_per_s_per_gpu"], row["strategy"]))
    runnable = [row for row in fitting_first
                if isinstance(STACKS[stack].express(training_plan(row, scenario, histogram, facts), facts), Expression)]
    substitutions = 0
    for label in labels_of(tables):
        recommendation = recommend(report, stack, strategy=label)
        chosen = training_plan(next(row for row in rows if row["strategy"] == label), scenario, histogram, facts)
        if isinstance(STACKS[stack].express(chosen, facts), Expression):
            assert recommendation.plan.strategy == label and not recommendation.substituted
            continue
        substitutions += 1
        assert recommendation.substituted and recommendation.chosen.strategy == label
        assert recommendation.plan.strategy == runnable[0]["strategy"]  # the fastest it can run, by brute force
        assert f"cannot run {chosen.family.value}" in recommendation.notes[0]
    assert substitutions >= 3  # sort, token-budget, vts: no stack runs them


def comment_text(snippet):
    """A snippet's comment lines as one line, unwrapped."""
    return " ".join(line.lstrip("# ").strip() for line in snippet.splitlines() if line.startswith("#"))


def decision_words(report):
    """The strategy summary.md's Decision block says to use."""
    return re.search(r"^On .*?: use \*\*(.+?)\*\*", (report / "summary.md").read_text(), re.M).group(1)


def test_the_default_strategy_is_the_decision_blocks_choice(report):
    assert recommend(report, "trl").chosen.strategy == decision_words(report)


def test_each_family_maps_to_its_stack_settings(report):
    trl = {label: recommend(report, "trl", strategy=label).settings for label in ("spfhp:3", "packed-varlen:ffd:max",
                                                                                  "unpad", "greedy:max", "none")}
    assert trl["spfhp:3"]["packing_strategy"] == "bfd" and trl["spfhp:3"]["model_init_kwargs"] == {
        "attn_implementation": "sdpa"}  # whole-row attention, as simbench prices packs
    assert trl["packed-varlen:ffd:max"]["padding_free"] and trl["packed-varlen:ffd:max"]["model_init_kwargs"] == {
        "attn_implementation": "flash_attention_2"}
    assert trl["unpad"]["padding_free"] and not trl["unpad"]["packing"] and trl["unpad"]["max_length"] is None
    assert trl["greedy:max"]["packing_strategy"] == "wrapped"
    assert trl["none"]["pad_to_multiple_of"] == trl["none"]["max_length"]
    hf = recommend(report, "hf", strategy="unpad").settings
    assert hf["data_collator"]["class"] == "DataCollatorWithFlattening"
    assert recommend(report, "hf", strategy="group-by-length").settings["training_arguments"][
        "train_sampling_strategy"] == "group_by_length"
    axolotl = recommend(report, "axolotl", strategy="greedy:max").settings
    assert axolotl["sample_packing"] and axolotl["sample_packing_sequentially"]
    assert recommend(report, "axolotl", strategy="unpad").settings["batch_flattening"]
    assert recommend(report, "megatron", strategy="packed-varlen:ffd:max").settings["--sft"]
    assert recommend(report, "megatron", strategy="greedy:max").settings["--reset-attention-mask"]


def test_a_layout_becomes_megatrons_parallel_and_memory_flags(report, scenario):
    facts = run_facts(scenario)
    base = recommend(report, "megatron", strategy="packed-varlen:ffd:max").plan
    stack = STACKS["megatron"]
    for zero_stage, recompute in [(1, "selective"), (2, "full"), (3, "none")]:
        plan = replace(base, gpus=512, gpus_per_replica=32, tp=4, pp=2, cp=4, virtual_stages=3,
                       rows_per_step=8 * base.rows_per_device, microbatches=8, zero_stage=zero_stage,
                       recompute=recompute, overlap_gradient_sync=True)
        flags = stack.express(plan, facts).settings
        assert flags["--global-batch-size"] == plan.rows_per_device * 8 * (512 // 32)
        assert (flags["--tensor-model-parallel-size"], flags["--pipeline-model-parallel-size"],
                flags["--context-parallel-size"], flags["--num-virtual-stages-per-pipeline-rank"]) == (4, 2, 4, 3)
        assert flags.get("--use-distributed-optimizer", False) == (zero_stage == 1)
        assert flags.get("--data-parallel-sharding-strategy") == {1: None, 2: "optim_grads",
                                                                  3: "optim_grads_params"}[zero_stage]
        assert flags.get("--recompute-granularity") == {"none": None}.get(recompute, recompute)
        assert ("--recompute-method" in flags) == (recompute == "full")  # Megatron requires it with full
        assert flags["--overlap-grad-reduce"] and set(flags) <= stack.options


def test_a_report_has_recommend_md_with_every_stacks_snippet(report):
    text = (report / "recommend.md").read_text()
    for stack in STACKS.values():
        snippet = recommend(report, stack.name).snippet
        assert f"```{stack.language}\n{snippet}```" in text


def test_a_scenario_is_run_and_recommends_as_its_report_does(report, scenario, tmp_path):
    path = tmp_path / "every-family.yaml"
    path.write_text(scenario.to_yaml())
    from_scenario, from_report = recommend(path, "axolotl"), recommend(report, "axolotl")
    # The report's tables are stored to 10 significant digits; the snippet shows far fewer.
    assert from_scenario.snippet == from_report.snippet and from_scenario.settings == from_report.settings
    assert from_scenario.plan.tokens_per_s_per_gpu == pytest.approx(from_report.plan.tokens_per_s_per_gpu, rel=1e-9)


def test_the_rate_is_written_as_the_decision_block_writes_it(report, tables):
    text = (report / "summary.md").read_text()
    block = text[text.index("## Decision"):].split("\n\n")[2].splitlines()[2:]
    cells = {line.split(" | ")[0].strip("| "): line.split(" | ")[1] for line in block}
    for label in labels_of(tables):
        assert rate_text(recommend(report, "axolotl", strategy=label).chosen) == f"{cells[label]} real tokens/s per GPU"


def recommend_plan_stub():
    from simbench.report.recommend.plan import TrainingPlan

    return TrainingPlan(strategy="x", family=Family.PACKS, packer="ffd", gpus=8, max_length=512, rows_per_step=2,
                        microbatches=1, per_document_attention=False, recompute=None, zero_stage=None,
                        gpus_per_replica=1, tp=1, pp=1, cp=1, virtual_stages=1, cp_sharding="zigzag",
                        overlap_gradient_sync=False, tokens_per_s_per_gpu=1.0, relative_error=0.0,
                        real_tokens_per_step=None, memory_verdict=None)


def test_bad_requests_are_one_clear_error(report, tmp_path):
    with pytest.raises(InputError, match="did you mean 'trl'"):
        recommend(report, "trll")
    with pytest.raises(InputError, match="simulated 1, 8 GPUs, not 3"):
        recommend(report, "trl", gpus=3)
    with pytest.raises(InputError, match="did you mean 'unpad'"):
        recommend(report, "trl", strategy="unpda")
    with pytest.raises(InputError, match="no resolved.yaml"):
        recommend(tmp_path, "trl")
    with pytest.raises(InputError, match="--quick and --seed apply to a scenario"):
        recommend(report, "trl", quick=True)


def test_the_command_prints_the_snippet_or_one_json_object(report):
    result = RUNNER.invoke(app, ["recommend", str(report), "--for", "axolotl", "--gpus", "8"])
    assert result.exit_code == 0, result.output
    assert result.stdout == recommend(report, "axolotl", gpus=8).snippet
    result = RUNNER.invoke(app, ["recommend", str(report), "--for", "megatron", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["stack"] == "megatron" and record["simulated"] and record["settings"]["--seq-length"] == 384
    result = RUNNER.invoke(app, ["recommend", str(report), "--for", "deepspeed"])
    assert result.exit_code != 0 and "--for" in str(result.exception or result.output)


def test_recommend_from_takes_a_run_in_hand(report, tables, scenario):
    histogram = scenario.dataset.load()
    assert recommend_from(tables, scenario, histogram, "hf").to_json() == recommend(report, "hf").to_json()


def test_a_strategy_the_run_added_itself_is_read_from_its_label(tables, scenario):
    histogram = scenario.dataset.load()
    facts = run_facts(scenario, tables)
    _, rows, _ = rows_at(tables, histogram, None)
    row = next(row for row in rows if row["strategy"] == "none")
    assert training_plan({**row, "strategy": "lpfhp:2"}, scenario, histogram, facts).family is Family.PACKS
    unknown = training_plan({**row, "strategy": "a-baseline-of-the-future"}, scenario, histogram, facts)
    assert unknown.family is Family.OTHER and unknown.rows_per_step == row["rows_per_device_step"]
    assert all(isinstance(stack.express(unknown, None), str) for stack in STACKS.values())  # none can run it


def test_the_docs_table_says_which_stack_runs_which_family(report):
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "commands.md").read_text()
    table = text[text.index("| family: simbench strategies |"):].split("\n\n")[0].splitlines()
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    columns = {"TRL": "trl", "HF Trainer": "hf", "axolotl": "axolotl", "Megatron-LM": "megatron"}
    stub = recommend_plan_stub()
    documented = set()
    for line in table[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        family = Family(cells[0].split("`")[1])
        documented.add(family)
        plan = replace(stub, family=family, per_document_attention=family in (
            Family.PACKS_PER_DOCUMENT, Family.UNPAD, Family.UNPAD_EXCHANGE))
        for name, cell in zip(header[1:], cells[1:]):
            runs = isinstance(STACKS[columns[name]].express(plan, _decoder_facts()), Expression)
            assert runs == (cell != "—"), (family, name, cell)
    assert documented == set(Family) - {Family.OTHER}


def _decoder_facts():
    from simbench.report.recommend.plan import RunFacts

    return RunFacts(scenario="s", model="llama-3.1-8b", is_decoder=True, hardware="h100-sxm",
                    hardware_overridden=False, steps=5, seed=0, shapes="auto")


def test_the_python_api_recommends_as_the_command_does(report):
    import simbench

    assert simbench.recommend(report, "megatron", gpus=8).snippet == recommend(report, "megatron", gpus=8).snippet


def test_the_option_lists_hold_where_the_libraries_are_installed():
    # Skipped without them (simbench does not depend on them); where installed, their own dataclasses decide.
    dataclasses = pytest.importorskip("dataclasses")
    training_args = pytest.importorskip("transformers.training_args")
    names = {field.name for field in dataclasses.fields(training_args.TrainingArguments)}
    assert {"per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
            "train_sampling_strategy", "fsdp", "deepspeed"} <= names
    sft_config = pytest.importorskip("trl.trainer.sft_config")
    sft_names = {field.name for field in dataclasses.fields(sft_config.SFTConfig)}
    assert STACKS["trl"].options - {"attn_implementation"} <= sft_names


# --- Bundled scenarios: the recommendation follows their reports ------------------------------------------------

BUNDLED = __import__("pathlib").Path(__file__).parents[1] / "scenarios"


def _bundled_report(name, tmp_path_factory, **changes):
    """A bundled scenario's report with few steps and no plots (the figures change, not what they are read from)."""
    bundled = load_scenario(BUNDLED / f"{name}.yaml")
    scenario = Scenario.model_validate({**bundled.model_dump(), "outputs": {"plots": [], "lp_bounds": False},
                                        **changes})
    histogram = scenario.dataset.load()
    return write_report(tmp_path_factory.mktemp("bundled") / name, scenario, histogram,
                        run_experiment(scenario, histogram))


@pytest.fixture(scope="module")
def llama_report(tmp_path_factory):
    # Its layout (ZeRO 3, full recompute) and equal-tokens sizing (some strategies accumulate gradients).
    return _bundled_report("llama8b-sft-8k", tmp_path_factory, steps=10, devices=[8, 16])


@pytest.fixture(scope="module")
def wiki_report(tmp_path_factory):
    # No layout, `compare_at: as-configured`, `baseline: none`.
    return _bundled_report("wiki512", tmp_path_factory, steps=5, devices=[1, 8],
                           strategies=["none", "sort", {"name": "spfhp", "max_depth": 3}, "unpad"])


@pytest.mark.parametrize("which", ["llama_report", "wiki_report"])
def test_the_recommended_strategy_is_the_decision_blocks_choice_and_fits(which, request):
    report = request.getfixturevalue(which)
    decision = pd.read_csv(report / "decision.csv")
    choice = decision_choice(decision)
    assert choice == decision_words(report)
    assert decision.set_index("strategy").loc[choice, "memory_verdict"] != DOES_NOT_FIT
    for stack in STACKS:
        recommendation = recommend(report, stack)
        assert recommendation.chosen.strategy == choice
        assert recommendation.plan.fits is not False  # a substitute fits too, where one that fits can run
    gpus = int(decision["gpus"].iloc[0])
    assert f"The Decision block's choice on {gpus:,} GPU{'' if gpus == 1 else 's'} is **{choice}**" in (
        report / "recommend.md").read_text()


def test_a_strategy_that_does_not_fit_is_never_recommended_unasked(llama_report, tmp_path):
    # Sizing keeps every bundled strategy within HBM, so the report's choice is marked as not fitting in a copy.
    report = tmp_path / "report"
    shutil.copytree(llama_report, report)
    choice = decision_choice(pd.read_csv(report / "decision.csv"))
    memory = pd.read_csv(report / "memory.csv")
    memory.loc[memory["strategy"] == choice, "verdict"] = DOES_NOT_FIT
    memory.to_csv(report / "memory.csv", index=False)
    decision = pd.read_csv(report / "decision.csv")
    decision.loc[decision["strategy"] == choice, "memory_verdict"] = DOES_NOT_FIT
    decision.to_csv(report / "decision.csv", index=False)
    for stack in STACKS:
        recommendation = recommend(report, stack)
        assert recommendation.plan.strategy != choice and recommendation.plan.fits is not False
    asked = [recommend(report, stack, strategy=choice) for stack in STACKS]
    assert all(recommendation.chosen.fits is False for recommendation in asked)
    running_it = [recommendation for recommendation in asked if recommendation.plan.strategy == choice]
    assert running_it and all("does NOT fit HBM" in recommendation.snippet for recommendation in running_it)


@pytest.mark.parametrize("which", ["llama_report", "wiki_report"])
def test_the_rows_and_accumulation_printed_are_the_scaling_tables(which, request):
    report = request.getfixturevalue(which)
    scenario = load_scenario(report / "resolved.yaml")
    histogram = scenario.dataset.load()
    scaling = pd.read_csv(report / "scaling.csv")
    decision = pd.read_csv(report / "decision.csv").set_index("strategy")
    at = scaling[scaling["devices"] == scaling["devices"].min()].set_index("strategy")
    checked = 0
    for label in at.index:
        step_rows = int(at.loc[label, "rows_per_device_step"])
        microbatches = int(at.loc[label, "microbatches_per_step"])
        if label == "group-by-length":
            step_rows = sequences_per_batch(histogram, step_rows, histogram.max_length)
        replicas = int(at.loc[label, "devices"])
        for stack, batch_key, accumulation_key in [
                ("trl", "per_device_train_batch_size", "gradient_accumulation_steps"),
                ("axolotl", "micro_batch_size", "gradient_accumulation_steps"),
                ("megatron", "--micro-batch-size", None)]:
            recommendation = recommend(report, stack, strategy=label)
            if recommendation.substituted:
                continue
            checked += 1
            settings = recommendation.settings
            per_microbatch = settings[batch_key]
            accumulation = settings[accumulation_key] if accumulation_key else (
                settings["--global-batch-size"] // (per_microbatch * replicas))
            assert per_microbatch * accumulation == step_rows  # the rows, so the tokens, of the step simulated
            if step_rows % microbatches == 0:
                assert (per_microbatch, accumulation) == (step_rows // microbatches, microbatches)
            else:  # trainers take equal microbatches: more of them, none larger than the run's mean
                assert accumulation > microbatches and per_microbatch <= step_rows // microbatches
                assert "microbatches of unequal rows" in comment_text(recommendation.snippet)
            tokens = decision.loc[label, "real_tokens_per_step"]
            assert f"{tokens:,.0f} real tokens per optimizer step" in comment_text(recommendation.snippet)
    assert checked >= 6


def test_the_layout_the_run_priced_is_written_and_said(llama_report, wiki_report):
    memory = pd.read_csv(llama_report / "memory.csv").iloc[0]
    trl = recommend(llama_report, "trl").settings
    assert trl["fsdp"].startswith("full_shard") == (memory.zero_stage == 3)
    assert trl["gradient_checkpointing"] == (memory.recompute != "none")
    text = (llama_report / "recommend.md").read_text()
    assert f"ZeRO stage {memory.zero_stage}, recompute {memory.recompute}" in text.split("\n\n")[1]
    wiki = (wiki_report / "recommend.md").read_text().split("\n\n")[1]
    assert "plain data parallel" in wiki and "ZeRO stage" not in wiki
    assert not recommend(wiki_report, "trl").settings["gradient_checkpointing"]


def test_settings_the_memory_policy_raised_are_the_ones_written(tmp_path_factory):
    # An 8B model's full fine-tuning on one GPU a replica, without `parallel`: `memory: auto` shards and recomputes.
    scenario = Scenario(name="raised", dataset={"histogram": "squad_1_1_384"}, model="llama-3.1-8b",
                        hardware="h100-sxm", strategies=["unpad"], devices=[2], steps=3, batch_size=16,
                        outputs={"plots": [], "lp_bounds": False})
    histogram = scenario.dataset.load()
    tables = run_experiment(scenario, histogram)
    memory = tables.memory.iloc[0]
    assert scenario.layout is None and (tables.memory["verdict"] == "needs recompute").any()
    facts = run_facts(scenario, tables)
    assert facts.layout_raised and (facts.layout.zero_stage, facts.layout.recompute) == (memory.zero_stage,
                                                                                         memory.recompute)
    megatron = recommend_from(tables, scenario, histogram, "megatron", strategy="none").settings
    assert ("--recompute-granularity" in megatron) == (memory.recompute != "none")
    assert ("--use-megatron-fsdp" in megatron) == (memory.zero_stage >= 2)
    snippet = recommend_from(tables, scenario, histogram, "axolotl").snippet
    assert (f"ZeRO stage {memory.zero_stage}, recompute {memory.recompute} (raised by the scenario's `memory` policy"
            in comment_text(snippet))
