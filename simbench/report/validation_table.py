"""The validation table as Markdown, and a summary's statement of what is fitted and what predicted.

The figures themselves are computed by `simbench.validation_runs.validation_table`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from simbench.costmodels.hardware import HardwareProfile

# Presets with a parameter chosen or fitted on a published figure: what a run with them inherits.
FITTED_PRESETS = {
    "a100": "its achieved FLOP/s fractions were chosen to land on NVIDIA's 256-GPU padded MLPerf v0.7 log, "
            "so absolute step times are fitted to that one log (with rates fitted on an independent padded "
            "measurement instead, simbench misses that log by 23-29 %, while speed-ups over padding move by at most 2 %: "
            "spfhp:3, unpad and sort on Wikipedia at 1 to 2048 devices; with rates fitted on the 8-GPU un-padded log "
            "and un-padding's efficiency carried from the same code's V100 runs, they come out 0.4 % lower and "
            "predict that log 2.1 % low)",
    "ipu-m2000": "its packing overhead is a line fitted to the packing paper's Table 1 overheads",
}


def provenance_note(hardware: str, profile: HardwareProfile, overrides: dict | None = None,
                    unpadded: bool = False) -> str:
    """A summary's statement of what is predicted and what was fitted, for a run on the profile named `hardware`
    (`profile`, as loaded with the scenario's `overrides`); with `unpadded` (the run has un-padded strategies),
    what its un-padded kernels are assumed to reach."""
    parts = ["Every speed-up and time above is predicted: nothing in simbench was tuned to it."]
    if hardware in FITTED_PRESETS:
        parts.append(f"The `{hardware}` profile is partly fitted: {FITTED_PRESETS[hardware]}.")
    if unpadded:
        parts.append(f"Un-padded kernels are priced at {profile.unpadded_flops_fraction:.3g} times the padded kernels' "
                     f"FLOP/s, with per-device step noise of CV {profile.unpadded_noise_cv:.3g} beyond the batches' "
                     "content; NVIDIA's 2020 MLPerf un-padding code reached 0.84 with CV 0.10 (fitted on its V100 "
                     "runs, predicting its A100 runs' medians within 2.3 %), newer fused kernels more: set "
                     "`unpadded_flops_fraction` and `unpadded_noise_cv` (or a `simbench fit-logs` profile) for the "
                     "implementation you run.")
    if overrides:
        parts.append("Profile fields the scenario sets (its choice, not simbench's): " + ", ".join(
            f"{key} = {value}" for key, value in sorted(overrides.items())) + ".")
    parts.append("Published figures simbench was fitted to or predicts, with their errors: the validation table "
                 "(`simbench.validation_runs.validation_table`, shown in docs/validation.md).")
    return "## Fitted or predicted\n\n" + " ".join(parts)


def profile_provenance(profile: HardwareProfile, overrides: dict | None = None) -> list[dict]:
    """Every numeric field of the run's hardware profile (as loaded with the scenario's `overrides`): its value
    and where the value comes from (measured, fitted, datasheet, chosen; a scenario's override says so)."""
    from simbench.costmodels.hardware import field_provenance

    origins = {**field_provenance(profile), **{name: "set by the scenario" for name in overrides or {}}}
    # A bandwidth of inf means no limit; JSON has no infinity, so it is written "inf".
    return [{"field": name, "value": "inf" if getattr(profile, name) == float("inf") else getattr(profile, name),
             "source": origin} for name, origin in origins.items()]


def provenance_section(hardware: str, profile: HardwareProfile, overrides: dict | None = None) -> str:
    """The fields of the profile named `hardware` as a Markdown table, each with the kind of its source first."""
    rows = profile_provenance(profile, overrides)
    lines = ["## Hardware profile: where each value comes from", "",
             f"Profile `{hardware}`. A value nobody measured or fitted is a choice and says so.", "",
             "| field | value | source |", "|---|---|---|"]
    lines += [f"| {row['field']} | {_value(row['value'])} | {row['source']} |" for row in rows]
    return "\n".join(lines)


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, tuple):
        return ", ".join(map(str, value))
    return str(value)


def markdown(table: pd.DataFrame) -> str:
    """The table as Markdown, for docs/validation.md and summary.md."""
    lines = ["| quantity | source | fitted on | simbench | published | error | kind | reproduces |",
             "|---|---|---|---|---|---|---|---|"]
    for row in table.to_dict(orient="records"):
        unpublished = math.isnan(row["published"])  # a prediction with no published counterpart
        error = "" if unpublished else f"{round(row['error %'], 2) or 0.0:+.2f} %"
        lines.append(f"| {row['quantity']} | {row['source']} | {row['fitted on']} | {_number(row['simbench'])} "
                     f"| {'none' if unpublished else _number(row['published'])} | {error} | {row['kind']} "
                     f"| {row['reproduces']} |")
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
