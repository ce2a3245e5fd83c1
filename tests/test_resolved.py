"""One resolved Run behind every entry point: plans parsed once, the scenario's cost model and hardware
overrides honoured by `simulate` as by `run`."""

import re

import numpy as np
import pytest

import simbench
import simbench.sim.plans as plans_module
from simbench.api import load_scenario
from simbench.errors import InputError
from simbench.experiment import run_experiment
from simbench.resolved import Run, resolve

SCENARIO = """
name: counted
dataset: {histogram: squad_1_1_384}
strategies: [sort, unpad, "spfhp:3", {name: packed-varlen, packer: lpfhp}]
devices: [1, 4]
steps: 4
compare_at: as-configured  # simulate's options size every strategy alike: compared as configured
outputs: {lp_bounds: false}
"""


def test_plans_are_parsed_once_per_run(tmp_path, monkeypatch):
    calls = []
    parse = plans_module.plan_from_fields
    monkeypatch.setattr(plans_module, "plan_from_fields", lambda fields: calls.append(fields) or parse(fields))
    import simbench.scenario.specs as specs_module
    monkeypatch.setattr(specs_module, "plan_from_fields", plans_module.plan_from_fields)
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    assert len(calls) == 5  # each strategy and the baseline once, when the scenario is read
    run_experiment(scenario, assumptions=False)
    assert len(calls) == 5  # and never again


def test_the_dataset_is_loaded_once(tmp_path, monkeypatch):
    import simbench.scenario.specs as specs_module

    histogram_file = tmp_path / "h.csv"
    histogram_file.write_text("length,count\n10,5\n20,3\n")
    loads = []
    load = specs_module.load_histogram
    monkeypatch.setattr(specs_module, "load_histogram", lambda *a, **k: loads.append(a) or load(*a, **k))
    path = tmp_path / "s.yaml"
    path.write_text(f"name: x\ndataset: {{histogram: {histogram_file}}}\nstrategies: [sort]\ndevices: [1]\nsteps: 2\n"
                    "outputs: {lp_bounds: false}\n")
    run_experiment(load_scenario(path), assumptions=False)
    assert len(loads) == 1


def test_simulate_honours_hardware_overrides():
    base = simbench.simulate("squad_1_1_384", ["unpad"], [1], steps=10)
    ideal = simbench.simulate("squad_1_1_384", ["unpad"], [1], steps=10,
                              hardware_overrides={"unpadded_flops_fraction": 1.0, "unpadded_noise_cv": 0.0})
    speedup = lambda result: float(result.summary.query("strategy == 'unpad'").speedup.iloc[0])  # noqa: E731
    # The a100 preset's un-padded kernels run at 0.860 of the padded rate, with step noise: ideal ones gain ~10 %
    assert speedup(ideal) > 1.05 * speedup(base)


def test_simulate_honours_the_cost_model():
    from simbench.costmodels.linear import LinearCostModel

    result = simbench.simulate("squad_1_1_384", ["spfhp:3"], [1], steps=5, cost_model="linear")
    linear = Run.from_options("squad_1_1_384", ["spfhp:3"], [1], steps=5, cost_model="linear")
    assert isinstance(linear.cost_model, LinearCostModel)
    np.testing.assert_allclose(result.summary.step_seconds_mean, linear.simulate().summary.step_seconds_mean)


def test_cli_simulate_and_scenario_price_alike(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + "hardware: {profile: a100, overrides: {unpadded_flops_fraction: 1.0}}\n")
    from_scenario = resolve(load_scenario(path)).simulate().summary
    from_options = Run.from_options("squad_1_1_384", ["sort", "unpad", "spfhp:3", "packed-varlen:lpfhp"], [1, 4],
                                    overrides={"unpadded_flops_fraction": 1.0}, steps=4).simulate().summary
    np.testing.assert_allclose(from_scenario.speedup, from_options.speedup)


def test_a_bad_override_is_refused_by_name():
    with pytest.raises(InputError, match="unpadded_flops_fraction"):
        Run.from_options("squad_1_1_384", ["sort"], [1], overrides={"unpadded_flops_fraction": -1})


def test_a_profile_file_is_read_once_by_a_whole_run_and_its_report(tmp_path, monkeypatch):
    """Validation reads the scenario's profile; the run, its memory checks and every section of the report
    that states the profile's values use that one."""
    from typer.testing import CliRunner

    import simbench.costmodels.hardware as hardware_module
    from simbench.cli import app
    from simbench.costmodels.hardware import HARDWARE_PRESETS, profile_to_yaml
    from simbench.workers import PROCESSES_VARIABLE

    profile = tmp_path / "profile.yaml"
    profile.write_text(profile_to_yaml(HARDWARE_PRESETS["a100"]))
    reads = []
    read = hardware_module._read_profile_file
    monkeypatch.setattr(hardware_module, "_read_profile_file", lambda path: reads.append(path) or read(path))
    monkeypatch.setenv(PROCESSES_VARIABLE, "0")
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + f"hardware: {{profile: {profile}, overrides: {{kernel_launch_seconds: 0.0}}}}\n")
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "report"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert reads == [profile]
    assert "kernel_launch_seconds = 0.0" in (tmp_path / "report" / "summary.md").read_text()


