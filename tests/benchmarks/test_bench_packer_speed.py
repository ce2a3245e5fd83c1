"""simbench's histogram packers against the simplest correct code for the same algorithm (reference_packers.py).

Targets: `bfd`, `ffd`, `spfhp`, `lpfhp` within 1.2x of their reference in the same process at 512 (Wikipedia),
8,192 and 131,072 tokens (100,000 chat-like sequences, tests/long_context.py), with and without a depth limit;
a cold `simbench pack` within 2x of the reference's own cold start. Each is a ratio to its reference measured in
the same run, alternating round by round (each round at least 20 ms of calls, as many on both sides), so load
on a shared machine moves both sides alike; the in-process ones hold the median of the rounds' paired ratios
(`--check-ratio-targets` holds the in-process ones; the cold one, two process start-ups that load moves
unevenly, is held by `--check-targets` on a quiet machine).
"""

import gc
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import pytest

from simbench.data import bundled_file
from simbench.histogram import load_histogram
from simbench.strategies import get_strategy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from long_context import long_context_histogram  # noqa: E402
from reference_packers import REFERENCES  # noqa: E402

CHECKOUT = Path(__file__).resolve().parents[2]
REFERENCE_SCRIPT = Path(__file__).resolve().parent / "reference_packers.py"
ROUNDS = 25
COLD_ROUNDS = 11
# A timed round packs this long at least, calling the packer as often as that takes (the same count on both
# sides): a round of one 1 ms call measures the machine's jitter as much as the packer.
ROUND_SECONDS_MIN = 0.02
TARGET_RATIO = 1.2
COLD_TARGET_RATIO = 2.0


def histogram_at(max_length: int):
    if max_length == 512:
        return load_histogram("wikipedia_512")
    return long_context_histogram(max_length, 100_000, "chat", seed=0)


HISTOGRAMS = {max_length: histogram_at(max_length) for max_length in (512, 8192, 131072)}


def distinct_packs(packing) -> dict:
    starts, lengths = packing.pack_starts.tolist(), packing.pack_lengths.tolist()
    return {tuple(lengths[start:end]): repeat
            for start, end, repeat in zip(starts[:-1], starts[1:], packing.repeats.tolist())}


