"""Wall time of the main job, `simbench run scenarios/wiki512.yaml` (target: under 15 s on 2 cores), and
of the decoder-LLM scenarios (target: under 2 minutes each).

The main job runs once in a fresh process, as a user runs it: the import, packing Wikipedia with every
strategy, the LP bounds and the plots in worker processes beside the simulation on 1 to 2048 devices,
the report.
"""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from simbench.cli import app
from simbench.workers import PROCESSES_VARIABLE

WIKI512 = Path(__file__).resolve().parents[2] / "scenarios" / "wiki512.yaml"
WIKI512_TARGET_SECONDS = 15
TARGET_SECONDS = 120


def test_run_wiki512(benchmark, tmp_path):
    out = tmp_path / "wiki512"
    # The workers as a user gets them (the test suite turns them off for its small runs).
    environment = {name: value for name, value in os.environ.items() if name != PROCESSES_VARIABLE}
    command = [sys.executable, "-c", "from simbench.cli import main; main()", "run", str(WIKI512), "--out", str(out)]
    completed = benchmark.pedantic(subprocess.run, args=(command,),
                                   kwargs=dict(capture_output=True, text=True, env=environment), rounds=1, iterations=1)
    assert completed.returncode == 0, completed.stderr
    scaling = pd.read_csv(out / "scaling.csv")
    assert scaling["devices"].max() == 2048
    benchmark.extra_info["target_seconds"] = WIKI512_TARGET_SECONDS


@pytest.mark.parametrize("name", ["llama8b-sft-8k", "llama70b-pretrain-32k"])
def test_run_llm_scenarios(benchmark, tmp_path, name):
    """The decoder-LLM scenarios (target: under 2 minutes each), one round each, as a user runs them."""
    out = tmp_path / name
    scenario = WIKI512.parent / f"{name}.yaml"
    result = benchmark.pedantic(lambda: CliRunner().invoke(app, ["run", str(scenario), "--out", str(out)]),
                                rounds=1, iterations=1)
    assert result.exit_code == 0, result.output
    scaling = pd.read_csv(out / "scaling.csv")
    assert scaling["gpus"].max() == 1024 and (scaling["tokens_per_s_per_gpu"] > 0).all()
    benchmark.extra_info["seconds"] = benchmark.stats.stats.max
    benchmark.extra_info["target_seconds"] = TARGET_SECONDS
