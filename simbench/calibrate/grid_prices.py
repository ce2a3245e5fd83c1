"""A grid timing's step price on a hardware profile: through `TransformerCostModel` (`predict_grid`), and the
same prices written out per timing as a function of the fitted terms (`GridPrices`), which the fit's solver
evaluates thousands of times.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simbench.calibrate.grid_timings import MASK_KINDS, VARLEN_TILE_TOKENS, GridTiming, document_rows
from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.costmodels.hardware import HardwareProfile, load_hardware
from simbench.costmodels.model import MODEL_PRESETS, ModelSpec
from simbench.costmodels.transformer import FLEX_BLOCK_TOKENS, TransformerCostModel, document_block_pairs

# Eager PyTorch issues about 1,200 kernels a step for 24 encoder layers (the grid's README): 50 a layer.
# The count is held; the host's time per kernel is fitted, so only their product (the floor) matters.
GRID_KERNELS_PER_LAYER = 50

# Fitted fields, each with (lower, upper) bounds and the scale the optimiser sees them in.
FITTED_FIELDS = {
    "linear_flops_per_s": ((1e12, 1e16), 1e15),
    "dense_half_saturation_width": ((0.0, 1e5), 1e3),
    "attention_flops_per_s": ((1e12, 1e16), 1e15),
    "half_saturation_tokens": ((0.0, 1e5), 1e3),
    "host_seconds_per_kernel": ((0.0, 1e-3), 1e-5),
    "varlen_floor_ratio": ((1.0, 3.0), 1.0),  # varlen steps launch at least the padded steps' kernels
    "varlen_causal_attention_fraction": ((0.05, 2.0), 1.0),
    "varlen_causal_half_length_tokens": ((0.0, 1e5), 1e3),
    "varlen_bidirectional_attention_fraction": ((0.05, 2.0), 1.0),
    "varlen_bidirectional_half_length_tokens": ((0.0, 1e5), 1e3),
    "dense_mask_attention_fraction": ((0.01, 1.0), 1.0),
    "block_mask_attention_fraction": ((0.01, 1.0), 1.0),
}
# The cost model's mode of each kind of grid line.
MODE_OF_KIND = {"padded": ExecutionMode.PADDED, "varlen": ExecutionMode.UNPADDED,
                "dense-mask": ExecutionMode.PACKED_DENSE_MASK, "block-mask": ExecutionMode.PACKED_BLOCK_MASK}


def slice_model(name: str, layers: int) -> ModelSpec:
    """The grid's slice of a model preset: its layers only (no embeddings, LM head or optimizer step)."""
    # A vocabulary of one makes a decoder's LM head cost nothing: the slice has none.
    return dataclasses.replace(MODEL_PRESETS[name], layers=layers, vocab=1)


def grid_base(base: HardwareProfile | str = "h200") -> dict:
    """The base profile's fields with what a slice's timing holds no trace of switched off: optimizer,
    input transfer, fixed step cost, per-kernel device gaps (absorbed in the rates), small-kernel groups, and
    packing's masks and losses (a masked line's mask is built before its steps are timed)."""
    data = load_hardware(base).model_dump()
    data.update(optimizer_seconds_per_parameter=0.0, step_overhead_seconds=0.0, input_bytes_per_token=0.0,
                pack_overhead_fraction=0.0, pack_overhead_per_depth_fraction=0.0,
                kernel_launch_seconds=0.0, kernels_per_layer=GRID_KERNELS_PER_LAYER, shape_change_seconds=0.0,
                unpadded_kernels_per_layer=None,  # the grid's varlen batches are flat: no gathers to launch
                unpadded_flops_fraction=1.0, unpadded_noise_cv=0.0, unpad_group_half_saturation_tokens=0.0,
                varlen_tile_tokens=VARLEN_TILE_TOKENS, calibration=None)
    return data


