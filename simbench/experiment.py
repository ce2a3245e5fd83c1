"""The experiment runner: from a scenario to its results, by simulating every plan, bounding every packing
and fitting the stragglers. `simbench run` writes the results as a report (simbench.report).

    >>> from simbench.experiment import run_experiment
    >>> from simbench.scenario import Scenario
    >>> scenario = Scenario(name="demo", dataset={"histogram": "squad_1_1_384"}, strategies=["sort", "unpad"],
    ...                     devices=[1, 8], steps=5)
    >>> results = run_experiment(scenario)
    >>> results.scaling.query("devices == 8")[["strategy", "speedup"]].round(3).values.tolist()
    [['none', 0.991], ['pad-to-longest', 1.0], ['sort', 1.973], ['unpad', 1.58]]
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from simbench.costmodels.ideal import ideal_speedup
from simbench.sim.stragglers.gumbel import PAPER_DEVICES, PAPER_LOCATION, PAPER_SCALE, expected_min_speedup, \
    extrapolate_cluster_speedups, fit_gumbel
from simbench.histogram import LengthHistogram
from simbench.checked import CheckedScenario
from simbench.resolved import Run, resolve
from simbench.scenario import Scenario
from simbench.sim.plans import with_reference
from simbench.sim.results import BREAKDOWN_COLUMNS, SEED_SPREAD_COLUMNS, VTS_REFERENCE, across_seeds, with_per_gpu_columns
from simbench.sim.simulate import pack_plans
from simbench.strategies.evaluation import bound_depth, is_bounded
from simbench.strategies.lp_bound import lp_lower_bound, stored_lp_lower_bound
from simbench.strategies.packing import Packing
from simbench.workers import ReportWorkers, result_of

Progress = Callable[[int], None]
PAPER_FIT_LABEL = f"paper's {PAPER_DEVICES}-GPU MLPerf fit"
# Relative spread below which step times count as constant (fixed shapes): nothing to fit.
CONSTANT_SPREAD = 1e-6
# Samples kept in latency.csv for the plot; the fit uses all of them.
LATENCY_ROWS_KEPT = 20_000


@dataclass(frozen=True, eq=False)
class ExperimentResult:
    """Everything a scenario's run measured, as tables (a report writes one CSV per field)."""

    packing: pd.DataFrame  # one row per packer plan: Packing.metrics() plus its LP bound
    scaling: pd.DataFrame  # one row per (strategy, devices): speed-up, tokens/s, sequences/s, step time, ideal
    breakdown: pd.DataFrame  # one row per (strategy, devices): mean seconds per step by cause
    latency: pd.DataFrame  # per-(step, device) speed-up samples of content-dependent plans
    gumbel: pd.DataFrame  # per strategy: Gumbel location and scale fitted to `latency`
    extrapolation: pd.DataFrame  # per (strategy, devices): expected speed-up from the Gumbel fit
    timeline: pd.DataFrame  # per (sample, stage) of one VTS batch: enter, finish, leave seconds
    timings: pd.DataFrame  # solve seconds per packer: measured, so it differs between runs
    # per strategy at the smallest device count: speed-up as simulated, with ideal kernels, with every shape
    # seen and with every shape new (empty when nothing would differ, or for sweep cells)
    assumptions: pd.DataFrame = field(default_factory=pd.DataFrame)
    # with a 4D layout, per (strategy, CP sharding): a replica's mean step by cause (`sim.replica_breakdown`)
    # and its peak memory per GPU; empty without one
    parallel: pd.DataFrame = field(default_factory=pd.DataFrame)
    # per strategy: its largest microbatch's peak memory per GPU against HBM and its verdict
    # (`sim.memory_fit.MEMORY_COLUMNS`); empty where the hardware profile states no HBM capacity
    memory: pd.DataFrame = field(default_factory=pd.DataFrame)


def progress_total(scenario: Scenario) -> int:
    """Units of work `run_experiment` reports, per plan: its packing, one per simulated device count and seed,
    its LP bound and its straggler fit (a plan without one of them counts it done when the others are)."""
    plans = with_reference([spec.plan() for spec in scenario.strategies], scenario.baseline.plan())
    return len(plans) * (len(scenario.devices) * scenario.seeds + 3)


