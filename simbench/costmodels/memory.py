"""Peak device memory (HBM) per GPU of a transformer trained on a tensor x pipeline x context x data parallel layout,
and the tokens per microbatch that memory allows.

    >>> from simbench.costmodels.layout import ParallelLayout
    >>> from simbench.costmodels.memory import peak_memory
    >>> layout = ParallelLayout(tp=2, zero_stage=1, recompute="selective")
    >>> memory = peak_memory("llama-3.1-8b", layout, tokens_per_microbatch=8192, replicas=4)
    >>> round(memory.peak_bytes / 2**30, 1), round(memory.activation_bytes / 2**30, 1)
    (44.2, 16.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simbench.costmodels.hardware import HardwareProfile, load_hardware
from simbench.costmodels.layout import RECOMPUTE, ParallelLayout
from simbench.costmodels.model import ModelSpec, get_model
from simbench.errors import InputError
from simbench.validation import check_choice, check_whole_number

GIB = 2**30


@dataclass(frozen=True)
class Precision:
    """Bytes kept per parameter and per activation element."""

    parameter_bytes: float
    gradient_bytes: float
    optimizer_bytes: float  # fp32 master weights and the optimizer's moments
    activation_bytes: float
    logit_bytes: float  # per element of the logits the loss reads


# Mixed-precision Adam as the ZeRO paper counts it (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward
# Training Trillion Parameter Models", section 3.1): 2 bytes of fp16/bf16 parameters, 2 of fp16/bf16 gradients and
# K = 12 of optimizer state (fp32 master copy, momentum, variance): 16 bytes per parameter. Activations in bf16.
# Logits: the loss upcasts them to fp32, 4 bytes each, as Megatron-LM's theoretical memory model counts them
# (megatron/training/theoretical_memory_usage.py: 4 s b h (1 + vocab / h) / tp for the output layer).
MIXED_PRECISION_ADAM = Precision(parameter_bytes=2, gradient_bytes=2, optimizer_bytes=12, activation_bytes=2,
                                 logit_bytes=4)
# Megatron-LM accumulates gradients in fp32 main-gradient buffers: 18 bytes per parameter without the distributed
# optimizer, 6 + 12 / dp with it (theoretical_memory_usage.py, `num_bytes_per_parameter`).
MEGATRON_MIXED_PRECISION = Precision(parameter_bytes=2, gradient_bytes=4, optimizer_bytes=12, activation_bytes=2,
                                     logit_bytes=4)
# Flash attention keeps one fp32 log-sum-exp per query and head for its backward pass instead of the score matrix.
SOFTMAX_STATISTIC_BYTES = 4
# Token ids (int64) kept for the embedding's backward pass, per token of each in-flight microbatch on stage 0.
TOKEN_ID_BYTES = 8
# ZeRO-3 / FSDP gathers one layer's full parameters to compute it and prefetches the next one.
GATHERED_LAYERS = 2



@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on the GPU of the most loaded pipeline stage, by what holds them."""

    parameter_bytes: float
    gradient_bytes: float
    optimizer_bytes: float
    gathered_parameter_bytes: float  # ZeRO-3: full layers gathered for compute
    activation_bytes: float  # the transformer layers' saved activations, every in-flight microbatch
    embedding_bytes: float  # token ids (first stage), final norm and logits (last stage)
    stage: int  # the pipeline stage (0 = first) these figures are of
    in_flight_microbatches: float

    @property
    def peak_bytes(self) -> float:
        return (self.parameter_bytes + self.gradient_bytes + self.optimizer_bytes + self.gathered_parameter_bytes
                + self.activation_bytes + self.embedding_bytes)

    @property
    def state_bytes(self) -> float:
        """Parameters, gradients and optimizer state: what does not grow with the tokens."""
        return self.parameter_bytes + self.gradient_bytes + self.optimizer_bytes + self.gathered_parameter_bytes

    def describe(self) -> str:
        parts = (("parameters", self.parameter_bytes), ("gradients", self.gradient_bytes),
                 ("optimizer state", self.optimizer_bytes), ("gathered parameters", self.gathered_parameter_bytes),
                 ("activations", self.activation_bytes), ("embedding and logits", self.embedding_bytes))
        shown = ", ".join(f"{name} {value / GIB:.1f}" for name, value in parts if value)
        return (f"{self.peak_bytes / GIB:.1f} GiB on pipeline stage {self.stage} ({shown} GiB; "
                f"{self.in_flight_microbatches:g} microbatches in flight)")


