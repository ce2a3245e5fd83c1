"""Reproduction of Krell et al., arXiv 2107.02027: Table 1 (Wikipedia 512) and Table 5 (SQuAD 384).

Figures from shared/reference/PUBLISHED.md; the paper prints Table 1 to 0.1 percentage points.
"""

import numpy as np
import pytest

from simbench.strategies import PackOptions, get_strategy
from simbench.strategies.nnlshp import pack_nnlshp_counts, round_fitted_counts
from simbench.strategies.packing import Packing

TABLE_1_POINTS = 0.1  # percentage points: Table 1 prints one decimal


def percent(packing):
    return 100 * packing.efficiency


@pytest.mark.parametrize("max_depth, efficiency_percent, packing_factor", [
    (2, 80.5, 1.61), (3, 89.4, 1.79), (4, 93.9, 1.88), (8, 98.9, 1.98), (None, 99.6, 1.99),
])
def test_table_1_spfhp(wikipedia, max_depth, efficiency_percent, packing_factor):
    packing = get_strategy("spfhp")(wikipedia, 512, max_depth)
    assert percent(packing) == pytest.approx(efficiency_percent, abs=TABLE_1_POINTS)
    assert packing.packing_factor == pytest.approx(packing_factor, abs=0.005)


def test_table_1_spfhp_without_depth_limit_uses_16_sequences(wikipedia):
    assert get_strategy("spfhp")(wikipedia, 512, None).depth_used == 16


def test_table_1_none_is_half_padding(wikipedia):
    packing = get_strategy("none")(wikipedia, 512, None)
    assert percent(packing) == pytest.approx(50.0, abs=TABLE_1_POINTS)
    assert packing.packing_factor == 1.0


def test_table_1_sort(wikipedia):
    # Sorting 16.3M sequences and cutting batches of 32 leaves almost no padding: simbench
    # measures 99.9998 %, the paper prints 99.9 (it gives no batch size; the batch sizes tried, from
    # 1 to 4096, all stay above 99.97 %), so the match holds within the printed precision.
    packing = get_strategy("sort")(wikipedia, 512, None, PackOptions(batch_size=32))
    assert percent(packing) == pytest.approx(99.9, abs=TABLE_1_POINTS)
    assert percent(packing) >= 99.9


def test_table_1_greedy(wikipedia):
    # Paper: 78.24 % (std 0.005) for next fit over the shuffled dataset, packing factor ~1.6.
    # simbench: 78.242 % with seed 0 and 78.239 % with seed 1, packing factor 1.566, up to 10
    # sequences per pack.
    packing = get_strategy("greedy")(wikipedia, 512, None, PackOptions(seed=0))
    assert percent(packing) == pytest.approx(78.24, abs=TABLE_1_POINTS)
    assert packing.packing_factor == pytest.approx(1.6, abs=0.05)
    assert packing.depth_used == pytest.approx(10, abs=2)


def test_table_1_nnlshp_depth_3(wikipedia):
    # Paper: 99.7 %, packing factor 2.00, with each leftover of the rounded fit in its own pack:
    # simbench 99.746 % that way. The paper's first pass left 56,799 sequences (0.35 %) unpacked
    # with 634 strategies; simbench's exact Lawson-Hanson fit leaves about 7,850 (0.05 %) with 509.
    # Three solvers (simbench's, SciPy 1.11's Fortran NNLS and SciPy 1.17's) agree on these to
    # within twenty sequences, so the paper's count most likely comes from a looser, early-stopped
    # fit; it is not reproduced.
    rows, repeats, details = pack_nnlshp_counts(wikipedia.counts, 512, 3, leftovers="single")
    packing = Packing.from_rows("nnlshp", 512, 3, rows, repeats)
    assert packing.placed_histogram().counts.tolist() == wikipedia.counts.tolist()
    assert percent(packing) == pytest.approx(99.7, abs=TABLE_1_POINTS)
    assert packing.packing_factor == pytest.approx(2.00, abs=0.005)
    assert packing.depth_used == 3
    assert 0 < details["sequences_left_over"] < 56_799


def test_table_1_nnlshp_registered_beats_the_paper(wikipedia):
    # The registered nnlshp packs the leftovers with spfhp into the room that surplus sequences
    # left in the fitted packs: 99.81 %.
    packing = get_strategy("nnlshp")(wikipedia, 512, 3)
    assert percent(packing) > 99.7
    assert packing.depth_used == 3


def test_graphcore_readme_lpfhp_at_its_depth_12(wikipedia):
    # Graphcore's packedBERT README runs LPFHP at 12 sequences per pack: 99.8129 %.
    assert percent(get_strategy("lpfhp")(wikipedia, 512, 12)) == pytest.approx(99.8129, abs=5e-5)


# Packs made by Graphcore's original lpfhp.py (packedBERT) on the bundled histograms; the counts at
# depth 12 and without a limit are also in shared/reference/PUBLISHED.md.
ORIGINAL_LPFHP_PACKS = {
    ("wikipedia", 3): 9_090_154, ("wikipedia", 8): 8_207_569, ("wikipedia", 12): 8_149_619,
    ("wikipedia", None): 8_138_483,
    ("squad", 3): 40_631, ("squad", 8): 40_631, ("squad", 12): 40_631, ("squad", None): 40_631,
}


