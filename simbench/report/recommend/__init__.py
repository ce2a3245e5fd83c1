"""The strategy a run chose, written as a trainer's own settings: TRL, the HF Trainer, axolotl or Megatron-LM.

    >>> from simbench.report.recommend import STACKS
    >>> sorted(STACKS)
    ['axolotl', 'hf', 'megatron', 'trl']

`recommend(source, stack)` reads a report folder (its tables and resolved.yaml: the fast path) or runs a
scenario, takes the strategy its Decision block names to use (on the smallest cluster simulated by default, as
the block does; never one that does not fit memory) and writes it in the stack's options (`stacks`) at the
step the run sized it at (rows per device, gradient accumulation, so real tokens per optimizer step) and the
layout it priced, with the simulated real tokens per second per GPU and what was assumed. Where the stack
cannot run that strategy it says why, and recommends the fastest strategy of the same run that it can run.
`recommend_markdown` is the report's recommend.md: the choice in every stack.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from simbench.errors import InputError, did_you_mean
from simbench.experiment import ExperimentResult
from simbench.histogram import LengthHistogram
from simbench.report.precision import format_with_spread
from simbench.report.recommend.plan import (PER_DOCUMENT_ATTENTION, Family, RunFacts, TrainingPlan, rows_at,
                                            run_facts, training_plan)
from simbench.report.recommend.stacks import STACKS, Expression, Stack
from simbench.scenario import Scenario
from simbench.sim.memory_fit import DOES_NOT_FIT, NEEDS_RECOMPUTE

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
        plan |= {"rows_per_device": self.plan.rows_per_device, "accumulation_steps": self.plan.accumulation_steps,
                 "fits": self.plan.fits}
        return {"stack": self.stack, "names_from": self.source, "scenario": self.scenario,
                "chosen": self.chosen.strategy, "strategy": self.plan.strategy, "gpus": self.plan.gpus,
                "tokens_per_s_per_gpu": self.plan.tokens_per_s_per_gpu,
                "relative_error": self.plan.relative_error, "simulated": True, "plan": plan,
                "settings": self.settings, "notes": list(self.notes), "assumptions": list(self.assumptions),
                "snippet": self.snippet}


def recommend(source: str | Path, stack: str, *, gpus: int | None = None, strategy: str | None = None,
              quick: bool = False, seed: int | None = None) -> Recommendation:
    """The recommendation of a report folder (fast) or of a scenario (run here; `quick` and `seed` as `simbench run`
    takes them) for `stack` (trl, hf, axolotl, megatron), at `gpus` (default: the Decision block's, the smallest
    simulated), for the strategy the Decision block names there or the one named `strategy`."""
    tables, scenario, histogram = run_of(source, quick=quick, seed=seed)
    return recommend_from(tables, scenario, histogram, stack, gpus=gpus, strategy=strategy)


def run_of(source: str | Path, *, quick: bool = False, seed: int | None = None
           ) -> tuple[ExperimentResult, Scenario, LengthHistogram]:
    """A run's tables, scenario and histogram: read from a report folder, or computed by running a scenario."""
    from simbench.report.tables import RESOLVED_SCENARIO, read_tables
    from simbench.scenario import load_scenario, load_scenarios

    path = Path(source)
    if path.is_dir():
        if not (path / RESOLVED_SCENARIO).is_file():
            raise InputError(f"not a report folder (it has no {RESOLVED_SCENARIO}); give a report folder or a "
                             "scenario", source=str(path))
        if quick or seed is not None:
            raise InputError("--quick and --seed apply to a scenario, which is run; a report folder is read as it "
                             "was run", source=str(path))
        scenario = load_scenario(path / RESOLVED_SCENARIO)
        return read_tables(path), scenario, scenario.dataset.load()
    scenarios = load_scenarios(source, seed=seed)
    if len(scenarios) > 1:
        raise InputError(f"the file holds {len(scenarios)} scenarios ({', '.join(s.name for s in scenarios)}); "
                         "`simbench run` it and recommend from one report folder", source=str(source))
    scenario = scenarios[0].quickened() if quick else scenarios[0]
    from simbench.experiment import run_experiment

    histogram = scenario.dataset.load()
    return run_experiment(scenario, histogram), scenario, histogram


