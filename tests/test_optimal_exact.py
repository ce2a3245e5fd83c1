"""`optimal` proves what its name says: on small Wikipedia samples its packs are the optimum (checked here by
formulations of its own: the LP over every pack, a MILP over every pack, the arc-flow LP) and it says it has
proved so; on Wikipedia itself it meets its LP bound; where it cannot, it says why."""

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix

from simbench.histogram import LengthHistogram
from simbench.strategies import PackOptions, get_strategy, lp_bound, optimal
from simbench.strategies.optimal.search import BoundedItems
from simbench.strategies.lp_bound import lp_lower_bound
from simbench.strategies.optimal.pattern_mip import enumerate_packs

# 28 samples of 20-60 Wikipedia sequences (seed, depth): those of seeds 0-299 (and 579, 948, 1190 of 300-1299)
# where every heuristic and the LP rounding stayed a pack over the LP bound, and four at depth 2.
SAMPLES = [(68, None), (181, None), (182, None), (205, None), (211, None), (226, None), (254, None), (1190, None),
           (948, 3), (579, 3), (1, 3), (2, 3), (13, 3), (15, 3), (17, 3), (32, 3), (53, 3), (62, 3), (89, 3),
           (119, 3), (122, 3), (134, 3), (144, 3), (162, 3), (0, 2), (1, 2), (2, 2), (3, 2)]
# The samples whose optimum lies above the LP bound: proven by the LP over packs holding no more of a length
# than the sample has, or (seed 948: LP 24, optimum 25) only by the MIP.
PROOFS = {(1190, None): "proven optimal (LP bound within counts)", (579, 3): "proven optimal (LP bound within counts)",
          (948, 3): "proven optimal (MIP)"}
# Patterns enumerated for the check at most; past this (no depth limit, many short sequences) the arc-flow LP.
CHECK_PATTERNS_MAX = 60_000


def wikipedia_sample(wikipedia, seed: int) -> LengthHistogram:
    rng = np.random.default_rng(seed)
    return LengthHistogram(rng.multivariate_hypergeometric(wikipedia.counts, int(rng.integers(20, 61))))


def every_pack(lengths: list[int], demand: list[int], max_length: int, max_depth: int | None, most: int):
    """Every pack of at most demand[i] sequences of lengths[i] as columns, by recursion, or None past `most`."""
    patterns, pattern = [], [0] * len(lengths)
    depth = max_depth or max_length

    def extend(start, tokens, sequences):
        if sequences == depth:
            return True
        for item in range(start, len(lengths)):
            if tokens + lengths[item] <= max_length and pattern[item] < demand[item]:
                pattern[item] += 1
                patterns.append(list(pattern))
                if len(patterns) > most or not extend(item, tokens + lengths[item], sequences + 1):
                    return False
                pattern[item] -= 1
        return True

    return np.array(patterns, dtype=float).reshape(-1, len(lengths)).T if extend(0, 0, 0) else None


def arc_flow_lp(lengths: list[int], demand: list[int], max_length: int) -> float:
    """The LP of Valerio de Carvalho's arc-flow model without a depth limit: a pack is a path 0 -> max_length
    of sequence arcs (p, p + length) and unit loss arcs; its optimum equals the pattern LP's."""
    arcs = [(p, p + length, item) for item, length in enumerate(lengths) for p in range(max_length - length + 1)]
    arcs += [(p, p + 1, -1) for p in range(max_length)]
    tail, head, item = (np.array(column) for column in zip(*arcs))
    rows, columns, values = [], [], []
    for node, sign in ((head, 1.0), (tail, -1.0)):
        inner = (node > 0) & (node < max_length)
        rows.append(node[inner] - 1)
        columns.append(np.flatnonzero(inner))
        values.append(np.full(int(inner.sum()), sign))
    conservation = coo_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(columns))),
                              shape=(max_length - 1, len(arcs)))
    real = item >= 0
    covering = coo_matrix((-np.ones(int(real.sum())), (item[real], np.flatnonzero(real))),
                          shape=(len(lengths), len(arcs)))
    result = linprog((tail == 0).astype(float), A_ub=covering, b_ub=-np.asarray(demand, dtype=float),
                     A_eq=conservation, b_eq=np.zeros(max_length - 1), method="highs")
    assert result.success
    return result.fun


