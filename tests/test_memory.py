"""Peak HBM per GPU of a 4D layout: against Megatron-LM's theoretical memory model and torchtitan's measured
figure for Llama-3-8B, its monotone properties, the token budget, and refusing a layout that does not fit."""

import pytest

from simbench.costmodels.hardware import HARDWARE_PRESETS, load_hardware
from simbench.costmodels.layout import ParallelLayout
from simbench.costmodels.memory import (
    GIB,
    MIXED_PRECISION_ADAM,
    MEGATRON_MIXED_PRECISION,
    activation_bytes_per_token,
    check_fits,
    fits,
    max_tokens_per_microbatch,
)
from simbench.costmodels.memory import peak_memory as peak_on_layout
from simbench.costmodels.model import ModelSpec
from simbench.errors import InputError

# meta-llama/Llama-3.1-405B config.json: 126 layers, hidden 16384, 128 heads, 8 key/value heads, ffn 53248.
LLAMA_405B = ModelSpec(name="llama-3.1-405b", family="decoder", layers=126, hidden=16384, heads=128, kv_heads=8,
                       ffn=53248, vocab=128256, max_positions=131072, gated_mlp=True, positions="rotary",
                       tied_embeddings=False, biases="none", norm="rmsnorm")


def peak_memory(model, *, tokens_per_microbatch, dp=1, precision=MIXED_PRECISION_ADAM, recompute="selective",
                zero_stage=0, **layout):
    """`peak_memory` on the layout these keywords give (selective recompute, no ZeRO unless told)."""
    return peak_on_layout(model, ParallelLayout(recompute=recompute, zero_stage=zero_stage, **layout),
                          tokens_per_microbatch=tokens_per_microbatch, replicas=dp, precision=precision)


def budget_of(model, hardware, *, dp=1, recompute="selective", zero_stage=0, **layout):
    return max_tokens_per_microbatch(model, hardware, ParallelLayout(recompute=recompute, zero_stage=zero_stage,
                                                                     **layout), replicas=dp)


def test_llama3_8b_against_megatrons_theoretical_memory_model():
    """Megatron-LM's megatron/training/theoretical_memory_usage.py (NVIDIA/Megatron-LM at 00caa53a), worked by
    hand for Llama-3-8B at tp 2, pp 2, dp 2, sequence 8192, micro-batch 1, 8 microbatches, distributed
    optimizer, selective recompute with sequence parallelism:
    weights and optimizer: the most loaded shard holds (transformer block / pp + embedding) / tp =
    (32 x 218,112,000 + 4,096) / 2 + 525,336,576) / 2 = 2,007,565,312 parameters at 6 + 12 / dp = 12 bytes:
    24,090,783,744 bytes;
    activations: s b h (18 + 4 ffn / h) = 8192 x 4096 x 32 bytes per layer, x 32 layers, + 8 s b pp (token
    ids) + s b h pp (embedding dropout), divided by tp: 17,213,489,152 bytes. Total 41,304,272,896 bytes
    (38.47 GiB). simbench, from its own per-tensor count (10 h + 4 kv + 6 ffn = 32 h bytes per token for this
    model) and 1F1B's 2 microbatches in flight on the first stage: 41,270,771,712 bytes, -0.08 %."""
    memory = peak_memory("llama-3.1-8b", tokens_per_microbatch=8192, tp=2, pp=2, dp=2, microbatches=8,
                         zero_stage=1, recompute="selective", precision=MEGATRON_MIXED_PRECISION)
    assert memory.stage == 0 and memory.in_flight_microbatches == 2
    assert memory.peak_bytes == pytest.approx(41_304_272_896, rel=0.10)
    assert memory.peak_bytes == pytest.approx(41_304_272_896, rel=0.005)  # as close as the two counts are


def test_llama3_8b_against_torchtitans_measured_peak():
    """torchtitan docs/performance.md, Table 1: Llama 3.1 8B on 8 H100s, FSDP (ZeRO-3) over 8, local batch 2 at
    sequence 8192, selective activation checkpointing, eager: 82.4 GiB of memory per GPU (measured). simbench,
    ZeRO-3 over 8 with 16 bytes of parameter, gradient and Adam state per parameter, selective recompute,
    16,384 tokens in the microbatch: 87.8 GiB, +6.6 %. torchtitan's selective policy (operator-level) keeps
    a different set of tensors than Megatron's, which simbench models; the tolerance is 10 %."""
    memory = peak_memory("llama-3.1-8b", tokens_per_microbatch=2 * 8192, dp=8, zero_stage=3, recompute="selective")
    assert memory.peak_bytes / GIB == pytest.approx(82.4, rel=0.10)


def test_activation_bytes_per_token_by_recompute():
    llama = "llama-3.1-8b"
    h = 4096
    assert activation_bytes_per_token(llama, "selective") == 32 * h  # 10 h + 4 kv + 6 ffn with kv = h / 4
    assert activation_bytes_per_token(llama, "none") == 34 * h + 4 * 32  # attention output and its statistics
    assert activation_bytes_per_token(llama, "full") == 2 * h  # the layer's input alone


