"""Plans of the length-grouping batchers: `token-budget` (fairseq --max-tokens) and `group-by-length` (HF).

Both run batches of whole sequences padded to their batch's longest, in a shape that changes from step
to step (SORTED mode). Token-budget batches are drawn independently per device; length-grouped ones are
dealt round-robin from sorted megabatches, so neighbouring devices get similar lengths.

`token-budget` takes `budget_tokens`: padded token slots per microbatch, as fairseq's --max-tokens counts
per forward pass and as HBM bounds them (`costmodels.memory.max_tokens_per_microbatch`), or `memory` for
what the run's layout allows. A device's batch is one step: with a 4D layout, `microbatches` microbatches,
so it fills budget_tokens x microbatches slots, which the replica cuts into microbatches of equal slots.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from simbench.costmodels.base import ExecutionMode
from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.sim.length_batching import BudgetBatchDraws, LengthGroupedStream, padded_batches
from simbench.sim.engines.order_statistics import ItemSource
from simbench.sim.plans import (PLANS, BatchSource, ExecutionPlan, PlanType, StepSizing, microbatch_count,
                                 register_plan)
from simbench.sim.batching import InverseCdf, SequenceSampler, rows_of_batches
from simbench.sim.megabatches import MegabatchSteps
from simbench.strategies.group_by_length import megabatch_sequences, sequences_per_batch
from simbench.strategies.token_budget import token_budget_batches


class TokenBudgetSource(BatchSource):
    """Each device draws one of the bucketing's batches in proportion to their number (a shuffled epoch)."""

    kind = "token-budget"

    def __init__(self, plan, packing, settings, purpose=0, simpy_devices=0):
        super().__init__(plan, packing, settings, purpose, simpy_devices)
        self.rng = self.generator(purpose)
        histogram = settings.histogram
        self.batches = token_budget_batches(histogram, step_budget_tokens(plan, histogram, settings.batch_size,
                                                                          settings.microbatches))
        self.draws = BudgetBatchDraws(self.batches, settings.cost_model)

    @staticmethod
    def packing_request(plan: ExecutionPlan) -> tuple[str, None]:
        return plan.packer, None  # for the report's padding figures; batches come from the bucketing

    @staticmethod
    def packing_options(plan, histogram, batch_size, microbatches):
        return {"budget_tokens": step_budget_tokens(plan, histogram, batch_size, microbatches)}

    @staticmethod
    def device_batches(plan, histogram, packing, rng, steps, batch_size):
        """The bucketing's batch kinds in proportion to their number, each sequence a row of the kind's padded
        length."""
        batches = token_budget_batches(histogram, step_budget_tokens(plan, histogram, batch_size))
        kinds = InverseCdf(batches.repeats).sample(rng, steps)
        starts, ends = batches.run_offsets[kinds], batches.run_offsets[kinds + 1]
        lengths = [np.repeat(batches.run_lengths[start:end], batches.run_counts[start:end])
                   for start, end in zip(starts, ends)]
        return rows_of_batches(lengths, batches.padded_lengths[kinds])

    @staticmethod
    def expected_real_tokens_per_step(plan, histogram, packing, rows, microbatches):
        """The mean real tokens of the bucketing's batches of a step's budget (every sequence once, so the
        dataset's tokens over its batches)."""
        batches = token_budget_batches(histogram, step_budget_tokens(plan, histogram, rows, microbatches))
        return histogram.real_tokens / int(batches.repeats.sum())

    @classmethod
    def sized(cls, plan, histogram, packing, real_tokens_per_step, microbatches, microbatch_slots):
        """By its budget: a step's slots scaled by the target over what its batches hold until they hold it
        within BUDGET_PRECISION on average (the share of a budget that real tokens fill changes slowly with the
        budget, so a few bucketings do), then cut into as many microbatches as memory needs (each budget at
        least the longest sequence)."""
        held: dict[int, float] = {}
        slots = max(histogram.longest, round(real_tokens_per_step))
        for _ in range(BUDGET_SEARCH_STEPS):
            if slots in held:
                break
            held[slots] = histogram.real_tokens / int(token_budget_batches(histogram, slots).repeats.sum())
            if abs(held[slots] / real_tokens_per_step - 1) <= BUDGET_PRECISION:
                break
            slots = max(histogram.longest, round(slots * real_tokens_per_step / held[slots]))
        step_slots = min(held, key=lambda slots: (abs(held[slots] - real_tokens_per_step), slots))
        # Each microbatch's budget lies between the longest sequence and what a microbatch may hold, so the
        # step's slots come in whole microbatches where those two meet: of the counts around the step's, the
        # one whose batches come closest.
        most = max(microbatch_slots, histogram.longest)
        count = microbatch_count(step_slots, most, microbatches)
        options = {}
        for each in (count, count - microbatches):
            if each >= microbatches:
                budget = min(max(histogram.longest, -(-step_slots // each)), most)
                options[each] = budget, cls.expected_real_tokens_per_step(
                    replace(plan, budget_tokens=budget), histogram, packing, 1, each)
        count = min(options, key=lambda each: (abs(options[each][1] - real_tokens_per_step), each))
        return replace(PLANS.get(plan.packer).build({"budget_tokens": options[count][0]}), sizing=StepSizing(1, count))

    @staticmethod
    def resolved(plan, histogram, memory_tokens_per_microbatch):
        """`memory` as the number of tokens the layout's memory allows a microbatch, named in the plan so that
        the report says what ran; a budget below the longest sequence refused."""
        if plan.budget_tokens == MEMORY:
            try:
                tokens = memory_tokens_per_microbatch()
            except InputError as error:
                raise InputError(f"strategy {plan.name!r}: {error.message}", parameter=error.parameter) from None
            plan = PLANS.get(plan.packer).build({"budget_tokens": tokens})
        _check_budget_holds(plan, histogram)
        return plan

    @staticmethod
    def largest_microbatch_tokens(plan, histogram, batch_size):
        """Its budget: every microbatch holds up to that many padded slots."""
        return step_budget_tokens(plan, histogram, batch_size)

    @staticmethod
    def random_stream(plan: ExecutionPlan) -> str:
        return plan.name

    @staticmethod
    def independent_devices(plan: ExecutionPlan) -> bool:
        return True

    def chunk(self, steps, devices):
        return {devices[-1]: self.draws.draw(self.rng, steps, devices[-1])}

    def shape_keys(self, rng, count):
        """A batch kind's shape: its sequences (rows) x its padded length."""
        kinds = self.draws.sampler.sample(rng, count)
        rows = self.batches.sequences_per_kind()
        return rows[kinds] * (self.settings.histogram.max_length + 1) + self.batches.padded_lengths[kinds]

    def items(self):
        """One item per device: a batch kind, its cost and tokens its features."""
        costs = self.draws.costs
        features = np.column_stack([costs.total_seconds[0], costs.real_tokens[0]])
        return ItemSource(self.draws.weights, features, 1, lambda items: self.draws.of_kinds(items[:, 0][None]))


class LengthGroupedSource(BatchSource):
    """Each cluster size deals its own stream of sorted megabatches to its devices, batch k to device k mod n."""

    kind = "group-by-length"

    def __init__(self, plan, packing, settings, purpose=0, simpy_devices=0):
        super().__init__(plan, packing, settings, purpose, simpy_devices)
        histogram = settings.histogram
        self.batch_sequences = sequences_per_batch(histogram, settings.batch_size, histogram.max_length)
        self.streams: dict[int, LengthGroupedStream] = {}

    @staticmethod
    def packing_request(plan: ExecutionPlan) -> tuple[str, None]:
        return plan.packer, None

    @staticmethod
    def device_batches(plan, histogram, packing, rng, steps, batch_size):
        """Batches at random from a stream of sorted megabatches: a device runs a megabatch's batches longest
        first, so its first steps are the longest batches; steps drawn from whole megabatches are a fair sample
        of all of them instead."""
        stream = LengthGroupedStream(histogram, sequences_per_batch(histogram, batch_size, histogram.max_length), rng)
        per_megabatch = stream.megabatch // stream.batch_sequences
        batches = stream.batches(-(-steps // per_megabatch) * per_megabatch)
        return padded_batches(batches[rng.choice(len(batches), size=steps, replace=False)])

    @staticmethod
    def random_stream(plan: ExecutionPlan) -> str:
        return plan.name

    @staticmethod
    def rows_per_device_step(plan: ExecutionPlan, histogram, batch_size: int) -> int:
        return sequences_per_batch(histogram, batch_size, histogram.max_length)

    @staticmethod
    def prices_distinct_batches(plan: ExecutionPlan) -> bool:
        return True  # whole megabatches are i.i.d.: priced per megabatch

    @staticmethod
    def largest_microbatch_tokens(plan, histogram, batch_size):
        """Its rows are as many as fill batch_size x max_length at the mean length; the batch that holds the
        longest sequences pads them all to it (HF's group_by_length puts that megabatch first to fail early)."""
        return sequences_per_batch(histogram, batch_size, histogram.max_length) * histogram.longest
    def expected_real_tokens_per_step(plan, histogram, packing, rows, microbatches):
        """Its batch's sequences (as many as fill `rows` x max_length at the mean length) at the mean length."""
        return sequences_per_batch(histogram, rows, histogram.max_length) * histogram.real_tokens / histogram.sequences

    @property
    def shares_draws(self) -> bool:
        return False  # a device's batch depends on how many devices share its megabatch

    def shape_keys(self, rng, count):
        """Rows of a fixed count padded to the batch's longest: the shape is the longest length. Batches
        are cut from megabatches sorted by length, as the Trainer does, from a shuffled dataset."""
        histogram = self.settings.histogram
        megabatch = megabatch_sequences(histogram.sequences, self.batch_sequences)
        batches_per_megabatch = megabatch // self.batch_sequences
        megabatches = -(-count // batches_per_megabatch)
        lengths = SequenceSampler(histogram).lengths_of(rng, (megabatches, megabatch))
        lengths.sort(axis=1)
        longest = lengths.reshape(megabatches, batches_per_megabatch, self.batch_sequences).max(axis=2)
        return rng.permuted(longest, axis=1).reshape(-1)[:count]

    def chunk(self, steps, devices):
        return {size: self._stream(size).priced(self.settings.cost_model, steps, size) for size in devices}

    def distinct_batches(self, devices):
        """Large clusters priced per megabatch (`megabatches`): seconds at a million devices, not minutes."""
        settings = self.settings
        megabatch = megabatch_sequences(settings.histogram.sequences, self.batch_sequences)
        steps = MegabatchSteps(settings.histogram, self.batch_sequences, megabatch, settings.cost_model,
                               self.generator(self.purpose + 1))
        return {size: steps.aggregates(size, settings.steps, self._rng(size)) for size in devices}

    def _stream(self, devices: int) -> LengthGroupedStream:
        if devices not in self.streams:
            self.streams[devices] = LengthGroupedStream(self.settings.histogram, self.batch_sequences,
                                                        self._rng(devices))
        return self.streams[devices]

    def _rng(self, devices: int) -> np.random.Generator:
        """Each cluster size's own stream, so that a size simulated alone draws what it draws among others."""
        stream = zlib.crc32(self.random_stream(self.plan).encode())
        return np.random.default_rng([self.settings.seed, stream, self.purpose, devices])


MEMORY = "memory"  # budget_tokens: what the run's layout lets a microbatch hold
# A sized budget: the most bucketings tried, and how close to the target its batches' mean must come (chosen).
BUDGET_SEARCH_STEPS = 8
BUDGET_PRECISION = 0.005


def step_budget_tokens(plan: ExecutionPlan, histogram: LengthHistogram, batch_size: int, microbatches: int = 1) -> int:
    """Padded token slots of a device's step: `batch_size x max_length` (batch_size the step's rows, every
    microbatch's), or the plan's budget_tokens for each of its `microbatches`."""
    if plan.budget_tokens is None:
        return batch_size * histogram.max_length
    if plan.budget_tokens == MEMORY:
        raise InputError(f"strategy {plan.name!r}: budget_tokens `memory` is resolved by a run, which knows the "
                         "model, hardware and layout; simulate through simbench.resolved.Run",
                         parameter="budget_tokens")
    _check_budget_holds(plan, histogram)
    return plan.budget_tokens * microbatches


def _check_budget_holds(plan: ExecutionPlan, histogram: LengthHistogram) -> None:
    """A microbatch holds whole sequences: its budget must hold the longest."""
    longest = histogram.longest
    if isinstance(plan.budget_tokens, int) and plan.budget_tokens < longest:
        raise InputError(f"strategy {plan.name!r}: budget_tokens {plan.budget_tokens:,} cannot hold the dataset's "
                         f"longest sequence of {longest:,} tokens; give at least {longest:,}",
                         parameter="budget_tokens")


def _budget_or_memory(value: Any) -> Any:
    # One message for every bad value, not one per member of the union.
    if value == MEMORY or value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise PydanticCustomError("budget_tokens", "must be a whole number of tokens >= 1 or `memory`")


@dataclass(frozen=True)
class LengthGroupedPlan(PlanType):
    """`group-by-length`: no parameters (its batches follow the scenario's batch size)."""

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        self.reject_unknown(parameters, ())
        return ExecutionPlan(self.name, self.source.kind, ExecutionMode.SORTED, packer=self.name)


@dataclass(frozen=True)
class TokenBudgetPlan(PlanType):
    """`token-budget`, with an optional `budget_tokens`; its name shows a budget given (`token-budget:budget_tokens=N`)
    and parses back to the same plan."""

    parameters = {"budget_tokens": Annotated[int | str, BeforeValidator(_budget_or_memory)]}

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        self.reject_unknown(parameters, tuple(self.parameters))
        budget = parameters.get("budget_tokens")
        name = self.name if budget is None else f"{self.name}:budget_tokens={budget}"
        return ExecutionPlan(name, self.source.kind, ExecutionMode.SORTED, packer=self.name, budget_tokens=budget)


register_plan(TokenBudgetPlan(
    "token-budget", "fairseq --max-tokens: length-sorted batches of up to batch_size x max_length padded token "
    "slots a microbatch (or `budget_tokens`: a number, or `memory` for what the layout's HBM allows), drawn at "
    "random", TokenBudgetSource))
register_plan(LengthGroupedPlan(
    "group-by-length", "HF Trainer group_by_length: shuffled megabatches of 50 batches sorted by length, dealt to "
    "the devices in turn; batches of as many sequences as fill batch_size x max_length at the mean length",
    LengthGroupedSource))
