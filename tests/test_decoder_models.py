"""Decoder LLMs in the cost model: published sizes, FLOPs against independent counts, GPU presets, replicas."""

from __future__ import annotations

import numpy as np
import pytest

from simbench.costmodels import HARDWARE_PRESETS, BatchSet, ExecutionMode, TransformerCostModel, get_model
from simbench.costmodels.hardware import load_hardware
from simbench.errors import InputError

# Published parameter counts (model cards on huggingface.co; GPT-2's is its checkpoint's exact size).
PUBLISHED_PARAMETERS = {"gpt2": 124_439_808, "llama-3.1-8b": 8.03e9, "llama-3.1-70b": 70.6e9, "llama-3.1-405b": 406e9,
                        "mistral-7b": 7.25e9, "qwen2.5-7b": 7.61e9}
DECODERS = tuple(PUBLISHED_PARAMETERS)


@pytest.mark.parametrize("name", DECODERS)
def test_parameters_match_the_model_cards(name):
    assert get_model(name).parameters == pytest.approx(PUBLISHED_PARAMETERS[name], rel=0.005)


def test_qwen_non_embedding_parameters_match_its_card():
    qwen = get_model("qwen2.5-7b")
    embeddings = 2 * qwen.vocab * qwen.hidden  # input table and untied LM head
    assert qwen.parameters - embeddings == pytest.approx(6.53e9, rel=0.002)


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("length", [512, 2048, 8192, 32768])
def test_training_flops_per_token_match_six_n_plus_attention(name, length):
    """6 x (published parameters - those only looked up) + 6 x layers x hidden x length (causal half)."""
    model = get_model(name)
    if length > model.max_positions:
        pytest.skip(f"{name} stops at {model.max_positions} positions")
    looked_up = model.max_positions * model.hidden if model.positions == "learned" else 0
    if not model.tied_embeddings:
        looked_up += model.vocab * model.hidden  # the input table; a tied one is the LM head's matrix too
    independent = 6 * (PUBLISHED_PARAMETERS[name] - looked_up) + 6 * model.layers * model.hidden * length
    assert model.training_flops([length]) / length == pytest.approx(independent, rel=0.01)


def test_causal_attention_is_half_of_bidirectional_and_gqa_shrinks_only_k_and_v():
    encoder = get_model({"layers": 2, "hidden": 64, "heads": 8, "ffn": 256})
    decoder = get_model({"layers": 2, "hidden": 64, "heads": 8, "ffn": 256, "family": "decoder", "vocab": 100})
    grouped = get_model({"layers": 2, "hidden": 64, "heads": 8, "kv_heads": 2, "ffn": 256, "family": "decoder",
                         "vocab": 100})
    assert decoder.attention_flops_per_token_squared == encoder.attention_flops_per_token_squared / 2
    assert grouped.attention_flops_per_token_squared == decoder.attention_flops_per_token_squared
    # K and V shrink from 64 to 16 wide: 2 layers x 2 matrices x 48 x 64 MACs, x 2 FLOPs, x 3 for training.
    assert decoder.linear_flops_per_token - grouped.linear_flops_per_token == 3 * 2 * 2 * 2 * 48 * 64
    # The LM head: 64 x 100 MACs per token.
    assert decoder.linear_flops_per_token - encoder.linear_flops_per_token == 3 * 2 * 64 * 100


