"""When each training step starts and ends: the result both engines produce for one (plan, devices).

The vectorized engine computes it in closed form; the SimPy engine measures it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np



@dataclass(frozen=True, eq=False)
class StepTimeline:
    """Per-step times (arrays of shape (steps,)); a step ends when its all-reduce ends."""

    start_seconds: np.ndarray
    end_seconds: np.ndarray
    slowest_device_seconds: np.ndarray
    mean_device_seconds: np.ndarray
    allreduce_seconds: float | np.ndarray  # what follows the slowest device: one number, or one a step
    engine: str

    @property
    def step_seconds(self) -> np.ndarray:
        return np.diff(self.end_seconds, prepend=0.0)

    @property
    def data_wait_seconds(self) -> np.ndarray:
        """Time between the previous step's end and this step's start: an exposed padding exchange."""
        return self.start_seconds - np.concatenate([[0.0], self.end_seconds[:-1]])
