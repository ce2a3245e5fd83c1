"""Whether each strategy's largest microbatch fits HBM, and the memory settings a run is priced at: one check for
every scenario, with or without a 4D layout, shared by `validate` and `run`.

    >>> from simbench.costmodels.layout import ParallelLayout
    >>> from simbench.histogram import LengthHistogram
    >>> from simbench.sim.memory_fit import fit_memory
    >>> from simbench.sim.plans import parse_plans
    >>> histogram = LengthHistogram([0] * 8191 + [100], name="long")
    >>> fit = fit_memory("llama-3.1-8b", "h100-sxm", {"none": parse_plans(["none"])[0]}, histogram, batch_size=1,
    ...                  layout=ParallelLayout(zero_stage=3), replicas=8, policy="auto")
    >>> fit.priced.recompute, fit.table()[["strategy", "verdict", "made_to_fit"]].values.tolist()
    ('none', [['none', 'fits', '']])

A scenario without `parallel` is, for memory, a 1 x 1 x 1 layout with `ParallelLayout`'s ZeRO stage and
recompute (with `gpus_per_replica` above 1, tensor parallel over those GPUs: each GPU holds 1 / tp of the
weights and activations). Each strategy is checked at the microbatch it runs: where a run sized its step
(`compare_at: equal-tokens`), its rows per device step over its microbatches per step, rounded up, else the
scenario's `batch_size`. That microbatch's largest form in tokens (`BatchSource.largest_microbatch_tokens`)
gives its peak memory per GPU (`costmodels.memory.peak_memory`, with the strategy's microbatches in flight on
a pipeline) at the fewest replicas the run simulates, where ZeRO shards least.

The `memory` policy says what a run does about a strategy that does not fit: `refuse` marks it "does not fit"
(never ranked first); `recompute` raises activation recomputation (none, selective, full) until it fits;
`auto` does that at each ZeRO stage from the scenario's up to 3 (FSDP), where replicas or context-parallel ranks
give ZeRO something to shard over: the way trainers make a model fit (Hugging Face Trainer: gradient
checkpointing and FSDP; Megatron-LM: --recompute-granularity and the distributed optimizer). One setting prices
the whole run, so the strategies compare on the same footing: the least one under which every strategy that can
fit does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

import pandas as pd

from simbench.costmodels.hardware import HardwareProfile, load_hardware
from simbench.costmodels.layout import RECOMPUTE, ZERO_STAGES, ParallelLayout
from simbench.costmodels.memory import GIB, peak_memory
from simbench.costmodels.model import ModelSpec, get_model
from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.sim.plans import ExecutionPlan
from simbench.validation import DEVICES_MAX

MEMORY_POLICIES = ("refuse", "recompute", "auto")
# Trainers make a model fit rather than stop (see the module docstring); `refuse` is for checking a configuration
# exactly as written.
DEFAULT_MEMORY_POLICY = "auto"
FITS, NEEDS_RECOMPUTE, DOES_NOT_FIT = "fits", "needs recompute", "does not fit"
# memory.csv's columns, in order (documented in docs/scenarios.md, read by the summary):
MEMORY_COLUMNS = (
    "strategy",  # the strategy's label
    "tokens_per_microbatch",  # token slots of its largest microbatch (BatchSource.largest_microbatch_tokens)
    "rows_per_microbatch",  # rows of that microbatch: rows per device step over microbatches per step, rounded up
    "microbatches",  # microbatches a device step runs as (gradient accumulation, or a pipeline's)
    "peak_memory_gib",  # peak memory per GPU of that microbatch at the settings the run is priced at
    "hbm_capacity_gib",  # the hardware profile's HBM per GPU
    "verdict",  # fits (as the scenario says) / needs recompute (fits only as memory raised it) / does not fit
    "made_to_fit",  # what it needs beyond the scenario's settings, e.g. `recompute selective`; empty otherwise
    "tp", "pp", "cp",  # the layout a replica's GPUs split the model and a microbatch's tokens over
    "zero_stage", "recompute",  # the settings the run is priced at (the same for every strategy)
    "replicas",  # the data-parallel replicas the check is at: the fewest simulated
)


@dataclass(frozen=True)
class MemoryFit:
    """Every strategy's largest microbatch against HBM, and the settings that price the run."""

    model: ModelSpec
    hardware: HardwareProfile
    configured: ParallelLayout  # the scenario's layout, or the 1 x 1 x 1 one a scenario without `parallel` is
    priced: ParallelLayout  # `configured` with the ZeRO stage and recompute the policy chose
    replicas: int
    policy: str
    tokens: Mapping[str, int]  # label -> tokens of its largest microbatch
    least: Mapping[str, ParallelLayout | None]  # label -> the first setting it fits under; None: none
    rows: Mapping[str, int]  # label -> rows of its largest microbatch
    microbatches: Mapping[str, int]  # label -> microbatches its device step runs as

    @property
    def raised(self) -> bool:
        """Whether the policy changed the scenario's settings."""
        return self.priced != self.configured

    def verdict(self, label: str) -> str:
        least = self.least[label]
        return DOES_NOT_FIT if least is None else FITS if least == self.configured else NEEDS_RECOMPUTE

    def does_not_fit(self) -> list[str]:
        return [label for label in self.tokens if self.verdict(label) == DOES_NOT_FIT]

    def sentences(self) -> list[str]:
        """The check in words, as `validate` prints it and the report's Memory section states it."""
        return memory_sentences(self.table(), one_gpu_layout=False)

    def table(self) -> pd.DataFrame:
        rows = []
        for label, tokens in self.tokens.items():
            peak = self.peak_bytes(label, self.priced)
            least = self.least[label]
            rows.append({"strategy": label, "tokens_per_microbatch": tokens, "rows_per_microbatch": self.rows[label],
                         "microbatches": self.microbatches[label], "peak_memory_gib": peak / GIB,
                         "hbm_capacity_gib": self.hardware.hbm_capacity_bytes / GIB, "verdict": self.verdict(label),
                         "made_to_fit": settings_change(self.configured, least) if least is not None else "",
                         "tp": self.priced.tp, "pp": self.priced.pp, "cp": self.priced.cp,
                         "zero_stage": self.priced.zero_stage, "recompute": self.priced.recompute,
                         "replicas": self.replicas})
        return pd.DataFrame(rows, columns=list(MEMORY_COLUMNS))

    def peak_bytes(self, label: str, layout: ParallelLayout) -> float:
        """Peak memory per GPU of the strategy's largest microbatch on `layout`, with its own microbatches."""
        return _peak_bytes(self.model, layout, self.tokens[label], self.microbatches[label], self.replicas)


