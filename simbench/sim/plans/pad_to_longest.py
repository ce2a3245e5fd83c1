"""`pad-to-longest`: what people run by default, Hugging Face's `DataCollatorWithPadding` behind the Trainer's
random sampler: batches drawn at random from the shuffled dataset, each padded to its own longest sequence.

No sorting and no grouping: a device's `batch_size` sequences are drawn as `unpad` draws them (the same
sequences, so the two compare paired), and the batch runs padded to its longest, in a shape that changes
from step to step (SORTED mode: it pays the cost model's shape-change and first-sight costs as `sort` and
`group-by-length` do). With a 4D layout a device's step is all its microbatches' rows, padded to the step's
longest, as the other padded plans pad it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simbench.costmodels.base import ExecutionMode
from simbench.sim.batching import SequenceSampler
from simbench.sim.length_batching import padded_batches
from simbench.sim.plans import ExecutionPlan, PlanType, register_plan
from simbench.sim.plans.unpadded import SequenceSource
from simbench.sim.pricing import price_batches


class PadToLongestSource(SequenceSource):
    """Each device's batch as drawn, padded to its longest; devices draw independently."""

    kind = "pad-to-longest"
    family = "padding"

    @staticmethod
    def packing_request(plan: ExecutionPlan) -> tuple[str, None]:
        return plan.packer, None  # for the report's padding figures over an epoch; batches are drawn at random

    @staticmethod
    def independent_devices(plan: ExecutionPlan) -> bool:
        return True

    @staticmethod
    def device_batches(plan, histogram, packing, rng, steps, batch_size):
        return padded_batches(SequenceSampler(histogram).lengths_of(rng, (steps, batch_size)))

    def shape_keys(self, rng, count):
        """Rows of a fixed count padded to the batch's longest: the shape is the longest length."""
        return self.sampler.lengths_of(rng, (count, self.settings.batch_size)).max(axis=1)

    def chunk(self, steps, devices):
        lengths = self.draw(steps, devices[-1])
        return {devices[-1]: price_batches(self.settings.cost_model, padded_batches(lengths), self.plan.mode, steps,
                                           devices[-1])}

    def price_items(self, items):
        return price_batches(self.settings.cost_model, padded_batches(self.sampler.lengths[items]), self.plan.mode,
                             1, items.shape[0])


@dataclass(frozen=True)
class PadToLongestPlan(PlanType):
    """`pad-to-longest`: no parameters (its batches follow the scenario's batch size)."""

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        self.reject_unknown(parameters, ())
        return ExecutionPlan(self.name, self.source.kind, ExecutionMode.SORTED, packer=self.name)


register_plan(PadToLongestPlan(
    "pad-to-longest", "Hugging Face's default (DataCollatorWithPadding, random sampler): random batches of batch_size "
    "sequences, each padded to its own longest", PadToLongestSource))
