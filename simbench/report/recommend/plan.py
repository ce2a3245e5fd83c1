"""A run's strategies as a trainer would run them: batching family, rows, attention, memory settings, speed.

A `TrainingPlan` is stack-neutral: `stacks` writes it in each trainer's own options. It is read from a run's
tables as its report states them: the Decision block's row (real tokens per second per GPU with its spread,
real tokens per optimizer step, the memory verdict), the scaling table's step as the run sized it
(`rows_per_device_step`, `microbatches_per_step`) and the layout the run priced (the scenario's `parallel` with
memory.csv's ZeRO stage and recompute, which the `memory` policy may have raised).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

import pandas as pd

from simbench.costmodels.base import Attention, ExecutionMode, attention_of
from simbench.costmodels.layout import ParallelLayout
from simbench.costmodels.model import get_model
from simbench.errors import InputError
from simbench.experiment import ExperimentResult
from simbench.histogram import LengthHistogram
from simbench.report.decision import decision_choice, decision_devices, decision_table
from simbench.scenario import Scenario
from simbench.sim.exchange import Exchange
from simbench.sim.memory_fit import DOES_NOT_FIT, NEEDS_RECOMPUTE, memory_layout
from simbench.sim.plans import REFERENCE_PLAN, ExecutionPlan, PlanKind, parse_plan


class Family(str, Enum):
    """How a strategy batches and attends, the level at which trainers' options differ."""

    PAD_TO_MAX = "pad-to-max"  # every sequence padded to max_length (`none`)
    PAD_TO_LONGEST = "pad-to-longest"  # random batches padded to their longest (the HF collator's default)
    SORT = "sort"  # batches of the length-sorted dataset, padded to their longest
    GROUP_BY_LENGTH = "group-by-length"  # HF's length-grouped megabatches
    TOKEN_BUDGET = "token-budget"  # fairseq --max-tokens buckets
    GREEDY = "greedy"  # next-fit concatenation in the data's order, whole-row attention
    PACKS = "packs"  # a bin packer's rows, attention over the whole row (unmasked, or under a mask)
    PACKS_PER_DOCUMENT = "packs-per-document"  # packs with per-sequence (varlen) attention: packed-varlen
    UNPAD = "unpad"  # each batch's sequences flattened, no padding, per-sequence attention
    UNPAD_EXCHANGE = "unpad-exchange"  # un-padding with NVIDIA's padding exchange between GPUs
    VTS = "vts"  # Cerebras variable tensor shapes
    OTHER = "other"  # a plug-in plan


# How each family attends, in the attention implementation names transformers uses: per-document rows need
# a varlen kernel (flash attention with position_ids or cu_seqlens); the rest run dense attention, masked.
PER_DOCUMENT_ATTENTION = frozenset({Family.PACKS_PER_DOCUMENT, Family.UNPAD, Family.UNPAD_EXCHANGE})


def family_of(plan: ExecutionPlan) -> Family:
    """The family of a simulator plan, from its batch source, mode and packer."""
    if plan.mode is ExecutionMode.PACKED_VARLEN:
        return Family.PACKS_PER_DOCUMENT
    if plan.is_reference:
        return Family.PAD_TO_MAX
    if plan.kind == PlanKind.UNPAD:
        return Family.UNPAD if plan.exchange is Exchange.NONE else Family.UNPAD_EXCHANGE
    by_kind = {PlanKind.VTS: Family.VTS, "token-budget": Family.TOKEN_BUDGET, "group-by-length": Family.GROUP_BY_LENGTH}
    if plan.kind in by_kind:
        return by_kind[plan.kind]
    if plan.kind == PlanKind.PACKING:
        by_packer = {"sort": Family.SORT, "greedy": Family.GREEDY, "pad-to-longest": Family.PAD_TO_LONGEST}
        row_modes = (ExecutionMode.PADDED, ExecutionMode.PACKED_DENSE_MASK, ExecutionMode.PACKED_BLOCK_MASK)
        return by_packer.get(plan.packer, Family.PACKS if plan.mode in row_modes else Family.OTHER)
    return Family.PAD_TO_LONGEST if plan.name == "pad-to-longest" else Family.OTHER


