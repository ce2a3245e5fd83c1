"""A linear cost model (seconds = a x token slots + c) whose simulations have closed forms.

The simulator's tests check it against these closed forms; it also serves for quick what-ifs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simbench.costmodels.base import BatchSet, CostModel, ExecutionMode, StepCosts
from simbench.costmodels.registry import CostModelType, register_cost_model


@dataclass(frozen=True)
class LinearCostModel(CostModel):
    """Device time = seconds_per_token x tokens processed + step_overhead_seconds.

    Padded, sorted and packed rows process all their slots; un-padded ones only real tokens.
    The all-reduce costs allreduce_latency_seconds per ring hop, 2 (n - 1) hops.
    """

    seconds_per_token: float = 1e-5
    step_overhead_seconds: float = 0.0
    allreduce_latency_seconds: float = 0.0
    vts_fixed_seconds: float = 0.0  # per sample and stage
    vts_seconds_per_token: float = 1e-5  # per stage
    vts_stages: int = 4  # pipeline stages when a plan does not give them
    vts_buffer_samples: int = 0  # samples each inter-stage FIFO holds

    def step_costs(self, batches: BatchSet, mode: ExecutionMode) -> StepCosts:
        real_tokens = batches.per_batch(batches.sequence_lengths.astype(np.float64), of="sequences")
        if mode is ExecutionMode.UNPADDED:
            slots = real_tokens
        else:
            slots = batches.per_batch(batches.row_slots.astype(np.float64), of="rows")
        return StepCosts(self.seconds_per_token * real_tokens, self.seconds_per_token * (slots - real_tokens),
                         np.full(batches.batches, self.step_overhead_seconds))

    def allreduce_seconds(self, devices: int) -> float:
        return 2 * (devices - 1) * self.allreduce_latency_seconds

    def ideal_sequence_seconds(self, sequence_lengths: np.ndarray) -> np.ndarray:
        return self.seconds_per_token * np.asarray(sequence_lengths, dtype=np.float64)

    def vts_stage_seconds(self, sequence_lengths: np.ndarray, stages: int) -> np.ndarray:
        return self.vts_fixed_seconds + self.vts_seconds_per_token * np.asarray(sequence_lengths, dtype=np.float64)

    def vts_pipeline_stages(self) -> int:
        return self.vts_stages


def _linear_with_defaults(model, hardware, gpus_per_replica) -> LinearCostModel:
    """The linear model takes neither model nor hardware: its default constants, for quick what-ifs."""
    return LinearCostModel()


register_cost_model(CostModelType("linear", "seconds = a x token slots + c, whatever the model and hardware "
                                  "(closed forms for tests)", _linear_with_defaults))
