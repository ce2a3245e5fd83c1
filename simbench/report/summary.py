r"""summary.md: the headline answer (which strategy wins at which scale, by how much), then the tables.

    >>> from simbench.experiment import run_experiment
    >>> from simbench.report.summary import summary_markdown
    >>> from simbench.scenario import Scenario
    >>> scenario = Scenario(name="demo", dataset={"histogram": "squad_1_1_384"}, strategies=["sort", "unpad"],
    ...                     devices=[1, 8], steps=5)
    >>> histogram = scenario.dataset.load()
    >>> text = summary_markdown(scenario, histogram, run_experiment(scenario, histogram))
    >>> print(next(part for part in text.split("\n\n") if part.startswith("**Answer:**")))
    ... # doctest: +NORMALIZE_WHITESPACE
    **Answer:** on 1 device the fastest strategy is **sort**, 1.84x ± 0.07 the throughput of pad-to-longest (real
    tokens per second). On 8 devices it is **sort** at 1.97x ± 0.08, 24.9 % ahead of unpad (1.58x ± 0.05).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simbench.costmodels.base import ExecutionMode
from simbench.experiment import ExperimentResult
from simbench.histogram import LengthHistogram
from simbench.report.assumptions import assumptions_section
from simbench.report.baseline import baseline_of, over_words
from simbench.report.decision import decision_markdown, decision_table
from simbench.report.footing import footing_section, footing_warnings
from simbench.report.markdown import markdown_table
from simbench.report.memory import left_out_note, memory_section, rankable, run_layout
from simbench.report.parallel import parallel_headline, parallel_section
from simbench.report.precision import MIN_LEAD, TIE_SIGMAS, lead_noise, leaders_at, names_text, ranked_at, \
    milliseconds_text, speedup_text, tie_text
from simbench.report.units import DEVICE, DeviceUnit, device_unit
from simbench.report.validation_table import profile_provenance, provenance_note, provenance_section
from simbench.scenario import Scenario
from simbench.sim.results import BREAKDOWN_COLUMNS
from simbench.strategies.packing import efficiency_text

# A drop in speed-up from the smallest to the largest cluster worth a sentence in the headline.
SIGNIFICANT_LOSS = 0.05
IDEAL_LABEL = "ideal: every sequence alone at full rate"
# Drawn only where the cost model cannot price a sequence alone.
SLOT_RATIO_LABEL = "padded slots / real tokens (not a ceiling: attention grows faster than tokens)"


def speedup_reference(histogram: LengthHistogram, scaling: pd.DataFrame) -> tuple[float, str] | None:
    """The dashed line over the speed-ups over padding, and its name: the cost model's ideal speed-up
    (simbench.costmodels.ideal) where the run computed it, else the ratio of padded slots to real tokens.
    None where the speed-ups are over another baseline: both figures are over padding to max length."""
    if baseline_of(scaling) != "none":
        return None
    ideal = ideal_of(scaling)
    return (ideal, IDEAL_LABEL) if ideal is not None else (histogram.theoretical_speedup, SLOT_RATIO_LABEL)


def ideal_of(scaling: pd.DataFrame) -> float | None:
    """The run's ideal speed-up over padding; None where its cost model could not say (or an older report)."""
    ideal = scaling["ideal_speedup"].dropna() if "ideal_speedup" in scaling else pd.Series(dtype=float)
    return None if ideal.empty else float(ideal.iloc[0])


