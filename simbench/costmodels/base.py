"""The contract between strategies' batches and the cost models that price them.

A `BatchSet` holds many per-device batches at once (ragged, flat arrays) so that pricing
hundreds of thousands of batches is a handful of numpy calls, not a Python loop. `CostModel` declares
everything the simulator asks of a cost model, with a neutral default for what a model may not price.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum

import numpy as np

from simbench.errors import InputError


class ExecutionMode(str, Enum):
    """How a device executes the rows of a batch."""

    PADDED = "padded"  # fixed-shape rows; one attention over the whole row, no mask (`row`)
    SORTED = "sorted"  # rows padded to the batch's longest; the shape changes from batch to batch
    PACKED_VARLEN = "packed_varlen"  # fixed-shape packs, attention per sequence (flash-attention varlen)
    UNPADDED = "unpadded"  # no padding at all; kernels grouped by length (NVIDIA/Baidu un-padding)
    PACKED_DENSE_MASK = "packed_dense_mask"  # fixed-shape packs, the whole row under a dense block-diagonal mask
    PACKED_BLOCK_MASK = "packed_block_mask"  # fixed-shape packs, FlexAttention's document mask (masked blocks skipped)


class Attention(str, Enum):
    """How a row's attention runs, in the words a plan's `attention` option takes."""

    ROW = "row"  # one attention over the whole row: packed documents attend to each other (accepted)
    DENSE_MASK = "dense-mask"  # a block-diagonal attn_mask as a dense tensor: SDPA leaves its flash kernel
    BLOCK_MASK = "block-mask"  # FlexAttention with a document block mask: fully masked blocks skipped
    VARLEN = "varlen"  # per-document varlen kernels (flash-attn, torch varlen_attn): no cross-document work


# The mode a device runs fixed-shape rows in under each attention implementation.
ROW_MODE_OF_ATTENTION = {Attention.ROW: ExecutionMode.PADDED, Attention.DENSE_MASK: ExecutionMode.PACKED_DENSE_MASK,
                         Attention.BLOCK_MASK: ExecutionMode.PACKED_BLOCK_MASK,
                         Attention.VARLEN: ExecutionMode.PACKED_VARLEN}


def attention_of(mode: ExecutionMode) -> Attention:
    """The attention implementation a mode runs: sorted batches attend over their rows, un-padded ones per sequence."""
    mode = ExecutionMode(mode)
    if mode is ExecutionMode.SORTED:
        return Attention.ROW
    if mode is ExecutionMode.UNPADDED:
        return Attention.VARLEN
    return next(attention for attention, row_mode in ROW_MODE_OF_ATTENTION.items() if row_mode is mode)


@dataclass(frozen=True, eq=False)
class BatchSet:
    """Many per-device batches, flattened.

    Rows are packs or padded slots; each row belongs to one batch, each sequence to one row.
    `row_batch` and `sequence_row` are non-decreasing (batches and rows are contiguous).
    """

    sequence_lengths: np.ndarray  # (n_sequences,) real tokens of each sequence
    sequence_row: np.ndarray  # (n_sequences,) row index of each sequence
    row_slots: np.ndarray  # (n_rows,) token slots of each row (padding included)
    row_batch: np.ndarray  # (n_rows,) batch index of each row
    batches: int  # number of batches

    @property
    def sequence_batch(self) -> np.ndarray:
        return self.row_batch[self.sequence_row]

    def per_batch(self, row_or_sequence_values: np.ndarray, *, of: str) -> np.ndarray:
        """Sum a per-row (`of="rows"`) or per-sequence (`of="sequences"`) array within each batch."""
        index = self.row_batch if of == "rows" else self.sequence_batch
        return np.bincount(index, weights=row_or_sequence_values, minlength=self.batches)


@dataclass(frozen=True, eq=False)
class StepCosts:
    """Seconds one device spends on each batch of a `BatchSet`, split by cause (arrays of n_batches)."""

    compute_seconds: np.ndarray  # useful work on real tokens
    padding_seconds: np.ndarray  # work spent on padding tokens (their dense layers and attention)
    overhead_seconds: np.ndarray  # masks, loss unpacking, kernel launches, shape changes, host transfer
    # Attention between different sequences of one row, computed and then masked out (a block-diagonal mask
    # on dense kernels): no padding token is involved, yet no real work is done.
    masked_attention_seconds: np.ndarray | None = None
    # Seconds a device waits inside its own step: a replica's pipeline bubbles and stalls, its slowest
    # context-parallel rank (None: none, one device computing alone).
    stall_seconds: np.ndarray | None = None

    def __post_init__(self):
        for name in ("masked_attention_seconds", "stall_seconds"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.zeros(np.shape(self.compute_seconds)))

    @property
    def total_seconds(self) -> np.ndarray:
        return (self.compute_seconds + self.padding_seconds + self.masked_attention_seconds + self.overhead_seconds
                + self.stall_seconds)


class CostModel(ABC):
    """Everything the simulator asks of a cost model: it prices batches on one device, and the communication
    between devices.

    A cost model defines `step_costs` and `allreduce_seconds`; every other member has a neutral default here,
    the answer for a model that does not price that (no ideal, no first-sight cost, no VTS pipeline, ...).
    The built-in models subclass this class; an object that does not (a plug-in's, or one handed to
    `simulate`) is given the defaults by `as_cost_model`, its own members kept.
    """

    @abstractmethod
    def step_costs(self, batches: BatchSet, mode: ExecutionMode) -> StepCosts:
        """Per-batch device time for a forward + backward + optimizer step."""

    @abstractmethod
    def allreduce_seconds(self, devices: int) -> float:
        """Time of the gradient all-reduce across `devices` data-parallel devices (0 for one)."""

    def gradient_sync(self, devices: int) -> object | None:
        """The gradients' synchronisation across `devices` devices, by part and with what a step hides of it: a
        `simbench.sim.parallel.gradient_sync.GradientSync` (a 4D replica's; not named in the signature, the
        simulator being above the cost models). None (the default): all of `allreduce_seconds` after the step,
        the optimizer update inside the step."""
        return None

    def ideal_sequence_seconds(self, sequence_lengths: np.ndarray) -> np.ndarray | None:
        """The least device time of each sequence alone (no padding, no fixed cost): with it, reports draw the
        ideal speed-up (`simbench.costmodels.ideal`). None (the default): the ratio of padded slots to real
        tokens is drawn instead."""
        return None

    def first_sight_seconds(self, mode: ExecutionMode) -> float:
        """What a step at a batch shape new to the device costs on top of its price (`simbench.sim.shapes`);
        0 (the default): shapes cost nothing."""
        return 0.0

    def first_sight_hidden_seconds(self, mode: ExecutionMode) -> float:
        """The most of `first_sight_seconds(mode)` the GPU work of the step it falls in hides: a step priced at T
        seconds shows first_sight_seconds - min(this, T) of it (`simbench.sim.shapes`); 0 (the default): none."""
        return 0.0

    def vts_stage_seconds(self, sequence_lengths: np.ndarray, stages: int) -> np.ndarray:
        """Per-stage time of each sample in a VTS pipeline of `stages` stages: a + b * length. The default
        refuses: a model without it cannot price VTS plans."""
        raise InputError(f"cost model {type(self).__name__} cannot price VTS plans (it has no `vts_stage_seconds`)")

    def vts_pipeline_stages(self) -> int | None:
        """The stages of the model's own VTS pipeline, for plans that give none; None (the default): a plan
        must give its stages."""
        return None

    @property
    def vts_buffer_samples(self) -> int:
        """Samples each inter-stage FIFO of a VTS pipeline holds; 0 (the default): none."""
        return 0

    @property
    def attention_parity_tokens(self) -> float | None:
        """The sequence length whose attention takes as long as its dense layers: what packers balancing
        predicted work (`wlb`) weigh l^2 against l with. None (the default): the packer's own."""
        return None

    @property
    def fixed_step_seconds(self) -> float:
        """What every step costs whatever its batch (inside `step_costs`' overhead), paid once when a step
        runs as several microbatches (`simbench.sim.accumulation`). 0 (the default): every microbatch is
        priced whole."""
        return 0.0

    @property
    def allreduce_latency_seconds(self) -> float | None:
        """The collectives' per-hop latency, for the padding exchange's all-gather (`simbench.sim.exchange`);
        None (the default): the exchange's own default."""
        return None

    @property
    def unpadded_noise_cv(self) -> float:
        """The coefficient of variation of an un-padded step's time from device to device
        (`simbench.costmodels.noise`); 0 (the default): no noise."""
        return 0.0


