"""The report's "What could change the answer": the smallest cluster under the assumptions that could change its
winner (ideal kernels, shapes all seen or all new), each against a paired simulation of that cluster as run."""

from __future__ import annotations

import pandas as pd

from simbench.report.baseline import baseline_of, over_words
from simbench.report.markdown import markdown_table
from simbench.report.precision import leaders_at, ranked_at, signed_percent_text, speedup_text
from simbench.report.units import DEVICE, DeviceUnit


def assumptions_section(assumptions: pd.DataFrame, scaling: pd.DataFrame, unit: DeviceUnit = DEVICE) -> str:
    """The smallest cluster under the assumptions that could change its answer, and whether they do.

    Each assumption is its own simulation of that cluster with the run's seed, paired with one of the cluster as
    run (assumptions.csv holds their speed-ups). Simulated alone, a cluster draws other batches than in the run,
    where it shares the largest size's of its kind (docs/engines.md): their own speed-ups differ from the scaling
    table's within its spread. The table shows the run's figures, and what each assumption changes on the same
    batches, which the pairing makes exact."""
    if assumptions.empty:
        return ""
    devices = int(assumptions["devices"].iloc[0])
    variants = [column for column in assumptions.columns if column not in ("strategy", "devices", "as simulated")]
    paired = assumptions.set_index("strategy")
    run_rows = ranked_at(scaling, devices).set_index("strategy").loc[paired.index]
    leaders = list(leaders_at(scaling, devices)["strategy"])
    table = pd.DataFrame({"as run": [speedup_text(row) for row in run_rows.itertuples()]}, index=paired.index)
    lines = []
    for variant in variants:
        change = paired[variant] / paired["as simulated"] - 1
        table[variant] = change.map(_change_text)
        other = paired[variant].idxmax()
        if other in leaders:
            lines.append(f"With {variant} {other} still wins on {unit.count(devices)}.")
        else:
            ahead = paired.loc[other, variant] / paired.loc[leaders[0], variant] - 1
            lines.append(f"With {variant} the winner on {unit.count(devices)} would be **{other}**, "
                         f"{100 * ahead:.1f} % ahead of {leaders[0]}.")
    return (f"## What could change the answer ({unit.count(devices)}, speed-up over "
            f"{over_words(baseline_of(scaling))})\n\n"
            "Ideal kernels: variable-length and un-padded kernels as fast as padded ones, no launch floor or "
            "first-sight cost (the profile's measured terms set to their ideal). Shapes seen: steady state, no "
            "step meets a new batch shape; shapes new: every variable-shape batch is new (a run's first steps). "
            "Each assumption's column is the change it makes to a speed-up, from two simulations of this cluster "
            "on the same batches, one as run and one under the assumption (their speed-ups: assumptions.csv); an "
            "assumption that changes nothing is left out."
            "\n\n" + markdown_table(table.reset_index()) + "\n\n" + " ".join(lines))


def _change_text(change: float) -> str:
    """A relative change in percent, '+8.5 %'; one that rounds to zero reads '0.0 %'."""
    if pd.isna(change):
        return "-"
    text = signed_percent_text(100 * change)
    return "0.0 %" if text == "+0.0" else f"{text} %"
