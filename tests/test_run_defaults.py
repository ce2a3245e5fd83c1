"""A run's defaults are one set: a scenario that leaves a key out, `Run.from_options`, `simbench.simulate` and
`simbench simulate` run the same model, hardware, cost model, batch size, steps, seed and shapes."""

import inspect

import simbench.api
from simbench.commands.simulate import simulate as simulate_command
from simbench.resolved import Run
from simbench.scenario.schema import Scenario
from simbench.scenario.specs import HardwareSpec

# The scenario key, and the name each entry point gives it where the name differs.
KEYS = ["model", "hardware", "cost_model", "gpus_per_replica", "batch_size", "steps", "seed", "shapes",
        "training_steps"]
COMMAND_NAMES = {"cost_model": "cost_model_name"}


def _schema_default(key: str):
    if key == "hardware":
        return HardwareSpec.model_fields["profile"].default
    return Scenario.model_fields[key].default


def test_every_entry_point_defaults_as_a_scenario_does():
    run = inspect.signature(Run.from_options).parameters
    api = inspect.signature(simbench.api.simulate).parameters
    command = inspect.signature(simulate_command).parameters
    for key in KEYS:
        expected = _schema_default(key)
        assert run[key].default == expected, key
        assert api[key].default == expected, key
        assert command[COMMAND_NAMES.get(key, key)].default.default == expected, key


def test_a_scenario_without_the_keys_runs_as_the_options_default():
    scenario = Scenario.model_validate({"name": "bare", "dataset": {"histogram": "wikipedia_512"},
                                        "strategies": ["spfhp:3"]})
    assert scenario.hardware.profile == inspect.signature(Run.from_options).parameters["hardware"].default
    assert scenario.batch_size == inspect.signature(simbench.api.simulate).parameters["batch_size"].default
