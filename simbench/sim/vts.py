"""Variable tensor shape (VTS) pipelines: samples stream one by one through the model's stages.

    >>> import numpy as np
    >>> from simbench.sim.vts import pipeline_departures
    >>> departures = pipeline_departures(np.array([[1.0, 1.0], [0.5, 0.5]]))
    >>> departures.tolist()   # no buffer: the short sample waits for the long one to leave stage 2
    [[1.0, 2.0], [2.0, 2.5]]
    >>> pipeline_departures(np.array([[1.0, 1.0], [0.5, 0.5]]), buffer_samples=1).tolist()
    [[1.0, 2.0], [1.5, 2.5]]

This is Cerebras' layer-pipelined execution: every layer resident on the wafer with its share of the
compute, samples flowing through. A stage works on one sample; a FIFO of `buffer_samples` samples sits
before every stage but the first, and a finished sample leaves its stage only when that FIFO has room
(blocking flow shop with finite buffers). The exact recurrence (`pipeline_departures`, vectorized over
batches) and the SimPy model (`pipeline_process`) must agree; the tests hold them to it.
"""

from __future__ import annotations

import numpy as np

from simbench.errors import InputError
from simbench.sim.pricing import DeviceCosts


def pipeline_stages(cost_model, stages: int) -> int:
    """`stages` when given (> 0); otherwise the cost model's own pipeline (its layers, grouped)."""
    if stages:
        return int(stages)
    model_stages = cost_model.vts_pipeline_stages()
    if model_stages is None:
        raise InputError("this cost model does not say how its layers form pipeline stages; give vts:stages=S")
    return int(model_stages)


def buffer_samples(cost_model) -> int:
    """Samples each inter-stage FIFO holds, as the cost model's hardware says."""
    return int(cost_model.vts_buffer_samples)


def stage_seconds(cost_model, lengths: np.ndarray, stages: int) -> np.ndarray:
    """Per-stage seconds of each sample: shape lengths.shape + (stages,); `stages` 0: the model's."""
    stages = pipeline_stages(cost_model, stages)
    flat = lengths.reshape(-1).astype(np.int64, copy=False)
    seconds = np.asarray(cost_model.vts_stage_seconds(flat, stages), dtype=np.float64)
    seconds = seconds.reshape(flat.size, -1)
    return np.broadcast_to(seconds, (flat.size, stages)).reshape(*lengths.shape, stages)


def pipeline_departures(seconds: np.ndarray, buffer_samples: int = 0) -> np.ndarray:
    """Times each sample leaves each stage; `seconds` is (..., samples, stages), samples queue at 0.

    A sample starts a stage when it has left the previous one and the sample ahead has left this one;
    it leaves when done and the FIFO behind allows: B + 1 samples ahead of it have left the next stage.
    """
    *batch_shape, samples, stages = seconds.shape
    # Samples and stages first, so that every step of the recurrence reads and writes contiguous memory.
    by_position = np.ascontiguousarray(np.moveaxis(seconds.reshape(-1, samples, stages), (1, 2), (0, 1)))
    departures = np.empty_like(by_position)
    free = np.zeros_like(by_position[0])  # when each stage's previous sample left it (0: never used)
    lookback = buffer_samples + 1
    for sample in range(samples):
        entry = None
        for stage in range(stages):
            leave = departures[sample, stage]
            start = free[stage] if entry is None else np.maximum(entry, free[stage])
            np.add(start, by_position[sample, stage], out=leave)
            if stage + 1 < stages and sample >= lookback:
                np.maximum(leave, departures[sample - lookback, stage + 1], out=leave)
            entry = leave
        free = departures[sample]
    return np.moveaxis(departures, (0, 1), (1, 2)).reshape(seconds.shape)


def price_vts(cost_model, lengths: np.ndarray, stages: int) -> DeviceCosts:
    """Device costs of (steps, devices, batch) samples each streamed through a fresh pipeline per step.

    Makespan = throughput bound (every sample's first-stage time) + fill/drain (the last sample's later
    stages) + stalls (the rest: samples blocked behind longer ones). Each stage time splits into a
    fixed part (overhead) and a per-token part (compute); VTS strips padding, so padding costs nothing.
    """
    seconds = stage_seconds(cost_model, lengths, stages)
    stages = seconds.shape[-1]
    makespan = pipeline_departures(seconds, buffer_samples(cost_model))[..., -1, -1]
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
    return float(pipeline_departures(seconds, buffer_samples(cost_model))[0, -1, -1])


