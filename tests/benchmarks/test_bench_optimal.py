"""Speed of the LP bound and the `optimal` packer (targets: Wikipedia 512 in under 10 s, samples of
under 100k sequences in under 2 s).

Each round clears the bound's cache, so every round solves the LP from scratch.
"""

import numpy as np
import pytest

from simbench.histogram import LengthHistogram, load_histogram
from simbench.strategies import get_strategy
from simbench.strategies import lp_bound


def solve_from_scratch(histogram, max_length, max_depth):
    lp_bound.clear_cache()
    return get_strategy("optimal")(histogram, max_length, max_depth)


@pytest.mark.parametrize("name,max_length,max_depth", [
    ("wikipedia_512", 512, None), ("wikipedia_512", 512, 3), ("squad_1_1_384", 384, None), ("squad_1_1_384", 384, 3)])
def test_optimal_packer(benchmark, name, max_length, max_depth):
    histogram = load_histogram(name)
    packing = benchmark.pedantic(solve_from_scratch, args=(histogram, max_length, max_depth), rounds=1, iterations=1)
    benchmark.extra_info.update(packs=packing.packs_total, lower_bound_packs=packing.details["lower_bound_packs"],
                                efficiency=packing.efficiency, target_seconds=10.0)
    assert packing.packs_total >= packing.details["lower_bound_packs"]


def test_lp_lower_bound_wikipedia(benchmark):
    histogram = load_histogram("wikipedia_512")

    def bound_from_scratch():
        lp_bound.clear_cache()
        return lp_bound.lp_lower_bound(histogram, 512)

    bound = benchmark.pedantic(bound_from_scratch, rounds=1, iterations=1)
    benchmark.extra_info.update(lp_value=bound.value, pricing_rounds=bound.pricing_rounds)
    assert bound.converged


@pytest.mark.parametrize("sequences", [40, 10_000, 100_000])
@pytest.mark.parametrize("max_depth", [None, 3])
def test_optimal_on_wikipedia_samples(benchmark, sequences, max_depth):
    # Target: under 2 s below 100k sequences (a small input must not cost more than the full histogram).
    wikipedia = load_histogram("wikipedia_512")
    sample = LengthHistogram(np.random.default_rng(sequences).multivariate_hypergeometric(wikipedia.counts, sequences))
    packing = benchmark.pedantic(solve_from_scratch, args=(sample, 512, max_depth), rounds=1, iterations=1)
    benchmark.extra_info.update(packs=packing.packs_total, lower_bound_packs=packing.details["lower_bound_packs"],
                                chosen=packing.details["chosen"], target_seconds=2.0)
    assert packing.packs_total >= packing.details["lower_bound_packs"]
