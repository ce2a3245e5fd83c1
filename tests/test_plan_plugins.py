"""Third-party simulator plans and cost models plug in through the `simbench.plans` and
`simbench.costmodels` entry-point groups, and run through `simulate` and scenarios like built-ins."""

from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import Annotated, Any

import numpy as np
import pytest
from pydantic import Field

import simbench.registry
from simbench.costmodels import COST_MODELS, CostModelType, ExecutionMode, StepCosts
from simbench.costmodels.linear import LinearCostModel
from simbench.errors import InputError, InputErrors
from simbench.experiment import run_experiment
from simbench.histogram import load_histogram
from simbench.scenario import Scenario, StrategySpec
from simbench.checked import load_checked_scenario as load_scenario
from simbench.sim.batching import unpadded_batches
from simbench.sim.plans import BATCH_SOURCES, PLANS, BatchSource, ExecutionPlan, PlanType, all_plan_names, parse_plan
from simbench.sim.pricing import price_batches
from simbench.sim.simulate import simulate

SQUAD = load_histogram("squad_1_1_384")


@dataclass(frozen=True)
class FixedLengthPlan(ExecutionPlan):
    """A plug-in's plan carries its own parameters by extending ExecutionPlan."""

    length: int = 64


class FixedLengthSource(BatchSource):
    """Every device's batch holds `batch_size` sequences of one length, un-padded."""

    kind = "fixed-length"

    def chunk(self, steps, devices):
        lengths = np.full((steps, devices[-1], self.settings.batch_size), self.plan.length)
        return {devices[-1]: price_batches(self.settings.cost_model, unpadded_batches(lengths), self.plan.mode,
                                           steps, devices[-1])}

    @staticmethod
    def device_batches(plan, histogram, packing, rng, steps, batch_size):  # what `simbench measure` times
        return unpadded_batches(np.full((steps, batch_size), plan.length))


@dataclass(frozen=True)
class FixedLengthPlanType(PlanType):
    parameters = {"length": Annotated[int, Field(ge=1, le=384, description="the one sequence length")]}

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        self.reject_unknown(parameters, tuple(self.parameters))
        length = parameters.get("length", 64)
        name = self.name if "length" not in parameters else f"{self.name}:length={length}"
        return FixedLengthPlan(name, FixedLengthSource.kind, ExecutionMode.UNPADDED, length=length)


@dataclass(frozen=True)
class FlatCostModel:
    """Every batch costs the same, whatever it holds."""

    seconds: float = 0.25

    def step_costs(self, batches, mode) -> StepCosts:
        zeros = np.zeros(batches.batches)
        return StepCosts(np.full(batches.batches, self.seconds), zeros, zeros)

    def allreduce_seconds(self, devices: int) -> float:
        return 0.0


FIXED = FixedLengthPlanType("fixed-length", "every sequence of one length, un-padded (a plug-in)", FixedLengthSource)
FLAT = CostModelType("flat", "every batch costs a quarter second (a plug-in)",
                     lambda model, hardware, gpus_per_replica: FlatCostModel())


def use_plugins(monkeypatch, *plugins: EntryPoint) -> None:
    """Serve these entry points, on copies of the registries with every built-in already in them."""
    for registry in (PLANS, BATCH_SOURCES, COST_MODELS):
        registry.available()
        monkeypatch.setattr(registry, "entries", dict(registry.entries))
    monkeypatch.setattr(simbench.registry, "entry_points", lambda group: [p for p in plugins if p.group == group])


PLAN_PLUGIN = EntryPoint("fixed-length", f"{__name__}:FIXED", "simbench.plans")
COST_MODEL_PLUGIN = EntryPoint("flat", f"{__name__}:FLAT", "simbench.costmodels")


