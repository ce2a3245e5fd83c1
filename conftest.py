"""Collection rules for `python -m pytest`, which also runs the doctests in simbench/."""

import importlib.util

# simbench/calibrate imports torch, an optional extra: without it, its doctests cannot even be imported.
collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["simbench/calibrate/*"]


def pytest_addoption(parser):
    # Here, not in tests/benchmarks/conftest.py, so that the option exists however pytest is started.
    parser.addoption("--check-targets", action="store_true", default=False,
                     help="benchmarks: fail one that misses the target in its extra_info (tests/benchmarks/conftest.py)")
