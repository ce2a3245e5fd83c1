"""Execution plans: what `--strategy NAME` means to the simulator (a packer and how a device runs it).

    >>> from simbench.sim.plans import parse_plan
    >>> parse_plan("spfhp:3").packer, parse_plan("unpad-exchange").exchange.value
    ('spfhp', 'blocking')
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from simbench.costmodels.base import ExecutionMode
from simbench.errors import InputError
from simbench.strategies import available_strategies


class PlanKind(str, Enum):
    """Where a plan's per-device batches come from."""

    PACKING = "packing"  # rows of a packer's Packing, sampled in proportion to their repeats
    UNPAD = "unpad"  # sequences drawn from the histogram, no padding at all
    VTS = "vts"  # sequences drawn from the histogram, streamed through a stage pipeline


class Exchange(str, Enum):
    """Padding exchange before an un-padded step (NVIDIA MLPerf; Baidu overlaps it on the host)."""

    NONE = "none"
    BLOCKING = "blocking"  # all-gather lengths, sort, deal: on the step's critical path
    OVERLAPPED = "overlapped"  # done on the host while the previous step runs


# Depths that match the packing paper's headline rows; other packers run without a depth limit.
DEFAULT_DEPTHS = {"spfhp": 3, "lpfhp": 3, "nnlshp": 3, "optimal": 3}
DEFAULT_VARLEN_PACKER = "lpfhp"
DEFAULT_VTS_STAGES = 0  # from the model: its layers, grouped as the hardware profile says
DEFAULT_BUCKET_WINDOW = 8
UNPAD_PLANS = {
    "unpad": Exchange.NONE,
    "unpad-exchange": Exchange.BLOCKING,
    "unpad-exchange-overlap": Exchange.OVERLAPPED,
}
EXTRA_PLANS = (*UNPAD_PLANS, "packed-varlen", "vts", "vts-bucketed")


@dataclass(frozen=True)
class ExecutionPlan:
    """One simulated strategy: its batches' source, the execution mode and its parameters."""

    name: str
    kind: PlanKind
    mode: ExecutionMode
    packer: str | None = None
    max_depth: int | None = None
    exchange: Exchange = Exchange.NONE
    stages: int = 0  # VTS pipeline stages
    bucket_window: int = 0  # VTS bucketing: batches per window sorted by length (0: no bucketing)

    @property
    def independent_devices(self) -> bool:
        """Each device draws its batch on its own, so its step time is an i.i.d. draw: the slowest of n
        devices can be drawn directly (order statistics). Padding exchange deals one global batch, sorted
        batching hands out consecutive batches, bucketing ties a device's steps together: they cannot."""
        if self.kind is PlanKind.PACKING:
            return self.mode is not ExecutionMode.SORTED
        return self.exchange is Exchange.NONE and not self.bucket_window

    @property
    def is_reference(self) -> bool:
        return self.kind is PlanKind.PACKING and self.packer == "none" and self.mode is ExecutionMode.PADDED


REFERENCE_PLAN = ExecutionPlan("none", PlanKind.PACKING, ExecutionMode.PADDED, packer="none", max_depth=1)


def parse_plan(text: str) -> ExecutionPlan:
    """Parse `NAME[:ARG]...`; an ARG is a depth (`3`, `max`), a packer name or `key=value`.

    Examples: `spfhp:3`, `greedy`, `packed-varlen:spfhp:4`, `vts:stages=8`, `vts-bucketed:window=4`.
    """
    name, *arguments = [part.strip() for part in str(text).strip().split(":")]
    packers = available_strategies()
    if name in UNPAD_PLANS:
        _no_arguments(text, arguments)
        return ExecutionPlan(name, PlanKind.UNPAD, ExecutionMode.UNPADDED, exchange=UNPAD_PLANS[name])
    if name in ("vts", "vts-bucketed"):
        return _parse_vts(text, name, arguments)
    if name == "packed-varlen":
        # Per-sequence attention makes deep packs cheap, so the depth is unlimited unless given.
        packer, depth = _packer_and_depth(text, arguments, packers, DEFAULT_VARLEN_PACKER, default_depth=None)
        display = _display_name(name, packer, depth, DEFAULT_VARLEN_PACKER, show_depth=depth is not None)
        return ExecutionPlan(display, PlanKind.PACKING, ExecutionMode.PACKED_VARLEN, packer=packer, max_depth=depth)
    if name in packers:
        packer, depth = _packer_and_depth(text, [name, *arguments], packers, name)
        if packer != name:
            raise InputError(f"strategy {text!r}: a packer takes only a depth, not another packer name")
        if not packers[name].uses_depth:
            if arguments:  # dropping it silently would label the run as if the depth had mattered
                raise InputError(f"strategy {text!r}: {name} takes no depth")
            depth = 1 if name == "none" else None
        mode = ExecutionMode.SORTED if name == "sort" else ExecutionMode.PADDED
        depth_named = packers[name].uses_depth and (len(arguments) > 0 or name in DEFAULT_DEPTHS)
        display = _display_name(name, name, depth, name, show_depth=depth_named)
        return ExecutionPlan(display, PlanKind.PACKING, mode, packer=name, max_depth=depth)
    known = ", ".join([*packers, *EXTRA_PLANS])
    raise InputError(f"unknown strategy {name!r}; known: {known}, or `all`")


