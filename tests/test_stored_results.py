"""Stored LP bounds: read back bit for bit, keyed by content, a corrupt entry recomputed, the bundled ones shipped."""

import json

import numpy as np
import pytest

from simbench.histogram import LengthHistogram, bundled_histograms, load_histogram
from simbench.stored_results import CACHE_VARIABLE, counts_digest
from simbench.strategies import lp_bound
from simbench.strategies.lp_bound import SHIPPED_DEPTHS, STORED_BOUNDS, computed_lp_lower_bound, lp_lower_bound, \
    stored_lp_lower_bound

COUNTS = [(length * 7) % 5 for length in range(1, 65)]


def same_bound(first, second):
    return (first.value == second.value and first.lower_bound_packs == second.lower_bound_packs
            and first.primal_value == second.primal_value and first.converged == second.converged
            and first.pricing_rounds == second.pricing_rounds and first.method == second.method
            and np.array_equal(first.patterns, second.patterns) and np.array_equal(first.weights, second.weights))


@pytest.fixture
def user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path))
    monkeypatch.setattr(lp_bound, "STORE_SECONDS", 0.0)  # even a small bound is stored
    lp_bound.clear_cache()
    yield tmp_path
    lp_bound.clear_cache()


@pytest.mark.parametrize("max_depth", [None, 3])
def test_a_cached_bound_is_the_computed_one_bit_for_bit(user_cache, max_depth):
    histogram = LengthHistogram.from_counts(COUNTS)
    first = lp_lower_bound(histogram, 64, max_depth)
    assert not first.cached and list(user_cache.rglob("*.json"))
    lp_bound.clear_cache()
    again = lp_lower_bound(histogram, 64, max_depth)
    assert again.cached
    assert same_bound(again, first)
    assert same_bound(again, computed_lp_lower_bound(histogram.counts, 64, max_depth))


def test_a_corrupt_entry_is_computed_again_and_rewritten(user_cache):
    histogram = LengthHistogram.from_counts(COUNTS)
    first = lp_lower_bound(histogram, 64, 2)
    (entry,) = user_cache.rglob("*.json")
    entry.write_text('{"key": "truncated')
    lp_bound.clear_cache()
    again = lp_lower_bound(histogram, 64, 2)
    assert not again.cached and same_bound(again, first)
    assert json.loads(entry.read_text())["value"]["lower_bound_packs"] == first.lower_bound_packs


def test_the_key_is_the_content_and_the_limits(user_cache):
    histogram = LengthHistogram.from_counts(COUNTS)
    lp_lower_bound(histogram, 64, 3)
    # The same counts with empty lengths beyond are the same histogram; other limits or counts are not.
    assert stored_lp_lower_bound(LengthHistogram.from_counts(COUNTS + [0, 0]), 64, 3) is not None
    assert counts_digest(np.array(COUNTS + [0])) == counts_digest(np.array(COUNTS))
    assert stored_lp_lower_bound(histogram, 64, 2) is None
    assert stored_lp_lower_bound(histogram, 64, None) is None
    assert stored_lp_lower_bound(LengthHistogram.from_counts([*COUNTS[:-1], COUNTS[-1] + 1]), 64, 3) is None


def test_off_reads_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, "off")
    lp_bound.clear_cache()
    assert stored_lp_lower_bound(load_histogram("squad_1_1_384"), 384, 3) is None
    assert not lp_lower_bound(LengthHistogram.from_counts(COUNTS), 64, 3).cached
    lp_bound.clear_cache()


def test_every_bundled_histogram_ships_its_bounds(user_cache):
    for name in bundled_histograms():
        histogram = load_histogram(name)
        for depth in SHIPPED_DEPTHS:
            assert stored_lp_lower_bound(histogram, histogram.max_length, depth) is not None, (name, depth)
    assert not list(user_cache.rglob("*.json"))  # read from the package, not from the user cache


def test_a_shipped_bound_is_the_computed_one(user_cache):
    squad = load_histogram("squad_1_1_384")
    shipped = stored_lp_lower_bound(squad, 384, 3)
    fresh = computed_lp_lower_bound(squad.counts, 384, 3)
    # Bit for bit here; the solver's floats may differ in their last bits under another HiGHS build, the whole
    # packs they certify may not.
    assert shipped.lower_bound_packs == fresh.lower_bound_packs and shipped.method == fresh.method
    assert shipped.value == pytest.approx(fresh.value, rel=1e-9)
    assert STORED_BOUNDS.function == "lp_lower_bound"
