"""summary.md's 4D sections: the answer in GPUs, a replica's step by cause under each CP sharding, and what
workload-balanced packing gains over token-balanced packing at every layout.

The tables come from `ExperimentResult.parallel` (one row per strategy and CP sharding, a replica's mean step)
and `scaling` (the simulated cluster sizes, whose devices are replicas).
"""

from __future__ import annotations

import pandas as pd

from simbench.costmodels.layout import ParallelLayout
from simbench.report.baseline import baseline_of
from simbench.report.markdown import markdown_table
from simbench.report.precision import leaders_at, milliseconds_text, ranked_at, signed_percent_text, tie_text
from simbench.sim.memory_budget import budget_sentence

# The token-balanced packers a workload-balanced plan is measured against, the first present winning: first-fit
# decreasing packs as tightly as wlb does, so the comparison isolates the balancing.
TOKEN_BALANCED = ("ffd", "bfd", "lpfhp", "spfhp", "greedy")
WORKLOAD_BALANCED = "wlb"
CAUSES = (("compute_seconds", "compute"), ("padding_seconds", "padding"),
          ("masked_attention_seconds", "masked attention"), ("overhead_seconds", "overhead"),
          ("communication_seconds", "TP/CP communication"), ("recompute_seconds", "recompute"),
          ("cp_imbalance_seconds", "CP imbalance"), ("bubble_seconds", "pipeline bubble"),
          ("stall_seconds", "pipeline stall"))


def layout_words(layout: ParallelLayout) -> str:
    interleaved = f", {layout.virtual_stages} virtual stages" if layout.virtual_stages > 1 else ""
    gpus, microbatches = layout.gpus_per_replica, layout.microbatches
    return (f"TP {layout.tp} x PP {layout.pp} x CP {layout.cp} ({gpus:,} GPU{'' if gpus == 1 else 's'} a "
            f"replica), {microbatches} microbatch{'' if microbatches == 1 else 'es'}{interleaved}, "
            f"{sharding_words(layout, layout.cp_sharding)}, ZeRO {layout.zero_stage}, recompute {layout.recompute}")


def sharding_words(layout: ParallelLayout, sharding: str) -> str:
    """'zigzag CP sharding'; at CP 1 no sharding happens, whatever the layout names."""
    return "no context parallelism" if layout.cp == 1 else f"{sharding} CP sharding"


def parallel_headline(layout: ParallelLayout, scaling: pd.DataFrame, parallel: pd.DataFrame,
                      breakdown: pd.DataFrame) -> str:
    """Which strategy trains fastest on the most GPUs, by how much and why; what the CP sharding and
    workload-balanced packing change."""
    largest = scaling["devices"].max()
    rows = scaling[scaling["reference"] == baseline_of(scaling)]
    leaders = leaders_at(rows, largest)
    ranked = ranked_at(rows, largest)
    if len(ranked) < 2:
        return ""
    first = leaders.iloc[0]
    behind = ranked.iloc[len(leaders)] if len(leaders) < len(ranked) else None
    gpus = int(largest) * layout.gpus_per_replica
    replicas = f"{int(largest):,} replica{'' if largest == 1 else 's'}"
    where = f"on {gpus:,} GPU{'' if gpus == 1 else 's'} ({replicas} of {layout_words(layout)})"
    if len(leaders) > 1:
        figures = [f"{value:,.0f}" for value in leaders["tokens_per_s_per_gpu"]]
        tie = tie_text(list(leaders["strategy"]), figures, at="real tokens per second per GPU",
                       over="in real tokens per second per GPU")
        text = f"**4D answer:** {where} {tie} (within the run's sampling error or 0.1 %)"
    else:
        text = (f"**4D answer:** {where} the fastest strategy is **{first.strategy}** at "
                f"{first.tokens_per_s_per_gpu:,.0f} real tokens per second per GPU")
    if behind is not None:
        lead = first.tokens_per_s / behind.tokens_per_s - 1
        text += f", {100 * lead:.1f} % ahead of {behind.strategy} ({behind.tokens_per_s_per_gpu:,.0f})."
        why = _why(parallel, breakdown[breakdown["devices"] == largest], first.strategy, behind.strategy,
                   layout.cp_sharding)
        text += (" " + why) if why else ""
    else:
        text += "."
    return " ".join(part for part in (text, _sharding_sentence(parallel, first.strategy),
                                      _attention_sentence(layout, rows, parallel, breakdown),
                                      _wlb_sentence(layout, scaling, parallel)) if part)


