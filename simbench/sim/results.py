"""What a simulation returns: per-step traces, a summary per (strategy, devices), and plot inputs.

The summary's breakdown columns (seconds per step) add up to `step_seconds_mean`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from simbench.costmodels.base import attention_of
from simbench.sim.engines.vectorized import StepAggregates
from simbench.sim.plans import ExecutionPlan, Exchange
from simbench.sim.timeline import StepTimeline
from simbench.strategies.packing import Packing

BREAKDOWN_COLUMNS = ("compute_seconds", "padding_seconds", "masked_attention_seconds", "overhead_seconds",
                     "waiting_seconds", "communication_seconds", "stall_seconds")
# VTS plans are measured against the same pipeline with padded samples, not against the baseline's tokens/s.
VTS_REFERENCE = "vts-padded"


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """Everything `simulate` measured.

    summary: one row per (strategy, devices): speedup (real tokens/s over `reference`: the baseline at the
        same devices, or for VTS the same pipeline with padded samples), tokens_per_s, sequences_per_s,
        step_seconds_mean, step_seconds_p99, engine ("simpy", "vectorized" or "order-statistics":
        `sim.engines.choice.Engine.column`), the BREAKDOWN_COLUMNS
        (seconds per step, adding up to step_seconds_mean), hidden_sync_seconds (the gradients' sync the
        steps hid under their backward and forward, outside the breakdown), steps, packer, max_depth, mode.
    traces: one row per (strategy, devices, step): step_seconds, slowest_device_seconds,
        mean_device_seconds, allreduce_seconds (what followed the slowest device: the exposed sync and, in
        a 4D layout, the optimizer update), data_wait_seconds, real_tokens, sequences, engine.
    packings: the Packing of each plan that has one, by strategy name.
    latency_samples: per-device step seconds, i.e. single-device step times (up to 100,000 per
        strategy; none for padding exchange plans, which on one device are `unpad`).
    vts_timeline: per VTS plan, enter/finish/leave seconds of each (sample, stage) of one batch.
    config: the resolved arguments of the run.
    memory: each strategy's largest microbatch against HBM (`sim.memory_fit.MEMORY_COLUMNS`), where the caller
        checked it (`simbench.simulate`, `simbench simulate`); empty otherwise.
    """

    summary: pd.DataFrame
    traces: pd.DataFrame
    packings: dict[str, Packing] = field(default_factory=dict)
    latency_samples: dict[str, np.ndarray] = field(default_factory=dict)
    vts_timeline: dict[str, pd.DataFrame] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    memory: pd.DataFrame = field(default_factory=pd.DataFrame)


@dataclass(frozen=True, eq=False)
class PlanRun:
    """One simulated (plan, devices): per-step aggregates and the engine's step times."""

    plan: ExecutionPlan
    devices: int
    aggregates: StepAggregates
    timeline: StepTimeline
    allgather_seconds: float = 0.0  # the padding exchange's share that is communication
    reference_step_seconds: float | None = None  # VTS: the same pipeline with padded samples
    update_seconds: float = 0.0  # the optimizer update among what follows the slowest device (4D layouts)
    hidden_sync_seconds: float = 0.0  # the gradients' sync the steps' backward and forward hid, a mean per step

    def trace(self) -> pd.DataFrame:
        timeline, aggregates = self.timeline, self.aggregates
        steps = timeline.end_seconds.size
        return pd.DataFrame({
            "strategy": self.plan.name,
            "devices": self.devices,
            "engine": timeline.engine,
            "step": np.arange(steps),
            "step_seconds": timeline.step_seconds,
            "slowest_device_seconds": timeline.slowest_device_seconds,
            "mean_device_seconds": timeline.mean_device_seconds,
            "allreduce_seconds": timeline.allreduce_seconds,
            "data_wait_seconds": timeline.data_wait_seconds,
            "real_tokens": aggregates.real_tokens,
            "sequences": aggregates.sequences,
        })

    def summary_row(self) -> dict:
        timeline, aggregates = self.timeline, self.aggregates
        steps = timeline.end_seconds.size
        total_seconds = float(timeline.end_seconds[-1])
        data_wait = timeline.data_wait_seconds
        exchange_communication = (np.minimum(data_wait, self.allgather_seconds)
                                  if self.plan.exchange is Exchange.BLOCKING else np.zeros(steps))
        row = {
            "strategy": self.plan.name,
            "packer": self.plan.packer,
            "max_depth": self.plan.max_depth,
            "mode": self.plan.mode.value,
            "attention": attention_of(self.plan.mode).value,
            "devices": self.devices,
            "engine": timeline.engine,
            "steps": steps,
            "tokens_per_s": aggregates.real_tokens.sum() / total_seconds,
            "sequences_per_s": aggregates.sequences.sum() / total_seconds,
            "step_seconds_mean": total_seconds / steps,
            "step_seconds_p99": float(np.quantile(timeline.step_seconds, 0.99)),
            "compute_seconds": aggregates.compute_seconds.mean(),
            "padding_seconds": aggregates.padding_seconds.mean(),
            "masked_attention_seconds": aggregates.masked_attention_seconds.mean(),
            "overhead_seconds": (aggregates.overhead_seconds.mean() + (data_wait - exchange_communication).mean()
                                 + self.update_seconds),
            # slowest >= mean; clipping drops float rounding only.
            "waiting_seconds": np.maximum(timeline.slowest_device_seconds - aggregates.mean_device_seconds, 0).mean(),
            "communication_seconds": (np.mean(timeline.allreduce_seconds) - self.update_seconds
                                      + exchange_communication.mean()),
            "hidden_sync_seconds": self.hidden_sync_seconds,
            "stall_seconds": aggregates.stall_seconds.mean(),
            "throughput_noise": _ratio_of_means_error(aggregates.real_tokens, timeline.step_seconds),
        }
        if self.reference_step_seconds is not None:
            row["reference"] = VTS_REFERENCE
            row["speedup"] = self.reference_step_seconds * steps / total_seconds
        return row