# The members `CostModel` declares, in its order: what every wrapper passes on and a plug-in may answer.
COST_MODEL_MEMBERS = tuple(name for name in vars(CostModel) if not name.startswith("_"))
REQUIRED_MEMBERS = tuple(sorted(CostModel.__abstractmethods__))


class CostModelWrapper(CostModel):
    """A cost model that changes some of what `cost_model` answers: every member is the wrapped model's,
    passed on by name, until a subclass overrides it."""

    def __init__(self, cost_model: CostModel):
        self.cost_model = cost_model

    def step_costs(self, batches: BatchSet, mode: ExecutionMode) -> StepCosts:
        return self.cost_model.step_costs(batches, mode)

    def allreduce_seconds(self, devices: int) -> float:
        return self.cost_model.allreduce_seconds(devices)

    def gradient_sync(self, devices: int) -> object | None:
        return self.cost_model.gradient_sync(devices)

    def ideal_sequence_seconds(self, sequence_lengths: np.ndarray) -> np.ndarray | None:
        return self.cost_model.ideal_sequence_seconds(sequence_lengths)

    def first_sight_seconds(self, mode: ExecutionMode) -> float:
        return self.cost_model.first_sight_seconds(mode)

    def first_sight_hidden_seconds(self, mode: ExecutionMode) -> float:
        return self.cost_model.first_sight_hidden_seconds(mode)

    def vts_stage_seconds(self, sequence_lengths: np.ndarray, stages: int) -> np.ndarray:
        return self.cost_model.vts_stage_seconds(sequence_lengths, stages)

    def vts_pipeline_stages(self) -> int | None:
        return self.cost_model.vts_pipeline_stages()

    @property
    def vts_buffer_samples(self) -> int:
        return self.cost_model.vts_buffer_samples

    @property
    def attention_parity_tokens(self) -> float | None:
        return self.cost_model.attention_parity_tokens

    @property
    def fixed_step_seconds(self) -> float:
        return self.cost_model.fixed_step_seconds

    @property
    def allreduce_latency_seconds(self) -> float | None:
        return self.cost_model.allreduce_latency_seconds

    @property
    def unpadded_noise_cv(self) -> float:
        return self.cost_model.unpadded_noise_cv


