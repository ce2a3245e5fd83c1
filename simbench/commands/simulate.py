"""`simbench simulate`: throughput and speed-up of each strategy on clusters of 1 to 2048 devices.

Prints a table, or with --json one JSON object per (strategy, devices) line; progress goes to stderr. Memory is
checked as `simbench run` checks a scenario's: each row says whether its strategy fits (`does not fit`: not to
be ranked), stderr says the check in words, and a run where nothing fits is refused.
"""

from __future__ import annotations

import typer

from simbench.commands.common import (QUIET_HELP, command, parse_counts, parse_strategies, print_json_lines,
                                      print_table, progress_bar, say, stage_lines)
from simbench.sim.engines.choice import ENGINES
from simbench.sim.memory_fit import DEFAULT_MEMORY_POLICY
from simbench.validation import (DEFAULT_BATCH_SIZE, DEFAULT_COST_MODEL, DEFAULT_DEVICES, DEFAULT_ENGINE,
                                 DEFAULT_GPUS_PER_REPLICA, DEFAULT_HARDWARE, DEFAULT_MODEL, DEFAULT_SEED,
                                 DEFAULT_SHAPES, DEFAULT_STEPS, DEFAULT_TRAINING_STEPS, SIMULATED_ROWS_MAX)

TABLE_COLUMNS = ("strategy", "devices", "speed-up", "over", "tokens/s", "step ms", "waiting ms", "comm ms", "stall ms", "engine",
                 "memory")
REPLICA_COLUMNS = ("GPUs", "tokens/s per GPU")


