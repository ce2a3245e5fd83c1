"""The battery every strategy passes, public so that a plug-in author runs it on their own packer.

    >>> from simbench.testing import check_strategy
    >>> check_strategy("spfhp", max_examples=5)   # silent when every rule holds

`check_strategy` accepts a registered name, a `Strategy` or a bare pack function
`(histogram, max_length, max_depth, options) -> Packing`, and raises `StrategyCheckFailure` naming the
strategy, the rule it broke and the smallest input found to break it. Like scikit-learn's
`check_estimator`; each check is also importable on its own (`STRATEGY_CHECKS`), for one test per check.
It draws random histograms with hypothesis, a development dependency: `pip install hypothesis`
(or simbench's `dev` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simbench.histogram import LengthHistogram
from simbench.strategies import PackFunction, PackOptions, Packing, Strategy, get_strategy
from simbench.plugins import PluginFailure, in_this_process
from simbench.strategies.invariants import BrokenPacking, broken_rule

# Enough random histograms to meet sparse, dense, deep and shallow cases; a few seconds per packer.
DEFAULT_EXAMPLES = 30


class StrategyCheckFailure(AssertionError):
    """A strategy broke one of the battery's rules; the message says which, and on what input."""


@dataclass(frozen=True)
class PackingProblem:
    """One input of the battery: a histogram, the pack limits and the options."""

    histogram: LengthHistogram
    max_length: int
    max_depth: int | None
    options: PackOptions

    def __str__(self) -> str:
        depth = "no depth limit" if self.max_depth is None else f"max_depth {self.max_depth}"
        counts = {int(length): int(count) for length, count in zip(self.histogram.lengths, self.histogram.counts)
                  if count}
        return (f"max_length {self.max_length}, {depth}, seed {self.options.seed}, batch_size "
                f"{self.options.batch_size}, histogram over lengths 1..{self.histogram.max_length} with "
                f"{f'counts (length: count) {counts}' if counts else 'no sequences'}")


def check_strategy(strategy: str | Strategy | PackFunction, *, max_examples: int = DEFAULT_EXAMPLES) -> None:
    """Run every check of the battery on a strategy; raise `StrategyCheckFailure` at the first broken rule.

    Needs hypothesis (a development dependency of simbench). `max_examples` random histograms feed the
    invariant check, each also bounded by the LP optimum (simbench.strategies.lp_bound).
    """
    strategy = as_strategy(strategy)
    for check in FIXED_INPUT_CHECKS:  # first: quick, and their inputs are the simplest to read
        check(strategy)
    check_invariants_on_random_histograms(strategy, max_examples)


def as_strategy(strategy: str | Strategy | PackFunction) -> Strategy:
    """A registered name or a bare pack function, as the registry would hold it."""
    if isinstance(strategy, Strategy):
        return strategy
    if isinstance(strategy, str):
        return get_strategy(strategy)
    if callable(strategy):
        return Strategy(getattr(strategy, "__name__", "strategy"), "under test", strategy)
    raise TypeError(f"check_strategy takes a strategy name, a Strategy or a pack function; found "
                    f"{type(strategy).__name__}")


def check_invariants_on_random_histograms(strategy: Strategy, max_examples: int = DEFAULT_EXAMPLES) -> None:
    """Every sequence placed exactly once, no pack over capacity or depth, metrics consistent with the
    packs, and no fewer fixed-shape packs than the LP lower bound, on random histograms."""
    hypothesis = _import_hypothesis()
    from simbench.strategies.lp_bound import lp_lower_bound

    @hypothesis.settings(max_examples=max_examples, deadline=None, database=None,
                         suppress_health_check=[hypothesis.HealthCheck.too_slow])
    @hypothesis.given(problem=packing_problems())
    def invariants_hold(problem: PackingProblem) -> None:
        packing = _pack(strategy, problem)
        check_packing(strategy, packing, problem)
        fixed_shape = bool(np.all(packing.slot_lengths == problem.max_length))
        if fixed_shape and problem.histogram.sequences:
            bound = lp_lower_bound(problem.histogram, problem.max_length, problem.max_depth).lower_bound_packs
            _require(packing.packs_total >= bound, strategy, "no fewer packs than the LP lower bound", problem,
                     f"{packing.packs_total} packs, below the proven minimum of {bound}")

    invariants_hold()


def check_packing(strategy: Strategy, packing: Packing, problem: PackingProblem) -> None:
    """The rules every packing of `problem` keeps, whatever the strategy (`simbench.strategies.invariants`,
    which every plug-in's packing also passes before it is used)."""
    broken = broken_rule(packing, problem.histogram, problem.max_length, problem.max_depth)
    if broken is not None:
        _require(False, strategy, *broken[:1], problem, broken[1])


def check_deterministic(strategy: Strategy) -> None:
    """A pure function of its arguments: the same call twice gives the same packs."""
    problem = PackingProblem(LengthHistogram.from_counts(np.arange(40) % 7), 40, 3, PackOptions(seed=3, batch_size=5))
    first, second = _pack(strategy, problem), _pack(strategy, problem)
    _require(_same_packs(first, second), strategy, "the same arguments give the same packs", problem,
             "two calls gave different packs")


def check_empty_histogram(strategy: Strategy) -> None:
    """No sequences, no packs."""
    problem = PackingProblem(LengthHistogram.from_counts([0] * 16), 16, None, PackOptions())
    packing = _pack(strategy, problem)
    _require(packing.packs_total == 0 and packing.sequences == 0, strategy, "an empty histogram gives no packs",
             problem, f"{packing.packs_total} packs holding {packing.sequences} sequences")


