"""Progress: the work a run reports adds up to the total it announces, in whole units, and it advances
while a strategy is packed and simulated, not only once each strategy is done."""

import pytest

from simbench.costmodels.linear import LinearCostModel
from simbench import experiment
from simbench.experiment import progress_total, run_experiment
from simbench.histogram import load_histogram
from simbench.scenario import Scenario
from simbench.sim import simulate as simulate_module
from simbench.sim.simulate import simulate

SQUAD = load_histogram("squad_1_1_384")


def recorder():
    events = []
    return events, (lambda units: events.append(("progress", units))), (lambda text: events.append(("stage", text)))


@pytest.mark.parametrize("rows_per_chunk", [simulate_module.ROWS_PER_CHUNK, 4 * 8 * 3])
def test_simulate_tells_whole_units_within_each_strategy(monkeypatch, rows_per_chunk):
    # 4 devices x 8 sequences x 3 steps a chunk: 4 chunks of the 10 steps for the largest cluster.
    monkeypatch.setattr(simulate_module, "ROWS_PER_CHUNK", rows_per_chunk)
    events, progress, stage = recorder()
    devices = [1, 2, 4]
    simulate(SQUAD, ["unpad", "spfhp:3"], devices, LinearCostModel(), batch_size=8, steps=10, seed=0,
             progress=progress, stage=stage)
    units = [value for kind, value in events if kind == "progress"]
    assert all(isinstance(unit, int) and unit >= 1 for unit in units)
    assert sum(units) == 4 * len(devices)  # (none, pad-to-longest, unpad, spfhp:3) x 3 device counts
    # Each strategy's simulation ends with a "simulated" line: the bar has moved more than once before it.
    told = 0
    for kind, value in events:
        if kind == "progress":
            told += 1
        elif value.startswith("simulated"):
            assert told >= 2, value
            told = 0
    if rows_per_chunk < simulate_module.ROWS_PER_CHUNK:
        # Several chunks: units are told while batches are priced, before the first cluster is timed.
        assert max(units) < len(devices)


@pytest.mark.parametrize("stragglers", [True, False])
def test_a_run_tells_its_announced_total_and_moves_while_packing(monkeypatch, stragglers):
    scenario = Scenario(name="progress", dataset={"histogram": "squad_1_1_384"}, devices=[1, 2, 256], steps=4,
                        batch_size=4, strategies=["greedy", "spfhp:2", "unpad", "sort"])
    events, progress, stage = recorder()

    def simulate_after_packing(*arguments, **options):
        events.append(("simulate", None))
        return simulate(*arguments, **options)

    monkeypatch.setattr(simulate_module, "simulate", simulate_after_packing)  # the resolved Run calls it
    run_experiment(scenario, progress=progress, stage=stage, stragglers=stragglers)  # a sweep cell fits none
    assert sum(value for kind, value in events if kind == "progress") == progress_total(scenario)
    before = events[:events.index(("simulate", None))]
    # A unit per plan packed (padding's and the baseline's, pad-to-longest, too) first.
    assert [kind for kind, _ in before].count("progress") == 6


def test_a_run_says_each_packing_before_it_simulates():
    scenario = Scenario(name="progress", dataset={"histogram": "squad_1_1_384"}, devices=[1, 8], steps=3,
                        batch_size=4, strategies=["greedy", "spfhp:2", "unpad", "sort"])
    events, progress, stage = recorder()
    run_experiment(scenario, progress=progress, stage=stage)
    lines = [text for kind, text in events if kind == "stage"]
    first_simulated = next(index for index, line in enumerate(lines) if line.startswith("simulated"))
    packed = [line.split(": ")[0].removeprefix("packed ") for line in lines[:first_simulated]
              if line.startswith("packed ")]
    # Every packing as it is made, none left silent (the baseline's, pad-to-longest, gives the report its padding);
    # at equal tokens, those made first to size the steps are said as such.
    assert packed == ["none", "pad-to-longest", "greedy:max", "spfhp:2", "sort"]
    sizing = [line for line in lines[:first_simulated] if line.startswith("sizing the steps: packed ")]
    assert len(sizing) == len(packed)


def test_waiting_on_a_worker_is_told_every_few_seconds_until_it_answers():
    import threading
    import time
    from concurrent.futures import Future, ThreadPoolExecutor

    from simbench.workers import ReportWorkers, result_of

    future, told = Future(), []
    threading.Timer(0.3, future.set_result, args=(42,)).start()
    assert result_of(future, told.append, every=0.05) == 42
    assert len(told) >= 2 and told == sorted(told)  # seconds so far, growing

    def slow(value):
        time.sleep(0.2 if value == "slow" else 0.0)
        return value

    workers = ReportWorkers(processes=0)
    # Without workers each job runs when its turn comes and is handed back at once, before the next runs.
    order = []
    for key, value in workers.completed({"a": (lambda: order.append("ran a") or "a",),
                                         "b": (lambda: order.append("ran b") or "b",)}):
        order.append(f"got {key}")
    assert order == ["ran a", "got a", "ran b", "got b"]
    workers.executor = ThreadPoolExecutor(2)  # a pool: the quickest first, and word while none is done
    waited = []
    with workers:
        results = list(workers.completed({"slow": (slow, "slow"), "quick": (slow, "quick")}, waited.append,
                                         every=0.05))
    assert [key for key, _ in results] == ["quick", "slow"] and waited


def test_writing_a_report_says_each_file_as_it_is_written(tmp_path):
    from simbench.report.folder import write_report

    scenario = Scenario(name="writing", dataset={"histogram": "squad_1_1_384"}, devices=[1, 8], steps=3,
                        strategies=["spfhp:2", "unpad"], outputs={"formats": ["png"]})
    histogram = scenario.dataset.load()
    lines = []
    write_report(tmp_path / "report", scenario, histogram, run_experiment(scenario, histogram), stage=lines.append)
    assert lines[0].startswith("wrote resolved.yaml and 10 tables (packing.csv, scaling.csv")
    assert lines[1] == "wrote decision.csv, summary.md and summary.json"
    plots = [line for line in lines if line.startswith("drew ")]
    assert [line.split()[1] for line in plots] == ["histogram.png", "packing.png", "scaling.png", "gumbel.png",
                                                   "breakdown.png"]  # no timeline: no VTS plan
    assert plots[-1].endswith("(5 of 5 plots)") and lines[-1].startswith("wrote report.html (")


def test_a_runs_workers_start_with_the_modules_of_every_slow_packer():
    from simbench.commands.run import SLOW_PACKER_MODULES
    from simbench.strategies import available_strategies

    slow = {strategy.pack_function.__module__ for strategy in available_strategies().values()
            if strategy.slow and strategy.is_builtin}
    assert slow == set(SLOW_PACKER_MODULES)