def activation_bytes_per_token(model: ModelSpec | str, recompute: str = "selective",
                               precision: Precision = MIXED_PRECISION_ADAM) -> float:
    """Bytes one transformer layer saves for its backward pass per token, before tensor/context parallelism.

    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", section 4.1) count
    sbh (34 + 5 a s / h) bytes per layer for GPT: 11 sbh + 5 a s^2 b in attention (the s^2 terms: scores,
    softmax, its dropout), 19 sbh in the MLP, 4 sbh in two LayerNorms. Adapted here, in activation_bytes per
    element: flash attention keeps no s^2 term, only a log-sum-exp per query and head; no dropout masks
    (Llama-style decoders train without dropout); K and V at the grouped-query width; a SwiGLU MLP keeps its
    gate and up projections (2 ffn) and their product (ffn), a GELU MLP its input and output (2 ffn). Per token:
    norm inputs 2h, attention input h, Q h, K and V 2 kv, attention output h, MLP input h, MLP 3 ffn (2 ffn).
    Selective recompute re-runs the attention core from Q, K, V: its output and statistics are not kept
    (Korthikanti's selective recompute drops the 5as/h term, which flash attention already removes).
    Full recompute keeps only the layer's input (Korthikanti Table 2: 2sbh).
    """
    model = get_model(model)
    check_choice(recompute, "recompute", RECOMPUTE)
    element = precision.activation_bytes
    h, kv, f = model.hidden, model.kv_hidden, model.ffn
    if recompute == "full":
        return element * h
    mlp = (3 if model.gated_mlp else 2) * f
    kept = element * (2 * h + h + h + 2 * kv + h + mlp)
    if recompute == "none":
        kept += element * h + SOFTMAX_STATISTIC_BYTES * model.heads
    return kept


def peak_memory(model: ModelSpec | str, layout: ParallelLayout = ParallelLayout(), *, tokens_per_microbatch: int,
                replicas: int = 1, precision: Precision = MIXED_PRECISION_ADAM) -> MemoryBreakdown:
    """Peak memory per GPU of training `model` with microbatches of `tokens_per_microbatch` tokens (a pipeline's
    microbatch before context parallelism splits it) on `layout` with `replicas` data-parallel replicas, the most
    loaded stage's. Each stage holds its chunks' layers (`ParallelLayout.stage_layers_of`).

    Parameters split over tp (tensor parallel) and pp (pipeline stages; the first stage also holds the input
    embedding, the last the final norm and the LM head: both when tied, as Megatron-LM keeps a copy on each).
    ZeRO stage 1 shards the optimizer state over replicas x cp (Megatron-LM's distributed optimizer shards over
    the data-parallel group with context parallelism folded in; FSDP over torchtitan's dp_shard x cp mesh), stage
    2 the gradients too, stage 3 (FSDP) the parameters too, gathering GATHERED_LAYERS layers at a time.
    Activations: `activation_bytes_per_token` x the stage's layers x tokens / (tp x cp) (sequence parallelism
    splits the rest of a layer's activations over tp as attention heads do), for each microbatch in flight:
    1F1B keeps min(pp - stage, microbatches) on a stage, the interleaved schedule (virtual_stages > 1) adds
    (pp - 1 - stage) / virtual_stages (Megatron-LM's penalty 1 + (pp - 1) / (pp v) on the first stage). Full
    recompute holds one layer's un-recomputed activations while it recomputes. The last stage holds one
    microbatch's logits (vocab / tp per token, at precision.logit_bytes) and final-norm output. Left out:
    allocator fragmentation, communication buffers, the CUDA context.
    """
    model = get_model(model)
    tokens = check_whole_number(tokens_per_microbatch, "tokens_per_microbatch", minimum=0)
    replicas = check_whole_number(replicas, "replicas", minimum=1)
    layers = _check_layout(model, layout)
    # Every stage: with uneven stages a middle one (a layer more, a microbatch fewer in flight) can be the peak.
    stages = [_stage_memory(model, layout, stage, layers[stage], tokens, replicas, precision)
              for stage in range(layout.pp)]
    return max(stages, key=lambda memory: memory.peak_bytes)


def fits(memory: MemoryBreakdown, hardware: HardwareProfile | str) -> bool:
    """Whether the peak fits the profile's HBM (`hbm_capacity_bytes`); InputError if the profile states none."""
    return memory.peak_bytes <= _capacity(load_hardware(hardware))


def check_fits(memory: MemoryBreakdown, hardware: HardwareProfile | str) -> None:
    """InputError, with the breakdown, if the peak does not fit the profile's HBM."""
    profile = load_hardware(hardware)
    capacity = _capacity(profile)
    if memory.peak_bytes > capacity:
        raise InputError(f"the layout needs {memory.describe()} per GPU, more than {profile.name}'s "
                         f"{capacity / GIB:.1f} GiB of HBM (hbm_capacity_bytes); shard more (tp, pp, zero_stage), "
                         "recompute more or put fewer tokens in a microbatch", parameter="hbm_capacity_bytes")


