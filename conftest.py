"""Collection rules for `python -m pytest`, which also runs the doctests in simbench/."""

import importlib.util
import os

import pytest
from hypothesis import settings

# Hypothesis's per-example deadline is a wall-clock assertion: on a shared 2-core machine it fails tests whose
# code is right. Speed is held by the benchmarks, as ratios to a reference measured in the same run.
settings.register_profile("simbench", deadline=None)
settings.load_profile("simbench")

# simbench/data holds data, among it the script that timed a shipped grid (it needs torch and a GPU): never
# collected as doctests. simbench/calibrate imports torch, an optional extra: without it, its doctests cannot
# even be imported.
collect_ignore_glob = ["simbench/data/*"] + ([] if importlib.util.find_spec("torch") else ["simbench/calibrate/*"])


def pytest_addoption(parser):
    parser.addoption("--check-targets", action="store_true", default=False,
                     help="benchmarks: fail one that misses the target in its extra_info")
    parser.addoption("--check-ratio-targets", action="store_true", default=False,
                     help="benchmarks: check only the targets that hold on a noisy machine (ratios to a reference "
                          "measured in the same run, floors on computed figures), as CI does")
    parser.addoption("--record-skipped", metavar="FILE", default=None,
                     help="append the node id of every skipped test or module to FILE, one per line, for a later "
                          "`pytest @FILE` where what they lacked (torch, ../shared) is present, as CI does")


class SkippedRecorder:
    """Writes the node id of each skipped test, or skipped module, to a file, one per line."""

    def __init__(self, path: str):
        self.path = path

    def _record(self, report) -> None:
        if report.skipped and report.nodeid:
            with open(self.path, "a", encoding="utf-8") as skipped:
                skipped.write(report.nodeid + "\n")

    def pytest_runtest_logreport(self, report):
        self._record(report)

    def pytest_collectreport(self, report):
        self._record(report)


def pytest_configure(config):
    path = config.getoption("--record-skipped")
    if path:
        config.pluginmanager.register(SkippedRecorder(path), "simbench-skipped-recorder")


# Benchmarks (tests/benchmarks) hold their targets when asked (`--check-targets`, `simbench bench --check`).
# A benchmark states its target in `benchmark.extra_info`:
# - `target_seconds`: its fastest round must take at most this long on a quiet 2-core machine; when the
#   machine is busier (1-minute load above its cores) the target is scaled by load / cores and the failure
#   message says so, since an absolute time on a shared machine measures the other jobs too;
# - `target_ratio` with `reference_seconds`: its fastest round over a reference measured in the same run
#   (the same work done another way, or a smaller case) must be at most the ratio: robust to load, except where
#   `ratio_needs_quiet_machine` says otherwise (process start-ups, whose cost load moves unevenly): those are
#   held by `--check-targets` alone;
# - `target_ratio` with `paired_ratio`: the median, over rounds that alternate between the two, of each round's
#   time over the reference round beside it. Where the benchmark measures both sides itself, this is the ratio
#   held: a burst of load slows a round or two on either side, which the fastest rounds' ratio takes whole (a
#   1.31x against a median of 0.87x with two busy processes on 2 cores) and the median of pairs does not;
# - `target_at_least` with `measured_value`: a figure the benchmark computes (a parallel efficiency) must
#   reach it;
# - `target_at_most_seconds` with `measured_value`: a duration the benchmark measures within its round (the
#   longest a piped run stays silent) must stay under it, scaled by load as `target_seconds` is.


def load_factor() -> float:
    """How much busier than its cores the machine is (1 when it is not)."""
    cores = os.cpu_count() or 1
    return max(1.0, os.getloadavg()[0] / cores)


def missed_target(info: dict, fastest_seconds: float, load: float) -> str | None:
    """Why a benchmark misses its target, or None when it holds it (or states none)."""
    target = info.get("target_seconds")
    if target is not None and fastest_seconds > target * load:
        scaled = f" (x {load:.2f} for the machine's load)" if load > 1 else ""
        return f"took {fastest_seconds:.3f} s, target {target} s{scaled}"
    ratio, reference, paired = info.get("target_ratio"), info.get("reference_seconds"), info.get("paired_ratio")
    if ratio is not None and paired is not None:
        if paired > ratio:
            return f"took {paired:.2f}x its reference (median of paired rounds), target {ratio}x"
    elif ratio is not None and reference and fastest_seconds / reference > ratio:
        return (f"took {fastest_seconds / reference:.2f}x its reference ({fastest_seconds:.3f} s against "
                f"{reference:.3f} s), target {ratio}x")
    least, value = info.get("target_at_least"), info.get("measured_value")
    if least is not None and value is not None and value < least:
        return f"{info.get('measured', 'measured value')} {value:.3f}, target at least {least}"
    most = info.get("target_at_most_seconds")
    if most is not None and value is not None and value > most * load:
        scaled = f" (x {load:.2f} for the machine's load)" if load > 1 else ""
        return f"{info.get('measured', 'measured value')} {value:.2f} s, target at most {most} s{scaled}"
    return None


def targets_checked(info: dict, every: bool) -> dict:
    """The benchmark's figures with the targets a run checks: all of them (`--check-targets`), or only those
    robust to a noisy machine (`--check-ratio-targets`): no absolute seconds, no ratio of process start-ups."""
    if every:
        return info
    quiet_only = {"target_seconds"} | ({"target_ratio"} if info.get("ratio_needs_quiet_machine") else set())
    return {key: value for key, value in info.items() if key not in quiet_only}


@pytest.fixture(autouse=True)
def _holds_its_target(request):
    yield
    every = request.config.getoption("--check-targets", default=False)
    if not every and not request.config.getoption("--check-ratio-targets", default=False):
        return
    benchmark = request.node.funcargs.get("benchmark")
    stats = getattr(benchmark, "stats", None)
    if stats is None or not getattr(stats, "stats", None) or not stats.stats.data:
        return  # skipped, or benchmarks disabled
    problem = missed_target(targets_checked(benchmark.extra_info, every), stats.stats.min, load_factor())
    if problem:
        pytest.fail(f"{request.node.name} misses its target: {problem}", pytrace=False)
