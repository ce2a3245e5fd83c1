"""simbench.testing.check_strategy: a plug-in author's one-line check passes good packers and names
the rule a broken one breaks."""

import sys

import numpy as np
import pytest

from simbench.strategies import Strategy
from simbench.strategies.packing import Packing
from simbench.testing import StrategyCheckFailure, check_invariants_on_random_histograms, check_strategy


def one_per_pack(histogram, max_length, max_depth, options) -> Packing:
    """Correct, if wasteful: every sequence alone."""
    return Packing.from_rows("alone", max_length, max_depth, histogram.lengths, histogram.counts)


ALONE = Strategy("alone", "every sequence in a pack of its own (a plug-in)", one_per_pack)


def one_per_pack_but_the_longest(histogram, max_length, max_depth, options) -> Packing:
    """Forgets one sequence of the longest length present."""
    counts = histogram.counts.copy()
    if counts.any():
        counts[np.flatnonzero(counts)[-1]] -= 1
    return Packing.from_rows("lossy", max_length, max_depth, histogram.lengths, counts)


def pairs_ignoring_the_pack_length(histogram, max_length, max_depth, options) -> Packing:
    """Pairs neighbours in length order (one per pack at depth 1) without asking whether they fit."""
    lengths = histogram.expand()
    if max_depth == 1 or lengths.size < 2:
        return one_per_pack(histogram, max_length, max_depth, options)
    rows = np.zeros((lengths.size + 1) // 2 * 2, dtype=np.int64)
    rows[:lengths.size] = lengths
    return Packing.from_rows("overfull", max_length, max_depth, rows.reshape(-1, 2), np.ones(rows.size // 2))


def crashes_on_a_depth_limit(histogram, max_length, max_depth, options) -> Packing:
    if max_depth is not None:
        raise ValueError("depth limits are not supported")
    return Packing.from_rows("crashing", max_length, max_depth, histogram.lengths, histogram.counts)


_calls = []


def different_every_call(histogram, max_length, max_depth, options) -> Packing:
    """One sequence per pack, each pack's slots its own length on every second call (state outside its arguments)."""
    _calls.append(None)
    slots = histogram.lengths if len(_calls) % 2 else np.full(histogram.max_length, max_length)
    return Packing.from_rows("moody", max_length, max_depth, histogram.lengths, histogram.counts, slots)


def test_a_correct_plugin_passes_in_one_line():
    check_strategy(ALONE, max_examples=10)


def test_a_bare_pack_function_is_checked_under_its_name():
    with pytest.raises(StrategyCheckFailure, match="^strategy 'one_per_pack_but_the_longest' broke the rule"):
        check_strategy(one_per_pack_but_the_longest, max_examples=10)


@pytest.mark.parametrize("pack_function, message", [
    (one_per_pack_but_the_longest, r"broke the rule: every sequence placed exactly once; found 0 sequences of "
                                   r"length \d+ placed where the histogram has 1; input: max_length \d+"),
    (pairs_ignoring_the_pack_length, r"broke the rule: no pack holds more tokens than its slots; found pack \[.*\] in "
                             r"\d+ slots; input: max_length"),
    (crashes_on_a_depth_limit, r"raised ValueError: depth limits are not supported; input: max_length \d+, "
                               r"max_depth \d"),
], ids=["drops-a-sequence", "overfills-a-pack", "raises"])
def test_a_broken_plugin_fails_naming_the_rule_and_the_input(pack_function, message):
    plugin = Strategy("broken", "a deliberately broken plug-in", pack_function)
    with pytest.raises(StrategyCheckFailure, match="^strategy 'broken' " + message) as caught:
        check_invariants_on_random_histograms(plugin, max_examples=30)
    assert "histogram over lengths 1.." in str(caught.value)
    with pytest.raises(StrategyCheckFailure, match="^strategy 'broken' "):
        check_strategy(plugin, max_examples=5)


def test_a_strategy_that_depends_on_hidden_state_fails_the_purity_check():
    plugin = Strategy("moody", "a plug-in with state outside its arguments", different_every_call)
    with pytest.raises(StrategyCheckFailure, match="broke the rule: the same arguments give the same packs"):
        check_strategy(plugin, max_examples=5)


def test_without_hypothesis_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # an import of it now fails
    with pytest.raises(ImportError, match="hypothesis, a development dependency: pip install hypothesis"):
        check_strategy(ALONE)


def test_only_strategies_are_accepted():
    with pytest.raises(TypeError, match="takes a strategy name, a Strategy or a pack function; found int"):
        check_strategy(3)


def test_the_checks_read_packs_in_the_flat_form_only(monkeypatch):
    """A dense table of deep packs may not fit in memory (it is refused above a limit): set to 0 here, any
    use of it fails, and a correct packer still passes."""
    from simbench.strategies import get_strategy, packing

    monkeypatch.setattr(packing, "DENSE_ROWS_LIMIT_BYTES", 0)
    check_invariants_on_random_histograms(get_strategy("ffd"), max_examples=10)


@pytest.mark.parametrize("pack_lengths, pack_starts, rule", [
    ([3, 1, 3, 1], [0, 2, 4], r"packs are distinct; found pack \[3, 1\] listed twice"),
    ([1, 3, 2, 1], [0, 2, 4], r"packs hold lengths in descending order; found pack \[1, 3\]"),
], ids=["repeated", "ascending"])
def test_flat_packs_that_break_a_rule_are_named(pack_lengths, pack_starts, rule):
    from simbench.histogram import LengthHistogram
    from simbench.strategies import PackOptions
    from simbench.testing import PackingProblem, check_packing

    problem = PackingProblem(LengthHistogram.from_counts([2, 1, 1, 0]), 4, None, PackOptions())
    broken = Packing.from_packs("broken", 4, None, pack_lengths, pack_starts, [1, 1])
    with pytest.raises(StrategyCheckFailure, match=f"broke the rule: {rule}"):
        check_packing(ALONE, broken, problem)
