"""Causal attention of packed rows sharded over context-parallel ranks, and its ring KV exchange.
Counts each rank's (query, key) pairs in closed form per chunk; the slowest rank sets the layer's time.

    >>> from simbench.sim.parallel.context_parallel import context_parallel_work
    >>> context_parallel_work([8], row_tokens=8, cp=2, sharding="contiguous").rank_squared_tokens.tolist()
    [[16.0, 48.0]]

Shardings of a row of L positions over cp ranks:
- contiguous: rank r holds [r L / cp, (r + 1) L / cp); causal attention loads the last rank most.
- zigzag (head-tail): the row is cut into 2 cp equal chunks, rank r holds chunks r and 2 cp - 1 - r,
  as Megatron-CP and Llama 3 do: one full-length document is then split exactly evenly.
- per-document: every document (and the row's padding tail) is cut into 2 cp pieces whose sizes
  differ by at most one token, head-tail again, as WLB-LLM does: any mix of documents whose lengths
  are multiples of 2 cp is split exactly evenly. Documents shorter than 2 cp leave pieces empty, so
  their tokens gather on few ranks (four 1-token documents at cp 2 all land on rank 0).

Masks: "document" (each document attends causally within itself, the packed-row kernels) or "row"
(the row's tokens form one causal sequence, as a plain causal kernel over the packed row computes).
Padding positions (after the last document) attend to nothing but are still held and sent.

Work is counted in the cost model's unit, squared tokens: a query with k causal keys costs 2 k - 1,
so a whole document of d tokens costs d^2, which the transformer cost model prices at
`attention_flops_per_token_squared` FLOPs each (a causal model's factor already halves the square).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simbench.errors import InputError
from simbench.validation import check_choice, check_non_negative_float, check_positive_float, check_whole_number

SHARDINGS = ("contiguous", "zigzag", "per-document")
MASKS = ("document", "row")


@dataclass(frozen=True)
class ContextParallelWork:
    """Attention work of each row's ranks: rows are the first axis (one for a single row)."""

    pairs: np.ndarray          # (rows, cp, cp): causal (query, key) pairs, [row, query rank, key rank]
    query_tokens: np.ndarray   # (rows, cp): document tokens each rank holds (the ones that attend)
    kv_tokens: np.ndarray      # (rows, cp): positions each rank holds, padding included (its KV shard)

    def grouped(self, group_of_row, groups: int | None = None) -> ContextParallelWork:
        """The rows summed by group (e.g. the rows of one microbatch, which one ring pass computes
        together): group g holds every row r with group_of_row[r] == g; `groups` defaults to the
        largest group + 1."""
        group_of_row = np.asarray(group_of_row)
        rows = self.pairs.shape[0]
        if group_of_row.shape != (rows,) or (rows and (not np.issubdtype(group_of_row.dtype, np.integer)
                                                       or group_of_row.min() < 0)):
            raise InputError(f"group_of_row must give a whole-number group >= 0 for each of the {rows} rows",
                             parameter="group_of_row")
        count = int(group_of_row.max()) + 1 if rows else 0
        groups = count if groups is None else check_whole_number(groups, "groups", minimum=count)

        def summed(values):
            flat = values.reshape(rows, -1)
            out = np.zeros((groups, flat.shape[1]))
            np.add.at(out, group_of_row, flat)
            return out.reshape(groups, *values.shape[1:])

        return ContextParallelWork(pairs=summed(self.pairs), query_tokens=summed(self.query_tokens),
                                   kv_tokens=summed(self.kv_tokens))

    @property
    def squared_tokens(self) -> np.ndarray:
        """(rows, cp, cp) work in squared tokens: 2 pairs, less each query's pair with itself."""
        cp = self.pairs.shape[-1]
        return 2.0 * self.pairs - self.query_tokens[:, :, None] * np.eye(cp)

    @property
    def rank_pairs(self) -> np.ndarray:
        """(rows, cp): pairs each rank's queries compute, against every rank's keys."""
        return self.pairs.sum(axis=-1)

    @property
    def rank_squared_tokens(self) -> np.ndarray:
        """(rows, cp): each rank's work in squared tokens (2 x pairs - tokens)."""
        return 2.0 * self.rank_pairs - self.query_tokens

    def attention_seconds(self, attention_flops_per_token_squared: float, attention_flops_per_s: float
                          ) -> np.ndarray:
        """(rows, cp): each rank's attention seconds at the cost model's FLOPs per squared token and rate."""
        flops = check_non_negative_float(attention_flops_per_token_squared, "attention_flops_per_token_squared")
        rate = check_positive_float(attention_flops_per_s, "attention_flops_per_s")
        return self.rank_squared_tokens * (flops / rate)

    @property
    def imbalance(self) -> np.ndarray:
        """(rows,): slowest rank's work over the mean rank's (1 = balanced; 1 for rows without work)."""
        work = self.rank_squared_tokens
        mean = work.mean(axis=-1)
        return np.where(mean > 0, work.max(axis=-1) / np.where(mean > 0, mean, 1.0), 1.0)


