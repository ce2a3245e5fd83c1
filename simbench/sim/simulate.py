"""`simulate`: run execution plans on clusters of 1..N devices and measure throughput and speed-ups.

    >>> from simbench.histogram import load_histogram
    >>> from simbench.costmodels.linear import LinearCostModel
    >>> from simbench.sim.simulate import simulate
    >>> result = simulate(load_histogram("squad_1_1_384"), ["unpad"], [1, 8], LinearCostModel(),
    ...                   batch_size=8, steps=20, seed=0)
    >>> result.summary[["strategy", "devices", "engine"]].values.tolist()
    ... # doctest: +NORMALIZE_WHITESPACE
    [['none', 1, 'simpy'], ['none', 8, 'simpy'], ['pad-to-longest', 1, 'simpy'], ['pad-to-longest', 8, 'simpy'],
     ['unpad', 1, 'simpy'], ['unpad', 8, 'simpy']]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pandas as pd

from simbench.costmodels.base import ExecutionMode, as_cost_model
from simbench.costmodels.noise import StepNoise, with_step_noise
from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.sim.accumulation import accumulating
from simbench.sim.engines.choice import (ENGINES, Engine, devices_drawn_one_by_one, large_cluster_engine,
                                         per_device_engine, split_by_size)
from simbench.sim.engines.event import run_simpy
from simbench.sim.engines.vectorized import StepAggregates, aggregate_by_cluster_size, step_timeline
from simbench.sim.engines.order_statistics import build_pool, slowest_of
from simbench.sim.parallel.gradient_sync import gradient_sync_of
from simbench.sim.plans import (BatchSource, ExecutionPlan, SimulationSettings, baseline_plan, packing_refusals,
                                 parse_plans, with_reference)
from simbench.sim.pricing import DeviceCosts
from simbench.sim.results import PlanRun, SimulationResult, summarize
from simbench.sim.shapes import SHAPES, first_sight
from simbench.strategies import get_strategy
from simbench.strategies.packing import PackOptions, Packing
from simbench.validation import (DEFAULT_ENGINE, DEFAULT_SHAPES, DEFAULT_TRAINING_STEPS, SIMULATED_ROWS_MAX, check_choice, check_device_counts, check_rows_per_step,
                                 check_seed, check_simulation_work, check_whole_number)

# Rows priced at once: bounds memory (a few hundred MB at most) whatever the devices and steps.
ROWS_PER_CHUNK = 1_000_000
LATENCY_SAMPLES_MAX = 100_000


def simulate(histogram: LengthHistogram, plans: list[ExecutionPlan | str], devices: list[int], cost_model, *,
             batch_size: int, steps: int, seed: int, engine: str = DEFAULT_ENGINE,
             progress: Callable[[int], None] | None = None,
             packings: dict[str, Packing] | None = None, max_rows: int = SIMULATED_ROWS_MAX,
             stage: Callable[[str], None] | None = None, shapes: str = DEFAULT_SHAPES,
             training_steps: int = DEFAULT_TRAINING_STEPS, microbatches: int = 1,
             gpus_per_device: int = 1, baseline: ExecutionPlan | str | None = None) -> SimulationResult:
    """Simulate every plan (plus padding and the baseline) on every cluster size in `devices`.

    `cost_model`: a `simbench.costmodels.CostModel`, or an object with its required members (given the rest's
    defaults, `as_cost_model`). `progress(units)` hears of work as it is done, in whole units that add up to len(with_reference(plans)) *
    len(devices): one per (plan, devices), told in parts as batches are priced and each cluster is timed.
    `packings` (by plan name, e.g. a previous result's `.packings`) are reused instead of packing again.
    `stage(text)` hears of each stage as it finishes (a packing made, a group of cluster sizes simulated).
    `shapes` and `training_steps` say which steps pay a new batch shape's first-sight cost (`sim.shapes`).
    `microbatches`: how many microbatches a device's `batch_size` rows make (a 4D replica's; a token budget
    is per microbatch). `gpus_per_device`: the GPUs a device stands for (a replica's), for the stage lines' words.
    `baseline`: the plan every speed-up is over (a name as `plans` takes them; None:
    `simbench.sim.plans.DEFAULT_BASELINE`); padding (`none`) is simulated too, whatever the baseline.
    """
    baseline = baseline_plan(baseline)
    plans = _with_reference(plans, baseline)
    devices = _validate(histogram, devices, batch_size, steps, seed, engine)
    check_choice(shapes, "shapes", SHAPES)
    check_whole_number(training_steps, "training_steps", minimum=1)
    check_packing_limits([plan for plan in plans if plan.name not in (packings or {})], histogram.max_length)
    check_simulation_work(simulation_rows(plans, histogram, devices, batch_size, steps, engine, baseline), max_rows)
    check_whole_number(microbatches, "microbatches", minimum=1)
    cost_model = as_cost_model(cost_model)
    settings = SimulationSettings(histogram, with_step_noise(cost_model, seed), batch_size, steps, seed, engine,
                                  shapes, training_steps, microbatches=microbatches)
    packings = dict(packings or {})
    stage = stage or (lambda text: None)
    tell = _Progress(progress)
    runs: list[PlanRun] = []
    latency_samples: dict[str, np.ndarray] = {}
    timelines: dict[str, pd.DataFrame] = {}
    for plan in plans:
        plan_settings = _plan_settings(plan, settings, cost_model)
        packing = packings.get(plan.name) or _packing(plan, plan_settings, packings)
        if packing is not None and plan.name not in packings:
            stage(f"packed {plan.name}: {packing.packs_total:,} packs in {packing.seconds:.2f} s")
        if packing is not None:
            packings[plan.name] = packing
        plan_runs, samples, timeline = _simulate_plan(plan, packing, devices, plan_settings, tell, stage, gpus_per_device)
        runs.extend(plan_runs)
        if samples is not None:
            latency_samples[plan.name] = samples
        if timeline is not None:
            timelines[plan.name] = timeline
    config = {"histogram": histogram.name, "strategies": [plan.name for plan in plans], "baseline": baseline.name,
              "devices": devices,
              "batch_size": batch_size, "steps": steps, "seed": seed, "engine": engine, "shapes": shapes,
              "training_steps": training_steps}
    used = {plan.name: packings[plan.name] for plan in plans if plan.name in packings}
    return SimulationResult(summarize(runs, baseline.name), pd.concat([run.trace() for run in runs], ignore_index=True),
                            used, latency_samples, timelines, config)


def pack_plans(histogram: LengthHistogram, plans: list[ExecutionPlan | str], *, batch_size: int, seed: int,
               packings: dict[str, Packing] | None = None, cost_model=None,
               progress: Callable[[int], None] | None = None,
               stage: Callable[[str], None] | None = None, microbatches: int = 1,
               baseline: ExecutionPlan | str | None = None, workers=None) -> dict[str, Packing]:
    """The packings `simulate` would make for these plans (padding's included), by plan name, reusing
    `packings` given: made ahead and passed as `simulate(packings=...)`, they can be bounded elsewhere
    while the simulation runs; `cost_model` weighs attention against dense work for packers that balance
    predicted work (`wlb`), as `simulate` does. `progress(1)` is told as each plan has its packing (or needs none);
    `stage(text)` as each packing is made. `workers` (a `simbench.workers.ReportWorkers`) pack the slow
    built-in packers (`Strategy.slow`) side by side while this process packs the rest: the same packings,
    made in any process."""
    cost_model = None if cost_model is None else as_cost_model(cost_model)
    settings = SimulationSettings(histogram, cost_model, batch_size, 1, seed, "auto", microbatches=microbatches)
    given, packings = dict(packings or {}), {}
    ordered = _with_reference(plans, baseline)
    elsewhere = _pack_elsewhere(ordered, settings, given, workers) if workers is not None else {}
    for plan in ordered:
        if plan.name in elsewhere:
            continue  # collected below, once this process has packed the rest
        packing = given.get(plan.name) or _packing(plan, settings.of_plan(plan, cost_model), {**given, **packings})
        if packing is not None:
            packings[plan.name] = packing
            if plan.name not in given and stage is not None:
                stage(f"packed {plan.name}: {packing.packs_total:,} packs in {packing.seconds:.2f} s")
        if progress is not None:
            progress(1)
    for name, future in elsewhere.items():
        packings[name] = packing = workers.result(future, None if stage is None else lambda seconds, name=name: stage(
            f"waiting for the packing of {name} ({seconds:.0f} s so far)"))
        if stage is not None:
            stage(f"packed {name}: {packing.packs_total:,} packs in {packing.seconds:.2f} s")
        if progress is not None:
            progress(1)
    return {plan.name: packings[plan.name] for plan in ordered if plan.name in packings}


def plan_packing(plan: ExecutionPlan, histogram: LengthHistogram, *, batch_size: int, seed: int, cost_model=None,
                 packings: dict[str, Packing] | None = None) -> Packing | None:
    """The packing `simulate` makes for `plan` (None: its batches come from no packing), with the options it packs
    with (`_packing_call`: `cost_model`'s attention parity for a balancing packer, the plan's own options); one of
    `packings` (by plan name, made for this histogram, batch size and seed) where it holds it."""
    given = packings or {}
    if plan.name in given:
        return given[plan.name]
    cost_model = None if cost_model is None else as_cost_model(cost_model)
    settings = SimulationSettings(histogram, cost_model, batch_size, 1, seed, "auto")
    return _packing(plan, settings, dict(given))


def _pack_elsewhere(plans: list[ExecutionPlan], settings: SimulationSettings, given: dict[str, Packing],
                    workers) -> dict:
    """Futures of the packings of slow built-in packers, by plan name, submitted to `workers`; plans asking
    for the same packing share one."""
    calls = {}
    for plan in plans:
        call = None if plan.name in given else _packing_call(plan, settings)
        if call is not None and get_strategy(call[0]).slow and get_strategy(call[0]).is_builtin:
            calls[plan.name] = call
    futures, shared = {}, {}
    for name, (packer, depth, options) in calls.items():
        key = (packer, depth, repr(options))
        if key not in shared:
            shared[key] = workers.submit(get_strategy(packer), settings.histogram, settings.histogram.max_length,
                                         depth, options)
        futures[name] = shared[key]
    return futures


def simulation_rows(plans: list[ExecutionPlan | str], histogram: LengthHistogram, devices: list[int],
                    batch_size: int, steps: int, engine: str = "auto",
                    baseline: ExecutionPlan | str | None = None) -> int:
    """The rows (sequences or packs) a simulation would draw and price, padding's and the baseline's included: its work,
    known before any is done."""
    # Every plan draws its rows each step for each device it simulates one by one, and prices the
    # distinct batches of the larger clusters where it lists them.
    large = split_by_size(sorted(devices), engine)[1]
    return sum(steps * (plan.source.rows_per_device_step(plan, histogram, _rows(plan, batch_size))
                        * devices_drawn_one_by_one(plan, max(devices), engine)
                        + plan.source.distinct_rows_per_step(plan, histogram, _rows(plan, batch_size), large))
               for plan in _with_reference(plans, baseline))


def _rows(plan: ExecutionPlan, batch_size: int) -> int:
    """Rows a device's step of the plan holds: its own where a run sized it, else the run's batch_size."""
    return batch_size if plan.sizing is None else plan.sizing.rows


def _plan_settings(plan: ExecutionPlan, settings: SimulationSettings, cost_model) -> SimulationSettings:
    """The settings `plan` runs with: its own rows and microbatches, priced as a step of that many microbatches
    (with the profile's per-device noise of its own, seeded as the run's)."""
    if plan.sizing is None or plan.sizing.microbatches == settings.microbatches:
        return settings.of_plan(plan, settings.cost_model)
    return settings.of_plan(plan, with_step_noise(accumulating(cost_model, plan.sizing.microbatches), settings.seed))


def _with_reference(plans: list[ExecutionPlan | str], baseline: ExecutionPlan | str | None) -> list[ExecutionPlan]:
    named = parse_plans([plan for plan in plans if isinstance(plan, str)])  # expands `all`
    given = [plan for plan in plans if not isinstance(plan, str)]
    return with_reference(list({plan.name: plan for plan in [*named, *given]}.values()), baseline)


def _validate(histogram, devices, batch_size, steps, seed, engine) -> list[int]:
    if histogram.sequences == 0:
        raise InputError(f"histogram {histogram.name} holds no sequences: nothing to train on")
    check_choice(engine, "engine", ENGINES)
    check_whole_number(batch_size, "batch_size", minimum=1)
    check_whole_number(steps, "steps", minimum=1)
    check_seed(seed)
    devices = check_device_counts(devices)
    return devices


def check_packing_limits(plans: list[ExecutionPlan], max_length: int) -> None:
    """Refuse a packer's size limit before anything is packed or simulated."""
    refused = packing_refusals(plans, max_length)
    if refused:
        index, error = refused[0]
        raise InputError(f"strategy {plans[index].name}: {error.message}", parameter=error.parameter)


def _packing(plan: ExecutionPlan, settings: SimulationSettings, packings: dict[str, Packing]) -> Packing | None:
    """Pack once per packer and depth, whatever the number of device counts."""
    request = plan.source.packing_request(plan)
    if request is None:
        return None
    packer, depth = request
    own = plan.source.packing_options(plan, settings.histogram, settings.batch_size, settings.microbatches)
    # A packing made with other options of the plan's own (another token budget) is another packing.
    cached = next((p for p in packings.values() if (p.strategy, p.max_depth) == (packer, depth)
                   and all(p.details.get(key) == value for key, value in own.items())), None)
    if cached is not None:
        return cached
    packer, depth, options = _packing_call(plan, settings)
    return get_strategy(packer)(settings.histogram, settings.histogram.max_length, depth, options)


def _packing_call(plan: ExecutionPlan, settings: SimulationSettings) -> tuple[str, int | None, PackOptions] | None:
    """The packer, depth and options a plan's packing is made with in this simulation (None: it packs nothing)."""
    return packing_call(plan, settings.histogram, batch_size=settings.batch_size, microbatches=settings.microbatches,
                        seed=settings.seed, attention_parity=lambda: _attention_parity(settings.cost_model))


def packing_call(plan: ExecutionPlan, histogram: LengthHistogram, *, batch_size: int, microbatches: int, seed: int,
                 attention_parity: Callable[[], float | None]) -> tuple[str, int | None, PackOptions] | None:
    """The packer, depth and options `plan`'s packing is made with (None: the plan packs nothing): the one place
    that decides it, for a simulation and for a sweep's shared packings alike. `attention_parity()` is the cost
    model's, asked only for a packer that reads it."""
    request = plan.source.packing_request(plan)
    if request is None:
        return None
    packer, depth = request
    own = plan.source.packing_options(plan, histogram, batch_size, microbatches)
    return packer, depth, pack_options(packer, seed=seed, batch_size=batch_size, attention_parity=attention_parity,
                                       **own)


def _attention_parity(cost_model) -> float | None:
    """The cost model's attention parity; None without a cost model (`pack_plans` may be given none)."""
    return None if cost_model is None else cost_model.attention_parity_tokens


def pack_options(packer: str, *, seed: int, batch_size: int,
                 attention_parity: Callable[[], float | None] = lambda: None, **own) -> PackOptions:
    """The options the simulator packs `packer` with (a sweep's shared packings too): the cost model's
    `attention_parity()` only for a packer that reads it (`Strategy.uses_attention_parity`), asked only then;
    `own`: the plan's own (`BatchSource.packing_options`)."""
    parity = attention_parity() if get_strategy(packer).uses_attention_parity else None
    return PackOptions(seed=seed, batch_size=batch_size, attention_parity_tokens=parity, **own)


class _Progress:
    """Shares of the work told as they are done, passed on in whole units: each cluster size of a plan is a
    unit, shared between pricing its group's batches and timing it, so a plan moves the bar as it runs."""

    def __init__(self, progress: Callable[[int], None] | None):
        self.progress = progress
        self.done, self.told = Fraction(0), 0

    def __call__(self, share: Fraction) -> None:
        self.done += share
        whole = math.floor(self.done)
        if whole > self.told:
            if self.progress is not None:
                self.progress(whole - self.told)
            self.told = whole

    def priced(self, sizes: list[int], passes: int = 1) -> None:
        """One of `passes` over a group's batches (chunks of steps, a pool of draws) is done."""
        self(Fraction(len(sizes), passes + 1))

    def timed(self, passes: int = 1) -> None:
        """One cluster size of a group priced in `passes` is timed: its unit is complete."""
        self(Fraction(1, passes + 1))


def _simulate_plan(plan: ExecutionPlan, packing: Packing | None, devices: list[int], settings: SimulationSettings,
                   tell: _Progress, stage: Callable[[str], None], gpus_per_device: int = 1):
    """Small clusters simulate every device, on batches drawn once for all of them (so plans drawing the
    same sequences stay paired). Larger ones run the engine `choice.large_cluster_engine` gives the plan:
    its slowest device drawn directly, its distinct batches priced, or every device simulated on batches of
    their own."""
    small, large = split_by_size(devices, settings.engine)
    shortcut = large_cluster_engine(plan)
    runs, latency, timeline = [], None, None
    if small:
        runs, latency, timeline = _simulate_devices(plan, packing, small, settings, tell, purpose=0)
        stage(f"simulated {plan.name} on {_counts(small, gpus_per_device)}")
    if large and shortcut is Engine.ORDER_STATISTICS:
        noiseless, noise_cv = _without_step_noise(settings, plan)
        source = plan.source(plan, packing, noiseless)
        items = first_sight(source, settings.shapes, settings.training_steps).add_to_items(source.items())
        pool = build_pool(replace(items, noise_cv=noise_cv), source.generator(2), large[-1])
        by_size = slowest_of(pool, large, settings.steps, source.generator(3))
        tell.priced(large)
        runs += [_run(source, size, by_size[size], None, tell, shortcut) for size in large]
        stage(f"simulated {plan.name} on {_counts(large, gpus_per_device)} (slowest device drawn directly)")
        latency = pool.plain_totals[:LATENCY_SAMPLES_MAX]
        timeline = timeline if timeline is not None else source.timeline()
    elif large and shortcut is Engine.DISTINCT_BATCHES:
        source = plan.source(plan, packing, settings, purpose=4)
        new_shapes = first_sight(source, settings.shapes, settings.training_steps)
        by_size = {size: new_shapes.add_to_aggregates(aggregates, size)
                   for size, aggregates in source.distinct_batches(large).items()}
        tell.priced(large)
        runs += [_run(source, size, by_size[size], None, tell, shortcut) for size in large]
        stage(f"simulated {plan.name} on {_counts(large, gpus_per_device)} (distinct batches priced)")
    elif large:
        large_runs, large_latency, large_timeline = _simulate_devices(plan, packing, large, settings, tell, purpose=4)
        stage(f"simulated {plan.name} on {_counts(large, gpus_per_device)}")
        runs += large_runs
        latency = latency if latency is not None else large_latency
        timeline = timeline if timeline is not None else large_timeline
    runs.sort(key=lambda run: run.devices)
    return runs, latency, timeline


def _counts(devices: list[int], gpus_per_device: int = 1) -> str:
    """'1, 2, 8 devices'; devices of several GPUs are replicas, said with their GPUs: '1, 8 replicas (2,048 to
    16,384 GPUs)'."""
    counts = ", ".join(f"{count:,}" for count in devices)
    if gpus_per_device == 1:
        return f"{counts} device{'s' * (devices != [1])}"
    gpus = " to ".join(dict.fromkeys(f"{count * gpus_per_device:,}" for count in (devices[0], devices[-1])))
    return f"{counts} replica{'s' * (devices != [1])} ({gpus} GPUs)"


def _without_step_noise(settings: SimulationSettings, plan: ExecutionPlan) -> tuple[SimulationSettings, float]:
    """The settings with the cost model's per-device step noise taken out, and its coefficient of variation
    for this plan: the order-statistics engine draws the noise itself, tilted into the tail with the batch."""
    if not isinstance(settings.cost_model, StepNoise):
        return settings, 0.0
    noise_cv = settings.cost_model.cv if plan.mode is ExecutionMode.UNPADDED and plan.source.step_noise else 0.0
    return replace(settings, cost_model=settings.cost_model.cost_model), noise_cv


def _simulate_devices(plan: ExecutionPlan, packing: Packing | None, devices: list[int], settings: SimulationSettings,
                      tell: _Progress, purpose: int):
    """Draw and price the plan's batches chunk by chunk, keep per-step aggregates, then time every cluster."""
    largest = devices[-1]
    # With outlier delay a step's devices share its kind of pack, so the slowest of many is not drawn directly.
    remedy = ("; outlier_delay: false lets its devices draw independently, the slowest of millions drawn directly"
              if plan.outlier_delay else "")
    check_rows_per_step(largest, settings.batch_size, plan.name, remedy)
    simpy_sizes = [size for size in devices if per_device_engine(plan, size, settings) is Engine.SIMPY]
    source = plan.source(plan, packing, settings, purpose, simpy_devices=max(simpy_sizes, default=0))
    new_shapes = first_sight(source, settings.shapes, settings.training_steps)
    chunk_steps = source.chunk_steps(max(1, ROWS_PER_CHUNK // (largest * settings.batch_size)))
    aggregate_chunks: dict[int, list[StepAggregates]] = {size: [] for size in devices}
    simpy_chunks: dict[int, list[DeviceCosts]] = {size: [] for size in simpy_sizes}
    samples: list[np.ndarray] = []
    chunks = -(-settings.steps // chunk_steps)
    for first_step in range(0, settings.steps, chunk_steps):
        by_size = {size: new_shapes.add_to_costs(costs)
                   for size, costs in source.chunk(min(chunk_steps, settings.steps - first_step), devices).items()}
        for size, costs in by_size.items():
            sizes = devices if source.shares_draws else [size]
            for cluster, aggregates in aggregate_by_cluster_size(costs, sizes).items():
                aggregate_chunks[cluster].append(aggregates)
        for size in simpy_sizes:
            simpy_chunks[size].append(by_size.get(size, by_size[largest]).first_devices(size))
        if source.shares_draws and sum(map(np.size, samples)) < LATENCY_SAMPLES_MAX:
            samples.append(by_size[largest].total_seconds.ravel())
        tell.priced(devices, chunks)
    runs = [_run(source, size, StepAggregates.concatenate(aggregate_chunks[size]), simpy_chunks.get(size), tell,
                 passes=chunks) for size in devices]
    latency = np.concatenate(samples)[:LATENCY_SAMPLES_MAX] if samples else None
    return runs, latency, source.timeline()


def _run(source: BatchSource, devices: int, aggregates: StepAggregates, simpy_costs: list[DeviceCosts] | None,
         tell: _Progress, engine: Engine = Engine.VECTORIZED, passes: int = 1) -> PlanRun:
    plan = source.plan
    sync = gradient_sync_of(source.settings.cost_model, devices)
    # What follows each step's slowest device: the sync that step's backward and forward leave exposed, and the
    # optimizer update where the cost model prices it with the sync.
    after_step_seconds = sync.added_seconds(aggregates.slowest_device_seconds)
    timing = source.timing(devices, sync.communication_seconds + sync.update_seconds, simpy=simpy_costs is not None)
    if simpy_costs is not None:
        costs = DeviceCosts.concatenate(simpy_costs)
        timeline = run_simpy(costs.total_seconds, after_step_seconds, timing.prepare_seconds, plan.exchange,
                             timing.stage_seconds, timing.buffer_samples)
    else:
        timeline = step_timeline(aggregates.slowest_device_seconds, aggregates.mean_device_seconds,
                                 after_step_seconds, timing.prepare_seconds, plan.exchange, engine.column)
    tell.timed(passes)
    return PlanRun(plan, devices, aggregates, timeline, timing.allgather_seconds, timing.reference_step_seconds,
                   update_seconds=sync.update_seconds,
                   hidden_sync_seconds=float(np.mean(sync.hidden_seconds(aggregates.slowest_device_seconds))))
