"""How each strategy is drawn, in every plot and in report.html's charts alike: one hue per family of
strategies and, inside a family, a shade and a marker of its own (dashes past the twelfth member).

    >>> from simbench.report.styles import strategy_styles
    >>> styles = strategy_styles(["none", "spfhp:3", "lpfhp:max", "unpad"])
    >>> [(label, style.family, style.colour, style.marker) for label, style in styles.items()]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('none', 'padding', '#525252', 'o'), ('spfhp:3', 'packing', '#08306b', 'o'),
     ('lpfhp:max', 'packing', '#5fa3d1', 's'), ('unpad', 'un-padding', '#ba2622', 'o')]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

# Families in the order legends list them; a plug-in plan of a kind of its own follows, as "other".
FAMILY_ORDER = ("padding", "length grouping", "packing", "packed-varlen", "un-padding", "VTS", "other")
# Each family's shades run from its first colour (its first member) to its last; ends picked from ColorBrewer's
# sequential ramps, none paler than a line on white can be read in, and no two families near one hue.
FAMILY_RAMPS = {
    "padding": ("#3a3a3a", "#9a9a9a"),
    "length grouping": ("#54278f", "#b294e0"),
    "packing": ("#08306b", "#5fa3d1"),
    "packed-varlen": ("#00531f", "#5cbf6a"),
    "un-padding": ("#a50f15", "#fb6a4a"),
    "VTS": ("#6e5200", "#cfae2e"),
    "other": ("#01665e", "#5ab4ac"),
}
# Marker shapes, in matplotlib's letters; report.js draws the same ones. A family's members take them in turn.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*")
LENGTH_GROUPING_MODES = ("sorted",)


@dataclass(frozen=True)
class Style:
    family: str
    colour: str  # "#rrggbb"
    marker: str  # one of MARKERS
    dashed: bool  # past the twelfth member of a family, when every marker is taken


def plan_family(label: str, row: dict | None = None) -> str:
    """The family of a simulated strategy, read from its plan so that a plug-in packer lands among the
    packers; a label the plan parser does not know (a scenario's own label) is placed by its table `row`
    (packer, mode, reference), else it is "other"."""
    from simbench.errors import InputError
    from simbench.sim.plans import PlanKind, parse_plan

    try:
        plan = parse_plan(label)
    except InputError:
        return _family_from_row(row) if row else "other"
    if plan.source.family is not None:
        return plan.source.family
    mode = str(getattr(plan.mode, "value", plan.mode))
    if plan.kind == PlanKind.PACKING or mode in LENGTH_GROUPING_MODES:
        return _family_from_row({"packer": plan.packer, "mode": mode, "reference": "none"})
    return {PlanKind.UNPAD: "un-padding", PlanKind.VTS: "VTS"}.get(plan.kind, "other")


def _family_from_row(row: dict) -> str:
    packer, mode, reference = row.get("packer"), str(row.get("mode")), row.get("reference", "none")
    if packer == "none":
        return "padding"
    if mode in LENGTH_GROUPING_MODES:
        return "length grouping"
    if mode == "packed_varlen":
        return "packed-varlen"
    if mode in ("padded", "packed_dense_mask", "packed_block_mask") and isinstance(packer, str):
        return "packing"
    if mode == "unpadded":
        return "un-padding" if reference in ("none", None) else "VTS"
    return "other"


def strategy_styles(labels: Iterable[str], table: pd.DataFrame | None = None) -> dict[str, Style]:
    """A style per label, in family order, then in the order given inside a family. `table` (a scaling
    table: strategy, packer, mode, reference) places labels the plan parser does not know."""
    rows = {}
    if table is not None and "strategy" in table:
        rows = table.drop_duplicates("strategy").set_index("strategy").to_dict("index")
    labels = list(dict.fromkeys(labels))
    families = {label: plan_family(label, rows.get(label)) for label in labels}
    styles = {}
    for family in FAMILY_ORDER:
        members = [label for label in labels if families[label] == family]
        for index, label in enumerate(members):
            styles[label] = Style(family, family_shade(family, index, len(members)), MARKERS[index % len(MARKERS)],
                                  index >= len(MARKERS))
    return styles


def family_shade(family: str, index: int, members: int) -> str:
    """The `index`-th of `members` shades of a family, spread evenly over its ramp (a lone member takes the
    ramp's first quarter: dark enough to stand out)."""
    first, last = FAMILY_RAMPS.get(family, FAMILY_RAMPS["other"])
    share = index / (members - 1) if members > 1 else 0.25
    channels = [round(int(first[at:at + 2], 16) + share * (int(last[at:at + 2], 16) - int(first[at:at + 2], 16)))
                for at in (1, 3, 5)]
    return "#" + "".join(f"{channel:02x}" for channel in channels)

