"""Plans whose batches are packs: every packer of the strategy registry, and `packed-varlen`.

A packer's plan runs its packs as fixed-shape rows, their attention as its `attention` option names it
(`row` by default: one attention over the whole row); `sort` runs its batches padded to their longest;
`packed-varlen` is a packer's packs with `attention=varlen` (per-sequence attention).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simbench.costmodels.base import ROW_MODE_OF_ATTENTION, Attention, ExecutionMode
from simbench.errors import InputError
from simbench.sim.batching import OutlierDelaySampler, PackSampler, SortedBatchSampler
from simbench.sim.engines.order_statistics import ItemSource
from simbench.sim.plans import BatchSource, ExecutionPlan, PlanKind, PlanType, register_plan
from simbench.sim.pricing import price_packs
from simbench.sim.windows import SortedWindows
from simbench.strategies import STRATEGIES, Strategy
from simbench.strategies.wlb import outlier_threshold

DEFAULT_VARLEN_PACKER = "lpfhp"
# Each plan's attention unless told otherwise, what the common stacks run: a packer's rows attend as one sequence
# (Megatron-LM's default, reset_attention_mask off; TRL's packing without padding_free), `packed-varlen` per
# document (Hugging Face's padding-free collator with flash_attention_2, Megatron-LM's THD format).
DEFAULT_PACKER_ATTENTION = Attention.ROW
DEFAULT_PACKED_VARLEN_ATTENTION = Attention.VARLEN


class PackingSource(BatchSource):
    """Rows of the plan's packing, drawn in proportion to their repeats (sorted batching: in order)."""

    kind = PlanKind.PACKING

    def __init__(self, plan, packing, settings, purpose=0, simpy_devices=0):
        super().__init__(plan, packing, settings, purpose, simpy_devices)
        self.rng = self.generator(purpose)
        self.sampler = _sampler(plan, packing)

    @staticmethod
    def device_batches(plan, histogram, packing, rng, steps, batch_size):
        sampler = _sampler(plan, packing())
        return sampler.batches_of(sampler.picks(rng, steps, 1, batch_size), batch_size)

    @staticmethod
    def packing_request(plan: ExecutionPlan) -> tuple[str, int | None]:
        return plan.packer, plan.max_depth

    @staticmethod
    def largest_microbatch_tokens(plan, histogram, batch_size):
        # Sorted batches pad to their own longest, the largest to the dataset's; packs fill up to max_length.
        return batch_size * (histogram.longest if plan.mode is ExecutionMode.SORTED else histogram.max_length)
    def expected_real_tokens_per_step(plan, histogram, packing, rows, microbatches):
        """`rows` packs (or sequences) of the packing's mean real tokens each."""
        return rows * packing.real_tokens / packing.packs_total

    @staticmethod
    def random_stream(plan: ExecutionPlan) -> str:
        return f"{plan.packer}:{plan.max_depth}:{plan.mode.value}" + (":outlier-delay" if plan.outlier_delay else "")

    @staticmethod
    def independent_devices(plan: ExecutionPlan) -> bool:
        # Sorted batching hands out consecutive batches; with outlier delay a step's devices share its kind.
        return plan.mode is not ExecutionMode.SORTED and not plan.outlier_delay

    @staticmethod
    def prices_distinct_batches(plan: ExecutionPlan) -> bool:
        return plan.mode is ExecutionMode.SORTED  # consecutive batches of the sorted packs repeat in runs

    def chunk(self, steps, devices):
        largest, settings = devices[-1], self.settings
        picks = self.sampler.picks(self.rng, steps, largest, settings.batch_size)
        return {largest: price_packs(settings.cost_model, self.sampler, picks, settings.batch_size, self.plan.mode,
                                     steps, largest)}

    def items(self):
        return ItemSource(self.sampler.item_weights, self.sampler.item_features(), self.settings.batch_size,
                          self._price_items)

    def distinct_batches(self, devices):
        windows = SortedWindows(self.sampler, self.settings.cost_model, self.settings.batch_size)
        first = windows.first_batches(self.rng, self.settings.steps)
        return {size: windows.aggregates(first, size) for size in devices}

    def _price_items(self, items):
        return price_packs(self.settings.cost_model, self.sampler, items, self.settings.batch_size, self.plan.mode, 1,
                           items.shape[0])


def _sampler(plan: ExecutionPlan, packing) -> PackSampler:
    """How a device draws the plan's packs: sorted batches in order, a step's packs of one kind with outlier delay,
    else in proportion to their repeats."""
    if plan.mode is ExecutionMode.SORTED:
        return SortedBatchSampler(packing)
    if plan.outlier_delay:
        return OutlierDelaySampler(packing, outlier_threshold(packing.max_length))
    return PackSampler(packing)


