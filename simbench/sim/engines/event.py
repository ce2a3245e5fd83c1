"""The SimPy engine: devices are processes, the all-reduce is a barrier, data preparation a host process.

    >>> import numpy as np
    >>> from simbench.sim.engines.event import run_simpy
    >>> timeline = run_simpy(np.array([[1.0, 2.0]]), allreduce_seconds=0.5)
    >>> timeline.end_seconds.tolist()   # the step waits for the slower device, then all-reduces
    [2.5]
"""

from __future__ import annotations

import numpy as np
import simpy

from simbench.sim.exchange import Exchange
from simbench.sim.timeline import StepTimeline
from simbench.sim.vts import pipeline_process


def run_simpy(device_seconds: np.ndarray, allreduce_seconds: float | np.ndarray,
              prepare_seconds: np.ndarray | None = None, exchange: Exchange = Exchange.NONE,
              stage_seconds: np.ndarray | None = None, buffer_samples: int = 0) -> StepTimeline:
    """Simulate data-parallel steps; `device_seconds` is (steps, devices), `allreduce_seconds` what follows
    the slowest device (one number for every step, or one a step).

    With `stage_seconds` (steps, devices, batch, stages) each device instead streams its batch
    through its own VTS pipeline (FIFOs of `buffer_samples` between stages) and its step time
    comes out of that model.
    """
    steps, devices = device_seconds.shape
    after_step = np.broadcast_to(np.asarray(allreduce_seconds, dtype=np.float64), (steps,))
    env = simpy.Environment()
    started = [env.event() for _ in range(steps)]
    arrivals = [[env.event() for _ in range(devices)] for _ in range(steps)]
    ended = [env.event() for _ in range(steps)]
    finish = np.zeros((steps, devices))
    start, end = np.zeros(steps), np.zeros(steps)
    exchanging = exchange is not Exchange.NONE and prepare_seconds is not None
    ready = [env.event() for _ in range(steps)] if exchanging else None

    def device(index: int):
        for step in range(steps):
            yield started[step]
            if stage_seconds is None:
                yield env.timeout(device_seconds[step, index])
            else:
                yield env.process(pipeline_process(env, stage_seconds[step, index], buffer_samples))
            finish[step, index] = env.now - start[step]
            arrivals[step][index].succeed()

    def host():
        """Padding exchange: all-gather lengths and sort, then hand the step its batches."""
        for step in range(steps):
            if step > 0:
                yield ended[step - 1] if exchange is Exchange.BLOCKING else started[step - 1]
            yield env.timeout(prepare_seconds[step])
            ready[step].succeed()

    def coordinator():
        for step in range(steps):
            if ready is not None:
                yield ready[step]
            start[step] = env.now
            started[step].succeed()
            yield env.all_of(arrivals[step])  # the all-reduce is a barrier: every device must arrive
            yield env.timeout(after_step[step])
            end[step] = env.now
            ended[step].succeed()

    if exchanging:
        env.process(host())
    for index in range(devices):
        env.process(device(index))
    env.process(coordinator())
    env.run()
    return StepTimeline(start, end, finish.max(axis=1), finish.mean(axis=1), allreduce_seconds, "simpy")