class PluginCostModel(CostModel):
    """A cost model that does not subclass `CostModel` (a plug-in's), made one: each member is the plug-in's
    own where it has it, else `CostModel`'s default. A plug-in that carries a `hardware` profile and no
    latency or noise of its own takes them from the profile, as the transformer model does."""

    def __init__(self, plugin):
        # The one look at which members an object from outside has: everything inside calls them plainly.
        missing = [name for name in REQUIRED_MEMBERS if not callable(getattr(plugin, name, None))]
        if missing:
            absent = " and no ".join(f"`{name}`" for name in missing)
            raise InputError(f"cost model {type(plugin).__name__} has no {absent}: a cost model defines "
                             f"{' and '.join(REQUIRED_MEMBERS)} (see simbench.costmodels.CostModel)")
        self.plugin, self.hardware = plugin, getattr(plugin, "hardware", None)
        self.own = frozenset(name for name in COST_MODEL_MEMBERS if hasattr(plugin, name))

    def step_costs(self, batches: BatchSet, mode: ExecutionMode) -> StepCosts:
        return self.plugin.step_costs(batches, mode)

    def allreduce_seconds(self, devices: int) -> float:
        return self.plugin.allreduce_seconds(devices)

    def gradient_sync(self, devices: int) -> object | None:
        return self.plugin.gradient_sync(devices) if "gradient_sync" in self.own else super().gradient_sync(devices)

    def ideal_sequence_seconds(self, sequence_lengths: np.ndarray) -> np.ndarray | None:
        if "ideal_sequence_seconds" in self.own:
            return self.plugin.ideal_sequence_seconds(sequence_lengths)
        return super().ideal_sequence_seconds(sequence_lengths)

    def first_sight_seconds(self, mode: ExecutionMode) -> float:
        if "first_sight_seconds" in self.own:
            return self.plugin.first_sight_seconds(mode)
        return super().first_sight_seconds(mode)

    def first_sight_hidden_seconds(self, mode: ExecutionMode) -> float:
        if "first_sight_hidden_seconds" in self.own:
            return self.plugin.first_sight_hidden_seconds(mode)
        return super().first_sight_hidden_seconds(mode)

    def vts_stage_seconds(self, sequence_lengths: np.ndarray, stages: int) -> np.ndarray:
        if "vts_stage_seconds" in self.own:
            return self.plugin.vts_stage_seconds(sequence_lengths, stages)
        raise InputError(f"cost model {type(self.plugin).__name__} cannot price VTS plans "
                         "(it has no `vts_stage_seconds`)")

    def vts_pipeline_stages(self) -> int | None:
        if "vts_pipeline_stages" in self.own:
            return self.plugin.vts_pipeline_stages()
        return super().vts_pipeline_stages()

    @property
    def vts_buffer_samples(self) -> int:
        return self.plugin.vts_buffer_samples if "vts_buffer_samples" in self.own else super().vts_buffer_samples

    @property
    def attention_parity_tokens(self) -> float | None:
        if "attention_parity_tokens" in self.own:
            return self.plugin.attention_parity_tokens
        return super().attention_parity_tokens

    @property
    def fixed_step_seconds(self) -> float:
        return self.plugin.fixed_step_seconds if "fixed_step_seconds" in self.own else super().fixed_step_seconds

    @property
    def allreduce_latency_seconds(self) -> float | None:
        if "allreduce_latency_seconds" in self.own:
            return self.plugin.allreduce_latency_seconds
        if self.hardware is not None:
            return self.hardware.allreduce_latency_seconds
        return super().allreduce_latency_seconds

    @property
    def unpadded_noise_cv(self) -> float:
        if "unpadded_noise_cv" in self.own:
            return self.plugin.unpadded_noise_cv
        return self.hardware.unpadded_noise_cv if self.hardware is not None else super().unpadded_noise_cv


