"""simbench as a library, for notebooks and training scripts: every command's work without the command line.

    >>> import simbench
    >>> squad = simbench.load_histogram("squad_1_1_384")
    >>> simbench.pack(squad, "spfhp", max_depth=3).packs_total
    40711

Results are plain dataclasses (`LengthHistogram`, `Packing`, `LPBound`, `SimulationResult`,
`ExperimentResult`, `Recommendation`) whose tables are pandas DataFrames. A histogram argument may be a
`LengthHistogram`, a CSV/JSON path or a bundled name; a scenario argument a `Scenario`, a YAML path or a
bundled name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from simbench.errors import InputError
from simbench.histogram import LengthHistogram, load_histogram
from simbench.validation import (DEFAULT_BATCH_SIZE, DEFAULT_COST_MODEL, DEFAULT_ENGINE, DEFAULT_GPUS_PER_REPLICA,
                                 DEFAULT_HARDWARE, DEFAULT_MODEL, DEFAULT_SEED, DEFAULT_SHAPES, DEFAULT_STEPS,
                                 DEFAULT_TRAINING_STEPS)

if TYPE_CHECKING:
    from simbench.costmodels import HardwareProfile
    from simbench.experiment import ExperimentResult
    from simbench.report.recommend import Recommendation
    from simbench.scenario import Scenario
    from simbench.sim.plans import ExecutionPlan
    from simbench.sim.results import SimulationResult
    from simbench.strategies.lp_bound import LPBound
    from simbench.strategies.packing import Packing

HistogramLike = LengthHistogram | str | Path


def pack(histogram: HistogramLike, strategy: str, max_depth: int | None = None, *, max_length: int | None = None,
         seed: int = 0, batch_size: int = 32, time_limit_seconds: float | None = None) -> Packing:
    """Pack with a registered strategy (`simbench list`), as `simbench pack` does.

    `max_length` defaults to the histogram's; `seed`, `batch_size` and `time_limit_seconds` (optimal's search,
    `PackOptions`' default when None) reach the strategies that use them.
    """
    from simbench.strategies import PackOptions, get_strategy

    lengths = _histogram(histogram)
    limits = {} if time_limit_seconds is None else {"time_limit_seconds": time_limit_seconds}
    return get_strategy(strategy)(lengths, max_length, max_depth,
                                  PackOptions(seed=seed, batch_size=batch_size, **limits))


def bound(histogram: HistogramLike, max_depth: int | None = None, *, max_length: int | None = None) -> LPBound:
    """The certified LP lower bound on packs (`.lower_bound_packs`): the fewest any packer can reach."""
    from simbench.strategies.lp_bound import lp_lower_bound
    from simbench.validation import check_pack_limits

    lengths = _histogram(histogram)
    return lp_lower_bound(lengths, check_pack_limits(lengths, max_length, max_depth), max_depth)


def simulate(histogram: HistogramLike, strategies: str | Sequence[str | ExecutionPlan], devices: Sequence[int], *,
             model: str | dict[str, int] = DEFAULT_MODEL, hardware: str | Path | HardwareProfile = DEFAULT_HARDWARE,
             batch_size: int = DEFAULT_BATCH_SIZE, steps: int = DEFAULT_STEPS, seed: int = DEFAULT_SEED,
             engine: str = DEFAULT_ENGINE, shapes: str = DEFAULT_SHAPES, training_steps: int = DEFAULT_TRAINING_STEPS,
             hardware_overrides: dict | None = None, cost_model: str = DEFAULT_COST_MODEL,
             gpus_per_replica: int = DEFAULT_GPUS_PER_REPLICA, baseline: str | ExecutionPlan | None = None,
             memory: str | None = None) -> SimulationResult:
    """Simulate data-parallel training of each strategy on each device count, as `simbench simulate` does.

    `strategies` are plan names as the command takes them (`spfhp:3`, `unpad`, `packed-varlen:lpfhp:max`,
    `all`). `baseline` is the plan every speed-up is over, written the same way (None: a scenario's default
    `baseline`, `simbench.sim.plans.DEFAULT_BASELINE`); it and padding (`none`) are always simulated. The
    result's `summary` DataFrame has one row per (strategy, devices) with `speedup` over the baseline at the
    same device count and `reference` naming it (VTS plans: over their padded pipeline). `shapes` (new, seen, auto)
    and `training_steps` say which steps pay a new batch shape's first-sight cost (`simbench.sim.shapes`);
    `hardware_overrides` replace profile fields and `cost_model` names the registry's cost model, as in a scenario.
    Memory is checked as `simbench run` checks it (`memory`: refuse, recompute or auto as a scenario's `memory`
    says; None: a scenario's default, `simbench.sim.memory_fit.DEFAULT_MEMORY_POLICY`):
    InputError where no strategy fits; `memory_verdict` in the summary (`does not fit`: not to be ranked) and the
    check's table as the result's `memory`.
    """
    from simbench.resolved import Run

    plans = [strategies] if isinstance(strategies, str) else list(strategies)
    run = Run.from_options(_histogram(histogram), plans, list(devices), model=model, hardware=hardware,
                           overrides=hardware_overrides, cost_model=cost_model, gpus_per_replica=gpus_per_replica,
                           batch_size=batch_size, steps=steps, seed=seed, engine=engine, shapes=shapes,
                           training_steps=training_steps, baseline=baseline, memory=memory)
    return run.with_memory(run.simulate())


def load_scenario(scenario: str | Path, *, name: str | None = None, seed: int | None = None) -> Scenario:
    """A validated scenario from a YAML file or a bundled name (`wiki512`); `name` picks one of a
    file's several scenarios, `seed` replaces the scenario's."""
    from simbench.checked import check_scenario
    from simbench.scenario import load_scenarios

    scenarios = load_scenarios(scenario, seed=seed)
    names = [each.name for each in scenarios]
    if name is None and len(scenarios) == 1:
        name = names[0]
    if name in names:
        found = scenarios[names.index(name)]
        check_scenario(found)  # each key against the others, as a run checks it
        return found
    wanted = f"no scenario named {name!r}" if name is not None else f"{len(scenarios)} scenarios"
    raise InputError(f"{wanted} in the file; pass name= one of {', '.join(names)}", source=str(scenario))


def run_scenario(scenario: Scenario | str | Path, *, name: str | None = None, quick: bool = False,
                 seed: int | None = None, out: str | Path | None = None,
                 baseline: str | None = None) -> ExperimentResult:
    """Everything `simbench run` computes for one scenario: the report's tables as DataFrames.

    `quick` runs the --quick variant (few steps and device counts); `out`, when given, also writes
    the report folder (tables, summary.md, plots) there, atomically. `baseline` (a plan as a scenario's
    `strategies` write it) replaces the scenario's `baseline`, the plan every speed-up is over; None keeps it.
    """
    from simbench.experiment import run_experiment

    if isinstance(scenario, str | Path):
        scenario = load_scenario(scenario, name=name, seed=seed)
    elif seed is not None:
        scenario = type(scenario).model_validate({**scenario.model_dump(), "seed": seed})
    if baseline is not None:
        scenario = type(scenario).model_validate({**scenario.model_dump(), "baseline": baseline})
    if quick:
        scenario = scenario.quickened()
    histogram = scenario.dataset.load()
    tables = run_experiment(scenario, histogram)
    if out is not None:
        from simbench.report.folder import write_report

        write_report(Path(out), scenario, histogram, tables)
    return tables


def recommend(source: str | Path, stack: str, *, gpus: int | None = None, strategy: str | None = None,
              quick: bool = False, seed: int | None = None) -> Recommendation:
    """A run's chosen strategy in a trainer's own settings, as `simbench recommend` writes it.

    `source` is a report folder (read as it was run) or a scenario (run here; `quick`, `seed` as in
    `run_scenario`); `stack` one of trl, hf, axolotl, megatron; `gpus` a GPU count the run simulated (default
    the Decision block's, the smallest), `strategy` one of its labels (default the one the Decision block names
    to use there). The result's `settings` are the
    stack's options, `snippet` the text to paste, `plan.tokens_per_s_per_gpu` the simulated figure.
    """
    from simbench.report.recommend import recommend as recommend_run

    return recommend_run(source, stack, gpus=gpus, strategy=strategy, quick=quick, seed=seed)


def _histogram(histogram: HistogramLike) -> LengthHistogram:
    return histogram if isinstance(histogram, LengthHistogram) else load_histogram(histogram)


__all__ = ["LengthHistogram", "bound", "load_histogram", "load_scenario", "pack", "recommend", "run_scenario",
           "simulate"]
