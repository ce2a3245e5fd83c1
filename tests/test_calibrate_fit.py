"""The profile fit: it recovers known cost-model parameters from step times priced by the cost model,
and layouts turn into the BatchSets the cost model prices (no torch needed)."""

import numpy as np
import pytest

from simbench.calibrate.fit import FITTED, TimedLayout, fit_profile, predict_seconds, profile_from_parameters
from simbench.calibrate.layout import BatchLayout, batch_set
from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.model import get_model
from simbench.errors import InputError

TRUE_VALUES = {
    "seconds_per_linear_gflop": 0.02,
    "seconds_per_attention_gflop": 0.05,
    "kernel_launch_seconds": 2e-4,
    "step_overhead_seconds": 0.01,
    "pack_overhead_fraction": 0.04,
    "pack_overhead_per_depth_fraction": 0.003,
    "unpad_group_half_saturation_tokens": 60.0,
}
BASE = {"name": "test", "source": "synthetic", "unpad_group_boundaries": tuple(range(1, 513))}


def _layouts(rng):
    layouts = []
    for rows in (4, 16):
        for row_length in (32, 64, 96, 128):
            layouts.append(BatchLayout.padded(rng.integers(1, row_length + 1, size=rows), row_length))
        for depth in (2, 4, 8):
            layouts.append(BatchLayout.packed([[128 // depth] * depth for _ in range(rows)], 128))
    for sequences in (4, 16, 32):
        layouts.append(BatchLayout.unpadded(rng.integers(1, 129, size=sequences)))
        layouts.append(BatchLayout.unpadded([64] * sequences))
        # Groups of one short, and of many long, sequences: the group curve's two ends.
        layouts.append(BatchLayout.unpadded(np.arange(4, 4 + sequences)))
        layouts.append(BatchLayout.unpadded([120] * sequences))
    return layouts


def test_fit_recovers_the_parameters_that_produced_the_timings():
    model = get_model("tiny")
    layouts = _layouts(np.random.default_rng(0))
    seconds = predict_seconds(model, profile_from_parameters(BASE, TRUE_VALUES), layouts)
    fit = fit_profile(model, [TimedLayout(layout, float(value), 0.0) for layout, value in zip(layouts, seconds)], BASE)
    for name, _ in FITTED:
        assert fit.parameters[name] == pytest.approx(TRUE_VALUES[name], rel=1e-3), name
    assert np.abs(fit.relative_errors).max() < 1e-6
    assert fit.profile.linear_flops_per_s == pytest.approx(1e9 / TRUE_VALUES["seconds_per_linear_gflop"], rel=1e-3)


def test_a_term_fitted_to_nothing_gets_the_highest_rate_a_profile_may_state():
    """At tiny shapes attention's time can vanish in the timings' noise and the fit drives its cost to zero (a
    measured tiny-decoder run once reached 1.5e22 FLOP/s there): the profile then holds the cap, and is valid."""
    from simbench.costmodels.hardware import MAX_FLOPS_PER_S

    for seconds_per_gflop in (0.0, 1e-15):
        profile = profile_from_parameters(BASE, {**TRUE_VALUES, "seconds_per_attention_gflop": seconds_per_gflop})
        assert profile.attention_flops_per_s == pytest.approx(MAX_FLOPS_PER_S)
    assert profile.linear_flops_per_s == pytest.approx(1e9 / TRUE_VALUES["seconds_per_linear_gflop"])


def test_fit_with_noisy_timings_stays_close():
    model = get_model("tiny")
    rng = np.random.default_rng(1)
    layouts = _layouts(rng)
    seconds = predict_seconds(model, profile_from_parameters(BASE, TRUE_VALUES), layouts)
    noisy = seconds * rng.normal(1.0, 0.02, size=seconds.size)
    fit = fit_profile(model, [TimedLayout(layout, float(value), 0.0) for layout, value in zip(layouts, noisy)], BASE)
    assert fit.parameters["seconds_per_linear_gflop"] == pytest.approx(TRUE_VALUES["seconds_per_linear_gflop"],
                                                                       rel=0.1)
    assert np.median(np.abs(fit.relative_errors)) < 0.03


def test_fit_needs_more_batches_than_parameters():
    layout = BatchLayout.padded([3, 4], 8)
    with pytest.raises(InputError, match="at least"):
        fit_profile(get_model("tiny"), [TimedLayout(layout, 0.1, 0.0)], BASE)


def test_batch_set_holds_exactly_the_layouts_rows_and_sequences():
    layouts = [BatchLayout.packed([[5, 3], [8]], 8), BatchLayout.unpadded([2, 7, 7]),
               BatchLayout.padded([4, 1], 6, ExecutionMode.SORTED)]
    batches = batch_set(layouts)
    assert batches.batches == 3
    assert batches.sequence_lengths.tolist() == [5, 3, 8, 2, 7, 7, 4, 1]
    assert batches.row_slots.tolist() == [8, 8, 2, 7, 7, 6, 6]
    assert batches.per_batch(batches.sequence_lengths, of="sequences").tolist() == [16, 16, 5]
    assert batches.per_batch(batches.row_slots, of="rows").tolist() == [16, 16, 12]
    assert [layout.kind for layout in layouts] == ["packed", "unpadded", "sorted"]


def test_a_row_longer_than_its_slots_is_an_input_error():
    with pytest.raises(InputError, match="does not fit"):
        BatchLayout.packed([[100, 30]], 128)