@dataclass(frozen=True)
class PackerPlan(PlanType):
    """A packer of the strategy registry as a plan: `NAME[:DEPTH]`."""

    strategy: Strategy

    @classmethod
    def of(cls, strategy: Strategy) -> PackerPlan:
        return cls(strategy.name, strategy.description, PackingSource, strategy)

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        self.reject_unknown(parameters, ("max_depth", "packer", "outlier_delay", "attention"))
        attention = _attention(self.name, parameters, DEFAULT_PACKER_ATTENTION)
        parameters = {key: value for key, value in parameters.items() if key != "attention"}
        if attention is not DEFAULT_PACKER_ATTENTION:
            if self.name == "sort":
                raise InputError(f"strategy 'sort': its batches pad each sequence to the batch's longest, one to a "
                                 f"row; attention={attention.value} is for packs")
            return PACKED_VARLEN.build({**parameters, "packer": self.name, "attention": attention.value})
        packer = parameters.get("packer", self.name)
        if packer != self.name:
            if STRATEGIES.find(packer) is None:
                raise InputError(_not_a_depth_or_packer(self.name, packer))
            raise InputError(f"strategy {self.name!r}: a packer takes only a depth, not another packer name")
        delay = _outlier_delay(self.name, self.name, parameters)
        parameters = {key: value for key, value in parameters.items() if key != "outlier_delay"}
        if not self.strategy.uses_depth:
            if parameters:  # dropping it silently would label the run as if the depth had mattered
                raise InputError(f"strategy {self.name!r}: {self.name} takes no depth")
            depth = 1 if self.name == "none" else None
        else:
            depth = _depth(self.name, parameters, self.strategy.default_depth)
        mode = ExecutionMode.SORTED if self.name == "sort" else ExecutionMode.PADDED
        return ExecutionPlan(self.strategy.label(depth) + _delay_suffix(self.name, delay), PlanKind.PACKING, mode,
                             packer=self.name, max_depth=depth, outlier_delay=delay)


@dataclass(frozen=True)
class PackedVarlenPlan(PlanType):
    """`packed-varlen[:PACKER][:DEPTH]`: a packer's packs run with per-sequence attention; labelled with
    both, e.g. `packed-varlen:lpfhp:max`."""

    def build(self, parameters: Mapping[str, Any]) -> ExecutionPlan:
        self.reject_unknown(parameters, ("max_depth", "packer", "outlier_delay", "attention"))
        packer = parameters.get("packer", DEFAULT_VARLEN_PACKER)
        if STRATEGIES.find(packer) is None:
            raise InputError(_not_a_depth_or_packer(self.name, packer))
        attention = _attention(self.name, parameters, DEFAULT_PACKED_VARLEN_ATTENTION)
        if attention is DEFAULT_PACKER_ATTENTION:  # one plan, one label: the packer's own
            return PackerPlan.of(STRATEGIES.get(packer)).build(
                {key: value for key, value in parameters.items() if key not in ("packer", "attention")})
        delay = _outlier_delay(self.name, packer, parameters)
        depth = _depth(self.name, parameters, STRATEGIES.get(packer).default_depth)
        label = f"{STRATEGIES.get(packer).label(depth)}{_delay_suffix(packer, delay)}"
        display = (f"{self.name}:{label}" if attention is Attention.VARLEN
                   else f"{label}:attention={attention.value}")
        return ExecutionPlan(display, PlanKind.PACKING, ROW_MODE_OF_ATTENTION[attention], packer=packer,
                             max_depth=depth, outlier_delay=delay)


def _attention(name: str, parameters: Mapping[str, Any], default: Attention) -> Attention:
    if "attention" not in parameters:
        return default
    try:
        return Attention(parameters["attention"])
    except ValueError:
        raise InputError(f"strategy {name!r}: attention must be one of {', '.join(a.value for a in Attention)}, "
                         f"found {parameters['attention']!r}") from None


def _depth(name: str, parameters: Mapping[str, Any], default: int | None) -> int | None:
    if "max_depth" not in parameters:
        return default
    depth = parameters["max_depth"]
    if depth == "max":
        return None
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise InputError(_not_a_depth_or_packer(name, depth))
    return depth


# Packers whose steps delay outliers as WLB-LLM does unless told `outlier_delay: false`: WLB-LLM balances its
# microbatches with both mechanisms, and its breakdown credits the delay with most of the gain.
DELAYS_OUTLIERS = ("wlb",)


def _outlier_delay(name: str, packer: str, parameters: Mapping[str, Any]) -> bool:
    if "outlier_delay" not in parameters:
        return packer in DELAYS_OUTLIERS
    delay = {"true": True, "false": False}.get(parameters["outlier_delay"], parameters["outlier_delay"])
    if not isinstance(delay, bool):  # the text form, `wlb:outlier_delay=false`, gives a word
        raise InputError(f"strategy {name!r}: outlier_delay must be true or false, found {delay!r}")
    if delay and packer not in DELAYS_OUTLIERS:
        raise InputError(f"strategy {name!r}: outlier_delay is a wlb option ({packer} packs by tokens and delays "
                         f"nothing)")
    return delay


def _delay_suffix(packer: str, delay: bool) -> str:
    """The label says when a packer that delays outliers by default does not, as the text form writes it."""
    return ":outlier_delay=false" if packer in DELAYS_OUTLIERS and not delay else ""


def _not_a_depth_or_packer(name: str, value: Any) -> str:
    return f"strategy {name!r}: {str(value)!r} is neither a depth (1, 2, ..., max) nor a known packer"


PACKED_VARLEN = register_plan(PackedVarlenPlan(
    "packed-varlen", "packs with per-sequence (varlen) attention instead of one over the whole row", PackingSource))
