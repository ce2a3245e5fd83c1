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

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from simbench.histogram import LengthHistogram  # noqa: E402
from simbench.sim.results import BREAKDOWN_COLUMNS  # noqa: E402

# Fixed ids and no timestamps, so that the same tables always give byte-identical files.
matplotlib.rcParams["svg.hashsalt"] = "simbench"
matplotlib.rcParams["svg.fonttype"] = "path"
# Samples of a VTS batch drawn in the timeline: enough to see stalls, few enough to tell them apart.
TIMELINE_SAMPLES_SHOWN = 48
# Stage numbers one panel of the timeline can label without their text touching (24 stages did).
STAGE_LABELS_MAX = 8
# Families of strategies in the order the scaling plot's legend lists them (a plug-in plan's family follows).
FAMILY_ORDER = ["padding", "sorting", "packing", "un-padding", "VTS"]
HISTOGRAM_BINS = 256  # enough to see the shape, few enough to read a bar at 128k tokens
# A last histogram bin this many times higher than every other one flattens them: the axis is cut above them.
SPIKE_CLIP_RATIO = 4
# The packing plot's logit axis: from a half-empty pack to one padding token in a million.
EFFICIENCY_SHOWN_MIN, EFFICIENCY_SHOWN_MAX = 0.4, 1 - 1e-6
# A dot this far across the efficiency axis has room on its left for its figure ("99.949" at 7 points).
LABEL_ROOM_FRACTION = 0.15
_METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}


def save_figure(figure: Figure, stem: Path, formats: tuple[str, ...]) -> list[Path]:
    """Write `figure` as stem.png / stem.svg and close it."""
    written = []
    for extension, content in _rendered(figure, formats).items():
        path = Path(stem).with_suffix(f".{extension}")
        path.write_bytes(content)
        written.append(path)
    return written


def render(name: str, arguments: tuple, formats: tuple[str, ...]) -> dict[str, bytes]:
    """The figure `FIGURES[name](*arguments)` as file contents by format: what a worker process sends back."""
    return _rendered(FIGURES[name](*arguments), formats)


def _rendered(figure: Figure, formats: tuple[str, ...]) -> dict[str, bytes]:
    contents = {}
    for extension in formats:
        buffer = io.BytesIO()
        figure.savefig(buffer, format=extension, metadata=_METADATA[extension], dpi=120)
        contents[extension] = buffer.getvalue()
    plt.close(figure)
    return contents


def _figure(width: float = 7.0, height: float = 4.2, columns: int = 1, rows: int = 1,
            **shared) -> tuple[Figure, list]:
    sns.set_theme(style="whitegrid", context="notebook")
    figure, axes = plt.subplots(rows, columns, figsize=(width, height), layout="constrained", squeeze=False, **shared)
    return figure, list(axes.ravel())


def histogram_figure(histogram: LengthHistogram) -> Figure:
    """Sequence lengths in at most `HISTOGRAM_BINS` bins, by sequences and by tokens (what padding and
    packing act on), and their cumulative shares: readable from 128 to 128k tokens."""
    figure, (shares, cumulative) = _figure(width=11.0, height=4.4, columns=2)
    lengths = np.arange(1, histogram.max_length + 1)
    tokens = histogram.counts * lengths
    bins = min(HISTOGRAM_BINS, histogram.max_length)
    edges = np.linspace(0, histogram.max_length, bins + 1).round().astype(int)
    colors = sns.color_palette()
    last_bins = []
    for weights, label, color in ((histogram.counts, "sequences", colors[0]), (tokens, "tokens", colors[1])):
        total = max(weights.sum(), 1)
        binned = np.add.reduceat(weights, edges[:-1]) / total
        shares.stairs(100 * binned, edges + 0.5, fill=True, alpha=0.35, color=color)
        shares.stairs(100 * binned, edges + 0.5, color=color, label=f"share of {label}")
        cumulative.plot(lengths, 100 * np.cumsum(weights) / total, color=color, label=f"{label} up to this length")
        last_bins.append((label, 100 * binned[-1], 100 * binned[:-1].max(initial=0.0)))
    _clip_truncation_spike(shares, last_bins, f"{edges[-2] + 1:,}-{edges[-1]:,}")
    width = histogram.max_length / bins
    shares.set_xlim(0, histogram.max_length * 1.01)
    shares.set_xlabel(f"sequence length (tokens), bins of {width:.3g}")
    shares.set_ylabel("share per bin (%)")
    shares.legend(fontsize=8, loc="upper center")
    at_max = histogram.counts[-1] / max(histogram.sequences, 1)
    if at_max > 0:
        shares.set_title(f"{100 * at_max:.1f} % of sequences are exactly {histogram.max_length:,} tokens long",
                         fontsize=9)
    cumulative.axhline(50, color="grey", linewidth=0.8, linestyle=":")
    cumulative.set_xlim(0, histogram.max_length * 1.01)
    cumulative.set_ylim(0, 100)
    cumulative.set_xlabel("sequence length (tokens)")
    cumulative.set_ylabel("cumulative share (%)")
    cumulative.legend(fontsize=8, loc="lower right")
    # The figures go in the title, where they cannot hide a peak of the histogram.
    figure.suptitle(f"{histogram.name}: {histogram.sequences:,} sequences, max length {histogram.max_length:,}; "
                    f"padding at max length {100 * (1 - histogram.efficiency):.1f} %, "
                    f"padded slots / real tokens {histogram.theoretical_speedup:.3f}x", fontsize=11)
    return figure


