"""The reference packers the speed benchmarks time simbench against make simbench's packs, pack for pack.

Random histograms at 512, 8,192 and 131,072 tokens (sparse and dense, short- and long-tailed), without a
depth limit and with one; a reference that drifted from the algorithm it stands for would time other work.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from simbench.histogram import LengthHistogram
from simbench.strategies import get_strategy

sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))
from reference_packers import REFERENCES, best_fit_decreasing  # noqa: E402

MAX_LENGTHS = (512, 8192, 131072)
DEPTHS = (None, 1, 2, 3, 8)
SEEDS = range(120)


def random_counts(seed: int, max_length: int) -> np.ndarray:
    """Counts of a few to a few thousand sequences, on a handful of lengths or on many, short or long."""
    rng = np.random.default_rng(seed)
    sequences = int(rng.integers(1, 4000))
    shape = (seed // len(MAX_LENGTHS)) % 3  # every shape at every max length
    if shape == 0:
        lengths = rng.lognormal(np.log(max_length / rng.uniform(2, 40)), rng.uniform(0.3, 1.5), sequences)
    elif shape == 1:
        lengths = rng.uniform(1, max_length, sequences)
    else:
        lengths = rng.choice(rng.integers(1, max_length + 1, size=int(rng.integers(1, 12))), sequences)
    lengths = np.clip(np.rint(lengths), 1, max_length).astype(np.int64)
    return np.bincount(lengths, minlength=max_length + 1)[1:]


def packs_of(packing) -> dict:
    starts = packing.pack_starts.tolist()
    lengths = packing.pack_lengths.tolist()
    return {tuple(lengths[start:end]): repeat
            for start, end, repeat in zip(starts[:-1], starts[1:], packing.repeats.tolist())}


@pytest.mark.parametrize("name", sorted(REFERENCES))
@pytest.mark.parametrize("seed", SEEDS)
def test_reference_makes_simbenchs_packs(name, seed):
    max_length = MAX_LENGTHS[seed % len(MAX_LENGTHS)]
    max_depth = DEPTHS[seed % len(DEPTHS)]
    counts = random_counts(seed, max_length)
    packing = get_strategy(name)(LengthHistogram(counts), max_length, max_depth)
    assert REFERENCES[name](counts, max_length, max_depth) == packs_of(packing)


def test_reference_on_a_small_histogram():
    # Lengths 3 and 2 into packs of 6: two 3s fill one pack, three 2s another.
    assert best_fit_decreasing(np.array([0, 3, 2]), 6) == {(3, 3): 1, (2, 2, 2): 1}
