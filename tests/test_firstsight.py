"""First sight of a batch shape is priced once per distinct shape, by attention path, not per layer, less what the
step's GPU work hides: the h200 preset's terms refit from the shipped H200 measurement, each setting predicted from
the others, a 4D replica pays one
GPU's cost (each stage its own, side by side), and a grid fit counts only the lines whose shape was new."""

import numpy as np
import pytest

from simbench.calibrate.firstsight import SHIPPED_FIRST_SIGHT, fit_first_sight, load_first_sight
from simbench.calibrate.grid_first_sight import distinguishable_median, first_sight_fields, new_shape_timings
from simbench.calibrate.grid_timings import SHIPPED_GRID, GridTiming, load_timing_grid
from simbench.costmodels import TransformerCostModel
from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.hardware import HARDWARE_PRESETS, load_hardware, profile_to_yaml
from simbench.costmodels.layout import ParallelLayout
from simbench.errors import InputError
from simbench.sim.replica import ReplicaCostModel

H200 = HARDWARE_PRESETS["h200"]
# How far the one figure may lie from each setting's own median (1-8 layers, widths 4,096-8,192: 54-122 ms): the
# settings differ by this much among themselves, and a constant per shape cannot follow them closer.
SETTING_TOLERANCE = 0.5


@pytest.fixture(scope="module")
def runs():
    return load_first_sight(SHIPPED_FIRST_SIGHT)


def test_the_h200_preset_holds_the_refit_of_the_shipped_measurement(runs):
    fields = fit_first_sight(runs)
    for name, value in fields.items():
        assert getattr(H200, name) == pytest.approx(value, rel=1e-3), name
        assert H200.provenance[name].startswith("measured: first steps"), name


def _shown(cost: float, hidden: float, run) -> float:
    """The median first sight a run's shapes show under (cost, hidden): cost - min(hidden, each shape's step)."""
    return float(np.median(np.maximum(0.0, cost - np.minimum(hidden, np.asarray(run.step_seconds)))))


def test_each_setting_is_predicted_from_the_others_closer_than_by_one_constant(runs):
    """Leave one setting (layers, width, module loading) out, fit on the rest, predict its median first sight: the
    hidden-under-GPU-work fit misses by at most 32 ms (the 1-layer slice: 154 ms against 122), a constant per
    shape (the pooled median) by up to 53 ms (69 ms against 122); mean miss 16 ms against 20."""
    padded = [run for run in runs if run.kind == "padded"]
    assert len(padded) == 5 and sum(len(run.extra_seconds) for run in padded) == 140
    hidden_misses, constant_misses = [], []
    for index, held_out in enumerate(padded):
        rest = [run for other, run in enumerate(padded) if other != index]
        fields = fit_first_sight(rest)
        predicted = _shown(fields["first_sight_padded_seconds"], fields["first_sight_hidden_seconds"], held_out)
        assert abs(predicted / held_out.median_extra_seconds - 1) < SETTING_TOLERANCE, held_out
        hidden_misses.append(abs(predicted - held_out.median_extra_seconds))
        constant = float(np.median(np.concatenate([run.extra_seconds for run in rest])))
        constant_misses.append(abs(constant - held_out.median_extra_seconds))
    assert max(hidden_misses) < max(constant_misses) and np.mean(hidden_misses) < np.mean(constant_misses)


