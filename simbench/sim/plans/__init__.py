"""Execution plans: what `--strategy NAME` means to the simulator (a batch source and how a device runs it).

    >>> from simbench.sim.plans import parse_plan
    >>> parse_plan("spfhp:3").packer, parse_plan("unpad-exchange").exchange.value
    ('spfhp', 'blocking')

Every plan type is registered in `PLANS` (built-ins next to their batch source in this package, plug-ins
through the entry-point group `simbench.plans`); every packer of the strategy registry is a plan too.
A plan is written `NAME[:ARG]...` (`spfhp:3`, `packed-varlen:spfhp:max`, `vts-bucketed:window=4`) or,
in a scenario, as a mapping (`{name: spfhp, max_depth: 3}`); both read into the same parameters.
A new built-in plan is one module here (a `BatchSource` and a `PlanType` passed to `register_plan`)
named in BUILTIN_PLAN_MODULES; nothing else branches on a plan's kind.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from simbench.costmodels.base import ExecutionMode
from simbench.errors import InputError, did_you_mean
from simbench.registry import Registry
from simbench.sim.exchange import Exchange  # noqa: F401  (a plan names its exchange; the step timing owns it)
from simbench.strategies import STRATEGIES
from simbench.validation import DEFAULT_SHAPES, DEFAULT_TRAINING_STEPS

if TYPE_CHECKING:
    import pandas as pd

    from simbench.costmodels.base import BatchSet
    from simbench.histogram import LengthHistogram
    from simbench.sim.engines.vectorized import StepAggregates
    from simbench.sim.engines.order_statistics import ItemSource
    from simbench.sim.pricing import DeviceCosts
    from simbench.strategies.packing import Packing

BUILTIN_PLAN_MODULES = tuple(f"simbench.sim.plans.{module}" for module in ("unpadded", "packed", "vts", "length_grouped",
                                                                         "pad_to_longest"))


class PlanKind(str, Enum):
    """The built-in batch sources (a plug-in plan names its own)."""

    PACKING = "packing"  # rows of a packer's Packing, sampled in proportion to their repeats
    UNPAD = "unpad"  # sequences drawn from the histogram, no padding at all
    VTS = "vts"  # sequences drawn from the histogram, streamed through a stage pipeline


@dataclass(frozen=True)
class ExecutionPlan:
    """One simulated strategy: its batch source (`kind`), the execution mode and its parameters."""

    name: str
    kind: str  # a key of BATCH_SOURCES, e.g. PlanKind.PACKING
    mode: ExecutionMode
    packer: str | None = None
    max_depth: int | None = None
    exchange: Exchange = Exchange.NONE
    stages: int = 0  # VTS pipeline stages
    bucket_window: int = 0  # VTS bucketing: batches per window sorted by length (0: no bucketing)
    outlier_delay: bool = False  # a step's packs all hold a long document or none does (`wlb`, WLB-LLM)
    # `token-budget`: padded token slots per microbatch, or "memory" until a run resolves it (`resolved`);
    # None: batch_size x max_length
    budget_tokens: int | str | None = None
    # Its own rows and microbatches a device step, where a run sized it (`compare_at: equal-tokens`); None: the
    # run's batch_size and microbatches.
    sizing: StepSizing | None = None

    @property
    def independent_devices(self) -> bool:
        """Each device draws its batch on its own, so its step time is an i.i.d. draw: the slowest of n
        devices can be drawn directly (order statistics)."""
        return self.source.independent_devices(self)

    @property
    def is_reference(self) -> bool:
        return self.kind == PlanKind.PACKING and self.packer == "none" and self.mode is ExecutionMode.PADDED

    @property
    def source(self) -> type[BatchSource]:
        return BATCH_SOURCES.get(self.kind)


@dataclass(frozen=True)
class StepSizing:
    """A plan's own size of a device's optimizer step (`simbench.sim.footing` decides it)."""

    rows: int  # rows a device's step holds, all microbatches: what `batch_size` counts for the plan
    microbatches: int  # microbatches the rows run as, one after the other (gradient accumulation)


def microbatch_count(step_slots: float, microbatch_slots: int, microbatches: int) -> int:
    """Microbatches a step of `step_slots` token slots runs as: enough that none holds more than
    `microbatch_slots`, in whole multiples of the run's own `microbatches` (a pipeline schedule's count stays
    valid: interleaving asks for a multiple of the stages)."""
    needed = math.ceil(step_slots / max(microbatch_slots, 1))
    return microbatches * max(1, math.ceil(needed / microbatches))


REFERENCE_PLAN = ExecutionPlan("none", PlanKind.PACKING, ExecutionMode.PADDED, packer="none", max_depth=1)
# The plan every speed-up is over unless a scenario's `baseline` (or `simulate(baseline=...)`) names another:
# what people run by default (Hugging Face's collator), not padding to max_length, which nobody runs.
DEFAULT_BASELINE = "pad-to-longest"


@dataclass(frozen=True)
class SimulationSettings:
    """What every plan of one `simulate` call shares."""

    histogram: LengthHistogram
    cost_model: object
    batch_size: int
    steps: int
    seed: int
    engine: str
    shapes: str = DEFAULT_SHAPES  # which steps pay a new shape's first-sight cost (sim.shapes)
    training_steps: int = DEFAULT_TRAINING_STEPS  # the length of the run being simulated, for shapes "auto"
    microbatches: int = 1  # a device's `batch_size` rows run as this many microbatches (a 4D replica's)
    # Steps priced once and shared by plans drawing the same batches (both padding exchanges).
    priced_steps: dict = field(default_factory=dict, compare=False, repr=False)

    def of_plan(self, plan: ExecutionPlan, cost_model: object) -> SimulationSettings:
        """The settings `plan` runs with: its own rows and microbatches where a run sized it, priced by
        `cost_model` (the settings' own model, sized to the plan's microbatches)."""
        if plan.sizing is None:
            return self
        return replace(self, batch_size=plan.sizing.rows, microbatches=plan.sizing.microbatches,
                       cost_model=cost_model)


@dataclass(frozen=True)
class StepTiming:
    """What a plan adds to a cluster's steps besides the devices' own time and the all-reduce."""

    prepare_seconds: np.ndarray | None = None  # per step: host work before the step can start (padding exchange)
    allgather_seconds: float = 0.0  # the communication part of prepare_seconds
    stage_seconds: np.ndarray | None = None  # (steps, devices, batch, stages): devices run a pipeline (SimPy)
    buffer_samples: int = 0  # samples each FIFO between two pipeline stages holds
    reference_step_seconds: float | None = None  # the step time speed-ups are measured against, if not padding's


class BatchSource:
    """Where a plan's per-device batches come from, and its timing hook; one per (plan, simulate call).

    `chunk` prices the next steps' batches for the largest cluster; a smaller cluster trains on its
    first devices' batches unless `chunk` priced a draw of its own for it (as the padding exchange does).
    """

    kind: ClassVar[str]
    # Step times vary with the batch's content and compare one to one with padding's (same sequences):
    # their per-device samples get a Gumbel fit of the slowest of n devices.
    fits_stragglers: ClassVar[bool] = False
    # Whether its un-padded batches take the profile's per-device step noise (`unpadded_noise_cv`, fitted on
    # GPU un-padding kernels); a source that prices without `step_costs` (VTS pipelines) takes none.
    step_noise: ClassVar[bool] = True
    # Whether its batches can be priced as a 4D replica's microbatches (`sim.parallel_costs`); a source that
    # times its own pipeline (VTS) cannot.
    layout_aware: ClassVar[bool] = True
    # The family the report draws it in; None: read from its packer and mode (simbench.report.styles).
    family: ClassVar[str | None] = None

    def __init__(self, plan: ExecutionPlan, packing: Packing | None, settings: SimulationSettings, purpose: int = 0,
                 simpy_devices: int = 0):
        self.plan, self.packing, self.settings = plan, packing, settings
        self.purpose = purpose  # which of the plan's random streams its batches come from
        self.simpy_devices = simpy_devices  # the largest cluster SimPy runs (0: none)

    @staticmethod
    def packing_request(plan: ExecutionPlan) -> tuple[str, int | None] | None:
        """The packer and depth whose packing this plan's batches come from, if any."""
        return None

    @staticmethod
    def packing_options(plan: ExecutionPlan, histogram: LengthHistogram, batch_size: int,
                        microbatches: int) -> dict[str, Any]:
        """PackOptions fields of its packing beyond those every packing shares (a token budget); a packing's
        details record them, so that packings made with other ones are told apart."""
        return {}

    @staticmethod
    def resolved(plan: ExecutionPlan, histogram: LengthHistogram,
                 memory_tokens_per_microbatch: Callable[[], int]) -> ExecutionPlan:
        """The plan with whatever depends on the run's memory settled and checked against its histogram;
        `memory_tokens_per_microbatch()` is what the run's layout lets a microbatch hold."""
        return plan

    @staticmethod
    def expected_real_tokens_per_step(plan: ExecutionPlan, histogram: LengthHistogram, packing: Packing | None,
                                      rows: int, microbatches: int) -> float:
        """Real tokens a device's step of `rows` rows (in `microbatches` microbatches) holds on average: here
        sequences drawn from the histogram, `rows` x its mean length."""
        return rows * histogram.real_tokens / histogram.sequences

    @classmethod
    def microbatches_holding(cls, plan: ExecutionPlan, histogram: LengthHistogram, rows: int, microbatch_slots: int,
                             microbatches: int) -> int:
        """The fewest microbatches, in whole multiples of `microbatches`, a step of `rows` rows runs as so that its
        largest microbatch holds at most `microbatch_slots` token slots: its rows over the count, rounded up (as
        the simulator cuts a step), in their largest form (`largest_microbatch_tokens`, what memory is checked
        on, `sim.memory_fit`); one row each where a row alone holds more."""
        count = microbatches
        while count < rows and cls.largest_microbatch_tokens(plan, histogram, -(-rows // count)) > microbatch_slots:
            count += microbatches
        return count

    @classmethod
    def sized(cls, plan: ExecutionPlan, histogram: LengthHistogram, packing: Packing | None,
              real_tokens_per_step: float, microbatches: int, microbatch_slots: int) -> ExecutionPlan:
        """The plan with its step sized to hold about `real_tokens_per_step` real tokens, in at least
        `microbatches` microbatches of at most `microbatch_slots` token slots each (more microbatches where
        the rows need them): here by its rows, the whole count nearest the target."""
        def expected(rows: int) -> float:
            return cls.expected_real_tokens_per_step(plan, histogram, packing, rows, 1)

        guess = max(1, round(real_tokens_per_step / max(expected(1), 1e-9)))
        rows = min((max(1, guess + step) for step in (-1, 0, 1)),
                   key=lambda rows: (abs(expected(rows) - real_tokens_per_step), rows))
        count = cls.microbatches_holding(plan, histogram, rows, microbatch_slots, microbatches)
        return replace(plan, sizing=StepSizing(max(rows, count), count))  # no microbatch without a row

    @staticmethod
    def device_batches(plan: ExecutionPlan, histogram: LengthHistogram, packing: Callable[[], Packing | None],
                       rng: np.random.Generator, steps: int, batch_size: int) -> BatchSet:
        """One device's `steps` batches of `batch_size` rows as the plan's training steps hold them, drawn with
        `rng` as the simulator draws them (`packing()`: the plan's packing, made when asked): what `simbench
        measure` times on a device. An InputError says why one device's steps cannot show the plan."""
        raise InputError(f"plan kind {plan.kind!r} does not say what one device's batches hold "
                         "(BatchSource.device_batches): measure cannot build them")

    @staticmethod
    def random_stream(plan: ExecutionPlan) -> str:
        """Plans with the same stream draw the same batches, so their comparison is paired."""
        return "sequences"

    @staticmethod
    def simpy_events_per_device_step(plan: ExecutionPlan, cost_model, batch_size: int) -> int:
        return 3

    @staticmethod
    def rows_per_device_step(plan: ExecutionPlan, histogram: LengthHistogram, batch_size: int) -> int:
        """Sequences or packs a device draws each step, for the simulation's work estimate."""
        return batch_size

    @staticmethod
    def largest_microbatch_tokens(plan: ExecutionPlan, histogram: LengthHistogram, batch_size: int) -> int:
        """Token slots of the largest microbatch of `batch_size` rows this plan runs: what its activations must
        fit in memory. By default rows padded to max_length (padding, packs)."""
        return batch_size * histogram.max_length

    @staticmethod
    def distinct_rows_per_step(plan: ExecutionPlan, histogram: LengthHistogram, batch_size: int,
                               devices: list[int]) -> int:
        """Sequences or packs a step prices for the cluster sizes `devices` that `distinct_batches` prices
        (beyond those drawn one by one), for the simulation's work estimate."""
        return 0

    @staticmethod
    def independent_devices(plan: ExecutionPlan) -> bool:
        """Whether each device draws its batch on its own (then `items` describes one device's draw)."""
        return False

    @staticmethod
    def prices_distinct_batches(plan: ExecutionPlan) -> bool:
        """Whether a step's devices, coupled, hold repeating batches that `distinct_batches` prices (asked only
        where devices are not independent; `sim.engines.choice` decides the engine from both)."""
        return False

    def shape_keys(self, rng: np.random.Generator, count: int) -> np.ndarray | None:
        """One key per batch shape of `count` consecutive batches of one device, for the first-sight cost
        (`sim.shapes`); None where every batch has the same shape (packs, fixed rows)."""
        return None

    def generator(self, purpose: int) -> np.random.Generator:
        stream = zlib.crc32(self.random_stream(self.plan).encode())
        return np.random.default_rng([self.settings.seed, stream, purpose])

    def chunk_steps(self, steps: int) -> int:
        """Steps per chunk, given the most that fit in memory (a plan may need a multiple of something)."""
        return steps

    @property
    def shares_draws(self) -> bool:
        """Whether every cluster size trains on the largest cluster's batches (then they are latency samples)."""
        return self.plan.exchange is Exchange.NONE

    def chunk(self, steps: int, devices: list[int]) -> dict[int, DeviceCosts]:
        """Costs of the next `steps` steps for the largest of `devices`, and for any size drawn apart."""
        raise NotImplementedError

    def items(self) -> ItemSource:
        """One device's batch as items drawn independently (plans with independent devices only)."""
        raise NotImplementedError

    def distinct_batches(self, devices: list[int]) -> dict[int, StepAggregates]:
        """Step aggregates of each cluster size priced from its distinct batches only (plans for which
        `prices_distinct_batches` holds)."""
        raise NotImplementedError

    def timing(self, devices: int, allreduce_seconds: float, simpy: bool) -> StepTiming:
        return StepTiming()

    def timeline(self) -> pd.DataFrame | None:
        """A timeline of one batch to draw (VTS pipelines), if the plan has one."""
        return None


@dataclass(frozen=True)
class PlanType:
    """A registered plan: its name, what it does, how it reads its parameters, and its batch source.

    Every scenario strategy may carry the built-ins' keys (`max_depth`, `packer`, `stages`, `window`);
    a plan's other parameters are declared in `parameters`, key -> a type pydantic validates, e.g.
    `{"length": Annotated[int, Field(ge=1, description="...")]}`. Scenarios then take them as keys and
    check them like their own (file, line, did-you-mean), and `build` receives them checked in any form.
    """

    name: str
    description: str
    source: type[BatchSource]
    parameters: ClassVar[Mapping[str, Any]] = {}

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        """The plan with these parameters (the mapping form: `max_depth`, `packer`, `stages`, `window`)."""
        raise NotImplementedError

    def parameter_model(self) -> type:
        """The declared parameters as a pydantic model: each optional (None: the plan's default), no others."""
        return _parameter_model(type(self))

    def check_parameters(self, parameters: Mapping[str, Any]) -> dict[str, Any]:
        """`parameters` with the declared ones validated; an InputError names the first bad one."""
        from pydantic import ValidationError

        declared = {key: value for key, value in parameters.items() if key in self.parameters}
        if not declared:
            return dict(parameters)
        try:
            checked = self.parameter_model().model_validate(declared)
        except ValidationError as error:
            first = error.errors()[0]
            raise InputError(f"strategy {self.name!r}: {first['loc'][0]}: {first['msg']}, "
                             f"found {first['input']!r}") from None
        return {**parameters, **checked.model_dump(exclude_unset=True)}

    def reject_unknown(self, parameters: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
        unknown = [f"{key}={value}" for key, value in parameters.items() if key not in allowed]
        if unknown and not allowed:
            raise InputError(f"strategy {self.name!r} takes no parameters")
        if unknown:
            raise InputError(f"strategy {self.name!r}: unknown parameter {unknown[0]!r} "
                             f"(allowed: {', '.join(allowed)})")


@functools.cache
def _parameter_model(plan_class: type[PlanType]) -> type:
    from pydantic import ConfigDict, create_model

    fields = {key: (annotation | None, None) for key, annotation in plan_class.parameters.items()}
    return create_model(f"{plan_class.__name__}Parameters", __config__=ConfigDict(extra="forbid", frozen=True),
                        **fields)


def _register_source(name: str, plan_type: PlanType) -> None:
    source = plan_type.source
    if not PLANS.is_builtin(plan_type):
        from simbench.sim.plans.stoppable import stoppable_source

        source = stoppable_source(source, f"the plug-in strategy {name!r}")
    BATCH_SOURCES.register(source.kind, source)


BATCH_SOURCES: Registry[type[BatchSource]] = Registry("batch source", builtin_modules=BUILTIN_PLAN_MODULES)
PLANS: Registry[PlanType] = Registry("strategy", plural="strategies", builtin_modules=BUILTIN_PLAN_MODULES,
                                     entry_point_group="simbench.plans", item_type=PlanType,
                                     module_of=lambda plan_type: plan_type.source.__module__,
                                     on_add=_register_source)


def register_plan(plan_type: PlanType) -> PlanType:
    PLANS.register(plan_type.name, plan_type)
    return plan_type


def plan_type(name: str) -> PlanType:
    """The registered plan called `name`, or the packing plan of the packer called `name`."""
    from simbench.sim.plans.packed import PackerPlan

    # Built-in plans and packers first: a plug-in never shadows a built-in name, and a built-in is found
    # without scanning every installed distribution's entry points (~20 ms, for each plan of each scenario).
    for plugins in (False, True):
        found = PLANS.find(name, plugins=plugins)
        if found is not None:
            return found
        strategy = STRATEGIES.find(name, plugins=plugins)
        if strategy is not None:
            return PackerPlan.of(strategy)
    raise InputError(f"unknown strategy {name!r};{did_you_mean(name, all_plan_names())} "
                     f"known strategies: {', '.join(all_plan_names())}")


def plan_fields(text: str) -> dict[str, Any]:
    """The mapping form of a plan written `NAME[:ARG]...`: an ARG is a depth (`3`, `max`), a packer
    name or `key=value`. Checking the values is the plan's business (`plan_from_fields`)."""
    name, *arguments = [part.strip() for part in str(text).strip().split(":")]
    fields: dict[str, Any] = {"name": name}
    for argument in arguments:
        key, equals, value = argument.partition("=")
        if not equals:
            key, value = ("max_depth", argument) if argument == "max" or _is_count(argument) else ("packer", argument)
        if key in fields:
            raise InputError(f"strategy {text!r}: {key} given twice")
        fields[key] = int(value) if _is_count(value) else value
    return fields


def plan_from_fields(fields: Mapping[str, Any]) -> ExecutionPlan:
    """The plan a mapping describes: `name` and the plan's parameters (None: the plan's default)."""
    parameters = {key: value for key, value in fields.items() if key != "name" and value is not None}
    found = plan_type(fields["name"])
    checked = found.check_parameters(parameters)
    if PLANS.is_builtin(found):  # a packer's plan included
        return found.build(checked)
    from simbench.plugins import CALL_TIMEOUT_SECONDS, in_time, timeout_seconds

    return in_time(f"the plug-in strategy {found.name!r} (build)", found.build, checked,
                   timeout=timeout_seconds(CALL_TIMEOUT_SECONDS))


def parse_plan(text: str) -> ExecutionPlan:
    """Parse `NAME[:ARG]...`, e.g. `spfhp:3`, `greedy`, `packed-varlen:spfhp:4`, `vts:stages=8`."""
    return plan_from_fields(plan_fields(text))


def parse_plans(texts: list[str]) -> list[ExecutionPlan]:
    """Parse several plan names; `all` expands to every packer and every simulator-only plan."""
    names: list[str] = []
    for text in texts:
        names.extend(all_plan_names() if text.strip() == "all" else [text])
    plans = [parse_plan(name) for name in names]
    return list({plan.name: plan for plan in plans}.values())


def packing_refusals(plans: list[ExecutionPlan], max_length: int) -> list[tuple[int, InputError]]:
    """(index, error) for each plan whose packer refuses this max length and depth (nnlshp's fit at 8k),
    found without packing, so that a run stops before any work rather than partway through."""
    refused = []
    for index, plan in enumerate(plans):
        request = plan.source.packing_request(plan)
        strategy = STRATEGIES.find(request[0]) if request else None
        if strategy is None or strategy.check_limits is None:
            continue
        try:
            strategy.check_limits(max_length, request[1])
        except InputError as error:
            refused.append((index, error))
    return refused


def all_plan_names() -> list[str]:
    """Every packer, then every other plan (plug-ins listed by their entry points' names)."""
    return list(dict.fromkeys([*STRATEGIES.names(), *PLANS.names()]))


def baseline_plan(baseline: ExecutionPlan | str | None) -> ExecutionPlan:
    """The plan speed-ups are over: `baseline` as given or parsed, DEFAULT_BASELINE when None."""
    if isinstance(baseline, ExecutionPlan):
        return baseline
    return parse_plan(DEFAULT_BASELINE if baseline is None else baseline)


def with_reference(plans: list[ExecutionPlan], baseline: ExecutionPlan | str | None = None) -> list[ExecutionPlan]:
    """The plans with padding (`none`) first, always simulated (the ideal speed-up and the packing figures are
    over it), then the baseline every speed-up is over (DEFAULT_BASELINE when None), then the others; padding and
    the baseline as `plans` hold them where a run sized them."""
    baseline = baseline_plan(baseline)
    reference = next((plan for plan in plans if plan.is_reference and plan.sizing is not None), REFERENCE_PLAN)
    firsts = [reference] if baseline.is_reference else [
        reference, next((plan for plan in plans if plan.name == baseline.name), baseline)]
    names = {plan.name for plan in firsts}
    return [*firsts, *[plan for plan in plans if not plan.is_reference and plan.name not in names]]


def _is_count(text: str) -> bool:
    """ASCII digits only ("²".isdigit() is true, and int() refuses it), and few enough for int() to read (a
    longer run is no depth or count any plan takes: it reads as a name, which the plan then refuses)."""
    return text.isascii() and text.isdigit() and len(text) <= 18
