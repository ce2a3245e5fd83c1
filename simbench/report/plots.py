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
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402
from matplotlib.transforms import ScaledTranslation  # noqa: E402

from simbench.histogram import LengthHistogram  # noqa: E402
from simbench.report.baseline import baseline_of, over_words  # noqa: E402
from simbench.report.styles import Style, strategy_styles  # noqa: E402
from simbench.report.units import DEVICE, DeviceUnit  # noqa: E402
from simbench.sim.results import BREAKDOWN_COLUMNS  # noqa: E402
from simbench.sim.stragglers.gumbel import gumbel_pdf  # noqa: E402
from simbench.strategies.packing import efficiency_text  # noqa: E402

# Fixed ids and no timestamps, so that the same tables always give byte-identical files.
matplotlib.rcParams["svg.hashsalt"] = "simbench"
matplotlib.rcParams["svg.fonttype"] = "path"
# Samples of a VTS batch drawn in the timeline: enough to see stalls, few enough to tell them apart.
TIMELINE_SAMPLES_SHOWN = 48
# Stage numbers one panel of the timeline can label without their text touching (24 stages did).
STAGE_LABELS_MAX = 8
HISTOGRAM_BINS = 256  # enough to see the shape, few enough to read a bar at 128k tokens
# A last histogram bin this many times higher than every other one flattens them: the axis is cut above them.
SPIKE_CLIP_RATIO = 4
# The packing plot's logit axis: from a half-empty pack to one padding token in a million.
EFFICIENCY_SHOWN_MIN, EFFICIENCY_SHOWN_MAX = 0.4, 1 - 1e-6
# A dot this far across the efficiency axis has room on its left for its figure ("99.949" at 7 points).
LABEL_ROOM_FRACTION = 0.15
# Decades a log axis of seconds labels at most: more, and every second or third decade is labelled.
SECONDS_LABELS_MAX = 6
# Tick labels one device axis shows at most (every device count is still a point on the lines).
DEVICE_LABELS_MAX = 12
LEGEND_ROW_INCHES = 0.19  # one 8-point legend entry, for sizing a figure to its legend
_METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}
# seaborn's whitegrid theme at notebook scale and its "deep" palette, as matplotlib ships them: the look without
# importing seaborn, and scipy.stats with it (over a second in every process that draws).
THEME = ("seaborn-v0_8-whitegrid", "seaborn-v0_8-notebook", "seaborn-v0_8-deep")
plt.style.use(THEME)
PALETTE = plt.rcParams["axes.prop_cycle"].by_key()["color"]
STAGE_COLOURS = [plt.get_cmap("Set2")(index) for index in range(8)]  # a VTS pipeline's stages, 8 at most apart


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
        # The first format's draw laid the figure out; the others keep that layout rather than solve it again
        # (constrained layout is most of a plot's drawing time).
        figure.set_layout_engine("none")
    plt.close(figure)
    return contents


def _figure(width: float = 7.0, height: float = 4.2, columns: int = 1, rows: int = 1,
            **shared) -> tuple[Figure, list]:
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
    colors = PALETTE
    last_bins = []
    for weights, label, color in ((histogram.counts, "sequences", colors[0]), (tokens, "tokens", colors[1])):
        total = max(weights.sum(), 1)
        binned = np.add.reduceat(weights, edges[:-1]) / total
        shares.stairs(100 * binned, edges + 0.5, fill=True, alpha=0.35, color=color)
        shares.stairs(100 * binned, edges + 0.5, color=color, label=f"by {label}")
        cumulative.plot(lengths, 100 * np.cumsum(weights) / total, color=color, label=f"by {label}")
        last_bins.append((label, 100 * binned[-1], 100 * binned[:-1].max(initial=0.0)))
    _clip_truncation_spike(shares, last_bins, f"{edges[-2] + 1:,}-{edges[-1]:,}")
    width = histogram.max_length / bins
    shares.set_xlim(0, histogram.max_length * 1.01)
    shares.set_xlabel(f"sequence length (tokens), bins of {width:.3g}")
    shares.set_ylabel("share per bin (%)")
    at_max = histogram.counts[-1] / max(histogram.sequences, 1)
    if at_max > 0:
        shares.set_title(f"{100 * at_max:.1f} % of sequences are exactly {histogram.max_length:,} tokens long",
                         fontsize=9)
    cumulative.axhline(50, color="grey", linewidth=0.8, linestyle=":")
    cumulative.set_xlim(0, histogram.max_length * 1.01)
    cumulative.set_ylim(0, 100)
    cumulative.set_xlabel("sequence length (tokens)")
    cumulative.set_ylabel("cumulative share up to this length (%)")
    # One legend for both panels (their colours mean the same), below them: inside, it hid a peak or the
    # last bin's note at some lengths.
    figure.legend(*cumulative.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=9)
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
    # Top right, beside the cut bar.
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
    left.hlines(positions, EFFICIENCY_SHOWN_MIN, efficiency, color=PALETTE[0], linewidth=2, alpha=0.5)
    left.scatter(efficiency, positions, color=PALETTE[0], zorder=3, label="efficiency (value beside it)")
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
    # Above the panel, outside the data: inside, it covered a row's dot at some efficiencies.
    left.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, frameon=False, borderaxespad=0.2)
    left.set_yticks(positions, labels)
    left.set_ylim(len(labels) - 0.5, -0.5)
    left.set_xlabel("efficiency: real tokens / token slots (%, logit scale)")
    seconds = timings.set_index("strategy")["solve_seconds"].reindex(labels).astype(float)
    right.barh(positions, seconds.clip(lower=SOLVE_SECONDS_MIN), color=PALETTE[1])
    _seconds_axis(right, seconds.dropna().to_numpy())
    right.set_yticks(positions, [""] * len(labels))
    right.set_ylim(len(labels) - 0.5, -0.5)
    right.set_xlabel("solve time (log scale)")
    figure.suptitle("Packing efficiency and solve time")
    return figure