def predict_grid(profile: HardwareProfile, timings: Sequence[GridTiming]) -> np.ndarray:
    """Each timing's step seconds as `TransformerCostModel` prices it on `profile`: padded rows in PADDED
    mode (one sequence filling each row), varlen batches in UNPADDED mode (their documents, no padding), masked
    rows in their mask's packed mode (MODE_OF_KIND)."""
    predicted = np.empty(len(timings))
    groups: dict[tuple[str, int, str], list[int]] = {}
    for index, timing in enumerate(timings):
        groups.setdefault((timing.model, timing.layers, timing.kind), []).append(index)
    for (model, layers, kind), indices in groups.items():
        cost_model = TransformerCostModel(slice_model(model, layers), profile)
        batch_set = _batch_set([timings[i] for i in indices])
        predicted[indices] = cost_model.step_costs(batch_set, MODE_OF_KIND[kind]).total_seconds
    return predicted


def _batch_set(timings: Sequence[GridTiming]) -> BatchSet:
    """One batch per timing: its rows, each holding one sequence that fills it (padded) or its documents (laid
    row after row, each row filled exactly)."""
    lengths, sequence_row, row_slots, row_batch = [], [], [], []
    for batch, timing in enumerate(timings):
        first_row = len(row_slots)
        documents = timing.documents or (timing.row_length,) * timing.rows
        lengths += documents
        sequence_row += (first_row + document_rows(documents, timing.row_length)).tolist()
        row_slots += [timing.row_length] * timing.rows
        row_batch += [batch] * timing.rows
    return BatchSet(np.array(lengths, dtype=np.int64), np.array(sequence_row, dtype=np.int64),
                    np.array(row_slots, dtype=np.int64), np.array(row_batch, dtype=np.int64), len(timings))


