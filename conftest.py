"""Collection rules for `python -m pytest`, which also runs the doctests in simbench/."""

import importlib.util

# simbench/calibrate imports torch, an optional extra: without it, its doctests cannot even be imported.
collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["simbench/calibrate/*"]
