"""Variable tensor shapes (Cerebras): samples stream through a pipeline of stages with their padding
stripped, optionally from batches bucketed by length; speed-ups are over the same pipeline padded."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from simbench.costmodels.base import ExecutionMode
from simbench.errors import InputError
from simbench.sim import vts
from simbench.sim.plans import ExecutionPlan, PlanKind, PlanType, StepTiming, register_plan
from simbench.sim.plans.unpadded import SequenceSource
from simbench.sim.vts_bucketed import bucketed_vts_aggregates
from simbench.validation import check_whole_number

DEFAULT_VTS_STAGES = 0  # from the model: its layers, grouped as the hardware profile says
DEFAULT_BUCKET_WINDOW = 8


class VtsSource(SequenceSource):
    """The un-padded plans' sequences (a paired comparison), bucketed if the plan says so, priced per stage."""

    kind = PlanKind.VTS
    step_noise = False  # a pipeline of stages, not GPU un-padding kernels: priced without step_costs
    layout_aware = False  # its devices are pipelines already, timed from per-sample stage seconds

    def __init__(self, plan, packing, settings, purpose=0, simpy_devices=0):
        super().__init__(plan, packing, settings, purpose, simpy_devices)
        self.shuffle_rng = self.generator(purpose + 1)
        self.first_timeline = None
        # SimPy runs each device's pipeline from the lengths: per cluster size when bucketed (else under 0).
        self.simpy_lengths: dict[int, list[np.ndarray]] = {}

    @staticmethod
    def simpy_events_per_device_step(plan: ExecutionPlan, cost_model, batch_size: int) -> int:
        return 3 + batch_size * vts.pipeline_stages(cost_model, plan.stages) * 3

    @staticmethod
    def independent_devices(plan: ExecutionPlan) -> bool:
        return not plan.bucket_window  # bucketing ties a device's steps together

    @staticmethod
    def device_batches(plan, histogram, packing, rng, steps, batch_size):
        raise InputError("a pipeline of layer stages, one sample at a time: no training step of one device to time")

    @staticmethod
    def prices_distinct_batches(plan: ExecutionPlan) -> bool:
        return bool(plan.bucket_window)  # a sorted window dealt round-robin repeats its batches

    def price_items(self, items):
        return vts.price_vts(self.settings.cost_model, self.sampler.lengths[items][None], self.plan.stages)

    def chunk_steps(self, steps):
        window = self.plan.bucket_window
        return max(1, steps // window) * window if window else steps

    @property
    def shares_draws(self):
        # Bucketing deals each cluster's own global batch: a smaller cluster's devices do not hold what the first
        # devices of a larger one hold (those get the shortest samples of every band).
        return not self.plan.bucket_window

    def chunk(self, steps, devices):
        plan, cost_model = self.plan, self.settings.cost_model
        lengths = self.draw(steps, devices[-1])
        if not plan.bucket_window:
            self._keep(0, lengths)
            return {devices[-1]: vts.price_vts(cost_model, lengths, plan.stages)}
        by_size = {}
        for size in sorted(devices, reverse=True):  # the largest first: its shuffles as when it runs alone
            bucketed = vts.bucket_by_length(lengths[:, :size], plan.bucket_window, self.shuffle_rng)
            self._keep(size, bucketed)
            by_size[size] = vts.price_vts(cost_model, bucketed, plan.stages)
        return by_size

    def _keep(self, size: int, lengths: np.ndarray) -> None:
        """The lengths the timeline and SimPy need (SimPy: up to its largest cluster)."""
        if self.first_timeline is None:
            self.first_timeline = self._timeline_of(lengths[0, 0])
        if self.simpy_devices and size <= self.simpy_devices:
            self.simpy_lengths.setdefault(size, []).append(lengths[:, :self.simpy_devices])

    def distinct_batches(self, devices):
        """Bucketed batches repeat across devices (a global batch dealt out): each step priced from its distinct
        ones, so a cluster of 2^20 devices costs about what one of a few thousand does."""
        settings = self.settings
        probabilities = settings.histogram.counts / settings.histogram.counts.sum()
        return {size: bucketed_vts_aggregates(probabilities, settings.histogram.lengths, size, settings.batch_size,
                                              self.plan.bucket_window, settings.steps, settings.cost_model,
                                              self.plan.stages, self.rng) for size in devices}

    def timing(self, devices, allreduce_seconds, simpy):
        settings, stages = self.settings, self.plan.stages
        stage_seconds = None
        if simpy:
            lengths = np.concatenate(self.simpy_lengths[devices if self.plan.bucket_window else 0])[:, :devices]
            stage_seconds = vts.stage_seconds(settings.cost_model, lengths, stages)
        padded = vts.padded_pipeline_seconds(settings.cost_model, settings.histogram.max_length, settings.batch_size,
                                             stages)
        return StepTiming(stage_seconds=stage_seconds, buffer_samples=vts.buffer_samples(settings.cost_model),
                          reference_step_seconds=padded + allreduce_seconds)

    def timeline(self):
        """The first device's first batch through the pipeline (drawn apart if no chunk was drawn)."""
        return self.first_timeline if self.first_timeline is not None else self._timeline_of(self.first_batch())

    def _timeline_of(self, lengths: np.ndarray):
        cost_model = self.settings.cost_model
        return vts.pipeline_timeline(vts.stage_seconds(cost_model, lengths, self.plan.stages), lengths,
                                     vts.buffer_samples(cost_model))


@dataclass(frozen=True)
class VtsPlan(PlanType):
    """`vts[:stages=S]` and `vts-bucketed[:stages=S][:window=K]`."""

    bucketed: bool

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        self.reject_unknown(parameters, ("stages", "window") if self.bucketed else ("stages",))
        values = {"stages": DEFAULT_VTS_STAGES, "window": DEFAULT_BUCKET_WINDOW if self.bucketed else 0, **parameters}
        for key, value in parameters.items():
            check_whole_number(value, f"strategy {self.name!r}: {key}", minimum=1)
        display = self.name
        if values["stages"] != DEFAULT_VTS_STAGES:
            display += f":stages={values['stages']}"
        if self.bucketed and values["window"] != DEFAULT_BUCKET_WINDOW:
            display += f":window={values['window']}"
        return ExecutionPlan(display, PlanKind.VTS, ExecutionMode.UNPADDED, stages=values["stages"],
                             bucket_window=values["window"])


register_plan(VtsPlan("vts", "Cerebras variable tensor shapes: samples stream through a stage pipeline, padding "
                      "stripped", VtsSource, bucketed=False))
register_plan(VtsPlan("vts-bucketed", "variable tensor shapes with batches bucketed by length", VtsSource,
                      bucketed=True))