def memory_sentences(table: pd.DataFrame, one_gpu_layout: bool, replica_word: str = "replica") -> list[str]:
    """What a memory table (`MemoryFit.table`, or memory.csv read back) says: the largest peak, the settings
    raised and for whom, the strategies that do not fit. `one_gpu_layout`: the run without `parallel` was priced
    as a 1 x 1 x 1 layout to price them. `replica_word`: what a data-parallel rank is called where the report
    speaks of it ("device" without a layout)."""
    if table.empty:
        return []
    first = table.iloc[0]
    where = (f"per GPU at {int(first.replicas):,} {replica_word}{'s' if first.replicas > 1 else ''}, "
             f"ZeRO {int(first.zero_stage)}, recompute {first.recompute}")
    fitting = table[table["verdict"] != DOES_NOT_FIT]
    lines = []
    if not fitting.empty:
        top = fitting.loc[fitting["peak_memory_gib"].idxmax()]
        lines.append(("Every strategy's largest microbatch fits in" if len(fitting) == len(table) else
                      "The largest microbatch of each strategy that fits stays within")
                     + f" {first.hbm_capacity_gib:.0f} GiB of HBM {where}: the most is {top.strategy}'s, "
                     f"{int(top.tokens_per_microbatch):,} tokens in {top.peak_memory_gib:.1f} GiB.")
    raised = table[table["verdict"] == NEEDS_RECOMPUTE]
    if not raised.empty:
        needs = "; ".join(f"{row.strategy} needs {row.made_to_fit}" for row in raised.itertuples())
        lines.append(f"Memory raised the scenario's settings to ZeRO {int(first.zero_stage)}, recompute "
                     f"{first.recompute} for every strategy, so that they compare on one footing ({needs})"
                     + ("; without `parallel`, the run was priced as a 1 x 1 x 1 layout (tp, pp, cp 1: devices count "
                        "GPUs, the same number), whose replica model prices recomputation and ZeRO" if one_gpu_layout
                        else "") + ".")
    for row in table[table["verdict"] == DOES_NOT_FIT].itertuples():
        lines.append(f"{row.strategy} does not fit: its largest microbatch of {int(row.tokens_per_microbatch):,} "
                     f"tokens needs {row.peak_memory_gib:.1f} GiB {where}; it is simulated but never ranked first.")
    return lines