@dataclass(frozen=True)
class TrainingPlan:
    """One strategy of a run at one cluster size, as the settings of a trainer would state it."""

    strategy: str  # the run's label, e.g. `lpfhp:max`
    family: Family
    packer: str | None
    gpus: int
    max_length: int
    rows_per_step: int  # rows (packs or sequences) a data-parallel rank's optimizer step holds, as the run sized it
    microbatches: int  # the run's microbatches per optimizer step (gradient accumulation, or a 4D replica's)
    per_document_attention: bool  # varlen attention within each sequence, else dense attention over the row
    recompute: str | None  # none, selective or full; None: plain data parallel, nothing recomputed
    zero_stage: int | None  # None: plain data parallel (an all-reduce of the gradients)
    gpus_per_replica: int  # GPUs of one data-parallel replica (tensor x pipeline x context parallel)
    tp: int  # 1 where the run gives no layout (a replica's split is then unknown)
    pp: int
    cp: int
    virtual_stages: int
    cp_sharding: str  # how a row's tokens are cut over the context-parallel ranks (zigzag without a layout)
    overlap_gradient_sync: bool
    tokens_per_s_per_gpu: float  # real tokens, simulated
    relative_error: float | None  # the Decision block's spread of the throughput, relative; None: not reported
    real_tokens_per_step: float | None  # the whole cluster's real tokens per optimizer step, simulated
    memory_verdict: str | None  # memory.csv's: fits, needs recompute, does not fit; None: not checked
    peak_memory_gib: float | None = None  # per GPU, of its largest microbatch at the settings the run priced
    hbm_capacity_gib: float | None = None
    attention: Attention | None = None  # how the run priced its attention; None: a plan the run does not name

    @property
    def data_parallel(self) -> int:
        """Data-parallel replicas: the GPUs over one replica's."""
        return max(1, self.gpus // self.gpus_per_replica)

    @property
    def rows_per_device(self) -> int:
        """Rows a rank takes per microbatch (a trainer's per-device batch size, every microbatch alike): the
        step's rows over the run's microbatches; where they do not divide evenly (the run cuts a step by token
        slots), the largest whole share of the step's rows no larger than the run's mean microbatch, so that a
        step holds the rows (and tokens) the run simulated and a microbatch no more token slots than the run
        allowed one (sizing counts microbatches from the step's slots over what a microbatch may hold)."""
        mean = max(1, self.rows_per_step // self.microbatches)
        return max(rows for rows in range(1, mean + 1) if self.rows_per_step % rows == 0)

    @property
    def accumulation_steps(self) -> int:
        """A trainer's gradient accumulation steps: the run's microbatches where its step divides evenly."""
        return self.rows_per_step // self.rows_per_device

    @property
    def fits(self) -> bool | None:
        """Whether its largest microbatch fits HBM at the settings the run priced; None: not checked."""
        return None if self.memory_verdict is None else self.memory_verdict != DOES_NOT_FIT


@dataclass(frozen=True)
class RunFacts:
    """What every plan of a run shares and a recommendation states as assumed."""

    scenario: str
    model: str
    is_decoder: bool
    hardware: str
    hardware_overridden: bool
    steps: int
    seed: int
    shapes: str
    # The layout the run priced: the scenario's `parallel` with the ZeRO stage and recompute memory.csv states;
    # a 1 x 1 x 1 one where the `memory` policy raised a scenario without `parallel`; None: plain data parallel.
    layout: ParallelLayout | None = None
    layout_raised: bool = False  # the `memory` policy raised the scenario's ZeRO stage or recompute
    compare_at: str | None = None  # how the run sized its strategies' steps; None: a report from before


def run_facts(scenario: Scenario, tables: ExperimentResult | None = None) -> RunFacts:
    layout, raised = priced_layout(scenario, tables.memory if tables is not None else pd.DataFrame())
    scaling = tables.scaling if tables is not None else pd.DataFrame()
    compare_at = str(scaling["compare_at"].iloc[0]) if "compare_at" in scaling and not scaling.empty else None
    return RunFacts(scenario=scenario.name, model=scenario.model if isinstance(scenario.model, str) else "custom",
                    is_decoder=get_model(scenario.model).is_decoder, hardware=scenario.hardware.profile,
                    hardware_overridden=bool(scenario.hardware.overrides), steps=scenario.steps, seed=scenario.seed,
                    shapes=scenario.shapes, layout=layout, layout_raised=raised, compare_at=compare_at)


def priced_layout(scenario: Scenario, memory: pd.DataFrame) -> tuple[ParallelLayout | None, bool]:
    """The layout the run priced, and whether its `memory` policy raised it (a strategy `needs recompute`, as
    the report's Memory section reads it): memory.csv's ZeRO stage and recompute on the layout memory was
    checked on; the scenario's own layout (None: plain data parallel) where no memory was checked or a scenario
    without `parallel` was not raised (the plain path then priced it)."""
    if memory.empty or "verdict" not in memory:
        return scenario.layout, False
    raised = bool((memory["verdict"] == NEEDS_RECOMPUTE).any())
    if scenario.layout is None and not raised:
        return None, False
    first = memory.iloc[0]
    return replace(memory_layout(scenario.layout, scenario.gpus_per_replica), zero_stage=int(first.zero_stage),
                   recompute=str(first.recompute)), raised


def gpu_counts(scaling: pd.DataFrame) -> dict[int, int]:
    """Each GPU count the run simulated and the device count (replicas, with a layout) it stands for."""
    gpus = scaling["gpus"] if "gpus" in scaling else scaling["devices"]
    return {int(count): int(devices) for count, devices in sorted(zip(gpus, scaling["devices"]))}


def rows_at(tables: ExperimentResult, histogram: LengthHistogram,
            gpus: int | None) -> tuple[int, list[dict], str | None]:
    """The GPU count asked for (the Decision block's when None: the smallest simulated), the Decision table's
    rows there in its order (those that fit first, fastest first), each with its scaling row's columns, and the
    strategy the Decision block names to use there (`decision.decision_choice`; None where none fits memory)."""
    counts = gpu_counts(tables.scaling)
    if not counts:
        raise InputError("the run has no scaling rows to recommend from")
    if gpus is None:
        devices = decision_devices(tables.scaling)
        gpus = next(count for count, of in counts.items() if of == devices)
    if gpus not in counts:
        raise InputError(f"the run simulated {', '.join(f'{count:,}' for count in counts)} GPUs, not {gpus:,}; "
                         "pass one of them", parameter="gpus")
    devices = counts[gpus]
    decision = decision_table(tables, histogram, devices)
    scaling = tables.scaling[tables.scaling["devices"] == devices]
    step_columns = [column for column in ("strategy", "throughput_noise", "rows_per_device_step",
                                          "microbatches_per_step", "budget_tokens") if column in scaling]
    merged = decision.merge(scaling[step_columns], on="strategy", how="left")
    rows = [{key: (None if _missing(value) else value) for key, value in row.items()}
            for row in merged.astype(object).to_dict("records")]
    return gpus, rows, decision_choice(decision)


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def training_plan(row: dict, scenario: Scenario, histogram: LengthHistogram, facts: RunFacts) -> TrainingPlan:
    """The plan of one Decision row (with its scaling columns): the step as the run sized it where the report
    states it, else the scenario's batch size and microbatches; the layout the run priced (`facts.layout`)."""
    plan = plan_of(row["strategy"], scenario)
    layout = facts.layout
    microbatches = int(row.get("microbatches_per_step") or (layout.microbatches if layout else 1))
    sized_rows = int(row.get("rows_per_device_step") or scenario.device_batch_size)
    # A batch source counts its step in its own units (group-by-length: max_length-slot units); a trainer counts
    # the rows it draws.
    drawn = plan.source.rows_per_device_step(plan, histogram, sized_rows) if plan is not None else sized_rows
    family = family_of(plan) if plan is not None else Family.OTHER
    value = float(row["tokens_per_s_per_gpu"])
    spread = row.get("tokens_per_s_per_gpu_spread")
    if spread is None and row.get("throughput_noise") is not None:
        spread = value * float(row["throughput_noise"])
    return TrainingPlan(
        strategy=row["strategy"], family=family, packer=plan.packer if plan is not None else None,
        gpus=int(row["gpus"]), max_length=histogram.max_length, rows_per_step=max(1, int(drawn)),
        microbatches=max(1, microbatches), per_document_attention=family in PER_DOCUMENT_ATTENTION,
        recompute=layout.recompute if layout else None, zero_stage=layout.zero_stage if layout else None,
        gpus_per_replica=scenario.gpus_per_device, tp=layout.tp if layout else 1, pp=layout.pp if layout else 1,
        cp=layout.cp if layout else 1, virtual_stages=layout.virtual_stages if layout else 1,
        cp_sharding=layout.cp_sharding if layout else "zigzag",
        overlap_gradient_sync=bool(layout and layout.overlap_gradient_sync),
        tokens_per_s_per_gpu=value, relative_error=None if spread is None or not value else float(spread) / value,
        real_tokens_per_step=None if row.get("real_tokens_per_step") is None else float(row["real_tokens_per_step"]),
        memory_verdict=row.get("memory_verdict"), peak_memory_gib=row.get("peak_memory_gib"),
        hbm_capacity_gib=row.get("hbm_capacity_gib"),
        attention=attention_of(plan.mode) if plan is not None and plan.kind != PlanKind.VTS else None)


def plan_of(label: str, scenario: Scenario) -> ExecutionPlan | None:
    """The simulator plan behind a report's label: the scenario's strategy of that label, or a plan the run adds
    itself (padding) named by it; None for a label neither names."""
    plans = {spec.label: spec.plan() for spec in scenario.strategies}
    if label in plans:
        return plans[label]
    if label == REFERENCE_PLAN.name:
        return REFERENCE_PLAN
    try:
        return parse_plan(label)
    except InputError:
        return None