@pytest.mark.parametrize("max_depth", [None, 3])
@pytest.mark.parametrize("max_length", sorted(HISTOGRAMS))
@pytest.mark.parametrize("name", ["bfd", "ffd", "spfhp", "lpfhp"])
def test_packer_against_its_reference(benchmark, name, max_length, max_depth):
    histogram, strategy, reference = HISTOGRAMS[max_length], get_strategy(name), REFERENCES[name]
    counts = histogram.counts
    seconds = {"simbench": [], "reference": []}
    cpu_seconds = {"simbench": [], "reference": []}
    started = time.perf_counter()
    reference(counts, max_length, max_depth)
    calls = max(1, math.ceil(ROUND_SECONDS_MIN / (time.perf_counter() - started)))

    def timed(side, function, *arguments):
        # Both sides without the garbage collector: `--benchmark-disable-gc` (CI's) would otherwise spare only
        # simbench's side, which pytest-benchmark times, and not the reference run in its untimed setup.
        collecting = gc.isenabled()
        gc.disable()
        try:
            started, cpu_started = time.perf_counter(), time.process_time()
            for _ in range(calls):
                result = function(*arguments)
            cpu_seconds[side].append(time.process_time() - cpu_started)
            seconds[side].append(time.perf_counter() - started)
        finally:
            if collecting:
                gc.enable()
        return result

    def reference_round():
        # pytest-benchmark runs this before each timed round of simbench's packer, untimed: the two alternate.
        timed("reference", reference, counts, max_length, max_depth)

    packing = benchmark.pedantic(timed, args=("simbench", strategy, histogram, max_length, max_depth),
                                 setup=reference_round, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    fastest = min(seconds["reference"])
    # The target holds the median of each round's ratio to the reference round just before it (the warm-up pair
    # left out): a burst of load on a shared machine slows a round or two, which the fastest rounds' ratio and
    # CPU-seconds ratio, kept beside it, can take whole.
    benchmark.extra_info.update(
        packs=packing.packs_total, calls_per_round=calls, reference_seconds=fastest, target_ratio=TARGET_RATIO,
        paired_ratio=statistics.median(own / other for own, other in
                                       zip(seconds["simbench"][1:], seconds["reference"][1:])),
        ratio=min(seconds["simbench"]) / fastest,
        cpu_ratio=min(cpu_seconds["simbench"]) / min(cpu_seconds["reference"]))
    assert distinct_packs(packing) == reference(counts, max_length, max_depth)


def cold_environment(cache: str) -> dict:
    """The environment of both cold processes: this checkout first on the path, and compiled bytecode kept in
    `cache` (not in the checkout), as an installed package has it, even where the shell forbids writing it."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHECKOUT), os.environ.get("PYTHONPATH", "")]),
                   "PYTHONPYCACHEPREFIX": cache}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    return environment


@pytest.mark.parametrize("name", ["bfd"])
def test_cold_pack_against_the_reference_cold(benchmark, name, tmp_path):
    """A fresh `python -m simbench pack wikipedia_512 --strategy NAME --no-bound --json --quiet` (import, read the
    bundled histogram, pack, print one JSON line) against a fresh python that imports numpy, reads the same CSV,
    runs the reference and prints its count. The first run of each compiles its bytecode and is not counted.

    Target 2.0x, not reliably met: 1.8-2.3x (wall, fastest rounds) and 1.9-2.1x (CPU seconds) on 2026-11-26 at
    load 2.5-4 on 2 cores (the code before: 2.2x both). The floor is typer's: typer 0.29 coerces every option of the command it runs through a
    pydantic TypeAdapter, so any simbench command imports typer (about 25 ms CPU) and pydantic (about 70 ms,
    20 more for the adapters), against about 140 ms for the whole reference process: a bare typer app with `pack`'s
    options running the reference measured 1.8x, simbench 1.97x (CPU, load 3.3).
    """
    with resources.as_file(bundled_file("histograms", "wikipedia_512.csv")) as csv_path:
        simbench_command = [sys.executable, "-m", "simbench", "pack", "wikipedia_512", "--strategy", name,
                            "--no-bound", "--json", "--quiet"]
        reference_command = [sys.executable, str(REFERENCE_SCRIPT), str(csv_path), "512", name]
        with tempfile.TemporaryDirectory() as cache:
            environment = cold_environment(cache)
            seconds = {"simbench": [], "reference": []}
            cpu_seconds = {"simbench": [], "reference": []}
            outputs = {}

            def run(side, command) -> str:
                started, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
                # cwd: `python -m` looks in the current folder first, which may hold another checkout's simbench.
                outputs[side] = subprocess.run(command, env=environment, cwd=tmp_path, capture_output=True,
                                               text=True, check=True).stdout
                seconds[side].append(time.perf_counter() - started)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu_seconds[side].append(after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime)

            run("simbench", simbench_command)  # each compiles and caches its bytecode: not counted
            run("reference", reference_command)
            for side in seconds:
                seconds[side].clear()
                cpu_seconds[side].clear()
            benchmark.pedantic(run, args=("simbench", simbench_command),
                               setup=lambda: run("reference", reference_command), rounds=COLD_ROUNDS, iterations=1)
    simbench_packs = json.loads(outputs["simbench"].splitlines()[-1])["packs"]
    assert simbench_packs == json.loads(outputs["reference"])["packs"]
    fastest = min(seconds["reference"])
    benchmark.extra_info.update(
        packs=simbench_packs, reference_seconds=fastest, target_ratio=COLD_TARGET_RATIO,
        ratio_needs_quiet_machine=True,  # two process start-ups: load moves them unevenly (see the docstring)
        ratio=min(seconds["simbench"]) / fastest,
        cpu_ratio=min(cpu_seconds["simbench"]) / min(cpu_seconds["reference"]),
        median_round_ratio=statistics.median(own / other for own, other in zip(seconds["simbench"],
                                                                                seconds["reference"])))
