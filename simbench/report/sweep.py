"""A sweep's report: which strategy wins in each cell, a heatmap of the winner over two swept axes, and
where un-padding stops beating packing, from the sweep's Parquet results."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from simbench.report.summary import markdown_table

def winners(results: pd.DataFrame, axes: tuple[str, ...]) -> pd.DataFrame:
    """Per cell and device count: the fastest strategy over padding and its speed-up."""
    over_padding = results[results["reference"] == "none"]
    ranked = over_padding.sort_values(["cell", "devices", "speedup", "strategy"],
                                      ascending=[True, True, False, True], kind="stable")
    best = ranked.groupby(["cell", "devices"], sort=True).head(1)
    return best[["cell", *(axis for axis in axes if axis != "devices"), "devices", "strategy",
                 "speedup"]].reset_index(drop=True)


def unpadding_crossover(results: pd.DataFrame, axes: tuple[str, ...]) -> pd.DataFrame:
    """For each combination of the axes other than devices: the smallest device count at which the best
    packing plan is faster than plain un-padding (empty where no cell has both)."""
    keys = [axis for axis in axes if axis != "devices"]
    rows = []
    groups = results.groupby(keys, sort=True, dropna=False) if keys else [((), results)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        unpad = group[group["strategy"] == "unpad"].groupby("devices")["speedup"].max()
        packing = group[group["packer"].notna() & (group["reference"] == "none") & (group["strategy"] != "none")]
        best_packing = packing.groupby("devices")["speedup"].max()
        both = sorted(set(unpad.index) & set(best_packing.index))
        if not both:
            continue
        beaten = [devices for devices in both if best_packing[devices] > unpad[devices]]
        rows.append({**dict(zip(keys, key)), "packing beats unpad from devices": beaten[0] if beaten else None,
                     "unpad on 1st count": round(float(unpad[both[0]]), 3),
                     "best packing on 1st count": round(float(best_packing[both[0]]), 3)})
    return pd.DataFrame(rows)


def write_sweep_report(out: Path, name: str, axes: tuple[str, ...], report_axes: tuple[str, str] | None,
                       failures: list[dict], results: pd.DataFrame) -> list[Path]:
    """summary.md (and winners.png when two axes are named) in `out`, each written atomically."""
    from simbench.atomic import atomic_file

    out = Path(out)
    lines = [f"# Sweep {name}", "",
             f"{results['cell'].nunique() if not results.empty else 0} cells finished, {len(failures)} failed "
             f"(their errors are in failures/). Speed-ups are over padding at the same device count, except "
             f"where `reference` names another baseline (VTS: its padded pipeline)."]
    written = []
    if not results.empty:
        table = winners(results, axes)
        lines += ["", "## Fastest strategy per cell and device count", "",
                  markdown_table(table.assign(speedup=table["speedup"].map("{:.3f}".format)))]
        crossover = unpadding_crossover(results, axes)
        if not crossover.empty:
            lines += ["", "## Where packing overtakes un-padding", "",
                      "Un-padding's step waits for the slowest device, so its speed-up falls as devices are added; "
                      "packing's fixed shapes keep theirs.", "", markdown_table(crossover.fillna("never"))]
        if report_axes is not None:
            written.append(_winner_heatmap(out / "winners.png", table, report_axes))
            lines += ["", f"winners.png: the fastest strategy at each ({report_axes[0]}, {report_axes[1]}) "
                          "at the largest device count of the cell."]
    if failures:
        lines += ["", "## Failed cells", "",
                  markdown_table(pd.DataFrame([{"cell": failure["cell"], "values": json.dumps(failure["values"]),
                                           "error": failure["error"][:200]} for failure in failures]))]
    with atomic_file(out / "summary.md") as temporary:
        temporary.write_text("\n".join(lines) + "\n")
    return [out / "summary.md", *written]


def _winner_heatmap(path: Path, table: pd.DataFrame, report_axes: tuple[str, str]) -> Path:
    """The winner over the two report axes, one panel per combination of the other swept axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from simbench.atomic import atomic_file

    x, y = report_axes
    largest = table.sort_values("devices").groupby("cell").tail(1)
    others = [column for column in largest.columns
              if column not in ("cell", "devices", "strategy", "speedup", x, y)]
    panels = list(largest.groupby(others, sort=True)) if others else [((), largest)]
    strategies = sorted(largest["strategy"].unique())
    palette = sns.color_palette("tab20", len(strategies))
    columns, rows = largest[x].nunique(), largest[y].nunique()
    figure, axes = plt.subplots(len(panels), 1, squeeze=False,
                                figsize=(2.5 + 0.75 * columns, (0.8 + 0.45 * rows) * len(panels) + 0.6))
    for axis, (key, rows_of_panel) in zip(axes[:, 0], panels):
        grid = rows_of_panel.pivot_table(index=y, columns=x, values="strategy", aggfunc="first")
        speedups = rows_of_panel.pivot_table(index=y, columns=x, values="speedup", aggfunc="max")
        codes = grid.apply(lambda column: column.map(strategies.index))
        sns.heatmap(codes.astype(float), cmap=palette, cbar=False, ax=axis, linewidths=0.5, vmin=-0.5,
                    vmax=len(strategies) - 0.5, annot=speedups.map("{:.2f}".format).to_numpy(), fmt="")
        key = key if isinstance(key, tuple) else (key,)
        axis.set_title(", ".join(f"{name} = {value}" for name, value in zip(others, key)) or None, fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=palette[index]) for index in range(len(strategies))]
    figure.legend(handles, strategies, title="fastest", loc="upper right", frameon=False)
    figure.suptitle("fastest strategy and its speed-up over padding", x=0.02, ha="left")
    figure.tight_layout(rect=(0, 0, 0.88, 0.97))
    with atomic_file(path) as temporary:
        figure.savefig(temporary, format="png", dpi=110, metadata={"Software": None})
    plt.close(figure)
    return path