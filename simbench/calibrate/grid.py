"""Times the primitive-shape grid that `simbench.calibrate.gridfit` fits: forward and backward of a model's
layers on padded rows and on flat variable-length batches, the first step at each shape apart from the rest.

    >>> from simbench.calibrate.grid import grid_shapes
    >>> from simbench.costmodels.model import get_model
    >>> shapes = grid_shapes(get_model("tiny"), "cpu", quick=True)
    >>> sorted({shape.kind for shape in shapes}), all(shape.tokens <= 1024 for shape in shapes)
    (['dense-mask', 'padded', 'varlen'], True)

One step is what the stored H200 grid (simbench/data/measurements/h200-2026-11) timed: the layers
alone (no embeddings, head or optimizer) from a random input that requires grad, to the mean square of the
output, between two device synchronisations. `padded` rows attend over the whole row (bidirectional for an
encoder, causal for a decoder); `varlen` batches are one flat batch of documents, attention within each;
`dense-mask` and `block-mask` rows hold documents packed end to end under a dense block-diagonal attn_mask or
FlexAttention's document mask (CUDA only: it has no backward pass on a CPU), the mask built before the step.
Each shape's first step is timed on its own (`first_ms`, the model having run other shapes before) and
followed by one more step; then rounds time every shape once each (`median_ms`, `p25_ms`, `p75_ms` of
`repeats` rounds). Each round's slowdown shared by every shape is factored out (`timing.load_adjusted`),
and the first steps' pass's by how much slower its second steps ran than the rounds: on a machine shared
with other jobs, first and repeated steps are compared at one load. The lines it writes are
the grid's JSON lines, read by `grid_timings.load_timing_grid`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from simbench.calibrate.batches import packed_batch, padded_batch, random_sequences, unpadded_batch
from simbench.calibrate.causal_lm import causal_pack_mask
from simbench.calibrate.decoder import DecoderLayer
from simbench.calibrate.encoder import EncoderLayer, EncoderShape, attention_mask
from simbench.calibrate.grid_timings import MASK_KINDS, document_rows
from simbench.calibrate.grid_prices import MODE_OF_KIND
from simbench.calibrate.kernels import block_mask_refusal, document_block_mask, row_mask
from simbench.calibrate.timing import StepTiming, _synchronize, check_timed_work, load_adjusted
from simbench.costmodels.model import ModelSpec
from simbench.errors import InputError
from simbench.validation import check_seed, check_whole_number

# The varlen kernels work on 128-token tiles (grid_timings.VARLEN_TILE_TOKENS): the grid's fitted row lengths
# are multiples of it, its held-out ones are not.
TILE = 128
# The token counts of a step on each kind of device, as multiples of the grid's longest row: a GPU grid
# as the stored H200 grid's (rows of up to 512 tokens for an encoder, 16,384 for a decoder), a CPU
# grid a few hundred tokens a step, so that a small model's grid takes seconds.
LONGEST_ROW = {("cuda", "encoder"): 512, ("cuda", "decoder"): 16_384, ("cpu", "encoder"): 256, ("cpu", "decoder"): 256}
GRID_RECORD_FIELDS = ("model", "layers", "kind", "rows", "row_length", "documents", "tokens", "first_ms",
                      "median_ms", "p25_ms", "p75_ms", "repeats")


@dataclass(frozen=True)
class GridShape:
    """One configuration of the grid: `rows` x `row_length` padded rows, or one flat row of `documents`."""

    kind: str  # padded | varlen
    rows: int
    row_length: int
    documents: tuple[int, ...] | None = None

    @property
    def tokens(self) -> int:
        return self.rows * self.row_length


def grid_shapes(model: ModelSpec, device_type: str, quick: bool = False, seed: int = 0) -> list[GridShape]:
    """The shapes a grid times for `model` on a `device_type` (cpu or cuda) device.

    Padded rows at several lengths and token counts, flat batches of equal documents at several document
    lengths and token counts, and (held out of the fit by `grid_timings`'s rule) padded rows whose length is no
    multiple of 128 and flat batches of mixed document lengths. Lengths stay within the model's positions.
    """
    kind = "cuda" if device_type.startswith("cuda") else "cpu"
    family = "decoder" if model.is_decoder else "encoder"
    longest = min(LONGEST_ROW[(kind, family)], model.max_positions)
    if longest < 2 * TILE:
        raise InputError(f"a timing grid needs rows of at least {2 * TILE} tokens; model {model.name} has "
                         f"{model.max_positions} positions")
    rng = np.random.default_rng(seed)
    if kind == "cpu":
        return _cpu_shapes(longest, quick, rng)
    if family == "decoder":
        return _gpu_decoder_shapes(longest, rng)
    return _gpu_encoder_shapes(longest, rng)


def _cpu_shapes(longest: int, quick: bool, rng: np.random.Generator) -> list[GridShape]:
    """A few hundred tokens a step: rows of longest/2 and longest, documents of longest/8 to longest, rows of
    longest under a dense mask."""
    totals = (longest, 2 * longest) if quick else (longest, 2 * longest, 4 * longest)
    shapes = [GridShape("padded", total // length, length) for length in (longest // 2, longest) for total in totals]
    shapes += [_equal_documents(total, length) for total in totals
               for length in (longest // 8, longest // 4, longest // 2, longest)]
    shapes += [GridShape("padded", 3 * longest // length, length) for length in (3 * longest // 8, 3 * longest // 4)]
    mixed_totals = (25 * longest // 16, 11 * longest // 4) if quick else (25 * longest // 16, 11 * longest // 4,
                                                                          31 * longest // 8)
    shapes += [_mixed_documents(total, longest // 4, 0.7, 8, longest, rng) for total in mixed_totals]
    shapes += [_packed_rows("dense-mask", total // longest, longest, document) for total in totals
               for document in (longest // 4, longest // 2)]
    return shapes


def _gpu_encoder_shapes(longest: int, rng: np.random.Generator) -> list[GridShape]:
    """The stored H200 grid's encoder shapes, scaled to the model's longest row (512 for BERT-large: the same shapes)."""
    shapes = [GridShape("padded", total // length, length) for length in (longest // 4, longest // 2,
                                                                         3 * longest // 4, longest)
              for total in (8 * longest, 16 * longest, 32 * longest)]
    shapes += [_equal_documents(total, length) for total in (4 * longest, 8 * longest, 16 * longest, 32 * longest)
               for length in (longest // 8, longest // 4, longest // 2, longest)]
    shapes += [_mixed_documents(round(longest * fraction), round(0.39 * longest), 0.7, 8, longest, rng)
               for fraction in (9.77, 14.26, 17.77, 21.7, 24.11, 6.51)]
    shapes += [_packed_rows(kind, rows, longest, document) for kind in MASK_KINDS
               for rows, document in ((32, longest // 4), (16, longest // 2))]
    return shapes


def _gpu_decoder_shapes(longest: int, rng: np.random.Generator) -> list[GridShape]:
    """The stored H200 grid's decoder shapes, scaled to the model's longest row (16,384: the same shapes, but for
    the odd rows' lengths, rounded off multiples of 128)."""
    shapes = [GridShape("padded", max(1, longest // length), length)
              for length in (longest // 16, longest // 8, longest // 4, longest // 2, longest)]
    shapes += [_equal_documents(longest, longest >> shift) for shift in range(6, -1, -1)]
    for rows, fraction in ((3, 0.305), (5, 0.183), (7, 0.1356), (11, 0.0855), (2, 0.4747), (13, 0.0732)):
        length = round(longest * fraction)
        shapes.append(GridShape("padded", rows, length + (length % TILE == 0)))
    shapes += [_mixed_documents(total, round(longest / 16), 1.0, 16, longest // 2, rng)
               for total in (longest, round(0.977 * longest))]
    shapes += [_packed_rows(kind, rows, longest // 2, document) for kind in MASK_KINDS
               for rows, document in ((2, longest // 16), (1, longest // 4))]
    return shapes


def _equal_documents(total: int, length: int) -> GridShape:
    return GridShape("varlen", 1, total, (length,) * (total // length))


def _packed_rows(kind: str, rows: int, row_length: int, document: int) -> GridShape:
    """`rows` rows of `row_length`, each packed with documents of `document` tokens (and a shorter last one)."""
    per_row = (document,) * (row_length // document) + ((row_length % document,) if row_length % document else ())
    return GridShape(kind, rows, row_length, per_row * rows)


def _mixed_documents(total: int, median: int, sigma: float, shortest: int, longest: int,
                     rng: np.random.Generator) -> GridShape:
    """Log-normal document lengths (clipped to [shortest, longest]) filling `total` tokens exactly."""
    documents: list[int] = []
    while sum(documents) < total:
        documents.append(int(min(longest, max(shortest, rng.lognormal(np.log(median), sigma)))))
    documents[-1] -= sum(documents) - total
    return GridShape("varlen", 1, total, tuple(d for d in documents if d > 0))


@dataclass(frozen=True)
class GridSettings:
    """What one grid timing depends on: the model's slice, the device and how each shape is timed."""

    model: ModelSpec
    layers: int
    device: str
    threads: int
    repeats: int = 5
    seed: int = 0
    quick: bool = False
    attention: str = "grouped"  # how an encoder's varlen batches attend (batches.UNPADDED_ATTENTION)
    cpu_clock: bool = False  # time steps in process CPU seconds (single-threaded CPU runs)

    def __post_init__(self):
        for name in ("layers", "threads", "repeats"):
            check_whole_number(getattr(self, name), name, minimum=1)
        check_seed(self.seed)

    @property
    def slice(self) -> ModelSpec:
        """The timed layers as a model: no embeddings, and a vocabulary of one (no LM head)."""
        return dataclasses.replace(self.model, layers=self.layers, vocab=1)

    def shapes(self) -> list[GridShape]:
        """The grid's shapes, but for rows under a block mask where the device cannot train FlexAttention."""
        shapes = grid_shapes(self.model, self.device, self.quick, self.seed)
        return [shape for shape in shapes if shape.kind != "block-mask" or not block_mask_refusal(self.device)]

    def check_work(self, shapes: Sequence[GridShape]) -> None:
        """Refuse, before anything is built, a grid that would take longer than a timing run may."""
        steps = self.repeats + 2  # the first step and the one after it besides the repeats
        flops = steps * sum(self.slice.training_flops(shape.documents if shape.kind == "varlen"
                                                      else [shape.row_length] * shape.rows) for shape in shapes)
        check_timed_work(flops, self.device, f"timing a grid of {len(shapes)} shapes through {self.layers} layers "
                         f"of {self.model.name}", "time fewer --layers or a smaller --model, or use a GPU",
                         parameter="layers")


def time_grid(settings: GridSettings, progress: Callable[[], None] = lambda: None) -> list[dict]:
    """Every shape of the grid timed on the device: one record per shape, in the grid's JSON-lines fields.

    Each shape's first step and one more step come first, shape after shape; then `repeats` rounds
    time every shape once each, in a new random order per round, so that a burst of load from other
    processes lands on different shapes in different rounds and the medians drop it; the slowdown a whole
    round shares is factored out of its steps.
    """
    shapes = settings.shapes()
    settings.check_work(shapes)
    torch.set_num_threads(settings.threads)
    device = torch.device(settings.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # as the stored H200 grid; CPUs lack fast bf16
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(settings.seed)
    layers = _layers(settings).to(device, dtype)
    torch.random.set_rng_state(generator_state)
    rng = np.random.default_rng(settings.seed)
    clock = time.process_time if settings.cpu_clock else time.perf_counter
    # Wake the device and load the kernels of every kind on shapes the grid does not time, so that each
    # first step measures its shape being new, not the process starting (nor FlexAttention's compiler loading).
    wakes = [GridShape("padded", 1, TILE + 1), GridShape("varlen", 1, TILE + 1, (TILE // 2 + 1, TILE // 2))]
    wakes += [GridShape(kind, 1, TILE + 1, (TILE // 2 + 1, TILE // 2)) for kind in MASK_KINDS
              if any(shape.kind == kind for shape in shapes)]
    for wake in wakes:
        step = _timed_step(layers, wake, settings, device, dtype, rng, clock)
        step(), step()
    steps, first_seconds, second_seconds = [], [], []
    for shape in shapes:
        steps.append(_timed_step(layers, shape, settings, device, dtype, rng, clock))
        first_seconds.append(steps[-1]())
        second_seconds.append(steps[-1]())
        progress()
    samples = np.zeros((len(shapes), settings.repeats))
    for round_ in range(settings.repeats):
        for index in rng.permutation(len(shapes)):
            samples[index, round_] = steps[index]()
    # Each round's slowdown shared by all shapes (other processes' load) factored out, as measure does; the
    # first steps' pass too, by how much slower its second steps (at shapes just seen) ran than the rounds.
    adjusted = samples
    if settings.repeats > 1:
        adjusted = samples / load_adjusted([StepTiming(tuple(row)) for row in samples]).round_factors
    first_pass = float(np.median(np.array(second_seconds) / np.median(adjusted, axis=1)))
    return [grid_record(settings.model.name, settings.layers, shape, first / first_pass, times)
            for shape, first, times in zip(shapes, first_seconds, adjusted)]


def grid_record(model: str, layers: int, shape: GridShape, first_seconds: float,
                samples_seconds: Sequence[float]) -> dict:
    """One line of the grid: the shape and its step times in milliseconds."""
    milliseconds = 1e3 * np.asarray(samples_seconds, dtype=np.float64)
    return {"model": model, "layers": layers, "kind": shape.kind, "rows": shape.rows, "row_length": shape.row_length,
            "documents": None if shape.documents is None else list(shape.documents), "tokens": shape.tokens,
            "first_ms": 1e3 * first_seconds, "median_ms": float(np.median(milliseconds)),
            "p25_ms": float(np.percentile(milliseconds, 25)), "p75_ms": float(np.percentile(milliseconds, 75)),
            "repeats": int(milliseconds.size)}


def _layers(settings: GridSettings) -> nn.ModuleList:
    model = settings.model
    if model.is_decoder:
        return nn.ModuleList(DecoderLayer(model) for _ in range(settings.layers))
    shape = EncoderShape(layers=settings.layers, hidden=model.hidden, heads=model.heads, intermediate=model.ffn,
                         vocabulary=1, max_length=model.max_positions)
    return nn.ModuleList(EncoderLayer(shape) for _ in range(settings.layers))


def _timed_step(layers: nn.ModuleList, shape: GridShape, settings: GridSettings, device: torch.device,
                dtype: torch.dtype, rng: np.random.Generator, clock: Callable[[], float]) -> Callable[[], float]:
    """A step at `shape` on an input built once: calling it runs the step and returns its seconds."""
    hidden = settings.model.hidden
    flat = shape.kind == "varlen" and not settings.model.is_decoder
    x = torch.randn((shape.tokens, hidden) if flat else (shape.rows, shape.row_length, hidden), device=device,
                    dtype=dtype, requires_grad=True)
    arguments = _attention_arguments(shape, settings, device, rng)

    def step() -> float:
        _synchronize(device)
        start = clock()
        y = x
        for layer in layers:
            y = layer(y, **arguments)
        y.float().square().mean().backward()
        _synchronize(device)
        return clock() - start

    return step


def _attention_arguments(shape: GridShape, settings: GridSettings, device: torch.device,
                         rng: np.random.Generator) -> dict:
    """How each layer attends in a step at `shape` (its keyword arguments), built before the step is timed."""
    documents = shape.documents or (shape.row_length,) * shape.rows
    # The attention reads only how the batch attends: a batch of that shape with random tokens.
    sequences = random_sequences(documents, 1, rng)
    if shape.kind in MASK_KINDS:
        row_of = document_rows(documents, shape.row_length)
        rows = [np.flatnonzero(row_of == row).tolist() for row in range(shape.rows)]
        batch = packed_batch(sequences, rows, shape.row_length, row_mask=row_mask(MODE_OF_KIND[shape.kind])).to(device)
        if settings.model.is_decoder:
            if shape.kind == "block-mask":
                return {"block_mask": document_block_mask(batch.row_sequence_ids, causal=True)}
            return {"mask": causal_pack_mask(batch.row_sequence_ids)}
        return {"batch": batch, "mask": attention_mask(batch)}
    if settings.model.is_decoder:
        if shape.kind == "varlen":
            offsets = torch.tensor(np.concatenate([[0], np.cumsum(documents)]), device=device, dtype=torch.int32)
            return {"documents": offsets, "longest": max(documents)}
        return {}  # causal attention over the whole row
    batch = unpadded_batch(sequences, settings.attention) if shape.kind == "varlen" else padded_batch(sequences)
    return {"batch": batch.to(device), "mask": None}
