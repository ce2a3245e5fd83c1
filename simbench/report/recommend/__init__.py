"""The strategy a run chose, written as a trainer's own settings: TRL, the HF Trainer, axolotl or Megatron-LM.

    >>> from simbench.report.recommend import STACKS
    >>> sorted(STACKS)
    ['axolotl', 'hf', 'megatron', 'trl']

`recommend(source, stack)` reads a report folder (its summary.json and resolved.yaml: the fast path) or runs a
scenario, takes the strategy the run ranked first at a GPU count (the largest simulated by default) and writes
it in the stack's options (`stacks`), with the simulated real tokens per second per GPU and what was assumed.
Where the stack cannot run that strategy it says why, and recommends the fastest strategy of the same run that
it can run. `recommend_markdown` is the report's recommend.md: the choice in every stack.
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from simbench.errors import InputError, did_you_mean
from simbench.histogram import LengthHistogram
from simbench.report.recommend.plan import (PER_DOCUMENT_ATTENTION, Family, RunFacts, TrainingPlan, ranked,
                                            rows_at, run_facts, training_plan, winner)
from simbench.report.recommend.stacks import STACKS, Expression, Stack
from simbench.scenario import Scenario

SUMMARY_JSON = "summary.json"
COMMENT_WIDTH = 110
NO_BREAK = "\u00a0"
PACK_FAMILIES = (Family.PACKS, Family.PACKS_PER_DOCUMENT, Family.GREEDY)


@dataclass(frozen=True)
class Recommendation:
    """A run's strategy in one stack's settings: `plan` is what the settings run (the run's choice, `chosen`,
    or the fastest strategy of the run the stack can run), `snippet` the text to paste."""

    stack: str
    source: str  # the stack version whose option names these are
    scenario: str
    chosen: TrainingPlan
    plan: TrainingPlan
    settings: dict[str, Any]
    notes: tuple[str, ...]
    assumptions: tuple[str, ...]
    snippet: str

    @property
    def substituted(self) -> bool:
        """Whether the stack cannot run the run's choice and these settings run another strategy."""
        return self.plan.strategy != self.chosen.strategy

    def to_json(self) -> dict[str, Any]:
        plan = {key: (value.value if isinstance(value, Family) else value) for key, value in asdict(self.plan).items()}
        return {"stack": self.stack, "names_from": self.source, "scenario": self.scenario,
                "chosen": self.chosen.strategy, "strategy": self.plan.strategy, "gpus": self.plan.gpus,
                "tokens_per_s_per_gpu": self.plan.tokens_per_s_per_gpu,
                "relative_error": self.plan.relative_error, "simulated": True, "plan": plan,
                "settings": self.settings, "notes": list(self.notes), "assumptions": list(self.assumptions),
                "snippet": self.snippet}


def recommend(source: str | Path, stack: str, *, gpus: int | None = None, strategy: str | None = None,
              quick: bool = False, seed: int | None = None) -> Recommendation:
    """The recommendation of a report folder (fast) or of a scenario (run here; `quick` and `seed` as `simbench run`
    takes them) for `stack` (trl, hf, axolotl, megatron), at `gpus` (default: the largest simulated), for the
    run's fastest strategy or the one named `strategy`."""
    summary, scenario, histogram = run_of(source, quick=quick, seed=seed)
    return recommend_from(summary, scenario, histogram, stack, gpus=gpus, strategy=strategy)


def run_of(source: str | Path, *, quick: bool = False, seed: int | None = None
           ) -> tuple[dict, Scenario, LengthHistogram]:
    """A run's summary record, scenario and histogram: read from a report folder, or computed by running a scenario."""
    from simbench.scenario import load_scenario, load_scenarios

    path = Path(source)
    if path.is_dir():
        if not (path / SUMMARY_JSON).is_file():
            raise InputError("not a report folder (it has no summary.json); give a report folder or a scenario",
                             source=str(path))
        if quick or seed is not None:
            raise InputError("--quick and --seed apply to a scenario, which is run; a report folder is read as it "
                             "was run", source=str(path))
        summary = _read_summary(path / SUMMARY_JSON)
        from simbench.report.folder import RESOLVED_SCENARIO

        scenario = load_scenario(path / RESOLVED_SCENARIO)
        return summary, scenario, scenario.dataset.load()
    scenarios = load_scenarios(source, seed=seed)
    if len(scenarios) > 1:
        raise InputError(f"the file holds {len(scenarios)} scenarios ({', '.join(s.name for s in scenarios)}); "
                         "`simbench run` it and recommend from one report folder", source=str(source))
    scenario = scenarios[0].quickened() if quick else scenarios[0]
    from simbench.experiment import run_experiment
    from simbench.report.summary import summary_record

    histogram = scenario.dataset.load()
    tables = run_experiment(scenario, histogram)
    # Through JSON, as a report folder's summary.json gives it: plain values, NaN as null.
    return json.loads(json.dumps(summary_record(scenario, histogram, tables))), scenario, histogram


