"""A scenario's strategies as batches to time: one device's `steps` batches per strategy, drawn from the
histogram with the simulator's own packers and samplers, as `BatchLayout`s.

    >>> from simbench.calibrate.strategy_batches import strategy_batches
    >>> from simbench.histogram import load_histogram
    >>> from simbench.sim.plans import parse_plan
    >>> plans = [(name, parse_plan(name)) for name in ("spfhp:3", "packed-varlen", "unpad", "vts")]
    >>> built = strategy_batches(plans, load_histogram("squad_1_1_384"), 384, steps=2, batch_size=4, seed=0)
    >>> list(built.layouts), built.baseline, list(built.refused)
    (['none', 'spfhp:3', 'packed-varlen', 'unpad'], 'none', ['vts'])

Padding (`none`) always comes first: speed-ups are measured against it, as the simulator's are. Each plan's
batches are what its batch source says one device's steps hold (`BatchSource.device_batches`, drawn as the
simulator draws them): packs in proportion to their repeats (with `wlb`'s outlier delay, a step's packs all of
one kind), `sort` as consecutive batches of the sorted dataset, un-padded and `pad-to-longest` batches as
sequences drawn from the histogram, token-budget batches as the bucketing's kinds in proportion to their number,
group-by-length batches at random from a stream of sorted megabatches. What one device's training steps cannot
show (a padding exchange between devices, a pipeline of layer stages, a plug-in plan that does not say) is
refused with the reason.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from simbench.calibrate.layout import BatchLayout
from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.sim.plans import REFERENCE_PLAN, ExecutionPlan
from simbench.sim.simulate import plan_packing

if TYPE_CHECKING:
    from simbench.strategies.packing import Packing


@dataclass(frozen=True)
class StrategyBatches:
    """Each measurable strategy's batches by label (padding first), and each other one with why not."""

    layouts: dict[str, list[BatchLayout]]
    refused: dict[str, str]
    baseline: str


def strategy_batches(strategies: Sequence[tuple[str, ExecutionPlan]], histogram: LengthHistogram, max_length: int,
                     steps: int, batch_size: int, seed: int, *, cost_model=None,
                     packings: Mapping[str, Packing] | None = None) -> StrategyBatches:
    """`steps` batches of each (label, plan) of one device, rows of `max_length` slots and `batch_size` rows (or
    a token budget of batch_size x max_length slots); padding (`none`) added first when not listed. Packs are the
    simulator's (`simulate.plan_packing`): packed with `cost_model`'s attention parity where a packer balances
    predicted work, or taken from `packings` (by plan name: a resolved run's, made on this histogram at this
    batch size and seed)."""
    if histogram.max_length < max_length:  # rows of max_length slots: packs fill them
        histogram = LengthHistogram(np.concatenate([histogram.counts, np.zeros(max_length - histogram.max_length,
                                                                               dtype=histogram.counts.dtype)]),
                                    name=histogram.name)
    reference = next((label for label, plan in strategies if plan.is_reference), None)
    if reference is None:
        reference = "none"
        strategies = [(reference, REFERENCE_PLAN), *strategies]
    ordered = sorted(strategies, key=lambda item: item[0] != reference)
    layouts, refused = {}, {}
    for label, plan in ordered:
        rng = np.random.default_rng([seed, zlib.crc32(label.encode())])
        try:
            layouts[label] = plan_layouts(plan, histogram, steps, batch_size, seed, rng,
                                          cost_model=cost_model, packings=packings)
        except InputError as error:
            if label == reference:
                raise
            refused[label] = error.message
    return StrategyBatches(layouts, refused, reference)


def plan_layouts(plan: ExecutionPlan, histogram: LengthHistogram, steps: int, batch_size: int, seed: int,
                 rng: np.random.Generator, *, cost_model=None,
                 packings: Mapping[str, Packing] | None = None) -> list[BatchLayout]:
    """One device's `steps` batches of `plan`, as its batch source draws them (`BatchSource.device_batches`, packs
    as `strategy_batches` says); an InputError says why a plan has none to time."""
    def packing() -> Packing | None:
        return plan_packing(plan, histogram, batch_size=batch_size, seed=seed, cost_model=cost_model,
                            packings=dict(packings or {}))

    return layouts_of(plan.source.device_batches(plan, histogram, packing, rng, steps, batch_size), plan.mode)


def layouts_of(batch_set: BatchSet, mode: ExecutionMode) -> list[BatchLayout]:
    """Each batch of a `BatchSet` as a layout run in `mode`."""
    row_ends = np.cumsum(np.bincount(batch_set.sequence_row, minlength=batch_set.row_slots.size))
    rows = np.split(batch_set.sequence_lengths, row_ends[:-1])
    batch_ends = np.cumsum(np.bincount(batch_set.row_batch, minlength=batch_set.batches))
    layouts, first = [], 0
    for end in batch_ends:
        layouts.append(BatchLayout(ExecutionMode(mode), tuple(tuple(int(length) for length in row)
                                                              for row in rows[first:end]),
                                   tuple(int(slots) for slots in batch_set.row_slots[first:end])))
        first = end
    return layouts
