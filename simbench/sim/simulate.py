"""`simulate`: run execution plans on clusters of 1..N devices and measure throughput and speed-ups.

    >>> from simbench.histogram import load_histogram
    >>> from simbench.sim.linear import LinearCostModel
    >>> from simbench.sim.simulate import simulate
    >>> result = simulate(load_histogram("squad_1_1_384"), ["unpad"], [1, 8], LinearCostModel(),
    ...                   batch_size=8, steps=20, seed=0)
    >>> result.summary[["strategy", "devices", "engine"]].values.tolist()
    [['none', 1, 'simpy'], ['none', 8, 'simpy'], ['unpad', 1, 'simpy'], ['unpad', 8, 'simpy']]
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simbench.costmodels.base import ExecutionMode
from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.sim import vts
from simbench.sim.batching import PackSampler, SequenceSampler, SortedBatchSampler, unpadded_batches
from simbench.sim.engine import run_simpy
from simbench.sim.exchange import ExchangeCosts, deal_sorted
from simbench.sim.montecarlo import StepAggregates, aggregate_by_cluster_size, step_timeline
from simbench.sim.orderstat import ItemSource, build_pool, slowest_of
from simbench.sim.plans import ExecutionPlan, Exchange, PlanKind, parse_plans, with_reference
from simbench.sim.pricing import DeviceCosts, price_batches
from simbench.sim.results import PlanRun, SimulationResult, summarize
from simbench.strategies import get_strategy
from simbench.strategies.packing import PackOptions, Packing
from simbench.validation import (ROWS_PER_STEP_MAX, check_choice, check_device_counts, check_seed,
                                 check_whole_number)

ENGINES = ("auto", "simpy", "vectorized", "order-statistics")
# `auto` runs SimPy while a run needs at most this many events, the vectorized engine above; plans whose
# devices draw independently run the order-statistics engine above PER_DEVICE_MAX devices.
SIMPY_EVENT_BUDGET = 20_000
PER_DEVICE_MAX = 64
# Rows priced at once: bounds memory (a few hundred MB at most) whatever the devices and steps.
ROWS_PER_CHUNK = 1_000_000
LATENCY_SAMPLES_MAX = 100_000


def simulate(histogram: LengthHistogram, plans: list[ExecutionPlan | str], devices: list[int], cost_model, *,
             batch_size: int, steps: int, seed: int, engine: str = "auto",
             progress: Callable[[int], None] | None = None,
             packings: dict[str, Packing] | None = None) -> SimulationResult:
    """Simulate every plan (plus padding, the reference) on every cluster size in `devices`.

    `progress(1)` is called after each (plan, devices) is done: len(with_reference(plans)) * len(devices) calls.
    `packings` (by plan name, e.g. a previous result's `.packings`) are reused instead of packing again.
    """
    named = parse_plans([plan for plan in plans if isinstance(plan, str)])  # expands `all`
    given = [plan for plan in plans if not isinstance(plan, str)]
    plans = with_reference(list({plan.name: plan for plan in [*named, *given]}.values()))
    devices = _validate(histogram, devices, batch_size, steps, seed, engine)
    settings = _Settings(histogram, cost_model, batch_size, steps, seed, engine,
                         ExchangeCosts.from_cost_model(cost_model))
    packings = dict(packings or {})
    runs: list[PlanRun] = []
    latency_samples: dict[str, np.ndarray] = {}
    timelines: dict[str, pd.DataFrame] = {}
    for plan in plans:
        packing = packings.get(plan.name) or _packing(plan, settings, packings)
        if packing is not None:
            packings[plan.name] = packing
        plan_runs, samples, timeline = _simulate_plan(plan, packing, devices, settings, progress)
        runs.extend(plan_runs)
        if samples is not None:
            latency_samples[plan.name] = samples
        if timeline is not None:
            timelines[plan.name] = timeline
    config = {"histogram": histogram.name, "strategies": [plan.name for plan in plans], "devices": devices,
              "batch_size": batch_size, "steps": steps, "seed": seed, "engine": engine}
    used = {plan.name: packings[plan.name] for plan in plans if plan.name in packings}
    return SimulationResult(summarize(runs), pd.concat([run.trace() for run in runs], ignore_index=True),
                            used, latency_samples, timelines, config)


@dataclass(frozen=True)
class _Settings:
    histogram: LengthHistogram
    cost_model: object
    batch_size: int
    steps: int
    seed: int
    engine: str
    exchange_costs: ExchangeCosts


def _validate(histogram, devices, batch_size, steps, seed, engine) -> list[int]:
    if histogram.sequences == 0:
        raise InputError(f"histogram {histogram.name} holds no sequences: nothing to train on")
    check_choice(engine, "engine", ENGINES)
    check_whole_number(batch_size, "batch_size", minimum=1)
    check_whole_number(steps, "steps", minimum=1)
    check_seed(seed)
    devices = check_device_counts(devices)
    return devices


def _packing(plan: ExecutionPlan, settings: _Settings, packings: dict[str, Packing]) -> Packing | None:
    """Pack once per packer and depth, whatever the number of device counts."""
    if plan.kind is not PlanKind.PACKING:
        return None
    key = f"{plan.packer}:{plan.max_depth}"
    cached = next((p for p in packings.values() if f"{p.strategy}:{p.max_depth}" == key), None)
    return cached or get_strategy(plan.packer)(settings.histogram, settings.histogram.max_length, plan.max_depth,
                                               PackOptions(seed=settings.seed, batch_size=settings.batch_size))


def _rng(plan: ExecutionPlan, seed: int, purpose: int = 0) -> np.random.Generator:
    """One stream per batch source; un-padding, exchange and VTS share one so their comparison is paired."""
    source = f"{plan.packer}:{plan.max_depth}:{plan.mode.value}" if plan.kind is PlanKind.PACKING else "sequences"
    return np.random.default_rng([seed, zlib.crc32(source.encode()), purpose])


def _simulate_plan(plan, packing, devices, settings: _Settings, progress):
    """Small clusters simulate every device, on batches drawn once for all of them (so plans drawing the
    same sequences stay paired); larger ones draw their slowest device directly when devices are
    independent, or simulate every device on batches of their own."""
    small, large = _split_by_size(devices, settings)
    pooled = large if plan.independent_devices else []
    runs, latency, timeline = [], None, None
    for group, purpose in ((small, 0), ([size for size in large if size not in pooled], 4)):
        if group:
            source = _BatchSource(plan, packing, settings, purpose)
            group_runs, group_latency, group_timeline = _simulate_devices(plan, source, group, settings)
            runs += group_runs
            latency = latency if latency is not None else group_latency
            timeline = timeline if timeline is not None else group_timeline
    if pooled:
        source = _BatchSource(plan, packing, settings)
        pool = build_pool(source.items(), _rng(plan, settings.seed, purpose=2), pooled[-1])
        by_size = slowest_of(pool, pooled, settings.steps, _rng(plan, settings.seed, purpose=3))
        runs += [_run(plan, size, by_size[size], None, [], settings, engine="order-statistics") for size in pooled]
        latency = pool.plain_totals[:LATENCY_SAMPLES_MAX]
        if plan.kind is PlanKind.VTS and timeline is None:
            timeline = _first_batch_timeline(source.first_batch(), plan, settings)
    runs.sort(key=lambda run: run.devices)
    if progress is not None:
        for _ in runs:
            progress(1)
    return runs, latency, timeline


def _split_by_size(devices: list[int], settings: _Settings) -> tuple[list[int], list[int]]:
    """Cluster sizes whose every device is simulated whatever the plan, and the larger ones."""
    if settings.engine in ("simpy", "vectorized"):
        return devices, []
    if settings.engine == "order-statistics":
        return [], devices
    return [size for size in devices if size <= PER_DEVICE_MAX], [size for size in devices if size > PER_DEVICE_MAX]


def _simulate_devices(plan, source: _BatchSource, devices, settings: _Settings):
    """Draw and price the plan's batches chunk by chunk, keep per-step aggregates, then time every cluster."""
    largest = devices[-1]
    if largest * settings.batch_size > ROWS_PER_STEP_MAX:
        raise InputError(f"strategy {plan.name} simulates every device: {largest:,} devices x batch size "
                         f"{settings.batch_size} is {largest * settings.batch_size:,} rows per step; at most "
                         f"{ROWS_PER_STEP_MAX:,} fit in memory")
    simpy_sizes = [size for size in devices if _use_simpy(plan, size, settings)]
    chunk_steps = max(1, ROWS_PER_CHUNK // (largest * settings.batch_size))
    if plan.bucket_window:
        chunk_steps = max(1, chunk_steps // plan.bucket_window) * plan.bucket_window
    aggregate_chunks: dict[int, list[StepAggregates]] = {size: [] for size in devices}
    simpy_chunks: dict[int, list[DeviceCosts]] = {size: [] for size in simpy_sizes}
    simpy_lengths: list[np.ndarray] = []
    samples: list[np.ndarray] = []
    timeline = None
    for first_step in range(0, settings.steps, chunk_steps):
        by_size, lengths = source.chunk(min(chunk_steps, settings.steps - first_step), devices)
        for size, costs in by_size.items():
            sizes = devices if size == largest and plan.exchange is Exchange.NONE else [size]
            for cluster, aggregates in aggregate_by_cluster_size(costs, sizes).items():
                aggregate_chunks[cluster].append(aggregates)
        for size in simpy_sizes:
            simpy_chunks[size].append(by_size.get(size, by_size[largest]).first_devices(size))
        if plan.kind is PlanKind.VTS:
            if timeline is None:
                timeline = _first_batch_timeline(lengths[0, 0], plan, settings)
            if simpy_sizes:
                simpy_lengths.append(lengths[:, :max(simpy_sizes)])
        if plan.exchange is Exchange.NONE and sum(map(np.size, samples)) < LATENCY_SAMPLES_MAX:
            samples.append(by_size[largest].total_seconds.ravel())
    runs = []
    for size in devices:
        aggregates = StepAggregates.concatenate(aggregate_chunks[size])
        runs.append(_run(plan, size, aggregates, simpy_chunks.get(size), simpy_lengths, settings))
    latency = np.concatenate(samples)[:LATENCY_SAMPLES_MAX] if samples else None
    return runs, latency, timeline


class _BatchSource:
    """A plan's stream of batches: packs of its packing, or sequences drawn from the histogram."""

    def __init__(self, plan: ExecutionPlan, packing: Packing | None, settings: _Settings, purpose: int = 0):
        self.plan, self.settings = plan, settings
        self.rng, self.shuffle_rng = _rng(plan, settings.seed, purpose), _rng(plan, settings.seed, purpose + 1)
        self.pack_sampler = None
        if packing is not None:
            sorted_batches = plan.mode is ExecutionMode.SORTED
            self.pack_sampler = SortedBatchSampler(packing) if sorted_batches else PackSampler(packing)
        self.sequence_sampler = SequenceSampler(settings.histogram)

    def chunk(self, steps: int, devices: list[int]) -> tuple[dict[int, DeviceCosts], np.ndarray | None]:
        """Costs of the next `steps` steps by cluster size, and the sequence lengths drawn (None for packs)."""
        plan, settings, largest = self.plan, self.settings, devices[-1]
        if self.pack_sampler is not None:
            batches = self.pack_sampler.batches(self.rng, steps, largest, settings.batch_size)
            return {largest: price_batches(settings.cost_model, batches, plan.mode, steps, largest)}, None
        lengths = self.sequence_sampler.lengths_of(self.rng, (steps, largest, settings.batch_size))
        if plan.bucket_window:
            lengths = vts.bucket_by_length(lengths, plan.bucket_window, self.shuffle_rng)
        return _price_sequences(plan, lengths, devices, settings), lengths

    def items(self) -> ItemSource:
        """One device's batch as items drawn independently (only for plans with independent devices)."""
        plan, settings = self.plan, self.settings
        cost_model, batch_size = settings.cost_model, settings.batch_size
        if self.pack_sampler is not None:
            sampler = self.pack_sampler
            price = lambda items: price_batches(cost_model, sampler.batches_of(items, batch_size),  # noqa: E731
                                                plan.mode, 1, items.shape[0])
        elif plan.kind is PlanKind.VTS:
            sampler = self.sequence_sampler
            price = lambda items: vts.price_vts(cost_model, sampler.lengths[items][None], plan.stages)  # noqa: E731
        else:
            sampler = self.sequence_sampler
            price = lambda items: price_batches(cost_model, unpadded_batches(sampler.lengths[items]),  # noqa: E731
                                                plan.mode, 1, items.shape[0])
        return ItemSource(sampler.item_weights, sampler.item_features(), batch_size, price)

    def first_batch(self) -> np.ndarray:
        """The sequence lengths of the first device's first batch, as the per-device engines draw it."""
        return self.sequence_sampler.lengths_of(_rng(self.plan, self.settings.seed), (self.settings.batch_size,))


def _price_sequences(plan: ExecutionPlan, lengths: np.ndarray, devices: list[int], settings: _Settings):
    """Costs of sequences drawn for the largest cluster; an exchange re-deals them for each cluster size."""
    steps, largest = lengths.shape[:2]
    if plan.kind is PlanKind.VTS:
        return {largest: vts.price_vts(settings.cost_model, lengths, plan.stages)}
    if plan.exchange is Exchange.NONE:
        return {largest: price_batches(settings.cost_model, unpadded_batches(lengths), plan.mode, steps, largest)}
    return {size: price_batches(settings.cost_model, unpadded_batches(deal_sorted(lengths[:, :size])), plan.mode,
                                steps, size) for size in devices}


def _first_batch_timeline(lengths: np.ndarray, plan: ExecutionPlan, settings: _Settings) -> pd.DataFrame:
    return vts.pipeline_timeline(vts.stage_seconds(settings.cost_model, lengths, plan.stages), lengths,
                                 vts.buffer_samples(settings.cost_model))


def _use_simpy(plan: ExecutionPlan, devices: int, settings: _Settings) -> bool:
    if settings.engine != "auto":
        return settings.engine == "simpy"
    stages = vts.pipeline_stages(settings.cost_model, plan.stages) if plan.kind is PlanKind.VTS else 0
    events_per_device_step = 3 + settings.batch_size * stages * 3
    return devices * settings.steps * events_per_device_step <= SIMPY_EVENT_BUDGET


def _run(plan, devices, aggregates, simpy_costs, simpy_lengths, settings: _Settings,
         engine: str = "vectorized") -> PlanRun:
    cost_model, exchange_costs = settings.cost_model, settings.exchange_costs
    allreduce_seconds = float(cost_model.allreduce_seconds(devices))
    prepare_seconds, allgather_seconds = None, 0.0
    if plan.exchange is not Exchange.NONE and devices > 1:
        allgather_seconds = exchange_costs.allgather_seconds(devices)
        per_step = allgather_seconds + exchange_costs.sort_seconds(devices, settings.batch_size)
        prepare_seconds = np.full(settings.steps, per_step)
    if simpy_costs is not None:
        costs = DeviceCosts.concatenate(simpy_costs)
        stage_seconds = None
        if plan.kind is PlanKind.VTS:
            lengths = np.concatenate(simpy_lengths)[:, :devices]
            stage_seconds = vts.stage_seconds(cost_model, lengths, plan.stages)
        timeline = run_simpy(costs.total_seconds, allreduce_seconds, prepare_seconds, plan.exchange, stage_seconds,
                             vts.buffer_samples(cost_model))
    else:
        timeline = step_timeline(aggregates.slowest_device_seconds, aggregates.mean_device_seconds,
                                 allreduce_seconds, prepare_seconds, plan.exchange, engine)
    reference = None
    if plan.kind is PlanKind.VTS:
        reference = vts.padded_pipeline_seconds(cost_model, settings.histogram.max_length, settings.batch_size,
                                                plan.stages) + allreduce_seconds
    return PlanRun(plan, devices, aggregates, timeline, allgather_seconds, reference)
