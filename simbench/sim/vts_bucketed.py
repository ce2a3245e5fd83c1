"""Bucketed VTS at any cluster size: a step priced from its distinct device batches, not from every device.

Bucketing sorts a window of global batches by length and deals each global batch round-robin, so the
devices between two length boundaries hold the same samples (`windows.dealt_batches`): a step of a
million devices holds a few hundred distinct batches. Each device then shuffles its batch, and the
order of its samples sets when they block in the pipeline, so devices sharing a batch still differ:
every device is priced while a batch is shared by at most PERMUTATIONS_PER_BATCH devices; beyond, that
many shuffles are priced and the slowest of the batch's m devices is drawn from them by inversion at
U^(1/m) (it can reach their slowest, not beyond: shuffles of one batch differ by under 1 % on Wikipedia).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from simbench.sim import vts
from simbench.sim.engines.vectorized import StepAggregates
from simbench.sim.windows import FIELDS, dealt_batches

# Shuffles priced per distinct batch: every device of a batch shared by at most this many.
PERMUTATIONS_PER_BATCH = 32
# Pipelines priced at once: bounds memory (their stage times and departures) whatever the cluster.
PIPELINES_PER_PART = 1 << 14


def bucketed_vts_aggregates(probabilities: np.ndarray, lengths: np.ndarray, devices: int, batch_size: int,
                            window: int, steps: int, cost_model, stages: int,
                            rng: np.random.Generator) -> StepAggregates:
    """Steps of `devices` devices streaming bucketed batches through their pipelines (`vts.bucket_by_length`
    and `vts.price_vts`, in distribution): per window, the sorted samples as counts per length (a multinomial
    draw, exactly the sorted lengths of window x devices x batch_size draws), each global batch dealt out."""
    sums = {name: np.zeros(steps) for name in ("total_seconds", *FIELDS)}
    slowest = np.full(steps, -np.inf)
    pending: list[tuple[int, np.ndarray, np.ndarray]] = []
    pending_pipelines = 0
    # A step may hold thousands of distinct batches (many lengths, many devices): it is priced in parts too.
    batches_per_part = max(1, PIPELINES_PER_PART // PERMUTATIONS_PER_BATCH)
    for step, batches, devices_each in _distinct_batches(probabilities, lengths, devices, batch_size, window, steps,
                                                         rng):
        for first in range(0, devices_each.size, batches_per_part):
            part = slice(first, first + batches_per_part)
            pending.append((step, batches[part], devices_each[part]))
            pending_pipelines += int(np.minimum(devices_each[part], PERMUTATIONS_PER_BATCH).sum())
            if pending_pipelines >= PIPELINES_PER_PART:
                _price(pending, cost_model, stages, rng, slowest, sums)
                pending, pending_pipelines = [], 0
    if pending:
        _price(pending, cost_model, stages, rng, slowest, sums)
    return StepAggregates(slowest, sums["total_seconds"] / devices, *(sums[name] / devices for name in FIELDS[:4]),
                          sums["real_tokens"], sums["sequences"], sums["masked_attention_seconds"] / devices)


def _distinct_batches(probabilities: np.ndarray, lengths: np.ndarray, devices: int, batch_size: int, window: int,
                      steps: int, rng: np.random.Generator) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Per step: its distinct batches and how many devices hold each."""
    for first in range(0, steps, window):
        span = min(window, steps - first)  # a last window shorter than `window` is bucketed on its own
        counts = rng.multinomial(span * devices * batch_size, probabilities)
        for step, (batches, devices_each) in enumerate(window_batches(counts, lengths, devices, batch_size)):
            yield first + step, batches, devices_each


def window_batches(counts: np.ndarray, lengths: np.ndarray, devices: int,
                   batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The distinct device batches (sorted lengths, one row each) of each global batch of a bucketed window whose
    samples are `counts` per length, and how many devices hold each (`vts.bucket_by_length` before its shuffle)."""
    per_step = devices * batch_size
    ends = np.cumsum(counts)
    for step in range(int(ends[-1]) // per_step):
        # Global batch `step` holds the sorted positions step x per_step .. (step + 1) x per_step - 1.
        inside = np.clip(ends, step * per_step, (step + 1) * per_step) - step * per_step
        yield dealt_batches(np.diff(inside, prepend=0), lengths, devices, batch_size)


def _price(pending: list[tuple[int, np.ndarray, np.ndarray]], cost_model, stages: int, rng: np.random.Generator,
           slowest: np.ndarray, sums: dict[str, np.ndarray]) -> None:
    """Price shuffles of the pending distinct batches; fold each step's slowest device and sums over devices in."""
    step_of = np.concatenate([np.full(each.size, step) for step, _, each in pending])
    batches = np.concatenate([batches for _, batches, _ in pending])
    devices_each = np.concatenate([each for _, _, each in pending])
    shuffles = np.minimum(devices_each, PERMUTATIONS_PER_BATCH)
    # Each device shuffles its bucketed batch, as bucket_by_length does.
    pipelines = rng.permuted(np.repeat(batches, shuffles, axis=0), axis=1)
    costs = vts.price_vts(cost_model, pipelines[None], stages)
    group = np.repeat(np.arange(batches.shape[0]), shuffles)
    totals = costs.total_seconds.ravel()
    order = np.lexsort((totals, group))  # each batch's shuffles, fastest first
    starts = np.cumsum(shuffles) - shuffles
    # The slowest of m devices: every device priced (m = shuffles), or drawn from the shuffles at U^(1/m).
    uniform = 1.0 - rng.random(batches.shape[0])
    drawn = np.ceil(shuffles * uniform ** (1.0 / devices_each)).astype(np.int64) - 1
    rank = np.where(devices_each > shuffles, np.clip(drawn, 0, shuffles - 1), shuffles - 1)
    np.maximum.at(slowest, step_of, totals[order[starts + rank]])
    # Sums over devices: each batch's m devices at the mean of its shuffles.
    weight = devices_each / shuffles
    per_pipeline = {"total_seconds": totals, **{name: getattr(costs, name).ravel() for name in FIELDS}}
    for name, values in per_pipeline.items():
        sums[name] += np.bincount(step_of[group], weights=weight[group] * values, minlength=slowest.size)
