"""The report's figures, drawn from its tables alone (so `simbench plot` can redraw them).

    >>> import tempfile
    >>> from pathlib import Path
    >>> import pandas as pd
    >>> from simbench.report.plots import save_figure, scaling_figure
    >>> scaling_table = pd.DataFrame({"strategy": ["none", "none", "unpad", "unpad"], "devices": [1, 8, 1, 8],
    ...                               "speedup": [1.0, 1.0, 2.18, 1.91]})
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     [path.name for path in save_figure(scaling_figure(scaling_table), Path(folder, "scaling"), ("png", "svg"))]
    ['scaling.png', 'scaling.svg']
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from simbench.histogram import LengthHistogram  # noqa: E402
from simbench.sim.results import BREAKDOWN_COLUMNS  # noqa: E402

# Fixed ids and no timestamps, so that the same tables always give byte-identical files.
matplotlib.rcParams["svg.hashsalt"] = "simbench"
matplotlib.rcParams["svg.fonttype"] = "path"
# Samples of a VTS batch drawn in the timeline: enough to see stalls, few enough to tell them apart.
TIMELINE_SAMPLES_SHOWN = 48
_METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}


def save_figure(figure: Figure, stem: Path, formats: tuple[str, ...]) -> list[Path]:
    """Write `figure` as stem.png / stem.svg and close it."""
    written = []
    for extension in formats:
        path = Path(stem).with_suffix(f".{extension}")
        figure.savefig(path, format=extension, metadata=_METADATA[extension], dpi=120)
        written.append(path)
    plt.close(figure)
    return written


def _figure(width: float = 7.0, height: float = 4.2, columns: int = 1, rows: int = 1) -> tuple[Figure, list]:
    sns.set_theme(style="whitegrid", context="notebook")
    figure, axes = plt.subplots(rows, columns, figsize=(width, height), layout="constrained", squeeze=False)
    return figure, list(axes.ravel())


def histogram_figure(histogram: LengthHistogram) -> Figure:
    """Sequence lengths with the padding share and the speed-up of removing all padding (paper's Figure 1)."""
    figure, (axis,) = _figure()
    share = histogram.counts / max(histogram.sequences, 1)
    edges = np.arange(histogram.max_length + 1) + 0.5
    floor = share[share > 0].min() / 2 if histogram.sequences else 1.0
    axis.stairs(share, edges, fill=True, baseline=floor, color=sns.color_palette()[0])
    # A log scale keeps both the body of the distribution and a spike at max length readable.
    axis.set_yscale("log")
    axis.set_ylim(bottom=floor)
    axis.set_xlim(0, histogram.max_length * 1.02)  # room to see a spike at max length
    axis.set_xlabel("sequence length (tokens)")
    axis.set_ylabel("share of sequences (log scale)")
    # The figures go in the title, where they cannot hide a peak of the histogram.
    axis.set_title(f"{histogram.name}: {histogram.sequences:,} sequences, max length {histogram.max_length}\n"
                   f"padding at max length {100 * (1 - histogram.efficiency):.1f} %, "
                   f"theoretical speed-up without padding {histogram.theoretical_speedup:.3f}x", fontsize=11)
    return figure


def packing_figure(packing: pd.DataFrame, timings: pd.DataFrame, real_tokens: int, max_length: int) -> Figure:
    """Packing efficiency per strategy with the LP bound at its depth, and each packer's solve time."""
    figure, (left, right) = _figure(width=10.0, columns=2)
    labels = packing["label"].tolist()
    positions = np.arange(len(labels))
    left.barh(positions, 100 * packing["efficiency"], color=sns.color_palette()[0], label="packer")
    bound = 100 * real_tokens / (packing["lower_bound_packs"].astype(float) * max_length)
    # A bound on packs bounds the efficiency of fixed-shape packs only (not of sorted batches).
    bound = bound.where(packing["tokens"] == packing["packs"] * max_length)
    left.scatter(bound, positions, marker="|", s=300, color="black", zorder=3, label="LP bound (same depth)")
    for position, value in zip(positions, packing["efficiency"]):
        left.text(100 * value - 1, position, f"{100 * value:.1f}", va="center", ha="right", color="white", fontsize=8)
    left.set_yticks(positions, labels)
    left.invert_yaxis()
    left.set_xlim(0, 102)
    left.set_xlabel("efficiency: real tokens / token slots (%)")
    figure.legend(*left.get_legend_handles_labels(), loc="outside lower left", ncols=2, fontsize=8)
    seconds = timings.set_index("strategy")["solve_seconds"].reindex(labels)
    right.barh(positions, seconds.clip(lower=1e-6), color=sns.color_palette()[1])
    right.set_xscale("log")
    right.set_yticks(positions, [""] * len(labels))
    right.invert_yaxis()
    right.set_xlabel("solve time (s, log scale)")
    figure.suptitle("Packing efficiency and solve time")
    return figure


def scaling_figure(scaling: pd.DataFrame) -> Figure:
    """Realized speed-up over padding versus device count, one line per strategy (paper's Figure 5)."""
    figure, (axis,) = _figure(width=10.0, height=5.0)
    groups = list(scaling.groupby("strategy", sort=False))
    # Enough distinct colours for every strategy: the default palette repeats after ten.
    for (label, rows), color in zip(groups, sns.color_palette("tab20" if len(groups) > 10 else None, len(groups))):
        rows = rows.sort_values("devices")
        reference = rows["reference"].iloc[0] if "reference" in rows else "none"
        # Plans measured against another baseline (VTS: the padded pipeline) are dashed and say so.
        style = {"linestyle": "-"} if reference == "none" else {"linestyle": "--"}
        name = label if reference == "none" else f"{label} (over {reference})"
        axis.plot(rows["devices"], rows["speedup"], marker="o", markersize=4, label=name, color=color, **style)
    axis.set_xscale("log", base=2)
    devices = sorted(scaling["devices"].unique())
    axis.set_xticks(devices, [str(count) for count in devices])
    axis.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    axis.set_xlabel("devices (data parallel)")
    axis.set_ylabel("speed-up over padding (same devices)")
    axis.set_title("Realized speed-up versus cluster size")
    axis.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return figure


def gumbel_figure(latency: pd.DataFrame, fit: pd.DataFrame, extrapolation: pd.DataFrame) -> Figure:
    """Per-device step speed-up samples with their Gumbel fit, and the expected cluster speed-up it implies."""
    from scipy.stats import gumbel_r

    figure, (left, right) = _figure(width=11.0, height=4.6, columns=2)
    for (label, rows), color in zip(latency.groupby("strategy", sort=False), sns.color_palette()):
        samples = rows["speedup"].to_numpy()
        left.hist(samples, bins=40, density=True, alpha=0.45, color=color, label=f"{label} (simulated)")
        row = fit[fit["strategy"] == label].iloc[0]
        grid = np.linspace(samples.min(), samples.max(), 200)
        left.plot(grid, gumbel_r.pdf(grid, loc=row["location"], scale=row["scale"]), color=color,
                  label=f"Gumbel loc {row['location']:.3f}, scale {row['scale']:.3f}")
    left.set_xlabel("per-device speed-up over padding in one step")
    left.set_ylabel("density")
    left.legend(fontsize=7)
    for (label, rows), color in zip(extrapolation.groupby("strategy", sort=False), sns.color_palette()):
        rows = rows.sort_values("devices")
        right.plot(rows["devices"], rows["expected_speedup"], color=color, label=f"{label}: Gumbel minimum")
        if rows["simulated_speedup"].notna().any():
            right.scatter(rows["devices"], rows["simulated_speedup"], color=color, s=14, label=f"{label}: simulated")
    right.set_xscale("log", base=2)
    right.set_xlabel("devices")
    right.set_ylabel("expected speed-up over padding")
    right.set_title("a step waits for its slowest device", fontsize=10)
    right.legend(fontsize=7)
    figure.suptitle("Gumbel fit of per-device speed-up, extrapolated to clusters")
    return figure


def timeline_figure(timeline: pd.DataFrame) -> Figure:
    """VTS pipelines, one batch each: every sample's time in every stage, hatched where a finished
    sample is blocked because the next stage still holds a longer one."""
    groups = list(timeline.groupby("strategy", sort=False))
    figure, axes = _figure(width=10.0, height=1.2 + 2.2 * len(groups), rows=len(groups))
    colors = sns.color_palette("husl", 8)
    for axis, (label, rows) in zip(axes, groups):
        shown = rows[rows["sample"] < TIMELINE_SAMPLES_SHOWN]
        for stage, in_stage in shown.groupby("stage"):
            busy = list(zip(in_stage["enter_seconds"], in_stage["finish_seconds"] - in_stage["enter_seconds"]))
            axis.broken_barh(busy, (stage - 0.4, 0.8), edgecolor="white", linewidth=0.3,
                             facecolors=[colors[sample % len(colors)] for sample in in_stage["sample"]])
            blocked = in_stage[in_stage["blocked_seconds"] > 0]
            axis.broken_barh(list(zip(blocked["finish_seconds"], blocked["blocked_seconds"])), (stage - 0.4, 0.8),
                             facecolors="none", edgecolor="black", hatch="///", linewidth=0.3)
        stages = sorted(rows["stage"].unique())
        axis.set_yticks(stages, [str(stage) for stage in stages])
        axis.invert_yaxis()
        axis.set_ylabel("stage")
        busy = (rows["leave_seconds"] - rows["enter_seconds"]).sum()
        samples = rows["sample"].nunique()
        axis.set_title(f"{label}: first {min(samples, TIMELINE_SAMPLES_SHOWN)} of {samples} samples; over the whole "
                       f"batch, blocked {100 * rows['blocked_seconds'].sum() / busy:.1f} % of stage time", fontsize=10)
    axes[-1].set_xlabel("time (s)")
    figure.suptitle("VTS pipeline timeline (hatched: a finished sample waits for the next stage)")
    return figure


def breakdown_figure(breakdown: pd.DataFrame) -> Figure:
    """Where the time goes, per strategy, as stacked bars (smallest and largest cluster).

    Time is per 1,000 real tokens on one device, so that strategies that put more sequences in a
    step (packing) compare fairly with those that do not.
    """
    parts = [part for part in BREAKDOWN_COLUMNS if part in breakdown]
    device_counts = sorted(breakdown["devices"].unique())
    shown = sorted({device_counts[0], device_counts[-1]})
    figure, axes = _figure(width=5.5 * len(shown), height=4.8, columns=len(shown))
    for axis, devices in zip(axes, shown):
        rows = breakdown[breakdown["devices"] == devices]
        positions = np.arange(len(rows))
        bottom = np.zeros(len(rows))
        per_thousand_tokens_ms = 1e6 / rows["real_tokens_per_device_step"].to_numpy()
        for part, color in zip(parts, sns.color_palette()):
            values = np.clip(rows[part].to_numpy(), 0.0, None) * per_thousand_tokens_ms
            axis.bar(positions, values, bottom=bottom, color=color, label=part.removesuffix("_seconds"))
            bottom += values
        axis.set_xticks(positions, rows["strategy"], rotation=45, ha="right", fontsize=8)
        axis.set_ylabel("device time per 1,000 real tokens (ms)")
        axis.margins(y=0.05)
        axis.set_title(f"{devices} device{'s' if devices > 1 else ''}")
    axes[-1].legend(fontsize=8)
    figure.suptitle("Where the time goes")
    return figure