def _clip_truncation_spike(axis, last_bins: list[tuple[str, float, float]], lengths: str) -> None:
    """Sequences truncated to the max length pile up in the last bin (47 % of Wikipedia's tokens): when it
    towers over the rest, cut the axis above the rest and print the last bin's shares at its top."""
    rest = max(highest for _, _, highest in last_bins)
    spike = max(last for _, last, _ in last_bins)
    if rest <= 0 or spike <= SPIKE_CLIP_RATIO * rest:
        return
    top = 1.3 * rest
    axis.set_ylim(0, top)
    shares = "\n".join(f"{last:.1f} % of {label}" for label, last, _ in last_bins)
    # Top right, beside the cut bar and clear of the legend (upper centre).
    axis.annotate(f"last bin ({lengths} tokens):\n{shares}", (1, 1), xycoords="axes fraction", xytext=(-10, -6),
                  textcoords="offset points", ha="right", va="top", fontsize=8,
                  bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})


def packing_figure(packing: pd.DataFrame, timings: pd.DataFrame, real_tokens: int, max_length: int) -> Figure:
    """Packing efficiency per strategy on a logit axis (which spreads 99 %, 99.9 % and 99.99 % as far apart
    as 50 % and 90 %), the LP bound at each depth where it was computed, and each packer's solve time."""
    figure, (left, right) = _figure(width=10.0, height=1.9 + 0.28 * len(packing), columns=2)
    labels = packing["label"].tolist()
    positions = np.arange(len(labels))
    efficiency = packing["efficiency"].clip(EFFICIENCY_SHOWN_MIN, EFFICIENCY_SHOWN_MAX).to_numpy()
    left.hlines(positions, EFFICIENCY_SHOWN_MIN, efficiency, color=sns.color_palette()[0], linewidth=2, alpha=0.5)
    left.scatter(efficiency, positions, color=sns.color_palette()[0], zorder=3, label="efficiency (value beside it)")
    bound = real_tokens / (packing["lower_bound_packs"].astype(float) * max_length)
    # A bound on packs bounds the efficiency of fixed-shape packs only (not of sorted batches).
    bound = bound.where(packing["tokens"] == packing["packs"] * max_length)
    if bound.notna().any():
        rows = bound.notna().to_numpy()
        left.vlines(bound[rows].clip(upper=EFFICIENCY_SHOWN_MAX), positions[rows] - 0.4, positions[rows] + 0.4,
                    color="black", linewidth=2, zorder=4, label="LP bound at the same depth")
    left.set_xscale("logit")
    ticks = [tick for tick in (0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999) if tick <= EFFICIENCY_SHOWN_MAX]
    left.set_xticks(ticks, [f"{100 * tick:g}" for tick in ticks])
    left.xaxis.set_minor_formatter(NullFormatter())
    left.set_xlim(min(EFFICIENCY_SHOWN_MIN, efficiency.min() * 0.98), EFFICIENCY_SHOWN_MAX)
    _label_dots(left, efficiency, packing["efficiency"], positions)
    left.legend(fontsize=8, loc="upper right", framealpha=0.9)  # in the headroom above the first row
    left.set_yticks(positions, labels)
    left.set_ylim(len(labels) - 0.5, -1.6)
    left.set_xlabel("efficiency: real tokens / token slots (%, logit scale)")
    seconds = timings.set_index("strategy")["solve_seconds"].reindex(labels)
    right.barh(positions, seconds.clip(lower=1e-6), color=sns.color_palette()[1])
    right.set_xscale("log")
    right.set_yticks(positions, [""] * len(labels))
    right.set_ylim(len(labels) - 0.5, -1.6)
    right.set_xlabel("solve time (s, log scale)")
    figure.suptitle("Packing efficiency and solve time")
    return figure


