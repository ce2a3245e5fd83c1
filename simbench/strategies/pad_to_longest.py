"""`pad-to-longest`: Hugging Face's default batching (`DataCollatorWithPadding` behind a random sampler).

The dataset is shuffled and cut into batches of `batch_size` sequences, each padded to its own longest:
no sorting, no grouping. Its packing gives the report the padding this costs over one epoch; the simulator
draws its batches at random (`simbench.sim.plans.pad_to_longest`).

    >>> from simbench.histogram import LengthHistogram
    >>> from simbench.strategies.packing import PackOptions
    >>> packing = pack_pad_to_longest(LengthHistogram.from_counts([2, 0, 2]), 3, None, PackOptions(batch_size=4))
    >>> packing.tokens, packing.padding_tokens  # one batch of 1, 1, 3, 3 padded to 3
    (12, 4)
"""

from __future__ import annotations

import numpy as np

from simbench.strategies import register
from simbench.strategies.group_by_length import one_sequence_rows, padded_lengths
from simbench.strategies.packing import Packing


@register("pad-to-longest", "Hugging Face's default: the shuffled dataset cut into batches of --batch-size sequences, "
                            "each padded to its own longest", uses_depth=False)
def pack_pad_to_longest(histogram, max_length, max_depth, options) -> Packing:
    lengths = np.repeat(histogram.lengths, histogram.counts)
    np.random.default_rng(options.seed).shuffle(lengths)
    return one_sequence_rows("pad-to-longest", lengths, padded_lengths(lengths, options.batch_size), max_length)