def summarize(runs: list[PlanRun], baseline: str) -> pd.DataFrame:
    """One row per run; `speedup` is throughput in real tokens/s over the plan `baseline`'s at the same
    devices (VTS plans: over their padded pipeline), `reference` names what it is over."""
    summary = pd.DataFrame([run.summary_row() for run in runs])
    if "reference" not in summary:
        summary["reference"] = None
    summary["reference"] = summary["reference"].fillna(baseline)
    over_baseline = summary[summary["strategy"] == baseline].set_index("devices")
    speedup = summary["tokens_per_s"] / summary["devices"].map(over_baseline["tokens_per_s"])
    summary["speedup"] = summary["speedup"].fillna(speedup) if "speedup" in summary else speedup
    # Two runs' sampling errors, taken as independent: an upper bound where plans draw the same sequences.
    reference_noise = over_baseline["throughput_noise"]
    summary["speedup_noise"] = np.where(summary["strategy"] == baseline, 0.0, np.hypot(
        summary["throughput_noise"], summary["devices"].map(reference_noise).fillna(0.0)))
    columns = ["strategy", "devices", "speedup", "tokens_per_s", "sequences_per_s", "step_seconds_mean", "engine",
               "reference", *BREAKDOWN_COLUMNS, "hidden_sync_seconds", "step_seconds_p99", "steps", "packer", "max_depth", "mode",
               "attention", "speedup_noise", "throughput_noise"]
    return summary[columns]


def _ratio_of_means_error(tokens: np.ndarray, seconds: np.ndarray) -> float:
    """Relative standard error of sum(tokens) / sum(seconds) over the steps (delta method): how far the run's
    throughput could move with another draw of as many steps."""
    steps = tokens.size
    if steps < 2 or tokens.mean() <= 0 or seconds.mean() <= 0:
        return 0.0
    linearised = tokens / tokens.mean() - seconds / seconds.mean()
    return float(linearised.std(ddof=1) / np.sqrt(steps))



# Columns that differ between seeds and are averaged over them; the others (names, the engine, steps) are the
# same in every seed's summary.
SEED_MEAN_COLUMNS = ("speedup", "tokens_per_s", "sequences_per_s", "step_seconds_mean", "step_seconds_p99",
                     *BREAKDOWN_COLUMNS, "hidden_sync_seconds", "speedup_noise", "throughput_noise")
# Figures whose spread across seeds is reported (`<column>_seed_sd`, `<column>_seed_sem`).
SEED_SPREAD_COLUMNS = ("speedup", "tokens_per_s")


def across_seeds(summaries: list[pd.DataFrame]) -> pd.DataFrame:
    """One summary from the `summarize` tables of whole simulations that differ only in their seed: the mean
    of each SEED_MEAN_COLUMNS figure, `seeds`, and per SEED_SPREAD_COLUMNS figure its standard deviation
    across the seeds (`_seed_sd`, ddof 1) and the standard error of their mean (`_seed_sem`)."""
    first = summaries[0]
    keys = first[["strategy", "devices"]].to_numpy()
    for summary in summaries[1:]:
        if not np.array_equal(summary[["strategy", "devices"]].to_numpy(), keys):
            raise ValueError("the seeds' summaries must list the same (strategy, devices) rows in the same order")
    combined = first.copy()
    count = len(summaries)
    for column in SEED_MEAN_COLUMNS:
        if column in first:
            combined[column] = np.mean([summary[column].to_numpy(float) for summary in summaries], axis=0)
    combined["seeds"] = count
    for column in SEED_SPREAD_COLUMNS:
        values = np.array([summary[column].to_numpy(float) for summary in summaries])
        spread = values.std(axis=0, ddof=1) if count > 1 else np.zeros(values.shape[1])
        combined[f"{column}_seed_sd"] = spread
        combined[f"{column}_seed_sem"] = spread / np.sqrt(count)
    return combined


def with_per_gpu_columns(summary: pd.DataFrame, gpus_per_replica: int) -> pd.DataFrame:
    """The summary with `gpus` (a device is a replica of `gpus_per_replica` GPUs) and `tokens_per_s_per_gpu`."""
    gpus = summary["devices"] * gpus_per_replica
    return summary.assign(gpus=gpus, tokens_per_s_per_gpu=summary["tokens_per_s"] / gpus)
