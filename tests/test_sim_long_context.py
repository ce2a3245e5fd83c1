"""The simulator on packs too deep for a padded table: long contexts, packs of hundreds of short sequences.

The pack sampler reads only the flat form (`pack_lengths`, `pack_starts`), prices deep packs in parts,
and gives the same numbers as when the padded table could be built.
"""

import functools
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.transformer import TransformerCostModel
from simbench.experiment import run_experiment
from simbench.checked import parse_checked_scenarios as parse_scenarios
from simbench.sim import pricing
from simbench.sim.batching import PackSampler, SortedBatchSampler
from simbench.sim.pricing import price_batches, price_packs
from simbench.sim.simulate import simulate
from simbench.strategies import get_strategy
from simbench.strategies import packing as packing_module
from simbench.strategies.packing import Packing

# Measured against padding to max length, as the figures and closed forms here are.
simulate = functools.partial(simulate, baseline="none")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_context import long_context_histogram  # noqa: E402

COST_MODEL = TransformerCostModel("llama-3.1-8b", "h100-sxm")
CHAT_131K = long_context_histogram(131072, 20_000, "chat", seed=0)


def _refuse_tables(monkeypatch):
    """Any padded table of more than 64 bytes is refused: whatever simulates must do without one."""
    monkeypatch.setattr(packing_module, "DENSE_ROWS_LIMIT_BYTES", 64)


def test_deep_packs_at_131072_simulate_without_a_table_and_as_with_one(monkeypatch):
    ffd = get_strategy("ffd")(CHAT_131K, 131072, None)
    assert ffd.depth_used > 100  # hundreds of short conversations share one 131k row
    with_table = Packing.from_rows("ffd", 131072, None, ffd.rows, ffd.repeats)
    plans = ["ffd", "packed-varlen:ffd"]
    arguments = dict(batch_size=2, steps=30, seed=4)
    expected = simulate(CHAT_131K, plans, [1, 4, 256], COST_MODEL, packings={name: with_table for name in plans},
                        **arguments)
    _refuse_tables(monkeypatch)
    flat = Packing.from_packs("ffd", 131072, None, ffd.pack_lengths, ffd.pack_starts, ffd.repeats)
    result = simulate(CHAT_131K, plans, [1, 4, 256], COST_MODEL, packings={name: flat for name in plans}, **arguments)
    pd.testing.assert_frame_equal(result.summary, expected.summary, check_exact=True)
    pd.testing.assert_frame_equal(result.traces, expected.traces, check_exact=True)
    assert (result.summary.query("strategy != 'none'")["speedup"] > 1).all()


def test_sorted_batches_from_the_flat_form_equal_those_from_the_table():
    sort = get_strategy("sort")(CHAT_131K, 131072, None)
    ffd = get_strategy("ffd")(CHAT_131K, 131072, None)
    for packing in (sort, Packing.from_packs("ffd", 131072, None, ffd.pack_lengths, ffd.pack_starts, ffd.repeats)):
        table = Packing.from_rows(packing.strategy, 131072, None, packing.rows, packing.repeats, packing.slot_lengths)
        flat_batches = SortedBatchSampler(packing).batches(np.random.default_rng(5), 6, 3, 4)
        table_batches = SortedBatchSampler(table).batches(np.random.default_rng(5), 6, 3, 4)
        for field in ("sequence_lengths", "sequence_row", "row_slots", "row_batch"):
            assert np.array_equal(getattr(flat_batches, field), getattr(table_batches, field)), field
        # Sorted longest first: each pack's first sequence never grows along the sorted dataset.
        sampler = SortedBatchSampler(packing)
        assert np.all(np.diff(sampler.longest) <= 0)
        assert sampler.packing.sequences == packing.sequences


