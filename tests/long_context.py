"""Synthetic long-context length histograms for the scaling tests and benchmarks (seeded, no data files).

    >>> histogram = long_context_histogram(8192, 100_000, "chat", seed=0)
    >>> histogram.sequences, histogram.max_length
    (100000, 8192)

Two shapes: "documents", pre-training documents with log-normal lengths (median an eighth of the
context, sigma 1.2) cut at the context, so a spike sits at max length; and "chat", a fine-tuning
mixture of short turns (70 %, median 250 tokens), medium conversations (25 %, median 2,000) and
long ones uniform up to the context (5 %). Both put sequences on nearly every length.
"""

from __future__ import annotations

import numpy as np

from simbench.histogram import LengthHistogram

SHAPES = ("documents", "chat")


def long_context_histogram(max_length: int, sequences: int, shape: str = "chat", seed: int = 0) -> LengthHistogram:
    """`sequences` lengths of the given shape in 1..max_length, drawn with numpy's seeded generator."""
    rng = np.random.default_rng(seed)
    if shape == "documents":
        lengths = rng.lognormal(np.log(max_length / 8), 1.2, sequences)
    elif shape == "chat":
        kind = rng.choice(3, size=sequences, p=[0.70, 0.25, 0.05])
        lengths = np.where(kind == 0, rng.lognormal(np.log(250), 0.9, sequences),
                           np.where(kind == 1, rng.lognormal(np.log(2000), 0.8, sequences),
                                    rng.uniform(1, max_length, sequences)))
    else:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    lengths = np.clip(np.rint(lengths), 1, max_length).astype(np.int64)
    counts = np.bincount(lengths, minlength=max_length + 1)[1:]
    return LengthHistogram(counts, name=f"{shape}_{max_length}_{sequences}")
