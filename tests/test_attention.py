"""A plan's attention implementation: its labels and scenario keys, and how the transformer cost model prices each."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.costmodels import BatchSet, ExecutionMode, TransformerCostModel
from simbench.costmodels.base import ROW_MODE_OF_ATTENTION, Attention, attention_of
from simbench.costmodels.hardware_profile import DEFAULT_PROVENANCE, field_provenance
from simbench.costmodels.hardware import load_hardware
from simbench.costmodels.model import get_model
from simbench.costmodels.transformer import document_block_pairs
from simbench.errors import InputError
from simbench.scenario import StrategySpec
from simbench.sim.plans import parse_plan
from simbench.report.recommend.stacks import HF_ATTENTION

PACKED_MODES = [ROW_MODE_OF_ATTENTION[attention] for attention in Attention]


@pytest.mark.parametrize("text", ["lpfhp:max", "spfhp:3", "none", "greedy", "wlb", "packed-varlen:lpfhp:max",
                                  "packed-varlen:spfhp:3"])
@pytest.mark.parametrize("attention", list(Attention))
def test_labels_name_the_attention_and_read_back_to_the_same_plan(text, attention):
    plan = parse_plan(f"{text}:attention={attention.value}")
    assert attention_of(plan.mode) is attention
    assert parse_plan(plan.name) == plan
    # The label names any implementation but its plan's default, which it leaves as it always was.
    named = f"attention={attention.value}" in plan.name
    assert named == (attention in (Attention.DENSE_MASK, Attention.BLOCK_MASK))


def test_the_defaults_keep_their_labels_and_pricing():
    assert parse_plan("lpfhp:max").mode is ExecutionMode.PADDED
    assert parse_plan("lpfhp:max:attention=row") == parse_plan("lpfhp:max")
    assert parse_plan("lpfhp:max:attention=varlen") == parse_plan("packed-varlen:lpfhp:max")
    assert parse_plan("packed-varlen:lpfhp:max").mode is ExecutionMode.PACKED_VARLEN


def test_the_scenario_mapping_form_reads_as_the_label():
    spec = StrategySpec(name="lpfhp", max_depth="max", attention="dense-mask")
    assert spec.plan() == parse_plan("lpfhp:max:attention=dense-mask")
    assert spec.label == "lpfhp:max:attention=dense-mask"


@pytest.mark.parametrize("text, words", [("lpfhp:attention=flash", "attention must be one of"),
                                         ("sort:attention=varlen", "for packs"),
                                         ("unpad:attention=row", "takes no parameters")])
def test_bad_attention_is_refused_by_name(text, words):
    with pytest.raises(InputError, match=words):
        parse_plan(text)


def _batch(rows: list[list[int]], max_length: int) -> BatchSet:
    lengths = np.array([length for row in rows for length in row])
    sequence_row = np.array([index for index, row in enumerate(rows) for _ in row])
    return BatchSet(lengths, sequence_row, np.full(len(rows), max_length), np.zeros(len(rows), dtype=int), 1)


def _brute_force_block_pairs(rows: list[list[int]], block: int, causal: bool) -> float:
    pairs = 0
    for row in rows:
        blocks = -(-sum(row) // block)
        covering = [set() for _ in range(blocks)]
        start = 0
        for document, length in enumerate(row):
            for token in range(start, start + length):
                covering[token // block].add(document)
            start += length
        pairs += sum(1 for query in range(blocks) for key in range(blocks)
                     if not (causal and key > query) and covering[query] & covering[key])
    return pairs * block**2 * (2.0 if causal else 1.0)


rows_strategy = st.lists(st.lists(st.integers(1, 400), min_size=1, max_size=6), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(rows=rows_strategy, causal=st.booleans())
def test_block_pairs_are_those_a_document_mask_leaves(rows, causal):
    batch = _batch(rows, max(sum(row) for row in rows))
    assert document_block_pairs(batch, 128, causal=causal)[0] == _brute_force_block_pairs(rows, 128, causal)


MODELS = ["bert-large", dataclasses.replace(get_model("llama-3.1-8b"), layers=2)]


@settings(max_examples=40, deadline=None)
@given(rows=rows_strategy, model=st.sampled_from(MODELS), hardware=st.sampled_from(["h200", "a100", "h100-sxm"]))
def test_pricing_orders_the_implementations(rows, model, hardware):
    """dense-mask computes what row does on a slower kernel; block-mask lies between varlen and dense-mask (never
    above the dense mask, which it would only replace: below varlen only where varlen's tiles cost more than the
    dense mask's whole row, rows of a few tokens)."""
    model = get_model(model)
    max_length = min(model.max_positions, max(sum(row) for row in rows))
    batch = _batch(rows, max(max_length, max(sum(row) for row in rows)))
    cost_model = TransformerCostModel(model, hardware)
    seconds = {attention: cost_model.attention_seconds(batch, ROW_MODE_OF_ATTENTION[attention])[0]
               for attention in Attention}
    assert seconds[Attention.DENSE_MASK] >= seconds[Attention.ROW]
    lowest = min(seconds[Attention.VARLEN], seconds[Attention.DENSE_MASK])
    assert lowest * (1 - 1e-12) <= seconds[Attention.BLOCK_MASK]
    assert seconds[Attention.BLOCK_MASK] <= seconds[Attention.DENSE_MASK] * (1 + 1e-12)
    steps = {attention: cost_model.step_costs(batch, ROW_MODE_OF_ATTENTION[attention]).total_seconds[0]
             for attention in Attention}
    assert steps[Attention.DENSE_MASK] >= steps[Attention.ROW] * (1 - 1e-12)


def test_the_dense_mask_reproduces_its_measurement():
    """Llama-3.1-8B x 2 layers, 2 x 8,192 on the h200 profile: a dense mask adds to the padded step what the H200
    measured (283 ms against 191 ms), the figure the fraction was taken from."""
    cost_model = TransformerCostModel(dataclasses.replace(get_model("llama-3.1-8b"), layers=2), "h200")
    rows = _batch([[8192], [8192]], 8192)
    padded = cost_model.step_costs(rows, ExecutionMode.PADDED).total_seconds[0]
    masked = cost_model.step_costs(rows, ExecutionMode.PACKED_DENSE_MASK).total_seconds[0]
    assert masked - padded == pytest.approx(0.283 - 0.191, rel=0.01)


def test_block_mask_skips_blocks_that_packs_of_short_documents_never_touch():
    cost_model = TransformerCostModel("bert-large", "h200")
    packs = _batch([[64] * 8], 512)
    seconds = {attention: cost_model.attention_seconds(packs, ROW_MODE_OF_ATTENTION[attention])[0]
               for attention in Attention}
    assert seconds[Attention.BLOCK_MASK] < seconds[Attention.DENSE_MASK]


def test_the_rates_say_where_they_come_from():
    provenance = field_provenance(load_hardware("h200"))
    assert provenance["dense_mask_attention_fraction"].startswith("measured")
    assert provenance["block_mask_attention_fraction"].startswith("assumed")
    overridden = field_provenance(load_hardware("h200", {"dense_mask_attention_fraction": 0.5}))
    assert overridden["dense_mask_attention_fraction"] == "chosen"
    assert set(DEFAULT_PROVENANCE) <= set(provenance)


def test_every_attention_has_a_transformers_implementation():
    assert set(HF_ATTENTION) == set(Attention)
    assert HF_ATTENTION[Attention.VARLEN] == "flash_attention_2"
    assert HF_ATTENTION[Attention.BLOCK_MASK] == "flex_attention"


@pytest.mark.parametrize("attention, words", [(Attention.ROW, "sdpa"), (Attention.DENSE_MASK, "sdpa"),
                                              (Attention.BLOCK_MASK, "flex_attention"),
                                              (Attention.VARLEN, "flash_attention_2")])
def test_recommend_writes_the_attn_implementation_the_run_priced(attention, words):
    from simbench.report.recommend.plan import Family, TrainingPlan
    from simbench.report.recommend.stacks import _row_attention_note
    from simbench.report.recommend.stacks import attention as attn_implementation

    plan = TrainingPlan(strategy="lpfhp:max", family=Family.PACKS, packer="lpfhp", gpus=8, max_length=512,
                        rows_per_step=2, microbatches=1, per_document_attention=attention is Attention.VARLEN,
                        recompute=None, zero_stage=None, gpus_per_replica=1, tp=1, pp=1, cp=1, virtual_stages=1,
                        cp_sharding="zigzag", overlap_gradient_sync=False, tokens_per_s_per_gpu=1.0,
                        relative_error=0.0, real_tokens_per_step=None, memory_verdict=None, attention=attention)
    assert attn_implementation(plan) == words
    # A `row` pack says what transformers' sdpa runs instead (a dense mask) and names the strategy that prices it.
    note = _row_attention_note(plan)
    assert (note is not None and "lpfhp:max:attention=dense-mask" in note) == (attention is Attention.ROW)
