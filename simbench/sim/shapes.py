"""First sight of a batch shape: the extra time a device spends the first time it runs a shape.

Each device remembers the shapes it has run. Over a training run of `training_steps` steps, a device
drawing shapes independently meets a new one at a random step with probability
D(training_steps) / training_steps, D(S) the distinct shapes among S draws; that is the chance, per device
and step, that the step pays the profile's first-sight cost. `shapes` chooses the phase of the run:

- `new`: every variable-shape batch is new (a run's first steps, or a process that restarts often);
- `seen`: every shape has run before (steady state, a long run);
- `auto`: the average over the scenario's `training_steps`, from the plan's own shape distribution.

    >>> import numpy as np
    >>> round(new_shape_rate(np.repeat(np.arange(10), 100), training_steps=1_000), 3)
    0.01
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

SHAPES = ("new", "seen", "auto")
# The longest training run a scenario or command may name: far beyond any run (a trillion steps).
TRAINING_STEPS_MAX = 10**12
# Shape draws per plan to measure D(S): enough for every shape of a token budget or sorted batching.
SHAPE_SAMPLE = 100_000
# The stream of the first-sight draws, apart from every batch-drawing and noise stream.
FIRST_SIGHT_STREAM = 0x6669727374


def new_shape_rate(keys: np.ndarray, training_steps: int) -> float:
    """The share of a device's steps that meet a shape it has not run, over `training_steps` steps whose
    shapes are drawn like `keys` (one device's consecutive draws). Beyond the sample, the rate of new shapes
    stays at the Good-Turing estimate of the unseen shapes' mass at its end (singletons / draws)."""
    sample = keys[:training_steps]
    _, counts = np.unique(sample, return_counts=True)
    distinct = counts.size
    if training_steps <= sample.size:
        return distinct / training_steps
    unseen_mass = np.count_nonzero(counts == 1) / sample.size
    return (distinct + (training_steps - sample.size) * unseen_mass) / training_steps


def shown_first_sight(seconds: float, hidden_seconds: float, step_seconds):
    """What a new shape adds to a step priced at `step_seconds` (without it): its cost less what the GPU work the
    step queues hides, up to `hidden_seconds` (`CostModel.first_sight_hidden_seconds`), never below 0."""
    return np.maximum(0.0, seconds - np.minimum(hidden_seconds, step_seconds))


@dataclass(frozen=True)
class FirstSight:
    """The first-sight cost a plan's batches pay: `seconds` with probability `probability` per device
    and step, drawn independently of the batch (the shape that is new is any of the device's). The host pays it
    while the GPU runs the step's queued kernels: a step whose kernels take T seconds (its compute, padding and
    masked attention; not its host-side overhead, which hides nothing) shows `seconds - min(hidden_seconds, T)`."""

    seconds: float
    probability: float
    rng: np.random.Generator
    # One fixed shape is met by every device at the same (first) step: its cost is the run's once, shared
    # by all steps, not a draw per device.
    shared: bool = False
    hidden_seconds: float = 0.0

    @property
    def active(self) -> bool:
        return self.seconds > 0 and self.probability > 0

    def shown(self, costs) -> np.ndarray:
        """What a new shape adds to steps of `costs` (DeviceCosts or StepAggregates, without it)."""
        kernels = costs.compute_seconds + costs.padding_seconds + costs.masked_attention_seconds
        return shown_first_sight(self.seconds, self.hidden_seconds, kernels)

    def hits(self, costs) -> np.ndarray:
        shown = self.shown(costs)
        if self.shared:
            return shown * self.probability
        return shown * (self.rng.random(np.shape(shown)) < self.probability)

    def add_to_costs(self, costs):
        """DeviceCosts with each device-step's first-sight cost in its overhead."""
        if not self.active:
            return costs
        return replace(costs, overhead_seconds=costs.overhead_seconds + self.hits(costs))

    def add_to_items(self, items):
        """An ItemSource whose priced batches each carry their device's first-sight draw."""
        if not self.active:
            return items
        return replace(items, price=lambda picks: self.add_to_costs(items.price(picks)))

    def add_to_aggregates(self, aggregates, devices: int):
        """Step aggregates of `devices` devices priced without first sight: a step is slowed by it when any
        device meets a new shape (the slowest step then taken as the slowest device's plus the cost, what of it
        the mean device's kernels leave shown: an upper bound where the device that meets it is not otherwise
        the slowest); the mean gains its expectation."""
        if not self.active:
            return aggregates
        shown = self.shown(aggregates)
        mean = shown * self.probability
        if self.shared:
            slowest = mean
        else:
            any_new = (self.rng.random(shown.shape)
                       < -np.expm1(devices * np.log1p(-min(self.probability, 1 - 1e-16))))
            slowest = shown * any_new
        return replace(aggregates, slowest_device_seconds=aggregates.slowest_device_seconds + slowest,
                       mean_device_seconds=aggregates.mean_device_seconds + mean,
                       overhead_seconds=aggregates.overhead_seconds + mean)


def first_sight(source, shapes: str, training_steps: int) -> FirstSight:
    """The first-sight cost of a plan's batch source, for the scenario's `shapes` and run length."""
    settings = source.settings
    seconds = float(settings.cost_model.first_sight_seconds(source.plan.mode))
    hidden = float(settings.cost_model.first_sight_hidden_seconds(source.plan.mode))
    rng = np.random.default_rng([settings.seed, FIRST_SIGHT_STREAM, source.purpose])
    if shapes == "seen" or seconds == 0:
        return FirstSight(0.0, 0.0, rng)
    keys = source.shape_keys(np.random.default_rng([settings.seed, FIRST_SIGHT_STREAM, 1 << 20]),
                             min(training_steps, SHAPE_SAMPLE))
    if keys is None:
        # One fixed shape: only the first step meets it (the simulated steps are the whole run in `new`).
        return FirstSight(seconds, 1 / (settings.steps if shapes == "new" else training_steps), rng, shared=True,
                          hidden_seconds=hidden)
    return FirstSight(seconds, 1.0 if shapes == "new" else new_shape_rate(keys, training_steps), rng,
                      hidden_seconds=hidden)
