"""The Python API gives what the commands give, without the command line, and `import simbench` stays light."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import simbench
from simbench.cli import app
from simbench.errors import InputError

RUNNER = CliRunner()
SMALL_SCENARIO = """name: small
dataset: {histogram: squad_1_1_384}
strategies: [{name: spfhp, max_depth: 3}, unpad]
devices: [1, 8]
steps: 5
seed: 2
outputs: {plots: [scaling], formats: [png]}
"""


def test_importing_simbench_loads_nothing_heavy():
    code = "import sys, simbench; print(sorted({'numpy', 'pandas', 'scipy', 'simbench.api'} & set(sys.modules)))"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == "[]"


def test_pack_and_bound_match_the_pack_command(squad):
    packing = simbench.pack("squad_1_1_384", "spfhp", max_depth=3)
    result = RUNNER.invoke(app, ["pack", "squad_1_1_384", "--strategy", "spfhp", "--max-depth", "3", "--json",
                                 "--bound"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout.splitlines()[0])
    assert (packing.packs_total, packing.efficiency) == (record["packs"], record["efficiency"])
    assert simbench.bound(squad, max_depth=3).lower_bound_packs == record["lower_bound_packs"]
    assert np.array_equal(simbench.pack(squad, "spfhp", 3).rows, packing.rows)


def test_simulate_matches_the_simulate_command():
    result = simbench.simulate("squad_1_1_384", ["spfhp:2", "unpad"], devices=[1, 4], batch_size=4, steps=5)
    command = RUNNER.invoke(app, ["simulate", "squad_1_1_384", "-s", "spfhp:2", "-s", "unpad", "--devices", "1,4",
                                  "--batch-size", "4", "--steps", "5", "--json"])
    assert command.exit_code == 0, command.output
    records = [json.loads(line) for line in command.stdout.splitlines()]
    assert result.summary[["strategy", "devices", "speedup"]].to_dict("records") == \
        [{key: record[key] for key in ("strategy", "devices", "speedup")} for record in records]


def test_run_scenario_returns_the_tables_run_writes(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL_SCENARIO)
    command = RUNNER.invoke(app, ["run", str(path), "--out", str(tmp_path / "cli")])
    assert command.exit_code == 0, command.output

    tables = simbench.run_scenario(path, out=tmp_path / "api")
    written = pd.read_csv(tmp_path / "cli" / "scaling.csv")
    assert tables.scaling["speedup"].tolist() == pytest.approx(written["speedup"].tolist(), rel=1e-9)
    assert (tmp_path / "api" / "scaling.csv").read_text() == (tmp_path / "cli" / "scaling.csv").read_text()
    assert tables.packing.set_index("label").loc["spfhp:3", "packs"] == 40711


def test_run_scenario_takes_a_scenario_object_and_replaces_its_seed(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL_SCENARIO)
    scenario = simbench.load_scenario(path)
    reseeded = simbench.run_scenario(scenario, seed=7)
    assert reseeded.scaling.equals(simbench.run_scenario(path, seed=7).scaling)
    assert not reseeded.scaling.equals(simbench.run_scenario(scenario).scaling)


def test_a_file_of_several_scenarios_needs_a_name():
    assert simbench.load_scenario("vts", name="vts-wiki512").name == "vts-wiki512"
    with pytest.raises(InputError, match="2 scenarios in the file; pass name= one of vts-wmt, vts-wiki512"):
        simbench.load_scenario("vts")
    with pytest.raises(InputError, match="no scenario named 'wmt'"):
        simbench.load_scenario("vts", name="wmt")


def test_simulate_without_a_device_count_is_an_input_error():
    with pytest.raises(InputError, match="at least one device count"):
        simbench.simulate("squad_1_1_384", ["unpad"], [])
