"""Equal footing: strategies compared at the same expected real tokens per optimizer step (`compare_at`).

    >>> from simbench.resolved import Run
    >>> from simbench.scenario import Scenario
    >>> scenario = Scenario(name="demo", dataset={"histogram": "squad_1_1_384"}, strategies=["spfhp:3", "unpad"],
    ...                     devices=[1], batch_size=8)
    >>> footing = Run.from_scenario(scenario).footing
    >>> footing.spread <= TOLERANCE, footing.plans["unpad"].rows > footing.plans["spfhp:3"].rows
    (True, True)

Tokens per optimizer step change how a model converges, not only how fast it trains, so speed-ups measured
at different ones answer no question a user has. `equal-tokens` (the default) sizes every strategy's step to
a common target: the real tokens that the scenario's step (`batch_size` rows of max_length, all microbatches)
holds at the best efficiency any strategy's full-length rows reach, grown by the smallest whole factor (up to SCALE_MAX) that
lets every strategy's whole rows reach it within TOLERANCE of each other (so packers run as configured
unless another strategy's rows cannot come close, as 2 rows of a packer at 81 % against 2 at 99.9 % cannot).
Each strategy reaches it with its own knobs (`BatchSource.sized`): rows (packs or sequences), a token
budget, and gradient accumulation where a microbatch would exceed the token slots memory allows (never
fewer than the scenario's own microbatch holds). `as-configured` keeps every size and flags a strategy
more than FLAG_ABOVE from the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from simbench.histogram import LengthHistogram
from simbench.sim.plans import ExecutionPlan
from simbench.strategies.packing import Packing

COMPARE_AT = ("equal-tokens", "as-configured")
# equal-tokens: any two strategies' expected real tokens per optimizer step within 5 % (chosen).
TOLERANCE = 0.05
# as-configured: a strategy whose expected real tokens per step differ by more than 10 % from another's is
# flagged (chosen: twice equal-tokens' tolerance).
FLAG_ABOVE = 0.10
# The most the common step grows, in whole multiples of the scenario's, looking for one every strategy reaches.
SCALE_MAX = 4


@dataclass(frozen=True)
class PlanFooting:
    """One plan's step as it runs: what a user sets to reproduce it, and its expected real tokens."""

    rows: int  # rows a device's step holds (packs, sequences; one budget batch for token-budget)
    microbatches: int  # microbatches the rows run as (gradient accumulation, or a 4D replica's)
    budget_tokens: int | None  # token-budget's padded slots per microbatch (None: no budget)
    expected_real_tokens_per_step: float  # per device (a replica with a 4D layout) and optimizer step


