"""A resolved run: everything a simulation needs, built once from a scenario or from command options.

    >>> from simbench.resolved import Run
    >>> run = Run.from_options("squad_1_1_384", ["spfhp:3", "unpad"], [1, 8], steps=5)
    >>> [plan.name for plan in run.plans], run.cost_model.hardware.name
    (['spfhp:3', 'unpad'], 'a100')

The scenario is the schema (keys, lines, did-you-mean); a `Run` holds what it resolves to: the histogram,
the model, the hardware profile with its overrides, a cost model built through its registry, the labelled
plans, and the sizes and seeds. `simbench run`, `simbench simulate`, the Python API and sweeps all price
through one, so what a command and a scenario mean by the same words cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from simbench.checked import CheckedScenario, check_scenario, scenario_memory
from simbench.costmodels.base import CostModel, as_cost_model
from simbench.costmodels.hardware import HardwareProfile, load_hardware
from simbench.costmodels.model import ModelSpec, get_model
from simbench.costmodels.registry import COST_MODELS
from simbench.errors import InputError
from simbench.histogram import LengthHistogram, load_histogram
from simbench.costmodels.layout import ParallelLayout
from simbench.sim.memory_budget import resolved_plans
from simbench.sim.memory_fit import DEFAULT_MEMORY_POLICY, MEMORY_POLICIES, MemoryFit, fit_memory, memory_layout
from simbench.sim.plans import ExecutionPlan, StepSizing, baseline_plan, parse_plans, with_reference
from simbench.sim.shapes import TRAINING_STEPS_MAX
from simbench.validation import (DEFAULT_BATCH_SIZE, DEFAULT_COST_MODEL, DEFAULT_ENGINE, DEFAULT_GPUS_PER_REPLICA,
                                 DEFAULT_HARDWARE, DEFAULT_MODEL, DEFAULT_SEED, DEFAULT_SHAPES, DEFAULT_STEPS,
                                 DEFAULT_TRAINING_STEPS, check_choice, check_device_counts, check_gpus_per_replica,
                                 check_whole_number)

if TYPE_CHECKING:
    from simbench.scenario import Scenario
    from simbench.sim.footing import Footing
    from simbench.strategies.packing import Packing
    from simbench.sim.results import SimulationResult


@dataclass(frozen=True, eq=False)
class Run:
    """A simulation, resolved: no name in it is looked up again."""

    name: str
    histogram: LengthHistogram
    model: ModelSpec
    hardware: HardwareProfile
    cost_model: CostModel
    plans: tuple[ExecutionPlan, ...]
    devices: tuple[int, ...]
    batch_size: int
    steps: int
    seed: int
    engine: str = DEFAULT_ENGINE
    shapes: str = DEFAULT_SHAPES
    training_steps: int = DEFAULT_TRAINING_STEPS
    gpus_per_replica: int = DEFAULT_GPUS_PER_REPLICA
    cost_model_name: str = DEFAULT_COST_MODEL
    labels: Mapping[str, str] = field(default_factory=dict)  # plan name -> the scenario's label for it
    # A replica's 4D layout: `devices` then count replicas, `batch_size` rows per replica step (all microbatches).
    layout: ParallelLayout | None = None
    # The plan every speed-up is over (None: simbench.sim.plans.DEFAULT_BASELINE, the scenario schema's default).
    baseline: ExecutionPlan | None = None
    # Every strategy's largest microbatch against HBM and the settings that price the run (None: the profile
    # states no HBM capacity, or the run came from options)
    memory: MemoryFit | None = None
    # How the plans were sized against each other (`sim.footing`); None: each at `batch_size` (simulate's options).
    footing: Footing | None = None
    # Packings made while sizing, of the plans whose sizes they were made at: the run packs them no more.
    packings: Mapping[str, Packing] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "baseline", baseline_plan(self.baseline))

    @classmethod
    def from_scenario(cls, scenario: Scenario, histogram: LengthHistogram | None = None,
                      packings: Mapping[str, Packing] | None = None, *, checked: CheckedScenario | None = None,
                      stage: Callable[[str], None] | None = None, workers=None) -> Run:
        """The scenario's run, on `histogram` if given (a sweep shares one between cells, and `packings` of it).
        The scenario is checked first (`simbench.checked.check_scenario`: InputErrors at its keys) unless `checked`
        is what checking it gave. The packings sizing needs are made here: `stage(text)` hears of each, `workers` (a
        `simbench.workers.ReportWorkers`) make the slow ones beside the rest, as a run's packing does."""
        checked = checked if checked is not None else check_scenario(scenario, histogram)
        histogram, plans, model, hardware = checked.histogram, checked.plans, checked.model, checked.hardware
        # Memory at the scenario's own sizes first: the settings it chooses price the packings sizing makes.
        layout = _priced_layout(scenario, checked.memory)
        cost_model = _cost_model(scenario.cost_model, model, hardware, _gpus_per_replica(scenario, layout), layout)
        (baseline,) = resolved_plans([scenario.baseline.plan()], histogram, model, hardware, scenario.memory_layout,
                                     min(scenario.replica_devices))
        sized, footing, packings = _sized_plans(scenario, histogram, plans, baseline, cost_model, model, hardware,
                                                packings, stage, workers)
        # A label left to its default names the plan as it runs (a `memory` or sized budget as its number).
        # Sizing keeps the plans' order (padding and the baseline first) and renames only a budget it sizes.
        renamed = {plan.name: new.name for plan, new in zip(with_reference(list(plans), baseline),
                                                            with_reference(list(sized), baseline))}
        labels = {renamed.get(plan.name, plan.name): spec.label if spec.label != spec.plan().name
                  else renamed.get(plan.name, plan.name) for plan, spec in zip(plans, scenario.strategies)}
        baseline = next(plan for plan in with_reference(list(sized), baseline)
                        if plan.name == renamed.get(baseline.name, baseline.name))
        own_label = scenario.baseline.label  # where the baseline is among the strategies, their label holds
        labels.setdefault(baseline.name, own_label if own_label != scenario.baseline.plan().name else baseline.name)
        # Memory again at the microbatch each strategy runs once sized (equal tokens may have given it more rows):
        # that check is the one the run ranks by; where it asks more of memory, it prices the run.
        memory = scenario_memory(scenario, {labels.get(plan.name, plan.name): plan
                                            for plan in with_reference(list(sized), baseline)}, histogram)
        if _priced_layout(scenario, memory) != layout:
            layout = _priced_layout(scenario, memory)
            cost_model = _cost_model(scenario.cost_model, model, hardware, _gpus_per_replica(scenario, layout), layout)
            packings = {}  # made with the other cost model (a balancing packer weighs work by it): packed again
        gpus_per_replica = _gpus_per_replica(scenario, layout)
        return cls(scenario.name, histogram, model, hardware, cost_model, sized,
                   scenario.replica_devices, scenario.device_batch_size, scenario.steps, scenario.seed,
                   shapes=scenario.shapes, training_steps=scenario.training_steps,
                   gpus_per_replica=gpus_per_replica, cost_model_name=scenario.cost_model,
                   labels=labels, layout=layout, baseline=baseline, memory=memory, footing=footing,
                   packings=packings)

    @classmethod
    def from_options(cls, histogram: LengthHistogram | str | Path, strategies: Sequence[str | ExecutionPlan],
                     devices: Sequence[int], *, model: str | dict | ModelSpec = DEFAULT_MODEL,
                     hardware: str | Path | HardwareProfile = DEFAULT_HARDWARE, overrides: Mapping | None = None,
                     cost_model: str = DEFAULT_COST_MODEL, gpus_per_replica: int = DEFAULT_GPUS_PER_REPLICA,
                     batch_size: int = DEFAULT_BATCH_SIZE, steps: int = DEFAULT_STEPS, seed: int = DEFAULT_SEED,
                     engine: str = DEFAULT_ENGINE, shapes: str = DEFAULT_SHAPES,
                     training_steps: int = DEFAULT_TRAINING_STEPS, baseline: str | ExecutionPlan | None = None,
                     memory: str | None = None) -> Run:
        """The run `simbench simulate` and `simbench.simulate` describe with their options; `baseline` None is the
        scenario schema's default (`simbench.sim.plans.DEFAULT_BASELINE`). Memory is checked as a scenario's
        `memory` policy says (None: its default), on one device of `gpus_per_replica` GPUs (`sim.memory_fit`, as
        `run` checks it)."""
        memory = DEFAULT_MEMORY_POLICY if memory is None else memory
        if not devices:
            raise InputError("devices: give at least one device count", parameter="devices")
        # Before the memory check, which prices the fewest replicas: a count of 0 is the devices' error.
        devices = check_device_counts(devices)
        check_whole_number(training_steps, "training_steps", minimum=1, maximum=TRAINING_STEPS_MAX)
        check_choice(memory, "memory", MEMORY_POLICIES)
        check_gpus_per_replica(gpus_per_replica)
        if not isinstance(histogram, LengthHistogram):
            histogram = load_histogram(histogram)
        named = parse_plans([plan for plan in strategies if not isinstance(plan, ExecutionPlan)])
        given = [plan for plan in strategies if isinstance(plan, ExecutionPlan)]
        # A packer's size limit is the strategy's error, before the memory check prices its microbatch.
        from simbench.sim.simulate import check_packing_limits

        check_packing_limits([*named, *given], histogram.max_length)
        spec = get_model(model)
        profile = load_hardware(hardware, dict(overrides) if overrides else None)
        checked_on = memory_layout(None, gpus_per_replica)
        plans = resolved_plans({plan.name: plan for plan in [*named, *given]}.values(), histogram, spec, profile,
                               checked_on, min(devices))
        (baseline,) = resolved_plans([baseline_plan(baseline)], histogram, spec, profile, checked_on, min(devices))
        fit = None
        if profile.hbm_capacity_bytes is not None:
            fit = fit_memory(spec, profile, {plan.name: plan for plan in with_reference(list(plans), baseline)},
                             histogram, batch_size=batch_size, layout=checked_on, replicas=min(devices),
                             policy=memory, can_raise=gpus_per_replica == 1)
        layout = fit.priced if fit is not None and fit.raised else None
        gpus = gpus_per_replica if layout is None else layout.gpus_per_replica
        return cls(histogram.name, histogram, spec, profile, _cost_model(cost_model, spec, profile, gpus, layout),
                   plans, tuple(devices), batch_size, steps, seed, engine, shapes, training_steps, gpus,
                   cost_model, layout=layout, baseline=baseline, memory=fit)

    def with_memory(self, result: SimulationResult) -> SimulationResult:
        """`result` with the memory check beside it: its table (`result.memory`) and each summary row's verdict and
        peak memory per GPU (`memory_verdict`, `peak_memory_gib`, `made_to_fit`; empty without HBM stated)."""
        if self.memory is None:
            return result
        table = self.memory.table()
        by_name = table.set_index("strategy")
        summary = result.summary.assign(**{
            column: result.summary["strategy"].map(lambda name, column=source: by_name[column].get(self.label(name)))
            for column, source in (("memory_verdict", "verdict"), ("peak_memory_gib", "peak_memory_gib"),
                                   ("made_to_fit", "made_to_fit"))})
        return replace(result, summary=summary, memory=table)

    @property
    def all_plans(self) -> list[ExecutionPlan]:
        """The plans with padding first and the baseline every speed-up is over second (see `with_reference`)."""
        return with_reference(list(self.plans), self.baseline)

    @property
    def microbatches(self) -> int:
        """Microbatches a device's `batch_size` rows make: the layout's, else 1."""
        return self.layout.microbatches if self.layout is not None else 1

    def label(self, plan_name: str) -> str:
        return self.labels.get(plan_name, plan_name)

    def simulate(self, *, cost_model=None, devices: Sequence[int] | None = None, shapes: str | None = None,
                 packings: dict | None = None, progress: Callable[[int], None] | None = None,
                 stage: Callable[[str], None] | None = None, max_rows: int | None = None) -> SimulationResult:
        """Simulate the run (or a variant of it: another cost model, cluster sizes or phase of the run)."""
        from simbench.sim.simulate import simulate
        from simbench.validation import SIMULATED_ROWS_MAX

        return simulate(self.histogram, list(self.plans), list(devices or self.devices),
                        cost_model if cost_model is not None else self.cost_model, batch_size=self.batch_size,
                        steps=self.steps, seed=self.seed, engine=self.engine, progress=progress, packings=packings,
                        max_rows=SIMULATED_ROWS_MAX if max_rows is None else max_rows, stage=stage,
                        shapes=shapes or self.shapes, training_steps=self.training_steps,
                        microbatches=self.microbatches, gpus_per_device=self.gpus_per_replica,
                        baseline=self.baseline)

    def cost_model_on(self, hardware: HardwareProfile) -> CostModel:
        """This run's kind of cost model for its model on other hardware (the assumptions a report weighs)."""
        return _cost_model(self.cost_model_name, self.model, hardware, self.gpus_per_replica, self.layout)