def test_a_plan_plugin_is_listed_parsed_and_simulated(monkeypatch):
    use_plugins(monkeypatch, PLAN_PLUGIN)
    assert "fixed-length" in all_plan_names() and PLANS["fixed-length"].description.endswith("(a plug-in)")
    plan = parse_plan("fixed-length:length=100")
    assert (plan.name, plan.length) == ("fixed-length:length=100", 100)

    seconds_per_token, batch_size = 1e-6, 8
    result = simulate(SQUAD, ["fixed-length:length=100", "unpad"], [1, 4], LinearCostModel(seconds_per_token),
                      batch_size=batch_size, steps=6, seed=0)
    rows = result.summary.set_index(["strategy", "devices"])
    for devices in (1, 4):
        # Linear cost, no overheads: every step is batch_size x 100 tokens, on every device alike.
        assert rows.loc[("fixed-length:length=100", devices), "step_seconds_mean"] == pytest.approx(
            seconds_per_token * batch_size * 100, rel=1e-12)
        assert rows.loc[("fixed-length:length=100", devices), "tokens_per_s"] == pytest.approx(
            devices / seconds_per_token, rel=1e-12)
    with pytest.raises(InputError, match=r"strategy 'fixed-length': unknown parameter 'depth=3' \(allowed: length\)"):
        parse_plan("fixed-length:depth=3")


def test_a_plan_plugin_says_what_one_devices_batches_hold_and_measure_times_them(monkeypatch):
    """`simbench measure` builds its batches from the plan's own source (`BatchSource.device_batches`); a source
    that does not say is listed as not measured, with the reason."""
    from simbench.calibrate.strategy_batches import strategy_batches
    from simbench.sim.plans import BatchSource

    use_plugins(monkeypatch, PLAN_PLUGIN)
    plan = parse_plan("fixed-length:length=100")
    built = strategy_batches([(plan.name, plan)], SQUAD, 384, steps=3, batch_size=4, seed=0)
    assert not built.refused and len(built.layouts[plan.name]) == 3
    for layout in built.layouts[plan.name]:
        assert layout.mode is ExecutionMode.UNPADDED and layout.rows == ((100,),) * 4
    with pytest.raises(InputError, match="plan kind 'fixed-length' does not say what one device's batches hold"):
        BatchSource.device_batches(plan, SQUAD, lambda: None, np.random.default_rng(0), 3, 4)


def test_a_plan_plugin_that_simulates_every_device_is_refused_up_front_on_a_million_devices(monkeypatch):
    """Its source neither draws devices independently nor lists distinct batches: every device is drawn, so
    2^20 devices x 2 rows x 1,000 steps count in full (padding, the reference, takes the shortcut: 64 devices)."""
    use_plugins(monkeypatch, PLAN_PLUGIN)
    with pytest.raises(InputError, match=r"about 2.1e\+09 sequences or packs, more than the 5e\+08 allowed"):
        simulate(SQUAD, ["fixed-length"], [2**20], LinearCostModel(1e-6), batch_size=2, steps=1000, seed=0)


def test_a_cost_model_plugin_prices_a_scenario_with_a_plugin_plan(monkeypatch):
    use_plugins(monkeypatch, PLAN_PLUGIN, COST_MODEL_PLUGIN)
    scenario = Scenario(name="plugins", dataset={"histogram": "squad_1_1_384"}, cost_model="flat",
                        strategies=["fixed-length", "unpad"], devices=[1, 2], steps=4, batch_size=4,
                        outputs={"lp_bounds": False})
    scaling = run_experiment(scenario).scaling.set_index(["strategy", "devices"])
    assert set(scaling.index.get_level_values("strategy")) == {"none", "pad-to-longest", "fixed-length", "unpad"}
    assert np.allclose(scaling["step_seconds_mean"], FlatCostModel.seconds)  # whatever the batch holds
    # Equal step times: the speed-up is the ratio of real tokens, 64 per sequence against SQuAD's mean.
    assert scaling.loc[("fixed-length", 1), "tokens_per_s"] == pytest.approx(4 * 64 / FlatCostModel.seconds)


@pytest.mark.parametrize("plugin, message", [
    (EntryPoint("bad-plan", f"{__name__}:FixedLengthSource", "simbench.plans"),
     r"the strategy plug-in 'bad-plan' .* is a type, not a simbench.sim.plans.PlanType"),
    (EntryPoint("bad-cost", "no_such_module_here:FLAT", "simbench.costmodels"),
     r"cannot load the cost model plug-in 'bad-cost' \(no_such_module_here:FLAT\)"),
])
def test_a_broken_plugin_is_named_when_asked_for_and_breaks_nothing_else(monkeypatch, plugin, message):
    use_plugins(monkeypatch, plugin)
    assert parse_plan("unpad").name == "unpad" and COST_MODELS.get("transformer").name == "transformer"
    with pytest.raises(InputError, match=message):
        (PLANS if plugin.group == "simbench.plans" else COST_MODELS).get(plugin.name)