def _read_summary(path: Path) -> dict:
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read it: {error}", source=str(path)) from None
    if not isinstance(summary, dict) or not isinstance(summary.get("scaling"), list):
        raise InputError("not a simbench summary (no `scaling` list)", source=str(path))
    return summary


def recommend_from(summary: dict, scenario: Scenario, histogram: LengthHistogram, stack: str, *,
                   gpus: int | None = None, strategy: str | None = None) -> Recommendation:
    """`recommend` on a run already in hand: its summary record (summary.json), scenario and histogram."""
    if stack not in STACKS:
        raise InputError(f"unknown stack {stack!r};{did_you_mean(stack, list(STACKS))} the stacks are "
                         f"{', '.join(STACKS)}", parameter="stack")
    target = STACKS[stack]
    facts = run_facts(scenario)
    count, rows = rows_at(summary, gpus)
    labels = [row["strategy"] for row in rows]
    if strategy is not None and strategy not in labels:
        raise InputError(f"the run has no strategy {strategy!r} on {count:,} GPUs;{did_you_mean(strategy, labels)} "
                         f"its strategies are {', '.join(labels)}", parameter="strategy")
    chosen_label = strategy or winner(summary, rows)
    chosen = training_plan(rows[labels.index(chosen_label)], scenario, histogram)
    expressed = target.express(chosen, facts)
    plan, notes = chosen, []
    if not isinstance(expressed, Expression):
        reason = expressed
        plan, expressed = _fastest_expressible(target, rows, scenario, histogram, facts)
        notes.append(f"{reason}. The fastest strategy of this run that it can run "
                     f"on {count:,} GPUs is {plan.strategy}, {rate_text(plan)} against {chosen.strategy}'s "
                     f"{rate_text(chosen)}, and these settings run it")
    notes += expressed.notes
    assumptions = _assumptions(plan, facts)
    comments = _comments(target, facts, chosen, plan, strategy is not None, notes, assumptions)
    return Recommendation(target.name, target.source, facts.scenario, chosen, plan, expressed.settings,
                          tuple(notes), tuple(assumptions), target.render(expressed.settings, comments))


def _fastest_expressible(stack: Stack, rows: list[dict], scenario: Scenario, histogram: LengthHistogram,
                         facts: RunFacts) -> tuple[TrainingPlan, Expression]:
    """The fastest strategy among the rows (those that fit first) that the stack can run: padding to max length,
    always simulated, every stack can."""
    fastest = ranked(rows)
    for row in fastest + [row for row in rows if row not in fastest]:
        plan = training_plan(row, scenario, histogram)
        expression = stack.express(plan, facts)
        if isinstance(expression, Expression):
            return plan, expression
    raise InputError(f"{stack.name} can run none of this run's strategies ({', '.join(r['strategy'] for r in rows)})")


def rate_text(plan: TrainingPlan) -> str:
    """Real tokens per second per GPU with as many digits as its spread supports, and the spread."""
    value, relative = plan.tokens_per_s_per_gpu, plan.relative_error
    if relative is None or not math.isfinite(relative):
        return f"{value:,.0f} real tokens/s per GPU"
    spread = value * relative
    if spread < 0.5:
        return f"{value:,.0f} ± <1 real tokens/s per GPU"
    digit = 10 ** math.floor(math.log10(spread))  # the spread's leading digit sets the last digit shown
    return (f"{round(value / digit) * digit:,.0f} ± {round(spread / digit) * digit:,.0f} real tokens/s per GPU "
            f"(± {100 * relative:.2g} %)")


