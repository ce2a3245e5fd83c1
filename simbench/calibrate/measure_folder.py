"""The folder a measurement writes: the comparison table and its plot, per-step speed-ups, every timed batch,
the settings and the profile the run priced with, swapped into place together."""

from __future__ import annotations

import json
from pathlib import Path


MEASURE_TABLE = "measured_vs_predicted.csv"


def write_measure_folder(folder: Path, table, measured, title: str, settings: dict, profile) -> None:
    """The six files of a measurement, swapped into place together; profile.yaml is the profile the run
    priced with (calibrated or given) carrying the un-padded step noise fitted on its steps."""
    import yaml

    from simbench.atomic import atomic_directory
    from simbench.calibrate.measure_compare import per_step_speedups
    from simbench.calibrate.plot import plot_measured_vs_predicted
    from simbench.costmodels.hardware import profile_to_yaml

    with atomic_directory(folder, option="-o") as staging:
        table.to_csv(staging / MEASURE_TABLE, index=False)
        per_step_speedups(measured).to_csv(staging / "steps.csv", index=False)
        measured_rows = ~table["problem"].fillna("").str.startswith("not measured")
        plot_measured_vs_predicted(table[measured_rows], staging / "measured_vs_predicted.png", title)
        (staging / "timings.json").write_text(json.dumps(_timings_record(measured), indent=1))
        (staging / "settings.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        (staging / "profile.yaml").write_text(profile_to_yaml(profile))


def settings_record(settings, source: str, histogram, profile_path: Path | None) -> dict:
    return {"source": source, "histogram": histogram.name, "model": settings.model.name,
            "model_family": settings.model.family, "layers": settings.model.layers,
            "max_length": settings.max_length, "device": settings.device, "threads": settings.threads,
            "steps": settings.steps, "batch_size": settings.batch_size, "repeats": settings.repeats,
            "warmup": settings.warmup, "seed": settings.seed,
            "unpadded_attention": settings.attention,
            "clock": "process CPU seconds" if settings.cpu_clock else "wall-clock seconds",
            "profile": (str(profile_path) if profile_path
                        else "calibrated in the same run on held-out batches (profile.yaml)")}


def _timings_record(measured) -> dict:
    """Every timed batch (its rows of lengths and slots) with its median seconds, its first step's seconds
    (the first pass's load factored out: settings.yaml's first_pass_load_factor) and whether its shape was
    new to the process then, per strategy."""
    return {name: [{"mode": layout.mode.value, "rows": [list(row) for row in layout.rows],
                    "row_slots": list(layout.row_slots), "median_seconds": float(seconds),
                    "first_seconds": float(first), "new_shape": bool(new)}
                   for layout, seconds, first, new in zip(layouts, measured.seconds[name],
                                                          measured.first_seconds[name], measured.new_shape[name])]
            for name, layouts in measured.layouts.items()}
