"""One registry of strategies: each turns a length histogram into a `Packing`.

    >>> from simbench.strategies import get_strategy
    >>> from simbench.histogram import load_histogram
    >>> packing = get_strategy("spfhp")(load_histogram("squad_1_1_384"), max_length=384, max_depth=3)
    >>> packing.packs_total
    40711

Every strategy has the same call shape `(histogram, max_length, max_depth, options) -> Packing`
and is a pure function of its arguments. Third-party strategies plug in through the entry-point
group `simbench.strategies`; each entry point names a `Strategy`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from simbench.histogram import LengthHistogram
from simbench.registry import Registry
from simbench.strategies.packing import PackOptions, Packing
from simbench.validation import check_pack_limits

PackFunction = Callable[[LengthHistogram, int, "int | None", PackOptions], Packing]

# Built-in strategy modules, imported on first use so that `simbench --help` stays fast.
BUILTIN_MODULES = ("none", "sort", "greedy", "spfhp", "lpfhp", "nnlshp", "classic", "optimal", "token_budget",
                   "group_by_length", "wlb", "pad_to_longest")


@dataclass(frozen=True)
class Strategy:
    """A registered strategy: a name, a one-line description and the pack function."""

    name: str
    description: str
    pack_function: PackFunction
    uses_depth: bool = True
    # (max_length, max_depth) -> None, raising an InputError about `max_depth` or `max_length` for a size
    # the packer refuses; cheap, so that a scenario is refused when it is read rather than when it runs.
    check_limits: Callable[[int, "int | None"], None] | None = None
    # The depth a packing gets when none is asked for (None: no limit). simbench prices a pack by its
    # tokens and its row, not by how many sequences it holds, so a limit only ever costs packs: nothing but
    # a packer whose own algorithm needs one (nnlshp's enumeration) has a default limit.
    default_depth: int | None = None
    # Whether the packer reads PackOptions.attention_parity_tokens (balances predicted work, as `wlb` does): only
    # such a packer is given the cost model's, so that the others' packings stay one per histogram, whatever the
    # model and hardware (a sweep shares them between cells of different models).
    uses_attention_parity: bool = False
    # Whether packing a dataset-sized histogram takes seconds (a solve, or a walk over every sequence) and gives
    # the same packs on however busy a core: a run packs such packers in its worker processes, side by side,
    # while it packs the others.
    slow: bool = False

    def __call__(self, histogram: LengthHistogram, max_length: int | None = None,
                 max_depth: int | None = None, options: PackOptions | None = None) -> Packing:
        """Validate the arguments, run the packer and record its solve time."""
        if max_depth is None and self.uses_depth:
            max_depth = self.default_depth
        max_length = check_pack_limits(histogram, max_length, max_depth)
        start = time.perf_counter()
        if self.is_builtin:
            packing = self.pack_function(histogram, max_length, max_depth, options or PackOptions())
        else:
            packing = self._plugin_packing(histogram, max_length, max_depth, options or PackOptions())
        # A packer that reused a cached result (optimal's LP bound) reports what that result cost.
        seconds = time.perf_counter() - start + packing.details.get("reused_bound_seconds", 0.0)
        # The depth the packing was made under: the caller's, else the packer's own (nnlshp's default of 3,
        # none's 1), so that its label and its LP bound name the depth it really had.
        if self.uses_depth and max_depth is not None:
            depth = max_depth
        else:
            depth = packing.max_depth
        return packing.replace(strategy=self.name, max_depth=depth, seconds=seconds)

    def label(self, max_depth: int | None = None) -> str:
        """The strategy's name with the depth it packs under, e.g. `spfhp:3`, `ffd:max`; `none` or `sort`
        (no depth) alone. The one spelling used by every command, report and JSON record."""
        if not self.uses_depth:
            return self.name
        depth = self.default_depth if max_depth is None else max_depth
        return f"{self.name}:{'max' if depth is None else depth}"

    @property
    def is_builtin(self) -> bool:
        return getattr(self.pack_function, "__module__", "").startswith("simbench.")

    def _plugin_packing(self, histogram: LengthHistogram, max_length: int, max_depth: int | None,
                        options: PackOptions) -> Packing:
        """A plug-in's packing, checked not trusted: called under a watchdog (simbench.plugins), then held to
        the rules every packing keeps before anything uses it."""
        from simbench.plugins import CALL_TIMEOUT_SECONDS, guarded, timeout_seconds
        from simbench.strategies.invariants import check_plugin_packing

        packing = guarded(f"the plug-in strategy {self.name!r}", self.pack_function, histogram, max_length,
                          max_depth, options, timeout=timeout_seconds(CALL_TIMEOUT_SECONDS))
        check_plugin_packing(self.name, packing, histogram, max_length, max_depth)
        return packing


STRATEGIES: Registry[Strategy] = Registry(
    "strategy", plural="strategies", entry_point_group="simbench.strategies", item_type=Strategy,
    builtin_modules=tuple(f"simbench.strategies.{module}" for module in BUILTIN_MODULES),
    module_of=lambda strategy: strategy.pack_function.__module__)


def register(name: str, description: str, uses_depth: bool = True,
             check_limits: Callable[[int, int | None], None] | None = None,
             default_depth: int | None = None,
             uses_attention_parity: bool = False, slow: bool = False) -> Callable[[PackFunction], PackFunction]:
    """Decorator registering a pack function under `name` (see `Strategy.check_limits`, `default_depth`,
    `uses_attention_parity`, `slow`)."""

    def decorate(function: PackFunction) -> PackFunction:
        STRATEGIES.register(name, Strategy(name, description, function, uses_depth, check_limits, default_depth,
                                           uses_attention_parity, slow))
        return function

    return decorate


# A depth limit whose packs can fill less than this share of their rows is flagged (validate, reports).
SHALLOW_DEPTH_FILL = 0.5


def depth_efficiency_cap(histogram: LengthHistogram, max_length: int, max_depth: int | None) -> float:
    """The most efficiency packs of at most `max_depth` sequences can reach: N sequences take at least
    N / depth packs, so real tokens / (packs x max_length) <= depth x mean length / max_length."""
    if max_depth is None or histogram.sequences == 0:
        return 1.0
    return min(1.0, max_depth * histogram.real_tokens / histogram.sequences / max_length)


def shallow_depth_warning(label: str, histogram: LengthHistogram, max_length: int,
                          max_depth: int | None) -> str | None:
    """A warning when `max_depth` leaves rows mostly empty (`depth_efficiency_cap` under SHALLOW_DEPTH_FILL)."""
    cap = depth_efficiency_cap(histogram, max_length, max_depth)
    if cap >= SHALLOW_DEPTH_FILL:
        return None
    mean_length = histogram.real_tokens / histogram.sequences
    return (f"{label}: packs of at most {max_depth} sequences (mean length {mean_length:,.0f} tokens) can fill at "
            f"most {100 * cap:.1f} % of their {max_length:,} slots; filling them takes a depth of at least "
            f"{math.ceil(max_length / mean_length)} (or max, no limit)")


def available_strategies() -> dict[str, Strategy]:
    """All strategies by name, built-in first (in BUILTIN_MODULES order), then plug-ins."""
    return STRATEGIES.available()


def get_strategy(name: str) -> Strategy:
    return STRATEGIES.get(name)


__all__ = ["STRATEGIES", "PackOptions", "Packing", "Strategy", "available_strategies", "get_strategy",
           "register"]
