"""A calibration run: which batches to time, timing them on the device, and the fitted profile.

The batches are synthetic (uniform random lengths), never drawn from a scenario's histogram, so
`simbench measure` always checks the profile on batches it was not fitted on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from simbench.calibrate.batches import TorchBatch, batch_for_layout
from simbench.calibrate.encoder import EncoderShape
from simbench.calibrate.fit import ProfileFit, TimedLayout, fit_profile
from simbench.calibrate.layout import BatchLayout
from simbench.calibrate.timing import (StepTiming, build_trainer, check_timed_work, device_description, load_adjusted,
                                       time_batches, training_precision, uses_cpu_clock)
from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.model import ModelSpec
from simbench.errors import InputError
from simbench.validation import check_seed, check_whole_number

# The calibration packs hold up to 8 sequences of at least one token each.
MIN_ROW_LENGTH = 8
# The token head's cost grows with the vocabulary but is not in the cost model's FLOPs (it runs
# on the 15 % masked tokens only); a small vocabulary keeps that unmodelled share small.
CALIBRATION_VOCABULARY = 1024


@dataclass(frozen=True)
class CalibrationSettings:
    """Everything a calibration run depends on."""

    model: ModelSpec
    max_length: int
    device: str
    threads: int
    seed: int = 0
    quick: bool = False
    unpadded_attention: str | None = None  # default: the fastest this device supports
    wall_clock: bool = False  # force wall-clock timing where CPU seconds would be used

    def __post_init__(self):
        check_whole_number(self.max_length, "max_length", minimum=MIN_ROW_LENGTH)
        check_whole_number(self.threads, "threads", minimum=1)
        check_seed(self.seed)

    @property
    def cpu_clock(self) -> bool:
        return uses_cpu_clock(self.device, self.threads, self.wall_clock)

    @property
    def warmup(self) -> int:
        return 1 if self.quick else 2

    @property
    def repeats(self) -> int:
        return 3 if self.quick else 7

    @property
    def attention(self) -> str:
        """How un-padded batches run attention (see `batches.UNPADDED_ATTENTION`)."""
        return self.unpadded_attention or default_unpadded_attention(self.device)

    @property
    def per_document_attention(self) -> str:
        """The profile's `per_document_attention`: packed-varlen batches attend as un-padded ones do here, one call
        per length group (`grouped`) or one kernel over the batch (`varlen`)."""
        return "grouped" if self.attention == "grouped" else "varlen"

    def encoder_shape(self) -> EncoderShape:
        model = self.model
        if model.is_decoder:  # timing it as an encoder would price the wrong attention and positions
            raise InputError(f"model {model.name} is a decoder; `simbench calibrate-decoder --model {model.name}` "
                             f"times decoder LLMs")
        if self.max_length > model.max_positions:
            raise InputError(f"max length {self.max_length} exceeds the model's {model.max_positions} positions")
        return encoder_shape(model)


    def timed_shape(self):
        """The torch model timed: the encoder, or for a decoder (as `simbench measure` times one) a causal LM."""
        if not self.model.is_decoder:
            return self.encoder_shape()
        if self.max_length > self.model.max_positions:
            raise InputError(f"max length {self.max_length} exceeds the model's {self.model.max_positions} positions")
        return timed_shape(self.model)


def timed_shape(model: ModelSpec):
    """The torch model timed for `model`: an `EncoderShape`, or a `causal_lm.DecoderShape` for a decoder."""
    if model.is_decoder:
        from simbench.calibrate.causal_lm import DecoderShape

        return DecoderShape(model)
    return encoder_shape(model)


def encoder_shape(model: ModelSpec) -> EncoderShape:
    """The torch encoder timed for `model`, with the small calibration vocabulary."""
    return EncoderShape(layers=model.layers, hidden=model.hidden, heads=model.heads, intermediate=model.ffn,
                        vocabulary=min(model.vocab, CALIBRATION_VOCABULARY), max_length=model.max_positions)


def calibration_layouts(max_length: int, quick: bool, rng: np.random.Generator,
                        longest: int | None = None, grouped: bool = False) -> list[BatchLayout]:
    """Padded rows at several lengths and batch sizes, packs of several depths, and un-padded
    batches with one, a few or many length groups (so the per-group cost is measured, not assumed);
    where per-document attention runs per length group (`grouped`), packed-varlen packs too.

    A few rows up to `longest` tokens (the model's positions) make attention a large share of the
    step, which pins down its rate; at max_length alone it is too small a share to fit.
    """
    row_counts = (2, 16) if quick else (4, 16)
    lengths = (max_length // 4, max_length // 2, max_length) if quick else tuple(
        max_length * quarter // 4 for quarter in (1, 2, 3, 4))
    layouts = []
    for rows in row_counts:
        for row_length in lengths:
            layouts.append(BatchLayout.padded(rng.integers(1, row_length + 1, size=rows), row_length))
        for depth in ((2, 6) if quick else (2, 4, 8)):
            layouts.append(BatchLayout.packed([_random_pack(max_length, depth, rng) for _ in range(rows)], max_length))
    for row_length in (2 * max_length,) if quick else (2 * max_length, 4 * max_length):
        for rows in (1,) if quick else (1, 2):
            if row_length <= (longest or max_length):
                layouts.append(BatchLayout.padded(rng.integers(row_length // 2, row_length + 1, size=rows), row_length))
    for sequences in ((4, 12) if quick else (4, 16, 32)):
        centre = int(rng.integers(max_length // 4, 3 * max_length // 4 + 1))
        for groups in sorted({1, max(1, sequences // 4), sequences}):
            layouts.append(BatchLayout.unpadded(rng.permutation(
                _lengths_in_groups(sequences, groups, centre, max_length))))
    # Groups of one and of several sequences, short and long: what a group costs beyond its FLOPs
    # depends on its size, which one centre alone cannot show.
    for centre in ((max_length // 8, max_length - 8) if quick else (max_length // 8, max_length // 2, max_length - 8)):
        for per_group in ((1, 4) if quick else (1, 4, 8)):
            groups = 8 if per_group == 1 else 2
            layouts.append(BatchLayout.unpadded(rng.permutation(
                _lengths_in_groups(groups * per_group, groups, centre, max_length))))
    # As many groups as a batch of real documents holds (nearly every length up to max_length at once, packed
    # documents' most of all): each group's fixed cost, which a few groups leave to the rate to absorb.
    many = max(2, max_length // 2)
    layouts.append(BatchLayout.unpadded(rng.permutation(_lengths_in_groups(many, many, max_length // 2, max_length))))
    if grouped:
        # Packed-varlen packs then attend as un-padded batches do, over a batch's documents of every length: a
        # few of them anchor that price where the un-padded batches alone leave the group terms loosely fitted.
        for rows in row_counts:
            layouts.append(BatchLayout.packed([_random_pack(max_length, min(8, max_length), rng) for _ in range(rows)],
                                              max_length, mode=ExecutionMode.PACKED_VARLEN))
    return layouts


def prepare_calibration(settings: CalibrationSettings) -> tuple[list[BatchLayout], list[TorchBatch]]:
    """The calibration batches, as layouts (for the fit) and as torch batches (to time)."""
    rng = np.random.default_rng(settings.seed)
    vocabulary = settings.timed_shape().vocabulary
    layouts = calibration_layouts(settings.max_length, settings.quick, rng, settings.model.max_positions,
                                  grouped=settings.per_document_attention == "grouped")
    flops = (settings.warmup + settings.repeats) * sum(settings.model.training_flops(layout.row_slots)
                                                       for layout in layouts)
    check_timed_work(flops, settings.device, f"calibrating {settings.model.name} on rows of {settings.max_length:,} "
                     f"tokens ({len(layouts)} batches, {settings.warmup + settings.repeats} times each)",
                     "use --quick, a smaller --model, a shorter --max-length, or a GPU")
    return layouts, [batch_for_layout(layout, vocabulary, rng, settings.attention) for layout in layouts]


def run_calibration(settings: CalibrationSettings, progress: Callable[[], None] = lambda: None) -> ProfileFit:
    """Time every calibration batch on the device and fit a profile to the medians."""
    torch.set_num_threads(settings.threads)
    layouts, batches = prepare_calibration(settings)
    trainer = build_trainer(settings.timed_shape(), settings.device, settings.seed, settings.cpu_clock)
    timings = time_batches(trainer, batches, settings.warmup, settings.repeats, progress,
                           order_rng=np.random.default_rng(settings.seed + 1))
    return fit_calibration(settings, layouts, timings)


def fit_calibration(settings: CalibrationSettings, layouts: list[BatchLayout], timings: list[StepTiming],
                    adjusted_seconds: np.ndarray | None = None) -> ProfileFit:
    """The profile fitted to the load-adjusted timings of the calibration batches, recording them.

    `adjusted_seconds` come from timing them among other batches; by default the load is
    factored out of these timings alone.
    """
    shape = settings.timed_shape()
    model = settings.model
    if adjusted_seconds is None:
        adjusted_seconds = load_adjusted(timings).seconds
    timed = [TimedLayout(layout, float(seconds), timing.spread_fraction)
             for layout, timing, seconds in zip(layouts, timings, adjusted_seconds)]
    machine = device_description(settings.device)
    record = {
        **machine,
        "model": settings.model.name,
        "model_dimensions": {"layers": model.layers, "hidden": model.hidden, "heads": model.heads,
                             "ffn": model.ffn, "vocabulary": shape.vocabulary,
                             **({"family": model.family, "kv_heads": model.kv_heads or model.heads,
                                 "gated_mlp": model.gated_mlp} if model.is_decoder else {})},
        "max_length": settings.max_length,
        "seed": settings.seed,
        "warmup_steps": settings.warmup,
        "repeats": len(timings[0].samples_seconds),
        "unpadded_attention": settings.attention,
        "precision": training_precision(settings.device),
        "clock": "process CPU seconds" if settings.cpu_clock else "wall-clock seconds",
        "timings": [{"kind": layout.kind, "mode": layout.mode.value, "rows": [list(row) for row in layout.rows],
                     "row_slots": list(layout.row_slots), "samples_seconds": list(timing.samples_seconds),
                     "median_seconds": timing.median_seconds, "load_adjusted_seconds": float(seconds)}
                    for layout, timing, seconds in zip(layouts, timings, adjusted_seconds)],
    }
    base = {
        "name": f"calibrated {machine['device_name']}",
        "source": (f"simbench calibrate: {settings.model.name} {settings.model.family} on {machine['device_name']} "
                   f"({machine['device']}), torch {machine['torch_version']}, {machine['threads']} threads"),
        "unpad_group_boundaries": _group_boundaries(settings),
        "per_document_attention": settings.per_document_attention,
        "provenance": {"per_document_attention": f"measured: how simbench calibrate ran it on this device "
                                                 f"({settings.attention} attention)"},
        "calibration": record,
    }
    fit = fit_profile(settings.model, timed, base)
    return replace(fit, profile=fit.profile.model_copy(update={
        "source": fit.profile.source + _group_curve_provenance(layouts, fit.profile)}))


def _group_curve_provenance(layouts: list[BatchLayout], profile) -> str:
    """Where the un-padded group curve came from: the un-padded batches it was fitted on."""
    unpadded = [layout for layout in layouts if layout.kind == "unpadded"]
    if not unpadded:
        return ""
    group_sizes = [count for layout in unpadded for count in np.unique(layout.lengths, return_counts=True)[1]]
    lengths = np.concatenate([layout.lengths for layout in unpadded])
    return (f"; un-padded length groups reach tokens / (tokens + {profile.unpad_group_half_saturation_tokens:.4g}) "
            f"of the attention rate, fitted with the other fields on {len(unpadded)} un-padded batches with "
            f"{min(group_sizes)}-{max(group_sizes)} sequences per group at lengths {lengths.min()}-{lengths.max()} "
            f"(timings under `calibration`)")


def calibration_steps(settings: CalibrationSettings) -> int:
    """Training steps a run takes, for a progress bar."""
    layouts = calibration_layouts(settings.max_length, settings.quick, np.random.default_rng(settings.seed),
                                  settings.model.max_positions, grouped=settings.per_document_attention == "grouped")
    return len(layouts) * (settings.warmup + settings.repeats)


def _lengths_in_groups(sequences: int, groups: int, centre: int, max_length: int) -> np.ndarray:
    """`sequences` lengths taking `groups` distinct values (fewer if the lengths near `centre` run
    out) spread evenly around `centre`.

    Batches of the same size and centre hold about the same tokens whatever their number of
    groups, so their differences measure the per-group cost alone.
    """
    if groups == 1:
        return np.full(sequences, centre)
    half_width = min(centre - 1, max_length - centre, groups)
    values = np.unique(np.round(np.linspace(centre - half_width, centre + half_width, groups)).astype(np.int64))
    return np.resize(values, sequences)


def _random_pack(max_length: int, depth: int, rng: np.random.Generator) -> list[int]:
    """`depth` random lengths filling 80-100 % of a row, as a good packer's packs do."""
    total = int(rng.integers(max(depth, int(0.8 * max_length)), max_length + 1))
    cuts = np.sort(rng.choice(np.arange(1, total), size=depth - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [total]])).tolist()


def _group_boundaries(settings: CalibrationSettings) -> tuple[int, ...]:
    # Grouped attention makes every distinct length a group of its own (one call each), up to the
    # longest position the model has; jagged and varlen kernels take the whole batch in one call.
    if settings.per_document_attention == "grouped":
        return tuple(range(1, settings.model.max_positions + 1))
    return (settings.model.max_positions,)


def decoder_attention(device: str) -> str:
    """How a decoder attends within each sequence (`DecoderLayer`): a varlen kernel with a causal window on CUDA
    (`kernels.per_sequence_kernel`), else one causal call per group of equal-length sequences."""
    from simbench.calibrate.kernels import per_sequence_kernel

    return per_sequence_kernel(device, causal=True)


def default_unpadded_attention(device: str) -> str:
    """An encoder's per-sequence attention: flash-attention's varlen kernel on CUDA when installed, else torch's
    (`kernels.per_sequence_kernel`); grouped on a CPU. Jagged nested tensors only when asked for: on an H200 they
    ran BERT-large's 32 x 512 packed-varlen steps in 394 ms and un-padded ones in 379 ms, padding's in 102 ms."""
    from simbench.calibrate.kernels import per_sequence_kernel

    return per_sequence_kernel(device, causal=False)