def recommend_from(tables: ExperimentResult, scenario: Scenario, histogram: LengthHistogram, stack: str, *,
                   gpus: int | None = None, strategy: str | None = None) -> Recommendation:
    """`recommend` on a run already in hand: its tables (as run, or as a report folder stores them), scenario
    and histogram."""
    if stack not in STACKS:
        raise InputError(f"unknown stack {stack!r};{did_you_mean(stack, list(STACKS))} the stacks are "
                         f"{', '.join(STACKS)}", parameter="stack")
    target = STACKS[stack]
    facts = run_facts(scenario, tables)
    count, rows, choice = rows_at(tables, histogram, gpus)
    labels = [row["strategy"] for row in rows]
    if strategy is not None and strategy not in labels:
        raise InputError(f"the run has no strategy {strategy!r} on {gpu_count(count)};{did_you_mean(strategy, labels)} "
                         f"its strategies are {', '.join(labels)}", parameter="strategy")
    if strategy is None and choice is None:
        raise InputError(f"no strategy of this run fits the GPU's memory on {gpu_count(count)} (memory.csv); name one "
                         "with --strategy, or change the scenario so that one fits")
    chosen_label = strategy or choice
    chosen = training_plan(rows[labels.index(chosen_label)], scenario, histogram, facts)
    expressed = target.express(chosen, facts)
    plan, notes = chosen, []
    if not isinstance(expressed, Expression):
        reason = expressed
        plan, expressed = _fastest_expressible(target, rows, scenario, histogram, facts)
        notes.append(f"{reason}. The fastest strategy of this run that it can run "
                     f"on {gpu_count(count)} is {plan.strategy}, {rate_text(plan)} against {chosen.strategy}'s "
                     f"{rate_text(chosen)}, and these settings run it")
    notes += expressed.notes
    assumptions = _assumptions(plan, facts)
    comments = _comments(target, facts, chosen, plan, strategy is not None, notes, assumptions)
    return Recommendation(target.name, target.source, facts.scenario, chosen, plan, expressed.settings,
                          tuple(notes), tuple(assumptions), target.render(expressed.settings, comments))


def _fastest_expressible(stack: Stack, rows: list[dict], scenario: Scenario, histogram: LengthHistogram,
                         facts: RunFacts) -> tuple[TrainingPlan, Expression]:
    """The first of the Decision rows (those that fit first, each group fastest first) that the stack can run:
    padding to max length, always simulated, every stack can."""
    for row in rows:
        plan = training_plan(row, scenario, histogram, facts)
        expression = stack.express(plan, facts)
        if isinstance(expression, Expression):
            return plan, expression
    raise InputError(f"{stack.name} can run none of this run's strategies ({', '.join(r['strategy'] for r in rows)})")


def gpu_count(count: int) -> str:
    """'1 GPU', '1,024 GPUs'."""
    return f"{count:,} GPU{'' if count == 1 else 's'}"


def rate_text(plan: TrainingPlan) -> str:
    """Real tokens per second per GPU to the digits its spread supports, as the Decision block writes it."""
    relative = plan.relative_error
    spread = plan.tokens_per_s_per_gpu * relative if relative is not None and math.isfinite(relative) else 0.0
    return f"{format_with_spread(plan.tokens_per_s_per_gpu, spread)} real tokens/s per GPU"


def layout_text(facts: RunFacts) -> str:
    """The parallel layout the run priced, in words: its replica's split, ZeRO stage and recompute."""
    layout = facts.layout
    if layout is None:
        return ("plain data parallel: each device its own replica, the gradients all-reduced, nothing sharded or "
                "recomputed")
    split = f"TP {layout.tp} x PP {layout.pp} x CP {layout.cp} ({layout.gpus_per_replica:,} GPU" + (
        "s a replica)" if layout.gpus_per_replica > 1 else " a replica)")
    virtual = f", {layout.virtual_stages} virtual stages" if layout.virtual_stages > 1 else ""
    raised = (" (raised by the scenario's `memory` policy so that its strategies fit)" if facts.layout_raised
              else "")
    return f"{split}{virtual}, ZeRO stage {layout.zero_stage}, recompute {layout.recompute}{raised}"


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
    return [
        f"simulated by simbench's cost model, not measured: real tokens (no padding) per second per GPU over "
        f"{facts.steps:,} steps (seed {facts.seed}, shapes {facts.shapes}), ± one standard error; a trainer adds "
        "costs of its own (data loading, logging)",
        f"model {facts.model} on hardware profile {facts.hardware}"
        + (" with overridden fields" if facts.hardware_overridden else "")
        + f" (each rate's source: `simbench list --profile {facts.hardware}`)",
        f"{gpu_count(plan.gpus)}, {replicas}, {sharding}",
        _step_text(plan, rows, facts),
        "per-document (varlen) attention" if plan.family in PER_DOCUMENT_ATTENTION
        else "dense attention over each row, padding and other documents masked",
        f"{recompute}; {_memory_text(plan)}",
    ]