@dataclass(frozen=True)
class RingAttention:
    """Seconds of one ring-attention pass over each row (rows first, as in ContextParallelWork)."""

    step_compute_seconds: np.ndarray   # (rows, cp, cp): [row, rank, ring step]; step s uses rank r - s's KV
    transfer_seconds: np.ndarray       # (rows, cp, cp - 1): receiving the next step's KV shard
    compute_seconds: np.ndarray        # (rows, cp): attention seconds of each rank, all steps
    rank_seconds: np.ndarray           # (rows, cp): each rank's steps, each the longer of compute and transfer
    exposed_exchange_seconds: np.ndarray  # (rows, cp): rank_seconds - compute_seconds: transfer not hidden

    @property
    def layer_seconds(self) -> np.ndarray:
        """(rows,): the slowest rank's seconds, which the layer waits for."""
        return self.rank_seconds.max(axis=-1)


def kv_bytes_per_token(kv_heads: int, head_dim: int, dtype_bytes: int = 2, tp: int = 1) -> float:
    """Bytes of one token's keys and values on one tensor-parallel rank, for one layer.

    Heads split over tp ranks; with fewer KV heads than ranks each rank keeps one (they are replicated).
    """
    kv_heads = check_whole_number(kv_heads, "kv_heads", minimum=1)
    head_dim = check_whole_number(head_dim, "head_dim", minimum=1)
    dtype_bytes = check_whole_number(dtype_bytes, "dtype_bytes", minimum=1)
    tp = check_whole_number(tp, "tp", minimum=1)
    return float(math.ceil(kv_heads / tp) * head_dim * 2 * dtype_bytes)


def context_parallel_work(document_lengths, row_tokens: int, cp: int, sharding: str, *, mask: str = "document",
                          row_of_document=None) -> ContextParallelWork:
    """Each rank's causal attention pairs for packed rows of `row_tokens` positions split over `cp` ranks.

    `document_lengths`: the documents in row order (tokens >= 1); `row_of_document`: the row each one
    sits in (non-decreasing, rows numbered from 0; None: all in one row). Each row's documents must fit
    in `row_tokens`. Closed forms per chunk: the cost grows with documents and cp, not with L^2.
    """
    lengths, rows, row_of_document = _check_documents(document_lengths, row_tokens, row_of_document)
    cp = check_whole_number(cp, "cp", minimum=1)
    sharding = check_choice(sharding, "sharding", SHARDINGS)
    mask = check_choice(mask, "mask", MASKS)
    divisor = {"contiguous": cp, "zigzag": 2 * cp, "per-document": 1}[sharding]
    if row_tokens % divisor:
        raise InputError(f"row_tokens must be a multiple of {divisor} for {sharding} sharding over cp={cp} ranks, "
                         f"found {row_tokens}", parameter="row_tokens")
    segments = _segments(lengths, row_of_document, rows, row_tokens, cp, sharding, mask)
    return _work(segments, rows, cp)


