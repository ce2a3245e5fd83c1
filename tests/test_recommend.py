"""`simbench recommend`: every strategy family in every stack's own settings, which parse, name only the stack's
real options, and carry the run's figures; a strategy a stack cannot run gives way to the fastest it can."""

import ast
import json
import math
import shlex
from dataclasses import replace

import pytest
import yaml
from typer.testing import CliRunner

from simbench.cli import app
from simbench.errors import InputError
from simbench.experiment import run_experiment
from simbench.report.recommend import STACKS, rate_text, recommend, recommend_from
from simbench.report.recommend.plan import Family, family_of, ranked
from simbench.report.recommend.stacks import Expression
from simbench.report.folder import write_report
from simbench.scenario import Scenario, load_scenario
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
def summary(report):
    return json.loads((report / "summary.json").read_text())


def labels_of(summary):
    return list(dict.fromkeys(row["strategy"] for row in summary["scaling"]))


def test_the_run_covers_every_family_of_the_built_in_plans(report, summary):
    scenario = load_scenario(report / "resolved.yaml")
    families = {family_of(spec.plan()) for spec in scenario.strategies}
    assert families == set(Family) - {Family.PAD_TO_LONGEST, Family.PAD_TO_MAX, Family.OTHER}
    assert "none" in labels_of(summary)  # padding to max, the family every stack can run


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
def test_every_snippet_parses_and_names_only_the_stacks_real_options(stack, report, summary):
    for label in labels_of(summary):
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
def test_the_figures_are_the_runs(stack, report, summary, scenario):
    histogram = scenario.dataset.load()
    for label in labels_of(summary):
        recommendation = recommend(report, stack, strategy=label)
        plan = recommendation.plan
        row = next(row for row in summary["scaling"] if row["strategy"] == plan.strategy and row["gpus"] == plan.gpus)
        assert plan.tokens_per_s_per_gpu == row["tokens_per_s_per_gpu"]
        assert plan.relative_error == row["throughput_noise"]
        assert f"Expected: {rate_text(plan)}" in " ".join(
            line.lstrip("# ").strip() for line in recommendation.snippet.splitlines() if line.startswith("#"))
        assert plan.gpus == max(row["gpus"] for row in summary["scaling"])  # the largest simulated by default
        assert plan.max_length == summary["dataset"]["max_length"]
        expected_rows = (sequences_per_batch(histogram, BATCH_SIZE, histogram.max_length)
                         if plan.family is Family.GROUP_BY_LENGTH else BATCH_SIZE)
        assert plan.rows_per_device == expected_rows
        assert plan.accumulation_steps == 1
        if stack == "megatron":
            assert recommendation.settings["--micro-batch-size"] == expected_rows
            assert recommendation.settings["--global-batch-size"] == expected_rows * plan.gpus
            assert recommendation.settings["--seq-length"] == histogram.max_length


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_a_strategy_the_stack_cannot_run_gives_way_to_the_fastest_it_can(stack, report, summary, scenario):
    histogram = scenario.dataset.load()
    gpus = max(row["gpus"] for row in summary["scaling"])
    rows = [row for row in summary["scaling"] if row["gpus"] == gpus]
    from simbench.report.recommend.plan import run_facts, training_plan

    facts = run_facts(scenario)
    runnable = [row for row in ranked(rows)
                if isinstance(STACKS[stack].express(training_plan(row, scenario, histogram), facts), Expression)]
    substitutions = 0
    for label in labels_of(summary):
        recommendation = recommend(report, stack, strategy=label)
        chosen = training_plan(next(row for row in rows if row["strategy"] == label), scenario, histogram)
        if isinstance(STACKS[stack].express(chosen, facts), Expression):
            assert recommendation.plan.strategy == label and not recommendation.substituted
            continue
        substitutions += 1
        assert recommendation.substituted and recommendation.chosen.strategy == label
        assert recommendation.plan.strategy == runnable[0]["strategy"]  # the fastest it can run, by brute force
        assert f"cannot run {chosen.family.value}" in recommendation.notes[0]
    assert substitutions >= 3  # sort, token-budget, vts: no stack runs them