def _priced_layout(scenario: Scenario, memory: MemoryFit | None) -> ParallelLayout | None:
    """The layout a run is priced on: the scenario's, or the one memory raised its settings to (recompute and ZeRO
    are priced by the 4D replica: without `parallel`, a 1 x 1 x 1 layout of one GPU)."""
    return memory.priced if memory is not None and memory.raised else scenario.layout


def _gpus_per_replica(scenario: Scenario, layout: ParallelLayout | None) -> int:
    return scenario.gpus_per_device if layout is None else layout.gpus_per_replica


def _sized_plans(scenario: Scenario, histogram: LengthHistogram, plans: tuple[ExecutionPlan, ...],
                 baseline: ExecutionPlan, cost_model, model: ModelSpec, hardware: HardwareProfile,
                 given: Mapping[str, Packing] | None = None, stage: Callable[[str], None] | None = None,
                 workers=None):
    """The scenario's plans sized as its `compare_at` says (padding's included where sized), their footing, and
    the packings made to size them that the run can use as they are."""
    from simbench.sim.footing import size_plans
    from simbench.sim.memory_budget import layout_token_budget
    from simbench.sim.simulate import pack_plans

    layout = scenario.layout
    microbatches = layout.microbatches if layout is not None else 1
    # At equal tokens these packings only size the steps (the run packs again at the sizes chosen): said so.
    told = stage if stage is None or scenario.compare_at == "as-configured" else (
        lambda text: stage(f"sizing the steps: {text}"))
    packings = pack_plans(histogram, list(plans), batch_size=scenario.device_batch_size, seed=scenario.seed,
                          cost_model=cost_model, microbatches=microbatches, packings=given, baseline=baseline,
                          stage=told, workers=workers)
    # A microbatch may hold what memory allows, and never less than the scenario's own microbatch: the user's
    # claim that it fits stands (checking it is the memory model's business, not this sizing's).
    memory = (layout_token_budget(model, hardware, scenario.memory_layout, min(scenario.replica_devices))
              if hardware.hbm_capacity_bytes is not None else 0)
    slots = max(memory, scenario.batch_size * histogram.max_length)
    sized, footing = size_plans(with_reference(list(plans), baseline), histogram, packings, scenario.compare_at,
                                scenario.device_batch_size, microbatches, slots)
    if scenario.compare_at == "as-configured":
        return plans, footing, packings  # made at the run's own sizes: the run packs nothing again
    kept = {plan.name: packings[plan.name] for plan in sized if plan.name in packings
            and plan.sizing == StepSizing(scenario.device_batch_size, microbatches)}
    return sized, footing, kept