def run_experiment(scenario: Scenario, histogram: LengthHistogram | None = None,
                   progress: Progress | None = None, packings: dict[str, Packing] | None = None,
                   stage: Callable[[str], None] | None = None,
                   workers: ReportWorkers | None = None, stragglers: bool = True,
                   assumptions: bool = True, checked: CheckedScenario | None = None) -> ExperimentResult:
    """Run `scenario` (on `histogram`, its dataset's by default); `progress(units)` counts up to
    `progress_total(scenario)`. `packings` already made of this histogram (a sweep shares them between
    cells) are used instead of packing again. `stage(text)` hears of each stage as it finishes;
    `workers` compute the LP bounds while this process simulates. `stragglers=False` skips the Gumbel
    fits of the step times (latency, gumbel and extrapolation come back empty): a sweep cell reports none.
    `assumptions=False` skips re-simulating the smallest cluster under the assumptions that could change the
    answer (ideal kernels, shapes all seen or all new). `checked`: what checking the scenario gave, if done."""
    # Sizing packs (in the workers where they pack faster), and says so: the run's first lines are its packings.
    run = resolve(scenario, histogram, packings, checked=checked, stage=stage, workers=workers)
    histogram, cost_model, plans, labels = run.histogram, run.cost_model, list(run.plans), dict(run.labels)
    progress = progress or (lambda units: None)
    packings = pack_plans(histogram, plans, batch_size=run.batch_size, seed=scenario.seed,
                          packings={**run.packings, **(packings or {})},
                          cost_model=cost_model, microbatches=run.microbatches,
                          progress=progress, stage=stage, baseline=run.baseline, workers=workers)
    bounds = _start_bounds(packings, histogram, workers) if scenario.outputs.lp_bounds else {}
    side = workers or ReportWorkers(processes=0)
    # The smallest cluster under other assumptions needs the packings alone: a worker simulates it while this
    # process simulates the run (a second of the main job's critical path otherwise).
    assumption_future = side.submit(_assumption_table, run, packings) if assumptions else None
    side.warm_up()  # the plots' modules, scipy.stats among them, load while this process simulates
    result, summary = _simulated(run, scenario.seeds, packings, progress, stage)
    plans_by_label = {labels.get(plan.name, plan.name): plan for plan in run.all_plans}
    samples = result.latency_samples if stragglers else {}
    # The Gumbel fits need scipy.stats, a second to load here and loaded in the workers as they warmed up: they
    # run there while this process builds the other tables.
    straggler_future = side.submit(_straggler_tables, samples, labels, plans_by_label, summary, run.batch_size)
    packing, timings = _packing_tables(result.packings, labels, histogram, bounds, progress,
                                       stage or (lambda text: None))
    timeline = _timelines(result.vts_timeline, labels)
    latency, gumbel, extrapolation = result_of(straggler_future)
    # A unit per bound and per straggler fit: plans without a packing had no bound to compute, plans without
    # samples no fit.
    progress(2 * len(plans_by_label) - len(packing))
    scaling_columns = _scaling_columns(scenario.seeds)
    summary = _with_derived_columns(summary, run)
    breakdown_columns = ["strategy", "devices", *BREAKDOWN_COLUMNS, "step_seconds_mean", "hidden_sync_seconds",
                         "real_tokens_per_device_step"]
    # Seconds of work after the last cluster is simulated (18 s in 4D): each says so when done.
    tell = stage or (lambda text: None)
    if samples:
        tell(f"fitted the step times' tails ({len(samples)} strategies)")
    assumption_table = result_of(assumption_future) if assumptions else pd.DataFrame()
    if assumptions:
        tell("re-simulated the smallest cluster under the assumptions that could change the answer")
    parallel = _parallel_table(run, result.packings) if run.layout is not None else pd.DataFrame()
    if run.layout is not None:
        tell("priced a replica's step by cause under every CP sharding")
    return ExperimentResult(packing=packing, scaling=summary[scaling_columns], breakdown=summary[breakdown_columns],
                            latency=latency, gumbel=gumbel, extrapolation=extrapolation, timeline=timeline,
                            timings=timings, assumptions=assumption_table, parallel=parallel,
                            memory=run.memory.table() if run.memory is not None else pd.DataFrame())