@dataclass(frozen=True)
class Footing:
    """How a run's strategies were sized, and how far apart their expected real tokens per step lie."""

    compare_at: str
    plans: Mapping[str, PlanFooting]  # by plan name, padding's included
    target_real_tokens_per_step: float | None = None  # equal-tokens' common target per device step
    scale: int = 1  # the target in multiples of the scenario's step at the best efficiency
    microbatch_slots: int | None = None  # the most token slots a microbatch was given (equal-tokens)

    @property
    def spread(self) -> float:
        """The largest expected real tokens per step over the smallest, less one."""
        values = [plan.expected_real_tokens_per_step for plan in self.plans.values()]
        return max(values) / min(values) - 1.0

    def warnings(self, label=lambda name: name) -> list[str]:
        """Each way the strategies are not on equal footing, in words (`label` names a plan as the report does)."""
        if len(self.plans) < 2:
            return []
        tokens = {name: plan.expected_real_tokens_per_step for name, plan in self.plans.items()}
        low, high = min(tokens, key=tokens.get), max(tokens, key=tokens.get)
        allowed = TOLERANCE if self.compare_at == "equal-tokens" else FLAG_ABOVE
        if tokens[high] / tokens[low] - 1.0 <= allowed:
            return []
        if self.compare_at == "as-configured":
            middle = sorted(tokens.values())[len(tokens) // 2]
            apart = [name for name in tokens if max(tokens[name] / middle, middle / tokens[name]) - 1 > FLAG_ABOVE]
            return [f"not on equal footing (compare_at: as-configured): expected real tokens per optimizer step "
                    f"range from {tokens[low]:,.0f} ({label(low)}) to {tokens[high]:,.0f} ({label(high)}), "
                    f"{tokens[high] / tokens[low]:.2f}x; more than {FLAG_ABOVE:.0%} from the median strategy's: "
                    f"{', '.join(label(name) for name in apart)}. Tokens per step change convergence, not only "
                    "speed; `compare_at: equal-tokens` sizes every strategy to the same"]
        target = self.target_real_tokens_per_step or sorted(tokens.values())[len(tokens) // 2]
        missed = [name for name in tokens if abs(tokens[name] / target - 1) > TOLERANCE / 2]
        return [f"not on equal footing: {label(name)} reaches {tokens[name]:,.0f} expected real tokens per "
                f"optimizer step, not the common {target:,.0f} (its whole rows or budgets cannot come within "
                f"{TOLERANCE / 2:.1%}); the strategies are up to {self.spread:.1%} apart, more than "
                f"{TOLERANCE:.0%}" for name in missed]


def footing_of_table(scaling) -> Footing | None:
    """The footing a report's scaling table states (its footing columns), None for a table without them."""
    import pandas as pd

    if "expected_real_tokens_per_device_step" not in scaling:
        return None
    first = scaling.drop_duplicates("strategy")
    plans = {row.strategy: PlanFooting(int(row.rows_per_device_step), int(row.microbatches_per_step),
                                       None if pd.isna(row.budget_tokens) else int(row.budget_tokens), float(row.expected_real_tokens_per_device_step))
             for row in first.itertuples()}
    return Footing(str(first["compare_at"].iloc[0]), plans)


def size_plans(plans: Sequence[ExecutionPlan], histogram: LengthHistogram, packings: Mapping[str, Packing],
               compare_at: str, batch_size: int, microbatches: int,
               microbatch_slots: int) -> tuple[tuple[ExecutionPlan, ...], Footing]:
    """The plans (padding's first) sized as `compare_at` says, and their footing. `batch_size`: rows of the
    scenario's device step (all its `microbatches`); `microbatch_slots`: the most token slots a microbatch of a
    sized plan may hold; `packings`: every packing plan's, made at the scenario's sizes."""
    if compare_at == "as-configured":
        footing = {plan.name: _plan_footing(plan, histogram, packings.get(plan.name), batch_size, microbatches)
                   for plan in plans}
        return tuple(plans), Footing(compare_at, footing)
    best = max((packing.real_tokens / packing.tokens for packing in packings.values()
                if packing.tokens and bool((packing.slot_lengths == histogram.max_length).all())), default=1.0)
    base = batch_size * histogram.max_length * best
    chosen = None
    for scale in range(1, SCALE_MAX + 1):
        sized = tuple(plan.source.sized(plan, histogram, packings.get(plan.name), scale * base, microbatches,
                                        microbatch_slots) for plan in plans)
        footing = Footing(compare_at, {plan.name: _plan_footing(plan, histogram, packings.get(original.name),
                                                                plan.sizing.rows, plan.sizing.microbatches)
                                       for plan, original in zip(sized, plans)},
                          scale * base, scale, microbatch_slots)
        if chosen is None or footing.spread < chosen[1].spread:
            chosen = sized, footing
        if footing.spread <= TOLERANCE:
            break
    return chosen


def _plan_footing(plan: ExecutionPlan, histogram: LengthHistogram, packing: Packing | None, rows: int,
                  microbatches: int) -> PlanFooting:
    budget = plan.budget_tokens if isinstance(plan.budget_tokens, int) else None
    return PlanFooting(rows, microbatches, budget,
                       plan.source.expected_real_tokens_per_step(plan, histogram, packing, rows, microbatches))
