"""Token-budget and length-grouped batching: against their one-at-a-time definitions, and as drawn by the simulator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.costmodels import BatchSet, ExecutionMode, TransformerCostModel
from simbench.histogram import LengthHistogram
from simbench.sim.length_batching import BudgetBatchDraws, LengthGroupedStream, padded_batches
from simbench.strategies import PackOptions, get_strategy
from simbench.strategies.group_by_length import (megabatch_sequences, padded_lengths, sequences_per_batch,
                                                 sort_megabatches)
from simbench.strategies.token_budget import token_budget_batches


def fairseq_batches(lengths_sorted, budget):
    """fairseq's batch_by_size: add sequences shortest first while (count + 1) x longest stays within the budget."""
    batches, current = [], []
    for length in lengths_sorted:
        if current and (len(current) + 1) * length > budget:
            batches.append(current)
            current = []
        current.append(int(length))
    return batches + ([current] if current else [])


@st.composite
def histograms(draw):
    max_length = draw(st.integers(1, 60))
    counts = draw(st.lists(st.integers(0, 30), min_size=max_length, max_size=max_length))
    budget = draw(st.integers(max_length, 4 * max_length + 40))
    return LengthHistogram.from_counts(counts), budget


@settings(max_examples=60, deadline=None)
@given(problem=histograms())
def test_token_budget_batches_are_fairseqs_batches(problem):
    histogram, budget = problem
    expected = fairseq_batches(np.repeat(histogram.lengths, histogram.counts), budget)
    batches = token_budget_batches(histogram, budget)
    found = []
    for kind in range(batches.kinds):
        runs = slice(batches.run_offsets[kind], batches.run_offsets[kind + 1])
        members = np.repeat(batches.run_lengths[runs], batches.run_counts[runs]).tolist()
        assert batches.padded_lengths[kind] == max(members)
        assert len(members) * max(members) <= budget
        found += [members] * int(batches.repeats[kind])
    assert sorted(found) == sorted(expected)


def test_token_budget_refuses_a_sequence_over_the_budget():
    with pytest.raises(Exception, match="cannot hold a sequence of 5 tokens"):
        token_budget_batches(LengthHistogram.from_counts([1, 0, 0, 0, 2]), 4)


def test_token_budget_strategy_pads_each_sequence_to_its_batch():
    histogram = LengthHistogram.from_counts([1, 0, 3])  # lengths 1, 3, 3, 3 with 6 slots: [1, 3] [3, 3]
    packing = get_strategy("token-budget")(histogram, 3, None, PackOptions(batch_size=2))
    assert packing.tokens == 12 and packing.real_tokens == 10 and packing.packs_total == 4


def hf_megabatch_order(lengths, batch_sequences, permutation, monkeypatch):
    """transformers' get_length_grouped_indices on the same shuffle (torch.randperm replaced by it)."""
    torch = pytest.importorskip("torch")
    trainer_utils = pytest.importorskip("transformers.trainer_pt_utils")
    monkeypatch.setattr(torch, "randperm", lambda n, generator=None: torch.as_tensor(permutation))
    indices = trainer_utils.get_length_grouped_indices(lengths.tolist(), batch_sequences)
    return lengths[indices]


@pytest.mark.parametrize("sequences, batch_sequences", [(7, 1), (400, 3), (1000, 2), (5000, 7)])
def test_megabatch_sort_is_hugging_faces(monkeypatch, sequences, batch_sequences):
    rng = np.random.default_rng(sequences)
    lengths = rng.integers(1, 300, sequences)
    permutation = rng.permutation(sequences)
    expected = hf_megabatch_order(lengths, batch_sequences, permutation, monkeypatch)
    ours = sort_megabatches(lengths[permutation], batch_sequences)
    # Ties may come in another order, but then they are the same lengths.
    assert np.array_equal(ours, expected)


def test_group_by_length_fills_the_packers_tokens_per_step_on_average():
    histogram = LengthHistogram.from_counts(np.r_[np.zeros(9), np.full(91, 50)])  # lengths 10..100, mean 55
    assert sequences_per_batch(histogram, 4, 100) == round(4 * 100 / 55)
    packing = get_strategy("group-by-length")(histogram, 100, None, PackOptions(batch_size=4, seed=2))
    assert packing.sequences == histogram.sequences and packing.real_tokens == histogram.real_tokens
    # Megabatches sorted by length pad far less than random batches of the same size.
    assert packing.efficiency > 0.9


def test_padded_lengths_are_each_batchs_longest():
    assert padded_lengths(np.array([5, 3, 9, 1, 2]), 2).tolist() == [5, 5, 9, 9, 2]


def small_cost_model():
    return TransformerCostModel("gpt2", "h100-sxm")


