"""`simbench gpu-check`: the timing grid and `measure` of two bundled scenarios on one GPU, in one folder and table.

torch is an optional extra, imported inside the library call, so the rest of the CLI works without it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from simbench.commands.common import FORCE_HELP, command, print_json_lines, say, stage_lines, step_lines


def gpu_check(
    out: Path = typer.Option(..., "--out", help="folder for the grids, the measurements and table.csv / table.md"),
    as_json: bool = typer.Option(False, "--json", help="JSON lines: one JSON object per table row"),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """On one NVIDIA H100/H200, in under five minutes: `calibrate --grid` of BERT-large and of 4 Llama-3.1-8B
    layers, then `measure` of wiki512 and llama8b-sft-8k with those profiles, every attention implementation of
    their packs beside padding; refuses in one line where torch sees no CUDA device."""
    from simbench.calibrate.gpu_check import gpu_check_markdown
    from simbench.calibrate.gpu_check import run_gpu_check

    stage = stage_lines() or say  # lines in a terminal too: minutes of timing, no bar to show them
    table = run_gpu_check(out, force=force, note=say, progress=lambda what: step_lines(stage, what))
    if as_json:
        print_json_lines(table.to_dict(orient="records"))
    else:
        print(gpu_check_markdown(table), end="")
    say(f"wrote {out}/table.csv and table.md, the grids (grid-*.yaml, *.grid.jsonl) and measure-*/ beside them")


def register(app: typer.Typer) -> None:
    app.command("gpu-check")(command(gpu_check))
