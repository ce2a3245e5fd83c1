"""The GPU check: on one NVIDIA H100/H200, in under five minutes, the primitive-shape timing grid of an encoder
and a decoder and `measure` of two bundled scenarios with the profiles fitted on them, in one folder with one
table (`simbench gpu-check --out DIR`, which `run_gpu_check` runs; see docs/gpu-check.md).

    >>> [check.scenario for check in GPU_CHECKS]
    ['wiki512', 'llama8b-sft-8k']

Each check times every attention implementation its packs can run (row, dense-mask, block-mask, varlen) beside
padding and un-padding, so the table answers the questions the cost model prices: whole-row packs against padded
rows of the same shape, a dense mask against none, varlen kernels against both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from simbench.calibrate.calibration_runs import calibrate_grid
from simbench.calibrate.measure_run import measure_strategies
from simbench.calibrate.run_setup import Progress, import_torch
from simbench.errors import InputError


@dataclass(frozen=True)
class GpuCheck:
    """One scenario measured with the profile a grid of its model fitted."""

    scenario: str
    model: str  # the model preset the grid times
    grid_layers: int  # layers of the grid's slice and of the measured model
    strategies: tuple[str, ...]
    measure_seconds: float  # the measurement's time budget (`measure --seconds`)


# Sized for about four minutes on one H200 (grids ~25 s and ~35 s at the h200 profile's prices, each measurement
# its budget), start-up and packing included.
GPU_CHECKS = (
    GpuCheck("wiki512", "bert-large", 24, ("none", "sort", "lpfhp:max", "lpfhp:max:attention=dense-mask",
                                           "lpfhp:max:attention=block-mask", "packed-varlen:lpfhp:max", "unpad"), 60.0),
    GpuCheck("llama8b-sft-8k", "llama-3.1-8b", 4, ("none", "token-budget", "lpfhp:max",
                                                    "lpfhp:max:attention=dense-mask", "lpfhp:max:attention=block-mask",
                                                    "packed-varlen:lpfhp:max"), 60.0),
)
TABLE_COLUMNS = ["scenario", "strategy", "mode", "measured_speedup", "predicted_speedup", "error",
                 "measured_step_seconds", "predicted_step_seconds", "speedup_noise", "run_valid", "problem"]


def gpu_check_markdown(table) -> str:
    """The check's table as Markdown: speed-ups to 3 decimals, errors and noise in %, steps in ms."""
    lines = ["| scenario | strategy | mode | measured | predicted | error | step ms measured | step ms predicted "
             "| noise |", "|---|---|---|---|---|---|---|---|---|"]
    for row in table.itertuples():
        if row.problem and str(row.problem).startswith("not measured"):
            lines.append(f"| {row.scenario} | {row.strategy} | | {row.problem} | | | | | |")
            continue
        lines.append(f"| {row.scenario} | {row.strategy} | {row.mode} | {row.measured_speedup:.3f} | "
                     f"{row.predicted_speedup:.3f} | {row.error:+.1%} | {1e3 * row.measured_step_seconds:.1f} | "
                     f"{1e3 * row.predicted_step_seconds:.1f} | {row.speedup_noise:.1%} |")
    return "\n".join(lines) + "\n"


def run_gpu_check(out: Path, *, checks=None, force: bool = False,
                  progress: Callable[[str], Progress] = lambda stage: (lambda total: None),
                  note: Callable[[str], None] = lambda message: None):
    """`simbench gpu-check`: time each check's grid (`GPU_CHECKS` unless `checks` given; `calibrate
    --grid`: `grid-MODEL.yaml` and its `.grid.jsonl`) and measure its scenario with that profile
    (`measure-SCENARIO/`), all under `out`, then write `table.csv` and `table.md`: every strategy's measured and
    predicted speed-up over padding. Refuses, before any work, a machine without CUDA. Returns the table."""
    torch = import_torch()
    if not torch.cuda.is_available():
        raise InputError("gpu-check times an NVIDIA GPU: this torch build sees no CUDA device")
    import pandas as pd

    from simbench.costmodels.model import get_model

    checks = GPU_CHECKS if checks is None else checks
    out.mkdir(parents=True, exist_ok=True)
    tables = []
    for check in checks:
        profile_path = out / f"grid-{check.model}.yaml"
        note(f"{check.scenario}: timing the grid of {check.grid_layers} {check.model} layers")
        calibrate_grid(profile_path, model=get_model(check.model), layers=check.grid_layers, device="cuda",
                       quick=True, force=force, progress=progress(f"grid {check.model}"))
        note(f"{check.scenario}: measuring {len(check.strategies)} strategies with {profile_path.name}")
        run = measure_strategies(check.scenario, output_dir=out / f"measure-{check.scenario}", device="cuda",
                                 layers=check.grid_layers, seconds=check.measure_seconds, profile_path=profile_path,
                                 strategies=list(check.strategies), progress=progress(f"measure {check.scenario}"),
                                 note=note)
        tables.append(run.table.assign(scenario=check.scenario))
    table = pd.concat(tables, ignore_index=True)[TABLE_COLUMNS]
    table.to_csv(out / "table.csv", index=False)
    (out / "table.md").write_text(gpu_check_markdown(table))
    return table