def scenario_file(tmp_path, strategies: str, name: str = "scenario.yaml"):
    """A scenario whose strategies start on line 9."""
    path = tmp_path / name
    path.write_text("name: plugins\ndataset: {histogram: squad_1_1_384}\ncost_model: flat\ndevices: [1, 2]\n"
                    "steps: 4\nbatch_size: 4\noutputs: {lp_bounds: false}\nstrategies:\n" + strategies)
    return path


def test_a_plugin_plans_own_parameter_is_a_scenario_key(monkeypatch, tmp_path):
    use_plugins(monkeypatch, PLAN_PLUGIN, COST_MODEL_PLUGIN)
    scenario = load_scenario(scenario_file(tmp_path, "  - unpad\n  - name: fixed-length\n    length: 100\n"))
    spec = scenario.strategies[1]
    assert spec.label == "fixed-length:length=100" and spec.plan() == parse_plan("fixed-length:length=100")
    # The resolved scenario keeps the key, so a report's resolved.yaml reruns the same plan.
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(scenario.to_yaml())
    assert load_scenario(resolved) == scenario
    scaling = run_experiment(scenario).scaling.set_index(["strategy", "devices"])
    # The flat cost model prices every step alike: tokens per second count the plan's 100-token sequences.
    assert scaling.loc[("fixed-length:length=100", 1), "tokens_per_s"] == pytest.approx(4 * 100 / FlatCostModel.seconds)


# The keys every strategy entry takes, in the order the message lists them: StrategySpec's fields.
BUILTIN_KEYS = ", ".join(StrategySpec.model_fields)
# The same mistake made with a built-in plan's key (vts: stages) and with the plug-in's own (length).
SAME_MISTAKES = [
    ("stagse: 4", f"unknown key 'stagse'; did you mean 'stages'? allowed keys here: {BUILTIN_KEYS}",
     "lenght: 100", f"unknown key 'lenght'; did you mean 'length'? allowed keys here: {BUILTIN_KEYS}, length"),
    ("stages: 0", "strategies.0.stages: Input should be greater than or equal to 1",
     "length: 0", "strategies.0.length: Input should be greater than or equal to 1"),
    ("stages: four", "strategies.0.stages: Input should be a valid integer",
     "length: four", "strategies.0.length: Input should be a valid integer"),
]


@pytest.mark.parametrize("builtin_key, builtin_message, plugin_key, plugin_message", SAME_MISTAKES)
def test_a_plugin_parameter_is_checked_like_a_builtin_one(monkeypatch, tmp_path, builtin_key, builtin_message,
                                                          plugin_key, plugin_message):
    use_plugins(monkeypatch, PLAN_PLUGIN, COST_MODEL_PLUGIN)
    for name, key, message in (("vts", builtin_key, builtin_message), ("fixed-length", plugin_key, plugin_message)):
        path = scenario_file(tmp_path, f"  - name: {name}\n    {key}\n")
        with pytest.raises(InputError) as caught:
            load_scenario(path)
        assert str(caught.value).startswith(f"{path}:10: {message}")  # the file, the key's line, the key


def test_every_error_of_a_plugin_strategy_is_listed_at_once(monkeypatch, tmp_path):
    use_plugins(monkeypatch, PLAN_PLUGIN, COST_MODEL_PLUGIN)
    path = scenario_file(tmp_path, "  - name: fixed-length\n    length: 0\n    stages: 0\n"
                                   "  - {name: unpad, length: 100}\n  - fixed-length:length=999\n")
    with pytest.raises(InputErrors) as caught:
        load_scenario(path)
    assert [(error.line, error.message) for error in caught.value.errors] == [
        (10, "strategies.0.length: Input should be greater than or equal to 1"),
        (11, "strategies.0.stages: Input should be greater than or equal to 1"),
        # A plug-in's key belongs to its plan alone.
        (12, f"unknown key 'length'; allowed keys here: {BUILTIN_KEYS}"),
        (13, "strategies.2.length: Input should be less than or equal to 384"),
    ]
    with pytest.raises(InputError, match=r"^strategy 'fixed-length': length: Input should be greater than or equal to 1, "
                                         r"found 0$"):
        parse_plan("fixed-length:length=0")