def test_the_default_strategy_is_the_runs_winner(report, summary):
    devices = max(row["devices"] for row in summary["scaling"])
    fastest = next(entry["fastest"] for entry in summary["winners"] if entry["devices"] == devices)
    assert recommend(report, "trl").chosen.strategy == fastest


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


def test_a_layout_becomes_megatrons_parallel_and_memory_flags(report, summary, scenario):
    from simbench.report.recommend.plan import run_facts

    facts = run_facts(scenario)
    base = recommend(report, "megatron", strategy="packed-varlen:ffd:max").plan
    stack = STACKS["megatron"]
    for zero_stage, recompute in [(1, "selective"), (2, "full"), (3, "none")]:
        plan = replace(base, gpus=512, gpus_per_replica=32, tp=4, pp=2, cp=4, virtual_stages=3,
                       accumulation_steps=8, zero_stage=zero_stage, recompute=recompute, overlap_gradient_sync=True)
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


def test_rate_text_shows_the_digits_its_spread_supports():
    plan = recommend_plan_stub()
    for value, relative in [(9349.0, 1e-6), (2004.3, 0.0096), (49263.6, 0.00027), (123456.0, 0.2), (7.7, 0.5)]:
        text = rate_text(replace(plan, tokens_per_s_per_gpu=value, relative_error=relative))
        shown = float(text.split()[0].replace(",", ""))
        spread = value * relative
        assert abs(shown - value) <= max(0.5, spread / 2 + 10 ** math.floor(math.log10(max(spread, 1))) / 2)
        assert ("<1" in text) == (spread < 0.5)


def recommend_plan_stub():
    from simbench.report.recommend.plan import TrainingPlan

    return TrainingPlan(strategy="x", family=Family.PACKS, packer="ffd", gpus=8, max_length=512, rows_per_device=2,
                        accumulation_steps=1, per_document_attention=False, recompute=None, zero_stage=None,
                        gpus_per_replica=1, tp=1, pp=1, cp=1, virtual_stages=1, cp_sharding="zigzag",
                        overlap_gradient_sync=False, tokens_per_s_per_gpu=1.0, relative_error=0.0, fits=None)


def test_bad_requests_are_one_clear_error(report, summary, tmp_path):
    with pytest.raises(InputError, match="did you mean 'trl'"):
        recommend(report, "trll")
    with pytest.raises(InputError, match="simulated 1, 8 GPUs, not 3"):
        recommend(report, "trl", gpus=3)
    with pytest.raises(InputError, match="did you mean 'unpad'"):
        recommend(report, "trl", strategy="unpda")
    with pytest.raises(InputError, match="no summary.json"):
        recommend(tmp_path, "trl")
    with pytest.raises(InputError, match="--quick and --seed apply to a scenario"):
        recommend(report, "trl", quick=True)


def test_the_command_prints_the_snippet_or_one_json_object(report):
    result = RUNNER.invoke(app, ["recommend", str(report), "--for", "axolotl", "--gpus", "1"])
    assert result.exit_code == 0, result.output
    assert result.stdout == recommend(report, "axolotl", gpus=1).snippet
    result = RUNNER.invoke(app, ["recommend", str(report), "--for", "megatron", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["stack"] == "megatron" and record["simulated"] and record["settings"]["--seq-length"] == 384
    result = RUNNER.invoke(app, ["recommend", str(report), "--for", "deepspeed"])
    assert result.exit_code != 0 and "--for" in str(result.exception or result.output)


def test_recommend_from_takes_a_run_in_hand(report, summary, scenario):
    histogram = scenario.dataset.load()
    assert recommend_from(summary, scenario, histogram, "hf").to_json() == recommend(report, "hf").to_json()


def test_a_strategy_the_run_added_itself_is_read_from_its_label(summary, scenario):
    from simbench.report.recommend.plan import training_plan

    histogram = scenario.dataset.load()
    row = next(row for row in summary["scaling"] if row["strategy"] == "none")
    assert training_plan({**row, "strategy": "lpfhp:2"}, scenario, histogram).family is Family.PACKS
    unknown = training_plan({**row, "strategy": "a-baseline-of-the-future"}, scenario, histogram)
    assert unknown.family is Family.OTHER and unknown.rows_per_device == BATCH_SIZE
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

    assert simbench.recommend(report, "megatron", gpus=1).snippet == recommend(report, "megatron", gpus=1).snippet


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