def max_tokens_per_microbatch(model: ModelSpec | str, hardware: HardwareProfile | str,
                              layout: ParallelLayout = ParallelLayout(), *, replicas: int = 1,
                              precision: Precision = MIXED_PRECISION_ADAM) -> int:
    """The most tokens a microbatch can hold on `layout` with `replicas` data-parallel replicas without exceeding
    the profile's HBM, a multiple of cp (each context-parallel rank takes an equal share); 0 if the parameters and
    optimizer state alone do not fit. Memory grows linearly with the tokens on every stage, so the budget is the
    least over the stages."""
    capacity = _capacity(load_hardware(hardware))
    model = get_model(model)
    replicas = check_whole_number(replicas, "replicas", minimum=1)
    layers = _check_layout(model, layout)
    probe = 2**20 * layout.cp
    budget = math.inf
    for stage in range(layout.pp):
        empty = _stage_memory(model, layout, stage, layers[stage], 0, replicas, precision).peak_bytes
        full = _stage_memory(model, layout, stage, layers[stage], probe, replicas, precision).peak_bytes
        if empty > capacity:
            return 0
        budget = min(budget, (capacity - empty) * probe / (full - empty))
    return int(budget // layout.cp) * layout.cp


def _stage_memory(model: ModelSpec, layout: ParallelLayout, stage: int, layers: int, tokens: int, replicas: int,
                  precision: Precision) -> MemoryBreakdown:
    # The layout's memory settings, unpacked here only.
    tp, pp, cp, microbatches = layout.tp, layout.pp, layout.cp, layout.microbatches
    virtual_stages, zero_stage, recompute = layout.virtual_stages, layout.zero_stage, layout.recompute
    first, last = stage == 0, stage == pp - 1
    embedding = model.vocab * model.hidden + (model.max_positions * model.hidden if model.positions == "learned" else 0)
    head = model.vocab * model.hidden  # untied, or tied but on another stage (Megatron keeps a copy there)
    final_norm = (2 if model.norm == "layernorm" else 1) * model.hidden
    parameters = layers * model.parameters_per_layer
    if first:
        parameters += embedding
    if last:
        parameters += final_norm + (head if (not model.tied_embeddings or pp > 1) else 0)
    parameters /= tp
    shards = replicas * cp
    gathered = 0.0
    if zero_stage == 3:
        gathered = precision.parameter_bytes * min(GATHERED_LAYERS, layers) * model.parameters_per_layer / tp
    in_flight = min(pp - stage, microbatches)
    if virtual_stages > 1:
        in_flight += (pp - 1 - stage) / virtual_stages
    tokens_per_gpu = tokens / cp
    per_token = activation_bytes_per_token(model, recompute, precision)
    activations = in_flight * layers * per_token * tokens_per_gpu / tp
    if recompute == "full":
        activations += activation_bytes_per_token(model, "none", precision) * tokens_per_gpu / tp
    embedding_bytes = 0.0
    if first:
        embedding_bytes += in_flight * TOKEN_ID_BYTES * tokens_per_gpu
    if last:
        embedding_bytes += tokens_per_gpu * (precision.logit_bytes * model.vocab / tp
                                             + 2 * precision.activation_bytes * model.hidden / tp)
    return MemoryBreakdown(
        parameter_bytes=precision.parameter_bytes * parameters / (shards if zero_stage >= 3 else 1),
        gradient_bytes=precision.gradient_bytes * parameters / (shards if zero_stage >= 2 else 1),
        optimizer_bytes=precision.optimizer_bytes * parameters / (shards if zero_stage >= 1 else 1),
        gathered_parameter_bytes=gathered, activation_bytes=activations, embedding_bytes=embedding_bytes,
        stage=stage, in_flight_microbatches=in_flight)


def _check_layout(model: ModelSpec, layout: ParallelLayout) -> tuple[int, ...]:
    """Each pipeline stage's layers, after checking that the layout can split the model."""
    tp = layout.tp
    if model.heads % tp or (model.kv_heads or model.heads) % tp and tp % (model.kv_heads or model.heads):
        raise InputError(f"tp ({tp}) must divide the model's {model.heads} attention heads (and its "
                         f"{model.kv_heads or model.heads} key/value heads, or be a multiple of them)", parameter="tp")
    if model.ffn % tp:
        raise InputError(f"tp ({tp}) must divide the model's feed-forward width {model.ffn}", parameter="tp")
    return layout.stage_layers_of(model.layers)


def _capacity(profile: HardwareProfile) -> float:
    if profile.hbm_capacity_bytes is None:
        raise InputError(f"hardware profile {profile.name} states no HBM capacity; set hbm_capacity_bytes",
                         parameter="hbm_capacity_bytes")
    return profile.hbm_capacity_bytes
