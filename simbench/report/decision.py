"""The decision block at the top of summary.md and report.html: for each strategy, on the cluster a user starts
from, what a choice needs (real tokens per second per GPU with its spread, real tokens per optimizer step,
memory against HBM, time and GPU-hours per epoch, the speed-up over the baseline), and a warning wherever the
strategies are not compared on equal footing.

    >>> from simbench.experiment import run_experiment
    >>> from simbench.scenario import Scenario
    >>> scenario = Scenario(name="demo", dataset={"histogram": "squad_1_1_384"}, strategies=["spfhp:3", "unpad"],
    ...                     devices=[1, 8], steps=5)
    >>> table = decision_table(run_experiment(scenario), scenario.dataset.load())
    >>> list(table["strategy"])[:1], int(table["devices"].iloc[0])
    (['spfhp:3'], 1)
"""

from __future__ import annotations

import pandas as pd

from simbench.experiment import ExperimentResult
from simbench.histogram import LengthHistogram
from simbench.report.baseline import baseline_of, over_words
from simbench.report.footing import footing_warnings
from simbench.report.markdown import markdown_table
from simbench.report.memory import layout_cell
from simbench.report.precision import format_with_spread, leaders, speedup_spread, throughput_spread
from simbench.sim.memory_fit import DOES_NOT_FIT

SECONDS_PER_HOUR = 3600.0
# decision.csv's columns (docs/scenarios.md, "The report"), in order.
DECISION_COLUMNS = (
    "strategy", "devices", "gpus",
    "tokens_per_s_per_gpu", "tokens_per_s_per_gpu_spread",  # real tokens per second per GPU, and its spread
    "real_tokens_per_step",  # real tokens of one optimizer step of the whole cluster
    "peak_memory_gib", "hbm_capacity_gib", "memory_verdict", "made_to_fit",
    "layout",  # the layout it ran with: TP x PP x CP, ZeRO stage and recompute memory chose, its microbatches
    "epoch_hours", "epoch_gpu_hours",  # one pass over the dataset's real tokens at this throughput
    "speedup", "speedup_spread", "reference",  # over the baseline, at the same device count
)


def decision_devices(scaling: pd.DataFrame) -> int:
    """The cluster the block is about: the smallest simulated, the one a user starts from (the LLM scenarios
    start where their model fits, e.g. 8 GPUs for an 8B model's full fine-tuning)."""
    return int(scaling["devices"].min())


def decision_table(tables: ExperimentResult, histogram: LengthHistogram, devices: int | None = None) -> pd.DataFrame:
    """One row per strategy at `devices` (default `decision_devices`), strategies that fit first, each group
    fastest first (real tokens per second per GPU; ties by name)."""
    scaling = tables.scaling
    devices = decision_devices(scaling) if devices is None else devices
    rows = scaling[scaling["devices"] == devices]
    spread = pd.Series([throughput_spread(row) for row in rows.itertuples()], index=rows.index, dtype=float)
    per_gpu = rows["tokens_per_s_per_gpu"] if "tokens_per_s_per_gpu" in rows else rows["tokens_per_s"] / devices
    gpus = rows["gpus"] if "gpus" in rows else pd.Series(devices, index=rows.index)
    step_tokens = (rows["real_tokens_per_step"] if "real_tokens_per_step" in rows
                   else rows["tokens_per_s"] * rows["step_seconds_mean"])
    epoch_hours = histogram.real_tokens / rows["tokens_per_s"] / SECONDS_PER_HOUR
    table = pd.DataFrame({
        "strategy": rows["strategy"], "devices": devices, "gpus": gpus,
        "tokens_per_s_per_gpu": per_gpu, "tokens_per_s_per_gpu_spread": per_gpu * spread,
        "real_tokens_per_step": step_tokens,
        "epoch_hours": epoch_hours, "epoch_gpu_hours": epoch_hours * gpus,
        "speedup": rows["speedup"],
        "speedup_spread": pd.Series([speedup_spread(row) for row in rows.itertuples()], index=rows.index, dtype=float),
        "reference": rows["reference"] if "reference" in rows else "none",
    })
    memory = _memory_by_strategy(tables.memory)
    table = table.merge(memory, on="strategy", how="left")
    fits = table["memory_verdict"].ne(DOES_NOT_FIT)
    table = table.assign(fits=fits).sort_values(["fits", "tokens_per_s_per_gpu", "strategy"],
                                                ascending=[False, False, True], kind="stable")
    return table.drop(columns="fits").reset_index(drop=True)[list(DECISION_COLUMNS)]


def _memory_by_strategy(memory: pd.DataFrame) -> pd.DataFrame:
    columns = ["strategy", "peak_memory_gib", "hbm_capacity_gib", "memory_verdict", "made_to_fit", "layout"]
    if memory.empty or "verdict" not in memory:
        return pd.DataFrame(columns=columns)
    memory = memory.assign(layout=[layout_cell(row) for row in memory.itertuples()])
    return memory.rename(columns={"verdict": "memory_verdict"})[columns]


