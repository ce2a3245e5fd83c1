"""summary.json holds only what any JSON reader takes: a profile's `.inf` (no limit) as "inf", a figure not
computed as null; written and read back, no traceback after the simulation."""

import json
import math

from simbench.experiment import run_experiment
from simbench.report.folder import json_ready, write_report
from simbench.scenario import Scenario


def _strict_loads(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_an_infinite_override_is_written_as_json_and_reads_back(tmp_path):
    scenario = Scenario(name="inf", dataset={"histogram": "squad_1_1_384"}, strategies=["unpad"], devices=[1, 8],
                        steps=3, hardware={"profile": "a100", "overrides": {"allreduce_bytes_per_s": math.inf}},
                        outputs={"lp_bounds": False, "plots": []})
    write_report(tmp_path / "out", scenario, scenario.dataset.load(), run_experiment(scenario, stragglers=False))
    record = _strict_loads((tmp_path / "out" / "summary.json").read_text())
    assert float(record["hardware_overrides"]["allreduce_bytes_per_s"]) == math.inf


def test_json_ready_keeps_finite_values_and_makes_the_others_plain():
    value = {"a": [1.5, math.nan, -math.inf], "b": (math.inf, "x", 2)}
    assert json_ready(value) == {"a": [1.5, None, "-inf"], "b": ["inf", "x", 2]}
    assert _strict_loads(json.dumps(json_ready(value), allow_nan=False))["b"][0] == "inf"