def test_a_new_shape_costs_as_much_at_any_depth_less_what_its_step_hides(runs):
    # The measurement's point: 8 layers pay no more than 1 (122 ms at 1 layer, 69 ms at 8), so the price may not
    # grow with the layers: the same cost for a 1-, an 8- and an 80-layer model, of which longer steps hide more.
    padded = [run for run in runs if run.kind == "padded"]
    by_layers = {run.layers: run.median_extra_seconds for run in padded if run.hidden == 4096}
    assert by_layers[8] <= by_layers[1]
    priced = {layers: TransformerCostModel({"layers": layers, "hidden": 4096, "heads": 32, "ffn": 14336}, H200)
              .first_sight_seconds(ExecutionMode.PADDED) for layers in (1, 8, 80)}
    assert priced[1] == priced[8] == priced[80] == H200.first_sight_padded_seconds
    for run in padded:  # as fitted on all of them, each setting within the settings' own spread
        assert abs(_shown(H200.first_sight_padded_seconds, H200.first_sight_hidden_seconds, run)
                   / run.median_extra_seconds - 1) < SETTING_TOLERANCE, run
    # A new varlen token count costs about a millisecond, hidden by nothing more: two orders of magnitude below a
    # new padded shape.
    varlen = [run for run in runs if run.kind == "varlen"]
    assert H200.first_sight_varlen_seconds == pytest.approx(varlen[0].median_extra_seconds, rel=1e-3)
    assert 0 < H200.first_sight_varlen_seconds < 0.002
    assert TransformerCostModel("bert-large", H200).first_sight_hidden_seconds(ExecutionMode.PACKED_VARLEN) == 0.0


def test_a_step_shows_the_cost_less_what_its_gpu_work_hides():
    """The simulator's side: a device step priced at T shows C - min(K, T) of a new shape, never below 0."""
    from simbench.sim.pricing import DeviceCosts
    from simbench.sim.shapes import FirstSight

    kernels = np.array([[0.0, 0.034, 0.1, 0.283, 5.0]])
    zeros = np.zeros_like(kernels)
    # Half the kernels' time computing, half on padding; the host's own overhead hides nothing.
    costs = DeviceCosts(kernels / 2, kernels / 2, zeros + 1.0, zeros, zeros, zeros)
    seen = FirstSight(0.168, 1.0, np.random.default_rng(0), hidden_seconds=0.1)
    assert np.allclose(seen.hits(costs), [[0.168, 0.134, 0.068, 0.068, 0.068]])
    assert np.allclose(FirstSight(0.05, 1.0, np.random.default_rng(0), hidden_seconds=0.1).hits(costs),
                       [[0.05, 0.016, 0.0, 0.0, 0.0]])


def test_each_attention_path_pays_its_own_figure():
    model = TransformerCostModel("bert-large", H200)
    for mode in (ExecutionMode.PADDED, ExecutionMode.SORTED):
        assert model.first_sight_seconds(mode) == H200.first_sight_padded_seconds
    for mode in (ExecutionMode.UNPADDED, ExecutionMode.PACKED_VARLEN):
        assert model.first_sight_seconds(mode) == H200.first_sight_varlen_seconds


@pytest.mark.parametrize("layout", [ParallelLayout(pp=8, microbatches=16), ParallelLayout(tp=8, pp=4, microbatches=8),
                                    ParallelLayout(tp=4, pp=2, cp=2, microbatches=4)])
def test_a_4d_replica_pays_one_gpus_first_sight_not_the_whole_models(layout):
    """Each stage pays its own (the constant, less what its GPU work hides), the stages side by side: at most 169 ms
    for Llama-3.1-70B on 8 stages, where pricing per layer charged the whole model's 80 layers to every stage."""
    gpu = TransformerCostModel("llama-3.1-70b", H200)
    replica = ReplicaCostModel(gpu, layout)
    for mode in (ExecutionMode.PADDED, ExecutionMode.PACKED_VARLEN):
        assert replica.first_sight_seconds(mode) == gpu.first_sight_seconds(mode)
        assert replica.first_sight_hidden_seconds(mode) == gpu.first_sight_hidden_seconds(mode)
    assert replica.first_sight_seconds(ExecutionMode.PADDED) == pytest.approx(0.1685, rel=1e-3)


def _timing(kind, rows, row_length, first_ms, median_ms, documents=None):
    return GridTiming("tiny", 2, kind, rows, row_length, documents, first_ms / 1e3, median_ms / 1e3)