def _attention_sentence(layout: ParallelLayout, scaling: pd.DataFrame, parallel: pd.DataFrame,
                        breakdown: pd.DataFrame) -> str:
    """Per-document (varlen) attention against whole-row attention on the same packs, at the largest cluster."""
    largest = scaling["devices"].max()
    rows = scaling[scaling["devices"] == largest].set_index("strategy")
    sentences = []
    for name, row in rows[rows["mode"] == "packed_varlen"].iterrows():
        whole = rows[(rows["mode"] == "padded") & (rows["packer"] == row["packer"])]
        if whole.empty:
            continue
        other = whole.index[0]
        change = row["tokens_per_s"] / whole.loc[other, "tokens_per_s"] - 1
        why = _why(parallel, breakdown[breakdown["devices"] == largest], name, other, layout.cp_sharding)
        sentences.append(f"Per-document attention ({name}) trains {100 * abs(change):.1f} % "
                         f"{'faster' if change > 0 else 'slower'} than whole-row attention on the same packs "
                         f"({other}). " + why.replace("Why, against", "Against"))
    return " ".join(sentences)


def _sharding_sentence(parallel: pd.DataFrame, strategy: str) -> str:
    """How much each CP sharding changes the winner's replica step."""
    rows = parallel[parallel["strategy"] == strategy].set_index("cp_sharding")["tokens_per_s_per_gpu"]
    if len(rows) < 2:
        return ""
    best, worst = rows.idxmax(), rows.idxmin()
    if rows[best] <= rows[worst] * 1.001:
        return f"For {strategy} the CP sharding changes nothing."
    return (f"For {strategy}, {best} CP sharding trains {100 * (rows[best] / rows[worst] - 1):.1f} % faster than "
            f"{worst} inside a replica (the slowest rank's causal attention sets each layer's time).")


def _wlb_sentence(layout: ParallelLayout, scaling: pd.DataFrame, parallel: pd.DataFrame) -> str:
    gains = wlb_gains(layout, scaling, parallel)
    if gains.empty:
        return ""
    # the column's figures, already rounded (no -0.0)
    least, most = (signed_percent_text(value) for value in gains["gain %"].astype(float).agg(["min", "max"]))
    spread = f"{least} %" if least == most else f"{least} % to {most} %"
    return f"Workload-balanced packing gains {spread} over token-balanced packing across the layouts below."


def _why(parallel: pd.DataFrame, breakdown: pd.DataFrame, winner: str, runner_up: str, sharding: str) -> str:
    """The three causes whose seconds per real token differ most between the two: a replica's own (the run's
    sharding), then waiting for the slowest replica and the gradient sync (the simulated cluster)."""
    rows = parallel[parallel["cp_sharding"] == sharding].set_index("strategy")
    cluster = breakdown.set_index("strategy")
    if not all(name in rows.index and name in cluster.index for name in (winner, runner_up)):
        return ""
    # The cluster's causes under names of their own: its communication (the gradient sync) is another cause than
    # a replica's (TP/CP), and one label for both made each cause's difference two numbers.
    across_causes = {"waiting_seconds": "replica_waiting_seconds", "communication_seconds": "gradient_sync_seconds"}
    causes = dict(CAUSES) | {"replica_waiting_seconds": "waiting for the slowest replica",
                             "gradient_sync_seconds": "gradient sync"}

    def per_token(name: str) -> pd.Series:
        inside = rows.loc[name, [cause for cause, _ in CAUSES]] / rows.loc[name, "real_tokens"]
        across = cluster.loc[name, list(across_causes)] / cluster.loc[name, "real_tokens_per_device_step"]
        return pd.concat([inside, across.rename(across_causes)]).astype(float)

    difference = (per_token(runner_up) - per_token(winner)) * 1e6
    biggest = difference.abs().sort_values(ascending=False).index[:3]
    parts = [f"{causes[cause]} {'saves' if difference[cause] > 0 else 'costs'} it {abs(difference[cause]):.2f} us "
             f"per real token" for cause in biggest if abs(difference[cause]) >= 0.005]
    return f"Why, against {runner_up}: " + "; ".join(parts) + "." if parts else ""