def verified_optimum(histogram: LengthHistogram, max_length: int, max_depth: int | None, claimed: int) -> int:
    """The fewest packs, computed without simbench: the LP over every pack rounded up where that meets the
    claim, else the MILP over every pack; the arc-flow LP where there are too many packs to enumerate."""
    present = np.flatnonzero(histogram.counts)
    lengths, demand = (present + 1).tolist(), histogram.counts[present].tolist()
    patterns = every_pack(lengths, demand, max_length, max_depth, CHECK_PATTERNS_MAX)
    if patterns is None:
        assert max_depth is None
        lower = math.ceil(arc_flow_lp(lengths, demand, max_length) - 1e-6)
        assert claimed <= lower, "too many packs to check an optimum above the LP bound"
        return lower
    cost = np.ones(patterns.shape[1])
    lower = math.ceil(linprog(cost, A_eq=patterns, b_eq=demand, method="highs").fun - 1e-6)
    if claimed <= lower:
        return lower
    result = milp(cost, constraints=LinearConstraint(patterns, demand, demand), integrality=np.ones_like(cost))
    assert result.success
    return round(result.fun)


def assert_valid(packing, histogram: LengthHistogram, max_length: int, max_depth: int | None):
    np.testing.assert_array_equal(packing.placed_histogram().counts[:histogram.max_length], histogram.counts)
    assert packing.pack_tokens().max(initial=0) <= max_length
    assert packing.depth_used <= (max_depth or max_length)


@pytest.mark.parametrize("seed, max_depth", SAMPLES)
def test_optimal_packs_small_wikipedia_samples_in_the_fewest_packs_and_says_it_proved_it(wikipedia, seed, max_depth):
    sample = wikipedia_sample(wikipedia, seed)
    packing = get_strategy("optimal")(sample, 512, max_depth)
    assert_valid(packing, sample, 512, max_depth)
    assert packing.packs_total == verified_optimum(sample, 512, max_depth, packing.packs_total)
    assert packing.details["proven_optimal"]
    assert packing.details["proof"] == PROOFS.get((seed, max_depth), "proven optimal (LP bound)")
    # Without the search, the heuristics and the LP rounding stay a pack over the optimum, or prove nothing.
    if max_depth != 2:
        alone = get_strategy("optimal")(sample, 512, max_depth, PackOptions(time_limit_seconds=0))
        assert alone.packs_total == packing.packs_total + ((seed, max_depth) not in PROOFS)
        assert not alone.details["proven_optimal"]


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), max_depth=st.sampled_from([None, 2, 3]))
def test_optimal_is_optimal_and_proven_on_random_wikipedia_samples(wikipedia, seed, max_depth):
    sample = wikipedia_sample(wikipedia, seed)
    packing = get_strategy("optimal")(sample, 512, max_depth)
    assert_valid(packing, sample, 512, max_depth)
    assert packing.packs_total == verified_optimum(sample, 512, max_depth, packing.packs_total)
    assert packing.details["proven_optimal"] and packing.details["proof"].startswith("proven optimal")


@pytest.mark.parametrize("max_depth", [None, 3])
def test_optimal_meets_the_lp_bound_on_wikipedia_and_says_so(wikipedia, max_depth):
    # A generous time limit: the search's node limit, not the machine's load, decides what it finds.
    packing = get_strategy("optimal")(wikipedia, 512, max_depth, PackOptions(time_limit_seconds=60))
    assert_valid(packing, wikipedia, 512, max_depth)
    bound = lp_lower_bound(wikipedia, 512, max_depth).lower_bound_packs
    assert packing.packs_total == bound == {None: 8_135_727, 3: 8_143_829}[max_depth]
    assert (packing.details["proven_optimal"], packing.details["proof"]) == (True, "proven optimal (LP bound)")