def _simulated(run: Run, seeds: int, packings: dict[str, Packing], progress: Progress,
               stage: Callable[[str], None] | None):
    """The run's simulation and its summary, strategies by label; with several seeds, the summary across them."""
    result = run.simulate(progress=progress, packings=packings, stage=stage)
    summary = result.summary
    if seeds > 1:
        # The packings are deterministic and shared; each further seed repeats the whole simulation on them.
        # The straggler fits, timelines and assumptions keep the first seed's, as a single run has them.
        summary = across_seeds([summary, *(replace(run, seed=seed).simulate(progress=progress, packings=packings).summary
                                           for seed in range(run.seed + 1, run.seed + seeds))])
    return result, summary.assign(strategy=summary["strategy"].map(run.label),
                                  reference=summary["reference"].map(run.label))


def _scaling_columns(seeds: int) -> list[str]:
    """scaling.csv's columns, in order; with several seeds, each spread column's deviation and error too."""
    scaling_columns = ["strategy", "devices", "speedup", "tokens_per_s", "sequences_per_s", "step_seconds_mean",
                       "step_seconds_p99", "engine", "reference", "packer", "max_depth", "mode", "attention", "gpus",
                       "tokens_per_s_per_gpu", "ideal_speedup", "speedup_noise", "throughput_noise",
                       "real_tokens_per_step", "real_tokens_per_device_step", "expected_real_tokens_per_device_step",
                       "rows_per_device_step", "microbatches_per_step", "budget_tokens", "compare_at"]
    if seeds > 1:  # a single seed's table stays as it always was
        scaling_columns += ["seeds", *(f"{column}_seed_{spread}" for column in SEED_SPREAD_COLUMNS
                                       for spread in ("sd", "sem"))]
    return scaling_columns


def _with_derived_columns(summary: pd.DataFrame, run: Run) -> pd.DataFrame:
    """The simulation's summary with the columns worked out from it: per GPU, the ideal speed-up, real tokens
    per step and per device step, and the footing's."""
    summary = with_per_gpu_columns(summary, run.gpus_per_replica)
    # The most any strategy can gain over padding (`none`, None: the cost model cannot say), whatever the baseline;
    # not over VTS's padded pipeline.
    ideal = ideal_speedup(run.cost_model, run.histogram, run.batch_size)
    summary["ideal_speedup"] = np.where(summary["reference"] != VTS_REFERENCE, np.nan if ideal is None else ideal,
                                        np.nan)
    summary["real_tokens_per_step"] = summary["tokens_per_s"] * summary["step_seconds_mean"]
    summary["real_tokens_per_device_step"] = summary["real_tokens_per_step"] / summary["devices"]
    return _with_footing_columns(summary, run)


def _with_footing_columns(summary: pd.DataFrame, run: Run) -> pd.DataFrame:
    """Each strategy's step as it ran (rows, microbatches, token budget a microbatch) and the real tokens it
    was expected to hold (`sim.footing`), beside the simulated ones."""
    by_label = {run.label(name): plan for name, plan in run.footing.plans.items()}
    rows = summary["strategy"].map(by_label)
    return summary.assign(expected_real_tokens_per_device_step=rows.map(lambda plan: plan.expected_real_tokens_per_step),
                          rows_per_device_step=rows.map(lambda plan: plan.rows),
                          microbatches_per_step=rows.map(lambda plan: plan.microbatches),
                          budget_tokens=rows.map(lambda plan: plan.budget_tokens).astype("Int64"),
                          compare_at=run.footing.compare_at)


