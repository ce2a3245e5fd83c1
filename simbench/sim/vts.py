"""Variable tensor shape (VTS) pipelines: samples stream one by one through blocking model stages.

    >>> import numpy as np
    >>> from simbench.sim.vts import pipeline_departures
    >>> departures = pipeline_departures(np.array([[1.0, 1.0], [0.5, 0.5]]))
    >>> departures.tolist()   # the short sample waits for the long one to leave stage 2
    [[1.0, 2.0], [2.0, 2.5]]

A stage holds one sample; a sample leaves a stage only when the next stage is free (blocking flow shop).
The exact recurrence (`pipeline_departures`, vectorized over batches) and the SimPy model
(`pipeline_process`, stages as Resource(capacity=1)) must agree; the tests hold them to it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import simpy

from simbench.sim.pricing import DeviceCosts


def stage_seconds(cost_model, lengths: np.ndarray, stages: int) -> np.ndarray:
    """Per-stage seconds of each sample: shape lengths.shape + (stages,)."""
    flat = lengths.reshape(-1).astype(np.int64, copy=False)
    seconds = np.asarray(cost_model.vts_stage_seconds(flat, stages), dtype=np.float64)
    seconds = seconds.reshape(flat.size, -1)
    return np.broadcast_to(seconds, (flat.size, stages)).reshape(*lengths.shape, stages)


def pipeline_departures(seconds: np.ndarray) -> np.ndarray:
    """Times each sample leaves each stage; `seconds` is (..., samples, stages), samples enter in order at 0."""
    *batch_shape, samples, stages = seconds.shape
    # Samples and stages first, so that every step of the recurrence reads and writes contiguous memory.
    by_position = np.ascontiguousarray(np.moveaxis(seconds.reshape(-1, samples, stages), (1, 2), (0, 1)))
    departures = np.empty_like(by_position)
    previous = np.zeros_like(by_position[0])  # the sample ahead's departures (none: every stage free at 0)
    for sample in range(samples):
        entry = previous[0]
        for stage in range(stages):
            leave = departures[sample, stage]
            np.add(entry, by_position[sample, stage], out=leave)
            if stage + 1 < stages:
                np.maximum(leave, previous[stage + 1], out=leave)
            entry = leave
        previous = departures[sample]
    return np.moveaxis(departures, (0, 1), (1, 2)).reshape(seconds.shape)


def price_vts(cost_model, lengths: np.ndarray, stages: int) -> DeviceCosts:
    """Device costs of (steps, devices, batch) samples each streamed through a fresh pipeline per step.

    Makespan = throughput bound (every sample's first-stage time) + fill/drain (the last sample's later
    stages) + stalls (the rest: samples blocked behind longer ones). Each stage time splits into a
    fixed part (overhead) and a per-token part (compute); VTS strips padding, so padding costs nothing.
    """
    seconds = stage_seconds(cost_model, lengths, stages)
    makespan = pipeline_departures(seconds)[..., -1, -1]
    throughput_bound = seconds[..., 0].sum(axis=-1)
    fill_drain = seconds[..., -1, 1:].sum(axis=-1)
    fixed_per_sample = _fixed_stage_seconds(cost_model, stages)
    samples = lengths.shape[-1]
    compute = throughput_bound - samples * fixed_per_sample
    return DeviceCosts(
        compute_seconds=compute,
        padding_seconds=np.zeros_like(compute),
        overhead_seconds=samples * fixed_per_sample + fill_drain,
        stall_seconds=makespan - throughput_bound - fill_drain,
        real_tokens=lengths.sum(axis=-1).astype(np.float64),
        sequences=np.full(compute.shape, float(samples)),
    )


def padded_pipeline_seconds(cost_model, max_length: int, batch_size: int, stages: int) -> float:
    """Makespan of the same pipeline when every sample costs max_length (the reference VTS improves on)."""
    seconds = stage_seconds(cost_model, np.full((1, batch_size), max_length), stages)
    return float(pipeline_departures(seconds)[0, -1, -1])


def bucket_by_length(lengths: np.ndarray, window: int, rng: np.random.Generator) -> np.ndarray:
    """Per device, sort each window of `window` consecutive steps' samples by length and cut into batches.

    `lengths` is (steps, devices, batch); a last window shorter than `window` is bucketed on its own.
    Samples within a bucketed batch are shuffled: bucketing groups similar lengths, it does not order them.
    """
    steps, devices, batch_size = lengths.shape
    bucketed = np.empty_like(lengths)
    for first in range(0, steps, window):
        block = lengths[first:first + window]
        span = block.shape[0]
        per_device = np.sort(block.transpose(1, 0, 2).reshape(devices, span * batch_size), axis=1)
        bucketed[first:first + window] = per_device.reshape(devices, span, batch_size).transpose(1, 0, 2)
    return rng.permuted(bucketed, axis=2)


def pipeline_process(env: simpy.Environment, stages: list[simpy.Resource], seconds: np.ndarray,
                     log: list | None = None):
    """SimPy process: stream samples (rows of `seconds`, one column per stage) through blocking stages."""
    samples = [env.process(_sample_process(env, stages, seconds[sample], sample, log))
               for sample in range(seconds.shape[0])]
    yield env.all_of(samples)


def _sample_process(env, stages, seconds, sample, log):
    request = stages[0].request()
    yield request
    for stage, stage_resource in enumerate(stages):
        enter_seconds = env.now
        yield env.timeout(seconds[stage])
        finish_seconds = env.now
        if stage + 1 < len(stages):
            next_request = stages[stage + 1].request()
            yield next_request  # blocking: hold this stage until the next one is free
        stage_resource.release(request)
        if log is not None:
            log.append((sample, stage, enter_seconds, finish_seconds, env.now))
        if stage + 1 < len(stages):
            request = next_request


def pipeline_timeline(seconds: np.ndarray, lengths: np.ndarray) -> pd.DataFrame:
    """Run one batch through a SimPy pipeline; per (sample, stage): enter, finish and leave seconds."""
    env = simpy.Environment()
    stages = [simpy.Resource(env, capacity=1) for _ in range(seconds.shape[1])]
    log: list = []
    env.process(pipeline_process(env, stages, seconds, log))
    env.run()
    timeline = pd.DataFrame(log, columns=["sample", "stage", "enter_seconds", "finish_seconds", "leave_seconds"])
    timeline["length"] = lengths[timeline["sample"].to_numpy()]
    timeline["blocked_seconds"] = timeline["leave_seconds"] - timeline["finish_seconds"]
    return timeline.sort_values(["sample", "stage"], ignore_index=True)


def _fixed_stage_seconds(cost_model, stages: int) -> float:
    """The length-independent part of a stage time: what an empty sample costs. (A line through
    lengths 1 and 2 misses it by twice attention's quadratic term, and clips to 0 without a fixed part.)"""
    return float(stage_seconds(cost_model, np.array([0]), stages)[0, 0])
