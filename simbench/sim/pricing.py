"""Per-(step, device) seconds of a plan's batches, split by cause, as (steps, devices) arrays.

Packs and sequences are priced here, VTS pipelines in `vts`; both engines read these arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simbench.costmodels.base import BatchSet, ExecutionMode


@dataclass(frozen=True, eq=False)
class DeviceCosts:
    """What each device spends on each step's batch (arrays of shape (steps, devices))."""

    compute_seconds: np.ndarray
    padding_seconds: np.ndarray
    overhead_seconds: np.ndarray
    stall_seconds: np.ndarray  # VTS pipelines only: time samples wait for the next stage to free up
    real_tokens: np.ndarray
    sequences: np.ndarray

    @property
    def total_seconds(self) -> np.ndarray:
        return self.compute_seconds + self.padding_seconds + self.overhead_seconds + self.stall_seconds

    def first_devices(self, devices: int) -> DeviceCosts:
        """The costs of devices 0..devices-1: a smaller cluster sees the same batches (common random numbers)."""
        return DeviceCosts(*(array[:, :devices] for array in self._arrays()))

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return (self.compute_seconds, self.padding_seconds, self.overhead_seconds, self.stall_seconds,
                self.real_tokens, self.sequences)

    @staticmethod
    def concatenate(chunks: list[DeviceCosts]) -> DeviceCosts:
        """Stack chunks of consecutive steps."""
        return DeviceCosts(*(np.concatenate(arrays, axis=0) for arrays in zip(*(c._arrays() for c in chunks))))

    @staticmethod
    def concatenate_devices(chunks: list[DeviceCosts]) -> DeviceCosts:
        """Side by side: chunks of the same steps on further devices."""
        return DeviceCosts(*(np.concatenate(arrays, axis=1) for arrays in zip(*(c._arrays() for c in chunks))))


def price_batches(cost_model, batches: BatchSet, mode: ExecutionMode, steps: int, devices: int) -> DeviceCosts:
    """Price a step-major BatchSet of steps x devices batches with the cost model."""
    costs = cost_model.step_costs(batches, mode)
    shape = (steps, devices)
    real_tokens = batches.per_batch(batches.sequence_lengths.astype(np.float64), of="sequences")
    sequences = np.bincount(batches.sequence_batch, minlength=batches.batches)
    return DeviceCosts(
        np.asarray(costs.compute_seconds, dtype=np.float64).reshape(shape),
        np.asarray(costs.padding_seconds, dtype=np.float64).reshape(shape),
        np.asarray(costs.overhead_seconds, dtype=np.float64).reshape(shape),
        np.zeros(shape),
        real_tokens.reshape(shape),
        sequences.astype(np.float64).reshape(shape),
    )