def _parallel_table(run: Run, packings: dict[str, Packing]) -> pd.DataFrame:
    """A 4D run's replica step by cause under each CP sharding, labelled, with the peak memory per GPU (each
    strategy's largest microbatch as it runs, as the Memory section states it) and the tokens memory allows a
    microbatch, at the fewest replicas simulated (ZeRO shards least there)."""
    from simbench.costmodels.memory import peak_memory
    from simbench.sim.memory_budget import layout_token_budget
    from simbench.sim.replica_breakdown import replica_breakdown

    table = replica_breakdown(run.histogram, run.all_plans, packings, run.cost_model, run.batch_size, run.seed)
    table = table.assign(strategy=table["strategy"].map(run.label))
    if run.memory is not None:
        peaks = table["strategy"].map(run.memory.table().set_index("strategy")["peak_memory_gib"])
    else:  # no HBM stated: the scenario's microbatch of full-length rows
        peaks = peak_memory(run.model, run.layout, replicas=min(run.devices), tokens_per_microbatch=(
            run.batch_size // run.layout.microbatches * run.histogram.max_length)).peak_bytes / 2**30
    budget = (layout_token_budget(run.model, run.hardware, run.layout, min(run.devices))
              if run.hardware.hbm_capacity_bytes is not None else np.nan)
    return table.assign(peak_memory_gib=peaks,
                        hbm_capacity_gib=(run.hardware.hbm_capacity_bytes or np.nan) / 2**30,
                        memory_budget_tokens=budget)


def _assumption_table(run: Run, packings: dict[str, Packing]) -> pd.DataFrame:
    """The smallest cluster re-simulated under each assumption that could change its winner: kernels as fast
    as padded ones (where the profile's are measured slower), and the run's shapes all seen or all new
    (where `shapes` is not already that). Columns that equal the run's own are left out; none left, no table."""
    from simbench.costmodels.hardware import ideal_kernels

    profile = run.hardware
    devices = min(run.devices)
    # Every column simulated alone at this size with the same seed, so that the batches are the same ones and
    # an assumption that changes nothing changes no digit.
    variants = {"as simulated": (run.cost_model, run.shapes)}
    ideal = ideal_kernels(profile)
    if ideal.model_dump(exclude={"name", "source", "provenance"}) != profile.model_dump(
            exclude={"name", "source", "provenance"}):
        variants["ideal kernels"] = (run.cost_model_on(ideal), run.shapes)
    pays_first_sight = any(run.cost_model.first_sight_seconds(plan.mode) > 0 for plan in run.all_plans)
    for shapes in ("seen", "new") if pays_first_sight else ():
        if shapes != run.shapes:
            variants[f"shapes {shapes}"] = (run.cost_model, shapes)
    if len(variants) == 1:
        return pd.DataFrame()  # no assumption to weigh: the run itself need not be simulated again
    columns = {}
    for name, (cost_model, shapes) in variants.items():
        result = run.simulate(cost_model=cost_model, devices=[devices], shapes=shapes, packings=packings)
        speedups = result.summary.assign(strategy=result.summary["strategy"].map(run.label))
        column = speedups.set_index("strategy")["speedup"]
        if not columns or not np.allclose(column, columns["as simulated"], rtol=1e-6, equal_nan=True):
            columns[name] = column
    if len(columns) == 1:
        return pd.DataFrame()
    table = pd.DataFrame(columns)
    return table.rename_axis("strategy").reset_index().assign(devices=devices)


def _start_bounds(packings: dict[str, Packing], histogram: LengthHistogram,
                  workers: ReportWorkers | None) -> dict[int | None, Future]:
    """The LP bound of every depth the packings need, computed by `workers` (or here, without them), or read
    where it is stored for this histogram (shipped with the package, or in the user cache, where a bound that
    took seconds to compute is kept: `optimal`'s own, computed in the worker that packed it, among them)."""
    inline = ReportWorkers(processes=0)
    bounds = {}
    for depth in dict.fromkeys(bound_depth(packing) for packing in packings.values()):
        stored = stored_lp_lower_bound(histogram, histogram.max_length, depth)
        if stored is not None:
            bounds[depth] = inline.submit(lambda bound: bound, stored)
        else:
            bounds[depth] = (workers or inline).submit(lp_lower_bound, histogram, histogram.max_length, depth)
    return bounds


def _packing_tables(packings: dict[str, Packing], labels: dict[str, str], histogram: LengthHistogram,
                    bounds: dict[int | None, Future], progress: Progress,
                    stage: Callable[[str], None]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """packing.csv (deterministic metrics with the LP bound) and timings.csv (measured solve seconds)."""
    rows, timing_rows, told = [], [], set()
    for name, packing in packings.items():
        depth = bound_depth(packing)
        depth_name = "max" if depth is None else depth
        bound = None
        if depth in bounds:  # computed beside the simulation; what is left of it is waited for, aloud
            bound = result_of(bounds[depth], lambda seconds: stage(
                f"waiting for the LP bound at depth {depth_name} ({seconds:.0f} s so far)"))
        if bound is not None and depth not in told:
            told.add(depth)
            stage(f"LP bound at depth {depth_name} {'read from the cache' if bound.cached else 'computed'} "
                  f"in {bound.seconds:.2f} s")
        progress(1)
        if not is_bounded(packing, histogram.max_length):
            bound = None
        metrics = packing.metrics(bound.lower_bound_packs if bound else None)
        label = labels.get(name, name)
        timing_rows.append({"strategy": label, "packer": packing.strategy, "solve_seconds": metrics.pop("seconds"),
                            "lp_bound_seconds": bound.seconds if bound else None,
                            "lp_bound_cached": bound.cached if bound else None})
        rows.append({"label": label, **metrics, "bound_depth": depth, "lp_bound_value": bound.value if bound else None})
    packing_columns = ["label", "strategy", "max_depth", "sequences", "packs", "tokens", "padding_tokens", "efficiency",
                       "packing_factor", "strategies_used", "depth_used", "lower_bound_packs", "gap_to_bound",
                       "proven_optimal", "proof", "bound_depth", "lp_bound_value"]
    return pd.DataFrame(rows).reindex(columns=packing_columns), pd.DataFrame(timing_rows)


def _straggler_tables(latency_samples: dict[str, np.ndarray], labels: dict[str, str], plans_by_label: dict,
                      summary: pd.DataFrame, batch_size: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per-device speed-up samples of plans whose step time depends on the batch's content, their
    Gumbel fits, and the expected speed-up of n devices (the slowest sets the pace) next to the simulation's."""
    padded_seconds = float(np.mean(latency_samples["none"])) if latency_samples else np.nan  # none: nothing to fit
    latency_rows, fit_rows, extrapolation_rows = [], [], []
    device_counts = sorted(summary["devices"].unique())
    for name, samples in latency_samples.items():
        label = labels.get(name, name)
        # Only plans whose steps compare one to one with padding's get a fit (see BatchSource.fits_stragglers):
        # sorted batching's step times, for one, are two-humped (a shape change or not).
        if plans_by_label[label].source.fits_stragglers and np.std(samples) > CONSTANT_SPREAD * np.mean(samples):
            speedups = padded_seconds / samples
            fit = fit_gumbel(speedups)
            latency_rows.append(pd.DataFrame({"strategy": label, "step_seconds": samples[:LATENCY_ROWS_KEPT],
                                              "speedup": speedups[:LATENCY_ROWS_KEPT]}))
            fit_rows.append({"strategy": label, "location": fit.location, "scale": fit.scale, "samples": samples.size,
                             "padded_step_seconds": padded_seconds, "batch_size": batch_size})
            # Over padding, as the fit is, whatever the run's baseline.
            simulated = (summary[summary["strategy"] == label].set_index("devices")["tokens_per_s"]
                         / summary[summary["strategy"] == "none"].set_index("devices")["tokens_per_s"])
            extrapolation_rows += [{"strategy": label, "devices": devices,
                                    "expected_speedup": expected_min_speedup(fit.location, fit.scale, int(devices)),
                                    "simulated_speedup": simulated.get(devices, np.nan)} for devices in device_counts]
    if fit_rows:
        paper = extrapolate_cluster_speedups(PAPER_LOCATION, PAPER_SCALE, PAPER_DEVICES, tuple(device_counts))
        extrapolation_rows += [{"strategy": PAPER_FIT_LABEL, "devices": row.devices,
                                "expected_speedup": row.mean_speedup, "simulated_speedup": np.nan}
                               for row in paper.itertuples()]
    latency = pd.concat(latency_rows, ignore_index=True) if latency_rows else \
        pd.DataFrame(columns=["strategy", "step_seconds", "speedup"])
    gumbel = pd.DataFrame(fit_rows, columns=["strategy", "location", "scale", "samples", "padded_step_seconds",
                                             "batch_size"])
    extrapolation = pd.DataFrame(extrapolation_rows,
                                 columns=["strategy", "devices", "expected_speedup", "simulated_speedup"])
    return latency, gumbel, extrapolation


def _timelines(timelines: dict[str, pd.DataFrame], labels: dict[str, str]) -> pd.DataFrame:
    """The pipeline timeline of every VTS plan, one batch each, labelled by strategy."""
    frames = [timeline.assign(strategy=labels.get(name, name)) for name, timeline in timelines.items()]
    if not frames:
        return pd.DataFrame(columns=["strategy", "sample", "stage", "enter_seconds", "finish_seconds",
                                     "leave_seconds", "length", "blocked_seconds"])
    return pd.concat(frames, ignore_index=True)
