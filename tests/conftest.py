"""Shared test fixtures: the bundled histograms, loaded once per test session."""

import os

import pytest

from simbench.histogram import load_histogram

# Reports compute their bounds and plots in this process: worker processes pay off on the main job,
# not on the suite's small runs (the tests that compare both paths set it themselves).
os.environ.setdefault("SIMBENCH_WORKERS", "0")
# Every LP bound computed, none read from the bounds shipped or cached (whose tests turn them on), and nothing
# written to the user's cache.
os.environ.setdefault("SIMBENCH_CACHE", "off")


@pytest.fixture(scope="session")
def wikipedia():
    """Wikipedia BERT pre-training, max length 512 (16,279,552 sequences)."""
    return load_histogram("wikipedia_512")


@pytest.fixture(scope="session")
def squad():
    """SQuAD 1.1, max length 384 (88,641 sequences)."""
    return load_histogram("squad_1_1_384")
