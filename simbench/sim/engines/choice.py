"""Which engine runs a plan on a cluster size: the one place the simulator's engines are chosen, asked by the
simulation itself, its work estimate and a sweep's estimate of its cells (docs/engines.md tells the rules).

Clusters of up to PER_DEVICE_MAX devices simulate every device, whatever the plan: SimPy while the run needs
at most SIMPY_EVENT_BUDGET events, the vectorized engine above. Larger clusters take a shortcut where the
plan allows one: the order-statistics engine draws the slowest device directly when devices draw their
batches independently; else a plan whose devices hold repeating batches prices its distinct batches (timed
by the vectorized engine); else every device is simulated there too, on SimPy or the vectorized engine by the
same event budget. A run that forces an engine
(`simpy`, `vectorized`) simulates every device of every cluster; `order-statistics` takes the large
clusters' shortcut at every size.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simbench.sim.plans import ExecutionPlan, SimulationSettings

# What a run may ask for: `auto` chooses by the rules above, the others force one engine.
ENGINES = ("auto", "simpy", "vectorized", "order-statistics")
# Chosen: the most events `auto` lets a SimPy run take (SimPy is pure Python, a process per device).
SIMPY_EVENT_BUDGET = 2_500
# Chosen: the largest cluster `auto` simulates device by device whatever the plan.
PER_DEVICE_MAX = 64


class Engine(Enum):
    """An engine the chooser picks for one plan on one cluster size."""

    SIMPY = "simpy"
    VECTORIZED = "vectorized"
    ORDER_STATISTICS = "order-statistics"
    DISTINCT_BATCHES = "distinct-batches"

    @property
    def simulates_every_device(self) -> bool:
        return self in (Engine.SIMPY, Engine.VECTORIZED)

    @property
    def column(self) -> str:
        """The name the results' `engine` column gives it: distinct batches are timed by the vectorized engine."""
        return Engine.VECTORIZED.value if self is Engine.DISTINCT_BATCHES else self.value


def split_by_size(devices: list[int], engine: str) -> tuple[list[int], list[int]]:
    """The cluster sizes (of sorted `devices`) whose every device is simulated whatever the plan, and the larger
    ones, which take the plan's shortcut where it has one (`large_cluster_engine`)."""
    if engine in ("simpy", "vectorized"):
        return devices, []
    if engine == "order-statistics":
        return [], devices
    return [size for size in devices if size <= PER_DEVICE_MAX], [size for size in devices if size > PER_DEVICE_MAX]


def large_cluster_engine(plan: ExecutionPlan) -> Engine:
    """How `plan` runs the larger cluster sizes of `split_by_size`: its shortcut, or VECTORIZED where it has
    none (every device simulated, SimPy where `per_device_engine` says)."""
    if plan.independent_devices:
        return Engine.ORDER_STATISTICS
    if plan.source.prices_distinct_batches(plan):
        return Engine.DISTINCT_BATCHES
    return Engine.VECTORIZED


def per_device_engine(plan: ExecutionPlan, devices: int, settings: SimulationSettings) -> Engine:
    """SIMPY or VECTORIZED for a cluster of `devices` whose every device `plan` simulates."""
    if settings.engine != "auto":
        return Engine.SIMPY if settings.engine == "simpy" else Engine.VECTORIZED
    events_per_device_step = plan.source.simpy_events_per_device_step(plan, settings.cost_model,
                                                                      settings.batch_size)
    within_budget = devices * settings.steps * events_per_device_step <= SIMPY_EVENT_BUDGET
    return Engine.SIMPY if within_budget else Engine.VECTORIZED


def engine_for(plan: ExecutionPlan, devices: int, settings: SimulationSettings) -> Engine:
    """The engine that runs `plan` on a cluster of `devices` under `settings` (the plan's own)."""
    large = split_by_size([devices], settings.engine)[1]
    shortcut = large_cluster_engine(plan) if large else Engine.VECTORIZED
    return shortcut if not shortcut.simulates_every_device else per_device_engine(plan, devices, settings)


def devices_drawn_one_by_one(plan: ExecutionPlan, largest: int, engine: str) -> int:
    """Devices whose batches `plan` draws one by one on clusters of up to `largest` devices, for the work
    estimate: up to PER_DEVICE_MAX where the larger clusters take a shortcut (the order-statistics engine's
    pool of draws counted as that many), else all of them."""
    if engine in ("simpy", "vectorized") or large_cluster_engine(plan).simulates_every_device:
        return largest
    return min(largest, PER_DEVICE_MAX)
