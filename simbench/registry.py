"""One registry shape for every extension point: packers, simulator plans, cost models and presets.

    >>> from simbench.registry import Registry
    >>> colours = Registry("colour")
    >>> colours.register("red", "#ff0000")
    >>> colours.get("red"), list(colours)
    ('#ff0000', ['red'])

Built-ins register themselves next to their implementation, in modules the registry imports on first
use; plug-ins come from an entry-point group and are loaded only when asked for by name or listed.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

from simbench.errors import InputError, did_you_mean

Item = TypeVar("Item")


class Registry(Generic[Item]):
    """Items by name, read like a mapping (`name in registry`, `registry[name]`, `.items()`).

    Order is fixed, whatever was imported first: with `builtin_modules`, built-ins in that module order
    (by name within a module), then everything else by name; without, registration order.
    """

    def __init__(self, kind: str, entries: dict[str, Item] | None = None, *, plural: str | None = None,
                 builtin_modules: tuple[str, ...] = (), entry_point_group: str | None = None,
                 item_type: type | None = None, module_of: Callable[[Item], str] | None = None,
                 on_add: Callable[[str, Item], None] | None = None):
        self.kind, self.plural = kind, plural or f"{kind}s"
        self.builtin_modules = builtin_modules
        self.entry_point_group = entry_point_group
        self.item_type = item_type  # what an entry point must name
        self.module_of = module_of or (lambda item: getattr(item, "__module__", ""))
        self.on_add = on_add  # told of every item added, plug-ins included (e.g. to register what it brings)
        self.entries: dict[str, Item] = {}
        self._builtins_loaded = False
        self._builtins_imported = 0  # how many of builtin_modules, in order
        self._hung: dict[tuple[str, str], InputError] = {}  # plug-ins whose import did not return
        for name, item in (entries or {}).items():
            self.register(name, item)

    def register(self, name: str, item: Item) -> None:
        """Add `item` under `name`; a built-in registering again (a module reload) replaces itself."""
        self.entries[name] = item
        if self.on_add is not None:
            self.on_add(name, item)

    def find(self, name: str, *, plugins: bool = True) -> Item | None:
        """The item called `name`, loading only the plug-in of that name if no built-in has it (and `plugins`)."""
        self._load_builtins(until=name)
        if plugins and name not in self.entries:
            self._load_plugins(only=name)
        return self.entries.get(name)

    def get(self, name: str) -> Item:
        """The item called `name`; an InputError listing the known names if there is none."""
        item = self.find(name)
        if item is None:
            raise InputError(f"unknown {self.kind} {name!r};{did_you_mean(name, self.names())} "
                             f"known {self.plural}: {', '.join(self.names())}")
        return item

    def is_builtin(self, item: Item) -> bool:
        """Whether `item` comes from one of the built-in modules (else a plug-in's, or registered by hand)."""
        return self.module_of(item) in self.builtin_modules

    def available(self) -> dict[str, Item]:
        """Every item by name, plug-ins loaded (a broken plug-in is an InputError naming it)."""
        self._load_builtins()
        self._load_plugins()
        return {name: self.entries[name] for name in self._ordered(self.entries)}

    def names(self) -> list[str]:
        """Every name, plug-ins' from their entry points without loading them (a broken one still lists)."""
        self._load_builtins()
        plugins = [entry.name for entry in self._entry_points()]
        return self._ordered({**dict.fromkeys(plugins), **self.entries})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def __getitem__(self, name: str) -> Item:
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.available())

    def __len__(self) -> int:
        return len(self.available())

    def keys(self):
        return self.available().keys()

    def values(self):
        return self.available().values()

    def items(self):
        return self.available().items()

    def _ordered(self, names) -> list[str]:
        if not self.builtin_modules:
            return list(names)
        return sorted(names, key=lambda name: (self._rank(name), name))

    def _rank(self, name: str) -> int:
        item = self.entries.get(name)
        module = self.module_of(item) if item is not None else ""
        return self.builtin_modules.index(module) if module in self.builtin_modules else len(self.builtin_modules)

    def _load_builtins(self, until: str | None = None) -> None:
        """Import the built-in modules in their order; with `until`, only up to the one that registers that name
        (`simbench pack --strategy bfd` need not import `optimal` and its LP solver, a tenth of its start-up)."""
        # Once: a sweep's dry run asks registries millions of times (a 10^5-cell plan spent 11 s here).
        if self._builtins_loaded:
            return
        while self._builtins_imported < len(self.builtin_modules):
            if until is not None and until in self.entries:
                return
            importlib.import_module(self.builtin_modules[self._builtins_imported])
            self._builtins_imported += 1
        self._builtins_loaded = True

    def _entry_points(self) -> list[EntryPoint]:
        return list(entry_points(group=self.entry_point_group)) if self.entry_point_group else []

    def _load_plugins(self, only: str | None = None) -> None:
        for entry in self._entry_points():
            if only is None or entry.name == only:
                item = self._load(entry)
                name = getattr(item, "name", entry.name)
                # A plug-in never replaces what is registered: a built-in name keeps meaning the built-in.
                if name not in self.entries:
                    self.register(name, item)
                elif self.entries[name] is not item:
                    warnings.warn(f"the {self.kind} plug-in {entry.name!r} ({entry.value}) is named like a built-in "
                                  f"{self.kind}, {name!r}, and is ignored: rename it", stacklevel=2)

    def _load(self, entry: EntryPoint) -> Item:
        # A broken plug-in is an installation problem the user can fix: name it rather than crash, exit with
        # its SystemExit or hang on its import. One whose import hung stays refused: had it hung here rather than
        # in its trial process, the abandoned thread would still hold the module's import lock.
        from simbench.plugins import LOAD_TIMEOUT_SECONDS, PluginFailure, PluginTimeout, loaded, timeout_seconds

        key = (entry.name, entry.value)
        if key in self._hung:
            raise self._hung[key]
        named = f"the {self.kind} plug-in {entry.name!r} ({entry.value})"
        try:
            item = loaded(f"loading {named}", entry, timeout=timeout_seconds(LOAD_TIMEOUT_SECONDS))
        except PluginFailure as failure:
            error = failure.error
            raise InputError(f"cannot load {named}: {type(error).__name__}: {error}") from None
        except PluginTimeout as error:
            self._hung[key] = error
            raise
        if self.item_type is not None and not isinstance(item, self.item_type):
            expected = f"{self.item_type.__module__}.{self.item_type.__qualname__}"
            raise InputError(f"the {self.kind} plug-in {entry.name!r} ({entry.value}) is a {type(item).__name__}, "
                             f"not a {expected}")
        return item
