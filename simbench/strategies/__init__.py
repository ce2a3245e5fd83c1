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

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.strategies.packing import PackOptions, Packing
from simbench.validation import check_pack_limits

PackFunction = Callable[[LengthHistogram, int, "int | None", PackOptions], Packing]

# Built-in strategy modules, imported on first use so that `simbench --help` stays fast.
BUILTIN_MODULES = ("none", "sort", "greedy", "spfhp", "lpfhp", "nnlshp", "classic", "optimal")


@dataclass(frozen=True)
class Strategy:
    """A registered strategy: a name, a one-line description and the pack function."""

    name: str
    description: str
    pack_function: PackFunction
    uses_depth: bool = True

    def __call__(self, histogram: LengthHistogram, max_length: int | None = None,
                 max_depth: int | None = None, options: PackOptions | None = None) -> Packing:
        """Validate the arguments, run the packer and record its solve time."""
        max_length = check_pack_limits(histogram, max_length, max_depth)
        start = time.perf_counter()
        packing = self.pack_function(histogram, max_length, max_depth, options or PackOptions())
        seconds = time.perf_counter() - start
        return Packing(self.name, max_length, max_depth, packing.rows, packing.repeats,
                       packing.slot_lengths, seconds, packing.details)


_REGISTRY: dict[str, Strategy] = {}


def register(name: str, description: str, uses_depth: bool = True) -> Callable[[PackFunction], PackFunction]:
    """Decorator registering a pack function under `name`."""

    def decorate(function: PackFunction) -> PackFunction:
        _REGISTRY[name] = Strategy(name, description, function, uses_depth)
        return function

    return decorate


def _load_all() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(f"simbench.strategies.{module}")
    for entry in entry_points(group="simbench.strategies"):
        # A broken plug-in is an installation problem the user can fix: name it rather than crash.
        try:
            strategy = entry.load()
        except (ImportError, AttributeError) as error:
            raise InputError(f"cannot load the strategy plug-in {entry.name!r} ({entry.value}): {error}") from None
        if not isinstance(strategy, Strategy):
            raise InputError(f"the strategy plug-in {entry.name!r} ({entry.value}) is a {type(strategy).__name__}, "
                             "not a simbench.strategies.Strategy")
        _REGISTRY.setdefault(strategy.name, strategy)


def available_strategies() -> dict[str, Strategy]:
    """All strategies by name, built-in first (in BUILTIN_MODULES order), then plug-ins."""
    _load_all()
    # Registration order follows import order, which depends on what the caller imported first
    # (optimal imports classic): sort so listings and error messages read the same every time.
    return dict(sorted(_REGISTRY.items(), key=lambda item: (_builtin_rank(item[1]), item[0])))


def _builtin_rank(strategy: Strategy) -> int:
    module = strategy.pack_function.__module__.removeprefix("simbench.strategies.")
    return BUILTIN_MODULES.index(module) if module in BUILTIN_MODULES else len(BUILTIN_MODULES)


def get_strategy(name: str) -> Strategy:
    strategies = available_strategies()
    if name not in strategies:
        raise InputError(f"unknown strategy {name!r}; known strategies: {', '.join(strategies)}")
    return strategies[name]


__all__ = ["PackOptions", "Packing", "Strategy", "available_strategies", "get_strategy",
           "register"]