def ring_attention_seconds(work: ContextParallelWork, *, attention_flops_per_token_squared: float,
                           attention_flops_per_s: float, kv_bytes_per_token: float, link_bytes_per_s: float,
                           link_latency_seconds: float = 0.0) -> RingAttention:
    """Ring attention over `work`: cp steps, step s computing each rank's queries against rank r - s's
    keys while rank r - s - 1's KV shard arrives from the neighbour; a step lasts the longer of the two.

    FLOPs, rate and bytes must describe the same pass, e.g. one layer's forward (the model's
    `forward_attention_flops_per_token_squared / layers` with one layer's KV bytes) and the hardware's
    `attention_flops_per_s`. Each rank is timed alone: a rank does not wait for a slow neighbour.
    """
    flops = check_non_negative_float(attention_flops_per_token_squared, "attention_flops_per_token_squared")
    rate = check_positive_float(attention_flops_per_s, "attention_flops_per_s")
    bytes_per_token = check_non_negative_float(kv_bytes_per_token, "kv_bytes_per_token")
    link = check_positive_float(link_bytes_per_s, "link_bytes_per_s")
    latency = check_non_negative_float(link_latency_seconds, "link_latency_seconds")
    rows, cp, _ = work.pairs.shape
    ranks = np.arange(cp)
    steps = np.arange(cp)
    source = (ranks[:, None] - steps[None, :]) % cp  # [rank, step]: whose KV the rank holds at that step
    squared = work.squared_tokens
    step_compute = squared[:, ranks[:, None], source] * (flops / rate)
    # During step s (s < cp - 1) rank r receives rank r - s - 1's shard from rank r - 1.
    arriving = source[:, 1:]
    transfer = latency + work.kv_tokens[:, arriving] * (bytes_per_token / link)
    if cp > 1:
        rank_seconds = np.maximum(step_compute[:, :, :-1], transfer).sum(axis=-1) + step_compute[:, :, -1]
    else:
        rank_seconds = step_compute[:, :, 0]
    compute = step_compute.sum(axis=-1)
    return RingAttention(step_compute_seconds=step_compute, transfer_seconds=transfer, compute_seconds=compute,
                         rank_seconds=rank_seconds, exposed_exchange_seconds=rank_seconds - compute)


# ------------------------------------------------------------------------------------------------ checks

def _check_documents(document_lengths, row_tokens, row_of_document):
    row_tokens = check_whole_number(row_tokens, "row_tokens", minimum=1)
    lengths = np.asarray(document_lengths)
    if lengths.ndim != 1 or (lengths.size and not np.issubdtype(lengths.dtype, np.integer)):
        raise InputError("document_lengths must be a 1-D sequence of whole numbers of tokens",
                         parameter="document_lengths")
    lengths = lengths.astype(np.int64)
    if np.any(lengths < 1):
        raise InputError(f"document_lengths must be >= 1 token each, found {int(lengths.min())}",
                         parameter="document_lengths")
    if row_of_document is None:
        rows_of = np.zeros(lengths.size, dtype=np.int64)
    else:
        rows_of = np.asarray(row_of_document)
        if rows_of.shape != lengths.shape or (rows_of.size and not np.issubdtype(rows_of.dtype, np.integer)):
            raise InputError("row_of_document must give a whole-number row for each document",
                             parameter="row_of_document")
        rows_of = rows_of.astype(np.int64)
        if rows_of.size and (rows_of.min() < 0 or np.any(np.diff(rows_of) < 0)):
            raise InputError("row_of_document must be >= 0 and non-decreasing (documents in row order)",
                             parameter="row_of_document")
    rows = int(rows_of.max()) + 1 if rows_of.size else 1
    used = np.bincount(rows_of, weights=lengths, minlength=rows)
    if np.any(used > row_tokens):
        row = int(np.argmax(used > row_tokens))
        raise InputError(f"document_lengths of row {row} sum to {int(used[row])} tokens, more than "
                         f"row_tokens {row_tokens}", parameter="document_lengths")
    return lengths, rows, rows_of


# ------------------------------------------------------------------------------------------------- work

@dataclass(frozen=True)
class _Segments:
    """Maximal runs of positions with one owner rank and one attention group, in row and position order."""

    row: np.ndarray
    length: np.ndarray
    owner: np.ndarray
    group: np.ndarray   # attention group (a document, or a row's tokens); -1: padding


