"""`sort`: sorted batching; the dataset sorted by length, cut into batches, each padded to its longest.

One sequence per row; a row's slot length is its batch's longest sequence (the shape changes per batch).

    >>> from simbench.strategies.sort import pack_sort
    >>> from simbench.histogram import LengthHistogram
    >>> from simbench.strategies.packing import PackOptions
    >>> pack_sort(LengthHistogram.from_counts([2, 0, 1]), 3, None, PackOptions(batch_size=2)).tokens
    7
"""

from __future__ import annotations

import numpy as np

from simbench.strategies import register
from simbench.strategies.packing import Packing


@register("sort", "sorted batching: batches of --batch-size sequences padded to their longest", uses_depth=False)
def pack_sort(histogram, max_length, max_depth, options) -> Packing:
    batch_size = options.batch_size
    present = np.flatnonzero(histogram.counts)[::-1]
    lengths = histogram.lengths[present]
    counts = histogram.counts[present]
    # Longest first: a length's sequences start at `first` and end before `last` in sorted order.
    last = np.cumsum(counts)
    first = last - counts
    # Only the batch holding a length's first sequence can start with a longer one; every later
    # batch touching this length starts with it.
    head_batch_end = (first // batch_size + 1) * batch_size
    in_head_batch = np.minimum(last, head_batch_end) - first
    head_position = first // batch_size * batch_size
    head_longest = lengths[np.searchsorted(last, head_position, side="right")]
    rows = np.concatenate([lengths, lengths])
    repeats = np.concatenate([in_head_batch, counts - in_head_batch])
    slots = np.concatenate([head_longest, lengths])
    return Packing.from_rows("sort", max_length, 1, rows, repeats, slot_lengths=slots)
