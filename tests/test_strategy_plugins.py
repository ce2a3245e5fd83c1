"""Third-party strategies plug in through the `simbench.strategies` entry-point group."""

from importlib.metadata import EntryPoint

import numpy as np
import pytest

import simbench.registry
from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.strategies import STRATEGIES, Strategy, available_strategies, get_strategy
from simbench.strategies.packing import Packing


def pack_pairs_of_equal_length(histogram, max_length, max_depth, options) -> Packing:
    """Pairs two sequences of the same length when they fit together, else one per pack."""
    lengths = histogram.lengths
    pairable = (2 * lengths <= max_length) & (max_depth is None or max_depth >= 2)
    pairs = np.where(pairable, histogram.counts // 2, 0)
    singles = histogram.counts - 2 * pairs
    rows = np.concatenate([np.column_stack([lengths, lengths]), np.column_stack([lengths, 0 * lengths])])
    return Packing.from_rows("pairs", max_length, max_depth, rows, np.concatenate([pairs, singles]))


PAIRS = Strategy("pairs", "pairs of equal length (a plug-in)", pack_pairs_of_equal_length)
IMPOSTOR = Strategy("spfhp", "a plug-in claiming a built-in name", pack_pairs_of_equal_length)


def use_plugins(monkeypatch, *plugins: EntryPoint) -> None:
    """Serve these entry points, on a copy of the registry with every built-in already in it."""
    available_strategies()
    monkeypatch.setattr(STRATEGIES, "entries", dict(STRATEGIES.entries))
    monkeypatch.setattr(simbench.registry, "entry_points",
                        lambda group: [plugin for plugin in plugins if plugin.group == group])


def test_an_entry_point_strategy_is_registered_and_packs(monkeypatch):
    use_plugins(monkeypatch, EntryPoint(name="pairs", value=f"{__name__}:PAIRS", group="simbench.strategies"))

    assert "pairs" in available_strategies()
    histogram = LengthHistogram.from_counts([0, 3, 0, 5, 0, 0, 0, 1])
    packing = get_strategy("pairs")(histogram, max_length=8)

    assert np.array_equal(packing.placed_histogram().counts, histogram.counts)
    assert packing.packs_total == 1 + 1 + 2 + 1 + 1  # length 2: one pair + one single; 4: two pairs + one; 8: one
    assert packing.strategy == "pairs" and packing.seconds >= 0


def test_a_plugin_cannot_replace_a_builtin(monkeypatch):
    use_plugins(monkeypatch, EntryPoint(name="spfhp", value=f"{__name__}:IMPOSTOR", group="simbench.strategies"))

    assert get_strategy("spfhp") is not IMPOSTOR
    assert get_strategy("spfhp").pack_function is not pack_pairs_of_equal_length



@pytest.mark.parametrize("value, message", [
    ("no_such_module_here:PAIRS", r"cannot load the strategy plug-in 'broken' \(no_such_module_here:PAIRS\)"),
    (f"{__name__}:pack_pairs_of_equal_length", "'broken' .* is a function, not a simbench.strategies.Strategy"),
])
def test_a_broken_plugin_is_named_in_an_input_error(monkeypatch, value, message):
    use_plugins(monkeypatch, EntryPoint(name="broken", value=value, group="simbench.strategies"))
    with pytest.raises(InputError, match=message):
        available_strategies()


def test_listing_order_does_not_depend_on_import_order(monkeypatch):
    expected = list(available_strategies())
    shuffled = dict(reversed(list(STRATEGIES.entries.items())))
    monkeypatch.setattr(STRATEGIES, "entries", shuffled)
    assert list(available_strategies()) == expected
    assert expected[:3] == ["none", "sort", "greedy"]