def test_without_time_to_search_the_gap_and_its_reason_are_stated(wikipedia):
    sample = wikipedia_sample(wikipedia, 1)
    packing = get_strategy("optimal")(sample, 512, 3, PackOptions(time_limit_seconds=0))
    assert packing.packs_total == 23 and packing.details["lower_bound_packs"] == 22
    assert not packing.details["proven_optimal"]
    assert packing.details["proof"] == "open: 1 pack over the bound (time limit of 0 s)"
    assert packing.metrics(22)["proof"] == packing.details["proof"]


def test_a_histogram_too_large_to_search_says_so(wikipedia, monkeypatch):
    # Every histogram takes the long-context route (a coarse-grid bound), where the exact search does not run;
    # nor does the rounding on the grid, which would meet this bound.
    monkeypatch.setattr(lp_bound, "EXACT_CELLS", -1)
    monkeypatch.setattr(optimal, "GRID_ROUNDING_GAP", math.inf)
    lp_bound.clear_cache()
    try:
        sample = wikipedia_sample(wikipedia, 1)
        packing = get_strategy("optimal")(sample, 512, 3)
    finally:
        lp_bound.clear_cache()
    assert packing.details["bound_method"] == "coarse grid" and "search_nodes" not in packing.details
    assert not packing.details["proven_optimal"]
    assert packing.details["proof"].startswith("open: ") and "(too large to search: " in packing.details["proof"]


def test_other_packers_are_proven_optimal_only_where_they_meet_the_bound(wikipedia):
    sample = wikipedia_sample(wikipedia, 0)
    bound = lp_lower_bound(sample, 512, 2).lower_bound_packs
    bfd = get_strategy("bfd")(sample, 512, 2)
    assert bfd.packs_total == bound
    assert bfd.proof(bound) == (True, "proven optimal (LP bound)")
    assert bfd.proof(bound - 1) == (False, None) and bfd.proof() == (None, None)


@settings(max_examples=60, deadline=None)
@given(max_length=st.integers(2, 24), data=st.data())
def test_enumerated_packs_are_every_pack_that_fits(max_length, data):
    lengths = data.draw(st.lists(st.integers(1, max_length), min_size=1, max_size=6, unique=True))
    demand = data.draw(st.lists(st.integers(1, 4), min_size=len(lengths), max_size=len(lengths)))
    max_depth = data.draw(st.one_of(st.none(), st.integers(1, 4)))
    packs = enumerate_packs(np.array(lengths), np.array(demand), max_length, max_depth, 10**6)
    expected = every_pack(lengths, demand, max_length, max_depth, 10**6)
    assert {tuple(pack) for pack in packs.tolist()} == {tuple(map(int, column)) for column in expected.T}
    assert len(packs) == expected.shape[1]  # each once


@settings(max_examples=60, deadline=None)
@given(max_length=st.integers(2, 24), data=st.data())
def test_bounded_pricing_finds_the_most_valuable_pack(max_length, data):
    lengths = sorted(data.draw(st.lists(st.integers(1, max_length), min_size=1, max_size=6, unique=True)))
    limits = data.draw(st.lists(st.integers(0, 4), min_size=len(lengths), max_size=len(lengths)))
    values = np.array(data.draw(st.lists(st.floats(-1, 2), min_size=len(lengths), max_size=len(lengths))))
    max_depth = data.draw(st.one_of(st.none(), st.integers(1, 4)))
    best, packs = BoundedItems(np.array(lengths), np.array(limits), max_length, max_depth).price(values)
    every = every_pack(lengths, limits, max_length, max_depth, 10**6)
    expected = max(0.0, float((values @ every).max(initial=0.0)))
    assert best == pytest.approx(expected)
    for pack in packs:  # each pack it returns fits, and those are worth the most first
        assert pack @ np.array(lengths) <= max_length and np.all(pack <= limits)
        assert pack.sum() <= (max_depth or max_length)
    if packs:
        assert packs[0] @ values == pytest.approx(expected)


def test_the_mip_prints_nothing():
    # HiGHS writes a banner to file descriptor 1 the first time a process builds one.
    code = ("import numpy as np; from simbench.strategies.optimal.pattern_mip import solve_pattern_mip; "
            "print(solve_pattern_mip(np.array([3, 5]), np.array([3, 3]), 8, None, 10).packs_total)")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == "3\n"
