"""Speed of the packers on Wikipedia 512 (16,279,552 sequences) and of building histograms.

Targets: spfhp/lpfhp/ffd/bfd < 20 ms, nnlshp depth 3 < 5 s, greedy < 3 s, from_lengths of 16M lengths.
"""

import numpy as np
import pytest

from simbench.histogram import LengthHistogram, load_histogram
from simbench.strategies import PackOptions, get_strategy

WIKIPEDIA = load_histogram("wikipedia_512")


@pytest.mark.parametrize("name", ["spfhp", "lpfhp", "ffd", "bfd"])
@pytest.mark.parametrize("max_depth", [3, None])
def test_histogram_packer_on_wikipedia(benchmark, name, max_depth):
    strategy = get_strategy(name)
    packing = benchmark(strategy, WIKIPEDIA, 512, max_depth)
    benchmark.extra_info.update(efficiency=packing.efficiency, packs=packing.packs_total, target_seconds=0.020)
    assert packing.sequences == WIKIPEDIA.sequences


def test_nnlshp_depth_3_on_wikipedia(benchmark):
    packing = benchmark.pedantic(get_strategy("nnlshp"), args=(WIKIPEDIA, 512, 3), rounds=2, iterations=1)
    benchmark.extra_info.update(efficiency=packing.efficiency, packs=packing.packs_total, target_seconds=5.0,
                                published_seconds=28.4)
    assert packing.sequences == WIKIPEDIA.sequences


def test_greedy_on_wikipedia(benchmark):
    packing = benchmark.pedantic(get_strategy("greedy"), args=(WIKIPEDIA, 512, None, PackOptions(seed=0)),
                                 rounds=2, iterations=1)
    benchmark.extra_info.update(efficiency=packing.efficiency, packs=packing.packs_total, target_seconds=3.0)
    assert packing.sequences == WIKIPEDIA.sequences


def test_from_lengths_of_16m_sequences(benchmark):
    lengths = np.random.default_rng(0).permutation(WIKIPEDIA.expand()).astype(np.int32)
    histogram = benchmark.pedantic(LengthHistogram.from_lengths, args=(lengths, 512), rounds=3, iterations=1)
    assert np.array_equal(histogram.counts, WIKIPEDIA.counts)
