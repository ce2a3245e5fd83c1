"""The ideal speed-up over padding: the most any strategy can gain, drawn as the reports' dashed line.

    >>> from simbench.costmodels import TransformerCostModel
    >>> from simbench.costmodels.ideal import ideal_speedup
    >>> from simbench.histogram import load_histogram
    >>> round(ideal_speedup(TransformerCostModel("bert-large", "a100"), load_histogram("wikipedia_512"), 32), 3)
    2.175
"""

from __future__ import annotations

import numpy as np

from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.histogram import LengthHistogram


def ideal_speedup(cost_model, histogram: LengthHistogram, batch_size: int) -> float | None:
    """Padding's device seconds per real token over the least the cost model can spend on one: every
    sequence priced alone (`cost_model.ideal_sequence_seconds`), with no padding, no fixed cost, no
    communication and no stragglers. None for a cost model that cannot price a sequence alone.

    A ceiling for every strategy whose step holds no more work than padding's step of `batch_size` rows
    of max length (packs, length-sorted or token-budget batches, un-padded sequences), as speed-up over
    padding at any device count: both pay the same all-reduce per step, and adding the same time to
    both steps only brings their ratio closer to 1.
    """
    if histogram.sequences == 0:
        return None
    sequence_seconds = cost_model.ideal_sequence_seconds(np.arange(1, histogram.max_length + 1))
    if sequence_seconds is None:
        return None
    counts = histogram.counts[:histogram.max_length].astype(np.float64)
    ideal_seconds_per_token = counts @ sequence_seconds / histogram.real_tokens
    # Every padded row costs the same whatever it holds: price batch_size full rows.
    rows = np.arange(batch_size)
    padded_rows = BatchSet(sequence_lengths=np.full(batch_size, histogram.max_length), sequence_row=rows,
                           row_slots=np.full(batch_size, histogram.max_length), row_batch=np.zeros_like(rows),
                           batches=1)
    padded_step_seconds = float(cost_model.step_costs(padded_rows, ExecutionMode.PADDED).total_seconds[0])
    padded_seconds_per_token = padded_step_seconds * histogram.sequences / (batch_size * histogram.real_tokens)
    return float(padded_seconds_per_token / ideal_seconds_per_token)