@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_more_parallelism_never_raises_the_peak(zero_stage):
    base = dict(tokens_per_microbatch=8192, tp=2, pp=2, cp=1, dp=2, microbatches=8, zero_stage=zero_stage)
    peak = peak_memory("llama-3.1-70b", **base).peak_bytes
    for key in ("tp", "pp", "cp", "dp"):
        grown = peak_memory("llama-3.1-70b", **{**base, key: base[key] * 2}).peak_bytes
        if key == "dp" and zero_stage == 0:
            assert grown == peak  # nothing is sharded over data parallelism without ZeRO
        else:
            assert grown <= peak, key
    lower = [peak_memory("llama-3.1-70b", **{**base, "zero_stage": stage}).peak_bytes for stage in range(4)]
    assert lower == sorted(lower, reverse=True)


def test_recompute_lowers_activations():
    layout = dict(tokens_per_microbatch=8192, tp=8, pp=4, dp=4, microbatches=16)
    activations = [peak_memory("llama-3.1-70b", recompute=recompute, **layout).activation_bytes
                   for recompute in ("none", "selective", "full")]
    assert activations[0] > activations[1] > activations[2]


def test_interleaving_and_fewer_microbatches_change_what_is_in_flight():
    layout = dict(tokens_per_microbatch=8192, tp=8, pp=4, dp=4)
    assert peak_memory("llama-3.1-70b", microbatches=2, **layout).in_flight_microbatches == 2
    assert peak_memory("llama-3.1-70b", microbatches=16, **layout).in_flight_microbatches == 4
    # Megatron-LM's interleaving penalty on the first stage: 1 + (p - 1) / (p v)
    interleaved = peak_memory("llama-3.1-70b", microbatches=16, virtual_stages=2, **layout)
    assert interleaved.in_flight_microbatches == pytest.approx(4 * (1 + 3 / (4 * 2)))


def test_405b_on_one_gpu_is_refused_with_the_numbers():
    memory = peak_memory(LLAMA_405B, tokens_per_microbatch=8192, zero_stage=0)
    assert not fits(memory, "h100-sxm")
    with pytest.raises(InputError, match=r"GiB on pipeline stage 0 .*h100-sxm's 80.0 GiB") as error:
        check_fits(memory, "h100-sxm")
    assert error.value.parameter == "hbm_capacity_bytes"
    assert max_tokens_per_microbatch(LLAMA_405B, "h100-sxm") == 0
    # A layout like Llama 3's for 405B at 8k (TP 8, PP 16 with uneven stages: here 14 even ones of 9 layers,
    # optimizer state sharded over DP 128) fits an 80 GB H100
    fitted = peak_memory(LLAMA_405B, tokens_per_microbatch=8192, tp=8, pp=14, dp=128, microbatches=16,
                         zero_stage=1)
    assert fits(fitted, "h100-sxm")


def test_token_budget_is_the_largest_that_fits():
    layout = dict(tp=2, pp=2, cp=2, dp=2, microbatches=8, zero_stage=1)
    budget = budget_of("llama-3.1-8b", "h100-sxm", **layout)
    assert budget > 0 and budget % 2 == 0
    capacity = HARDWARE_PRESETS["h100-sxm"].hbm_capacity_bytes
    assert peak_memory("llama-3.1-8b", tokens_per_microbatch=budget, **layout).peak_bytes <= capacity
    assert peak_memory("llama-3.1-8b", tokens_per_microbatch=budget + 2, **layout).peak_bytes > capacity
    assert budget_of("llama-3.1-8b", "h200", **layout) > budget


def test_presets_state_their_datasheet_memory():
    assert HARDWARE_PRESETS["h100-sxm"].hbm_capacity_bytes == 80 * GIB
    assert HARDWARE_PRESETS["h200"].hbm_capacity_bytes == 141 * GIB
    assert HARDWARE_PRESETS["a100"].hbm_capacity_bytes == 40 * GIB
    assert HARDWARE_PRESETS["h100-sxm"].provenance["hbm_capacity_bytes"].startswith("datasheet:")
    with pytest.raises(InputError, match="hbm_capacity_bytes"):
        fits(peak_memory("bert-large", tokens_per_microbatch=512), load_hardware("cs-2"))


@pytest.mark.parametrize("bad, parameter", [
    (dict(tp=3), "tp"), (dict(pp=5, stage_layers="even"), "stage_layers"),
    (dict(pp=4, virtual_stages=3, stage_layers="even"), "stage_layers"), (dict(zero_stage=4), "zero_stage"),
    (dict(recompute="some"), "recompute"), (dict(tokens_per_microbatch=-1), "tokens_per_microbatch"),
    (dict(dp=0), "replicas"), (dict(microbatches=0), "microbatches")])
def test_bad_layouts_name_the_parameter(bad, parameter):
    with pytest.raises(InputError) as error:
        peak_memory("llama-3.1-8b", **{"tokens_per_microbatch": 8192, **bad})
    assert parameter in str(error.value)
