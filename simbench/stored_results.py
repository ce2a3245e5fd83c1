"""Results of slow pure functions of a histogram, kept by content: shipped for the bundled histograms, cached
on disk for others, so a run does not recompute what a run before it (or the package's build) already did.

An entry's key is the function's name and algorithm version and its inputs (the histogram's counts by their
SHA-256, the limits); its value is JSON. Entries for the bundled histograms ship in
`simbench/data/stored/<function>.json`, read with importlib.resources; others go to the user cache, one file
an entry, written atomically; an entry that does not parse is ignored (and recomputed and rewritten).

    >>> import tempfile
    >>> from simbench.stored_results import StoredResults
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     store = StoredResults("square", version=1, folder=folder)
    ...     store.keep({"x": 3}, {"square": 9})
    ...     store.find({"x": 3}), store.find({"x": 4})
    ({'square': 9}, None)
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import resources
from pathlib import Path

import numpy as np

from simbench.atomic import atomic_file

# The user cache's folder; "off" reads and writes no stored result (benchmarks time the computation so).
CACHE_VARIABLE = "SIMBENCH_CACHE"
CACHE_OFF = "off"


def cache_folder() -> Path | None:
    """$SIMBENCH_CACHE, else $XDG_CACHE_HOME/simbench, else ~/.cache/simbench; None when it is "off"."""
    chosen = os.environ.get(CACHE_VARIABLE)
    if chosen == CACHE_OFF:
        return None
    if chosen:
        return Path(chosen)
    try:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "simbench"
    except RuntimeError:  # no home folder to find: nothing cached, everything computed
        return None


def counts_digest(counts: np.ndarray) -> str:
    """The SHA-256 of a histogram's counts (int64, little-endian, trailing empty lengths dropped)."""
    counts = np.asarray(counts, dtype="<i8")
    present = np.flatnonzero(counts)
    trimmed = counts[:present[-1] + 1] if present.size else counts[:0]
    return hashlib.sha256(trimmed.tobytes()).hexdigest()


class StoredResults:
    """One function's stored results: `find(inputs)` and `keep(inputs, value)`, inputs a JSON-able dict."""

    def __init__(self, function: str, version: int, folder: str | Path | None = None):
        self.function = function
        self.version = version
        self.folder = Path(folder) if folder is not None else None

    def key(self, inputs: dict) -> str:
        text = json.dumps({"function": self.function, "version": self.version, **inputs}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def _user_folder(self) -> Path | None:
        folder = self.folder if self.folder is not None else cache_folder()
        return None if folder is None else folder / self.function

    def find(self, inputs: dict) -> dict | None:
        """The stored value for `inputs`: shipped, else in the user cache, else None."""
        if self.folder is None and cache_folder() is None:
            return None
        key = self.key(inputs)
        shipped = _shipped(self.function).get(key)
        if shipped is not None:
            return shipped
        folder = self._user_folder()
        if folder is None:
            return None
        try:
            entry = json.loads((folder / f"{key}.json").read_text())
        except (OSError, ValueError):  # missing, unreadable or corrupt: computed again
            return None
        return entry.get("value") if isinstance(entry, dict) and entry.get("key") == key else None

    def keep(self, inputs: dict, value: dict) -> None:
        """Store `value` for `inputs` in the user cache (silently not, where it cannot be written)."""
        folder = self._user_folder()
        if folder is None:
            return
        key = self.key(inputs)
        try:
            with atomic_file(folder / f"{key}.json") as temporary:
                temporary.write_text(json.dumps({"key": key, "inputs": inputs, "value": value}))
        except OSError:
            pass  # a read-only or full disk: the result is recomputed next time, nothing else is lost


_SHIPPED: dict[str, dict] = {}


def _shipped(function: str) -> dict:
    """The shipped entries of `function` by key (none where the package ships none)."""
    if function not in _SHIPPED:
        try:
            text = resources.files("simbench.data").joinpath("stored", f"{function}.json").read_text()
            _SHIPPED[function] = json.loads(text)["entries"]
        except (OSError, ValueError, KeyError):
            _SHIPPED[function] = {}
    return _SHIPPED[function]


def shipped_path(function: str) -> Path:
    """Where the source tree keeps the shipped entries of `function` (for the command that writes them)."""
    return Path(__file__).parent / "data" / "stored" / f"{function}.json"
