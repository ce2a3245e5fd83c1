"""The gradients' synchronisation between data-parallel replicas and the optimizer update after it, and how much
of it a step leaves exposed: the part the simulator adds after the slowest replica's step.

    >>> from simbench.sim.parallel.gradient_sync import GradientSync
    >>> sync = GradientSync(reduce_seconds=0.5, update_seconds=0.25, backward_cover_share=0.125)
    >>> float(sync.added_seconds(2.0))   # 0.5 - 0.125 x 2.0 of the reduction exposed, then the update
    0.5

Frameworks reduce a step's gradients once, after its last microbatch (gradient accumulation runs the others
without a sync). With overlap (Megatron-LM's overlap_grad_reduce, PyTorch DDP's and FSDP's buckets) each bucket
of gradients is reduced as soon as the backward pass has produced it, so the reduction runs under the last
microbatch's backward on the first pipeline stage, the stage that finishes a 1F1B step last; the last bucket is
ready only when that backward ends, so its reduction is always exposed. With overlap_param_gather the updated
parameters' all-gather runs under the next step's first forward in the same way, the first bucket exposed.
The update itself waits for every reduction and hides under nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GradientSync:
    """One step's synchronisation on the GPU that finishes it, in seconds, and the share of a replica's step
    that can hide it (0: none, the whole sync follows the step).

    The cover is the first stage's backward of the last microbatch (for the reduction) and its forward of the
    first (for the gather), as shares of a replica's step; at a step of s seconds the reduction exposes
    max(reduce - backward_cover_share x s, reduce_floor_seconds), the gather likewise."""

    reduce_seconds: float  # the all-reduce (ZeRO 0) or reduce-scatter of this GPU's gradients
    update_seconds: float = 0.0  # the optimizer's update of this GPU's shard: after the reduction, never hidden
    gather_seconds: float = 0.0  # the updated parameters' all-gathers (ZeRO >= 1)
    reduce_floor_seconds: float = 0.0  # the last bucket's reduction: exposed even with overlap
    gather_floor_seconds: float = 0.0  # the first bucket's gather: needed before the first forward starts
    backward_cover_share: float = 0.0
    forward_cover_share: float = 0.0

    @property
    def communication_seconds(self) -> float:
        """The collectives' seconds, hidden or not."""
        return self.reduce_seconds + self.gather_seconds

    def exposed_seconds(self, step_seconds):
        """The collectives' seconds a replica step of `step_seconds` (a number or an array) leaves exposed."""
        step = np.asarray(step_seconds, dtype=np.float64)
        return (_exposed(self.reduce_seconds, self.reduce_floor_seconds, self.backward_cover_share * step)
                + _exposed(self.gather_seconds, self.gather_floor_seconds, self.forward_cover_share * step))

    def added_seconds(self, step_seconds):
        """What follows the slowest replica's step of `step_seconds`: the exposed collectives and the update."""
        return self.exposed_seconds(step_seconds) + self.update_seconds

    def hidden_seconds(self, step_seconds):
        """The collectives' seconds the step of `step_seconds` covers."""
        return self.communication_seconds - self.exposed_seconds(step_seconds)


def _exposed(seconds: float, floor_seconds: float, cover_seconds):
    # No cover (overlap off): all of it, the floor notwithstanding.
    return np.where(cover_seconds > 0, np.maximum(seconds - cover_seconds, min(floor_seconds, seconds)), seconds)


def gradient_sync_of(cost_model, devices: int) -> GradientSync:
    """The sync of `devices` replicas as `cost_model` prices it: its own `gradient_sync` where it prices one (a 4D
    replica), else its `allreduce_seconds`, all of it after the step (the update is then in its step)."""
    priced = cost_model.gradient_sync(devices)
    if priced is not None:
        return priced
    return GradientSync(reduce_seconds=float(cost_model.allreduce_seconds(devices)))
