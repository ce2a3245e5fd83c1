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
    assert sum(units) == 3 * len(devices)  # (none, unpad, spfhp:3) x 3 device counts
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
    assert events.index(("simulate", None)) == 5  # one unit per plan packed (padding's too) before simulating