def parse_plans(texts: list[str]) -> list[ExecutionPlan]:
    """Parse several plan names; `all` expands to every packer and every simulator-only plan."""
    names: list[str] = []
    for text in texts:
        names.extend(all_plan_names() if text.strip() == "all" else [text])
    plans = [parse_plan(name) for name in names]
    return list({plan.name: plan for plan in plans}.values())


def all_plan_names() -> list[str]:
    return [*available_strategies(), *EXTRA_PLANS]


def with_reference(plans: list[ExecutionPlan]) -> list[ExecutionPlan]:
    """The plans with padding (`none`) first: every speed-up is measured against it."""
    return [REFERENCE_PLAN, *[plan for plan in plans if not plan.is_reference]]


def _packer_and_depth(text, arguments, packers, default_packer, default_depth="by packer") -> tuple[str, int | None]:
    packer, depth, depth_given = default_packer, None, False
    for argument in arguments:
        if argument in packers:
            packer = argument
        elif argument == "max":
            depth, depth_given = None, True
        elif argument.isdigit() and int(argument) >= 1:
            depth, depth_given = int(argument), True
        else:
            raise InputError(f"strategy {text!r}: {argument!r} is neither a depth (1, 2, ..., max) "
                             f"nor a known packer")
    if packer not in packers:
        raise InputError(f"strategy {text!r}: unknown packer {packer!r}; known: {', '.join(packers)}")
    if not depth_given:
        depth = DEFAULT_DEPTHS.get(packer) if default_depth == "by packer" else default_depth
    return packer, depth


def _display_name(name: str, packer: str, depth: int | None, default_packer: str, show_depth: bool = True) -> str:
    parts = [name]
    if packer != default_packer:
        parts.append(packer)
    if show_depth:
        parts.append("max" if depth is None else str(depth))
    return ":".join(parts)


def _parse_vts(text: str, name: str, arguments: list[str]) -> ExecutionPlan:
    values = {"stages": DEFAULT_VTS_STAGES, "window": DEFAULT_BUCKET_WINDOW if name == "vts-bucketed" else 0}
    for argument in arguments:
        key, _, value = argument.partition("=")
        if key not in values or key == "window" and name == "vts":
            allowed = "stages=S, window=K" if name == "vts-bucketed" else "stages=S"
            raise InputError(f"strategy {text!r}: unknown parameter {argument!r} (allowed: {allowed})")
        if not value.isdigit() or int(value) < 1:
            raise InputError(f"strategy {text!r}: {key} must be a whole number >= 1, found {value!r}")
        values[key] = int(value)
    display = name
    if values["stages"] != DEFAULT_VTS_STAGES:
        display += f":stages={values['stages']}"
    if name == "vts-bucketed" and values["window"] != DEFAULT_BUCKET_WINDOW:
        display += f":window={values['window']}"
    return ExecutionPlan(display, PlanKind.VTS, ExecutionMode.UNPADDED, stages=values["stages"],
                         bucket_window=values["window"])


def _no_arguments(text: str, arguments: list[str]) -> None:
    if arguments:
        raise InputError(f"strategy {text!r} takes no parameters")