SOLVE_SECONDS_MIN = 1e-6  # a solve time shown on a log axis: nothing takes less than a microsecond to pack


def _seconds_axis(axis, seconds: np.ndarray) -> None:
    """A log axis of seconds labelled only at whole decades, with units ("10 ms", "1 s"), spanning at least
    one decade: labelled between decades, matplotlib wrote "4x10^-2" at every minor tick, into a smear."""
    seconds = np.clip(seconds[np.isfinite(seconds)], SOLVE_SECONDS_MIN, None)
    low, high = (seconds.min(), seconds.max()) if seconds.size else (1e-3, 1.0)
    first, last = int(np.floor(np.log10(low))), int(np.ceil(np.log10(high)))
    last = max(last, first + 1)
    step = -(-(last - first + 1) // SECONDS_LABELS_MAX)
    decades = [10.0 ** exponent for exponent in range(first, last + 1, step)]
    axis.set_xscale("log")
    axis.set_xlim(10.0 ** first, 10.0 ** last)
    axis.set_xticks(decades, [seconds_text(value) for value in decades])
    axis.xaxis.set_minor_formatter(NullFormatter())


def seconds_text(seconds: float) -> str:
    """A duration with its unit and at most three significant digits: 1 µs, 10 ms, 1.5 s, 100 s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale or unit == "ns":
            return f"{seconds / scale:.3g} {unit}"
    raise AssertionError("unreachable")


def _label_dots(axis, shown: np.ndarray, values: pd.Series, positions: np.ndarray) -> None:
    """Each efficiency printed against its own dot, on the stem to its left: a strategy's LP bound is never
    below its efficiency, so the bound's marker is never there to be mistaken for what the figure says.
    A dot too near the left end for its figure gets it on the right, on a white ground."""
    start, end = (np.log(limit / (1 - limit)) for limit in axis.get_xlim())
    fractions = (np.log(shown / (1 - shown)) - start) / (end - start)  # where each dot is across the logit axis
    for position, value, fraction in zip(positions, values, fractions):
        on_left = fraction > LABEL_ROOM_FRACTION
        axis.annotate(efficiency_text(value, 3), (shown[position], position), xytext=(-7 if on_left else 7, 0),
                      textcoords="offset points", ha="right" if on_left else "left", va="center", fontsize=7,
                      zorder=5, bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none",
                                      "alpha": 0.85})


def scaling_figure(scaling: pd.DataFrame, title: str = "", dashed: tuple[float, str] | None = None,
                   unit: DeviceUnit = DEVICE) -> Figure:
    """Realized speed-up versus device count (paper's Figure 5): a line per strategy in its family's hue, each
    with a shade and marker of its own (simbench.report.styles); the best of each family (highest mean
    speed-up) bold and named at its right end; `dashed` (speed-up, name: the ideal,
    simbench.report.summary.speedup_reference) dashed black. `title` names the dataset, model and hardware.
    The legend, beside the plot, lists every strategy under its family; `unit` names what is counted."""
    baseline = baseline_of(scaling)
    if "reference" not in scaling:
        scaling = scaling.assign(reference=baseline)
    styles = strategy_styles(scaling["strategy"], scaling)
    families = list(dict.fromkeys(style.family for style in styles.values()))
    rows_shown = len(styles) + len(families) + (dashed is not None)
    figure, (axis,) = _figure(width=10.0, height=max(5.0, 1.6 + LEGEND_ROW_INCHES * rows_shown))
    mean_speedup = scaling.groupby("strategy", sort=False)["speedup"].mean()
    # The best of each family against each baseline (VTS plans are measured against their padded pipeline).
    family_of = scaling["strategy"].map(lambda label: styles[label].family)
    bests = {mean_speedup[labels.unique()].idxmax()
             for _, labels in scaling.groupby([family_of, "reference"], sort=False)["strategy"]}
    handles, labels, headers, ends = _family_lines(axis, scaling, styles, families, bests, baseline)
    line = dashed[0] if dashed is not None else 0.0
    if dashed is not None:
        handles.append(axis.axhline(line, color="black", linewidth=1.2, linestyle="--"))
        labels.append(f"{dashed[1]}: {line:.3f}x")
    axis.set_xscale("log", base=2)
    devices = sorted(scaling["devices"].unique())
    device_ticks(axis, devices)
    axis.set_xlim(devices[0] / 1.2, devices[-1] * 1.2)
    axis.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    top = max(scaling["speedup"].max(), line)
    axis.set_ylim(top=1.0 + (top - 1.0) * 1.06 if top > 1.0 else None)  # keep the dashed line off the frame
    axis.set_xlabel(device_axis_label(devices, unit.axis_label("data parallel")))
    axis.set_ylabel(f"speed-up over {over_words(baseline)} (same {unit.plural})")
    # Over the whole figure: over the axis alone, a long setting ran off its left edge.
    figure.suptitle(f"Realized speed-up over {over_words(baseline)} versus cluster size{': ' + title if title else ''}",
                    fontsize=11)
    names_inches = _name_line_ends(axis, ends, figure)
    # Beside the names at the lines' ends, level with the frame's top (a figure legend rose into the title).
    beside = axis.transAxes + ScaledTranslation(names_inches + 0.1, 0.0, figure.dpi_scale_trans)
    legend = axis.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 1.0), bbox_transform=beside,
                         borderaxespad=0.0, fontsize=8, title="bold: best of its family", title_fontsize=8)
    for index in headers:
        legend.get_texts()[index].set_fontweight("bold")
    return figure


def _family_lines(axis, scaling: pd.DataFrame, styles: dict, families: list[str], bests: set[str], baseline: str):
    """Each family's header and lines on `axis`: the legend's handles, labels and header rows, and the (speed-up
    at the largest cluster, name, colour) of each family's best, named at the right end."""
    handles, labels, headers = [], [], []
    ends = []
    for family in families:
        headers.append(len(labels))
        handles.append(Line2D([], [], linestyle="none"))
        labels.append(family)
        for label in [label for label, style in styles.items() if style.family == family]:
            style, rows = styles[label], scaling[scaling["strategy"] == label].sort_values("devices")
            reference = rows["reference"].iloc[0]
            bold = label in bests
            # Plans measured against another baseline are dashed and say so; so are a family's 13th and later.
            line, = axis.plot(rows["devices"], rows["speedup"], color=style.colour, marker=style.marker,
                              markersize=5.5 if bold else 3.5, linewidth=2.4 if bold else 1.1,
                              linestyle="--" if reference != baseline or style.dashed else "-", zorder=3 if bold else 2)
            handles.append(line)
            labels.append(label + ("" if reference == baseline else f" (over {reference})"))
            if bold:
                ends.append((rows["speedup"].iloc[-1], label, style.colour))
    return handles, labels, headers, ends


def device_ticks(axis, devices: list[int], most: int = DEVICE_LABELS_MAX) -> None:
    """Label at most `most` of the device counts on a log axis (every one when they fit), written short."""
    devices = sorted(set(int(count) for count in devices))
    shown = devices[::-(-len(devices) // most)]
    axis.set_xticks(shown, [count_text(count) for count in shown])
    axis.minorticks_off()


def count_text(count: int) -> str:
    """A device count as a tick label: 512, 2k (2,048), 512k, 1M (1,048,576); others with separators."""
    if count >= 2**20 and count % 2**20 == 0:
        return f"{count >> 20}M"
    if count >= 2**10 and count % 2**10 == 0:
        return f"{count >> 10}k"
    return f"{count:,}"


def device_axis_label(devices: list[int], label: str) -> str:
    """`label`, saying what k and M mean where a tick uses them."""
    return label + (", k = 1,024" if any(count_text(int(count))[-1] in "kM" for count in devices) else "")


def _name_line_ends(axis, ends: list[tuple[float, str, str]], figure: Figure) -> float:
    """Names just right of the frame, level with the right ends of their lines, nudged apart so that two
    lines ending close stay readable; returns the width they take (inches)."""
    low, high = axis.get_ylim()
    axis_inches = max(figure.get_figheight() - 1.3, 1.0)  # the frame's height within the figure, about
    gap = (high - low) * 11.5 / 72 / axis_inches  # one line of 8-point text, in data units
    ends = sorted(ends, key=lambda end: end[0])
    placed = []
    for speedup, _, _ in ends:
        placed.append(max(speedup, placed[-1] + gap) if placed else speedup)
    shift = max(placed[-1] - high + gap / 2, 0.0) if placed else 0.0  # the highest stays below the frame's top
    at_right = axis.get_yaxis_transform()  # x in axis fractions, y in data
    renderer = figure.canvas.get_renderer()
    widest = 0.0
    for (_, name, colour), y in zip(ends, placed):
        text = axis.annotate(name, (1.0, y - shift), xycoords=at_right, xytext=(4, 0), textcoords="offset points",
                             va="center", ha="left", fontsize=8, color=colour, annotation_clip=False)
        widest = max(widest, text.get_window_extent(renderer).width / figure.dpi)
    return widest + 4 / 72


def gumbel_figure(latency: pd.DataFrame, fit: pd.DataFrame, extrapolation: pd.DataFrame,
                  unit: DeviceUnit = DEVICE) -> Figure:
    """Per-device step speed-up samples with their Gumbel fit, and the expected cluster speed-up it implies;
    one legend below both panels (a strategy has one colour in both)."""
    fitted = list(dict.fromkeys(fit["strategy"]))
    styles = strategy_styles(fitted)
    handles, labels = [], []
    # Extrapolated rows of no fitted strategy are the published fit's (experiment.PAPER_FIT_LABEL).
    rows_shown = 2 * len(styles) + extrapolation["strategy"].isin(fitted).eq(False).any()
    figure, (left, right) = _figure(width=11.0, height=4.4 + LEGEND_ROW_INCHES * -(-rows_shown // 2), columns=2)
    for label, rows in latency.groupby("strategy", sort=False):
        colour = styles[label].colour
        samples = rows["speedup"].to_numpy()
        bars = left.hist(samples, bins=40, density=True, alpha=0.4, color=colour)[2]
        row = fit[fit["strategy"] == label].iloc[0]
        grid = np.linspace(samples.min(), samples.max(), 200)
        curve, = left.plot(grid, gumbel_pdf(grid, row["location"], row["scale"]), color=colour)
        handles += [bars[0], curve]
        labels += [f"{label}: simulated steps (bars), clusters (dots)",
                   f"{label}: Gumbel fit, location {row['location']:.3f}, scale {row['scale']:.3f} (curves)"]
    left.set_xlabel(f"per-{unit.name} speed-up over padding in one step")
    left.set_ylabel("density")
    for label, rows in extrapolation.groupby("strategy", sort=False):
        rows = rows.sort_values("devices")
        paper = label not in styles
        curve, = right.plot(rows["devices"], rows["expected_speedup"], color="black" if paper else styles[label].colour,
                            linestyle="--" if paper else "-")
        if paper:
            handles.append(curve)
            labels.append(f"{label}: expected minimum")
        elif rows["simulated_speedup"].notna().any():
            right.scatter(rows["devices"], rows["simulated_speedup"], color=styles[label].colour, s=14, zorder=3)
    right.set_xscale("log", base=2)
    devices = sorted(extrapolation["devices"].unique())
    device_ticks(right, devices, most=8)
    right.set_xlabel(device_axis_label(devices, unit.axis_label()))
    right.set_ylabel("expected speed-up over padding")
    right.set_title(f"a step waits for its slowest {unit.name}", fontsize=10)
    figure.legend(handles, labels, loc="outside lower center", ncols=2 if len(labels) > 3 else len(labels),
                  fontsize=8)
    figure.suptitle(f"Gumbel fit of per-{unit.name} speed-up, extrapolated to clusters")
    return figure


def timeline_figure(timeline: pd.DataFrame) -> Figure:
    """VTS pipelines, one batch each: every sample's time in every stage, hatched where a finished
    sample is blocked because the next stage still holds a longer one. Every panel spans the same
    window of time, so that their samples' widths compare."""
    groups = list(timeline.groupby("strategy", sort=False))
    # The quickest pipeline's first samples set the window: a slower one shows fewer samples in it.
    window_seconds = min(rows.loc[rows["sample"] < TIMELINE_SAMPLES_SHOWN, "leave_seconds"].max() for _, rows in groups)
    figure, axes = _figure(width=10.0, height=1.2 + 2.2 * len(groups), rows=len(groups), sharex=True)
    colors = STAGE_COLOURS
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
        axis.tick_params(labelbottom=True)  # every panel's time axis labelled, not only the last one's
        axis.invert_yaxis()
        axis.set_ylabel("stage")
        busy = (rows["leave_seconds"] - rows["enter_seconds"]).sum()
        samples = rows["sample"].nunique()
        axis.set_title(f"{label}: {shown['sample'].nunique()} of {samples} samples start in this window; over the "
                       f"whole batch, blocked {100 * rows['blocked_seconds'].sum() / busy:.1f} % of stage time",
                       fontsize=10)
    axes[-1].set_xlim(0.0, window_seconds)
    # Ticks in the window's own unit: "0.5" (ms), not "0.00050" (s).
    unit = seconds_text(window_seconds).split()[-1]
    scale = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}[unit]
    for axis in axes:
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value / scale:g}"))
    axes[-1].set_xlabel(f"time ({unit})")
    figure.suptitle(f"VTS pipeline timelines on one time scale: the first {seconds_text(window_seconds)} of a batch\n"
                    "(hatched: a finished sample waits for the next stage)")
    return figure


def breakdown_figure(breakdown: pd.DataFrame, unit: DeviceUnit = DEVICE) -> Figure:
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
    totals = []
    for axis, devices in zip(axes, shown):
        rows = breakdown[breakdown["devices"] == devices]
        positions = np.arange(len(rows))
        bottom = np.zeros(len(rows))
        per_thousand_tokens_ms = 1e6 / rows["real_tokens_per_device_step"].to_numpy()
        for part, color in zip(parts, PALETTE):
            values = np.clip(rows[part].to_numpy(), 0.0, None) * per_thousand_tokens_ms
            axis.bar(positions, values, bottom=bottom, color=color,
                     label=part.removesuffix("_seconds").replace("_", " "))
            bottom += values
        padding = np.clip(rows["padding_seconds"].to_numpy(), 0.0, None) * per_thousand_tokens_ms
        totals.append((axis, bottom, padding))
        axis.set_xticks(positions, rows["strategy"], rotation=45, ha="right", fontsize=8)
        axis.margins(y=0.05)
        axis.set_title(unit.count(int(devices)))
    _cut_towering_bars(totals)
    axes[0].set_ylabel(f"{unit.name} time per 1,000 real tokens (ms)")
    # Beside the panels: inside, it would cover the tallest bars.
    figure.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize=8)
    figure.suptitle("Where the time goes")
    return figure


def _cut_towering_bars(panels: list[tuple]) -> None:
    """Padding to max length can cost tens of times what the others do (58 ms per 1,000 real tokens against
    1-2 ms in 4D at 128k), and its bar flattened every other to a line: when a bar towers SPIKE_CLIP_RATIO
    times over the rest, the axis is cut above the rest and each cut bar says its total and padding's share.

    `panels`: (axis, each bar's total, each bar's padding) per panel; the panels share their y-axis."""
    totals = np.concatenate([bars for _, bars, _ in panels])
    rest = totals[totals <= SPIKE_CLIP_RATIO * np.median(totals)].max(initial=0.0)
    if rest <= 0 or totals.max() <= SPIKE_CLIP_RATIO * rest:
        return
    top = 1.3 * rest
    for axis, bars, padding in panels:
        axis.set_ylim(0, top)
        for position, (total, padded) in enumerate(zip(bars, padding)):
            if total > top:
                axis.annotate(f"{total:,.1f} ms\n(cut; {100 * padded / total:.0f} %\npadding)", (position, top),
                              xytext=(0, -4), textcoords="offset points", ha="center", va="top", fontsize=7,
                              bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none",
                                    "alpha": 0.85})


FIGURES = {"histogram": histogram_figure, "packing": packing_figure, "scaling": scaling_figure,
           "gumbel": gumbel_figure, "timeline": timeline_figure, "breakdown": breakdown_figure}
