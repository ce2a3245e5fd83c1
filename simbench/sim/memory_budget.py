"""The tokens a microbatch may hold on a layout without exceeding HBM, and the plans whose token budget is
`memory` resolved to that number, once, where a run knows its model, hardware and layout.

    >>> from simbench.sim.memory_budget import layout_token_budget
    >>> from simbench.costmodels.layout import ParallelLayout
    >>> layout_token_budget("llama-3.1-8b", "h100-sxm", ParallelLayout(tp=2, pp=2, microbatches=8), replicas=2)
    29513
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from simbench.costmodels.hardware import HardwareProfile, load_hardware
from simbench.costmodels.memory import max_tokens_per_microbatch
from simbench.costmodels.model import ModelSpec, get_model
from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.costmodels.layout import ParallelLayout
from simbench.sim.plans import ExecutionPlan

# Without a layout a device is one GPU: tp = pp = cp = 1, ParallelLayout's ZeRO stage and recompute (a device of
# several GPUs is priced on `Scenario.memory_layout`, tensor parallel over them).
SINGLE_GPU = ParallelLayout()


def layout_token_budget(model: ModelSpec | str, hardware: HardwareProfile | str, layout: ParallelLayout | None,
                        replicas: int) -> int:
    """`costmodels.memory.max_tokens_per_microbatch` on `layout` (None: one GPU; a scenario's memory is priced on
    `Scenario.memory_layout`) with `replicas` data-parallel replicas, the fewest a run simulates (ZeRO shards
    least there); 0 if the parameters alone do not fit."""
    model, layout = get_model(model), layout or SINGLE_GPU
    return max_tokens_per_microbatch(model, load_hardware(hardware), layout, replicas=replicas)


def memory_budget_tokens(model: ModelSpec | str, hardware: HardwareProfile | str, layout: ParallelLayout | None,
                         replicas: int) -> int:
    """`layout_token_budget`, refused when no token fits: a `memory` budget must be a number of tokens."""
    tokens = layout_token_budget(model, hardware, layout, replicas)
    if tokens == 0:
        profile = load_hardware(hardware)
        raise InputError(f"budget_tokens `memory`: {profile.name}'s {profile.hbm_capacity_bytes / 2**30:.1f} GiB of "
                         f"HBM (hbm_capacity_bytes) holds no token on {layout_terms(layout)}: the parameters, "
                         "gradients and optimizer state alone exceed it; shard more (tp, pp, zero_stage) or give "
                         "a number", parameter="hbm_capacity_bytes")
    return tokens


def resolved_plans(plans: Iterable[ExecutionPlan], histogram: LengthHistogram, model: ModelSpec | str,
                   hardware: HardwareProfile | str, layout: ParallelLayout | None,
                   replicas: int) -> tuple[ExecutionPlan, ...]:
    """Each plan with its `memory` budget resolved (`BatchSource.resolved`); memory is priced once, if asked."""
    memory = functools.cache(lambda: memory_budget_tokens(model, hardware, layout, replicas))
    return tuple(plan.source.resolved(plan, histogram, memory) for plan in plans)


def layout_terms(layout: ParallelLayout | None) -> str:
    """What the memory budget depends on, e.g. `TP 8 x PP 16 x CP 16, ZeRO 1, recompute selective`."""
    layout = layout or SINGLE_GPU
    if layout.gpus_per_replica == 1:
        return f"one GPU, ZeRO {layout.zero_stage}, recompute {layout.recompute}"
    return f"TP {layout.tp} x PP {layout.pp} x CP {layout.cp}, ZeRO {layout.zero_stage}, recompute {layout.recompute}"


def budget_sentence(tokens: int, layout: ParallelLayout | None) -> str:
    """The memory budget in words, as `validate` and the report's 4D section state it."""
    if tokens == 0:
        return (f"Memory allows no tokens a microbatch ({layout_terms(layout)}): the parameters and optimizer "
                "state alone exceed HBM")
    return f"Memory allows up to {tokens:,} tokens a microbatch ({layout_terms(layout)})"