def summary_markdown(scenario: Scenario, histogram: LengthHistogram, tables: ExperimentResult) -> str:
    unit = device_unit(scenario.layout)
    ranked = rankable(tables.scaling, tables.memory)  # a strategy that does not fit memory is never ranked first
    sections = [
        f"# {scenario.name}" + (f": {scenario.description.strip()}" if scenario.description.strip() else ""),
        defaults_note(scenario),
        decision_markdown(tables, histogram, unit.count),
        _headline(ranked, _gpus_per_replica(scenario), unit),
        left_out_note(tables.memory),
        parallel_headline(run_layout(scenario.layout, tables.memory), tables.scaling, tables.parallel,
                          tables.breakdown) if scenario.layout else None,
        _setup(scenario, histogram, tables.scaling, unit),
        overdraw_warning(tables.scaling, histogram.sequences, unit),
        *(f"**Warning**: {warning}." for warning in scenario.depth_warnings(histogram)),
        *(f"**Warning**: {warning}." for warning in footing_warnings(tables.scaling)),
        "## Winner at each scale\n\n" + "\n\n".join(
            f"Speed-ups over {over_words(reference)}:\n\n" + _winners_table(rows, unit)
            for reference, rows in _groups(ranked)),
        _packing_section(tables.packing, tables.scaling, unit),
        f"## Speed-up over {over_words(baseline_of(tables.scaling))} by {unit.name} count\n\n"
        + _speedup_table(tables.scaling, unit)
        + _reference_note(tables.scaling, unit),
        footing_section(tables.scaling, unit),
        assumptions_section(rankable(tables.assumptions, tables.memory), ranked, unit),
        _breakdown_section(tables.breakdown, four_d=scenario.layout is not None, unit=unit),
        parallel_section(run_layout(scenario.layout, tables.memory), tables.scaling, tables.parallel)
        if scenario.layout else None,
        memory_section(tables.memory, without_layout=scenario.layout is None, markdown_table=markdown_table),
        _straggler_section(tables.gumbel, tables.extrapolation, tables.scaling, unit),
        provenance_note(scenario.hardware.profile, scenario.hardware.load(), scenario.hardware.overrides,
                        unpadded=bool(tables.scaling.get("mode", pd.Series(dtype=str)).eq(
                            ExecutionMode.UNPADDED.value).any())),
        provenance_section(scenario.hardware.profile, scenario.hardware.load(), scenario.hardware.overrides),
        _files_section(),
    ]
    return "\n\n".join(section for section in sections if section) + "\n"


def defaults_note(scenario: Scenario) -> str | None:
    """The model, hardware and batch size the scenario left to their defaults, said before any figure they set."""
    defaults = scenario.unstated_defaults()
    if not defaults:
        return None
    return ("**Defaults:** " + "; ".join(defaults) + ". Every figure below assumes "
            "them; set the keys in the scenario to price your own model, hardware and batch.")


def overdraw_warning(scaling: pd.DataFrame, dataset_sequences: int, unit: DeviceUnit = DEVICE) -> str | None:
    """One line when a step draws more sequences than the dataset holds: batches are drawn with
    replacement, so such a step repeats sequences, which no pass over the real dataset does."""
    per_step = (scaling["sequences_per_s"] * scaling["step_seconds_mean"]).round()
    over = scaling.assign(per_step=per_step)[per_step > dataset_sequences]
    if over.empty:
        return None
    first = over.sort_values(["devices", "per_step"]).iloc[0]
    return (f"**Warning:** from {unit.count(int(first.devices))} on, a step draws more sequences than the dataset "
            f"holds ({first.per_step:,.0f} per step with {first.strategy}, up to {over.per_step.max():,.0f}; the "
            f"dataset has {dataset_sequences:,}): sequences are drawn with replacement, so such a step repeats "
            "some, which no real epoch does.")


