"""The report's footing: each strategy's real tokens per optimizer step, how its step was sized, and a
warning wherever strategies are not on equal footing (`simbench.sim.footing`)."""

from __future__ import annotations

import pandas as pd

from simbench.report.units import DEVICE, DeviceUnit
from simbench.sim.footing import FLAG_ABOVE, TOLERANCE, footing_of_table

RULE = {"equal-tokens": f"every strategy's step sized to the same expected real tokens, within {TOLERANCE:.0%} of "
                        "each other (the scenario's step at the best efficiency any strategy's full-length rows "
                        "reach, grown by a whole factor where whole rows cannot come close); each strategy reaches "
                        "it with its own rows, token budget and microbatches (gradient accumulation), a microbatch "
                        "never holding more than memory allows or the scenario's own microbatch, whichever is more",
        "as-configured": f"every strategy at the scenario's batch_size as given; strategies more than "
                         f"{FLAG_ABOVE:.0%} apart in real tokens per step are flagged"}


def footing_warnings(scaling: pd.DataFrame) -> list[str]:
    """Each way the run's strategies are not on equal footing, in words."""
    footing = footing_of_table(scaling)
    return footing.warnings() if footing is not None else []


def footing_section(scaling: pd.DataFrame, unit: DeviceUnit = DEVICE) -> str | None:
    """`## Footing`: the rule, and per strategy its rows, microbatches, budget and real tokens per step."""
    footing = footing_of_table(scaling)
    if footing is None:
        return None
    largest = scaling["devices"].max()
    at_largest = scaling[scaling["devices"] == largest].set_index("strategy")
    rows = []
    for name, plan in footing.plans.items():
        rows.append(f"| {name} | {plan.rows:,} | {plan.microbatches:,} | "
                    f"{'-' if plan.budget_tokens is None else f'{plan.budget_tokens:,}'} | "
                    f"{plan.expected_real_tokens_per_step:,.0f} | "
                    f"{at_largest.loc[name, 'real_tokens_per_device_step']:,.0f} | "
                    f"{at_largest.loc[name, 'real_tokens_per_step']:,.0f} |")
    return (f"## Footing: real tokens per optimizer step\n\n`compare_at: {footing.compare_at}`: "
            f"{RULE[footing.compare_at]}. Expected real tokens per {unit.name} step differ by "
            f"{footing.spread:.1%} at most.\n\n"
            f"| strategy | rows a {unit.name} step | microbatches a step | token budget a microbatch | expected real "
            f"tokens a {unit.name} step | simulated, {unit.count(largest)} | real tokens an optimizer step, "
            f"{unit.count(largest)} |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows)
            + f"\n\nRows: packs for packers, sequences for padding, sorting, un-padding and length grouping (whose "
              "rows are max_length-slot units: it takes the sequences whose mean length fills them), one budget batch "
              "for token-budget. A run reproduces a strategy's step with these rows as `batch_size` and these "
              "microbatches (scaling.csv: rows_per_device_step, microbatches_per_step, budget_tokens).")
