"""A run's strategies as a trainer would run them: batching family, rows, attention, memory settings, speed.

A `TrainingPlan` is stack-neutral: `stacks` writes it in each trainer's own options. It is read from a run's
summary record (summary.json) and scenario; the fields another column of the report may carry later (rows per
device, accumulation steps, recomputation, ZeRO stage, whether it fits) are read with `.get` first, then from
the scenario as the run simulated it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.model import get_model
from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.scenario import Scenario
from simbench.sim.exchange import Exchange
from simbench.sim.plans import REFERENCE_PLAN, ExecutionPlan, PlanKind, parse_plan


class Family(str, Enum):
    """How a strategy batches and attends, the level at which trainers' options differ."""

    PAD_TO_MAX = "pad-to-max"  # every sequence padded to max_length (`none`)
    PAD_TO_LONGEST = "pad-to-longest"  # random batches padded to their longest (the HF collator's default)
    SORT = "sort"  # batches of the length-sorted dataset, padded to their longest
    GROUP_BY_LENGTH = "group-by-length"  # HF's length-grouped megabatches
    TOKEN_BUDGET = "token-budget"  # fairseq --max-tokens buckets
    GREEDY = "greedy"  # next-fit concatenation in the data's order, whole-row attention
    PACKS = "packs"  # a bin packer's rows, attention over the whole row with a block-diagonal mask
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
        return by_packer.get(plan.packer, Family.PACKS if plan.mode is ExecutionMode.PADDED else Family.OTHER)
    return Family.PAD_TO_LONGEST if plan.name == "pad-to-longest" else Family.OTHER


@dataclass(frozen=True)
class TrainingPlan:
    """One strategy of a run at one cluster size, as the settings of a trainer would state it."""

    strategy: str  # the run's label, e.g. `lpfhp:max`
    family: Family
    packer: str | None
    gpus: int
    max_length: int
    rows_per_device: int  # rows (packs or sequences) a data-parallel rank takes per microbatch
    accumulation_steps: int  # microbatches per optimizer step
    per_document_attention: bool  # varlen attention within each sequence, else dense attention over the row
    recompute: str | None  # none, selective or full; None: the run did not say
    zero_stage: int | None  # None: plain data parallel (an all-reduce of the gradients)
    gpus_per_replica: int  # GPUs of one data-parallel replica (tensor x pipeline x context parallel)
    tp: int  # 1 where the run gives no layout (a replica's split is then unknown)
    pp: int
    cp: int
    virtual_stages: int
    cp_sharding: str  # how a row's tokens are cut over the context-parallel ranks (zigzag without a layout)
    overlap_gradient_sync: bool
    tokens_per_s_per_gpu: float  # real tokens, simulated
    relative_error: float | None  # one standard error of the throughput, relative; None: not reported
    fits: bool | None  # whether its largest step fits HBM; None: the run did not say

    @property
    def data_parallel(self) -> int:
        """Data-parallel replicas: the GPUs over one replica's."""
        return max(1, self.gpus // self.gpus_per_replica)


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


def run_facts(scenario: Scenario) -> RunFacts:
    return RunFacts(scenario=scenario.name, model=scenario.model if isinstance(scenario.model, str) else "custom",
                    is_decoder=get_model(scenario.model).is_decoder, hardware=scenario.hardware.profile,
                    hardware_overridden=bool(scenario.hardware.overrides), steps=scenario.steps, seed=scenario.seed,
                    shapes=scenario.shapes)


def rows_at(summary: dict, gpus: int | None) -> tuple[int, list[dict]]:
    """The GPU count asked for (the largest simulated when None) and the scaling rows of that count."""
    scaling = summary.get("scaling", [])
    counts = sorted({int(row.get("gpus", row["devices"])) for row in scaling})
    if not counts:
        raise InputError("the run has no scaling rows to recommend from")
    chosen = counts[-1] if gpus is None else gpus
    if chosen not in counts:
        raise InputError(f"the run simulated {', '.join(f'{count:,}' for count in counts)} GPUs, not {chosen:,}; "
                         "pass one of them", parameter="gpus")
    return chosen, [row for row in scaling if int(row.get("gpus", row["devices"])) == chosen]


def winner(summary: dict, rows: list[dict]) -> str:
    """The strategy the run chose at these rows' cluster size: the first (padding's) group of summary.json's
    `winners`, else the highest real tokens per second per GPU among the strategies that fit."""
    devices = int(rows[0]["devices"])
    for entry in summary.get("winners", []):
        if int(entry.get("devices", -1)) == devices and any(row["strategy"] == entry.get("fastest") for row in rows):
            return entry["fastest"]
    return ranked(rows)[0]["strategy"]


def ranked(rows: list[dict]) -> list[dict]:
    """The rows fastest first (real tokens per second per GPU), those that do not fit left out unless none does."""
    fitting = [row for row in rows if row.get("fits") is not False] or rows
    return sorted(fitting, key=lambda row: (-float(row["tokens_per_s_per_gpu"]), row["strategy"]))


def training_plan(row: dict, scenario: Scenario, histogram: LengthHistogram) -> TrainingPlan:
    """The plan of one scaling row: the row's own batch and memory columns where it has them, else the scenario's."""
    plan = plan_of(row["strategy"], scenario)
    layout = scenario.layout
    microbatches = layout.microbatches if layout else 1
    # A device draws every microbatch's rows in a step; a trainer's batch size is one microbatch's.
    drawn = (plan.source.rows_per_device_step(plan, histogram, scenario.device_batch_size) if plan is not None
             else scenario.device_batch_size)
    family = family_of(plan) if plan is not None else Family.OTHER
    error = row.get("throughput_noise")
    return TrainingPlan(
        strategy=row["strategy"], family=family, packer=plan.packer if plan is not None else None,
        gpus=int(row.get("gpus", row["devices"])), max_length=histogram.max_length,
        rows_per_device=int(row.get("rows_per_device") or max(1, drawn // microbatches)),
        accumulation_steps=int(row.get("accumulation_steps") or microbatches),
        per_document_attention=family in PER_DOCUMENT_ATTENTION,
        recompute=row.get("recompute", layout.recompute if layout else None),
        zero_stage=row.get("zero_stage", layout.zero_stage if layout else None),
        gpus_per_replica=scenario.gpus_per_device, tp=layout.tp if layout else 1, pp=layout.pp if layout else 1,
        cp=layout.cp if layout else 1, virtual_stages=layout.virtual_stages if layout else 1,
        cp_sharding=layout.cp_sharding if layout else "zigzag",
        overlap_gradient_sync=bool(layout and layout.overlap_gradient_sync),
        tokens_per_s_per_gpu=float(row["tokens_per_s_per_gpu"]),
        relative_error=None if error is None else float(error), fits=row.get("fits"))


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
