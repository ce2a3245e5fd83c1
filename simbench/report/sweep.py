"""A sweep's report: which strategy wins in each cell, a heatmap of the winner over two swept axes, and
where un-padding stops beating packing, from the sweep's Parquet results."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from simbench.report.markdown import markdown_table
from simbench.report.precision import format_with_spread, leaders, names_text, speedup_spread
from simbench.sim.results import VTS_REFERENCE

# winners.png's colour for a cell whose fastest strategies tie.
TIE_LABEL = "tie"
TIE_COLOUR = "#bdbdbd"


def winners(results: pd.DataFrame, axes: tuple[str, ...]) -> pd.DataFrame:
    """Per cell and device count: the fastest strategy over the cell's baseline, its speed-up and that speed-up's spread,
    and `tied_with`: the strategies tied with it by the Answer's rule (simbench.report.precision), comma-separated,
    empty where it leads clearly."""
    over_baseline = results[results["reference"] != VTS_REFERENCE]
    rows = []
    for _, group in over_baseline.groupby(["cell", "devices"], sort=True):
        tied = leaders(group)
        rows.append(tied.iloc[:1].assign(tied_with=", ".join(tied["strategy"].iloc[1:]),
                                         speedup_spread=speedup_spread(tied.iloc[0])))
    best = pd.concat(rows) if rows else over_baseline.assign(tied_with="", speedup_spread=0.0)
    return best[["cell", *(axis for axis in axes if axis != "devices"), "devices", "strategy", "tied_with",
                 "speedup", "speedup_spread"]].reset_index(drop=True)


def _winners_text(table: pd.DataFrame) -> pd.DataFrame:
    """The winners as summary.md shows them: tied strategies named together, speed-ups to the digits their
    spread supports."""
    names = [names_text([strategy, *filter(None, tied_with.split(", "))]) + (" (tie)" if tied_with else "")
             for strategy, tied_with in zip(table["strategy"], table["tied_with"])]
    speedups = [format_with_spread(speedup, spread) for speedup, spread in zip(table["speedup"],
                                                                              table["speedup_spread"])]
    return table.drop(columns=["tied_with", "speedup_spread"]).assign(strategy=names, speedup=speedups)


def unpadding_crossover(results: pd.DataFrame, axes: tuple[str, ...]) -> pd.DataFrame:
    """For each combination of the axes other than devices: the smallest device count from which the best
    fixed-shape packer (padded packs) beats plain un-padding, and the same for packing with variable-length
    attention; 'never' where it does not within the devices swept."""
    keys = [axis for axis in axes if axis != "devices"]
    rows = []
    groups = results.groupby(keys, sort=True, dropna=False) if keys else [((), results)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        unpad = group[group["strategy"] == "unpad"].groupby("devices")["speedup"].max()
        if unpad.empty:
            continue
        row = dict(zip(keys, key))
        packers = group[group["packer"].notna() & (group["packer"] != "none") & (group["reference"] != VTS_REFERENCE)]
        for label, mode in (("fixed-shape packing", "padded"), ("packed-varlen", "packed_varlen")):
            best = packers[packers["mode"] == mode].groupby("devices")["speedup"].max()
            shared = sorted(set(unpad.index) & set(best.index))
            if shared:
                beaten = [devices for devices in shared if best[devices] > unpad[devices]]
                row[f"{label} beats unpad from devices"] = beaten[0] if beaten else "never"
        rows.append(row)
    return pd.DataFrame(rows)


def write_sweep_report(out: Path, name: str, axes: tuple[str, ...], report_axes: tuple[str, str] | None,
                       failures: list[dict], results: pd.DataFrame) -> list[Path]:
    """summary.md (and winners.png when two axes are named) in `out`, each written atomically."""
    from simbench.atomic import atomic_file
    from simbench.sweep_ledger import read_ledger

    out = Path(out)
    ledger = read_ledger(out)
    if ledger is not None:  # before the first file is replaced: an interrupted write resumes
        ledger.writing_reports()
    lines = [f"# Sweep {name}", "",
             f"{results['cell'].nunique() if not results.empty else 0} cells finished, {len(failures)} failed "
             f"(their errors are in failures/). Speed-ups are over each cell's baseline (its `baseline` key, "
             f"named in `reference`) at the same device count; VTS plans are over their padded pipeline."
             + (" Where a cell has a 4D layout its devices are data-parallel replicas of `gpus_per_replica` GPUs; "
                "`gpus` counts them all." if _has_layout(results) else "")]
    written = []
    if not results.empty:
        table = winners(results, axes)
        lines += ["", "## Fastest strategy per cell and device count", "",
                  "Strategies whose speed-ups lie within the Answer's tie rule of each other (a lead within "
                  "two spreads, or under 0.1 %) are named together as a tie; a speed-up's ± is its spread.", "",
                  markdown_table(_winners_text(table))]
        crossover = unpadding_crossover(results, axes)
        if not crossover.empty:
            lines += ["", "## Where packing overtakes un-padding", "",
                      "Un-padding's step waits for the slowest device, so its speed-up falls as devices are added; "
                      "fixed-shape packs take the same time on every device and keep theirs; packing with "
                      "variable-length attention varies with the documents in each pack, so it falls too, less.",
                      "", markdown_table(crossover.fillna("-"))]
        if results["devices"].nunique() > 1:
            written.append(_scaling_facets(out / "scaling.png", results, axes))
            lines += ["", f"scaling.png: speed-up over {_over(results)} against devices, one panel per combination of the "
                          "other swept values" + (f" (the first {FACETS_MAX})" if _facet_count(results, axes)
                                                  > FACETS_MAX else "") + "."]
        if report_axes is not None:
            written.append(_winner_heatmap(out / "winners.png", table, report_axes, _over(results)))
            lines += ["", f"winners.png: the fastest strategy at each ({report_axes[0]}, {report_axes[1]}) "
                          f"at the largest device count of the cell ({TIE_LABEL}, marked =, where the fastest tie)."]
    if failures:
        lines += ["", "## Failed cells", "",
                  markdown_table(pd.DataFrame([{"cell": failure["cell"], "values": json.dumps(failure["values"]),
                                           "error": failure["error"][:200]} for failure in failures]))]
    with atomic_file(out / "summary.md") as temporary:
        temporary.write_text("\n".join(lines) + "\n")
    written = [out / "summary.md", *written]
    if ledger is not None:  # so that --resume tells these files from a user's edits
        ledger.record_reports(written)
    return written


def _has_layout(results: pd.DataFrame) -> bool:
    """Whether any cell ran a 4D layout (`sweep.run_cell` gives such rows the layout's columns)."""
    return "tp" in results and results["tp"].notna().any()


FACETS_MAX = 12  # panels of scaling.png; more would be unreadable


def _facet_keys(axes: tuple[str, ...]) -> list[str]:
    return [axis for axis in axes if axis != "devices"]


def _facet_count(results: pd.DataFrame, axes: tuple[str, ...]) -> int:
    keys = _facet_keys(axes)
    return len(results.groupby(keys)) if keys else 1


def _scaling_facets(path: Path, results: pd.DataFrame, axes: tuple[str, ...]) -> Path:
    return _save(scaling_facets_figure(results, axes), path, dpi=100)


def scaling_facets_figure(results: pd.DataFrame, axes: tuple[str, ...]):
    """Speed-up over the baseline against devices (log2), a line per strategy in its family's style
    (simbench.report.styles), a panel per combination of the other axes (the first `FACETS_MAX`), each with
    its own tick labels; the legend beside the panels."""
    from simbench.report.plots import _figure, device_axis_label, device_ticks
    from simbench.report.styles import strategy_styles

    keys = _facet_keys(axes)
    rows = results[(results["reference"] != VTS_REFERENCE) & (results["strategy"] != "none")]
    panels = (list(rows.groupby(keys, sort=True)) if keys else [((), rows)])[:FACETS_MAX]
    styles = strategy_styles(sorted(rows["strategy"].unique()), rows)
    columns = min(len(panels), 3)
    grid_rows = -(-len(panels) // columns)
    figure, grid = _figure(width=4.4 * columns + 1.8, height=3.1 * grid_rows + 0.3, columns=columns, rows=grid_rows)
    devices = sorted(rows["devices"].unique())
    for axis, (key, panel) in zip(grid, panels):
        for strategy, style in styles.items():
            points = panel[panel["strategy"] == strategy].groupby("devices")["speedup"].mean()
            if not points.empty:
                axis.plot(points.index, points.to_numpy(), marker=style.marker, markersize=3.5, color=style.colour,
                          linestyle="--" if style.dashed else "-", label=strategy)
        axis.set_xscale("log", base=2)
        axis.set_xlim(devices[0] / 1.3, devices[-1] * 1.3)  # one device range in every panel, all labelled
        device_ticks(axis, devices, most=6)
        key = key if isinstance(key, tuple) else (key,)
        axis.set_title(", ".join(f"{name} = {value}" for name, value in zip(keys, key)), fontsize=9)
        axis.set_xlabel(device_axis_label(devices, "devices"), fontsize=9)
        axis.set_ylabel(f"speed-up over {_over(results)}", fontsize=9)
        axis.tick_params(labelsize=8)
    for axis in grid[len(panels):]:
        axis.set_visible(False)
    handles, labels = grid[0].get_legend_handles_labels()
    if len(labels) < len(styles):  # a strategy missing from the first panel still has its legend entry
        for axis in grid[1:len(panels)]:
            for handle, label in zip(*axis.get_legend_handles_labels()):
                if label not in labels:
                    handles.append(handle)
                    labels.append(label)
    order = [labels.index(label) for label in styles if label in labels]
    figure.legend([handles[index] for index in order], [labels[index] for index in order],
                  loc="outside right upper", fontsize=9)
    return figure


def _save(figure, path: Path, dpi: int) -> Path:
    import matplotlib.pyplot as plt

    from simbench.atomic import atomic_file

    with atomic_file(path) as temporary:
        figure.savefig(temporary, format="png", dpi=dpi, metadata={"Software": None})
    plt.close(figure)
    return path


def _winner_heatmap(path: Path, table: pd.DataFrame, report_axes: tuple[str, str], over: str) -> Path:
    return _save(winners_figure(table, report_axes, over), path, dpi=110)


WINNERS_WIDTH_MIN = 6.5  # inches: the title's width
WINNERS_PANEL_HEIGHT_MIN = 2.0  # inches: a panel as tall as its y-axis label ("dataset.max_length")


def _over(results: pd.DataFrame) -> str:
    """The sweep's baseline in words: the cells' one baseline, or each cell's where a sweep varies it."""
    from simbench.report.baseline import over_words

    baselines = set(results["reference"]) - {VTS_REFERENCE}
    return over_words(baselines.pop()) if len(baselines) == 1 else "each cell's baseline"


def winners_figure(table: pd.DataFrame, report_axes: tuple[str, str], over: str = "the baseline"):
    """The winner over the two report axes, one panel per combination of the other swept axes, each
    strategy in its family's colour (simbench.report.styles)."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.colors import ListedColormap

    from simbench.report.plots import _figure
    from simbench.report.styles import strategy_styles

    x, y = report_axes
    largest = table.sort_values("devices").groupby("cell").tail(1)
    ties = largest["tied_with"].astype(bool) if "tied_with" in largest else pd.Series(False, index=largest.index)
    # A cell whose fastest strategies tie names none of them: it is coloured as a tie.
    largest = largest.assign(strategy=largest["strategy"].where(~ties, TIE_LABEL))
    others = [column for column in largest.columns
              if column not in ("cell", "devices", "strategy", "speedup", "tied_with", "speedup_spread", x, y)]
    panels = list(largest.groupby(others, sort=True)) if others else [((), largest)]
    styles = strategy_styles(sorted(set(largest["strategy"]) - {TIE_LABEL}))
    colours = [style.colour for style in styles.values()] + ([TIE_COLOUR] if ties.any() else [])
    strategies = list(styles) + ([TIE_LABEL] if ties.any() else [])
    palette = ListedColormap(colours)
    columns, rows = largest[x].nunique(), largest[y].nunique()
    # The legend goes under the panels, where a narrow figure's title cannot run into it (beside them, it did);
    # a figure at least as wide as its title, a panel at least as tall as its axis label.
    legend_columns = min(len(strategies), 3)
    legend_rows = -(-len(strategies) // legend_columns)
    figure, axes = _figure(width=max(WINNERS_WIDTH_MIN, 3.5 + 0.75 * columns),
                           height=max(WINNERS_PANEL_HEIGHT_MIN, 0.9 + 0.45 * rows) * len(panels) + 0.9
                           + 0.3 * legend_rows, rows=len(panels))
    for axis, (key, rows_of_panel) in zip(axes, panels):
        grid = rows_of_panel.pivot_table(index=y, columns=x, values="strategy", aggfunc="first")
        speedups = rows_of_panel.assign(shown=[("=" if strategy == TIE_LABEL else "") + f"{speedup:.2f}"
                                               for strategy, speedup in zip(rows_of_panel["strategy"],
                                                                            rows_of_panel["speedup"])]
                                        ).pivot_table(index=y, columns=x, values="shown", aggfunc="first")
        # A failed cell has no winner: its square is left blank (it was a ValueError, and no report).
        codes = grid.apply(lambda column: column.map(strategies.index, na_action="ignore"))
        sns.heatmap(codes.astype(float), cmap=palette, cbar=False, ax=axis, linewidths=0.5, vmin=-0.5,
                    vmax=len(strategies) - 0.5, annot=speedups.to_numpy(), fmt="",
                    annot_kws={"fontsize": 8})
        key = key if isinstance(key, tuple) else (key,)
        axis.set_title(", ".join(f"{name} = {value}" for name, value in zip(others, key)) or None, fontsize=10)
        axis.tick_params(labelsize=8)
        axis.grid(False)  # no grid lines through a failed cell's blank square
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in colours]
    figure.legend(handles, strategies, title="fastest", loc="outside lower center", ncols=legend_columns,
                  frameon=False, fontsize=9, title_fontsize=9)
    figure.suptitle(f"fastest strategy and its speed-up over {over}", x=0.02, ha="left")
    return figure
