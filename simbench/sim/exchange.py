"""Padding exchange for un-padded training: deal a sorted global batch round-robin, and what it costs.

NVIDIA's MLPerf BERT all-gathers the lengths of the global batch, sorts them and gives rank i the
sorted items i, i + n, i + 2n, ...; Baidu runs the same exchange on the host, hidden behind the previous step.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np


class Exchange(str, Enum):
    """Padding exchange before an un-padded step (NVIDIA MLPerf; Baidu overlaps it on the host): what the
    step timing of the engines does with it, so it lives here, below the plans that choose it."""

    NONE = "none"
    BLOCKING = "blocking"  # all-gather lengths, sort, deal: on the step's critical path
    OVERLAPPED = "overlapped"  # done on the host while the previous step runs

# Ring all-gather latency when the cost model carries no hardware profile (NCCL-like, intra-node).
DEFAULT_ALLGATHER_LATENCY_SECONDS = 5e-6
# Host sort cost per item and doubling (numpy sorts ~10M int32 per second per core on a CPU).
HOST_SORT_SECONDS_PER_ITEM_LOG2 = 5e-9
HOST_FIXED_SECONDS = 50e-6


def deal_sorted(lengths: np.ndarray) -> np.ndarray:
    """Rebalance (steps, devices, batch) lengths: per step sort the global batch, rank i takes i, i+n, ..."""
    steps, devices, batch_size = lengths.shape
    ordered = np.sort(lengths.reshape(steps, devices * batch_size), axis=1)
    return ordered.reshape(steps, batch_size, devices).transpose(0, 2, 1)


@dataclass(frozen=True)
class ExchangeCosts:
    """Seconds of one padding exchange: the all-gather of lengths and the host-side sort."""

    allgather_latency_seconds: float = DEFAULT_ALLGATHER_LATENCY_SECONDS

    @classmethod
    def from_cost_model(cls, cost_model) -> ExchangeCosts:
        """Hops at the cost model's all-reduce per-hop latency (its hardware profile's); a latency set to 0
        stays 0, the default is only for cost models that have none."""
        latency = cost_model.allreduce_latency_seconds
        return cls(DEFAULT_ALLGATHER_LATENCY_SECONDS if latency is None else float(latency))

    def allgather_seconds(self, devices: int) -> float:
        """Ring all-gather of a few bytes per device: latency-bound, n - 1 hops."""
        return (devices - 1) * self.allgather_latency_seconds

    def sort_seconds(self, devices: int, batch_size: int) -> float:
        items = devices * batch_size
        return HOST_FIXED_SECONDS + HOST_SORT_SECONDS_PER_ITEM_LOG2 * items * np.log2(max(items, 2))
