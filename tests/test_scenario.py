"""Scenario files: defaults, shorthands, and errors that name the file, line, key and allowed values."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from simbench.cli import app
from simbench.errors import InputError
from simbench.checked import load_checked_scenario as load_scenario, load_checked_scenarios as load_scenarios, parse_checked_scenarios as parse_scenarios
from simbench.sim.plans import all_plan_names

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
FIVE_LINES = """\
name: mini
dataset:
  histogram: squad_1_1_384
strategies: [none, spfhp, unpad]
devices: [1, 8]
"""


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(InputError) as caught:
        load_scenario(write(tmp_path, text))
    return str(caught.value)


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda path: path.name)
def test_bundled_scenarios_are_valid(path):
    for scenario in load_scenarios(path):
        assert scenario.strategies and scenario.devices
        assert scenario.dataset.load().sequences > 0


def test_five_line_scenario_gets_sensible_defaults(tmp_path):
    scenario = load_scenario(write(tmp_path, FIVE_LINES))
    assert scenario.model == "bert-large" and scenario.hardware.profile == "a100"
    assert [spec.label for spec in scenario.strategies] == ["none", "spfhp:max", "unpad"]
    assert scenario.devices == (1, 8) and scenario.seed == 0 and scenario.batch_size == 32
    assert set(scenario.outputs.plots) == {"histogram", "packing", "scaling", "gumbel", "timeline", "breakdown"}


def test_short_plan_names_mean_the_same_as_their_long_form(tmp_path):
    short = FIVE_LINES.replace("[none, spfhp, unpad]",
                               '["lpfhp:max", "packed-varlen:spfhp:4", "vts-bucketed:stages=4:window=2"]')
    long = FIVE_LINES.replace("[none, spfhp, unpad]", """
  - {name: lpfhp, max_depth: max}
  - {name: packed-varlen, packer: spfhp, max_depth: 4}
  - {name: vts-bucketed, stages: 4, window: 2}""")
    from_short = load_scenario(write(tmp_path, short, "short.yaml"))
    from_long = load_scenario(write(tmp_path, long, "long.yaml"))
    assert from_short.strategies == from_long.strategies
    assert [spec.label for spec in from_short.strategies] == [
        "lpfhp:max", "packed-varlen:spfhp:4", "vts-bucketed:stages=4:window=2"]  # default: the model's stages


def test_a_bad_short_plan_name_names_its_line(tmp_path):
    message = error_of(tmp_path, FIVE_LINES.replace("[none, spfhp, unpad]", '[none, "spfhp:deep"]'))
    assert "scenario.yaml:4:" in message and "'deep'" in message


def test_resolved_yaml_reads_back_to_the_same_scenario(tmp_path):
    scenario = load_scenario(write(tmp_path, FIVE_LINES), seed=7)
    again = load_scenario(write(tmp_path, scenario.to_yaml(), "resolved.yaml"))
    assert again == scenario and again.seed == 7


def test_relative_histogram_path_is_resolved_against_the_scenario_folder(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "lengths.csv").write_text("length,count\n1,2\n3,4\n")
    text = "name: own\ndataset: {histogram: data/lengths.csv, max_length: 8}\nstrategies: [none]\n"
    scenario = load_scenario(write(tmp_path, text))
    assert Path(scenario.dataset.histogram) == tmp_path / "data" / "lengths.csv"
    histogram = scenario.dataset.load()
    assert histogram.max_length == 8 and histogram.sequences == 6


def test_synthetic_histogram_is_deterministic_and_near_its_median():
    text = ("name: s\ndataset:\n  histogram: {synthetic: lognormal, sequences: 100000, median_length: 30, sigma: 0.5}\n"
            "  max_length: 128\nstrategies: [vts]\n")
    first, second = (parse_scenarios(text, source="s.yaml", base_dir=Path("."))[0].dataset.load() for _ in range(2))
    assert (first.counts == second.counts).all()
    assert abs(first.sequences - 100000) <= 128
    median = int((first.counts.cumsum() >= first.sequences / 2).argmax()) + 1
    assert median in (29, 30, 31)


def test_unknown_key_names_line_and_allowed_keys(tmp_path):
    message = error_of(tmp_path, FIVE_LINES.replace("  histogram: squad_1_1_384\n",
                                                    "  histogram: squad_1_1_384\n  max_len: 384\n"))
    assert message.startswith(f"{tmp_path / 'scenario.yaml'}:4: ")
    assert "unknown key 'max_len'" in message and "histogram, max_length" in message


def test_unknown_top_level_key(tmp_path):
    message = error_of(tmp_path, FIVE_LINES + "step: 10\n")
    assert ":6: unknown key 'step'" in message and "steps" in message


def test_unknown_strategy_lists_the_known_ones(tmp_path):
    message = error_of(tmp_path, FIVE_LINES.replace("spfhp, unpad", "spfhp, unpadd"))
    assert ":4: strategies.2.name: unknown strategy 'unpadd'" in message
    for name in all_plan_names():
        assert name in message


def test_wrong_type_has_line_number(tmp_path):
    message = error_of(tmp_path, FIVE_LINES + "seed: 0\nsteps: many\n")
    assert ":7: steps: " in message and "integer" in message


def test_error_inside_a_strategy_mapping(tmp_path):
    text = FIVE_LINES.replace("strategies: [none, spfhp, unpad]",
                              "strategies:\n  - none\n  - name: spfhp\n    max_depth: 0\n")
    message = error_of(tmp_path, text)
    assert ":7: strategies.1.max_depth: " in message


def test_plan_parameter_errors_come_from_the_simulator(tmp_path):
    text = FIVE_LINES.replace("[none, spfhp, unpad]", "[none, {name: vts, window: 4}]")
    message = error_of(tmp_path, text)
    assert ":4: strategies.1: " in message and "window" in message


def test_missing_histogram_file_lists_bundled_ones(tmp_path):
    message = error_of(tmp_path, FIVE_LINES.replace("squad_1_1_384", "data/missing.csv"))
    assert ":3: dataset.histogram: no such histogram file" in message and "wikipedia_512" in message


def test_unknown_model_lists_presets(tmp_path):
    message = error_of(tmp_path, FIVE_LINES + "model: bert-huge\n")
    assert ":6: model: unknown model 'bert-huge'" in message and "bert-large" in message


def test_repeated_labels_are_rejected(tmp_path):
    repeated = FIVE_LINES.replace("[none, spfhp, unpad]", "[none, spfhp, {name: spfhp, max_depth: max}]")
    message = error_of(tmp_path, repeated)
    assert "repeated: spfhp:max" in message


def test_bad_plot_name_lists_allowed_values(tmp_path):
    message = error_of(tmp_path, FIVE_LINES + "outputs:\n  plots: [scaling, pie]\n")
    assert ":7: outputs.plots.1: " in message and "'histogram'" in message and "'breakdown'" in message


def test_yaml_syntax_error_has_line(tmp_path):
    message = error_of(tmp_path, FIVE_LINES + "devices: [1, 2\n")
    assert "scenario.yaml:7: not valid YAML" in message


def test_several_scenarios_in_one_file(tmp_path):
    path = write(tmp_path, FIVE_LINES + "---\n" + FIVE_LINES.replace("name: mini", "name: other"))
    assert [scenario.name for scenario in load_scenarios(path)] == ["mini", "other"]
    with pytest.raises(InputError, match="expected one scenario, found 2"):
        load_scenario(path)
    second_document_error = FIVE_LINES + "---\n" + FIVE_LINES.replace("devices: [1, 8]", "devices: [0]")
    with pytest.raises(InputError, match=r"scenario.yaml:11: devices.0: "):
        load_scenarios(write(tmp_path, second_document_error))


def test_validate_command_prints_one_line_without_traceback(tmp_path):
    path = write(tmp_path, FIVE_LINES.replace("spfhp, unpad", "spfhp, bogus"))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert isinstance(result.exception, InputError)
    assert "unknown strategy 'bogus'" in str(result.exception)
    good = CliRunner().invoke(app, ["validate", str(write(tmp_path, FIVE_LINES, "good.yaml"))])
    assert good.exit_code == 0 and "valid scenario 'mini'" in good.output


@settings(max_examples=40, deadline=None)
@given(steps=st.one_of(st.integers(-5, 10_000), st.text(max_size=5), st.floats(allow_nan=False), st.none()),
       extra=st.dictionaries(st.sampled_from(["stepz", "seed", "devices", "batch_size"]),
                             st.one_of(st.integers(-3, 64), st.text(max_size=3)), max_size=2))
def test_parser_either_accepts_or_names_the_line(steps, extra):
    """Whatever the values, the loader returns a scenario or raises an InputError with a line number."""
    data = yaml.safe_load(FIVE_LINES) | {"steps": steps} | extra
    text = yaml.safe_dump(data, sort_keys=False)
    try:
        scenario = parse_scenarios(text, source="p.yaml", base_dir=Path("."))[0]
    except InputError as error:
        assert error.source == "p.yaml" and error.line is not None and 1 <= error.line <= text.count("\n") + 1
    else:
        # Lax numbers as pydantic reads them: 12, 12.0 and "12" all mean 12 steps; nothing else passes.
        assert steps is not None and float(steps) == scenario.steps >= 1


def test_scenario_that_is_not_utf8_text_is_an_input_error(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_bytes(b"\xff\xfe" + FIVE_LINES.encode())
    with pytest.raises(InputError, match=r"scenario\.yaml: not a UTF-8 text file"):
        load_scenario(path)


def test_max_length_shorter_than_the_histogram_names_the_line(tmp_path):
    message = error_of(tmp_path, FIVE_LINES.replace("  histogram: squad_1_1_384\n",
                                                    "  histogram: squad_1_1_384\n  max_length: 100\n"))
    assert ":2: dataset: " in message and "shorter than the longest sequence (384)" in message


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 100_000), st.floats(2.0, 50_000.0), st.floats(0.05, 3.0), st.sampled_from([64, 4096, 131072]))
def test_a_synthetic_histogram_holds_exactly_the_sequences_asked_for(sequences, median, sigma, max_length):
    """However rare each length (a few sequences spread over 131,072 lengths), none is rounded away; each length
    is within one sequence of its expected count."""
    from scipy.stats import lognorm

    from simbench.scenario import SyntheticHistogram

    histogram = SyntheticHistogram(synthetic="lognormal", sequences=sequences, median_length=median,
                                   sigma=sigma).build(max_length)
    assert histogram.sequences == sequences
    cdf = lognorm.cdf(np.arange(0.5, max_length + 1.0), s=sigma, scale=median)
    cdf[0], cdf[-1] = 0.0, 1.0
    assert np.all(np.abs(histogram.counts - sequences * np.diff(cdf)) < 1 + 1e-6)


def test_one_plan_under_two_labels_is_rejected(tmp_path):
    text = FIVE_LINES.replace("[none, spfhp, unpad]", "[{name: spfhp, label: a}, {name: spfhp, max_depth: max, label: b}]")
    assert ":4: strategies: each plan may be listed once; repeated: spfhp:max" in error_of(tmp_path, text)


def test_label_none_is_reserved_for_padding(tmp_path):
    message = error_of(tmp_path, FIVE_LINES.replace("[none, spfhp, unpad]", "[{name: spfhp, label: none}, unpad]"))
    assert ":4: strategies: the label 'none' belongs to padding" in message
    relabelled = FIVE_LINES.replace("[none, spfhp, unpad]", "[{name: none, label: padding}, {name: spfhp, label: none}]")
    assert [spec.label for spec in load_scenario(write(tmp_path, relabelled)).strategies] == ["padding", "none"]


def test_clusters_up_to_2_20_devices_are_accepted_and_larger_ones_rejected_before_running(tmp_path):
    accepted = load_scenario(write(tmp_path, FIVE_LINES.replace("devices: [1, 8]", "devices: [1, 1048576]")))
    assert accepted.devices == (1, 1048576)
    message = error_of(tmp_path, FIVE_LINES.replace("devices: [1, 8]", "devices: [1, 1048577]"))
    assert ":5: devices.1: Input should be less than or equal to 1048576" in message


def test_validate_lists_every_error_of_every_document_with_its_line_and_a_suggestion(tmp_path):
    path = tmp_path / "typos.yaml"
    path.write_text("name: one\ndataset: {histogram: squad_1_1_384}\nstratgies: [spfhp]\nstrategies:\n"
                    "  - spfph\n  - {name: lpfhp, max_dept: 3}\ndevices: [1, 0]\n"
                    "---\nname: two\ndataset: {histogram: squad_1_1_384}\nstrategies: [unpda]\nbatchsize: 3\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    expected = [(3, "unknown key 'stratgies'; did you mean 'strategies'?"),
                (5, "strategies.0.name: unknown strategy 'spfph'; did you mean 'spfhp'?"),
                (6, "unknown key 'max_dept'; did you mean 'max_depth'?"),
                (7, "devices.1: "),
                (11, "strategies.0.name: unknown strategy 'unpda'; did you mean 'unpad'?"),
                (12, "unknown key 'batchsize'; did you mean 'batch_size'?")]
    assert len(errors) == len(expected)
    for line, (number, start) in zip(errors, expected):
        assert line.startswith(f"error: {path}:{number}: {start}")
    assert "6 errors" in result.stderr
    # Other commands still say one line: the first error and how many more there are.
    with pytest.raises(InputError, match=r"stratgies.*and 5 more; `simbench validate` lists them all"):
        load_scenarios(path)


def test_a_run_uses_the_profile_its_scenario_validated_and_a_reread_names_file_and_field(tmp_path):
    # The profile changes between validating the scenario and running it: the run keeps what was checked.
    profile = write(tmp_path, "name: mine\nsource: test\nlinear_flops_per_s: 1.0e14\nattention_flops_per_s: 1.0e14\n",
                    "profile.yaml")
    scenario_path = write(tmp_path, FIVE_LINES + "hardware: profile.yaml\n")
    scenario = load_scenario(scenario_path)
    profile.write_text("name: mine\nsource: test\nlinear_flops_per_s: -1\nattention_flops_per_s: 1.0e14\n")
    assert scenario.hardware.load().linear_flops_per_s == 1.0e14
    with pytest.raises(InputError, match=r"profile\.yaml.*`linear_flops_per_s`: Input should be greater than"):
        load_scenario(scenario_path)


def test_one_device_count_needs_no_list(tmp_path):
    scenario = load_scenario(write(tmp_path, FIVE_LINES.replace("devices: [1, 8]", "devices: 8")
                                   if "devices: [1, 8]" in FIVE_LINES else FIVE_LINES + "devices: 8\n"))
    assert scenario.devices == (8,)


def test_a_misspelt_hardware_override_gets_a_did_you_mean(tmp_path):
    path = write(tmp_path, FIVE_LINES + "hardware: {profile: a100, overrides: {kernel_lanch_seconds: 0}}\n")
    with pytest.raises(InputError, match="did you mean 'kernel_launch_seconds'"):
        load_scenario(path)


LONG_ROWS = """\
name: long
dataset:
  histogram: {synthetic: lognormal, sequences: 2000, median_length: 1000, sigma: 1.0}
  max_length: 8192