def _assumptions(plan: TrainingPlan, facts: RunFacts) -> list[str]:
    rows = ("pack" if plan.family in PACK_FAMILIES else "sequence") + ("s" if plan.rows_per_device > 1 else "")
    if plan.tp * plan.pp * plan.cp > 1:
        virtual = f", {plan.virtual_stages} virtual stages" if plan.virtual_stages > 1 else ""
        replicas = (f"{plan.data_parallel:,} data-parallel replicas of TP {plan.tp} x PP {plan.pp} x CP {plan.cp}"
                    f"{virtual}")
    elif plan.gpus_per_replica > 1:
        replicas = f"{plan.data_parallel:,} data-parallel replicas of {plan.gpus_per_replica} GPUs"
    else:
        replicas = "each its own data-parallel replica"
    sharding = ("the gradients all-reduced, nothing sharded" if plan.zero_stage in (None, 0)
                else f"ZeRO stage {plan.zero_stage} over the replicas")
    recompute = "no activation recomputation" if plan.recompute in (None, "none") else f"{plan.recompute} recomputation"
    memory = {True: "fits HBM by simbench's memory model",
              False: "does not fit HBM by simbench's memory model (nor does any strategy this stack can run)",
              None: "memory not checked for this strategy by this run: if it does not fit, recomputation or sharding "
                    "costs speed the figure leaves out"}[plan.fits]
    return [
        f"simulated by simbench's cost model, not measured: real tokens (no padding) per second per GPU over "
        f"{facts.steps:,} steps (seed {facts.seed}, shapes {facts.shapes}), ± one standard error; a trainer adds "
        "costs of its own (data loading, logging)",
        f"model {facts.model} on hardware profile {facts.hardware}"
        + (" with overridden fields" if facts.hardware_overridden else "")
        + f" (each rate's source: `simbench list --profile {facts.hardware}`)",
        f"{plan.gpus:,} GPUs, {replicas}, {sharding}",
        f"{plan.rows_per_device:,} {rows} of up to {plan.max_length:,} tokens a replica per microbatch, "
        f"{plan.accumulation_steps} microbatch{'es' if plan.accumulation_steps > 1 else ''} per optimizer step; "
        + ("per-document (varlen) attention" if plan.family in PER_DOCUMENT_ATTENTION
           else "dense attention over each row, padding and other documents masked"),
        f"{recompute}; {memory}",
    ]


def _comments(stack: Stack, facts: RunFacts, chosen: TrainingPlan, plan: TrainingPlan, named: bool,
              notes: list[str], assumptions: list[str]) -> list[str]:
    why = (f"the strategy asked for ({chosen.strategy})" if named and plan is chosen
           else f"the run's fastest on {plan.gpus:,} GPUs" if plan is chosen
           else f"in place of {chosen.strategy}, which this stack cannot run (see the note)")
    lines = [f"simbench recommend: scenario {facts.scenario} on {plan.gpus:,} GPUs for {stack.title}.",
             f"Option names: {stack.source}.",
             f"Strategy: {plan.strategy} ({plan.family.value}), {why}.",
             f"Expected: {rate_text(plan)}, simulated.",
             *(f"Assumed: {assumption}." for assumption in assumptions),
             *(f"Note: {note}." for note in notes)]
    wrapped = []
    for line in lines:
        # A number keeps its unit on its line: " %" is held together while wrapping.
        wrapped += [part.replace(NO_BREAK, " ") for part in textwrap.wrap(
            line.replace(" %", NO_BREAK + "%"), COMMENT_WIDTH - 2, initial_indent="# ", subsequent_indent="#   ",
            break_on_hyphens=False, break_long_words=False)]
    return wrapped


def recommend_markdown(summary: dict, scenario: Scenario, histogram: LengthHistogram) -> str:
    """recommend.md: the run's fastest strategy at its largest GPU count in every stack's settings."""
    recommendations = [recommend_from(summary, scenario, histogram, name) for name in STACKS]
    first = recommendations[0]
    sections = [f"# Recommended settings: {scenario.name}",
                f"The run's fastest strategy on {first.chosen.gpus:,} GPUs is **{first.chosen.strategy}**: "
                f"{rate_text(first.chosen)}, simulated. Below it is written in each stack's own settings; where a "
                "stack cannot run it, the fastest strategy of this run that it can, and why. For another GPU count "
                "or strategy: `simbench recommend REPORT --for STACK --gpus N --strategy NAME`."]
    for recommendation in recommendations:
        stack = STACKS[recommendation.stack]
        heading = f"## {stack.label}: {recommendation.plan.strategy}"
        sections.append(f"{heading}\n\n```{stack.language}\n{recommendation.snippet}```")
    return "\n\n".join(sections) + "\n"


__all__ = ["STACKS", "Recommendation", "recommend", "recommend_from", "recommend_markdown", "run_of"]