def _cost_model(name: str, model: ModelSpec, hardware: HardwareProfile, gpus_per_replica: int,
                layout: ParallelLayout | None = None) -> CostModel:
    """The registry's cost model (a plug-in's given `CostModel`'s defaults, `as_cost_model`); with a layout, one
    GPU's, priced as a 4D replica by `ReplicaCostModel`."""
    if layout is None:
        return _built(name, model, hardware, gpus_per_replica)
    from simbench.sim.replica import ReplicaCostModel

    return ReplicaCostModel(_built(name, model, hardware, 1), layout)


def _built(name: str, model: ModelSpec, hardware: HardwareProfile, gpus_per_replica: int) -> CostModel:
    """The registry's cost model `name`; a plug-in's built, and then called, where a late call can be stopped."""
    cost_model_type = COST_MODELS.get(name)
    if COST_MODELS.is_builtin(cost_model_type):
        return as_cost_model(cost_model_type.build(model, hardware, gpus_per_replica))
    from simbench.costmodels.base import StoppableCostModel
    from simbench.plugins import CALL_TIMEOUT_SECONDS, in_time, timeout_seconds

    what = f"the plug-in cost model {name!r}"
    built = in_time(what, cost_model_type.build, model, hardware, gpus_per_replica,
                    timeout=timeout_seconds(CALL_TIMEOUT_SECONDS))
    return StoppableCostModel(as_cost_model(built), what)


def scenario_cost_model(scenario: Scenario):
    """The cost model `Run.from_scenario` prices the scenario with, built without loading its dataset."""
    return _cost_model(scenario.cost_model, get_model(scenario.model), scenario.hardware.load(),
                       scenario.gpus_per_device, scenario.layout)


def scenario_plans(scenario: Scenario, histogram: LengthHistogram | None = None) -> tuple[ExecutionPlan, ...]:
    """The scenario's plans as its run resolves them (`memory` budgets at the fewest replicas simulated), on
    `histogram` if given, else its dataset's; without building its cost model."""
    return resolved_plans((spec.plan() for spec in scenario.strategies),
                          histogram if histogram is not None else scenario.dataset.load(), get_model(scenario.model),
                          scenario.hardware.load(), scenario.memory_layout, min(scenario.replica_devices))


def resolve(scenario: Scenario, histogram: LengthHistogram | None = None,
            packings: Mapping[str, Packing] | None = None, *, checked: CheckedScenario | None = None,
            stage: Callable[[str], None] | None = None, workers=None) -> Run:
    """The scenario's resolved run (see `Run.from_scenario`)."""
    return Run.from_scenario(scenario, histogram, packings, checked=checked, stage=stage, workers=workers)
