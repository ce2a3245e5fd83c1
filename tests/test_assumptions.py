"""The report's "What could change the answer" table: its first column is the run's own figure at the smallest
cluster, the one the scaling table gives, and each other column changes only its assumption (same batches)."""

from pathlib import Path

import pytest

from simbench.checked import parse_checked_scenarios
from simbench.experiment import run_experiment
from simbench.sim.engines.choice import PER_DEVICE_MAX, draws_shared_with

SCENARIO = """\
name: assumptions
dataset: {histogram: squad_1_1_384}
model: bert-large
hardware: h200
strategies: [sort, spfhp:3, packed-varlen:lpfhp:max]
baseline: none
devices: DEVICES
batch_size: 16
steps: 20
compare_at: as-configured
outputs: {lp_bounds: false, plots: []}
"""


@pytest.mark.parametrize("devices", ["[1, 4, 16]", f"[{2 * PER_DEVICE_MAX}, {8 * PER_DEVICE_MAX}]"])
def test_the_first_column_is_the_scaling_tables_figure(tmp_path: Path, devices):
    (scenario,) = parse_checked_scenarios(SCENARIO.replace("DEVICES", devices), source="s.yaml", base_dir=tmp_path)
    result = run_experiment(scenario, stragglers=False)
    smallest = min(scenario.devices)
    table = result.assumptions.set_index("strategy")
    assert set(table["devices"]) == {smallest}
    scaling = result.scaling[result.scaling["devices"] == smallest].set_index("strategy")["speedup"]
    assert table["as simulated"].to_dict() == pytest.approx(scaling.loc[table.index].to_dict(), rel=1e-12)
    # h200's varlen kernels run below the padded rate: with ideal ones per-document attention gains
    assert table.loc["packed-varlen:lpfhp:max", "ideal kernels"] > table.loc["packed-varlen:lpfhp:max", "as simulated"]
    assert (table.loc["none"].drop("devices") == 1.0).all()  # every column over the same baseline


def test_a_size_shares_draws_with_its_groups_largest():
    small, large = PER_DEVICE_MAX // 2, 4 * PER_DEVICE_MAX
    sizes = [1, small, PER_DEVICE_MAX, 2 * PER_DEVICE_MAX, large]
    assert draws_shared_with(sizes, 1, "auto") == [1, PER_DEVICE_MAX]
    assert draws_shared_with(sizes, 2 * PER_DEVICE_MAX, "auto") == [2 * PER_DEVICE_MAX, large]
    assert draws_shared_with([1, small], 1, "auto") == [1, small]
    # a forced engine simulates every size alike: one group
    assert draws_shared_with(sizes, 1, "vectorized") == [1, large]
    assert draws_shared_with(sizes, small, "order-statistics") == [small, large]
