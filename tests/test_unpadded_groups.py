"""Un-padded pricing per length group: small groups run attention below its rate."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.costmodels import BatchSet, ExecutionMode, TransformerCostModel
from simbench.costmodels.transformer import _length_groups


def _batches(lengths_per_batch):
    lengths = np.concatenate([np.asarray(batch, dtype=np.int64) for batch in lengths_per_batch])
    rows = np.arange(lengths.size)
    batch = np.repeat(np.arange(len(lengths_per_batch)), [len(b) for b in lengths_per_batch])
    return BatchSet(lengths, rows, lengths.copy(), batch, len(lengths_per_batch))


def _model(half_saturation=0.0, boundaries=(128, 256, 384, 512)):
    return TransformerCostModel("bert-large", TransformerCostModel("bert-large", "a100-ideal").hardware.model_copy(
        update={"unpad_group_half_saturation_tokens": half_saturation, "unpad_group_boundaries": boundaries}))


def test_without_a_half_saturation_the_a100_default_is_unchanged():
    batches = _batches([[100, 300, 512], [17, 18]])
    default = TransformerCostModel("bert-large", "a100-ideal").step_costs(batches, ExecutionMode.UNPADDED)
    explicit = _model(0.0).step_costs(batches, ExecutionMode.UNPADDED)
    assert np.array_equal(default.total_seconds, explicit.total_seconds)


@pytest.mark.parametrize("sequences, length, half", [(1, 64, 100.0), (8, 200, 2000.0), (30, 500, 7000.0)])
def test_one_group_pays_its_attention_flops_times_half_over_its_tokens(sequences, length, half):
    batches = _batches([[length] * sequences])
    slow, fast = _model(half), _model(0.0)
    extra = (slow.step_costs(batches, ExecutionMode.UNPADDED).compute_seconds
             - fast.step_costs(batches, ExecutionMode.UNPADDED).compute_seconds)[0]
    hardware = fast.hardware
    tokens = sequences * length
    slowdown = (tokens + hardware.half_saturation_tokens) / tokens
    attention_flops = fast.model.attention_flops_per_token_squared * sequences * length**2
    assert extra == pytest.approx(slowdown * attention_flops * half / tokens / hardware.attention_flops_per_s)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 512), min_size=2, max_size=40), st.floats(1.0, 1e4))
def test_the_same_sequences_cost_more_in_more_smaller_groups(lengths, half):
    batches = _batches([lengths])
    coarse = _model(half, boundaries=(512,)).step_costs(batches, ExecutionMode.UNPADDED).total_seconds[0]
    fine = _model(half, boundaries=tuple(range(1, 513))).step_costs(batches, ExecutionMode.UNPADDED).total_seconds[0]
    assert fine >= coarse


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(1, 600), min_size=1, max_size=12), min_size=1, max_size=30),
       st.sampled_from([(128, 256, 384, 512), tuple(range(1, 513))]))
def test_groups_present_match_a_plain_count(lengths_per_batch, boundaries):
    groups = _length_groups(_batches(lengths_per_batch), boundaries)
    expected = {}
    for batch, lengths in enumerate(lengths_per_batch):
        for length in lengths:
            key = (batch, int(np.searchsorted(boundaries, length, side="left")))
            tokens, squares = expected.get(key, (0, 0))
            expected[key] = (tokens + length, squares + length**2)
    # Five groups are counted densely, 513 through the keys present: both must agree with the count.
    assert sorted(zip(groups.batch.tolist(), groups.tokens.tolist(), groups.squares.tolist())) == sorted(
        (batch, tokens, squares) for (batch, _), (tokens, squares) in expected.items())


def test_the_simulator_prices_un_padded_plans_with_the_curve_and_leaves_the_others():
    import simbench

    curved = _model(3000.0).hardware
    runs = {name: simbench.simulate("squad_1_1_384", ["spfhp:3", "unpad"], [1, 8], hardware=hardware, steps=20)
            .summary.set_index(["strategy", "devices"])["speedup"]
            for name, hardware in (("flat", "a100-ideal"), ("curved", curved))}
    assert (runs["curved"].loc["unpad"] < runs["flat"].loc["unpad"]).all()
    assert runs["curved"].loc["spfhp:3"].tolist() == runs["flat"].loc["spfhp:3"].tolist()