@pytest.mark.parametrize("histogram_name, max_depth", list(ORIGINAL_LPFHP_PACKS))
def test_lpfhp_makes_as_many_packs_as_the_original(request, histogram_name, max_depth):
    histogram = request.getfixturevalue(histogram_name)
    packing = get_strategy("lpfhp")(histogram, histogram.max_length, max_depth)
    assert packing.packs_total == ORIGINAL_LPFHP_PACKS[histogram_name, max_depth]
    assert packing.sequences == histogram.sequences


@pytest.mark.parametrize("strategy, max_depth, strategies_used, packs, tokens, padding_tokens, efficiency, factor", [
    ("none", None, 348, 88641, 34038144, 18788665, 44.801, 1.000),
    ("spfhp", 2, 348, 45335, 17408640, 2159161, 87.597, 1.955),
    ("spfhp", 3, 344, 40711, 15633024, 383545, 97.547, 2.177),
    ("spfhp", None, 344, 40711, 15633024, 383545, 97.547, 2.177),
])
def test_table_5_exactly(squad, strategy, max_depth, strategies_used, packs, tokens, padding_tokens,
                         efficiency, factor):
    packing = get_strategy(strategy)(squad, 384, max_depth)
    assert packing.strategies_used == strategies_used
    assert packing.packs_total == packs
    assert packing.tokens == tokens
    assert packing.padding_tokens == padding_tokens
    assert round(percent(packing), 3) == efficiency
    assert round(packing.packing_factor, 3) == factor


def test_table_5_nnlshp_with_the_papers_leftover_rule(squad):
    # Paper: 40,808 packs, 97.310 %, 398 strategies. With the paper's rule (each leftover gets
    # its own pack) simbench gets 40,781 packs, 97.379 %: within 0.1 points and 0.1 % of the
    # packs, not exact. The rounded NNLS solution is not unique: SciPy 1.11's Fortran NNLS gives
    # 40,782 packs and SciPy 1.17's 40,778 on the same matrix, so the last few dozen packs depend
    # on which optimal vertex the solver lands on.
    rows, repeats, _ = pack_nnlshp_counts(squad.counts, 384, 3, leftovers="single")
    packing = Packing.from_rows("nnlshp", 384, 3, rows, repeats)
    assert packing.placed_histogram().counts.tolist() == squad.counts.tolist()
    assert percent(packing) == pytest.approx(97.310, abs=0.1)
    assert packing.packs_total == pytest.approx(40808, rel=1e-3)


def test_table_5_nnlshp_registered_beats_the_paper(squad):
    # Packing the leftovers with spfhp, first into the fitted packs' free room: 40,336 packs, 98.45 %.
    packing = get_strategy("nnlshp")(squad, 384, 3)
    assert packing.packs_total < 40808
    assert percent(packing) > 97.310


def test_nnlshp_rounds_a_tied_count_alike_from_either_side():
    # SQuAD at depth 3 fits one strategy 191.5 times, and solver builds differ in its last bit.
    tie = 191.5
    fitted = np.array([tie, np.nextafter(tie, 0), np.nextafter(tie, 400), 192.5 - 1e-10, 120.5006, 3.2])
    assert round_fitted_counts(fitted).tolist() == [192, 192, 192, 192, 121, 3]


@pytest.mark.parametrize("seed", [1, 2])
def test_nnlshp_packs_do_not_depend_on_the_fit_s_last_bits(wikipedia, monkeypatch, seed):
    # Another BLAS or SciPy build rounds the fit's sums differently, by about 1e-12 relative: Wikipedia at
    # depth 3 meets a dozen gradient ties that close, and an argmax over them gave 8,150,025 to 8,150,038 packs.
    import simbench.strategies.nnlshp as nnlshp

    exact = pack_nnlshp_counts(wikipedia.counts, 512, 3)
    unperturbed = nnlshp.strategy_matrix

    def perturbed(*arguments):
        matrix = unperturbed(*arguments)
        noise = np.random.default_rng(seed).standard_normal(matrix.data.size)
        matrix.data = matrix.data * (1 + 1e-12 * noise)
        return matrix

    monkeypatch.setattr(nnlshp, "strategy_matrix", perturbed)
    rows, repeats, details = pack_nnlshp_counts(wikipedia.counts, 512, 3)
    assert details == exact[2]
    assert np.array_equal(rows, exact[0]) and np.array_equal(repeats, exact[1])


def test_nnlshp_strategy_count_for_512_at_depth_3():
    # Paper: all sorted combinations of up to 3 lengths summing exactly to 512: 22,102 (~s^2/12 + s/2 + 1).
    from simbench.strategies.nnlshp import count_exact_fill_strategies, exact_fill_strategies

    strategies = exact_fill_strategies(512, 3)
    assert strategies.shape[0] == count_exact_fill_strategies(512, 3) == 22102
    assert round(512**2 / 12 + 512 / 2 + 1) == 22102  # the paper's approximation agrees
