"""Plans whose batches are packs: every packer of the strategy registry, and `packed-varlen`.

A packer's plan runs its packs padded (a block-diagonal mask); `sort` runs its batches padded to their
longest; `packed-varlen` runs a packer's packs with per-sequence attention.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simbench.costmodels.base import ExecutionMode
from simbench.errors import InputError
from simbench.sim.batching import PackSampler, SortedBatchSampler
from simbench.sim.orderstat import ItemSource
from simbench.sim.plans import BatchSource, ExecutionPlan, PlanKind, PlanType, register_plan
from simbench.sim.pricing import price_packs
from simbench.sim.windows import SortedWindows
from simbench.strategies import STRATEGIES, Strategy

DEFAULT_VARLEN_PACKER = "lpfhp"


class PackingSource(BatchSource):
    """Rows of the plan's packing, drawn in proportion to their repeats (sorted batching: in order)."""

    kind = PlanKind.PACKING

    def __init__(self, plan, packing, settings, purpose=0, simpy_devices=0):
        super().__init__(plan, packing, settings, purpose, simpy_devices)
        self.rng = self.generator(purpose)
        self.sampler = SortedBatchSampler(packing) if plan.mode is ExecutionMode.SORTED else PackSampler(packing)

    @staticmethod
    def packing_request(plan: ExecutionPlan) -> tuple[str, int | None]:
        return plan.packer, plan.max_depth

    @staticmethod
    def random_stream(plan: ExecutionPlan) -> str:
        return f"{plan.packer}:{plan.max_depth}:{plan.mode.value}"

    @staticmethod
    def independent_devices(plan: ExecutionPlan) -> bool:
        return plan.mode is not ExecutionMode.SORTED  # sorted batching hands out consecutive batches

    def chunk(self, steps, devices):
        largest, settings = devices[-1], self.settings
        picks = self.sampler.picks(self.rng, steps, largest, settings.batch_size)
        return {largest: price_packs(settings.cost_model, self.sampler, picks, settings.batch_size, self.plan.mode,
                                     steps, largest)}

    def items(self):
        return ItemSource(self.sampler.item_weights, self.sampler.item_features(), self.settings.batch_size,
                          self._price_items)

    def distinct_batches(self, devices):
        if self.plan.mode is not ExecutionMode.SORTED:
            return None
        windows = SortedWindows(self.sampler, self.settings.cost_model, self.settings.batch_size)
        first = windows.first_batches(self.rng, self.settings.steps)
        return {size: windows.aggregates(first, size) for size in devices}

    def _price_items(self, items):
        return price_packs(self.settings.cost_model, self.sampler, items, self.settings.batch_size, self.plan.mode, 1,
                           items.shape[0])


@dataclass(frozen=True)
class PackerPlan(PlanType):
    """A packer of the strategy registry as a plan: `NAME[:DEPTH]`."""

    strategy: Strategy

    @classmethod
    def of(cls, strategy: Strategy) -> PackerPlan:
        return cls(strategy.name, strategy.description, PackingSource, strategy)

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        self.reject_unknown(parameters, ("max_depth", "packer"))
        packer = parameters.get("packer", self.name)
        if packer != self.name:
            if STRATEGIES.find(packer) is None:
                raise InputError(_not_a_depth_or_packer(self.name, packer))
            raise InputError(f"strategy {self.name!r}: a packer takes only a depth, not another packer name")
        if not self.strategy.uses_depth:
            if parameters:  # dropping it silently would label the run as if the depth had mattered
                raise InputError(f"strategy {self.name!r}: {self.name} takes no depth")
            depth = 1 if self.name == "none" else None
        else:
            depth = _depth(self.name, parameters, self.strategy.default_depth)
        mode = ExecutionMode.SORTED if self.name == "sort" else ExecutionMode.PADDED
        return ExecutionPlan(self.strategy.label(depth), PlanKind.PACKING, mode, packer=self.name, max_depth=depth)


@dataclass(frozen=True)
class PackedVarlenPlan(PlanType):
    """`packed-varlen[:PACKER][:DEPTH]`: a packer's packs run with per-sequence attention; labelled with
    both, e.g. `packed-varlen:lpfhp:max`."""

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        self.reject_unknown(parameters, ("max_depth", "packer"))
        packer = parameters.get("packer", DEFAULT_VARLEN_PACKER)
        if STRATEGIES.find(packer) is None:
            raise InputError(_not_a_depth_or_packer(self.name, packer))
        depth = _depth(self.name, parameters, STRATEGIES.get(packer).default_depth)
        display = f"{self.name}:{STRATEGIES.get(packer).label(depth)}"
        return ExecutionPlan(display, PlanKind.PACKING, ExecutionMode.PACKED_VARLEN, packer=packer, max_depth=depth)


def _depth(name: str, parameters: Mapping[str, Any], default: int | None) -> int | None:
    if "max_depth" not in parameters:
        return default
    depth = parameters["max_depth"]
    if depth == "max":
        return None
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise InputError(_not_a_depth_or_packer(name, depth))
    return depth


def _not_a_depth_or_packer(name: str, value: Any) -> str:
    return f"strategy {name!r}: {str(value)!r} is neither a depth (1, 2, ..., max) nor a known packer"


register_plan(PackedVarlenPlan(
    "packed-varlen", "packs with per-sequence (varlen) attention instead of a block-diagonal mask", PackingSource))
