"""A scenario's semantic checks, beyond each key's own: learned positions, packers' limits, the 4D layout, token
budgets, memory and the simulation's work, each refusal reported at the YAML key that set it."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import yaml

from simbench.costmodels import get_model
from simbench.errors import InputError, InputErrors
from simbench.histogram import LengthHistogram
from simbench.scenario.schema import Scenario
from simbench.scenario.yaml_lines import _line_of, _written
from simbench.sim.memory_fit import MemoryFit, fit_memory
from simbench.sim.plans import ExecutionPlan, packing_refusals, with_reference
from simbench.validation import DEVICES_MAX, check_device_counts, check_simulation_work

def check_scenario_work(scenario: Scenario, root: yaml.Node, source: str, rows: int | None = None) -> None:
    """The simulation's work estimated from the scenario alone, so that `validate` refuses what `run` would
    only refuse after reading it (and names the scenario's keys, not simulate's options); `rows`, when the
    caller knows them already (a sweep's cells, from a figure per step)."""
    from simbench.sim.simulate import simulation_rows

    if rows is None:
        rows = simulation_rows([spec.plan() for spec in scenario.strategies], scenario.dataset.load(),
                               list(scenario.replica_devices), scenario.device_batch_size,
                               scenario.steps, baseline=scenario.baseline.plan())
    try:
        check_simulation_work(rows, raising="simulate the largest sizes alone with `simbench simulate --max-rows`")
    except InputError as error:
        raise InputError(error.message, source=source, line=_line_of(root, ("steps",))) from None


def _positions_refused(scenario: Scenario, root: yaml.Node, source: str) -> list[InputError]:
    """A model whose learned positions end before the dataset's max length, at the `model` key (where the
    default model was taken, at the max length that asks for more)."""
    max_length = scenario.dataset.max_length or scenario.dataset.load().max_length
    problem = get_model(scenario.model).positions_problem(max_length)
    if problem is None:
        return []
    written = _written(root, ("model",))
    key = ("model",) if written or not _written(root, ("dataset", "max_length")) else ("dataset", "max_length")
    default = "" if written else " (the default: no `model:` given)"
    return [InputError(f"model{default}: {problem}", source=source, line=_line_of(root, key))]


def _packings_refused(scenario: Scenario, root: yaml.Node, source: str) -> list[InputError]:
    """Each strategy whose packer refuses the scenario's max length and depth, at its line and key, so
    that `validate` reports it and `run` stops before any work."""
    plans = [spec.plan() for spec in scenario.strategies]
    baseline = scenario.baseline.plan()
    if not any(plan.source.packing_request(plan) for plan in [*plans, baseline]):
        return []
    max_length = scenario.dataset.max_length or scenario.dataset.load().max_length
    refused = []
    for index, error in packing_refusals(plans, max_length):
        # At the strategy's `max_depth` where it is written, else at the strategy (`nnlshp`, `nnlshp:3`).
        key = ("strategies", index, "max_depth")
        if not _written(root, key):
            key = key[:-1]
        refused.append(InputError(f"{'.'.join(map(str, key))} ({plans[index].name}): {error.message}",
                                  source=source, line=_line_of(root, key)))
    for _, error in packing_refusals([baseline], max_length):
        refused.append(InputError(f"baseline ({baseline.name}): {error.message}", source=source,
                                  line=_line_of(root, ("baseline",))))
    return refused


def _layout_refused(scenario: Scenario, root: yaml.Node, source: str) -> list[InputError]:
    """Each way the scenario's 4D layout cannot hold its model, rows, cluster or strategies, at the key that
    set it, so that `validate` reports them all and `run` starts no work."""
    layout = scenario.layout
    if layout is None:
        return []
    refused = []

    def refuse(key: tuple, message: str) -> None:
        refused.append(InputError(f"{'.'.join(map(str, key))}: {message}", source=source, line=_line_of(root, key)))

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
            key = ("parallel", "dp") if _written(root, ("parallel", "dp")) else ("parallel",)
            refuse(key, f"dp x tp x pp x cp = {scenario.devices[0]:,} GPUs, more than the {DEVICES_MAX:,} devices a "
                        "simulation may have")
    model = get_model(scenario.model)
    max_length = scenario.dataset.max_length or scenario.dataset.load().max_length
    problems = layout.problems(layers=model.layers, heads=model.heads, kv_heads=model.kv_heads or model.heads,
                               ffn=model.ffn, max_length=max_length)
    for key, message in problems:
        refuse(("parallel", key) if _written(root, ("parallel", key)) else ("parallel",), message)
    for key, spec in [*((("strategies", index), spec) for index, spec in enumerate(scenario.strategies)),
                      (("baseline",), scenario.baseline)]:
        if not spec.plan().source.layout_aware:
            refuse(key, f"{spec.plan().name} runs its own pipeline and cannot run inside a 4D "
                        f"layout; leave `parallel` out to simulate it")
    return refused


def _budgets_refused(scenario: Scenario, root: yaml.Node, source: str) -> list[InputError]:
    """Each strategy whose token budget cannot run (`memory` where no token fits, a budget below the longest
    sequence, inside a layout a budget over what its HBM holds), at its `budget_tokens` where written, as its
    run would resolve it."""
    from simbench.sim.memory_budget import layout_terms, layout_token_budget, resolved_plans

    histogram, model, hardware = scenario.dataset.load(), get_model(scenario.model), scenario.hardware.load()
    replicas = min(scenario.replica_devices)
    # The layout's own rows are checked against HBM with the layout; a budget may ask for more.
    checks_hbm = scenario.layout is not None and hardware.hbm_capacity_bytes is not None
    allowed = functools.cache(lambda: layout_token_budget(model, hardware, scenario.memory_layout, replicas))
    refused = []
    for index, spec in enumerate(scenario.strategies):
        try:
            (plan,) = resolved_plans([spec.plan()], histogram, model, hardware, scenario.memory_layout, replicas)
            budget = plan.budget_tokens
            if checks_hbm and isinstance(budget, int) and budget > allowed():
                raise InputError(f"strategy {plan.name!r}: {budget:,} tokens a microbatch exceed what "
                                 f"{hardware.name}'s HBM holds on {layout_terms(scenario.memory_layout)}, up to "
                                 f"{allowed():,} (budget_tokens: memory takes that)", parameter="hbm_capacity_bytes")
        except InputError as error:
            key = ("strategies", index, "budget_tokens")
            key = key if _written(root, key) else key[:-1]
            refused.append(InputError(f"{'.'.join(map(str, key))}: {error.message}", source=source,
                                      line=_line_of(root, key), parameter=error.parameter))
    return refused


def check_scenario_memory(scenario: Scenario, root: yaml.Node, source: str) -> None:
    """InputErrors where no strategy fits memory (`_memory_refused`): for a sweep's cells that differ from a
    validated one only in values whose own checks do not see memory (batch_size, devices)."""
    refused = _memory_refused(scenario, root, source)
    if refused:
        raise InputErrors(refused)


def _memory_refused(scenario: Scenario, root: yaml.Node, source: str) -> list[InputError]:
    """The scenario refused where no strategy's largest microbatch fits HBM under any setting its `memory` policy
    may choose, at the key the first way out changes (`simbench.resolved.scenario_memory`, as `run` checks it)."""
    from simbench.sim.memory_budget import resolved_plans

    try:
        plans = resolved_plans([spec.plan() for spec in scenario.strategies], scenario.dataset.load(),
                               get_model(scenario.model), scenario.hardware.load(),
                               scenario.memory_layout, min(scenario.replica_devices))
        scenario_memory(scenario, configured_plans(scenario, plans))
    except InputError as error:
        key = (error.parameter,) if error.parameter in type(scenario).model_fields else ("memory",)
        key = key if _written(root, key) or not _written(root, ("memory",)) else ("memory",)
        return [InputError(f"{key[0]}: {error.message}", source=source, line=_line_of(root, key),
                           parameter=error.parameter)]
    return []


def plan_labels(scenario: Scenario, plans: Sequence[ExecutionPlan]) -> dict[str, str]:
    """Plan name -> label; a label left to its default names the plan as it runs (a `memory` budget as its number)."""
    return {plan.name: spec.label if spec.label != spec.plan().name else plan.name
            for plan, spec in zip(plans, scenario.strategies)}


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


def configured_plans(scenario: Scenario, plans: Sequence[ExecutionPlan]) -> dict[str, ExecutionPlan]:
    """The scenario's resolved `plans`, padding and the baseline by label, at the scenario's own sizes."""
    labels = plan_labels(scenario, plans)
    return {labels.get(plan.name, plan.name): plan
            for plan in with_reference(list(plans), scenario.baseline.plan())}