def parallel_section(layout: ParallelLayout, scaling: pd.DataFrame, parallel: pd.DataFrame) -> str:
    """A replica's step by cause under each CP sharding, peak memory, and the workload-balanced gain."""
    if parallel.empty:
        return ""
    shardings = parallel["cp_sharding"] if layout.cp > 1 else pd.Series("none (CP 1)", index=parallel.index)
    table = pd.DataFrame({"strategy": parallel["strategy"],
                          "CP sharding": shardings + parallel["simulated"].map({True: " (run)", False: ""}),
                          "step": (1e3 * parallel["step_seconds"]).map(milliseconds_text)})
    for cause, words in CAUSES:
        table[words] = (1e3 * parallel[cause]).map(milliseconds_text)
    table["real tokens"] = parallel["real_tokens"].map("{:,.0f}".format)
    table["tokens/s per GPU"] = parallel["tokens_per_s_per_gpu"].map("{:,.0f}".format)
    least, most = float(parallel["peak_memory_gib"].min()), float(parallel["peak_memory_gib"].max())
    capacity = float(parallel["hbm_capacity_gib"].iloc[0])
    peak = f"{most:.1f}" if f"{least:.1f}" == f"{most:.1f}" else f"{least:.1f}-{most:.1f}"
    memory = (f"Peak memory per GPU: {peak} GiB of {capacity:.1f} GiB HBM (each strategy's largest microbatch as it "
              "runs, the most loaded pipeline stage, fewest replicas; parallel.csv, and the Memory section)."
              if capacity == capacity else f"Peak memory per GPU: {peak} GiB (the scenario's microbatch of "
              "full-length rows; the profile states no HBM capacity to check it against).")
    over = parallel.loc[parallel["peak_memory_gib"] > capacity, "strategy"].drop_duplicates()
    if len(over):
        memory += f" Over the HBM: {', '.join(over)} ({'it does' if len(over) == 1 else 'they do'} not fit; the Memory section)."
    if "memory_budget_tokens" in parallel and parallel["memory_budget_tokens"].notna().any():
        # Reports written before the column have none.
        tokens = int(parallel["memory_budget_tokens"].iloc[0])
        memory += f" {budget_sentence(tokens, layout)}."
    text = (f"## Inside a replica ({layout_words(layout)}; ms per replica step)\n\n{memory}\n\n"
            + markdown_table(table) +
            "\n\nBusy causes are one pipeline stage's: compute and padding at the mean context-parallel rank, CP "
            "imbalance the slowest rank's attention beyond it, TP/CP communication the tensor-parallel all-reduces "
            "and the ring KV exchange attention does not hide; pipeline bubble is the schedule's fill and drain "
            "with every microbatch at the step's mean, stall what unequal microbatches add. Each row is 100 replica "
            "steps drawn as the simulation draws them; the shardings not run are priced on the same draws. "
            "Waiting for the slowest replica and the gradients' reduce-scatter and all-gather are in the "
            "breakdown above." + _negative_stall_note(parallel))
    gains = wlb_gains(layout, scaling, parallel)
    if not gains.empty:
        text += ("\n\n### Workload-balanced packing against token-balanced packing\n\n" + markdown_table(gains) +
                 "\n\nSame attention kernels on both sides; replica rows compare real tokens per second of one "
                 "replica's step under each CP sharding, cluster rows the simulated clusters (the run's sharding), "
                 "slowest replica and gradient sync included. `wlb` delays documents of at least half the context "
                 "(a chosen threshold: WLB-LLM states none) so that a step's packs all hold one or none; a label "
                 "ending in `outlier_delay=false` does not.")
    return text


def _negative_stall_note(parallel: pd.DataFrame) -> str:
    """Why a pipeline stall below zero is no error, where the table shows one."""
    if not (parallel["stall_seconds"] <= -0.5e-4).any():
        return ""
    return (" A negative pipeline stall is no rounding: unequal microbatches can beat equal ones of the same mean, "
            "since 1F1B fills the pipeline with its first microbatches and drains it with its last, so a step "
            "whose short microbatches fall there finishes sooner than the equal schedule (the step is still the "
            "sum of its causes).")


def wlb_gains(layout: ParallelLayout, scaling: pd.DataFrame, parallel: pd.DataFrame) -> pd.DataFrame:
    """Each workload-balanced plan's throughput over its token-balanced counterpart (same mode), at every CP
    sharding (a replica) and every simulated cluster size."""
    plans = scaling.drop_duplicates("strategy").set_index("strategy")
    balanced = plans[plans["packer"] == WORKLOAD_BALANCED]
    rows = []
    for name, plan in balanced.iterrows():
        same_mode = plans[(plans["mode"] == plan["mode"]) & plans["packer"].isin(TOKEN_BALANCED)]
        if same_mode.empty:
            continue
        other = min(same_mode.index, key=lambda label: TOKEN_BALANCED.index(same_mode.loc[label, "packer"]))
        by_sharding = parallel.set_index(["strategy", "cp_sharding"])["tokens_per_s_per_gpu"]
        for sharding in parallel["cp_sharding"].unique():
            if (name, sharding) in by_sharding and (other, sharding) in by_sharding:
                where = sharding if layout.cp > 1 else "no CP"
                rows.append(_gain_row(name, other, f"one replica, {where}", by_sharding[(name, sharding)],
                                      by_sharding[(other, sharding)]))
        by_size = scaling.set_index(["strategy", "devices"])["tokens_per_s_per_gpu"]
        for devices in sorted(scaling["devices"].unique()):
            gpus = int(devices) * layout.gpus_per_replica
            rows.append(_gain_row(name, other, f"{gpus:,} GPU{'' if gpus == 1 else 's'}, "
                                  f"{layout.cp_sharding if layout.cp > 1 else 'no CP'}", by_size[(name, devices)],
                                  by_size[(other, devices)]))
    return pd.DataFrame(rows)


def _gain_row(name: str, other: str, where: str, balanced: float, token: float) -> dict:
    return {"workload-balanced": name, "token-balanced": other, "layout": where,
            "tokens/s per GPU (wlb)": f"{balanced:,.0f}", "tokens/s per GPU (token)": f"{token:,.0f}",
            "gain %": signed_percent_text(100 * (balanced / token - 1))}