def _step_text(plan: TrainingPlan, rows: str, facts: RunFacts) -> str:
    """The optimizer step as the run sized it: rows a microbatch, microbatches, replicas, real tokens."""
    per_microbatch = plan.rows_per_device
    per_step = per_microbatch * plan.accumulation_steps  # a replica's rows as these settings run them
    text = (f"{per_microbatch:,} {rows} of up to {plan.max_length:,} tokens a replica per microbatch, "
            f"{plan.accumulation_steps} microbatch{'es' if plan.accumulation_steps > 1 else ''} (gradient "
            f"accumulation steps) per optimizer step, {plan.data_parallel:,} replica"
            f"{'s' if plan.data_parallel > 1 else ''}: {per_step * plan.data_parallel:,} rows an optimizer step")
    if plan.real_tokens_per_step is not None:
        text += f", {plan.real_tokens_per_step:,.0f} real tokens per optimizer step simulated"
    if facts.compare_at == "equal-tokens":
        text += " (the run sized every strategy's step to about the same real tokens: `compare_at: equal-tokens`)"
    if plan.accumulation_steps != plan.microbatches:
        text += (f"; the run cut a replica's step of {plan.rows_per_step:,} rows into {plan.microbatches} "
                 "microbatches of unequal rows (by token slots), a trainer's microbatches are equal: these settings "
                 f"run the same rows as {plan.accumulation_steps} microbatches, a little slower than the figure")
    return text


def _memory_text(plan: TrainingPlan) -> str:
    if plan.memory_verdict is None:
        return "memory not checked (the hardware profile states no HBM capacity)"
    peak = (f" ({plan.peak_memory_gib:.0f} of {plan.hbm_capacity_gib:.0f} GiB per GPU)"
            if plan.peak_memory_gib is not None and plan.hbm_capacity_gib is not None else "")
    if plan.memory_verdict == DOES_NOT_FIT:
        return f"does NOT fit HBM by simbench's memory model{peak}: these settings run out of memory as they stand"
    if plan.memory_verdict == NEEDS_RECOMPUTE:
        return (f"fits HBM by simbench's memory model{peak} only at the raised ZeRO stage and recompute written "
                "here")
    return f"fits HBM by simbench's memory model{peak}"


def _comments(stack: Stack, facts: RunFacts, chosen: TrainingPlan, plan: TrainingPlan, named: bool,
              notes: list[str], assumptions: list[str]) -> list[str]:
    why = (f"the strategy asked for ({chosen.strategy})" if named and plan is chosen
           else f"the Decision block's choice on {gpu_count(plan.gpus)}" if plan is chosen
           else f"in place of {chosen.strategy}, which this stack cannot run (see the note)")
    lines = [f"simbench recommend: scenario {facts.scenario} on {gpu_count(plan.gpus)} for {stack.title}.",
             f"Option names: {stack.source}.",
             f"Strategy: {plan.strategy} ({plan.family.value}), {why}.",
             f"Expected: {rate_text(plan)}, simulated.",
             f"Layout: {layout_text(facts)}.",
             *(f"Assumed: {assumption}." for assumption in assumptions),
             *(f"Note: {note}." for note in notes)]
    wrapped = []
    for line in lines:
        # A number keeps its unit on its line: " %" is held together while wrapping.
        wrapped += [part.replace(NO_BREAK, " ") for part in textwrap.wrap(
            line.replace(" %", NO_BREAK + "%"), COMMENT_WIDTH - 2, initial_indent="# ", subsequent_indent="#   ",
            break_on_hyphens=False, break_long_words=False)]
    return wrapped


def recommend_markdown(tables: ExperimentResult, scenario: Scenario, histogram: LengthHistogram) -> str:
    """recommend.md: the Decision block's choice on its cluster in every stack's settings."""
    recommendations = [recommend_from(tables, scenario, histogram, name) for name in STACKS]
    first = recommendations[0]
    facts = run_facts(scenario, tables)
    sections = [f"# Recommended settings: {scenario.name}",
                f"The Decision block's choice on {gpu_count(first.chosen.gpus)} is **{first.chosen.strategy}**: "
                f"{rate_text(first.chosen)}, simulated, at {first.chosen.rows_per_device:,} rows a replica per "
                f"microbatch and {first.chosen.accumulation_steps} microbatch"
                f"{'es' if first.chosen.accumulation_steps > 1 else ''} (gradient accumulation steps) per optimizer "
                "step" + (f", {first.chosen.real_tokens_per_step:,.0f} real tokens per optimizer step"
                          if first.chosen.real_tokens_per_step is not None else "") + ". "
                f"The run assumed this parallel layout: {layout_text(facts)}. "
                "Below it is written in each stack's own settings; where a stack cannot run it, the fastest strategy "
                "of this run that it can, and why. For another GPU count or strategy: "
                "`simbench recommend REPORT --for STACK --gpus N --strategy NAME`."]
    for recommendation in recommendations:
        stack = STACKS[recommendation.stack]
        heading = f"## {stack.label}: {recommendation.plan.strategy}"
        sections.append(f"{heading}\n\n```{stack.language}\n{recommendation.snippet}```")
    return "\n\n".join(sections) + "\n"


__all__ = ["STACKS", "Recommendation", "layout_text", "recommend", "recommend_from", "recommend_markdown", "run_of"]
