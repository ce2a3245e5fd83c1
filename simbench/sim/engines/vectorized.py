"""The vectorized engine: per-step aggregates over devices for many cluster sizes in one numpy pass.

A cluster of n devices trains on the batches of devices 0..n-1 of the largest cluster (common random
numbers), so its slowest device is a running maximum and its means running sums along the device axis.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from simbench.sim.exchange import Exchange
from simbench.sim.pricing import DeviceCosts
from simbench.sim.timeline import StepTimeline


@dataclass(frozen=True, eq=False)
class StepAggregates:
    """Per-step aggregates over a cluster's devices (arrays of shape (steps,))."""

    slowest_device_seconds: np.ndarray
    mean_device_seconds: np.ndarray
    compute_seconds: np.ndarray  # means over devices
    padding_seconds: np.ndarray
    overhead_seconds: np.ndarray
    stall_seconds: np.ndarray
    real_tokens: np.ndarray  # sums over devices
    sequences: np.ndarray
    masked_attention_seconds: np.ndarray | None = None  # a mean over devices, like compute; None: none

    def __post_init__(self):
        if self.masked_attention_seconds is None:
            object.__setattr__(self, "masked_attention_seconds", np.zeros(np.shape(self.compute_seconds)))

    @staticmethod
    def concatenate(chunks: list[StepAggregates]) -> StepAggregates:
        return StepAggregates(*(np.concatenate([getattr(chunk, field.name) for chunk in chunks])
                                for field in fields(StepAggregates)))


def aggregate_by_cluster_size(costs: DeviceCosts, cluster_sizes: list[int]) -> dict[int, StepAggregates]:
    """Step aggregates of each cluster size n, from (steps, devices) costs of at least max(n) devices."""
    slowest = np.maximum.accumulate(costs.total_seconds, axis=1)
    running = {name: np.cumsum(getattr(costs, name), axis=1) for name in
               ("compute_seconds", "padding_seconds", "overhead_seconds", "stall_seconds", "real_tokens", "sequences",
                "masked_attention_seconds")}
    running_total = np.cumsum(costs.total_seconds, axis=1)
    aggregates = {}
    for size in cluster_sizes:
        column = size - 1
        aggregates[size] = StepAggregates(
            slowest[:, column].copy(),
            running_total[:, column] / size,
            running["compute_seconds"][:, column] / size,
            running["padding_seconds"][:, column] / size,
            running["overhead_seconds"][:, column] / size,
            running["stall_seconds"][:, column] / size,
            running["real_tokens"][:, column].copy(),
            running["sequences"][:, column].copy(),
            running["masked_attention_seconds"][:, column] / size,
        )
    return aggregates


def step_timeline(slowest_device_seconds: np.ndarray, mean_device_seconds: np.ndarray,
                  allreduce_seconds: float | np.ndarray, prepare_seconds: np.ndarray | None, exchange: Exchange,
                  engine: str = "vectorized") -> StepTimeline:
    """Closed-form step times: a step starts when the previous ended and its data is ready; `allreduce_seconds`
    (one number, or one a step) follows the slowest device.

    Blocking exchange: data preparation starts when the previous step ends. Overlapped exchange:
    preparing step k starts when step k - 1 starts (the host works while the devices compute).
    """
    device_and_allreduce = slowest_device_seconds + allreduce_seconds
    steps = device_and_allreduce.size
    if exchange is Exchange.NONE or prepare_seconds is None:
        end = np.cumsum(device_and_allreduce)
        start = end - device_and_allreduce
    elif exchange is Exchange.BLOCKING:
        end = np.cumsum(device_and_allreduce + prepare_seconds)
        start = end - device_and_allreduce
    else:
        start, end = np.empty(steps), np.empty(steps)
        previous_start = previous_end = 0.0
        for step in range(steps):
            ready = previous_start + prepare_seconds[step]
            start[step] = max(previous_end, ready)
            end[step] = start[step] + device_and_allreduce[step]
            previous_start, previous_end = start[step], end[step]
    return StepTimeline(start, end, slowest_device_seconds, mean_device_seconds, allreduce_seconds, engine)