def decision_markdown(tables: ExperimentResult, histogram: LengthHistogram, unit_count) -> str:
    """## Decision: the first screen of summary.md. `unit_count(devices)` says a device count in the report's
    words ("8 GPUs", "2 replicas (16 GPUs)")."""
    table = decision_table(tables, histogram)
    devices = int(table["devices"].iloc[0])
    over = over_words(baseline_of(tables.scaling))
    tied = _tied_with_best(table)
    best = table[table["strategy"] == tied[0]].iloc[0] if tied else table.iloc[0]
    fits_word = _fits_words(best)
    lines = ["## Decision", "",
             f"On {unit_count(devices)}: use **{best.strategy}**, "
             f"{format_with_spread(best.tokens_per_s_per_gpu, best.tokens_per_s_per_gpu_spread)} real tokens/s "
             f"per GPU, one epoch ({histogram.real_tokens:,} real tokens) in {_hours(best.epoch_hours)} "
             f"({best.epoch_gpu_hours:,.0f} GPU-hours), {format_with_spread(best.speedup, best.speedup_spread)}x "
             f"over {over}{fits_word}."]
    if len(tied) > 1:
        lines[-1] += (f" {', '.join(tied[1:])} {'is' if len(tied) == 2 else 'are'} within the spread of it: any of "
                      "them is as fast on this evidence.")
    lines += ["", _markdown(table, over)]
    warnings = footing_warnings(tables.scaling)
    # Each warning starts with the words the bold lead says.
    lines += [f"\n**Not on equal footing**{warning.removeprefix('not on equal footing')}." for warning in warnings]
    if _equal_tokens(tables.scaling):
        lines.append("\nCompared at equal real tokens per optimizer step (`compare_at: equal-tokens`): a step of "
                     "another size would train differently, not only faster.")
    elif not warnings:  # a warning already says the steps differ and what that changes
        lines.append("\nEach strategy at the scenario's own batch size (`compare_at: as-configured`): their real "
                     "tokens per optimizer step are in the table; a different step size changes convergence, not "
                     "only speed.")
    lines += ["", "Spreads are one standard error (the steps' sampling, or the seeds' where there are several); "
              "a figure is shown to the digits its spread supports. An epoch is one pass over the dataset's real "
              "tokens at the simulated throughput."]
    return "\n".join(lines)


def decision_choice(table: pd.DataFrame) -> str | None:
    """The strategy the block says to use among `decision_table`'s rows: the first of those that fit and lead
    by the Answer's rule; None where none fits."""
    tied = _tied_with_best(table)
    return tied[0] if tied else None


def _tied_with_best(table: pd.DataFrame) -> list[str]:
    """The first strategy that fits and those tied with it by the Answer's rule (`report.precision.leaders`), on
    the same speed-ups and spreads."""
    fitting = table[table["memory_verdict"].ne(DOES_NOT_FIT)]
    if fitting.empty:
        return []
    rows = fitting.assign(throughput_noise=fitting["tokens_per_s_per_gpu_spread"] / fitting["tokens_per_s_per_gpu"])
    return list(leaders(rows)["strategy"])


def _fits_words(row) -> str:
    if not isinstance(row.memory_verdict, str):
        return ""
    made = f", with {row.made_to_fit}" if isinstance(row.made_to_fit, str) and row.made_to_fit else ""
    return f"; it {row.memory_verdict} ({row.peak_memory_gib:.0f} of {row.hbm_capacity_gib:.0f} GiB per GPU{made})"


def _hours(hours: float) -> str:
    if hours < 1:
        return f"{hours * 60:.0f} min"
    return f"{hours:,.1f} h" if hours < 100 else f"{hours:,.0f} h"


def _markdown(table: pd.DataFrame, over: str) -> str:
    shown = pd.DataFrame({
        "strategy": table["strategy"],
        "real tokens/s per GPU": [format_with_spread(value, spread) for value, spread
                                  in zip(table["tokens_per_s_per_gpu"], table["tokens_per_s_per_gpu_spread"])],
        "real tokens per optimizer step": table["real_tokens_per_step"].map(lambda value: f"{value:,.0f}"),
        "memory per GPU": [_memory_cell(row) for row in table.itertuples()],
        "ran as": table["layout"].map(lambda value: value if isinstance(value, str) and value else "-"),
        "epoch": table["epoch_hours"].map(_hours),
        "GPU-hours per epoch": table["epoch_gpu_hours"].map(lambda value: f"{value:,.0f}"),
        f"speed-up over {over}": [format_with_spread(value, spread) + "x" for value, spread
                                  in zip(table["speedup"], table["speedup_spread"])],
    })
    return markdown_table(shown)


def _memory_cell(row) -> str:
    if not isinstance(row.memory_verdict, str):
        return "not checked (no HBM capacity in the profile)"
    made = f", {row.made_to_fit}" if isinstance(row.made_to_fit, str) and row.made_to_fit else ""
    return f"{row.peak_memory_gib:.0f} / {row.hbm_capacity_gib:.0f} GiB: {row.memory_verdict}{made}"


def _equal_tokens(scaling: pd.DataFrame) -> bool:
    return "compare_at" in scaling and bool((scaling["compare_at"] == "equal-tokens").all())