def simulate(
    histogram: str = typer.Argument(..., help="histogram CSV/JSON file or bundled name (e.g. wikipedia_512)"),
    strategy: list[str] = typer.Option(..., "--strategy", "-s",
                                       help="NAME[:DEPTH][:attention=row|dense-mask|block-mask|varlen] of a packer, "
                                            "unpad, unpad-exchange(-overlap), packed-varlen[:PACKER][:DEPTH], "
                                            "vts[:stages=S], vts-bucketed[:window=K], or all; repeatable or "
                                            "comma-separated (-s spfhp:3,unpad)"),
    baseline: str = typer.Option(None, "--baseline",
                                 help="the strategy every speed-up is over, written as --strategy takes one, e.g. "
                                      "none (every sequence padded to the longest possible); default: a scenario's "
                                      "default `baseline`, random batches each padded to their own longest"),
    devices: str = typer.Option(",".join(map(str, DEFAULT_DEVICES)), "--devices", "-n",
                                help="comma-separated device counts"),
    model: str = typer.Option(DEFAULT_MODEL, "--model", help="model preset"),
    hardware: str = typer.Option(DEFAULT_HARDWARE, "--hardware", help="hardware preset or profile YAML file"),
    settings: list[str] = typer.Option([], "--set", help="replace a hardware profile field, FIELD=VALUE "
                                       "(repeatable), e.g. unpadded_flops_fraction=1"),
    cost_model_name: str = typer.Option(DEFAULT_COST_MODEL, "--cost-model",
                                        help="what prices a step: a cost model of the registry (`simbench list`)"),
    gpus_per_replica: int = typer.Option(DEFAULT_GPUS_PER_REPLICA, "--gpus-per-replica",
                                         help="GPUs in one data-parallel device (tensor or context parallel): "
                                              "--devices then count replicas, and figures per GPU are added"),
    batch_size: int = typer.Option(DEFAULT_BATCH_SIZE, "--batch-size", help="rows (packs or sequences) per device per step"),
    steps: int = typer.Option(DEFAULT_STEPS, "--steps", help="training steps simulated per (strategy, devices)"),
    seed: int = typer.Option(DEFAULT_SEED, "--seed", help="seed of every random draw"),
    engine: str = typer.Option(DEFAULT_ENGINE, "--engine", help=", ".join(ENGINES)),
    shapes: str = typer.Option(DEFAULT_SHAPES, "--shapes", help="which steps pay a new batch shape's first-sight cost: "
                               "new, seen or auto (the average over --training-steps)"),
    training_steps: int = typer.Option(DEFAULT_TRAINING_STEPS, "--training-steps", help="steps of the training run simulated"),
    memory: str = typer.Option(DEFAULT_MEMORY_POLICY, "--memory",
                               help="a strategy over HBM: refuse (marked `does not fit`), recompute or auto (raise "
                                    "recomputation, and ZeRO, until it fits), as a scenario's `memory`"),
    as_json: bool = typer.Option(False, "--json", help="JSON lines: one JSON object per (strategy, devices)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
    max_rows: int = typer.Option(SIMULATED_ROWS_MAX, "--max-rows",
                                 help="refuse a run that would draw and price more sequences or packs than this"),
) -> None:
    """Simulate data-parallel training steps of each strategy and report speed-ups over the baseline."""
    from rich.console import Console

    from simbench.commands.common import field_values
    from simbench.report.summary import overdraw_warning
    from simbench.resolved import Run
    from simbench.sim.results import with_per_gpu_columns

    run = Run.from_options(histogram, parse_strategies(strategy), parse_counts(devices, "--devices"), model=model,
                           hardware=hardware, overrides=field_values(settings), cost_model=cost_model_name,
                           gpus_per_replica=gpus_per_replica, batch_size=batch_size, steps=steps, seed=seed,
                           engine=engine, shapes=shapes, training_steps=training_steps, baseline=baseline,
                           memory=memory)
    lengths = run.histogram
    console = Console(stderr=True)
    with progress_bar(console, quiet) as progress:
        task = progress.add_task("simulating", total=len(run.all_plans) * len(run.devices))
        result = run.simulate(progress=lambda advance: progress.advance(task, advance),
                              stage=stage_lines(console, quiet), max_rows=max_rows)
    result = run.with_memory(result)
    warning = overdraw_warning(result.summary, lengths.sequences)
    if warning:
        say(warning.replace("**", ""))
    for line in _memory_lines(run, quiet):
        say(f"memory: {line}")
    summary = with_per_gpu_columns(result.summary, run.gpus_per_replica)
    if as_json:
        print_json_lines(summary.to_dict("records"))
    else:
        replicas = run.gpus_per_replica > 1
        columns = (*TABLE_COLUMNS[:2], *REPLICA_COLUMNS, *TABLE_COLUMNS[2:]) if replicas else TABLE_COLUMNS
        print_table(f"{lengths.name}, {model} on {hardware}{_replicas(run.gpus_per_replica)}: speed-up over "
                    f"the row's reference (`over`: the baseline {run.baseline.name}, or VTS's padded pipeline) at the "
                    "same device count",
                    columns, (_row(row, replicas) for row in summary.itertuples()), left=["strategy", "over", "engine", "memory"], no_wrap=True)


def _memory_lines(run, quiet: bool) -> list[str]:
    """The memory check in words, as `validate` says a scenario's (`sim.memory_fit.memory_sentences`); with
    `quiet`, only where memory raised the settings or a strategy does not fit."""
    from simbench.sim.memory_fit import memory_sentences

    if run.memory is None or quiet and not run.memory.raised and not run.memory.does_not_fit():
        return []
    return memory_sentences(run.memory.table(), one_gpu_layout=run.memory.raised, replica_word="device")


def _replicas(gpus_per_replica: int) -> str:
    return f", devices of {gpus_per_replica} GPUs each" if gpus_per_replica > 1 else ""


def _row(row, replicas: bool) -> list[str]:
    milliseconds = [f"{1e3 * getattr(row, name):.1f}" for name in
                    ("step_seconds_mean", "waiting_seconds", "communication_seconds", "stall_seconds")]
    # VTS is measured against its own padded pipeline, not against padding's tokens per second.
    over = row.reference
    per_gpu = [f"{row.gpus:,}", f"{row.tokens_per_s_per_gpu:,.0f}"] if replicas else []
    verdict = getattr(row, "memory_verdict", None)
    return [row.strategy, str(row.devices), *per_gpu, f"{row.speedup:.3f}", over, f"{row.tokens_per_s:,.0f}",
            *milliseconds, row.engine, verdict if isinstance(verdict, str) else "not checked"]


def register(app: typer.Typer) -> None:
    # A packer's depth is written in the strategy's name here, not given as an option.
    app.command()(command(simulate, max_depth="--strategy NAME:DEPTH with a DEPTH of"))