strategies: [spfhp:3]
"""


@pytest.mark.parametrize("model, refused", [(None, True), ("bert-large", True), ("gpt2", True),
                                            ("{layers: 2, hidden: 64, heads: 2, ffn: 128, max_positions: 8192}",
                                             False),
                                            ("llama-3.1-8b", False), ("mistral-7b", False),
                                            # rotary positions have no table to run past
                                            ("{layers: 2, hidden: 64, heads: 2, ffn: 128, family: decoder, "
                                             "positions: rotary, max_positions: 512}", False)])
def test_a_model_with_fewer_learned_positions_than_max_length_is_refused_at_its_key(tmp_path, model, refused):
    text = LONG_ROWS + (f"model: {model}\n" if model else "")
    if not refused:  # memory aside (a 7-8B model fits no single GPU): positions are this test's question
        roomy = text + "hardware: {profile: a100, overrides: {hbm_capacity_bytes: 1.0e15}}\n"
        assert load_scenario(write(tmp_path, roomy)).dataset.max_length == 8192
        return
    message = error_of(tmp_path, text)
    line = 6 if model else 4  # the model key, or the max length that asks the default model for more
    assert f"scenario.yaml:{line}:" in message and "learned positions, fewer than the 8,192 tokens" in message
    assert ("no `model:` given" in message) is (model is None)


def test_unstated_defaults_are_said_by_validate_and_the_report(tmp_path):
    short = write(tmp_path, LONG_ROWS.replace("8192", "512"))
    said = CliRunner().invoke(app, ["validate", str(short)])
    assert said.exit_code == 0, said.output
    for default in ("model: bert-large (default: no `model:` given)", "hardware: a100 (default: no `hardware:` "
                    "given)", "batch_size: 32 (default: no `batch_size:` given)"):
        assert default in said.output
    stated = write(tmp_path, LONG_ROWS.replace("8192", "512") + "model: bert-base\nhardware: h100-sxm\nbatch_size: 8\n",
                   "stated.yaml")
    assert load_scenario(stated).unstated_defaults() == []
    assert "(default:" not in CliRunner().invoke(app, ["validate", str(stated)]).output
    as_json = CliRunner().invoke(app, ["validate", str(short), "--json"])
    (record,) = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert record["valid"] and record["defaults"] == load_scenario(short).unstated_defaults()
    assert len(record["defaults"]) == 3


def test_validate_json_says_what_validate_says(tmp_path):
    """The JSON line holds the memory check and the footing the words state (it once left both out)."""
    path = write(tmp_path, LONG_ROWS.replace("8192", "512"))
    words = CliRunner().invoke(app, ["validate", str(path)]).output.splitlines()
    (record,) = [json.loads(line) for line in CliRunner().invoke(app, ["validate", str(path), "--json"]).stdout
                 .splitlines()]
    assert record["memory_check"] and record["footing"]
    assert [f"memory: {line}" for line in record["memory_check"]] == [line for line in words
                                                                     if line.startswith("memory: ")]
    assert record["footing"][0] in words and record["footing"][0].startswith("compare_at: ")


def test_validate_json_lists_every_error_as_one_object(tmp_path):
    path = write(tmp_path, LONG_ROWS + "steps: 0\nseed: -1\n")
    result = CliRunner().invoke(app, ["validate", str(path), "--json"])
    (record,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.exit_code == 2 and not record["valid"] and len(record["errors"]) == 2


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda path: path.name)
def test_a_sweep_a_bundled_scenario_points_to_exists_or_runs_as_written(path, tmp_path):
    # A comment's sweep is a bundled one by name, or an axis written out that sweeps the scenario as it is.
    from simbench.sweep import bundled_sweeps, load_sweep

    comments = " ".join(line for line in path.read_text().splitlines() if line.lstrip().startswith("#"))
    if "sweep" not in comments:
        return
    axes = re.findall(r"sweep `([\w.]+): (\[[^\]]*\])`", comments)
    named = [name for name in re.findall(r"sweep ([\w-]+)", comments) if name in bundled_sweeps()]
    assert axes or named, f"{path.name} mentions a sweep that is neither bundled nor written out"
    for key, values in axes:
        base = yaml.safe_load(path.read_text())
        sweep = tmp_path / "sweep.yaml"
        sweep.write_text(yaml.safe_dump({"name": "pointed", "base": {k: v for k, v in base.items() if k != "name"},
                                         "axes": {key: yaml.safe_load(values)}}))
        assert len(load_sweep(sweep).cells) == len(yaml.safe_load(values))


def test_a_resolved_scenario_reads_back_an_override_json_has_no_word_for(tmp_path):
    """resolved.yaml once wrote the documented `.inf` (no bandwidth limit) as null, which no run could read back."""
    from simbench.scenario import Scenario, load_scenario

    value = float("inf")
    scenario = Scenario(name="s", dataset={"histogram": "squad_1_1_384"}, strategies=["unpad"], devices=[1], steps=2,
                        hardware={"profile": "h200", "overrides": {"allreduce_bytes_per_s": value}})
    path = tmp_path / "resolved.yaml"
    path.write_text(scenario.to_yaml())
    assert load_scenario(path).hardware.overrides == {"allreduce_bytes_per_s": value}
    assert load_scenario(path).to_yaml() == scenario.to_yaml()
