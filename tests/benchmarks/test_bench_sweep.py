"""Sweep planning and the Dask engine's overhead (targets: a 10,000-cell plan validated in under 5 s, and
a 99,856-cell dry run, from the command line, in under 5 s;
a 200-cell sweep on 2 workers within 1.15x of the serial time halved, i.e. >= 85 % parallel efficiency).

The efficiency case runs the bundled 200-cell sweep twice (minutes): only with SIMBENCH_BENCH_FULL=1;
the short run times a 16-cell sweep both ways instead.
"""

import os
import time

import pytest

from simbench import sweep as sweeps

FULL = os.environ.get("SIMBENCH_BENCH_FULL") == "1"
PLAN = """name: plan
base: {dataset: {histogram: wikipedia_512}, strategies: [spfhp:3, unpad, packed-varlen], steps: 200}
axes:
  model: [bert-base, bert-large]
  batch_size: [16, 32, 48, 64, 96]
  devices: [%s]
"""


def test_ten_thousand_cell_plan(benchmark, tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN % ", ".join(str(count) for count in range(1, 1001)))
    sweep = benchmark.pedantic(sweeps.load_sweep, args=(path,), rounds=1, iterations=1)
    assert len(sweep.cells) == 10_000 and sweep.estimated_seconds(2) > 0
    benchmark.extra_info["target_seconds"] = 5


def test_dry_run_of_a_hundred_thousand_cells(benchmark, tmp_path):
    """Two axes of 316 values that are each checked on their own (seeds and batch sizes), as the command
    runs it: read, validate every cell, estimate, print."""
    from typer.testing import CliRunner

    from simbench.cli import app

    path = tmp_path / "large.yaml"
    path.write_text(f"""name: large
base: {{dataset: {{histogram: squad_1_1_384}}, strategies: [spfhp:3, unpad], steps: 4, devices: [1, 8]}}
axes:
  seed: {list(range(316))}
  batch_size: {list(range(1, 317))}
""")
    result = benchmark.pedantic(CliRunner().invoke, args=(app, ["sweep", str(path), "--dry-run"]), rounds=1,
                                iterations=1)
    assert result.exit_code == 0 and "99,856 cells" in result.output, result.output
    benchmark.extra_info["target_seconds"] = 5


def _tree_cpu_seconds() -> float:
    """CPU seconds of this process and every process under it (the local cluster's workers)."""
    import psutil

    me = psutil.Process()
    own = me.cpu_times()
    seconds = own.user + own.system + own.children_user + own.children_system
    for child in me.children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # gone between listing and reading
            continue
        seconds += times.user + times.system
    return seconds


def test_parallel_efficiency_on_two_workers(benchmark, tmp_path, monkeypatch):
    import distributed

    sweep = sweeps.load_sweep("context-vs-scale")
    if not FULL:
        sweep = sweeps.Sweep(sweep.name, sweep.axes, sweep.cells[::25][:8] + sweep.cells[100::25][:8],
                             sweep.report_axes, sweep.source)
    # A first cell on its own pays the imports, for neither run to pay them (forked workers inherit them).
    sweeps.run_sweep(sweeps.Sweep(sweep.name, sweep.axes, sweep.cells[:1], sweep.report_axes, sweep.source),
                     tmp_path / "warm-up", workers=0)
    load_before = os.getloadavg()[0]
    cpu, start = _tree_cpu_seconds(), time.perf_counter()
    sweeps.run_sweep(sweep, tmp_path / "serial", workers=0)
    serial, serial_cpu = time.perf_counter() - start, _tree_cpu_seconds() - cpu

    # The workers' CPU is read just before the cluster closes, while they are still there to ask.
    at_close = {}
    close = distributed.Client.close

    def close_after_reading_cpu(client, *args, **kwargs):
        at_close["cpu"] = _tree_cpu_seconds()
        return close(client, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "close", close_after_reading_cpu)

    def on_two_workers():
        folder = tmp_path / f"dask-{time.perf_counter_ns()}"
        begin = time.perf_counter()
        sweeps.run_sweep(sweep, folder, workers=2)
        return time.perf_counter() - begin

    cpu = _tree_cpu_seconds()
    parallel = benchmark.pedantic(on_two_workers, rounds=1, iterations=1)
    benchmark.extra_info.update({"cells": len(sweep.cells), "serial_seconds": serial, "parallel_seconds": parallel,
                                 "serial_cpu_seconds": serial_cpu, "parallel_cpu_seconds": at_close["cpu"] - cpu,
                                 "efficiency": serial / (2 * parallel), "load_before": load_before,
                                 "load_after": os.getloadavg()[0], "measured": "parallel efficiency",
                                 "measured_value": serial / (2 * parallel)})
    # The 85 % target holds for the bundled 200 cells; 16 cells are too few to hide the cluster's start.
    if FULL:
        benchmark.extra_info["target_at_least"] = 0.85
    assert parallel > 0 and at_close["cpu"] > cpu