def test_flops_match_torch_counts_on_a_tiny_decoder():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    spec = get_model({"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 96, "vocab": 101,
                      "family": "decoder", "gated_mlp": True, "positions": "rotary", "tied_embeddings": False,
                      "biases": "none", "norm": "rmsnorm", "max_positions": 64})
    length, head_dim, groups = 23, 16, 2
    torch.manual_seed(0)
    linear = lambda inputs, outputs: torch.nn.Linear(inputs, outputs, bias=False)  # noqa: E731
    embedding = torch.nn.Embedding(spec.vocab, spec.hidden)
    layers = [dict(q=linear(64, 64), k=linear(64, 32), v=linear(64, 32), o=linear(64, 64), gate=linear(64, 96),
                   up=linear(64, 96), down=linear(96, 64), norms=(torch.nn.RMSNorm(64), torch.nn.RMSNorm(64)))
              for _ in range(spec.layers)]
    final_norm, lm_head = torch.nn.RMSNorm(64), linear(64, spec.vocab)
    angle = torch.arange(length)[:, None] / 10_000 ** (torch.arange(head_dim // 2) / (head_dim // 2))

    def rotate(x):  # rotary positions: elementwise, no FLOPs counted and no parameters
        first, second = x[..., : head_dim // 2], x[..., head_dim // 2:]
        return torch.cat([first * angle.cos() - second * angle.sin(), first * angle.sin() + second * angle.cos()], -1)

    tokens = torch.randint(0, spec.vocab, (1, length))
    with FlopCounterMode(display=False) as counter:
        x = embedding(tokens)
        for layer in layers:
            h = layer["norms"][0](x)
            q = rotate(layer["q"](h).view(length, 4, head_dim).transpose(0, 1))
            k = rotate(layer["k"](h).view(length, 2, head_dim).transpose(0, 1)).repeat_interleave(groups, 0)
            v = layer["v"](h).view(length, 2, head_dim).transpose(0, 1).repeat_interleave(groups, 0)
            # A causal kernel: query i meets keys 0..i only, one query at a time.
            context = torch.cat([torch.softmax(q[:, i:i + 1] @ k[:, :i + 1].transpose(-1, -2), -1) @ v[:, :i + 1]
                                 for i in range(length)], dim=1)
            x = x + layer["o"](context.transpose(0, 1).reshape(1, length, 64))
            h = layer["norms"][1](x)
            x = x + layer["down"](torch.nn.functional.silu(layer["gate"](h)) * layer["up"](h))
        logits = lm_head(final_norm(x))
        torch.nn.functional.cross_entropy(logits.view(length, -1), tokens.view(-1)).backward()
    # Per query the kernel meets i + 1 keys: L (L + 1) / 2 pairs, simbench's L^2 / 2 leaves out the diagonal's L / 2.
    diagonal = spec.attention_flops_per_token_squared * length
    assert counter.get_total_flops() == spec.training_flops([length]) + diagonal
    modules = [embedding, final_norm, lm_head, *(m for layer in layers for m in
                                                 [*layer["norms"], *(v for k, v in layer.items() if k != "norms")])]
    assert spec.parameters == sum(p.numel() for module in modules for p in module.parameters())


@pytest.mark.parametrize("bad", [{"layers": 2, "hidden": 64, "heads": 8, "kv_heads": 3, "ffn": 8},
                                 {"layers": 2, "hidden": 64, "heads": 8, "ffn": 8, "family": "seq2seq"},
                                 {"layers": 2, "hidden": 64, "heads": 8, "ffn": 8, "gated_mlp": "yes"},
                                 {"layers": 2, "hidden": 64, "heads": 8, "ffn": 8, "positions": "alibi"}])
def test_bad_decoder_dimensions_are_input_errors(bad):
    with pytest.raises(InputError):
        get_model(bad)


# --- GPU presets and multi-GPU replicas ---------------------------------------------------------

PEAKS = {"h100-sxm": 989.4e12, "h200": 989.4e12, "b200": 2.25e15, "mi300x": 1307.4e12}


@pytest.mark.parametrize("name", PEAKS)
def test_llm_gpu_presets_sit_below_their_datasheet_peaks(name):
    profile = HARDWARE_PRESETS[name]
    assert "datasheet" in profile.source and "Chosen" in profile.source
    assert profile.attention_flops_per_s < profile.linear_flops_per_s < PEAKS[name]
    # Scale-up links beat the per-GPU NIC; bandwidth rankings follow the datasheets.
    assert profile.intra_node_bytes_per_s > profile.allreduce_bytes_per_s
    assert profile.devices_per_node == 8 and 0 < profile.tensor_parallel_efficiency < 1
    assert HARDWARE_PRESETS["h200"].optimizer_seconds_per_parameter < HARDWARE_PRESETS["h100-sxm"]\
        .optimizer_seconds_per_parameter


def plain_batches(lengths, slot) -> BatchSet:
    lengths = np.asarray(lengths, dtype=np.int64)
    rows = np.arange(lengths.size)
    return BatchSet(lengths, rows, np.full(lengths.size, slot), np.zeros(lengths.size, dtype=np.int64), 1)


def test_a_replica_of_one_gpu_prices_as_before():
    batches = plain_batches([300, 4000, 8000], 8192)
    one = TransformerCostModel("llama-3.1-8b", "h100-sxm")
    also_one = TransformerCostModel("llama-3.1-8b", "h100-sxm", gpus_per_replica=1)
    for mode in ExecutionMode:
        assert np.array_equal(one.step_costs(batches, mode).total_seconds,
                              also_one.step_costs(batches, mode).total_seconds)
    assert one.allreduce_seconds(64) == also_one.allreduce_seconds(64)


def test_a_tensor_parallel_replica_divides_compute_and_shards_the_all_reduce():
    hardware = load_hardware("h100-sxm", {"tensor_parallel_efficiency": 0.8})
    one = TransformerCostModel("llama-3.1-70b", hardware)
    eight = TransformerCostModel("llama-3.1-70b", hardware, gpus_per_replica=8)
    batches = plain_batches([32768], 32768)
    for part in ("compute_seconds", "padding_seconds"):
        assert getattr(eight.step_costs(batches, "padded"), part) * 8 * 0.8 == \
            pytest.approx(getattr(one.step_costs(batches, "padded"), part))
    # One replica per node: only the inter-node ring is left, each GPU carrying its 1/8 shard.
    shard_bytes = one.model.parameters * hardware.gradient_bytes_per_parameter / 8
    replicas = 16
    expected = (2 * (replicas - 1) * hardware.allreduce_latency_seconds
                + 2 * (replicas - 1) / replicas * shard_bytes / hardware.allreduce_bytes_per_s)
    assert eight.allreduce_seconds(replicas) == pytest.approx(expected)
    assert eight.allreduce_seconds(1) == 0.0
    with pytest.raises(InputError, match="gpus_per_replica"):
        TransformerCostModel("gpt2", "h100-sxm", gpus_per_replica=0)