@pytest.mark.parametrize("mode", [ExecutionMode.PADDED, ExecutionMode.PACKED_VARLEN])
def test_pricing_in_parts_gives_the_costs_of_pricing_at_once(monkeypatch, mode):
    packing = get_strategy("ffd")(CHAT_131K, 131072, None)
    sampler = PackSampler(packing)
    picks = sampler.picks(np.random.default_rng(2), 5, 7, 3)
    whole = price_batches(COST_MODEL, sampler.batches_of(picks, 3), mode, 5, 7)
    monkeypatch.setattr(pricing, "SEQUENCES_PER_PART", 50)  # a few batches per part
    parts = price_packs(COST_MODEL, sampler, picks, 3, mode, 5, 7)
    for field in ("compute_seconds", "padding_seconds", "overhead_seconds", "real_tokens", "sequences"):
        assert np.array_equal(getattr(parts, field), getattr(whole, field)), field


def test_pack_features_are_the_sums_over_each_packs_sequences():
    packing = get_strategy("ffd")(CHAT_131K, 131072, None)
    features = PackSampler(packing).item_features()
    for pack in (0, packing.strategies_used // 2, packing.strategies_used - 1):
        lengths = packing.pack_lengths[packing.pack_starts[pack]:packing.pack_starts[pack + 1]].astype(np.float64)
        assert features[pack].tolist() == [lengths.sum(), (lengths**2).sum(), lengths.size]


SCENARIO = """
name: chat-131k
dataset:
  histogram:
    synthetic: lognormal
    sequences: 20000
    mixture:
      - {share: 0.7, median_length: 300, sigma: 0.9}
      - {share: 0.25, median_length: 2500, sigma: 0.8}
      - {share: 0.05, median_length: 40000, sigma: 1.0}
  max_length: 131072
model: llama-3.1-8b
hardware: {profile: h100-sxm, overrides: {hbm_capacity_bytes: 1.0e15}}   # of packs at 128k, not of memory
strategies: [ffd, {name: packed-varlen, packer: ffd}, {name: lpfhp, max_depth: max}]
baseline: none
devices: [1, 8, 1048576]
batch_size: 1
steps: 40
outputs: {lp_bounds: false}
"""


def test_a_chat_scenario_at_131072_runs_on_packs_without_a_table(monkeypatch):
    _refuse_tables(monkeypatch)
    scenario = parse_scenarios(SCENARIO, source="chat-131k.yaml", base_dir=Path("."))[0]
    result = run_experiment(scenario)
    assert (result.packing.query("strategy == 'ffd'")["depth_used"] > 100).all()
    scaling = result.scaling
    assert set(scaling["strategy"]) == {"none", "ffd:max", "packed-varlen:ffd:max", "lpfhp:max"}
    assert np.isfinite(scaling["speedup"]).all() and (scaling.query("strategy != 'none'")["speedup"] > 1).all()


def test_padding_exchange_counts_its_distinct_batches_and_refuses_too_many_before_any_work(monkeypatch):
    """A dealt step holds up to one batch per length present: at batch 32 on 2**20 devices that is millions
    of sequences a step, so the work estimate refuses 200 steps before anything is drawn or priced."""
    from simbench.errors import InputError
    from simbench.sim.plans import unpadded

    class Priced(Exception):
        """Raised where the exchange would start pricing: the estimate let the simulation through."""

    def pricing(*arguments, **keywords):
        raise Priced

    monkeypatch.setattr(unpadded, "exchange_aggregates", pricing)
    lengths_present = int(np.count_nonzero(CHAT_131K.counts))
    # Padding (the reference) and the plan draw 64 devices one by one; the plan deals 2**20 besides.
    rows = 200 * 32 * (64 + 64 + lengths_present)
    for plan in ("unpad-exchange", "unpad-exchange-overlap"):
        with pytest.raises(InputError, match="would draw and price about"):
            simulate(CHAT_131K, [plan], [1, 2**20], COST_MODEL, batch_size=32, steps=200, seed=0, max_rows=rows - 1)
        with pytest.raises(Priced):
            simulate(CHAT_131K, [plan], [1, 2**20], COST_MODEL, batch_size=32, steps=200, seed=0, max_rows=rows)
