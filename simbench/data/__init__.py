"""Files that ship inside the package: bundled histograms, packer baselines and scenarios.

They are found through importlib.resources, so an installed wheel reads them from any folder.

    >>> from simbench.data import bundled_files
    >>> "wiki512" in bundled_files("scenarios", ".yaml")
    True
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable

def bundled_files(folder: str, suffix: str) -> dict[str, Traversable]:
    """The files of a bundled folder that end in `suffix`, by name without it, sorted by name."""
    entries = resources.files(__name__).joinpath(folder).iterdir()
    return {entry.name.removesuffix(suffix): entry
            for entry in sorted(entries, key=lambda entry: entry.name) if entry.name.endswith(suffix)}


def bundled_file(folder: str, name: str) -> Traversable:
    """One bundled file, e.g. `bundled_file("baselines", "packer_efficiency.csv")`."""
    return resources.files(__name__).joinpath(folder, name)