def check_full_length_sequences_alone(strategy: Strategy) -> None:
    """Sequences of exactly max_length fill a pack each, with no padding (a batch of one row each, so that a
    batcher's budget of batch_size rows is filled too)."""
    problem = PackingProblem(LengthHistogram.from_counts([0, 0, 0, 5]), 4, None, PackOptions(batch_size=1))
    packing = _pack(strategy, problem)
    _require(packing.packs_total == 5 and packing.efficiency == 1.0, strategy,
             "sequences of max_length fill one pack each", problem,
             f"{packing.packs_total} packs at efficiency {packing.efficiency}")


def check_trailing_empty_lengths_change_nothing(strategy: Strategy) -> None:
    """A histogram padded with empty lengths beyond max_length packs the same."""
    counts = np.arange(30) % 4
    options = PackOptions(seed=2, batch_size=4)
    exact = PackingProblem(LengthHistogram.from_counts(counts), 30, 3, options)
    padded = PackingProblem(LengthHistogram.from_counts(np.r_[counts, np.zeros(20, dtype=int)]), 30, 3, options)
    exact_packing, padded_packing = _pack(strategy, exact), _pack(strategy, padded)
    same = _same_packs(exact_packing, padded_packing, slots=False)
    _require(same, strategy, "empty lengths beyond max_length change nothing", padded,
             "other packs than for the same histogram without its empty tail")


def check_depth_beyond_max_length(strategy: Strategy) -> None:
    """A depth limit above max_length acts as max_length: no pack holds more sequences than tokens."""
    histogram = LengthHistogram.from_counts([3, 2, 1, 1, 0, 0, 0, 1])
    huge = PackingProblem(histogram, 8, 10**9, PackOptions())
    packing = _pack(strategy, huge)
    as_deep = _pack(strategy, PackingProblem(histogram, 8, 8, PackOptions()))
    _require(packing.packs_total == as_deep.packs_total and packing.depth_used <= 8, strategy,
             "a depth beyond max_length acts as max_length", huge,
             f"{packing.packs_total} packs up to {packing.depth_used} deep, "
             f"{as_deep.packs_total} packs at max_depth 8")


FIXED_INPUT_CHECKS: tuple[Callable[[Strategy], None], ...] = (
    check_deterministic,
    check_empty_histogram,
    check_full_length_sequences_alone,
    check_trailing_empty_lengths_change_nothing,
    check_depth_beyond_max_length,
)
STRATEGY_CHECKS: tuple[Callable[[Strategy], None], ...] = (*FIXED_INPUT_CHECKS, check_invariants_on_random_histograms)


def _pack(strategy: Strategy, problem: PackingProblem) -> Packing:
    try:
        with in_this_process():  # the author's code as it runs for them: fast, and its state between calls shows
            return strategy(problem.histogram, problem.max_length, problem.max_depth, problem.options)
    except BrokenPacking as error:  # the check every plug-in's packing passes before it is used
        raise StrategyCheckFailure(f"strategy {strategy.name!r} broke the rule: {error.rule}; found {error.found}; "
                                   f"input: {problem}") from None
    except PluginFailure as failure:  # what the plug-in itself raised, under the watchdog
        error = failure.error
        raise StrategyCheckFailure(f"strategy {strategy.name!r} raised {type(error).__name__}: {error}; "
                                   f"input: {problem}") from error
    except Exception as error:
        raise StrategyCheckFailure(f"strategy {strategy.name!r} raised {type(error).__name__}: {error}; "
                                   f"input: {problem}") from error


def _require(holds: bool, strategy: Strategy, rule: str, problem: PackingProblem, found: str) -> None:
    if not holds:
        raise StrategyCheckFailure(f"strategy {strategy.name!r} broke the rule: {rule}; found {found}; "
                                   f"input: {problem}")


def _same_packs(first: Packing, second: Packing, slots: bool = True) -> bool:
    return (np.array_equal(first.pack_lengths, second.pack_lengths)
            and np.array_equal(first.pack_starts, second.pack_starts)
            and np.array_equal(first.repeats, second.repeats)
            and (not slots or np.array_equal(first.slot_lengths, second.slot_lengths)))


def packing_problems():
    """A hypothesis strategy drawing `PackingProblem`s: a histogram over 1..max_length (often sparse),
    a max length of 8..128, an optional depth of 1..6 and random options."""
    st = _import_hypothesis().strategies

    @st.composite
    def problems(draw) -> PackingProblem:
        max_length = draw(st.integers(8, 128))
        present = draw(st.lists(st.integers(1, max_length), min_size=0, max_size=max_length, unique=True))
        counts = np.zeros(max_length, dtype=np.int64)
        for length in present:
            counts[length - 1] = draw(st.integers(0, 50))
        max_depth = draw(st.one_of(st.none(), st.integers(1, 6)))
        seed = draw(st.integers(0, 2**32 - 1))
        batch_size = draw(st.integers(1, 64))
        return PackingProblem(LengthHistogram.from_counts(counts), max_length, max_depth,
                              PackOptions(seed=seed, batch_size=batch_size))

    return problems()


def _import_hypothesis():
    try:
        import hypothesis
        import hypothesis.strategies  # noqa: F401  (the submodule `packing_problems` draws with)
    except ImportError:
        raise ImportError("simbench.testing draws random histograms with hypothesis, a development dependency: "
                          "pip install hypothesis (or simbench's dev extra)") from None
    return hypothesis
