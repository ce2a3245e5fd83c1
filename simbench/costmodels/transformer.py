"""Prices a transformer's training steps on one hardware profile, for every execution mode.

    >>> import numpy as np
    >>> from simbench.costmodels import BatchSet, ExecutionMode, TransformerCostModel
    >>> one_batch = BatchSet(np.array([100, 300]), np.array([0, 1]), np.array([512, 512]), np.array([0, 0]), 1)
    >>> costs = TransformerCostModel("bert-large", "a100").step_costs(one_batch, ExecutionMode.PADDED)
    >>> bool(costs.padding_seconds[0] > costs.compute_seconds[0])
    True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simbench.costmodels.base import BatchSet, CostModel, ExecutionMode, StepCosts
from simbench.costmodels.collectives import Link, allreduce
from simbench.costmodels.hardware import HardwareProfile, load_hardware
from simbench.costmodels.model import ModelSpec, get_model
from simbench.costmodels.registry import CostModelType, register_cost_model
from simbench.distinct import sorted_distinct
from simbench.errors import InputError
from simbench.validation import check_device_count, check_gpus_per_replica, check_whole_number

# Grouped fused attention launches one forward and one backward kernel per length group.
GROUPED_ATTENTION_KERNELS_PER_GROUP = 2
# Modes whose attention runs per sequence on variable-length kernels.
VARLEN_MODES = frozenset({ExecutionMode.PACKED_VARLEN, ExecutionMode.UNPADDED})
# Modes that compute every pair of a row's slots (a context-parallel ring shards the row as one sequence).
WHOLE_ROW_MODES = frozenset({ExecutionMode.PADDED, ExecutionMode.SORTED, ExecutionMode.PACKED_DENSE_MASK})
# FlexAttention's default block: a document mask skips a (query block, key block) pair only when it masks all of it.
FLEX_BLOCK_TOKENS = 128


@dataclass(frozen=True)
class _Work:
    """FLOPs of each batch, split into the part on real tokens and the part on padding."""

    tokens: np.ndarray  # tokens the kernels process: sets the achieved throughput
    real_linear_flops: np.ndarray
    real_attention_flops: np.ndarray
    padding_linear_flops: np.ndarray
    padding_attention_flops: np.ndarray  # attention pairs with a padding token on either side
    transferred_tokens: np.ndarray
    masked_attention_flops: np.ndarray  # pairs of real tokens of different sequences in one row


@dataclass(frozen=True)
class TransformerCostModel(CostModel):
    """The `CostModel` of a transformer (`ModelSpec`) on a `HardwareProfile`.

    Device time of a batch = FLOPs / achieved FLOP/s, with the achieved rate
    flops_per_s x tokens / (tokens + half_saturation_tokens): kernels over few tokens leave the
    device partly idle. `tokens` is what the batch's kernels process (all slots of fixed-shape
    rows, only real tokens when un-padded). Both model and hardware may be given by name.

    A data-parallel device may be a replica of `gpus_per_replica` GPUs (tensor or context
    parallel): it computes gpus_per_replica x the profile's `tensor_parallel_efficiency` as fast as
    one GPU, each GPU updates and all-reduces its 1/gpus_per_replica share of the parameters, and
    `allreduce_seconds(devices)` counts devices in replicas.
    """

    model: ModelSpec | str
    hardware: HardwareProfile | str
    gpus_per_replica: int = 1

    def __post_init__(self):
        object.__setattr__(self, "model", get_model(self.model))
        object.__setattr__(self, "hardware", load_hardware(self.hardware))
        check_gpus_per_replica(self.gpus_per_replica)

    @property
    def replica_speed(self) -> float:
        """How many times one GPU's compute rate a replica achieves."""
        if self.gpus_per_replica == 1:
            return 1.0
        return self.gpus_per_replica * self.hardware.tensor_parallel_efficiency

    def step_costs(self, batches: BatchSet, mode: ExecutionMode, *, floored: bool = True) -> StepCosts:
        """Per-batch seconds of a forward + backward + optimizer step, split by cause.

        PADDED and SORTED rows cost their full slots, attention included (`row`: one attention over the
        whole row, its packed documents attending to each other); the shape of a SORTED batch is taken to
        change every step, since batches are shuffled. PACKED_DENSE_MASK computes the same pairs under a dense
        block-diagonal mask, at the profile's `dense_mask_attention_fraction` of the attention rate (SDPA leaves
        its flash kernel). PACKED_BLOCK_MASK (FlexAttention's document mask) computes the 128-token block pairs
        the mask does not wholly hide, at `block_mask_attention_fraction` of the rate, taken to cost no less than
        varlen kernels and no more than the dense mask (an assumption: no measurement). PACKED_VARLEN computes the
        dense layers on all slots but attention per sequence. UNPADDED computes real tokens only (at the profile's
        `unpadded_flops_fraction` of the padded rates), its sequences grouped by the profile's length
        boundaries: each group present launches its own attention kernels, whose rate falls in small
        groups (`unpad_group_half_saturation_tokens`; 0, the default, leaves attention at full rate). Padding seconds are the share of the device
        work spent on padding FLOPs (pairs of attention with a padding token on either side included),
        at the same achieved throughput as the real tokens; masked attention seconds are the attention
        between two sequences of one row that a block-diagonal mask discards.
        Overhead: kernel launches, the fixed step cost, the optimizer update, the input transfer,
        and for rows holding several sequences packing's share of the step (growing with depth); unless
        `floored` is False, what the launch floor adds where the host issues the step's kernels slower than the
        device runs them (a 4D replica applies the floor per GPU and model chunk instead).
        """
        if mode not in set(ExecutionMode):
            raise InputError(f"unknown execution mode {mode!r}; one of {', '.join(m.value for m in ExecutionMode)}")
        mode = ExecutionMode(mode)
        work = self._work(batches, mode)
        hardware = self.hardware
        slowdown = _saturation_slowdown(work.tokens, hardware.half_saturation_tokens) / self.replica_speed
        linear_flops_per_s = self.dense_flops_per_s
        real_attention_seconds, padding_attention_seconds, masked_attention_seconds = self._attention_parts(
            batches, mode, work)
        compute_seconds = slowdown * (work.real_linear_flops / linear_flops_per_s + real_attention_seconds)
        padding_seconds = slowdown * (work.padding_linear_flops / linear_flops_per_s + padding_attention_seconds)
        masked_attention_seconds = slowdown * masked_attention_seconds
        overhead_seconds = self._fixed_overhead_seconds(work, batches.batches)
        if self._attends_in_groups(mode):
            groups = _length_groups(batches, hardware.unpad_group_boundaries)
            compute_seconds = compute_seconds + slowdown * self._small_group_attention_seconds(groups)
            launches = groups.present_per_batch * self.model.layers * GROUPED_ATTENTION_KERNELS_PER_GROUP
            overhead_seconds = overhead_seconds + launches * hardware.kernel_launch_seconds
        if mode is ExecutionMode.UNPADDED:
            compute_seconds = compute_seconds / hardware.unpadded_flops_fraction
        else:
            overhead_seconds = overhead_seconds + self._packing_overhead_seconds(
                batches, compute_seconds + padding_seconds + masked_attention_seconds)
        if mode is ExecutionMode.SORTED:
            overhead_seconds = overhead_seconds + hardware.shape_change_seconds
        device = StepCosts(compute_seconds=compute_seconds, padding_seconds=padding_seconds,
                           overhead_seconds=overhead_seconds, masked_attention_seconds=masked_attention_seconds)
        if not floored:
            return device
        # The host issues the layers' kernels while the device runs earlier ones: that part of the step takes the
        # longer of the two; the step's fixed cost (optimizer update, synchronisation) follows it, as in a replica.
        launch_bound = np.maximum(self.launch_floor_seconds(mode) - (device.total_seconds - self.fixed_step_seconds),
                                  0.0)
        return dataclasses.replace(device, overhead_seconds=overhead_seconds + launch_bound)

    def attention_seconds(self, batches: BatchSet, mode: ExecutionMode) -> np.ndarray:
        """The attention part of each batch's seconds in `step_costs` (real, padded and masked pairs, at the same
        achieved rates): what context parallelism splits over its ranks."""
        mode = ExecutionMode(mode)
        work = self._work(batches, mode)
        hardware = self.hardware
        slowdown = _saturation_slowdown(work.tokens, hardware.half_saturation_tokens) / self.replica_speed
        seconds = slowdown * sum(self._attention_parts(batches, mode, work))
        if self._attends_in_groups(mode):
            groups = _length_groups(batches, hardware.unpad_group_boundaries)
            seconds = seconds + slowdown * self._small_group_attention_seconds(groups)
        if mode is ExecutionMode.UNPADDED:
            seconds = seconds / hardware.unpadded_flops_fraction
        return seconds

    def _attends_in_groups(self, mode: ExecutionMode) -> bool:
        """Whether the mode's attention runs one call per length group, paying each group's launches and its
        rate below saturation: un-padding always; packed-varlen where the device has no varlen kernel."""
        return mode is ExecutionMode.UNPADDED or (mode is ExecutionMode.PACKED_VARLEN
                                                  and self.hardware.per_document_attention == "grouped")

    @property
    def attention_parity_tokens(self) -> float:
        """The sequence length at which its attention takes as long as its dense layers on this hardware: what
        packers balancing predicted work (`wlb`) weigh l^2 against l with."""
        model, hardware = self.model, self.hardware
        dense_seconds_per_token = model.linear_flops_per_token / self.dense_flops_per_s
        attention_seconds_per_token_squared = model.attention_flops_per_token_squared / hardware.attention_flops_per_s
        return float(dense_seconds_per_token / attention_seconds_per_token_squared)

    @property
    def fixed_step_seconds(self) -> float:
        """What every step costs whatever its batch: kernel launches, the optimizer update, the fixed step cost."""
        return self.fixed_step_seconds_of(layers=self.model.layers,
                                          parameters=self.model.parameters / self.gpus_per_replica)

    def fixed_step_seconds_of(self, *, layers: float, parameters: float) -> float:
        """The fixed step cost of a device running `layers` layers and updating `parameters` parameters (a
        pipeline stage's share, a tensor-parallel shard)."""
        hardware = self.hardware
        launches = hardware.kernels_per_layer * layers * hardware.kernel_launch_seconds
        return launches + self.optimizer_seconds_of(parameters) + hardware.step_overhead_seconds

    def optimizer_seconds_of(self, parameters: float) -> float:
        """The optimizer's update of `parameters` parameters on one device."""
        return self.hardware.optimizer_seconds_per_parameter * parameters

    @property
    def dense_flops_per_s(self) -> float:
        """The dense layers' rate at this model's width: hidden / (hidden + the profile's half-saturation width)
        of `linear_flops_per_s`."""
        width = self.model.hidden
        return self.hardware.linear_flops_per_s * width / (width + self.hardware.dense_half_saturation_width)

    @cached_property
    def _varlen_kernels_differ(self) -> bool:
        hardware = self.hardware
        return (hardware.varlen_tile_tokens > 0 or any(
            value != 1.0 for value in (hardware.varlen_causal_attention_fraction,
                                       hardware.varlen_bidirectional_attention_fraction))
            or hardware.varlen_causal_half_length_tokens > 0 or hardware.varlen_bidirectional_half_length_tokens > 0)

    def kernels_per_layer(self, mode: ExecutionMode) -> int:
        """Kernels a layer launches in a step of this mode, forward + backward, by path: padded rows (padded,
        sorted, packs under a mask), variable-length attention (packed-varlen), un-padding (its gathers and
        scatters included). The profile's counts; a path without its own falls back to the one before it."""
        hardware = self.hardware
        mode = ExecutionMode(mode)
        kernels = hardware.kernels_per_layer
        if mode in VARLEN_MODES and hardware.varlen_kernels_per_layer is not None:
            kernels = hardware.varlen_kernels_per_layer
        if mode is ExecutionMode.UNPADDED and hardware.unpadded_kernels_per_layer is not None:
            kernels = hardware.unpadded_kernels_per_layer
        return kernels

    def launch_floor_seconds(self, mode: ExecutionMode, layers: float | None = None) -> float:
        """The least time of a step in this mode on one GPU running `layers` layers (None: all the model's):
        every kernel of every layer issued by the host. Tensor- and context-parallel GPUs each issue all of
        their layers' kernels, so the floor does not shrink with them."""
        layers = self.model.layers if layers is None else layers
        return layers * self.kernels_per_layer(mode) * self.hardware.host_seconds_per_kernel

    def first_sight_seconds(self, mode: ExecutionMode) -> float:
        """What the first step at a batch shape new to the device costs on top of its price: once per distinct
        shape, not per layer (measured: as much at 8 layers as at 1), by attention path: variable-length
        attention (un-padded, packed-varlen) pays the varlen figure for a new token count, dense attention
        over rows of a new shape the padded one."""
        hardware = self.hardware
        if ExecutionMode(mode) in VARLEN_MODES:
            return hardware.first_sight_varlen_seconds
        return hardware.first_sight_padded_seconds

    def first_sight_hidden_seconds(self, mode: ExecutionMode) -> float:
        """How much of the padded path's first sight the step's own GPU work may hide (measured on dense attention
        at new shapes); a varlen token count's ~1 ms was measured as what shows, hidden by nothing more."""
        return 0.0 if ExecutionMode(mode) in VARLEN_MODES else self.hardware.first_sight_hidden_seconds

    def allreduce_seconds(self, devices: int) -> float:
        """All-reduce of the gradients across `devices` replicas as NCCL runs it (`collectives.allreduce`):
        hierarchical (in node, then across nodes) when the profile sets `devices_per_node` and the replicas
        span more than one node, ring or double binary tree across nodes, whichever is faster.

        Each GPU of a replica reduces its own parameter shard with the same GPU of the other
        replicas, all shards at once: the collectives carry 1/gpus_per_replica of the gradients each.
        The simulator adds these seconds after each step's slowest device: none of it is hidden behind
        the backward pass.
        """
        check_device_count(devices, maximum=None)
        hardware = self.hardware
        gradient_bytes = self.model.parameters * hardware.gradient_bytes_per_parameter / self.gpus_per_replica
        per_node = hardware.devices_per_node
        replicas_per_node = None if per_node is None else max(1, per_node // self.gpus_per_replica)
        return allreduce(devices, replicas_per_node, gradient_bytes,
                         Link(hardware.intra_node_latency_seconds, hardware.intra_node_bytes_per_s),
                         Link(hardware.allreduce_latency_seconds, hardware.allreduce_bytes_per_s)).seconds

    def vts_stage_seconds(self, sequence_lengths: np.ndarray, stages: int) -> np.ndarray:
        """Per-stage seconds of each sample in a `stages`-stage pipeline: a fixed cost plus the sample's
        training FLOPs (padding stripped, no batch to saturate) at the device's rate. A stage does 1/S of
        the work on 1/S of the device's compute, so its time does not depend on S: a pipeline never has
        more FLOP/s than the device it runs on."""
        check_whole_number(stages, "stages", minimum=1)
        lengths = np.asarray(sequence_lengths, dtype=np.float64)
        model, hardware = self.model, self.hardware
        sample_seconds = (model.linear_flops_per_token * lengths / self.dense_flops_per_s
                          + model.attention_flops_per_token_squared * lengths**2 / hardware.attention_flops_per_s)
        return hardware.vts_stage_fixed_seconds + sample_seconds

    def ideal_sequence_seconds(self, sequence_lengths: np.ndarray) -> np.ndarray:
        """The least device time of each sequence: its own FLOPs at the full dense and attention rates, no
        padding, fixed cost or small-kernel slowdown (un-padded kernels at their fraction if it beats 1)."""
        lengths = np.asarray(sequence_lengths, dtype=np.float64)
        model, hardware = self.model, self.hardware
        seconds = (model.linear_flops_per_token * lengths / self.dense_flops_per_s
                   + model.attention_flops_per_token_squared * lengths**2 / hardware.attention_flops_per_s)
        return seconds / (self.replica_speed * max(1.0, hardware.unpadded_flops_fraction))

    def vts_pipeline_stages(self) -> int:
        """Stages of the model's VTS pipeline: its layers, `vts_layers_per_stage` to a stage."""
        return -(-self.model.layers // self.hardware.vts_layers_per_stage)

    @property
    def vts_buffer_samples(self) -> int:
        return self.hardware.vts_buffer_samples

    @property
    def allreduce_latency_seconds(self) -> float:
        return self.hardware.allreduce_latency_seconds

    @property
    def unpadded_noise_cv(self) -> float:
        return self.hardware.unpadded_noise_cv

    def _work(self, batches: BatchSet, mode: ExecutionMode) -> _Work:
        linear = float(self.model.linear_flops_per_token)
        attention = float(self.model.attention_flops_per_token_squared)
        lengths = batches.sequence_lengths.astype(np.float64)
        slots = batches.row_slots.astype(np.float64)
        sequence_batch = batches.sequence_batch  # one gather, reused: it dominates on millions of sequences
        real_tokens = np.bincount(sequence_batch, weights=lengths, minlength=batches.batches)
        real_squares = np.bincount(sequence_batch, weights=lengths**2, minlength=batches.batches)
        slot_tokens = batches.per_batch(slots, of="rows")
        no_padding = np.zeros(batches.batches)
        if mode is ExecutionMode.UNPADDED:
            return _Work(real_tokens, linear * real_tokens, attention * real_squares, no_padding, no_padding,
                         real_tokens, no_padding)
        padding_tokens = slot_tokens - real_tokens
        if np.any(padding_tokens < 0):
            batch = int(np.argmax(padding_tokens < 0))
            raise InputError(f"batch {batch} holds more real tokens than token slots; rows overflow their slots")
        if mode is ExecutionMode.PACKED_VARLEN:
            padding_attention = masked_attention = no_padding
        else:
            # A row's slots^2 pairs: those within its sequences are real work, those between two of its
            # sequences are masked out, and the rest involve a padding token.
            row_real = np.bincount(batches.sequence_row, weights=lengths, minlength=slots.size)
            row_real_squares = batches.per_batch(row_real**2, of="rows")
            padding_attention = attention * (batches.per_batch(slots**2, of="rows") - row_real_squares)
            masked_attention = attention * (row_real_squares - real_squares)
        return _Work(slot_tokens, linear * real_tokens, attention * real_squares, linear * padding_tokens,
                     padding_attention, slot_tokens, masked_attention)

    def _attention_parts(self, batches: BatchSet, mode: ExecutionMode,
                         work: _Work) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each batch's attention seconds at full saturation, split into real pairs, pairs with a padding token
        and pairs between two documents of a row, as the mode's attention implementation computes them."""
        rate = self.hardware.attention_flops_per_s
        real = (self._per_document_attention_seconds(batches, work) if mode in VARLEN_MODES
                else work.real_attention_flops / rate)
        padding, masked = work.padding_attention_flops / rate, work.masked_attention_flops / rate
        if mode is ExecutionMode.PACKED_DENSE_MASK:
            fraction = self.hardware.dense_mask_attention_fraction
            return real / fraction, padding / fraction, masked / fraction
        if mode is ExecutionMode.PACKED_BLOCK_MASK:
            dense_mask = (real + padding + masked) / self.hardware.dense_mask_attention_fraction
            blocks = self.model.attention_flops_per_token_squared * document_block_pairs(
                batches, FLEX_BLOCK_TOKENS, causal=self.model.is_decoder) / rate
            seconds = np.clip(blocks / self.hardware.block_mask_attention_fraction,
                              self._per_document_attention_seconds(batches, work), dense_mask)
            real = np.minimum(real, seconds)
            return real, np.zeros_like(real), seconds - real  # masked blocks are skipped, padding's among them
        return real, padding, masked

    def _per_document_attention_seconds(self, batches: BatchSet, work: _Work) -> np.ndarray:
        """Each batch's attention seconds on variable-length kernels, document by document."""
        if self._varlen_kernels_differ:
            return self._varlen_attention_seconds(batches)
        return work.real_attention_flops / self.hardware.attention_flops_per_s

    def _varlen_attention_seconds(self, batches: BatchSet) -> np.ndarray:
        """Each batch's attention seconds on variable-length kernels: a document of d tokens does its
        FLOPs with d rounded up to whole tiles along the keys, at fraction x d / (d + half) of the dense
        attention rate (the profile's varlen fields for this model's direction of attention)."""
        hardware = self.hardware
        if self.model.is_decoder:
            fraction, half = hardware.varlen_causal_attention_fraction, hardware.varlen_causal_half_length_tokens
        else:
            fraction = hardware.varlen_bidirectional_attention_fraction
            half = hardware.varlen_bidirectional_half_length_tokens
        lengths = batches.sequence_lengths.astype(np.float64)
        tile = hardware.varlen_tile_tokens
        keys = np.ceil(lengths / tile) * tile if tile else lengths
        # work x (d + half) / d at `fraction` of the rate: the d in the work cancels the rate's d.
        weighted = keys * (lengths + half)
        flops = self.model.attention_flops_per_token_squared * np.bincount(
            batches.sequence_batch, weights=weighted, minlength=batches.batches)
        return flops / (hardware.attention_flops_per_s * fraction)

    def _fixed_overhead_seconds(self, work: _Work, batches: int) -> np.ndarray:
        hardware = self.hardware
        transfer = hardware.input_bytes_per_token * work.transferred_tokens / hardware.host_to_device_bytes_per_s
        return np.full(batches, self.fixed_step_seconds) + transfer

    def _packing_overhead_seconds(self, batches: BatchSet, work_seconds: np.ndarray) -> np.ndarray:
        """Masks, position ids and per-sequence losses of packs: a share of the step growing with depth."""
        sequences_per_row = np.bincount(batches.sequence_row, minlength=batches.row_slots.size)
        max_depth = np.zeros(batches.batches, dtype=np.int64)
        np.maximum.at(max_depth, batches.row_batch, sequences_per_row)
        share = self.hardware.pack_overhead_fraction + self.hardware.pack_overhead_per_depth_fraction * max_depth
        share = np.where(max_depth > 1, share, 0.0)
        if np.any(share >= 1):
            raise InputError(f"packing overhead reaches the whole step at depth {int(max_depth.max())}; "
                             "lower pack_overhead_per_depth_fraction")
        # The share is of the whole step, as the packing paper reports it: overhead = work s / (1 - s).
        return work_seconds * share / (1 - share)

    def _small_group_attention_seconds(self, groups: _LengthGroups) -> np.ndarray:
        """Attention time lost because each length group's kernels run below the attention rate: a group
        of t tokens reaches t / (t + h) of it (h: `unpad_group_half_saturation_tokens`), so it costs
        its FLOPs x h / t on top, at the attention rate. Small groups and short sequences lose most."""
        half = self.hardware.unpad_group_half_saturation_tokens
        if half == 0:
            return np.zeros(groups.batches)
        lost_flops = self.model.attention_flops_per_token_squared * groups.squares * half / groups.tokens
        return np.bincount(groups.batch, weights=lost_flops, minlength=groups.batches) / self.hardware.attention_flops_per_s


@dataclass(frozen=True)
class _LengthGroups:
    """The length groups present in each batch: `present` holds one key (batch x groups + group) per
    (batch, group) that holds a sequence, `keys` each sequence's key."""

    batches: int
    group_count: int
    present: np.ndarray
    keys: np.ndarray
    lengths: np.ndarray  # each sequence's length

    @property
    def batch(self) -> np.ndarray:
        return self.present // self.group_count

    @property
    def present_per_batch(self) -> np.ndarray:
        return np.bincount(self.batch, minlength=self.batches)

    @cached_property
    def _of_sequence(self) -> np.ndarray:
        # Only the group curve needs each sequence's group; launches need only which groups exist.
        return np.searchsorted(self.present, self.keys)

    def _per_group(self, sequence_values: np.ndarray) -> np.ndarray:
        return np.bincount(self._of_sequence, weights=sequence_values, minlength=self.present.size)

    @property
    def tokens(self) -> np.ndarray:
        return self._per_group(self.lengths)

    @property
    def squares(self) -> np.ndarray:
        """Sum of each group's squared lengths: its attention FLOPs over the per-token-squared factor."""
        return self._per_group(self.lengths**2)


def _length_groups(batches: BatchSet, boundaries: tuple[int, ...]) -> _LengthGroups:
    """Group every batch's sequences by the profile's length boundaries (the last group holds lengths
    beyond the last boundary); only groups present are kept, so thousands of boundaries cost nothing."""
    group_count = len(boundaries) + 1
    group = np.searchsorted(np.asarray(boundaries), batches.sequence_lengths, side="left")
    keys = batches.sequence_batch * group_count + group
    if batches.batches * group_count <= 4 * keys.size + 4096:
        # Few groups per sequence (the GPU presets' 5): counting every key is cheaper than sorting them.
        present = np.flatnonzero(np.bincount(keys, minlength=batches.batches * group_count))
    else:
        present = sorted_distinct(keys)
    return _LengthGroups(batches.batches, group_count, present, keys, batches.sequence_lengths.astype(np.float64))


def document_block_pairs(batches: BatchSet, block_tokens: int, *, causal: bool) -> np.ndarray:
    """Each batch's (query block, key block) pairs of `block_tokens` that a document mask leaves, in squared
    tokens (x the model's attention FLOPs per squared token gives their work): a pair is computed when one
    document covers both blocks (and, causal, the key block is not after the query block). Documents lie
    one after another from each row's start, so the key blocks a query block i meets run from the first block
    of the first document covering i: for the blocks whose first covering document is s, that is s's first
    block. Causal pairs are counted in full and halved, as the model's causal FLOPs per squared token are."""
    lengths = batches.sequence_lengths.astype(np.int64)
    rows = batches.sequence_row
    ends = np.cumsum(lengths)
    row_start = np.zeros(batches.row_slots.size, dtype=np.int64)
    first_of_row = np.r_[True, rows[1:] != rows[:-1]] if rows.size else np.zeros(0, dtype=bool)
    row_start[rows[first_of_row]] = (ends - lengths)[first_of_row]
    starts = ends - lengths - row_start[rows]
    first_block = starts // block_tokens
    last_block = (starts + lengths - 1) // block_tokens  # -1 for an empty first document
    previous_last = np.where(first_of_row, -1, np.r_[-1, last_block[:-1]])
    real = lengths > 0

    def triangle(count: np.ndarray) -> np.ndarray:
        return count * (count + 1) / 2

    # Blocks previous_last + 1 .. last_block each meet keys from first_block up to themselves.
    lower = np.where(real, triangle(last_block - first_block + 1) - triangle(previous_last - first_block + 1), 0.0)
    lower = np.where(real & (previous_last >= last_block), 0.0, lower)
    lower_per_row = np.bincount(rows, weights=lower, minlength=batches.row_slots.size)
    touched = np.zeros(batches.row_slots.size)
    np.maximum.at(touched, rows[real], last_block[real] + 1)  # blocks a row's documents reach
    pairs = lower_per_row if causal else 2 * lower_per_row - touched
    # A causal pair counts half (the model's FLOPs per squared token already halve the causal square).
    pair_tokens = pairs * block_tokens**2 * (2.0 if causal else 1.0)
    return np.bincount(batches.row_batch, weights=pair_tokens, minlength=batches.batches)


def _saturation_slowdown(tokens: np.ndarray, half_saturation_tokens: float) -> np.ndarray:
    """Peak over achieved FLOP/s: (tokens + half) / tokens; 1 for empty batches (no work to slow)."""
    safe_tokens = np.where(tokens > 0, tokens, 1.0)
    return np.where(tokens > 0, (safe_tokens + half_saturation_tokens) / safe_tokens, 1.0)


register_cost_model(CostModelType("transformer", "FLOPs of a transformer on a hardware profile's achieved rates, "
                                  "plus launches, shape changes, transfers and an all-reduce as NCCL runs it",
                                  TransformerCostModel))