def weight_streaming_speedup(cost_model, histogram) -> float:
    """VTS's speed-up over padding in Cerebras' weight-streaming mode: layers run one after another
    on the whole batch, so nothing stalls and the gain is the padded over the real per-sample work,
    averaged over the histogram (the quadratic attention term makes it exceed 1 / efficiency)."""
    seconds = stage_seconds(cost_model, histogram.lengths, 1)[:, 0]
    padded = float(stage_seconds(cost_model, np.array([histogram.max_length]), 1)[0, 0])
    counts = np.asarray(histogram.counts, dtype=np.float64)
    return padded * counts.sum() / float(np.dot(counts, seconds))


def bucket_by_length(lengths: np.ndarray, window: int, rng: np.random.Generator) -> np.ndarray:
    """Sort the samples of each window of `window` consecutive global batches (all devices' samples
    together) by length, cut them into global batches again and deal each one round-robin to the
    devices, so that all devices of a step get the same length band and none waits for another.

    `lengths` is (steps, devices, batch); a last window shorter than `window` is bucketed on its own.
    Samples within a bucketed batch are shuffled: bucketing groups similar lengths, it does not order them.
    """
    steps, devices, batch_size = lengths.shape
    bucketed = np.empty_like(lengths)
    for first in range(0, steps, window):
        block = lengths[first:first + window]
        span = block.shape[0]
        # Global batch k holds the k-th run of sorted samples; its j-th sample goes to device j mod devices.
        dealt = np.sort(block.reshape(-1)).reshape(span, batch_size, devices)
        bucketed[first:first + window] = dealt.transpose(0, 2, 1)
    return rng.permuted(bucketed, axis=2)


def pipeline_process(env: simpy.Environment, seconds: np.ndarray, buffer_samples: int = 0, log: list | None = None):
    """SimPy process: stream samples (rows of `seconds`, one column per stage) through the pipeline.

    Each stage is a Resource(capacity=1); the FIFO before a stage and the stage itself are B + 1
    places (a Resource of that capacity, served in request order): a sample takes a place behind a
    stage when it leaves the stage before, and gives it back when it leaves that stage.
    """
    import simpy  # imported here, like pandas below: registering the vts plans (`simbench list`) needs neither

    stages = seconds.shape[1]
    servers = [simpy.Resource(env, capacity=1) for _ in range(stages)]
    places = [None] + [simpy.Resource(env, capacity=buffer_samples + 1) for _ in range(stages - 1)]
    samples = [env.process(_sample_process(env, servers, places, seconds[sample], sample, log))
               for sample in range(seconds.shape[0])]
    yield env.all_of(samples)


def _sample_process(env, servers, places, seconds, sample, log):
    place = None
    server = servers[0].request()
    yield server
    for stage in range(len(servers)):
        enter_seconds = env.now
        yield env.timeout(seconds[stage])
        finish_seconds = env.now
        if stage + 1 < len(servers):
            next_place = places[stage + 1].request()
            yield next_place  # blocking: hold this stage until the FIFO behind it has room
        servers[stage].release(server)
        if place is not None:
            places[stage].release(place)
        if log is not None:
            log.append((sample, stage, enter_seconds, finish_seconds, env.now))
        if stage + 1 < len(servers):
            place = next_place
            server = servers[stage + 1].request()
            yield server


def pipeline_timeline(seconds: np.ndarray, lengths: np.ndarray, buffer_samples: int = 0) -> pd.DataFrame:
    """Run one batch through a SimPy pipeline; per (sample, stage): enter, finish and leave seconds."""
    import pandas as pd
    import simpy

    env = simpy.Environment()
    log: list = []
    env.process(pipeline_process(env, seconds, buffer_samples, log))
    env.run()
    timeline = pd.DataFrame(log, columns=["sample", "stage", "enter_seconds", "finish_seconds", "leave_seconds"])
    timeline["length"] = lengths[timeline["sample"].to_numpy()]
    timeline["blocked_seconds"] = timeline["leave_seconds"] - timeline["finish_seconds"]
    return timeline.sort_values(["sample", "stage"], ignore_index=True)


def _fixed_stage_seconds(cost_model, stages: int) -> float:
    """The length-independent part of a stage time: what an empty sample costs. (A line through
    lengths 1 and 2 misses it by twice attention's quadratic term, and clips to 0 without a fixed part.)"""
    return float(stage_seconds(cost_model, np.array([0]), stages)[0, 0])
