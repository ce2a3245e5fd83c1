"""A replica's mean step by cause (compute, padding, communication, bubbles, the slowest context-parallel rank,
...) for each strategy and CP sharding: the breakdown table of a run with a 4D layout."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from simbench.costmodels.base import BatchSet, CostModelWrapper, ExecutionMode, StepCosts
from simbench.sim.replica import ReplicaCostModel, ReplicaSteps, _as_step_costs

if TYPE_CHECKING:
    import pandas as pd


class _Recorder(CostModelWrapper):
    """A replica cost model that keeps every batch it prices, by cause, for `replica_breakdown`."""

    def __init__(self, cost_model: ReplicaCostModel):
        super().__init__(cost_model)
        self.priced: list[ReplicaSteps] = []

    def step_costs(self, batches: BatchSet, mode: ExecutionMode) -> StepCosts:
        steps = self.cost_model.replica_steps(batches, mode)
        self.priced.append(steps)
        return _as_step_costs(steps)

    def means_over(self, drawn_seconds: np.ndarray) -> dict[str, float]:
        """Mean seconds by cause over the drawn steps, each found among the priced batches by its total (a source
        may price each distinct batch once, then draw from them)."""
        fields = {name: np.concatenate([getattr(steps, name) for steps in self.priced])
                  for name in ReplicaSteps.__dataclass_fields__}
        totals = _as_step_costs(ReplicaSteps(**fields)).total_seconds
        order = np.argsort(totals, kind="stable")
        found = order[np.clip(np.searchsorted(totals[order], drawn_seconds), 0, order.size - 1)]
        return {name: float(values[found].mean()) for name, values in fields.items()}


# Replica steps drawn per strategy and sharding for the breakdown: the table's means move by well under 1 %.
BREAKDOWN_STEPS = 100


def replica_breakdown(histogram, plans, packings: dict, cost_model: ReplicaCostModel, batch_size: int, seed: int,
                      steps: int = BREAKDOWN_STEPS) -> pd.DataFrame:
    """One row per (strategy, CP sharding): a replica's mean step by cause over `steps` steps drawn as the
    simulator draws them, under every sharding the row length allows (the layout's own marked `simulated`),
    with its real tokens and their rate per GPU. Data-parallel waiting, gradient sync and the optimizer update
    are the simulation's."""
    import pandas as pd

    from simbench.costmodels.layout import CP_SHARDINGS
    from simbench.sim.accumulation import accumulating
    from simbench.sim.plans import SimulationSettings

    layout = cost_model.layout
    rows = []
    for sharding in CP_SHARDINGS:
        if layout.cp == 1 and sharding != layout.cp_sharding:
            continue  # one rank: every sharding is the same
        if sharding == "zigzag" and histogram.max_length % (2 * layout.cp):
            continue
        sharded = (cost_model if sharding == layout.cp_sharding
                   else ReplicaCostModel(cost_model.gpu_model, replace(layout, cp_sharding=sharding)))
        for plan in plans:
            # A plan sized to its own rows runs them in its own microbatches (`compare_at: equal-tokens`).
            own = sharded if plan.sizing is None else accumulating(sharded, plan.sizing.microbatches)
            recorder = _Recorder(own)
            settings = SimulationSettings(histogram, recorder, batch_size if plan.sizing is None else plan.sizing.rows,
                                          steps, seed, "auto", microbatches=own.layout.microbatches)
            source = plan.source(plan, packings.get(plan.name), settings)
            drawn = source.chunk(steps, [1])
            costs = drawn[max(drawn)]
            means = recorder.means_over(costs.total_seconds[:, 0])
            real_tokens = float(costs.real_tokens[:, 0].mean())
            rows.append({"strategy": plan.name, "cp_sharding": sharding, "simulated": sharding == layout.cp_sharding,
                         **means, "real_tokens": real_tokens,
                         "tokens_per_s_per_gpu": real_tokens / means["step_seconds"] / layout.gpus_per_replica})
    return pd.DataFrame(rows)