def _label_dots(axis, shown: np.ndarray, values: pd.Series, positions: np.ndarray) -> None:
    """Each efficiency printed against its own dot, on the stem to its left: a strategy's LP bound is never
    below its efficiency, so the bound's marker is never there to be mistaken for what the figure says.
    A dot too near the left end for its figure gets it on the right, on a white ground."""
    start, end = (np.log(limit / (1 - limit)) for limit in axis.get_xlim())
    fractions = (np.log(shown / (1 - shown)) - start) / (end - start)  # where each dot is across the logit axis
    for position, value, fraction in zip(positions, values, fractions):
        on_left = fraction > LABEL_ROOM_FRACTION
        axis.annotate(f"{100 * value:.3f}", (shown[position], position), xytext=(-7 if on_left else 7, 0),
                      textcoords="offset points", ha="right" if on_left else "left", va="center", fontsize=7,
                      zorder=5, bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none",
                                      "alpha": 0.85})


def plan_family(label: str) -> str:
    """The family a simulated strategy belongs to (padding, sorting, packing, un-padding, VTS), read from
    its plan so that a plug-in packer lands among the packers; a plug-in plan is its own family."""
    from simbench.errors import InputError
    from simbench.sim.plans import PlanKind, parse_plan

    try:
        plan = parse_plan(label)
    except InputError:
        return "other"
    if plan.kind == PlanKind.PACKING:
        return {"none": "padding", "sort": "sorting"}.get(plan.packer, "packing")
    return {PlanKind.UNPAD: "un-padding", PlanKind.VTS: "VTS"}.get(plan.kind, str(plan.kind))


def scaling_figure(scaling: pd.DataFrame, title: str = "", dashed: tuple[float, str] | None = None) -> Figure:
    """Realized speed-up versus device count (paper's Figure 5), one colour per family of strategies: its
    best (highest mean speed-up) drawn bold and named, the rest faded, and `dashed` (speed-up, name:
    the ideal, simbench.report.summary.speedup_reference) dashed. `title` names the dataset, model and hardware."""
    figure, (axis,) = _figure(width=10.0, height=5.0)
    scaling = scaling.assign(family=[plan_family(label) for label in scaling["strategy"]])
    if "reference" not in scaling:
        scaling = scaling.assign(reference="none")
    families = list(dict.fromkeys(FAMILY_ORDER + list(scaling["family"])))
    colors = dict(zip(families, sns.color_palette("deep", len(families))))
    ends = []  # (speed-up at the largest cluster, name, colour) of each family's best, named at the right end
    for (family, reference), rows in scaling.groupby(["family", "reference"], sort=False):
        mean_speedup = rows.groupby("strategy", sort=False)["speedup"].mean()
        best = mean_speedup.idxmax()
        # Plans measured against another baseline (VTS: the padded pipeline) are dashed and say so.
        style = "-" if reference == "none" else "--"
        over = "" if reference == "none" else f" (over {reference})"
        others = [label for label in mean_speedup.index if label != best]
        for number, label in enumerate(others):
            line = rows[rows["strategy"] == label].sort_values("devices")
            axis.plot(line["devices"], line["speedup"], color=colors[family], alpha=0.25, linewidth=1, linestyle=style,
                      label=f"{family}: {len(others)} more{over}" if number == 0 else None)
        line = rows[rows["strategy"] == best].sort_values("devices")
        axis.plot(line["devices"], line["speedup"], color=colors[family], linewidth=2.4, marker="o", markersize=5,
                  linestyle=style, label=f"{family}: {best}{over}", zorder=3)
        ends.append((line["speedup"].iloc[-1], best, colors[family]))
    _name_line_ends(axis, ends, scaling["devices"].max())
    line = dashed[0] if dashed is not None else 0.0
    if dashed is not None:
        axis.axhline(line, color="black", linewidth=1.2, linestyle="--", label=f"{dashed[1]}: {line:.3f}x")
    axis.set_xscale("log", base=2)
    devices = sorted(scaling["devices"].unique())
    axis.set_xticks(devices, [str(count) for count in devices])
    axis.minorticks_off()
    axis.set_xlim(devices[0] / 1.3, devices[-1] * 2.5)  # room for the names at the right end
    axis.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    top = max(scaling["speedup"].max(), line)
    axis.set_ylim(top=1.0 + (top - 1.0) * 1.06 if top > 1.0 else None)  # keep the dashed line off the frame
    axis.set_xlabel("devices (data parallel)")
    axis.set_ylabel("speed-up over padding (same devices)")
    axis.set_title(f"Realized speed-up versus cluster size{': ' + title if title else ''}", fontsize=11)
    axis.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), title="bold: best of its family",
                title_fontsize=8)
    return figure


