"""The ideal speed-up over padding (every sequence alone at full rate): closed forms, and the dashed line
of the reports, which no strategy passes where the ratio of padded slots to real tokens was passed."""

import numpy as np
import pandas as pd
import pytest

from simbench.costmodels import CostModel, TransformerCostModel
from simbench.costmodels.base import as_cost_model
from simbench.costmodels.ideal import ideal_speedup
from simbench.costmodels.linear import LinearCostModel
from simbench.experiment import run_experiment
from simbench.histogram import LengthHistogram, load_histogram
from simbench.report.summary import IDEAL_LABEL, SLOT_RATIO_LABEL, speedup_reference
from simbench.checked import load_checked_scenario as load_scenario


@pytest.mark.parametrize("overhead_seconds", [0.0, 3e-3])
def test_linear_cost_model_closed_form(overhead_seconds):
    # Padding costs a per slot plus c per step; the ideal costs a per real token.
    histogram = LengthHistogram.from_counts([5, 0, 3, 0, 0, 2])
    model = LinearCostModel(seconds_per_token=2e-5, step_overhead_seconds=overhead_seconds)
    batch = 4
    padded_step = 2e-5 * batch * histogram.max_length + overhead_seconds
    expected = padded_step / (batch * histogram.real_tokens / histogram.sequences) / 2e-5
    assert ideal_speedup(model, histogram, batch) == pytest.approx(expected, rel=1e-12)
    if overhead_seconds == 0:
        assert ideal_speedup(model, histogram, batch) == pytest.approx(histogram.theoretical_speedup, rel=1e-12)


def test_quadratic_attention_puts_the_ideal_above_the_slot_ratio():
    histogram = load_histogram("wikipedia_512")
    model = TransformerCostModel("bert-large", "a100")
    assert ideal_speedup(model, histogram, 32) > histogram.theoretical_speedup


def test_a_cost_model_that_cannot_price_a_sequence_alone_gets_the_slot_ratio_under_its_own_name():
    class PlugIn:  # only the required CostModel methods, subclassing nothing
        def step_costs(self, batches, mode): ...

        def allreduce_seconds(self, devices): ...

    class Subclass(CostModel):  # only the required methods, the rest CostModel's defaults
        step_costs, allreduce_seconds = PlugIn.step_costs, PlugIn.allreduce_seconds

    histogram = LengthHistogram.from_counts([1, 1])
    assert ideal_speedup(as_cost_model(PlugIn()), histogram, 2) is None
    assert ideal_speedup(Subclass(), histogram, 2) is None
    scaling = pd.DataFrame({"strategy": ["none"], "speedup": [1.0], "ideal_speedup": [np.nan]})
    assert speedup_reference(histogram, scaling) == (histogram.theoretical_speedup, SLOT_RATIO_LABEL)


def test_at_8k_strategies_pass_the_slot_ratio_but_not_the_reports_line():
    bundled = load_scenario("scenarios/llama8b-sft-8k.yaml")
    # Over padding to max length, which the ideal is over (the scenario's own baseline is pad-to-longest).
    # At the scenario's own rows, on one GPU's settings (no recompute, no ZeRO 3: HBM without limit), so that the
    # attention saved is not hidden under recomputation and sharding.
    scenario = type(bundled).model_validate({**bundled.model_dump(), "steps": 30, "devices": [1, 1024],
                                             "baseline": "none", "compare_at": "as-configured", "parallel": None,
                                             "hardware": {"profile": "h100-sxm",
                                                          "overrides": {"hbm_capacity_bytes": 1.0e15}}})
    histogram = scenario.dataset.load()
    scaling = run_experiment(scenario, histogram).scaling
    over_padding = scaling[scaling["reference"] == "none"]["speedup"]
    # Attention's quadratic cost: packed-varlen and token-budget save more than the padding tokens' share.
    assert over_padding.max() > histogram.theoretical_speedup
    line, label = speedup_reference(histogram, scaling)
    assert label == IDEAL_LABEL and over_padding.max() <= line