@dataclass(frozen=True)
class GridPrices:
    """Each timing's step price on a `grid_base` profile as `TransformerCostModel` gives it, written out per timing
    as a function of the fitted terms (FITTED_FIELDS), so that a fit prices every timing at once, at several
    points in one call: microseconds an evaluation, where building a profile and cost models took milliseconds.
    tests/test_gridfit.py holds it equal to `predict_grid`. A step takes the longer of its device time and the
    host's launch floor:

        device = (tokens + half_saturation_tokens) / tokens x (dense + attention)
        dense = linear FLOPs x (width + dense_half_saturation_width) / (width x linear_flops_per_s)
        attention, by kind:
            padded       whole rows' attention FLOPs / attention_flops_per_s
            dense-mask   the same / dense_mask_attention_fraction
            varlen       per document: sum of FLOPs per token^2 x tiled keys x (length + half_length)
                         / (attention_flops_per_s x the direction's varlen fraction)
            block-mask   the FLOPs of the blocks the document mask leaves / (attention_flops_per_s x
                         block_mask_attention_fraction), no less than varlen's and no more than dense-mask's
        floor = layers x GRID_KERNELS_PER_LAYER x host_seconds_per_kernel (x varlen_floor_ratio if varlen)
    """

    tokens: np.ndarray
    linear_flops: np.ndarray
    linear_flops_per_width: np.ndarray
    row_attention_flops: np.ndarray  # the whole rows' attention (0 for varlen batches)
    documents_flops: np.ndarray  # FLOPs per token^2 x sum over documents of tiled keys x length (0 if not per document)
    documents_flops_per_half_length: np.ndarray  # ... x sum of tiled keys: what each token of half-length adds
    block_flops: np.ndarray  # attention FLOPs of the blocks a document mask leaves (block-mask only)
    floor_kernels: np.ndarray  # layers x GRID_KERNELS_PER_LAYER
    varlen: np.ndarray
    masked: np.ndarray  # rows under a dense or block mask
    block_mask: np.ndarray
    decoder: np.ndarray

    @classmethod
    def of(cls, timings: Sequence[GridTiming]) -> GridPrices:
        columns: dict[str, list] = {name: [] for name in cls.__dataclass_fields__}
        for timing in timings:
            model = slice_model(timing.model, timing.layers)
            linear, attention = float(model.linear_flops_per_token), float(model.attention_flops_per_token_squared)
            varlen, block_mask = timing.kind == "varlen", timing.kind == "block-mask"
            lengths = np.array(timing.documents if varlen or block_mask else (), dtype=np.float64)
            keys = np.ceil(lengths / VARLEN_TILE_TOKENS) * VARLEN_TILE_TOKENS
            blocks = (document_block_pairs(_batch_set([timing]), FLEX_BLOCK_TOKENS, causal=model.is_decoder)[0]
                      if block_mask else 0.0)
            for name, value in (("tokens", float(timing.tokens)), ("linear_flops", linear * timing.tokens),
                                ("linear_flops_per_width", linear * timing.tokens / model.hidden),
                                ("row_attention_flops", 0.0 if varlen else attention * timing.rows * timing.row_length**2),
                                ("documents_flops", attention * float(keys @ lengths)),
                                ("documents_flops_per_half_length", attention * float(keys.sum())),
                                ("block_flops", attention * float(blocks)),
                                ("floor_kernels", float(timing.layers * GRID_KERNELS_PER_LAYER)),
                                ("varlen", varlen), ("masked", timing.kind in MASK_KINDS), ("block_mask", block_mask),
                                ("decoder", model.is_decoder)):
                columns[name].append(value)
        return cls(**{name: np.array(values) for name, values in columns.items()})

    def take(self, indices: np.ndarray) -> GridPrices:
        """The prices of the timings at `indices` (repeats allowed: a bootstrap resample)."""
        return GridPrices(**{name: getattr(self, name)[indices] for name in self.__dataclass_fields__})

    def seconds(self, values: np.ndarray) -> np.ndarray:
        return np.exp(self.log_seconds(values))

    def log_seconds(self, values: np.ndarray) -> np.ndarray:
        """The log of each timing's step seconds at `values` (in FITTED_FIELDS' order); values of shape (terms,
        points) give a row of logs per point."""
        values = np.asarray(values, dtype=np.float64)[..., np.newaxis]
        (linear_rate, half_width, attention_rate, half_tokens, host_seconds, floor_ratio, causal_fraction,
         causal_half, bidirectional_fraction, bidirectional_half, dense_mask_fraction, block_mask_fraction) = values
        fraction = np.where(self.decoder, causal_fraction, bidirectional_fraction)
        half_length = np.where(self.decoder, causal_half, bidirectional_half)
        dense = (self.linear_flops + self.linear_flops_per_width * half_width) / linear_rate
        per_document = ((self.documents_flops + self.documents_flops_per_half_length * half_length)
                        / (attention_rate * fraction))
        rows = self.row_attention_flops / (attention_rate * np.where(self.masked, dense_mask_fraction, 1.0))
        blocks = self.block_flops / (attention_rate * block_mask_fraction)
        attention = np.where(self.block_mask, np.minimum(np.maximum(blocks, per_document), rows), rows + per_document)
        device = (self.tokens + half_tokens) / self.tokens * (dense + attention)
        floor = self.floor_kernels * host_seconds * np.where(self.varlen, floor_ratio, 1.0)
        return np.log(np.maximum(device, floor))


def moves_a_price(prices: GridPrices, values: np.ndarray, index: int, scale: float, *, both_ways: bool = False) -> bool:
    """Whether any timing's price changes with the term at `index` a millionth of its value (or scale) either side
    of `values` (a term no price moves with is not measured by the timings: a launch floor no step reaches), or,
    `both_ways`, on each side (a term at the edge of a range that prices the timings alike is not measured either:
    a block mask's rate where raising it leaves every block-mask step at what its documents cost on varlen
    kernels, the cost model's floor for it)."""
    step = max(abs(values[index]), scale) * 1e-6
    moved = np.repeat(values[:, np.newaxis], 2, axis=1)
    moved[index] += (-step, step)
    changed = np.any(prices.log_seconds(moved) != prices.log_seconds(values)[np.newaxis, :], axis=1)
    return bool(np.all(changed) if both_ways else np.any(changed))
