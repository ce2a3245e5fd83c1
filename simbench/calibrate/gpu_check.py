"""The GPU check: on one NVIDIA H100/H200, in under five minutes, the primitive-shape timing grid of an encoder
and a decoder and `measure` of two bundled scenarios with the profiles fitted on them, in one folder with one
table (`simbench gpu-check --out DIR`, which `runs.run_gpu_check` runs; see docs/gpu-check.md).

    >>> [check.scenario for check in GPU_CHECKS]
    ['wiki512', 'llama8b-sft-8k']

Each check times every attention implementation its packs can run (row, dense-mask, block-mask, varlen) beside
padding and un-padding, so the table answers the questions the cost model prices: whole-row packs against padded
rows of the same shape, a dense mask against none, varlen kernels against both.
"""

from __future__ import annotations

from dataclasses import dataclass


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
