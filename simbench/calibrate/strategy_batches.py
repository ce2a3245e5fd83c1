"""A scenario's strategies as batches to time: one device's `steps` batches per strategy, drawn from the
histogram with the simulator's own packers and samplers, as `BatchLayout`s.

    >>> from simbench.calibrate.strategy_batches import strategy_batches
    >>> from simbench.histogram import load_histogram
    >>> from simbench.sim.plans import parse_plan
    >>> plans = [(name, parse_plan(name)) for name in ("spfhp:3", "packed-varlen", "unpad", "vts")]
    >>> built = strategy_batches(plans, load_histogram("squad_1_1_384"), 384, steps=2, batch_size=4, seed=0)
    >>> list(built.layouts), built.baseline, list(built.refused)
    (['none', 'spfhp:3', 'packed-varlen', 'unpad'], 'none', ['vts'])

Padding (`none`) always comes first: speed-ups are measured against it, as the simulator's are. Packs are
drawn in proportion to their repeats (PADDED: a block-diagonal mask; PACKED_VARLEN: attention per sequence),
`sort` as consecutive batches of the sorted dataset, un-padded batches as sequences drawn from the histogram,
token-budget batches as the bucketing's kinds in proportion to their number, group-by-length batches at random
from a stream of sorted megabatches. What one device's training steps cannot show (a padding exchange between
devices, a pipeline of layer stages, a plug-in's batches) is refused with the reason.
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
from simbench.sim.batching import InverseCdf, PackSampler, SequenceSampler, SortedBatchSampler
from simbench.sim.length_batching import LengthGroupedStream
from simbench.sim.plans import REFERENCE_PLAN, Exchange, ExecutionPlan, PlanKind
from simbench.sim.plans.length_grouped import step_budget_tokens
from simbench.sim.simulate import plan_packing
from simbench.strategies.group_by_length import sequences_per_batch
from simbench.strategies.token_budget import token_budget_batches

if TYPE_CHECKING:
    from simbench.strategies.packing import Packing

EXCHANGE_REFUSED = ("the padding exchange deals a global batch out across devices; on the one device measure "
                    "times, its steps are unpad's")


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
            layouts[label] = plan_layouts(plan, histogram, max_length, steps, batch_size, seed, rng,
                                          cost_model=cost_model, packings=packings)
        except InputError as error:
            if label == reference:
                raise
            refused[label] = error.message
    return StrategyBatches(layouts, refused, reference)


def plan_layouts(plan: ExecutionPlan, histogram: LengthHistogram, max_length: int, steps: int, batch_size: int,
                 seed: int, rng: np.random.Generator, *, cost_model=None,
                 packings: Mapping[str, Packing] | None = None) -> list[BatchLayout]:
    """One device's `steps` batches of `plan` (packs as `strategy_batches` says); an InputError says why a plan has
    none to time."""
    if plan.kind == PlanKind.PACKING:
        packing = plan_packing(plan, histogram, batch_size=batch_size, seed=seed, cost_model=cost_model,
                               packings=dict(packings or {}))
        sorted_batches = plan.mode is ExecutionMode.SORTED
        sampler = SortedBatchSampler(packing) if sorted_batches else PackSampler(packing)
        picks = sampler.picks(rng, steps, 1, batch_size)
        return layouts_of(sampler.batches_of(picks, batch_size), plan.mode)
    if plan.kind == PlanKind.UNPAD:
        if plan.exchange is not Exchange.NONE:
            raise InputError(EXCHANGE_REFUSED)
        lengths = SequenceSampler(histogram).lengths_of(rng, (steps, batch_size))
        return [BatchLayout.unpadded(batch) for batch in lengths]
    if plan.kind == "token-budget":
        batches = token_budget_batches(histogram, step_budget_tokens(plan, histogram, batch_size))
        kinds = InverseCdf(batches.repeats).sample(rng, steps)
        return [BatchLayout.padded(np.repeat(batches.run_lengths[batches.run_offsets[kind]:batches.run_offsets[kind + 1]],
                                             batches.run_counts[batches.run_offsets[kind]:batches.run_offsets[kind + 1]]),
                                   int(batches.padded_lengths[kind]), ExecutionMode.SORTED) for kind in kinds]
    if plan.kind == "group-by-length":
        stream = LengthGroupedStream(histogram, sequences_per_batch(histogram, batch_size, max_length), rng)
        # A device runs a megabatch's batches longest first: its first steps are the longest batches. Steps
        # drawn at random from whole megabatches are a fair sample of all of them instead.
        per_megabatch = stream.megabatch // stream.batch_sequences
        batches = stream.batches(-(-steps // per_megabatch) * per_megabatch)
        chosen = batches[rng.choice(len(batches), size=steps, replace=False)]
        return [BatchLayout.padded(batch, int(batch.max()), ExecutionMode.SORTED) for batch in chosen]
    if plan.kind == PlanKind.VTS:
        raise InputError("a pipeline of layer stages, one sample at a time: no training step of one device to time")
    raise InputError(f"batches of kind {plan.kind!r} (a plug-in plan): measure knows no way to build them")


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
