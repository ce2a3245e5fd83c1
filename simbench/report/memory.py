"""The report's Memory section, and the strategies memory lets the Answer rank: a strategy whose largest
microbatch does not fit HBM (memory.csv's verdict `does not fit`) is simulated and shown, never ranked first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pandas as pd

from simbench.costmodels.layout import ParallelLayout
from simbench.sim.memory_fit import DOES_NOT_FIT, NEEDS_RECOMPUTE, memory_sentences


def run_layout(layout: ParallelLayout | None, memory: pd.DataFrame) -> ParallelLayout | None:
    """The layout the run was priced on: the scenario's (`layout`, None without `parallel`) with the ZeRO stage
    and recompute its memory check chose (memory.csv), which may have raised them."""
    if layout is None or memory.empty or "zero_stage" not in memory:
        return layout
    first = memory.iloc[0]
    return replace(layout, zero_stage=int(first["zero_stage"]), recompute=str(first["recompute"]))


def layout_cell(row) -> str:
    """The layout a strategy ran with, from its memory.csv row: `TP 1 x PP 1 x CP 1, ZeRO 3, recompute full, 2
    microbatches`; empty for a row without those columns (no HBM stated, an older report)."""
    values = [getattr(row, name, None) for name in ("tp", "pp", "cp", "zero_stage", "microbatches")]
    if any(value is None or value != value for value in values):
        return ""
    tp, pp, cp, zero_stage, microbatches = map(int, values)
    return (f"TP {tp} x PP {pp} x CP {cp}, ZeRO {zero_stage}, recompute {row.recompute}, {microbatches} "
            f"microbatch{'' if microbatches == 1 else 'es'}")


def rankable(scaling: pd.DataFrame, memory: pd.DataFrame) -> pd.DataFrame:
    """The rows of a table by strategy (scaling.csv, assumptions.csv) of the strategies that fit: all of them
    where the run has no memory table."""
    if memory.empty or "verdict" not in memory or "strategy" not in scaling:
        return scaling
    kept = scaling[~scaling["strategy"].isin(memory.loc[memory["verdict"] == DOES_NOT_FIT, "strategy"])]
    return kept if not kept.empty else scaling


def left_out_note(memory: pd.DataFrame) -> str | None:
    """One line naming the strategies the Answer skips because they do not fit."""
    if memory.empty or "verdict" not in memory:
        return None
    names = list(memory.loc[memory["verdict"] == DOES_NOT_FIT, "strategy"])
    if not names:
        return None
    return (f"**Not ranked:** {', '.join(names)} {'does' if len(names) == 1 else 'do'} not fit the GPU's memory "
            "(see Memory below), so the Answer and the winners skip "
            f"{'it' if len(names) == 1 else 'them'}.")


def memory_section(memory: pd.DataFrame, without_layout: bool,
                   markdown_table: Callable[[pd.DataFrame], str]) -> str | None:
    """## Memory: the check in words and memory.csv as a table (written by `markdown_table`); None without one.
    `without_layout`: the scenario has no `parallel` (a raised setting then ran it as a 1 x 1 x 1 layout)."""
    if memory.empty or "verdict" not in memory:
        return None
    raised = bool((memory["verdict"] == NEEDS_RECOMPUTE).any())
    shown = pd.DataFrame({
        "strategy": memory["strategy"],
        "tokens a microbatch": memory["tokens_per_microbatch"].map(lambda value: f"{int(value):,}"),
        "peak GiB per GPU": memory["peak_memory_gib"].map(lambda value: f"{value:.1f}"),
        "HBM GiB": memory["hbm_capacity_gib"].map(lambda value: f"{value:.0f}"),
        "verdict": memory["verdict"],
        "made to fit by": memory["made_to_fit"].map(lambda value: value if isinstance(value, str) and value else "-"),
        "ran as": [layout_cell(row) or "-" for row in memory.itertuples()],
    })
    return ("## Memory\n\n" + " ".join(memory_sentences(memory, one_gpu_layout=raised and without_layout,
                                                     replica_word="device" if without_layout else "replica"))
            + " Peak memory per GPU of each strategy's largest microbatch (costmodels.memory.peak_memory: "
            "parameters, gradients, optimizer state, activations, logits), at the fewest "
            + ("devices" if without_layout else "replicas") + " simulated, where ZeRO shards least (memory.csv).\n\n" + markdown_table(shown))
