"""Plans of the length-grouping batchers: `token-budget` (fairseq --max-tokens) and `group-by-length` (HF).

Both run batches of whole sequences padded to their batch's longest, in a shape that changes from step
to step (SORTED mode). Token-budget batches are drawn independently per device; length-grouped ones are
dealt round-robin from sorted megabatches, so neighbouring devices get similar lengths.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from simbench.costmodels.base import ExecutionMode
from simbench.sim.length_batching import BudgetBatchDraws, LengthGroupedStream
from simbench.sim.orderstat import ItemSource
from simbench.sim.plans import BatchSource, ExecutionPlan, PlanType, register_plan
from simbench.sim.batching import SequenceSampler
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
        self.batches = token_budget_batches(histogram, settings.batch_size * histogram.max_length)
        self.draws = BudgetBatchDraws(self.batches, settings.cost_model)

    @staticmethod
    def packing_request(plan: ExecutionPlan) -> tuple[str, None]:
        return plan.packer, None  # for the report's padding figures; batches come from the bucketing

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
    def random_stream(plan: ExecutionPlan) -> str:
        return plan.name

    @staticmethod
    def rows_per_device_step(plan: ExecutionPlan, histogram, batch_size: int) -> int:
        return sequences_per_batch(histogram, batch_size, histogram.max_length)

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


@dataclass(frozen=True)
class LengthGroupedPlan(PlanType):
    """`token-budget`, `group-by-length`: no parameters (the budget follows the scenario's batch size)."""

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        self.reject_unknown(parameters, ())
        return ExecutionPlan(self.name, self.source.kind, ExecutionMode.SORTED, packer=self.name)


register_plan(LengthGroupedPlan(
    "token-budget", "fairseq --max-tokens: length-sorted batches of up to batch_size x max_length padded token "
    "slots, drawn at random", TokenBudgetSource))
register_plan(LengthGroupedPlan(
    "group-by-length", "HF Trainer group_by_length: shuffled megabatches of 50 batches sorted by length, dealt to "
    "the devices in turn; batches of as many sequences as fill batch_size x max_length at the mean length",
    LengthGroupedSource))