def step_microbatch(plan: ExecutionPlan, batch_size: int, microbatches: int) -> tuple[int, int]:
    """Rows of the largest microbatch `plan` runs, and the microbatches of its device step: its own where a run
    sized it (rows per device step over microbatches per step, rounded up, as the simulator cuts a step),
    else the scenario's `batch_size` rows in `microbatches`."""
    if plan.sizing is None:
        return batch_size, microbatches
    return -(-plan.sizing.rows // plan.sizing.microbatches), plan.sizing.microbatches


def _peak_bytes(model: ModelSpec, layout: ParallelLayout, tokens: int, microbatches: int, replicas: int) -> float:
    # A pipeline keeps up to its microbatches in flight: the strategy's own count, not the layout's.
    return peak_memory(model, replace(layout, microbatches=microbatches), tokens_per_microbatch=tokens,
                       replicas=replicas).peak_bytes


def memory_layout(layout: ParallelLayout | None, gpus_per_replica: int) -> ParallelLayout:
    """The layout memory is checked on: the scenario's, else one GPU (tensor parallel over `gpus_per_replica`)."""
    return layout if layout is not None else ParallelLayout(tp=gpus_per_replica)


def settings(layout: ParallelLayout) -> str:
    return f"ZeRO {layout.zero_stage}, recompute {layout.recompute}"


def settings_change(configured: ParallelLayout, chosen: ParallelLayout) -> str:
    """What `chosen` raises over `configured`, e.g. `ZeRO 3, recompute full`; empty if nothing."""
    parts = [f"ZeRO {chosen.zero_stage}"] if chosen.zero_stage != configured.zero_stage else []
    parts += [f"recompute {chosen.recompute}"] if chosen.recompute != configured.recompute else []
    return ", ".join(parts)


def _settings_tried(layout: ParallelLayout, policy: str, replicas: int, can_raise: bool) -> Iterator[ParallelLayout]:
    """The settings the policy tries, in order: the scenario's, then more recomputation at each ZeRO stage."""
    yield layout
    if policy == "refuse" or not can_raise:
        return
    # ZeRO shards over replicas x cp: with one of each it saves nothing.
    sharded = policy == "auto" and replicas * layout.cp > 1
    for zero_stage in ZERO_STAGES[layout.zero_stage:] if sharded else (layout.zero_stage,):
        for recompute in RECOMPUTE[RECOMPUTE.index(layout.recompute):]:
            if (zero_stage, recompute) != (layout.zero_stage, layout.recompute):
                yield replace(layout, zero_stage=zero_stage, recompute=recompute)


def fit_memory(model: ModelSpec | str, hardware: HardwareProfile | str, plans: Mapping[str, ExecutionPlan],
               histogram: LengthHistogram, *, batch_size: int, layout: ParallelLayout, replicas: int,
               policy: str = DEFAULT_MEMORY_POLICY, can_raise: bool = True) -> MemoryFit:
    """Each plan's (by label, `memory` budgets resolved) largest microbatch (`step_microbatch`: its own where a
    run sized it, else `batch_size` rows) against the profile's HBM on `layout` with `replicas` replicas, and the
    settings the run is priced at; InputError saying what would fit when no plan fits under any setting the
    policy may choose. `can_raise` False: the run can only be priced as configured (a replica of several GPUs
    without `parallel`)."""
    model, hardware = get_model(model), load_hardware(hardware)
    capacity = hardware.hbm_capacity_bytes
    steps = {label: step_microbatch(plan, batch_size, layout.microbatches) for label, plan in plans.items()}
    tokens = {label: plan.source.largest_microbatch_tokens(plan, histogram, steps[label][0])
              for label, plan in plans.items()}
    tried = list(_settings_tried(layout, policy, replicas, can_raise))

    def first_fit(label: str) -> ParallelLayout | None:
        return next((each for each in tried
                     if _peak_bytes(model, each, tokens[label], steps[label][1], replicas) <= capacity), None)

    least = {label: first_fit(label) for label in tokens}
    fitting = [tried.index(each) for each in least.values() if each is not None]
    if not fitting:
        error = _nothing_fits(model, hardware, plans, histogram, tokens, batch_size, layout, replicas, tried[-1],
                              {label: count for label, (_, count) in steps.items()})
        if policy != "auto" and can_raise:
            # Where `memory: auto` makes it fit on these GPUs, that is the one key to change.
            try:
                auto = fit_memory(model, hardware, plans, histogram, batch_size=batch_size, layout=layout,
                                  replicas=replicas, policy="auto")
            except InputError:
                raise error from None
            raise InputError(f"{error.message.split('; ')[0]}; it fits with `memory: auto` ({settings(auto.priced)})",
                             parameter="memory")
        raise error
    return MemoryFit(model, hardware, layout, tried[max(fitting)], replicas, policy, tokens, least,
                     {label: rows for label, (rows, _) in steps.items()},
                     {label: count for label, (_, count) in steps.items()})


def _nothing_fits(model: ModelSpec, hardware: HardwareProfile, plans: Mapping[str, ExecutionPlan],
                  histogram: LengthHistogram, tokens: Mapping[str, int], batch_size: int, layout: ParallelLayout,
                  replicas: int, last: ParallelLayout, microbatches: Mapping[str, int]) -> InputError:
    """What the smallest strategy needs, and the settings that would fit it: ZeRO 3 from some GPU count, or full
    recompute at a smaller batch size. The error names the key to change first."""
    label = min(tokens, key=lambda each: (tokens[each], each))
    peak = _peak_bytes(model, last, tokens[label], microbatches[label], replicas)
    gpus = replicas * layout.gpus_per_replica
    capacity = hardware.hbm_capacity_bytes
    text = (f"no strategy fits {hardware.name}'s {capacity / GIB:.0f} GiB of HBM per GPU: {label}'s largest "
            f"microbatch ({tokens[label]:,} tokens) needs {peak / GIB:.0f} GiB per GPU on {gpus:,} "
            f"GPU{'s' if gpus > 1 else ''} ({settings(last)})")
    ways, key = [], None
    # ZeRO 3 over more replicas, with the least recomputation that needs the fewest GPUs.
    sharded = [(count, recompute) for recompute in RECOMPUTE[RECOMPUTE.index(layout.recompute):]
               for count in [next((count for count in (2**power for power in range(21)) if count >= replicas
                                   and count * layout.gpus_per_replica <= DEVICES_MAX
                                   and peak_memory(model, replace(layout, zero_stage=3, recompute=recompute),
                                                   tokens_per_microbatch=tokens[label],
                                                   replicas=count).peak_bytes <= capacity), None)]
               if count is not None]
    if sharded:
        count, recompute = min(sharded, key=lambda each: (each[0], RECOMPUTE.index(each[1])))
        ways.append(f"with ZeRO 3 (parallel.zero_stage) and recompute {recompute} from "
                    f"{count * layout.gpus_per_replica:,} GPUs (devices)")
        key = "devices"
    full = replace(layout, recompute="full")
    smaller = [rows for rows in range(batch_size - 1, 0, -1)
               if peak_memory(model, full, tokens_per_microbatch=plans[label].source.largest_microbatch_tokens(
                   plans[label], histogram, rows), replicas=replicas).peak_bytes <= capacity]
    if smaller:
        ways.append(f"with recompute full at batch_size {smaller[0]}")
        key = key or "batch_size"
    if ways:
        text += "; it fits " + ", or ".join(ways)
    else:
        text += "; shard the model (parallel: tp, pp) or choose hardware with more HBM"
    return InputError(text, parameter=key or "parallel")