def test_budget_draws_price_each_distinct_batch_as_a_batch_of_its_own():
    histogram = LengthHistogram.from_counts(np.arange(1, 201) % 13)
    batches = token_budget_batches(histogram, 800)
    draws = BudgetBatchDraws(batches, small_cost_model())
    for kind in (0, batches.kinds // 2, batches.kinds - 1):
        runs = slice(batches.run_offsets[kind], batches.run_offsets[kind + 1])
        lengths = np.repeat(batches.run_lengths[runs], batches.run_counts[runs])
        alone = small_cost_model().step_costs(padded_batches(lengths[None, :]), ExecutionMode.SORTED)
        priced = draws.of_kinds(np.array([kind]))
        assert priced.compute_seconds[0] == pytest.approx(alone.compute_seconds[0])
        assert priced.overhead_seconds[0] == pytest.approx(alone.overhead_seconds[0])
        assert priced.real_tokens[0] == lengths.sum() and priced.sequences[0] == lengths.size
    # Drawn in proportion to their number: the mean real tokens of a batch approach the dataset's per batch.
    drawn = draws.draw(np.random.default_rng(0), 2000, 16)
    assert drawn.real_tokens.mean() == pytest.approx(histogram.real_tokens / batches.repeats.sum(), rel=0.02)


def test_length_grouped_stream_deals_sorted_megabatches_and_ignores_chunking():
    histogram = LengthHistogram.from_counts(np.arange(1, 301) % 17)
    stream = LengthGroupedStream(histogram, 5, np.random.default_rng(3))
    batches = stream.batches(3 * 50)
    assert megabatch_sequences(histogram.sequences, 5) == 250
    longest = batches.max(axis=1).reshape(3, 50)
    assert np.all(np.diff(longest, axis=1) <= 0), "within a megabatch, batches come longest first"
    whole = LengthGroupedStream(histogram, 5, np.random.default_rng(9)).priced(small_cost_model(), 30, 8)
    pieces = LengthGroupedStream(histogram, 5, np.random.default_rng(9))
    parts = [pieces.priced(small_cost_model(), steps, 8) for steps in (7, 11, 12)]
    assert np.array_equal(whole.total_seconds, np.concatenate([part.total_seconds for part in parts]))


def test_padded_batch_set_pads_each_row_to_its_batch():
    batch_set = padded_batches(np.array([[[3, 1]], [[2, 2]]]))
    assert isinstance(batch_set, BatchSet) and batch_set.batches == 2
    assert batch_set.row_slots.tolist() == [3, 3, 2, 2]


# --- as simulator plans ---------------------------------------------------------------------------

def chat_like_histogram() -> LengthHistogram:
    """Many short sequences and a few at the max length: where batch content varies most."""
    counts = np.zeros(2048, dtype=np.int64)
    counts[99:400] = 40
    counts[-1] = 300
    return LengthHistogram.from_counts(counts)


def test_plans_run_in_the_simulator_and_repeat_with_their_seed():
    from simbench.sim.simulate import simulate

    # Shapes seen: a new shape's first sight (80 ms, some 7 of these small steps) would swamp the waiting asserted
    # below with how often the baseline's own devices meet new shapes.
    args = dict(batch_size=2, steps=30, seed=5, shapes="seen")
    first = simulate(chat_like_histogram(), ["token-budget", "group-by-length"], [1, 8, 128], small_cost_model(),
                     **args)
    again = simulate(chat_like_histogram(), ["token-budget", "group-by-length"], [1, 8, 128], small_cost_model(),
                     **args)
    assert first.summary.equals(again.summary)
    summary = first.summary.set_index(["strategy", "devices"])
    assert summary.loc[("token-budget", 128), "engine"] == "order-statistics"
    assert summary.loc[("group-by-length", 128), "engine"] != "order-statistics"
    # A fixed number of sequences per batch: the megabatch's longest batch makes every other device wait.
    waiting = summary.loc["group-by-length", "waiting_seconds"]
    assert waiting.loc[1] == pytest.approx(0, abs=1e-12) and waiting.loc[128] > waiting.loc[8] > 0
    assert summary.loc[("group-by-length", 128), "speedup"] < summary.loc[("group-by-length", 1), "speedup"]
    assert set(first.packings) >= {"token-budget", "group-by-length"}


def test_token_budget_gives_the_same_cluster_speed_with_either_engine():
    from simbench.sim.simulate import simulate

    results = [simulate(chat_like_histogram(), ["token-budget"], [256], small_cost_model(), batch_size=2, steps=400,
                        seed=1, engine=engine, baseline="none").summary.set_index("strategy").loc["token-budget", "speedup"]
               for engine in ("vectorized", "order-statistics")]
    assert results[0] == pytest.approx(results[1], rel=0.02)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=2_000),
       st.sampled_from([300, 8_192, 70_000]),  # pairs counted in a table, in 32-bit and in 64-bit keys
       st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_group_by_length_packs_the_samplers_order_in_pairs_of_length_and_padded_length(lengths, max_length,
                                                                                       batch_size, seed):
    from simbench.strategies.group_by_length import length_grouped_order

    histogram = LengthHistogram.from_lengths(np.array(lengths), max_length)
    options = PackOptions(batch_size=batch_size, seed=seed)
    packing = get_strategy("group-by-length")(histogram, max_length, None, options)
    batch_sequences = sequences_per_batch(histogram, batch_size, max_length)
    ordered = length_grouped_order(np.repeat(histogram.lengths, histogram.counts), batch_sequences,
                                   np.random.default_rng(seed))
    pairs, counts = np.unique(np.column_stack([ordered, padded_lengths(ordered, batch_sequences)]), axis=0,
                              return_counts=True)
    assert np.array_equal(packing.pack_lengths, pairs[:, 0]) and np.array_equal(packing.slot_lengths, pairs[:, 1])
    assert np.array_equal(packing.repeats, counts)
