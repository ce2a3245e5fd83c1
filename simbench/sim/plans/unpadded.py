"""Un-padding plans: sequences drawn from the histogram, no padding at all, kernels grouped by length;
with NVIDIA's padding exchange (blocking) or Baidu's (overlapped on the host)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from simbench.costmodels.base import ExecutionMode
from simbench.errors import InputError
from simbench.sim.batching import SequenceSampler, unpadded_batches
from simbench.sim.exchange import ExchangeCosts, deal_sorted
from simbench.sim.engines.order_statistics import ItemSource
from simbench.sim.plans import (BatchSource, Exchange, ExecutionPlan, PlanKind, PlanType, StepTiming,
                                register_plan)
from simbench.sim.pricing import price_batches
from simbench.sim.windows import exchange_aggregates


class SequenceSource(BatchSource):
    """Sequences drawn with replacement from the histogram; every plan of this family draws the same ones."""

    def __init__(self, plan, packing, settings, purpose=0, simpy_devices=0):
        super().__init__(plan, packing, settings, purpose, simpy_devices)
        self.rng = self.generator(purpose)
        self.sampler = SequenceSampler(settings.histogram)

    @staticmethod
    def largest_microbatch_tokens(plan, histogram, batch_size):
        """The largest step draws the longest sequence batch_size times (un-padded or padded to its longest)."""
        return batch_size * histogram.longest

    def draw(self, steps: int, devices: int) -> np.ndarray:
        """(steps, devices, batch size) sequence lengths."""
        return self.sampler.lengths_of(self.rng, (steps, devices, self.settings.batch_size))

    def first_batch(self) -> np.ndarray:
        """The sequence lengths of the first device's first batch, as the per-device engines draw it."""
        return self.sampler.lengths_of(self.generator(0), (self.settings.batch_size,))

    def shape_keys(self, rng, count):
        """Un-padded batches are one flat tensor: its shape is the batch's token count."""
        if self.plan.mode is not ExecutionMode.UNPADDED:
            return None
        return self.sampler.lengths_of(rng, (count, self.settings.batch_size)).sum(axis=1)

    def items(self):
        return ItemSource(self.sampler.item_weights, self.sampler.item_features(), self.settings.batch_size,
                          self.price_items)

    def price_items(self, items: np.ndarray):
        """DeviceCosts (1, devices) of the batches of sequences `items` (devices, batch size) indexes."""
        raise NotImplementedError


class UnpadSource(SequenceSource):
    """Each device's batch as drawn, or, with a padding exchange, the global batch sorted and dealt out."""

    kind = PlanKind.UNPAD
    fits_stragglers = True

    def __init__(self, plan, packing, settings, purpose=0, simpy_devices=0):
        super().__init__(plan, packing, settings, purpose, simpy_devices)
        self.exchange_costs = ExchangeCosts.from_cost_model(settings.cost_model)

    @staticmethod
    def independent_devices(plan: ExecutionPlan) -> bool:
        return plan.exchange is Exchange.NONE  # the exchange deals one global batch

    @staticmethod
    def device_batches(plan, histogram, packing, rng, steps, batch_size):
        if plan.exchange is not Exchange.NONE:
            raise InputError("the padding exchange deals a global batch out across devices; on the one device "
                             "measure times, its steps are unpad's")
        return unpadded_batches(SequenceSampler(histogram).lengths_of(rng, (steps, batch_size)))

    @staticmethod
    def prices_distinct_batches(plan: ExecutionPlan) -> bool:
        return plan.exchange is not Exchange.NONE  # devices between two length boundaries hold equal batches

    @staticmethod
    def distinct_rows_per_step(plan, histogram, batch_size, devices):
        if plan.exchange is Exchange.NONE:
            return 0
        # A dealt step changes batch only where a length boundary falls: at most one batch per length present.
        lengths_present = int(np.count_nonzero(histogram.counts))
        return batch_size * sum(min(size, lengths_present) for size in devices)

    def price_items(self, items):
        return price_batches(self.settings.cost_model, unpadded_batches(self.sampler.lengths[items]), self.plan.mode,
                             1, items.shape[0])

    def chunk(self, steps, devices):
        lengths = self.draw(steps, devices[-1])
        cost_model, mode = self.settings.cost_model, self.plan.mode
        if self.plan.exchange is Exchange.NONE:
            return {devices[-1]: price_batches(cost_model, unpadded_batches(lengths), mode, steps, devices[-1])}
        # The exchange deals each cluster's global batch anew, so every size gets its own batches.
        return {size: price_batches(cost_model, unpadded_batches(deal_sorted(lengths[:, :size])), mode, steps, size)
                for size in devices}

    def distinct_batches(self, devices):
        settings = self.settings
        key = ("exchange", self.random_stream(self.plan), self.purpose, tuple(devices))
        if key not in settings.priced_steps:
            histogram = settings.histogram
            probabilities = histogram.counts / histogram.counts.sum()
            settings.priced_steps[key] = {
                size: exchange_aggregates(probabilities, histogram.lengths, size, settings.batch_size, settings.steps,
                                          settings.cost_model, self.rng) for size in devices}
        return settings.priced_steps[key]

    def timing(self, devices, allreduce_seconds, simpy):
        if self.plan.exchange is Exchange.NONE or devices == 1:
            return StepTiming()
        allgather_seconds = self.exchange_costs.allgather_seconds(devices)
        per_step = allgather_seconds + self.exchange_costs.sort_seconds(devices, self.settings.batch_size)
        return StepTiming(prepare_seconds=np.full(self.settings.steps, per_step), allgather_seconds=allgather_seconds)


@dataclass(frozen=True)
class UnpadPlan(PlanType):
    """`unpad`, `unpad-exchange`, `unpad-exchange-overlap`: no parameters."""

    exchange: Exchange

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        self.reject_unknown(parameters, ())
        return ExecutionPlan(self.name, PlanKind.UNPAD, ExecutionMode.UNPADDED, exchange=self.exchange)


register_plan(UnpadPlan("unpad", "un-padding: no padding tokens, kernels grouped by length, each device's batch as "
                        "drawn", UnpadSource, Exchange.NONE))
register_plan(UnpadPlan("unpad-exchange", "un-padding with NVIDIA's padding exchange: the global batch sorted and "
                        "dealt out", UnpadSource, Exchange.BLOCKING))
register_plan(UnpadPlan("unpad-exchange-overlap", "un-padding with the exchange on the host, overlapped with the step "
                        "(Baidu)", UnpadSource, Exchange.OVERLAPPED))
