"""Context-parallel attention: per-rank causal pairs against brute force, closed forms, the ring exchange."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.costmodels.model import get_model
from simbench.errors import InputError
from simbench.sim.parallel.context_parallel import (MASKS, SHARDINGS, context_parallel_work, kv_bytes_per_token,
                                                    ring_attention_seconds)


def _owners(lengths, row_tokens, cp, sharding):
    """Each position's rank, spelled out position by position."""
    positions = np.arange(row_tokens)
    if sharding == "contiguous":
        return positions // (row_tokens // cp)
    if sharding == "zigzag":
        chunk = positions // (row_tokens // (2 * cp))
        return np.minimum(chunk, 2 * cp - 1 - chunk)
    owner = np.empty(row_tokens, dtype=int)
    start = 0
    for size in list(lengths) + [row_tokens - sum(lengths)]:
        for piece in range(2 * cp):
            owner[start + piece * size // (2 * cp):start + (piece + 1) * size // (2 * cp)] = min(piece,
                                                                                               2 * cp - 1 - piece)
        start += size
    return owner


def _brute_force_pairs(lengths, row_tokens, cp, sharding, mask):
    """The (query rank, key rank) counts of the full L x L causal mask."""
    group = np.full(row_tokens, -1)
    start = 0
    for index, size in enumerate(lengths):
        group[start:start + size] = index if mask == "document" else 0
        start += size
    owner = _owners(lengths, row_tokens, cp, sharding)
    query, key = np.meshgrid(np.arange(row_tokens), np.arange(row_tokens), indexing="ij")
    allowed = (key <= query) & (group[query] == group[key]) & (group[query] >= 0)
    pairs = np.zeros((cp, cp))
    np.add.at(pairs, (owner[query[allowed]], owner[key[allowed]]), 1)
    return pairs