@pytest.mark.parametrize("command", ["run", "validate"])
def test_a_scenario_is_checked_once_and_its_run_builds_on_the_check(tmp_path, monkeypatch, command):
    """Validating is resolving: `run` and `validate` check each scenario once (every document before any runs),
    and the run takes the plans and memory check that checking resolved instead of resolving them again."""
    from typer.testing import CliRunner

    import simbench.checked as checked_module
    import simbench.resolved as resolved_module
    from simbench.cli import app
    from simbench.workers import PROCESSES_VARIABLE

    checks, fits = [], []
    check, fit = checked_module.check_scenario, checked_module.fit_memory
    counting = lambda scenario, histogram=None: checks.append(scenario.name) or check(scenario, histogram)  # noqa: E731
    monkeypatch.setattr(checked_module, "check_scenario", counting)
    monkeypatch.setattr(resolved_module, "check_scenario", counting)
    monkeypatch.setattr(checked_module, "fit_memory", lambda *a, **k: fits.append(a[3]) or fit(*a, **k))
    monkeypatch.setenv(PROCESSES_VARIABLE, "0")
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("name: counted", "name: one") + "hardware: h100-sxm\n---\n"
                    + SCENARIO.replace("name: counted", "name: two") + "hardware: h100-sxm\n")
    arguments = [command, str(path)] + (["-o", str(tmp_path / "reports"), "--quiet"] if command == "run" else [])
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert checks == ["one", "two"]
    # The memory check at the scenario's own sizes once (by the check), and once at the sizes the run compares.
    assert len(fits) == 4


def test_every_document_is_checked_before_any_runs(tmp_path):
    from typer.testing import CliRunner

    from simbench.cli import app

    path = tmp_path / "s.yaml"
    refused = SCENARIO.replace("name: counted", "name: two").replace("squad_1_1_384", "{synthetic: lognormal, "
                               "sequences: 100, median_length: 900, sigma: 0.5}, max_length: 1024") + "model: bert-large\n"
    path.write_text(SCENARIO.replace("name: counted", "name: one") + "---\n" + refused)
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "reports"), "--quiet"])
    assert isinstance(result.exception, InputError)  # the command line's entry point prints it as one line
    assert re.search(r"s\.yaml:\d+: model: .*positions", str(result.exception))
    assert not (tmp_path / "reports").exists()  # not the first scenario's report either


def test_a_scenario_built_in_code_is_checked_by_its_run():
    """The checks are the run's: a scenario that never saw a file is refused by `Run.from_scenario`, at its key."""
    from simbench.scenario import Scenario

    scenario = Scenario.model_validate({"name": "code", "model": "bert-large", "strategies": ["spfhp:3"],
                                        "dataset": {"histogram": {"synthetic": "lognormal", "sequences": 100,
                                                                  "median_length": 900, "sigma": 0.5},
                                                    "max_length": 1024}})
    with pytest.raises(InputError, match=r"^model: .*positions"):
        Run.from_scenario(scenario)


@pytest.fixture
def cost_model_builds(monkeypatch):
    """Counts `resolved._cost_model` calls, and records every TransformerCostModel built anywhere else."""
    import traceback

    import simbench.resolved as resolved_module
    from simbench.costmodels.transformer import TransformerCostModel

    builds, elsewhere = [], []
    build, init = resolved_module._cost_model, TransformerCostModel.__init__

    def counted(*args, **kwargs):
        builds.append(args[0])
        return build(*args, **kwargs)

    def recorded(self, *args, **kwargs):
        if not any(frame.name == "counted" for frame in traceback.extract_stack()):
            elsewhere.append("".join(traceback.format_stack(limit=6)))
        init(self, *args, **kwargs)

    monkeypatch.setattr(resolved_module, "_cost_model", counted)
    monkeypatch.setattr(TransformerCostModel, "__init__", recorded)
    return builds, elsewhere


SWEEP = """name: counted-sweep
base:
  dataset: {histogram: squad_1_1_384}
  strategies: [spfhp:3, unpad, {name: wlb, packer: wlb}]
  steps: 3
  outputs: {lp_bounds: false}
axes:
  model: [bert-base, bert-large]
  devices: [1, 8]
report: {x: devices, y: model}
"""


@pytest.mark.parametrize("entry", ["run", "validate", "cli-simulate", "api-simulate", "sweep", "measure"])
def test_one_place_builds_the_cost_model_of_every_entry_point(tmp_path, monkeypatch, cost_model_builds, entry):
    """`resolved._cost_model` builds each entry point's cost model, once a run (a sweep: once a cell, and a
    balancing packer's shared packing asks the cell's own); nothing builds one beside it."""
    from typer.testing import CliRunner

    from simbench.cli import app

    builds, elsewhere = cost_model_builds
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    if entry == "run":
        run_experiment(load_scenario(path), assumptions=False)
        expected = 1
    elif entry == "validate":
        assert CliRunner().invoke(app, ["validate", str(path)]).exit_code == 0
        expected = 1
    elif entry == "cli-simulate":
        result = CliRunner().invoke(app, ["simulate", "squad_1_1_384", "--strategy", "unpad,spfhp:3",
                                          "--devices", "1,4", "--steps", "3"])
        assert result.exit_code == 0, result.output
        expected = 1
    elif entry == "api-simulate":
        simbench.simulate("squad_1_1_384", ["unpad", "spfhp:3"], [1, 4], steps=3)
        expected = 1
    elif entry == "sweep":
        from simbench import sweep as sweeps
        from simbench.sweep import tasks

        monkeypatch.setattr(tasks, "_ATTENTION_PARITY", {})  # a process's memo: this sweep's own builds counted
        (tmp_path / "sweep.yaml").write_text(SWEEP)
        sweeps.run_sweep(sweeps.load_sweep(tmp_path / "sweep.yaml"), tmp_path / "out", workers=0)
        expected = 4 + 2  # each cell's run; each model's wlb packing reads its cost model's attention parity
    else:
        from simbench.calibrate.measure_run import scenario_run

        scenario_run(path)
        expected = 1
    assert elsewhere == []
    assert len(builds) == expected
