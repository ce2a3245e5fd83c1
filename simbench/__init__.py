"""simbench: how much padding, sorting, packing, un-padding and variable tensor shapes buy
when training transformers on variable-length data, on 1 to 2048 accelerators.

The Python API (`simbench.api`) is re-exported here and imported on first use, so that
`import simbench` (and with it the command line's start-up) loads nothing heavy.
"""

import importlib

_EXPORTS = {
    "LengthHistogram": "simbench.histogram",
    "Scenario": "simbench.scenario",
    **{name: "simbench.api" for name in ("bound", "load_histogram", "load_scenario", "pack", "recommend",
                                         "run_scenario", "simulate")},
}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'simbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