def _name_line_ends(axis, ends: list[tuple[float, str, tuple]], devices: int) -> None:
    """Names at the right ends of lines, nudged apart so that two lines ending close stay readable, on a
    white ground where they cross the ceiling or a faded line."""
    low, high = min(end[0] for end in ends), max(end[0] for end in ends)
    gap = 0.045 * max(high - min(low, 1.0), 0.1)  # about one line of 8-point text on a 5-inch plot
    placed = []
    for speedup, name, color in sorted(ends, key=lambda end: end[0]):
        y = max(speedup, placed[-1] + gap) if placed else speedup
        placed.append(y)
        axis.annotate(name, (devices, speedup), xytext=(devices * 1.12, y), textcoords="data", va="center",
                      fontsize=8, color=color, zorder=5, bbox={"boxstyle": "round,pad=0.1", "facecolor": "white",
                                                               "edgecolor": "none", "alpha": 0.8})


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
    sample is blocked because the next stage still holds a longer one. Every panel spans the same
    window of time, so that their samples' widths compare."""
    groups = list(timeline.groupby("strategy", sort=False))
    # The quickest pipeline's first samples set the window: a slower one shows fewer samples in it.
    window_seconds = min(rows.loc[rows["sample"] < TIMELINE_SAMPLES_SHOWN, "leave_seconds"].max() for _, rows in groups)
    figure, axes = _figure(width=10.0, height=1.2 + 2.2 * len(groups), rows=len(groups), sharex=True)
    colors = sns.color_palette("husl", 8)
    for axis, (label, rows) in zip(axes, groups):
        shown = rows[rows["enter_seconds"] < window_seconds]
        for stage, in_stage in shown.groupby("stage"):
            busy = list(zip(in_stage["enter_seconds"], in_stage["finish_seconds"] - in_stage["enter_seconds"]))
            axis.broken_barh(busy, (stage - 0.4, 0.8), edgecolor="white", linewidth=0.3,
                             facecolors=[colors[sample % len(colors)] for sample in in_stage["sample"]])
            blocked = in_stage[in_stage["blocked_seconds"] > 0]
            axis.broken_barh(list(zip(blocked["finish_seconds"], blocked["blocked_seconds"])), (stage - 0.4, 0.8),
                             facecolors="none", edgecolor="black", hatch="///", linewidth=0.3)
        stages = sorted(rows["stage"].unique())
        labelled = stages[::-(-len(stages) // STAGE_LABELS_MAX)]
        axis.set_yticks(labelled, [str(stage) for stage in labelled])
        axis.invert_yaxis()
        axis.set_ylabel("stage")
        busy = (rows["leave_seconds"] - rows["enter_seconds"]).sum()
        samples = rows["sample"].nunique()
        axis.set_title(f"{label}: {shown['sample'].nunique()} of {samples} samples start in this window; over the "
                       f"whole batch, blocked {100 * rows['blocked_seconds'].sum() / busy:.1f} % of stage time",
                       fontsize=10)
    axes[-1].set_xlim(0.0, window_seconds)
    axes[-1].set_xlabel("time (s)")
    figure.suptitle(f"VTS pipeline timelines on one time scale: the first {_seconds_text(window_seconds)} of a batch\n"
                    "(hatched: a finished sample waits for the next stage)")
    return figure


def _seconds_text(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 1 else f"{1e3 * seconds:.3g} ms"


def breakdown_figure(breakdown: pd.DataFrame) -> Figure:
    """Where the time goes, per strategy, as stacked bars (smallest and largest cluster).

    Time is per 1,000 real tokens on one device, so that strategies that put more sequences in a
    step (packing) compare fairly with those that do not.
    """
    # A part that is zero everywhere (stall outside VTS) would only add a legend entry with no bar.
    parts = [part for part in BREAKDOWN_COLUMNS if part in breakdown and (breakdown[part] > 1e-12).any()]
    device_counts = sorted(breakdown["devices"].unique())
    shown = sorted({device_counts[0], device_counts[-1]})
    # One y-scale for both panels: the point is to compare a strategy's time on a small and a large cluster.
    figure, axes = _figure(width=5.5 * len(shown), height=4.8, columns=len(shown), sharey=True)
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
        axis.margins(y=0.05)
        axis.set_title(f"{devices} device{'s' if devices > 1 else ''}")
    axes[0].set_ylabel("device time per 1,000 real tokens (ms)")
    # Beside the panels: inside, it would cover the tallest bars.
    figure.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize=8)
    figure.suptitle("Where the time goes")
    return figure


FIGURES = {"histogram": histogram_figure, "packing": packing_figure, "scaling": scaling_figure,
           "gumbel": gumbel_figure, "timeline": timeline_figure, "breakdown": breakdown_figure}
