"""Figure of `simbench measure`: predicted versus measured speed-ups, and step seconds by cost term."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def plot_measured_vs_predicted(table: pd.DataFrame, path: Path, title: str) -> None:
    """Left: speed-up over padding, measured next to predicted. Right: measured step seconds next
    to the predicted ones stacked by term (compute, padding, overhead), to show which term is off.
    Error bars on the measured speed-ups: one standard deviation over rounds (`speedup_noise`); markers:
    the speed-ups at first sight of each batch shape, where measured."""
    figure, (speedups, steps) = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained")
    positions = np.arange(len(table))
    width = 0.38
    # NaN (fewer than two rounds) draws no bar rather than a zero-width one that would claim no spread.
    noise = table["speedup_noise"] if "speedup_noise" in table else pd.Series(np.nan, index=table.index)
    speedups.bar(positions - width / 2, table["measured_speedup"], width, color="#4c72b0",
                 yerr=noise * table["measured_speedup"], capsize=3, error_kw={"linewidth": 1},
                 label="measured (bar: 1 s.d. over rounds)")
    speedups.bar(positions + width / 2, table["predicted_speedup"], width, label="predicted", color="#dd8452")
    for position, error in zip(positions, table["error"]):
        speedups.annotate(f"{error:+.1%}", (position, 0), xytext=(0, 3), textcoords="offset points",
                          ha="center", fontsize=8, color="white")
    if "measured_first_sight_speedup" in table and table["measured_first_sight_speedup"].notna().any():
        speedups.scatter(positions - width / 2, table["measured_first_sight_speedup"], marker="D", s=18,
                         color="black", zorder=3, label="measured at first sight")
        speedups.scatter(positions + width / 2, table["predicted_first_sight_speedup"], marker="x", s=24,
                         color="black", zorder=3, label="predicted at first sight")
    speedups.axhline(1.0, color="grey", linewidth=0.8)
    # Many strategies' names side by side overlap: slanted, they fit.
    labels = {"rotation": 30, "ha": "right"} if len(table) > 5 else {}
    below = -0.3 if labels else -0.1  # the legends go under the (slanted) names
    speedups.set_xticks(positions, table["strategy"], **labels)
    speedups.set_ylabel("real tokens/s relative to padding")
    speedups.set_title("realized speed-up (label: prediction error)")
    # Below the panel: inside, the legend covers the bars of the first strategies.
    speedups.legend(loc="upper center", bbox_to_anchor=(0.5, below), ncols=2, fontsize=8)

    steps.bar(positions - width / 2, table["measured_step_seconds"] * 1e3, width, label="measured", color="#4c72b0")
    bottom = np.zeros(len(table))
    for column, label, color in (("predicted_compute_seconds", "predicted compute", "#dd8452"),
                                 ("predicted_padding_seconds", "predicted padding", "#c44e52"),
                                 ("predicted_overhead_seconds", "predicted overhead", "#8172b3")):
        values = table[column].to_numpy() * 1e3
        steps.bar(positions + width / 2, values, width, bottom=bottom, label=label, color=color)
        bottom += values
    steps.set_xticks(positions, table["strategy"], **labels)
    steps.set_ylabel("milliseconds per step")
    steps.set_title("step time by cost-model term")
    steps.legend(loc="upper center", bbox_to_anchor=(0.5, below), ncols=2, fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.savefig(path, dpi=120)
    plt.close(figure)