def test_a_grid_fit_counts_only_the_lines_whose_shape_was_new():
    """A varlen line repeating an earlier line's token count ran a shape its process had seen: its first step is
    not a first sight, however slow or fast it was. Figures are per shape, not per layer."""
    timings = [_timing("padded", 4, 128, 60.0, 10.0), _timing("padded", 2, 256, 62.0, 11.0),
               _timing("padded", 8, 64, 58.0, 9.0),
               _timing("varlen", 1, 512, 20.0, 8.0, (256, 256)), _timing("varlen", 1, 1024, 21.0, 9.0, (512, 512)),
               _timing("varlen", 1, 768, 20.5, 8.5, (384, 384)),
               # seen shapes: the same token counts again, their first steps as fast as repeated ones
               *(_timing("varlen", 1, 512, 8.0, 8.0, (128,) * 4) for _ in range(5)),
               _timing("padded", 4, 128, 10.0, 10.0)]
    assert len(new_shape_timings(timings)) == 6
    fields = first_sight_fields(timings)
    assert fields["first_sight_padded_seconds"] == pytest.approx(0.050)  # median of 50, 51, 49 ms: not / 2 layers
    assert fields["first_sight_varlen_seconds"] == pytest.approx(0.012)  # 12 ms; with the seen lines: 0


def test_the_shipped_h200_grids_varlen_first_sight_leaves_its_seen_lines_out():
    timings = load_timing_grid(SHIPPED_GRID)
    new = new_shape_timings(timings)
    # 16 BERT varlen lines cover 4 token counts (6 mixes have counts of their own), 9 Llama ones 2 counts.
    assert sum(t.kind == "varlen" for t in timings) == 31
    assert sum(t.kind == "varlen" for t in new) == 12


def test_a_first_sight_within_its_own_noise_is_zero_not_fitted():
    rng = np.random.default_rng(0)
    noise = rng.normal(0.0005, 0.003, 30)  # a half-millisecond median among steps that vary by 3 ms
    assert distinguishable_median(noise) == 0.0
    assert distinguishable_median(noise + 0.01) == pytest.approx(float(np.median(noise + 0.01)))
    assert distinguishable_median([]) == 0.0
    assert distinguishable_median([-0.01, -0.02, -0.03]) == 0.0


def test_a_bad_first_sight_line_is_refused_by_line(tmp_path):
    path = tmp_path / "firstsight.jsonl"
    path.write_text('{"layers": 4, "hidden": 4096, "kind": "padded", "shapes": [{"extra_ms": 1.0, "repeat_ms": 9}]}\n'
                    '{"layers": 4, "hidden": 4096, "kind": "dense", "shapes": [{"extra_ms": 1.0, "repeat_ms": 9}]}\n')
    with pytest.raises(InputError, match=r"firstsight\.jsonl:2: kind must be one of padded, varlen"):
        load_first_sight(path)
    path.write_text('{"layers": 4, "hidden": 4096, "kind": "padded", "shapes": [{"first_ms": 1.0}]}\n')
    with pytest.raises(InputError, match=r"firstsight\.jsonl:1: each shape needs extra_ms"):
        load_first_sight(path)
    path.write_text('{"layers": 4, "hidden": 4096, "kind": "padded", "shapes": [{"extra_ms": 1.0, "repeat_ms": 0}]}\n')
    with pytest.raises(InputError, match=r"firstsight\.jsonl:1: each shape needs repeat_ms"):
        load_first_sight(path)


def test_a_profile_with_the_old_per_layer_field_is_pointed_to_the_per_shape_one(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text(profile_to_yaml(H200).replace("first_sight_padded_seconds:", "first_sight_padded_seconds_per_layer:"))
    with pytest.raises(InputError, match=r"`first_sight_padded_seconds_per_layer`: unknown field; did you mean "
                                         r"'first_sight_padded_seconds'"):
        load_hardware(path)


def test_a_grid_fitted_profile_takes_its_first_sight_as_shown():
    """A grid's first sight is what its steps showed: fitted onto the h200 preset, the preset's hiding (fitted on
    the first-sight measurement) is not kept to hide part of it again."""
    from simbench.calibrate.gridfit import fitted_profile, shipped_grid_fit

    profile = fitted_profile(shipped_grid_fit(), "h200", "the shipped grid")
    assert H200.first_sight_hidden_seconds > 0
    assert profile.first_sight_hidden_seconds == 0.0
    assert profile.provenance["first_sight_hidden_seconds"].startswith("chosen: a grid's first sight")
