"""A scenario checked as its run resolves it: every check of one key against another (learned positions, packers'
limits, the 4D layout, token budgets, memory, the simulation's work), made once, on what the run then builds on.

The scenario is a schema (`simbench.scenario`): each key valid alone. `check_scenario` resolves its plans and its
memory check at its own sizes, refusing whatever cannot run, each refusal at the key that set it (on its YAML line
where the scenario was read from a file); `Run.from_scenario` takes the `CheckedScenario` and sizes the run on it,
so that `validate`, `run`, a sweep's cells and the API refuse the same scenarios with the same words.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from simbench.costmodels import get_model
from simbench.costmodels.hardware import HardwareProfile
from simbench.costmodels.model import ModelSpec
from simbench.errors import InputError, InputErrors, each_checked
from simbench.histogram import LengthHistogram
from simbench.scenario import Scenario, key_error, load_scenario, load_scenarios, parse_scenarios, written
from simbench.sim.memory_budget import layout_terms, layout_token_budget, memory_budget_tokens, resolved_plans
from simbench.sim.memory_fit import MemoryFit, fit_memory
from simbench.sim.plans import ExecutionPlan, packing_refusals, with_reference
from simbench.validation import DEVICES_MAX, check_device_counts, check_simulation_work


@dataclass(frozen=True, eq=False)
class CheckedScenario:
    """What checking a scenario resolved, for its run to build on."""

    histogram: LengthHistogram
    model: ModelSpec
    hardware: HardwareProfile
    # The strategies' plans with their `memory` budgets resolved at the fewest replicas simulated.
    plans: tuple[ExecutionPlan, ...]
    # The memory check of every plan at the scenario's own sizes (None: the profile states no HBM capacity).
    memory: MemoryFit | None


def check_scenario(scenario: Scenario, histogram: LengthHistogram | None = None) -> CheckedScenario:
    """The scenario checked on `histogram` (a sweep's shared one), else its dataset's: InputErrors listing every
    refusal, each at its key; the checks that need a sound layout or resolved budgets run only once those are."""
    histogram = histogram if histogram is not None else scenario.dataset.load()
    model, hardware = get_model(scenario.model), scenario.hardware.load()
    refused = (_positions_refused(scenario, histogram, model) + _packings_refused(scenario, histogram)
               + _layout_refused(scenario, histogram, model))
    if refused:
        raise InputErrors(refused)
    plans, refused = _budgets_resolved(scenario, histogram, model, hardware)
    if refused:
        raise InputErrors(refused)
    memory = check_scenario_memory(scenario, plans, histogram)
    check_scenario_work(scenario, histogram)
    return CheckedScenario(histogram, model, hardware, plans, memory)


def load_checked_scenarios(path: Path | str, *, seed: int | None = None, seeds: int | None = None) -> list[Scenario]:
    """A scenario file's scenarios (`simbench.scenario.load_scenarios`), each checked: InputErrors listing every
    refusal of every one."""
    scenarios = load_scenarios(path, seed=seed, seeds=seeds)
    check_scenarios(scenarios)
    return scenarios


def load_checked_scenario(path: Path | str, *, seed: int | None = None) -> Scenario:
    """A file's one scenario (`simbench.scenario.load_scenario`), checked."""
    scenario = load_scenario(path, seed=seed)
    check_scenario(scenario)
    return scenario


def parse_checked_scenarios(text: str, *, source: str, base_dir: Path, seed: int | None = None,
                            seeds: int | None = None) -> list[Scenario]:
    """Every scenario of a file's text (`simbench.scenario.parse_scenarios`), each checked."""
    scenarios = parse_scenarios(text, source=source, base_dir=base_dir, seed=seed, seeds=seeds)
    check_scenarios(scenarios)
    return scenarios


def check_scenarios(scenarios: Sequence[Scenario]) -> list[CheckedScenario]:
    """Each scenario checked (the documents of one file, before any runs): InputErrors listing every refusal of
    every one of them."""
    return each_checked(scenarios, check_scenario)


def check_scenario_work(scenario: Scenario, histogram: LengthHistogram | None = None, rows: int | None = None) -> None:
    """The simulation's work estimated from the scenario alone, so that `validate` refuses what `run` would only
    refuse after reading it (and names the scenario's keys, not simulate's options); `rows`, when the caller knows
    them already (a sweep's cells, from a figure per step)."""
    from simbench.sim.simulate import simulation_rows

    if rows is None:
        rows = simulation_rows([spec.plan() for spec in scenario.strategies],
                               histogram if histogram is not None else scenario.dataset.load(),
                               list(scenario.replica_devices), scenario.device_batch_size, scenario.steps,
                               baseline=scenario.baseline.plan())
    try:
        check_simulation_work(rows, raising="simulate the largest sizes alone with `simbench simulate --max-rows`")
    except InputError as error:
        raise key_error(scenario, ("steps",), error.message) from None


def check_scenario_memory(scenario: Scenario, plans: Sequence[ExecutionPlan] | None = None,
                          histogram: LengthHistogram | None = None) -> MemoryFit | None:
    """The memory check of the scenario's resolved `plans` (its own, resolved, if None) at its own sizes; InputError
    where no strategy fits under any setting its `memory` policy may choose, at the key the first way out changes.
    A sweep's cells that differ from a checked one only in batch_size or devices are checked again by this alone."""
    histogram = histogram if histogram is not None else scenario.dataset.load()
    if plans is None:
        plans = resolved_plans([spec.plan() for spec in scenario.strategies], histogram, get_model(scenario.model),
                               scenario.hardware.load(), scenario.memory_layout, min(scenario.replica_devices))
    try:
        return scenario_memory(scenario, configured_plans(scenario, plans), histogram)
    except InputError as error:
        key = (error.parameter,) if error.parameter in type(scenario).model_fields else ("memory",)
        key = key if written(scenario, key) or not written(scenario, ("memory",)) else ("memory",)
        raise InputErrors([key_error(scenario, key, f"{key[0]}: {error.message}", error.parameter)]) from None


def scenario_memory(scenario: Scenario, plans: Mapping[str, ExecutionPlan],
                    histogram: LengthHistogram | None = None) -> MemoryFit | None:
    """The memory check (`sim.memory_fit.fit_memory`) of the scenario's resolved `plans` by label (padding's
    and the baseline's included: `configured_plans`, or the run's as sized) at the fewest replicas simulated: what
    `validate` refuses and `run` prices by; None where the profile states no HBM."""
    hardware = scenario.hardware.load()
    if hardware.hbm_capacity_bytes is None:
        return None
    # A replica of several GPUs without `parallel` is priced by the plain cost model, which prices no recompute.
    can_raise = scenario.layout is not None or scenario.gpus_per_replica == 1
    return fit_memory(get_model(scenario.model), hardware, plans,
                      histogram if histogram is not None else scenario.dataset.load(), batch_size=scenario.batch_size,
                      layout=scenario.memory_layout,
                      replicas=min(scenario.replica_devices), policy=scenario.memory, can_raise=can_raise)


def plan_labels(scenario: Scenario, plans: Sequence[ExecutionPlan]) -> dict[str, str]:
    """Plan name -> label; a label left to its default names the plan as it runs (a `memory` budget as its number)."""
    return {plan.name: spec.label if spec.label != spec.plan().name else plan.name
            for plan, spec in zip(plans, scenario.strategies)}


def configured_plans(scenario: Scenario, plans: Sequence[ExecutionPlan]) -> dict[str, ExecutionPlan]:
    """The scenario's resolved `plans`, padding and the baseline by label, at the scenario's own sizes."""
    labels = plan_labels(scenario, plans)
    return {labels.get(plan.name, plan.name): plan
            for plan in with_reference(list(plans), scenario.baseline.plan())}


def _positions_refused(scenario: Scenario, histogram: LengthHistogram, model: ModelSpec) -> list[InputError]:
    """A model whose learned positions end before the dataset's max length, at the `model` key (where the
    default model was taken, at the max length that asks for more)."""
    problem = model.positions_problem(histogram.max_length)
    if problem is None:
        return []
    stated = written(scenario, ("model",))
    key = ("model",) if stated or not written(scenario, ("dataset", "max_length")) else ("dataset", "max_length")
    default = "" if stated else " (the default: no `model:` given)"
    return [key_error(scenario, key, f"model{default}: {problem}")]


def _packings_refused(scenario: Scenario, histogram: LengthHistogram) -> list[InputError]:
    """Each strategy whose packer refuses the scenario's max length and depth, at its line and key, so
    that `validate` reports it and `run` stops before any work."""
    plans = [spec.plan() for spec in scenario.strategies]
    baseline = scenario.baseline.plan()
    if not any(plan.source.packing_request(plan) for plan in [*plans, baseline]):
        return []
    refused = []
    for index, error in packing_refusals(plans, histogram.max_length):
        # At the strategy's `max_depth` where it is written, else at the strategy (`nnlshp`, `nnlshp:3`).
        key = ("strategies", index, "max_depth")
        key = key if written(scenario, key) else key[:-1]
        refused.append(key_error(scenario, key, f"{'.'.join(map(str, key))} ({plans[index].name}): {error.message}"))
    for _, error in packing_refusals([baseline], histogram.max_length):
        refused.append(key_error(scenario, ("baseline",), f"baseline ({baseline.name}): {error.message}"))
    return refused


def _layout_refused(scenario: Scenario, histogram: LengthHistogram, model: ModelSpec) -> list[InputError]:
    """Each way the scenario's 4D layout cannot hold its model, rows, cluster or strategies, at the key that
    set it, so that `validate` reports them all and `run` starts no work."""
    layout = scenario.layout
    if layout is None:
        return []
    refused = []

    def refuse(key: tuple, message: str) -> None:
        refused.append(key_error(scenario, key, f"{'.'.join(map(str, key))}: {message}"))

    if scenario.gpus_per_replica != 1:
        refuse(("gpus_per_replica",), f"{scenario.gpus_per_replica} contradicts `parallel`, whose tp x pp x cp = "
                                      f"{layout.gpus_per_replica:,} GPUs make a replica; leave gpus_per_replica out")
    try:
        layout.replicas_of(scenario.devices)
    except InputError as error:
        refuse(("devices",), error.message.removeprefix("devices "))
    if "devices" not in scenario.model_fields_set:
        # dp x tp x pp x cp made the devices: held to the bound `devices` has, which `run` checks again.
        try:
            check_device_counts(scenario.devices)
        except InputError:
            key = ("parallel", "dp") if written(scenario, ("parallel", "dp")) else ("parallel",)
            refuse(key, f"dp x tp x pp x cp = {scenario.devices[0]:,} GPUs, more than the {DEVICES_MAX:,} devices a "
                        "simulation may have")
    problems = layout.problems(layers=model.layers, heads=model.heads, kv_heads=model.kv_heads or model.heads,
                               ffn=model.ffn, max_length=histogram.max_length)
    for key, message in problems:
        refuse(("parallel", key) if written(scenario, ("parallel", key)) else ("parallel",), message)
    for key, spec in [*((("strategies", index), spec) for index, spec in enumerate(scenario.strategies)),
                      (("baseline",), scenario.baseline)]:
        if not spec.plan().source.layout_aware:
            refuse(key, f"{spec.plan().name} runs its own pipeline and cannot run inside a 4D "
                        f"layout; leave `parallel` out to simulate it")
    return refused


def _budgets_resolved(scenario: Scenario, histogram: LengthHistogram, model: ModelSpec, hardware: HardwareProfile
                      ) -> tuple[tuple[ExecutionPlan, ...], list[InputError]]:
    """The strategies' plans with their token budgets resolved, and each strategy whose budget cannot run
    (`memory` where no token fits, a budget below the longest sequence, inside a layout a budget over what its HBM
    holds), at its `budget_tokens` where written."""
    replicas = min(scenario.replica_devices)
    # The layout's own rows are checked against HBM with the layout; a budget may ask for more.
    checks_hbm = scenario.layout is not None and hardware.hbm_capacity_bytes is not None
    allowed = functools.cache(lambda: layout_token_budget(model, hardware, scenario.memory_layout, replicas))
    memory = functools.cache(lambda: memory_budget_tokens(model, hardware, scenario.memory_layout, replicas))
    plans, refused = [], []
    for index, spec in enumerate(scenario.strategies):
        try:
            plan = spec.plan().source.resolved(spec.plan(), histogram, memory)
            budget = plan.budget_tokens
            if checks_hbm and isinstance(budget, int) and budget > allowed():
                raise InputError(f"strategy {plan.name!r}: {budget:,} tokens a microbatch exceed what "
                                 f"{hardware.name}'s HBM holds on {layout_terms(scenario.memory_layout)}, up to "
                                 f"{allowed():,} (budget_tokens: memory takes that)", parameter="hbm_capacity_bytes")
            plans.append(plan)
        except InputError as error:
            key = ("strategies", index, "budget_tokens")
            key = key if written(scenario, key) else key[:-1]
            refused.append(key_error(scenario, key, f"{'.'.join(map(str, key))}: {error.message}", error.parameter))
    return tuple(plans), refused