@st.composite
def _rows(draw, multiple_of_pieces=False):
    cp = draw(st.integers(1, 4))
    unit = 2 * cp
    row_tokens = unit * draw(st.integers(1, 8))
    lengths = []
    while True:
        size = draw(st.integers(1, row_tokens))
        if multiple_of_pieces:
            size = unit * ((size + unit - 1) // unit)
        if sum(lengths) + size > row_tokens or (lengths and draw(st.integers(0, 4)) == 0):
            break
        lengths.append(size)
    return lengths, row_tokens, cp


@settings(max_examples=80, deadline=None)
@given(_rows(), st.sampled_from(SHARDINGS), st.sampled_from(MASKS))
def test_pairs_match_the_brute_force_mask(row, sharding, mask):
    lengths, row_tokens, cp = row
    work = context_parallel_work(lengths, row_tokens, cp, sharding, mask=mask)
    assert np.array_equal(work.pairs[0], _brute_force_pairs(lengths, row_tokens, cp, sharding, mask))
    # Every causal pair is some rank's: the per-rank counts sum to the row's total.
    groups = lengths if mask == "document" else [sum(lengths)]
    assert work.rank_pairs.sum() == sum(size * (size + 1) // 2 for size in groups)
    assert work.rank_squared_tokens.sum() == pytest.approx(sum(size**2 for size in groups))
    assert work.kv_tokens.sum() == row_tokens and work.query_tokens.sum() == sum(lengths)


def test_rows_are_counted_independently():
    lengths, rows = [3, 5, 16, 7, 1], [0, 0, 1, 3, 3]
    together = context_parallel_work(lengths, 16, 2, "per-document", row_of_document=rows)
    assert together.pairs.shape == (4, 2, 2)
    for row in range(4):
        alone = context_parallel_work([n for n, r in zip(lengths, rows) if r == row], 16, 2, "per-document")
        assert np.array_equal(together.pairs[row], alone.pairs[0])
        assert np.array_equal(together.kv_tokens[row], alone.kv_tokens[0])


def test_rows_of_one_microbatch_sum_into_one_ring_pass():
    lengths, rows = [3, 5, 16, 7, 1], [0, 0, 1, 2, 2]
    work = context_parallel_work(lengths, 16, 2, "zigzag", row_of_document=rows)
    microbatches = work.grouped([1, 0, 1], groups=3)
    assert microbatches.pairs.shape == (3, 2, 2)
    assert np.array_equal(microbatches.pairs[1], work.pairs[0] + work.pairs[2])
    assert np.array_equal(microbatches.kv_tokens[0], work.kv_tokens[1])
    assert np.all(microbatches.pairs[2] == 0) and float(microbatches.imbalance[2]) == 1.0
    assert np.array_equal(microbatches.rank_squared_tokens[1], work.rank_squared_tokens[[0, 2]].sum(axis=0))
    with pytest.raises(InputError, match="group_of_row"):
        work.grouped([0, 1])


@pytest.mark.parametrize("cp", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("mask", MASKS)
def test_zigzag_splits_one_full_document_exactly_evenly(cp, mask):
    row_tokens = 2 * cp * 1024
    work = context_parallel_work([row_tokens], row_tokens, cp, "zigzag", mask=mask)
    # Chunks r and 2cp - 1 - r of h tokens: (2r + 1) h^2 + (4cp - 2r - 1) h^2 = 4 cp h^2 each, in pairs too.
    assert np.all(work.rank_pairs == work.rank_pairs[0, 0])
    assert np.all(work.rank_squared_tokens == 4 * cp * 1024**2)
    per_document = context_parallel_work([row_tokens], row_tokens, cp, "per-document", mask=mask)
    assert np.array_equal(per_document.pairs, work.pairs)  # one full document: the same split


@pytest.mark.parametrize("cp", [1, 2, 4, 8, 16])
def test_contiguous_loads_the_last_rank_2cp_minus_1_times_the_first(cp):
    """Rank r holds n = L / cp tokens after r n others: n r n + n (n + 1) / 2 pairs, (2r + 1) n^2 squared
    tokens. Last over first: 2 cp - 1 (in pairs (2 (cp - 1) n + n + 1) / (n + 1), which tends to it);
    slowest over mean: (2 cp - 1) / cp."""
    n = 512
    work = context_parallel_work([cp * n], cp * n, cp, "contiguous")
    squared = work.rank_squared_tokens[0]
    assert np.array_equal(squared, (2 * np.arange(cp) + 1) * n**2)
    assert squared[-1] / squared[0] == 2 * cp - 1
    assert work.rank_pairs[0, -1] / work.rank_pairs[0, 0] == pytest.approx((2 * (cp - 1) * n + n + 1) / (n + 1))
    assert float(work.imbalance[0]) == pytest.approx((2 * cp - 1) / cp)


@settings(max_examples=80, deadline=None)
@given(_rows(multiple_of_pieces=True), st.sampled_from(MASKS[:1]))
def test_per_document_balances_at_least_as_well_as_zigzag(row, mask):
    """Documents whose lengths are multiples of 2 cp (as packed-sequence CP kernels pad them to) are
    each split exactly evenly, so per-document sharding's slowest rank is the mean: never above zigzag's."""
    lengths, row_tokens, cp = row
    per_document = context_parallel_work(lengths, row_tokens, cp, "per-document", mask=mask)
    zigzag = context_parallel_work(lengths, row_tokens, cp, "zigzag", mask=mask)
    work = per_document.rank_squared_tokens[0]
    assert np.all(work == work[0])
    assert work.max() <= zigzag.rank_squared_tokens[0].max()
    assert float(per_document.imbalance[0]) <= float(zigzag.imbalance[0])


def test_per_document_sharding_gathers_documents_shorter_than_2cp():
    """Why the property above needs whole pieces: four 1-token documents at cp 2 land on rank 0,
    where zigzag spreads them two and two."""
    per_document = context_parallel_work([1, 1, 1, 1], 4, 2, "per-document")
    zigzag = context_parallel_work([1, 1, 1, 1], 4, 2, "zigzag")
    assert per_document.rank_pairs.tolist() == [[4.0, 0.0]]
    assert zigzag.rank_pairs.tolist() == [[2.0, 2.0]]


def test_work_is_priced_in_the_cost_models_units():
    """A whole document on one rank costs its length squared in the units the transformer cost model
    multiplies by attention_flops_per_token_squared."""
    model = get_model("llama-3.1-8b")
    work = context_parallel_work([3000, 1000], 4096, 1, "contiguous")
    rate = 1e15
    ring = ring_attention_seconds(work, attention_flops_per_token_squared=model.attention_flops_per_token_squared,
                                  attention_flops_per_s=rate, kv_bytes_per_token=0.0, link_bytes_per_s=1e9)
    assert float(ring.layer_seconds[0]) == pytest.approx(
        model.attention_flops_per_token_squared * (3000**2 + 1000**2) / rate)
    assert np.array_equal(work.attention_seconds(model.attention_flops_per_token_squared, rate), ring.compute_seconds)


def test_a_row_without_documents_has_no_work():
    work = context_parallel_work([], 16, 2, "per-document")
    assert np.all(work.pairs == 0) and work.kv_tokens.tolist() == [[8.0, 8.0]]
    assert float(work.imbalance[0]) == 1.0


def test_ring_hides_the_exchange_behind_compute_where_it_covers_it():
    cp, n = 4, 4096
    work = context_parallel_work([cp * n], cp * n, cp, "zigzag")
    flops, rate = 1.0, 1e9
    step_seconds = work.squared_tokens[0] * flops / rate
    kv = kv_bytes_per_token(kv_heads=8, head_dim=128, dtype_bytes=2, tp=8)
    assert kv == 512.0
    transfer = 1e-6 + n * kv / 1e9
    fast = ring_attention_seconds(work, attention_flops_per_token_squared=flops, attention_flops_per_s=rate,
                                  kv_bytes_per_token=kv, link_bytes_per_s=1e12)
    assert np.allclose(fast.exposed_exchange_seconds, 0.0)  # each step's compute covers its transfer
    assert np.allclose(fast.rank_seconds, fast.compute_seconds)
    slow = ring_attention_seconds(work, attention_flops_per_token_squared=flops, attention_flops_per_s=rate,
                                  kv_bytes_per_token=kv, link_bytes_per_s=1e9, link_latency_seconds=1e-6)
    ranks = np.arange(cp)
    # Step s of rank r uses rank r - s's keys; the first cp - 1 steps overlap a transfer each.
    source = (ranks[:, None] - ranks[None, :]) % cp
    steps = step_seconds[ranks[:, None], source]
    expected = np.maximum(steps[:, :-1], transfer).sum(axis=1) + steps[:, -1]
    assert np.allclose(slow.rank_seconds[0], expected)
    assert np.allclose(slow.exposed_exchange_seconds[0], expected - steps.sum(axis=1))
    assert float(slow.layer_seconds[0]) == pytest.approx(expected.max())
    assert slow.transfer_seconds.shape == (1, cp, cp - 1)


def test_one_rank_exchanges_nothing():
    work = context_parallel_work([100], 128, 1, "zigzag")
    ring = ring_attention_seconds(work, attention_flops_per_token_squared=2.0, attention_flops_per_s=1.0,
                                  kv_bytes_per_token=1e6, link_bytes_per_s=1.0, link_latency_seconds=1.0)
    assert float(ring.layer_seconds[0]) == 2.0 * 100**2
    assert float(ring.exposed_exchange_seconds[0, 0]) == 0.0


def test_many_documents_cost_no_quadratic_memory():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 2000, size=4000)
    rows = np.repeat(np.arange(40), 100)
    row_tokens = 2**17  # 100 documents of < 2000 tokens fit in each 128k row
    work = context_parallel_work(lengths, row_tokens, 16, "per-document", row_of_document=rows)
    assert work.pairs.shape == (40, 16, 16)
    assert work.rank_pairs.sum() == (lengths * (lengths + 1) // 2).sum()


@pytest.mark.parametrize("call,parameter", [
    (lambda: context_parallel_work([8], 10, 4, "contiguous"), "row_tokens"),
    (lambda: context_parallel_work([8], 12, 4, "zigzag"), "row_tokens"),
    (lambda: context_parallel_work([8, 9], 16, 2, "zigzag"), "document_lengths"),
    (lambda: context_parallel_work([0], 16, 2, "zigzag"), "document_lengths"),
    (lambda: context_parallel_work([1.5], 16, 2, "zigzag"), "document_lengths"),
    (lambda: context_parallel_work([4], 16, 0, "zigzag"), "cp"),
    (lambda: context_parallel_work([4], 16, 2, "ring"), "sharding"),
    (lambda: context_parallel_work([4], 16, 2, "zigzag", mask="bidirectional"), "mask"),
    (lambda: context_parallel_work([4, 4], 16, 2, "zigzag", row_of_document=[1, 0]), "row_of_document"),
    (lambda: ring_attention_seconds(context_parallel_work([4], 16, 2, "zigzag"), attention_flops_per_token_squared=1.0,
                                    attention_flops_per_s=0.0, kv_bytes_per_token=1.0, link_bytes_per_s=1.0),
     "attention_flops_per_s"),
    (lambda: kv_bytes_per_token(0, 128), "kv_heads"),
])
def test_bad_inputs_name_their_parameter(call, parameter):
    with pytest.raises(InputError) as raised:
        call()
    assert raised.value.parameter == parameter and parameter in str(raised.value)
