"""`simbench gpu-check`: refused in one line without a GPU; on one, a grid and a measurement per check, one table."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
from typer.testing import CliRunner

from simbench.cli import app

torch = pytest.importorskip("torch")


def test_gpu_check_refuses_in_one_line_without_cuda(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(app, ["gpu-check", "--out", str(tmp_path / "check")])
    assert result.exit_code != 0
    message = str(result.exception) if result.exception is not None else result.output
    assert "no CUDA device" in message and len(message.strip().splitlines()) == 1
    assert not (tmp_path / "check").exists()  # refused before any work


def test_gpu_check_grids_then_measures_each_scenario_with_its_grids_profile(tmp_path, monkeypatch):
    from simbench.calibrate import gpu_check

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def grid(output, **settings):
        calls.append(("grid", output.name, settings["layers"], settings["device"]))

    def measure(source, **settings):
        calls.append(("measure", source, settings["profile_path"].name, settings["layers"], settings["seconds"]))
        rows = [{"strategy": name, "mode": "padded", "measured_speedup": 1.0, "predicted_speedup": 1.1, "error": 0.1,
                 "measured_step_seconds": 0.1, "predicted_step_seconds": 0.09, "speedup_noise": 0.01,
                 "run_valid": True, "problem": ""} for name in settings["strategies"]]
        return SimpleNamespace(table=pd.DataFrame(rows))

    monkeypatch.setattr(gpu_check, "calibrate_grid", grid)
    monkeypatch.setattr(gpu_check, "measure_strategies", measure)
    table = gpu_check.run_gpu_check(tmp_path)
    for check in gpu_check.GPU_CHECKS:
        profile = f"grid-{check.model}.yaml"
        assert ("grid", profile, check.grid_layers, "cuda") in calls
        assert ("measure", check.scenario, profile, check.grid_layers, check.measure_seconds) in calls
        assert list(table.loc[table["scenario"] == check.scenario, "strategy"]) == list(check.strategies)
        # Every attention implementation a pack can run is timed beside padding.
        assert {"none", "lpfhp:max", "lpfhp:max:attention=dense-mask", "lpfhp:max:attention=block-mask",
                "packed-varlen:lpfhp:max"} <= set(check.strategies)
    assert pd.read_csv(tmp_path / "table.csv").shape[0] == len(table)
    markdown = (tmp_path / "table.md").read_text()
    assert markdown.count("\n") == 2 + len(table) and "+10.0%" in markdown