class StoppableCostModel(CostModelWrapper):
    """A plug-in's cost model whose every member runs under `simbench.plugins.in_time`: one that does not
    answer within SIMBENCH_PLUGIN_TIMEOUT is interrupted and named (`what`), ending the command. Built-in models
    are never wrapped: their calls cost what they did."""

    def __init__(self, cost_model: CostModel, what: str):
        super().__init__(cost_model)
        self.what = what

    def _in_time(self, member: str, answer):
        from simbench.plugins import CALL_TIMEOUT_SECONDS, in_time, timeout_seconds

        return in_time(f"{self.what} ({member})", answer, timeout=timeout_seconds(CALL_TIMEOUT_SECONDS))

    def step_costs(self, batches: BatchSet, mode: ExecutionMode) -> StepCosts:
        return self._in_time("step_costs", lambda: self.cost_model.step_costs(batches, mode))

    def allreduce_seconds(self, devices: int) -> float:
        return self._in_time("allreduce_seconds", lambda: self.cost_model.allreduce_seconds(devices))

    def gradient_sync(self, devices: int) -> object | None:
        return self._in_time("gradient_sync", lambda: self.cost_model.gradient_sync(devices))

    def ideal_sequence_seconds(self, sequence_lengths: np.ndarray) -> np.ndarray | None:
        return self._in_time("ideal_sequence_seconds", lambda: self.cost_model.ideal_sequence_seconds(sequence_lengths))

    def first_sight_seconds(self, mode: ExecutionMode) -> float:
        return self._in_time("first_sight_seconds", lambda: self.cost_model.first_sight_seconds(mode))

    def first_sight_hidden_seconds(self, mode: ExecutionMode) -> float:
        return self._in_time("first_sight_hidden_seconds", lambda: self.cost_model.first_sight_hidden_seconds(mode))

    def vts_stage_seconds(self, sequence_lengths: np.ndarray, stages: int) -> np.ndarray:
        return self._in_time("vts_stage_seconds", lambda: self.cost_model.vts_stage_seconds(sequence_lengths, stages))

    def vts_pipeline_stages(self) -> int | None:
        return self._in_time("vts_pipeline_stages", lambda: self.cost_model.vts_pipeline_stages())

    @property
    def vts_buffer_samples(self) -> int:
        return self._in_time("vts_buffer_samples", lambda: self.cost_model.vts_buffer_samples)

    @property
    def attention_parity_tokens(self) -> float | None:
        return self._in_time("attention_parity_tokens", lambda: self.cost_model.attention_parity_tokens)

    @property
    def fixed_step_seconds(self) -> float:
        return self._in_time("fixed_step_seconds", lambda: self.cost_model.fixed_step_seconds)

    @property
    def allreduce_latency_seconds(self) -> float | None:
        return self._in_time("allreduce_latency_seconds", lambda: self.cost_model.allreduce_latency_seconds)

    @property
    def unpadded_noise_cv(self) -> float:
        return self._in_time("unpadded_noise_cv", lambda: self.cost_model.unpadded_noise_cv)


def as_cost_model(cost_model) -> CostModel:
    """`cost_model` itself when it subclasses `CostModel`, else a `PluginCostModel` of it: where a cost model
    comes in from outside (the registry builds one, `simulate` is handed one)."""
    return cost_model if isinstance(cost_model, CostModel) else PluginCostModel(cost_model)
