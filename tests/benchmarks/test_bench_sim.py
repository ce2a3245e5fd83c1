"""Speed of the simulator: one plan on 2048 devices x 200 steps (target 2 s), the full sweep (target 60 s).

Wikipedia 512 lengths, bert-large on the A100 preset, batch 32; `simulate` always adds the padding
reference, so "one plan" times that plan plus padding.
"""

import pytest

from simbench.costmodels.transformer import TransformerCostModel
from simbench.histogram import load_histogram
from simbench.sim.plans import parse_plans
from simbench.sim.simulate import simulate

DEVICE_COUNTS = [2**power for power in range(12)]


@pytest.fixture(scope="module")
def setting():
    return load_histogram("wikipedia_512"), TransformerCostModel("bert-large", "a100")


@pytest.mark.parametrize("plan", ["spfhp:3", "unpad", "unpad-exchange", "vts-bucketed"])
def test_one_plan_2048_devices_200_steps(benchmark, setting, plan):
    histogram, cost_model = setting
    packings = simulate(histogram, [plan], [1], cost_model, batch_size=32, steps=1, seed=0).packings
    result = benchmark.pedantic(simulate, args=(histogram, [plan], [2048], cost_model),
                                kwargs=dict(batch_size=32, steps=200, seed=0, packings=packings),
                                rounds=3, iterations=1)
    # At 2048 devices `auto` never runs SimPy: independent devices by order statistics, coupled ones vectorized.
    assert set(result.summary["engine"]) <= {"order-statistics", "vectorized"}


def test_full_sweep_every_plan_12_device_counts(benchmark, setting):
    """Every plan of `all` (as `simbench simulate wikipedia_512 -s all`), each packer run once."""
    histogram, cost_model = setting
    plans = parse_plans(["all"])
    result = benchmark.pedantic(simulate, args=(histogram, plans, DEVICE_COUNTS, cost_model),
                                kwargs=dict(batch_size=32, steps=200, seed=0), rounds=1, iterations=1)
    assert len(result.summary) == len(plans) * len(DEVICE_COUNTS)