def _groups(scaling: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Strategies grouped by the baseline their speed-up is measured against (padding, or VTS's padded
    pipeline): speed-ups over different baselines do not rank against each other."""
    reference = scaling["reference"] if "reference" in scaling else pd.Series("none", index=scaling.index)
    groups = [(name, scaling[reference == name]) for name in dict.fromkeys(reference)]
    with_rivals = [(name, rows) for name, rows in groups if rows["strategy"].nunique() > 1]
    return with_rivals or groups


def _headline(scaling: pd.DataFrame, gpus_per_replica: int = 1, unit: DeviceUnit = DEVICE) -> str:
    # Where a device is a replica of many GPUs, the answer says so before it counts devices; a 4D layout's
    # counts say replicas and their GPUs themselves.
    lead = "**Answer:** " + (f"(a device here is a replica of {gpus_per_replica:,} GPUs) "
                             if gpus_per_replica > 1 and unit.gpus_each is None else "")
    sentences = []
    for index, (reference, rows) in enumerate(_groups(scaling)):
        baseline = over_words(reference)
        if index:
            sentences.append(f"Against {baseline} instead:")
        sentences.append(_group_headline(rows, baseline, lead=lead if index == 0 else "", unit=unit))
    return " ".join(sentences)


def _group_headline(scaling: pd.DataFrame, baseline: str, lead: str, unit: DeviceUnit = DEVICE) -> str:
    device_counts = sorted(scaling["devices"].unique())
    leaders = {devices: leaders_at(scaling, devices) for devices in device_counts}
    smallest, largest = device_counts[0], device_counts[-1]
    first = leaders[smallest].iloc[0]
    if len(leaders[smallest]) > 1:
        sentences = [f"{lead}on {unit.count(smallest)} {_tie_words(leaders[smallest], baseline)}"]
    else:
        sentences = [f"{lead}on {unit.count(smallest)} the fastest strategy is **{first.strategy}**, "
                     f"{speedup_text(first)} the throughput of {baseline} (real tokens per second)."]
    if largest != smallest:
        ranked = ranked_at(scaling, largest)
        last = ranked.iloc[0]
        if len(leaders[largest]) > 1:
            sentences.append(f"On {unit.count(largest)} {_tie_words(leaders[largest], baseline)}")
        else:
            sentence = f"On {unit.count(largest)} it is **{last.strategy}** at {speedup_text(last)}"
            if len(ranked) > 1:
                second = ranked.iloc[1]
                sentence += (f", {100 * (last.speedup / second.speedup - 1):.1f} % ahead of "
                             f"{second.strategy} ({speedup_text(second)})")
            sentences.append(sentence + ".")
    # The winner changes only where the new leader is not tied with the previous one.
    changes = []
    for devices in device_counts:
        names = list(leaders[devices]["strategy"])
        if not changes or changes[-1][1] not in names:
            changes.append((devices, names[0]))
    if len(changes) > 1:
        steps = "; ".join(f"{strategy} from {unit.count(devices)}" for devices, strategy in changes)
        sentences.append(f"The winner changes with scale: {steps}.")
    if largest != smallest:
        sentences.append(_biggest_loss(scaling, smallest, largest, unit))
    return " ".join(sentence for sentence in sentences if sentence)


def _tie_words(tied: pd.DataFrame, baseline: str) -> str:
    figures = [speedup_text(row) for row in tied.itertuples()]
    tie = tie_text(list(tied["strategy"]), figures, at=f"the throughput of {baseline}", over=f"over {baseline}")
    first = tied.iloc[0]
    if all(first.speedup / row.speedup - 1 < MIN_LEAD for row in tied.iloc[1:].itertuples()):
        return f"{tie}: they differ by under {100 * MIN_LEAD:.1f} %, too close to rank."
    spread = max(lead_noise(first, row) for row in tied.iloc[1:].itertuples())
    return (f"{tie}: their differences lie within {TIE_SIGMAS} standard errors of the run's sampling (a difference's "
            f"standard error reaches {100 * spread:.1f} %) or under {100 * MIN_LEAD:.1f} %, too close to rank.")


def _biggest_loss(scaling: pd.DataFrame, smallest: int, largest: int, unit: DeviceUnit = DEVICE) -> str:
    """The strategy that loses most of its speed-up between the smallest and the largest cluster."""
    by_size = scaling.pivot(index="strategy", columns="devices", values="speedup")
    loss = (1 - by_size[largest] / by_size[smallest]).sort_values(ascending=False, kind="stable")
    if loss.empty or loss.iloc[0] < SIGNIFICANT_LOSS:
        return ""
    name = loss.index[0]
    rows = scaling[scaling["strategy"] == name].set_index("devices")
    return (f"Biggest loss with scale: {name}, from {speedup_text(rows.loc[smallest])} on {unit.count(smallest)} "
            f"to {speedup_text(rows.loc[largest])} on {unit.count(largest)} ({100 * loss.iloc[0]:.1f} % less).")


def _setup(scenario: Scenario, histogram: LengthHistogram, scaling: pd.DataFrame, unit: DeviceUnit = DEVICE) -> str:
    model = scenario.model if isinstance(scenario.model, str) else "custom: " + ", ".join(
        f"{key}={value}" for key, value in scenario.model.items())
    ideal = ideal_of(scaling)
    ceiling = "" if ideal is None else (f"; no strategy can pass {ideal:.3f}x over padding to max length (every "
                                        "sequence alone at full rate, no padding, fixed cost or stragglers)")
    baseline = baseline_of(scaling)
    return (f"Dataset `{histogram.name}`: {histogram.sequences:,} sequences, max length {histogram.max_length}, "
            f"{100 * (1 - histogram.efficiency):.1f} % padding, padded slots / real tokens "
            f"{histogram.theoretical_speedup:.3f}x{ceiling}. Model `{model}` on hardware `{scenario.hardware.profile}`"
            f"{_overridden(scenario.hardware.overrides)}{_replicas(_gpus_per_replica(scenario), unit)}; "
            f"batch size {scenario.batch_size} per {unit.name}{_microbatches(scenario)}, {scenario.steps} steps per "
            f"strategy and {unit.name} count, "
            f"{_seeds_note(scenario)} {_baseline_sentence(scenario, baseline, unit)} {_shapes_note(scenario, unit)}"
            f"{_attention_note(scaling)}")


# What each attention implementation means, as the summary names the strategies priced with it.
ATTENTION_WORDS = {"row": "one attention over each whole row, packed documents attending to each other",
                   "dense-mask": "a dense block-diagonal mask, SDPA off its flash kernel, rate measured on an H200",
                   "block-mask": "FlexAttention's document mask, rate assumed, not measured",
                   "varlen": "per-document varlen kernels"}


def _attention_note(scaling: pd.DataFrame) -> str:
    """Which attention each strategy was priced with (a strategy's `attention` option), where any packs."""
    if "attention" not in scaling or not scaling.get("max_depth", pd.Series(dtype=float)).ne(1).any():
        return ""
    strategies = scaling.drop_duplicates("strategy")
    parts = [f"`{attention}` ({ATTENTION_WORDS.get(attention, attention)}): "
             + ", ".join(f"`{name}`" for name in group["strategy"])
             for attention, group in strategies.groupby("attention", sort=False)]
    return " Attention as priced: " + "; ".join(parts) + "."


def _baseline_sentence(scenario: Scenario, baseline: str, unit: DeviceUnit = DEVICE) -> str:
    """What every speed-up is over: the scenario's `baseline`, in its plan's own words."""
    from simbench.sim.plans import plan_type

    name = scenario.baseline.plan().name
    return (f"Speed-ups are over **{over_words(baseline)}** on the same {unit.plural} (`baseline: {name}`: "
            f"{plan_type(scenario.baseline.name).description}).")


def _seeds_note(scenario: Scenario) -> str:
    """Which seeds ran, and what the ± beside a figure is."""
    seeds = (f"seed {scenario.seed}" if scenario.seeds == 1 else
             f"seeds {scenario.seed}-{scenario.seed + scenario.seeds - 1} (figures are their mean)")
    across = "" if scenario.seeds == 1 else ", or across the seeds the standard error of their mean where larger"
    return (f"{seeds}. A figure's ± is its spread (the standard error of the run's steps{across}), and it "
            f"shows only the digits the spread supports; strategies whose lead lies within {TIE_SIGMAS} spreads "
            "tie.")


def _shapes_note(scenario: Scenario, unit: DeviceUnit = DEVICE) -> str:
    """Which steps pay a new batch shape's first-sight cost: it can change which variable-shape strategy wins."""
    phase = {"new": "every variable-shape batch is new (a run's first steps)",
             "seen": "every shape has run before (steady state)",
             "auto": f"as often as a {unit.name} meets a new shape over a {scenario.training_steps:,}-step run"}
    return (f"First sight of a batch shape (`shapes: {scenario.shapes}`): {phase[scenario.shapes]}; "
            "`seen` gives steady-state throughput, `new` a run's first steps.")


def _gpus_per_replica(scenario: Scenario) -> int:
    return scenario.layout.gpus_per_replica if scenario.layout else scenario.gpus_per_replica


def _microbatches(scenario: Scenario) -> str:
    if not scenario.layout:
        return ""
    microbatches = scenario.layout.microbatches
    return f" and microbatch ({microbatches} microbatch{'' if microbatches == 1 else 'es'} a step)"


def _replicas(gpus_per_replica: int, unit: DeviceUnit = DEVICE) -> str:
    if gpus_per_replica == 1:
        return ""
    if unit.gpus_each is not None:
        return f", each {unit.name} {gpus_per_replica:,} GPUs (per-GPU throughput in scaling.csv)"
    return f", each device a replica of {gpus_per_replica} GPUs (per-GPU throughput in scaling.csv)"


def _overridden(overrides: dict) -> str:
    return f" with {', '.join(sorted(overrides))} overridden" if overrides else ""


def _winners_table(scaling: pd.DataFrame, unit: DeviceUnit = DEVICE) -> str:
    rows = []
    for devices in sorted(scaling["devices"].unique()):
        ranked = ranked_at(scaling, devices)
        best = ranked.iloc[0]
        row = {unit.plural: devices} | ({"GPUs": f"{unit.gpus(devices):,}"} if unit.gpus_each is not None else {})
        # Every strategy tied with the fastest is named with it: the table never calls one winner among them. The
        # runner-up is the first strategy it leads clearly, so that the lead is one a reader can act on.
        leaders = leaders_at(scaling, devices)
        row |= {"fastest": names_text(list(leaders["strategy"])), "speed-up": speedup_text(best, unit="")}
        if len(ranked) > len(leaders):
            second = ranked.iloc[len(leaders)]
            row |= {"runner-up": second.strategy, "its speed-up": speedup_text(second, unit=""),
                    "lead %": f"{100 * (best.speedup / second.speedup - 1):.1f}"}
        elif len(ranked) > 1:
            row |= {"runner-up": "-", "its speed-up": "-", "lead %": "all tie"}
        rows.append(row)
    return markdown_table(pd.DataFrame(rows))


def _packing_section(packing: pd.DataFrame, scaling: pd.DataFrame, unit: DeviceUnit = DEVICE) -> str:
    if (packing["strategy"] == "none").all():  # padding alone, the reference of VTS-only scenarios
        return ""
    one_device = {row.strategy: speedup_text(row, unit="")
                  for row in scaling[scaling["devices"] == scaling["devices"].min()].itertuples()}
    table = pd.DataFrame({
        "depth": packing["bound_depth"].map(lambda depth: "max" if pd.isna(depth) else str(int(depth))),
        "strategy": packing["label"],
        "efficiency %": packing["efficiency"].map(efficiency_text),
        "packing factor": packing["packing_factor"].map("{:.3f}".format),
        "packs": packing["packs"].map("{:,}".format),
        "LP bound (packs)": packing["lower_bound_packs"].map(lambda value: _or_dash(value, "{:,.0f}")),
        "gap to bound %": (100 * pd.to_numeric(packing["gap_to_bound"])).map(lambda value: _or_dash(value, "{:.2f}")),
        "proof": packing["proof"].map(lambda proof: proof if isinstance(proof, str) else "-"),
        "realized speed-up": packing["label"].map(lambda label: one_device.get(label, "-")),
    })
    defined = ("Efficiency: real tokens over the token slots a step spends (rows x their length; for "
               "token-budget, each batch's whole budget of batch_size x max_length slots); padding tokens are "
               "the slots left. It is shown below 100.0 whenever any padding is left. ")
    bound_note = ("LP bound: the certified lower bound on packs at the same depth limit; proof: packs proven "
                  "optimal and by what, or the gap left and why." if
                  packing["lower_bound_packs"].notna().any() else
                  "LP bounds were not computed in this run (`outputs.lp_bounds: false`).")
    return ("## Packing (laid out like the packing paper's Table 1)\n\n" + markdown_table(table) +
            f"\n\n{defined}Realized speed-up: on {unit.count(int(scaling['devices'].min()))}, over "
            f"{over_words(baseline_of(scaling))}. "
            f"{bound_note} "
            "Solve times are in timings.csv (measured, so they differ from run to run).")


def _speedup_table(scaling: pd.DataFrame, unit: DeviceUnit = DEVICE) -> str:
    shown = scaling.assign(shown=[speedup_text(row, unit="") for row in scaling.itertuples()])
    table = shown.pivot(index="strategy", columns="devices", values="shown")
    table = table.loc[list(dict.fromkeys(scaling["strategy"]))]
    # Without a layout a column is its device count alone, as the README's main-job table reads it.
    heading = str if unit.gpus_each is None else (lambda count: unit.count(int(count)))
    table.columns = [heading(column) for column in table.columns]
    return markdown_table(table.reset_index())


def _reference_note(scaling: pd.DataFrame, unit: DeviceUnit = DEVICE) -> str:
    baseline = baseline_of(scaling)
    if "reference" not in scaling or set(scaling["reference"]) <= {baseline}:
        return ""
    others = scaling[scaling["reference"] != baseline].drop_duplicates("strategy")
    notes = ", ".join(f"{row.strategy} over {row.reference}" for row in others.itertuples())
    return f"\n\nSpeed-ups are over {over_words(baseline)} on the same {unit.plural}, except: {notes}."


def _breakdown_section(breakdown: pd.DataFrame, four_d: bool = False, unit: DeviceUnit = DEVICE) -> str:
    largest = breakdown["devices"].max()
    rows = breakdown[breakdown["devices"] == largest]
    parts = [part for part in BREAKDOWN_COLUMNS if part in rows]
    table = pd.DataFrame({"strategy": rows["strategy"]})
    for part in parts:
        table[part.removesuffix("_seconds").replace("_", " ")] = (1e3 * rows[part]).map(milliseconds_text)
    table["step"] = (1e3 * rows["step_seconds_mean"]).map(milliseconds_text)
    table[f"real tokens per {unit.name}"] = rows["real_tokens_per_device_step"].map("{:,.0f}".format)
    return (f"## Where a step's time goes ({unit.count(int(largest))}, ms per step)\n\n" + markdown_table(table) +
            "\n\ncompute: work on real tokens (attention within each sequence); padding: work on padding "
            "tokens (their dense layers, and attention with a padding token on either side); masked attention: "
            "attention between two sequences of one row, computed and discarded by a block-diagonal mask "
            "(per-sequence kernels skip it); overhead: masks, kernel launches, shape changes, optimizer, input "
            f"transfer; waiting: {unit.plural} idle until the slowest finishes; communication: all-reduce and padding "
            "exchange; stall: " + ("a replica's pipeline bubble and stalls and its slowest context-parallel rank "
                                   "beyond the mean (overhead holds its TP/CP communication and recomputation; "
                                   "both split in the next section)." if four_d else
                                   "VTS samples blocked by the next pipeline stage."))


def _straggler_section(gumbel: pd.DataFrame, extrapolation: pd.DataFrame, scaling: pd.DataFrame,
                       unit: DeviceUnit = DEVICE) -> str:
    if gumbel.empty:
        return ""
    largest = int(extrapolation["devices"].max())
    # Over padding, as the fit is, whatever the run's baseline.
    simulated = extrapolation.dropna(subset=["simulated_speedup"]).set_index(["strategy", "devices"])["simulated_speedup"]
    lines = []
    for row in gumbel.itertuples():
        rows = extrapolation[extrapolation["strategy"] == row.strategy].set_index("devices")["expected_speedup"]
        valid = rows[rows > 0]
        line = (f"- {row.strategy}: one {unit.name}'s per-step speed-up over padding is Gumbel(location "
                f"{row.location:.4f}, scale {row.scale:.4f}); the slowest of n {unit.plural} sets the step, so the fit "
                f"expects {rows.iloc[0]:.3f} on {unit.count(int(rows.index[0]))}")
        if len(valid) == len(rows):
            line += f" and {rows.loc[largest]:.3f} on {unit.count(largest)}"
        else:  # the Gumbel's left tail reaches zero: past that its expectation means nothing
            line += (f", {valid.iloc[-1]:.3f} on {unit.count(int(valid.index[-1]))}; beyond that the fitted "
                     f"distribution reaches speed-ups of zero or less, so it no longer applies")
        if (row.strategy, largest) in simulated:
            line += (f". Simulated: {simulated[(row.strategy, largest)]:.3f} on {unit.count(largest)} (whole steps, "
                     f"the all-reduce and fixed costs included, which the per-{unit.name} fit leaves out)")
        lines.append(line + ".")
    return "## Stragglers (content-dependent step times)\n\n" + "\n".join(lines)


def summary_record(scenario: Scenario, histogram: LengthHistogram, tables: ExperimentResult) -> dict:
    """summary.json: the headline figures for scripts, every speed-up with the baseline it is over."""
    winners = []
    for reference, rows in _groups(rankable(tables.scaling, tables.memory)):
        for devices in sorted(rows["devices"].unique()):
            ranked = ranked_at(rows, devices)
            winners.append({"devices": int(devices), "over": over_words(reference),
                            "fastest": ranked.iloc[0].strategy, "speedup": float(ranked.iloc[0].speedup)})
    return {
        "scenario": scenario.name,
        "dataset": {"name": histogram.name, "sequences": int(histogram.sequences), "max_length": histogram.max_length,
                    "padding_fraction": 1 - histogram.efficiency,
                    "theoretical_speedup": histogram.theoretical_speedup,
                    "ideal_speedup": ideal_of(tables.scaling)},
        "model": scenario.model if isinstance(scenario.model, str) else "custom",
        "hardware": scenario.hardware.profile,
        "hardware_overrides": scenario.hardware.overrides,
        "hardware_provenance": profile_provenance(scenario.hardware.load(), scenario.hardware.overrides),
        "shapes": scenario.shapes,
        "training_steps": scenario.training_steps,
        "seed": scenario.seed,
        "winners": winners,
        "decision": _records(decision_table(tables, histogram)),
        "warnings": [warning for warning in [overdraw_warning(tables.scaling, histogram.sequences),
                                             *scenario.depth_warnings(histogram),
                                             *footing_warnings(tables.scaling)] if warning],
        "compare_at": scenario.compare_at,
        "scaling": _records(tables.scaling),
        "packing": _records(tables.packing),
    }


def _records(frame: pd.DataFrame) -> list[dict]:
    # NaN (a bound not computed) becomes null: JSON has no NaN.
    return [{key: (None if pd.isna(value) else value) for key, value in row.items()}
            for row in frame.astype(object).to_dict("records")]


def _files_section() -> str:
    return ("## Files\n\nreport.html (this summary with interactive charts and sortable tables, one file), "
            "summary.json (the headline figures for scripts), recommend.md (the chosen strategy as TRL, Hugging Face "
            "Trainer, axolotl and Megatron-LM settings), resolved.yaml (the scenario as run), packing.csv, "
            "scaling.csv, breakdown.csv, latency.csv, gumbel.csv, extrapolation.csv, timeline.csv, timings.csv, "
            "memory.csv (each strategy's peak memory per GPU against HBM, where the profile states it); "
            "plots as PNG and SVG.")


def _or_dash(value: float | None, number_format: str) -> str:
    # Formats only present values: a missing bound is None straight from the simulator, NaN from a CSV.
    return "-" if pd.isna(value) else number_format.format(value)
