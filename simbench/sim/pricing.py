"""Per-(step, device) seconds of a plan's batches, split by cause, as (steps, devices) arrays.

Packs and sequences are priced here, VTS pipelines in `vts`; both engines read these arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simbench.costmodels.base import BatchSet, ExecutionMode

# Sequences priced at once. At long context a pack may hold hundreds of short sequences, so a chunk of a
# million packs could hold a hundred million sequences: pricing it in parts bounds the memory (~0.5 GB).
SEQUENCES_PER_PART = 1 << 22


@dataclass(frozen=True, eq=False)
class DeviceCosts:
    """What each device spends on each step's batch (arrays of shape (steps, devices))."""

    compute_seconds: np.ndarray
    padding_seconds: np.ndarray
    overhead_seconds: np.ndarray
    stall_seconds: np.ndarray  # VTS pipelines only: time samples wait for the next stage to free up
    real_tokens: np.ndarray
    sequences: np.ndarray
    masked_attention_seconds: np.ndarray | None = None  # StepCosts.masked_attention_seconds; None: none

    def __post_init__(self):
        if self.masked_attention_seconds is None:
            object.__setattr__(self, "masked_attention_seconds", np.zeros(np.shape(self.compute_seconds)))

    @property
    def total_seconds(self) -> np.ndarray:
        return (self.compute_seconds + self.padding_seconds + self.masked_attention_seconds + self.overhead_seconds
                + self.stall_seconds)

    def reshaped(self, steps: int, devices: int) -> DeviceCosts:
        return DeviceCosts(*(array.reshape(steps, devices) for array in self._arrays()))

    def first_devices(self, devices: int) -> DeviceCosts:
        """The costs of devices 0..devices-1: a smaller cluster sees the same batches (common random numbers)."""
        return DeviceCosts(*(array[:, :devices] for array in self._arrays()))

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return (self.compute_seconds, self.padding_seconds, self.overhead_seconds, self.stall_seconds,
                self.real_tokens, self.sequences, self.masked_attention_seconds)

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
        np.asarray(costs.stall_seconds, dtype=np.float64).reshape(shape),
        real_tokens.reshape(shape),
        sequences.astype(np.float64).reshape(shape),
        np.asarray(costs.masked_attention_seconds, dtype=np.float64).reshape(shape),
    )


def price_packs(cost_model, sampler, picks: np.ndarray, batch_size: int, mode: ExecutionMode, steps: int,
                devices: int) -> DeviceCosts:
    """`price_batches` of `sampler.batches_of(picks, batch_size)`, in parts of whole batches holding about
    SEQUENCES_PER_PART sequences each: every batch is priced on its own, so the costs are the same."""
    picks = picks.reshape(-1)
    batch_sequences = sampler.depths[picks].reshape(-1, batch_size).sum(axis=1)
    part_of = (np.cumsum(batch_sequences) - batch_sequences) // SEQUENCES_PER_PART
    if part_of.size == 0 or part_of[-1] == 0:
        return price_batches(cost_model, sampler.batches_of(picks, batch_size), mode, steps, devices)
    edges = np.concatenate([[0], np.flatnonzero(np.diff(part_of)) + 1, [part_of.size]])
    parts = [price_batches(cost_model, sampler.batches_of(picks[first * batch_size:last * batch_size], batch_size),
                           mode, 1, last - first) for first, last in zip(edges[:-1], edges[1:])]
    return DeviceCosts.concatenate_devices(parts).reshaped(steps, devices)
