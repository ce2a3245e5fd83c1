"""Which baseline a scaling table's speed-ups are over, and how the report names it, in every table and plot.

    >>> import pandas as pd
    >>> scaling = pd.DataFrame({"strategy": ["none", "pad-to-longest", "vts"], "devices": 1,
    ...                         "reference": ["pad-to-longest", "pad-to-longest", "vts-padded"]})
    >>> baseline_of(scaling), over_words(baseline_of(scaling)), over_words("none")
    ('pad-to-longest', 'pad-to-longest', 'padding to max length')
"""

from __future__ import annotations

import pandas as pd

PADDING = "none"  # every sequence padded to max_length: the papers' and MLPerf's baseline, and the ideal's


def baseline_of(scaling: pd.DataFrame) -> str:
    """The run's baseline: what padding's own rows are over (padding is always simulated, never over VTS's
    pipeline); padding itself in a table that predates the `reference` column."""
    if "reference" not in scaling:
        return PADDING
    padding = scaling.loc[scaling["strategy"] == PADDING, "reference"]
    return str(padding.iloc[0]) if not padding.empty else str(scaling["reference"].iloc[0])


def over_words(reference: str) -> str:
    """A reference as the report's sentences and axes name it: padding to max length, or the baseline's label."""
    return "padding to max length" if reference == PADDING else str(reference)
