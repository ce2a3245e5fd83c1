"""`simbench recommend`: a run's chosen strategy as TRL, HF Trainer, axolotl or Megatron-LM settings.

The snippet (or with --json one JSON object) is the only thing on stdout; running a scenario says so on stderr.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from simbench.commands.common import command, say


def recommend(
    source: str = typer.Argument(..., metavar="SCENARIO_OR_REPORT",
                                 help="a report folder (fast: read as it was run) or a scenario YAML file or "
                                      "bundled name (run here)"),
    stack: str = typer.Option(..., "--for", help="the trainer: trl, hf (the Hugging Face Trainer), axolotl, megatron"),
    gpus: int = typer.Option(None, "--gpus", min=1,
                             help="a GPU count the run simulated [default: the Decision block's, the smallest]"),
    strategy: str = typer.Option(None, "--strategy", help="a strategy of the run (its label in scaling.csv) "
                                                          "[default: the one the Decision block names to use there]"),
    quick: bool = typer.Option(False, "--quick", help="a scenario's --quick variant (few steps and device counts)"),
    seed: int = typer.Option(None, "--seed", min=0, help="replace a scenario's seed"),
    as_json: bool = typer.Option(False, "--json",
                                 help="JSON lines: one object (the settings, figures, notes and snippet)"),
) -> None:
    """Write the strategy a run chose in a trainer's own settings, with the expected tokens/s per GPU."""
    from simbench.report.recommend import recommend as recommend_run

    if not Path(source).is_dir():
        say(f"running {source}{' (--quick)' if quick else ''} to recommend from it; a report folder of "
            "`simbench run` is read instead, at once")
    recommendation = recommend_run(source, stack, gpus=gpus, strategy=strategy, quick=quick, seed=seed)
    if as_json:
        print(json.dumps(recommendation.to_json()))
    else:
        print(recommendation.snippet, end="")


def register(app: typer.Typer) -> None:
    app.command("recommend")(command(recommend, stack="--for"))
