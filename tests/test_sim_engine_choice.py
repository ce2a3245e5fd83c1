"""The engine chooser (`simbench.sim.engines.choice`) answers by the rules docs/engines.md gives, and the
simulation, its work estimate and a sweep's estimate of its cells do what it answers."""

import pytest

from simbench import Scenario
from simbench.costmodels.base import as_cost_model
from simbench.costmodels.linear import LinearCostModel
from simbench.costmodels.noise import with_step_noise
from simbench.histogram import load_histogram
from simbench.sim.engines.choice import (ENGINES, PER_DEVICE_MAX, SIMPY_EVENT_BUDGET, Engine, engine_for,
                                         large_cluster_engine, split_by_size)
from simbench.sim.plans import SimulationSettings, parse_plan
from simbench.sim.simulate import simulate, simulation_rows
from simbench.sweep.cells import LARGE_CLUSTER_SECONDS, SweepCell, cell_seconds

HISTOGRAM = load_histogram("squad_1_1_384")
# Independent devices (unpad, ffd, token-budget, vts), distinct batches (sort, unpad-exchange, group-by-length,
# vts-bucketed) and neither (wlb: a step's devices share its kind of pack).
PLANS = ["unpad", "ffd", "token-budget", "vts", "sort", "unpad-exchange", "group-by-length", "vts-bucketed", "wlb"]
SIZES = [1, 2, 8, 41, 42, 64, 65, 128, 4096, 2**20]


def settings_of(engine: str, steps: int, batch_size: int = 8, seed: int = 0) -> SimulationSettings:
    """The settings `simulate` gives its plans for these arguments."""
    cost_model = with_step_noise(as_cost_model(LinearCostModel()), seed)
    return SimulationSettings(HISTOGRAM, cost_model, batch_size, steps, seed, engine)


def simpy_events(plan, devices: int, settings: SimulationSettings) -> int:
    return devices * settings.steps * plan.source.simpy_events_per_device_step(plan, settings.cost_model,
                                                                               settings.batch_size)


@pytest.mark.parametrize("steps", [1, 20, 200])
@pytest.mark.parametrize("name", PLANS)
def test_auto_follows_the_documented_rules(name, steps):
    plan, settings = parse_plan(name), settings_of("auto", steps)
    for size in SIZES:
        chosen = engine_for(plan, size, settings)
        # SimPy only within its event budget; below it, whatever simulates every device runs SimPy.
        assert (chosen is Engine.SIMPY) == (chosen.simulates_every_device
                                            and simpy_events(plan, size, settings) <= SIMPY_EVENT_BUDGET)
        # Order statistics only for independent devices above the per-device limit.
        assert (chosen is Engine.ORDER_STATISTICS) == (size > PER_DEVICE_MAX and plan.independent_devices)
        # Distinct batches only for coupled devices whose batches repeat, above the per-device limit.
        assert (chosen is Engine.DISTINCT_BATCHES) == (size > PER_DEVICE_MAX and not plan.independent_devices
                                                       and plan.source.prices_distinct_batches(plan))
        if size <= PER_DEVICE_MAX:
            assert chosen.simulates_every_device


@pytest.mark.parametrize("name", PLANS)
def test_simpy_at_some_size_is_simpy_at_every_smaller_one(name):
    plan, settings = parse_plan(name), settings_of("auto", 20)
    simpy = [engine_for(plan, size, settings) is Engine.SIMPY for size in range(1, PER_DEVICE_MAX + 1)]
    assert simpy == sorted(simpy, reverse=True)


@pytest.mark.parametrize("name", PLANS)
def test_forced_engines_are_honoured(name):
    plan = parse_plan(name)
    for size in SIZES:
        assert engine_for(plan, size, settings_of("simpy", 20)) is Engine.SIMPY
        assert engine_for(plan, size, settings_of("vectorized", 20)) is Engine.VECTORIZED
        # Forced order statistics: every size takes the plan's large-cluster engine, never SimPy.
        forced = engine_for(plan, size, settings_of("order-statistics", 1))
        assert forced is large_cluster_engine(plan) and forced is not Engine.SIMPY
        assert (forced is Engine.ORDER_STATISTICS) == plan.independent_devices


def test_split_by_size_keeps_every_size_once_in_order():
    for engine in ENGINES:
        small, large = split_by_size(SIZES, engine)
        assert small + large == SIZES
        assert all(size <= PER_DEVICE_MAX for size in small) or engine in ("simpy", "vectorized")


@pytest.mark.parametrize("engine", ENGINES)
def test_simulate_runs_the_engine_chosen_for_each_row(engine):
    steps, devices = 20, [1, 8, 41, 42, 64, 65, 128]
    result = simulate(HISTOGRAM, ["sort", "ffd", "wlb", "unpad", "unpad-exchange", "group-by-length"], devices,
                      LinearCostModel(), batch_size=8, steps=steps, seed=0, engine=engine)
    settings, chosen = settings_of(engine, steps), set()
    for row in result.summary.itertuples():
        answer = engine_for(parse_plan(row.strategy), row.devices, settings)
        chosen.add(answer)
        assert row.engine == answer.column, (row.strategy, row.devices)
    if engine == "auto":
        assert chosen == set(Engine)  # every engine ran somewhere


@pytest.mark.parametrize("engine", ["auto", "order-statistics", "vectorized"])
@pytest.mark.parametrize("name", PLANS)
def test_the_work_estimate_counts_every_device_where_the_chooser_simulates_every_device(name, engine):
    plan, largest, steps = parse_plan(name), 2**20, 3
    extra_rows = (simulation_rows([plan], HISTOGRAM, [1, largest], 8, steps, engine)
                  - simulation_rows([], HISTOGRAM, [1, largest], 8, steps, engine))
    every_device = steps * plan.source.rows_per_device_step(plan, HISTOGRAM, 8) * largest
    if engine_for(plan, largest, settings_of(engine, steps)).simulates_every_device:
        assert extra_rows >= every_device
    else:
        assert extra_rows < every_device / 100


def test_a_sweep_cell_costs_a_large_cluster_for_each_size_the_chooser_sends_past_the_per_device_engines():
    def cell(devices):
        scenario = Scenario(name="cell", dataset={"histogram": "squad_1_1_384"}, strategies=["unpad", "ffd"],
                            devices=devices, steps=10, outputs={"lp_bounds": False})
        return SweepCell(0, {}, scenario)

    one = cell_seconds(cell([1]))
    per_size = cell_seconds(cell([1, 2])) - one  # the rows of one more size; no large cluster yet
    for devices in ([1, PER_DEVICE_MAX], [1, PER_DEVICE_MAX, PER_DEVICE_MAX + 1, 2**20]):
        scenario = cell(devices).scenario
        past = split_by_size(sorted(scenario.replica_devices), "auto")[1]
        settings = settings_of("auto", scenario.steps)
        assert all(not engine_for(spec.plan(), size, settings).simulates_every_device
                   for spec in scenario.strategies for size in past)
        assert cell_seconds(cell(devices)) == pytest.approx(
            one + (len(devices) - 1) * per_size + LARGE_CLUSTER_SECONDS * len(scenario.strategies) * len(past))
        assert len(past) == sum(size > PER_DEVICE_MAX for size in devices)