def _segments(lengths, row_of_document, rows, row_tokens, cp, sharding, mask) -> _Segments:
    pieces = 2 * cp
    span = row_tokens + 1  # positions of row r are coded r * span + position: one sorted axis for all rows
    first_of_row = np.searchsorted(row_of_document, np.arange(rows))
    ends_global = np.cumsum(lengths)
    row_start_global = np.concatenate([[0], ends_global])[first_of_row]
    doc_start = np.concatenate([[0], ends_global[:-1]]) - row_start_global[row_of_document]
    doc_end = doc_start + lengths
    used = np.bincount(row_of_document, weights=lengths, minlength=rows).astype(np.int64)
    row_codes = np.arange(rows, dtype=np.int64) * span
    cuts = [row_codes, row_codes + row_tokens, row_codes + used]
    cuts.append((row_of_document * span + doc_end))
    if sharding == "per-document":
        # Each document's (and the padding tail's) 2 cp piece boundaries, floor(k n / 2cp) from its start.
        starts = np.concatenate([doc_start, used])
        sizes = np.concatenate([lengths, row_tokens - used])
        row_ids = np.concatenate([row_of_document, np.arange(rows)])
        k = np.arange(1, pieces)
        cuts.append((row_ids * span + starts)[:, None] + (k[None, :] * sizes[:, None]) // pieces)
    else:
        chunks = cp if sharding == "contiguous" else pieces
        bounds = np.arange(1, chunks) * (row_tokens // chunks)
        cuts.append((row_codes[:, None] + bounds[None, :]).ravel())
    points = np.sort(np.concatenate([np.ravel(c) for c in cuts]))
    points = points[np.concatenate([[True], points[1:] != points[:-1]])]  # np.unique hashes: 20x slower
    row_of_point = points // span
    keep = row_of_point[:-1] == row_of_point[1:]  # consecutive points of one row bound a segment
    start_code = points[:-1][keep]
    seg_length = (points[1:] - points[:-1])[keep]
    seg_row = start_code // span
    seg_start = start_code - seg_row * span
    in_documents = seg_start < used[seg_row]
    # The document each segment lies in: the last one starting at or before it.
    doc_codes = row_of_document * span + doc_start
    doc = np.searchsorted(doc_codes, start_code, side="right") - 1
    if sharding == "contiguous":
        owner = seg_start // (row_tokens // cp)
    elif sharding == "zigzag":
        chunk = seg_start // (row_tokens // pieces)
        owner = np.minimum(chunk, pieces - 1 - chunk)
    else:
        # Piece k of a span of n tokens is [floor(k n / 2cp), floor((k + 1) n / 2cp)): the position at
        # offset o lies in piece floor(((o + 1) 2cp - 1) / n).
        # A sentinel document last, for segments before any (index -1): rows without documents.
        span_start = np.where(in_documents, np.append(doc_start, 0)[doc], used[seg_row])
        span_size = np.where(in_documents, np.append(lengths, 1)[doc], row_tokens - used[seg_row])
        offset = seg_start - span_start
        piece = ((offset + 1) * pieces - 1) // np.maximum(span_size, 1)
        owner = np.minimum(piece, pieces - 1 - piece)
    if mask == "document":
        group = np.where(in_documents, doc, -1)
    else:
        group = np.where(in_documents, seg_row, -1)
    return _Segments(row=seg_row, length=seg_length, owner=owner.astype(np.int64), group=group.astype(np.int64))


def _work(segments: _Segments, rows: int, cp: int) -> ContextParallelWork:
    real = segments.group >= 0
    row, length, owner, group = (values[real] for values in
                                 (segments.row, segments.length, segments.owner, segments.group))
    # Keys each rank holds in the same group before a segment: an exclusive running sum per rank,
    # less its value where the group starts (a group's segments are consecutive). One rank at a time:
    # a (segments x cp) table of a batch of 128k rows runs to gigabytes.
    first = np.concatenate([[True], group[1:] != group[:-1]]) if length.size else np.zeros(0, dtype=bool)
    group_start = np.flatnonzero(first)
    starts_of = np.repeat(group_start, np.diff(np.concatenate([group_start, [length.size]])))
    query_index = (row * cp + owner) * cp
    pairs = np.zeros(rows * cp * cp)
    for key_rank in range(cp):
        held = np.where(owner == key_rank, length, 0)
        before = np.cumsum(held) - held
        before -= before[starts_of]
        # A segment's queries see every earlier key of their group (|Q| x held before it) and, within
        # the segment, the causal triangle with its diagonal (added below).
        pairs += np.bincount(query_index + key_rank, weights=length * before, minlength=rows * cp * cp)
    diagonal = np.bincount((row * cp + owner) * cp + owner, weights=length * (length + 1) / 2,
                           minlength=rows * cp * cp)
    pairs = (pairs + diagonal).reshape(rows, cp, cp)
    query_tokens = np.bincount(row * cp + owner, weights=length, minlength=rows * cp).reshape(rows, cp)
    kv_tokens = np.bincount(segments.row * cp + segments.owner, weights=segments.length,
                            minlength=rows * cp).reshape(rows, cp)
    return ContextParallelWork(pairs=pairs, query_tokens=query_tokens, kv_tokens=kv_tokens)
