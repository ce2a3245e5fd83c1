"""How precise a figure is: the digits its spread supports, and when two speed-ups are too close to rank.

    >>> format_with_spread(9.544, 0.23, "x")
    '9.5x ± 0.2'
    >>> format_with_spread(1.9148, 0.0004)
    '1.915'
    >>> format_with_spread(7621.97, 0.01)  # no figure beyond MAX_SIGNIFICANT digits, however small its spread
    '7,622'

A figure's spread is the larger of its run's sampling error over the steps (`throughput_noise`,
`speedup_noise`: relative standard errors, simbench.sim.results) and, where the scenario ran several seeds,
the standard error of the mean across them (`*_seed_sem`, simbench.sim.results.across_seeds).
"""

from __future__ import annotations

import math

import pandas as pd

# The most decimals any figure shows: a spread smaller than half the last one is not written out.
MAX_DECIMALS = 3
# The most significant digits any figure shows: a run's sampling spread can be far smaller than what a cost model
# resolves (MIN_LEAD, 0.1 %), and a fifth digit would claim the difference.
MAX_SIGNIFICANT = 4
# Two strategies tie when the lead of the faster lies within TIE_SIGMAS combined spreads of their throughputs
# (an interval of about 95 % on the difference), or under MIN_LEAD, far below what any cost model's own error
# allows to rank.
TIE_SIGMAS = 2
MIN_LEAD = 0.001


def decimals_for(spread: float) -> int:
    """The decimals a figure with this spread shows: down to the spread's first significant digit, at most
    MAX_DECIMALS (negative: rounded to tens, hundreds, ...). No spread (zero or unknown): MAX_DECIMALS."""
    if not spread > 0 or not math.isfinite(spread):
        return MAX_DECIMALS
    decimals = -math.floor(math.log10(spread))
    if round(spread, decimals) >= 10.0 ** (1 - decimals):  # 0.096 rounds to 0.10: one significant digit is 0.1
        decimals -= 1
    return min(decimals, MAX_DECIMALS)


def decimals_shown(value: float, spread: float) -> int:
    """The decimals `value` shows with `spread`: those the spread supports (`decimals_for`), no more than keep it
    to MAX_SIGNIFICANT significant digits."""
    decimals = decimals_for(spread)
    if value != 0 and math.isfinite(value):
        decimals = min(decimals, MAX_SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    return decimals


def format_with_spread(value: float, spread: float, unit: str = "") -> str:
    """`value` (then `unit`) to the digits `spread` supports, and the spread to one significant digit where
    it shows at all ("9.5x ± 0.2"); a spread under half the last decimal shown is left out ("1.915")."""
    if not math.isfinite(value):
        return f"{value}{unit}"
    decimals = decimals_shown(value, spread)
    shown_spread = round(spread, decimals) if spread > 0 else 0.0
    text = _rounded(value, decimals) + unit
    return f"{text} ± {_rounded(shown_spread, decimals)}" if shown_spread > 0 else text


def _rounded(value: float, decimals: int) -> str:
    if decimals >= 0:
        return f"{round(value, decimals) + 0.0:,.{decimals}f}"  # + 0.0 turns a rounded -0.0 into 0.0
    return f"{round(value, decimals) + 0:,.0f}"


def _column(row, name: str) -> float:
    """A row's value (a Series or an itertuples row), 0 where the table predates the column or has none."""
    value = getattr(row, name, 0.0)
    return 0.0 if value is None or pd.isna(value) else float(value)


def throughput_spread(row) -> float:
    """The relative spread of a row's throughput (real tokens per second)."""
    tokens_per_s = _column(row, "tokens_per_s")
    across = _column(row, "tokens_per_s_seed_sem") / tokens_per_s if tokens_per_s > 0 else 0.0
    return max(_column(row, "throughput_noise"), across)


def speedup_spread(row) -> float:
    """The spread of a row's speed-up, in the speed-up's own units."""
    return max(_column(row, "speedup") * _column(row, "speedup_noise"), _column(row, "speedup_seed_sem"))


def speedup_text(row, unit: str = "x") -> str:
    """A row's speed-up with its spread, to the digits the spread supports ("9.5x ± 0.2")."""
    return format_with_spread(_column(row, "speedup"), speedup_spread(row), unit)


def lead_noise(first, second) -> float:
    """The relative spread of first's lead over second: their throughputs' spreads combined as independent
    (the padding reference both speed-ups are measured against cancels)."""
    return math.hypot(throughput_spread(first), throughput_spread(second))


def tied(first, second) -> bool:
    """Whether second's deficit lies within TIE_SIGMAS spreads of first's lead, or under MIN_LEAD: no winner
    to call between them."""
    lead = first.speedup / second.speedup - 1
    return bool(lead < MIN_LEAD or lead <= TIE_SIGMAS * lead_noise(first, second))


def ranked(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows fastest first; equal speed-ups by name, so that the order never depends on the table's."""
    return rows.sort_values(["speedup", "strategy"], ascending=[False, True], kind="stable")


def leaders(rows: pd.DataFrame) -> pd.DataFrame:
    """The fastest of `rows` (one cluster size) and those tied with it: the ranking down to the first one it
    leads clearly (a slower strategy with a wider spread is not tied with it past a faster one that is not)."""
    order = ranked(rows)
    first, count = order.iloc[0], 1
    while count < len(order) and tied(first, order.iloc[count]):
        count += 1
    return order.iloc[:count]


def ranked_at(scaling: pd.DataFrame, devices: int) -> pd.DataFrame:
    """`ranked` on the rows of one cluster size."""
    return ranked(scaling[scaling["devices"] == devices])


def leaders_at(scaling: pd.DataFrame, devices: int) -> pd.DataFrame:
    """`leaders` on the rows of one cluster size."""
    return leaders(scaling[scaling["devices"] == devices])


def names_text(names: list[str], bold: bool = False) -> str:
    """'a', 'a and b', 'a, b and c'."""
    names = [f"**{name}**" if bold else name for name in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


def tie_text(names: list[str], figures: list[str], at: str, over: str) -> str:
    """Tied strategies with their figures: '**a** and **b** tie at 9.5x {at}' where the figures read alike,
    else '**a** (9.5x) and **b** (9.3x) tie {over}': one figure for all would hide how far apart they are."""
    if len(set(figures)) == 1:
        return f"{names_text(names, bold=True)} tie at {figures[0]} {at}"
    return f"{names_text([f'**{name}** ({figure})' for name, figure in zip(names, figures)])} tie {over}"


def milliseconds_text(value: float) -> str:
    """A time in milliseconds to MAX_SIGNIFICANT significant digits, at most one decimal: its causes are means
    of sampled steps and priced by a cost model good to a few percent ('20,660', '163.8', '0.3', '0.0')."""
    decimals = 1
    if value != 0 and math.isfinite(value):
        decimals = min(decimals, MAX_SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    return _rounded(value, decimals)


def signed_percent_text(percent: float) -> str:
    """A change in percent to one decimal with its sign ('+8.5', '-1.2'); one that rounds to zero reads '+0.0',
    never '-0.0'."""
    return f"{round(percent, 1) + 0.0:+.1f}"
