"""Speed and peak memory of assigning 16.3M Wikipedia sequences to packs (target: 3 s, 1 GiB).

Peak memory is what tracemalloc sees numpy allocate during the call (the input lengths excluded).
"""

import tracemalloc

import numpy as np
import pytest

from simbench.histogram import load_histogram
from simbench.strategies import get_strategy
from simbench.strategies.assign import assign_sequences

GIBIBYTE = 2**30


@pytest.fixture(scope="module")
def wikipedia():
    histogram = load_histogram("wikipedia_512")
    lengths = histogram.expand()
    np.random.default_rng(0).shuffle(lengths)
    return histogram, lengths


@pytest.mark.parametrize("strategy,max_depth", [("spfhp", None), ("optimal", 3)])
def test_assign_wikipedia(benchmark, wikipedia, strategy, max_depth):
    histogram, lengths = wikipedia
    packing = get_strategy(strategy)(histogram, 512, max_depth)
    peaks = []

    def assign_measuring_memory():
        tracemalloc.start()
        try:
            return assign_sequences(packing, lengths, np.random.default_rng(1))
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()

    assignment = benchmark.pedantic(assign_measuring_memory, rounds=2, iterations=1)
    benchmark.extra_info.update(sequences=int(lengths.size), packs=packing.packs_total, depth=packing.depth_used,
                                peak_mebibytes=max(peaks) / 2**20, target_seconds=3.0)
    assert assignment.shape == (packing.packs_total, packing.depth_used)
    assert max(peaks) < GIBIBYTE
