"""`simbench calibrate --grid`: the primitive-shape grid timed on the device, written in the stored grid's
format beside the profile and fitted by gridfit; the CPU grid committed under profiles/ refits to its profile."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simbench.calibrate.grid_prices import FITTED_FIELDS, predict_grid
from simbench.calibrate.grid_timings import GRID_FIELDS, SHIPPED_GRID, load_timing_grid
from simbench.calibrate.gridfit import GRID_PROFILE_FIELDS, fit_grid
from simbench.cli import app
from simbench.costmodels.hardware import load_hardware
from simbench.costmodels.model import get_model
from simbench.errors import InputError

PROFILES = Path(__file__).parent.parent / "profiles"
COMMITTED_GRID = PROFILES / "grid-cpu-tiny.grid.jsonl"
COMMITTED_PROFILE = PROFILES / "grid-cpu-tiny.yaml"
runner = CliRunner()


def test_the_committed_cpu_grid_refits_to_its_profile():
    """profiles/grid-cpu-tiny.grid.jsonl: `simbench calibrate --grid --device cpu --model tiny --threads 1`. Refitted
    from the raw timings alone, it predicts every timing as the committed profile does, to 1e-6 (terms the grid
    cannot tell apart, such as a launch floor no CPU timing reaches, may land anywhere along their flat direction:
    predictions, not parameters, are what a fit must reproduce), and predicts its held-out shapes."""
    profile = load_hardware(COMMITTED_PROFILE)
    timings = load_timing_grid(COMMITTED_GRID)
    fit = fit_grid(timings, profile)
    np.testing.assert_allclose(predict_grid(fit.profile, timings), predict_grid(profile, timings), rtol=1e-6)
    for name in GRID_PROFILE_FIELDS:
        assert profile.provenance[name].startswith("fitted: simbench calibrate --grid"), name
    assert profile.calibration["grid_file"] == COMMITTED_GRID.name and profile.calibration["device"] == "cpu"
    assert fit.held_out_errors.size == 5  # two padded rows off the 128-token tile, three mixes of documents
    assert np.max(np.abs(fit.held_out_errors)) < 0.15
    assert 1e9 < profile.linear_flops_per_s < 1e12  # a CPU's rates, not a GPU's


def test_a_cpu_grid_has_shapes_to_fit_and_to_hold_out():
    pytest.importorskip("torch")
    from simbench.calibrate.grid import grid_shapes
    from simbench.calibrate.grid_timings import GridTiming

    for quick in (False, True):
        shapes = grid_shapes(get_model("tiny"), "cpu", quick=quick)
        timings = [GridTiming("tiny", 2, shape.kind, shape.rows, shape.row_length, shape.documents, 1.0, 1.0)
                   for shape in shapes]
        held_in = [timing for timing in timings if not timing.held_out]
        assert len(held_in) >= len(FITTED_FIELDS)
        assert {timing.kind for timing in timings if timing.held_out} == {"padded", "varlen"}
        assert all(sum(shape.documents) == shape.tokens for shape in shapes if shape.documents)
        assert max(shape.tokens for shape in shapes) <= 1024
        # A CPU cannot train FlexAttention: its grid masks rows densely only.
        assert "dense-mask" in {shape.kind for shape in shapes} and "block-mask" not in {s.kind for s in shapes}


@pytest.mark.parametrize("model", ["bert-large", "llama-3.1-8b"])
def test_a_gpu_grid_times_the_shapes_the_h200_grid_timed(model):
    """The padded rows and the batches of equal documents of the stored H200 grid; the odd rows and mixes of documents
    are drawn anew (held out either way); beside them, rows of packed documents under each mask, to fit its rate."""
    pytest.importorskip("torch")
    from simbench.calibrate.grid import grid_shapes

    def key(kind, rows, row_length, documents):
        return kind, rows, row_length, None if documents is None else tuple(documents)

    stored = {key(t.kind, t.rows, t.row_length, t.documents) for t in load_timing_grid(SHIPPED_GRID)
              if t.model == model and not t.held_out}
    timed = {key(s.kind, s.rows, s.row_length, s.documents) for s in grid_shapes(get_model(model), "cuda")}
    assert stored <= timed
    masked = {shape for shape in timed if shape[0] in ("dense-mask", "block-mask")}
    assert len(timed - masked) == len([t for t in load_timing_grid(SHIPPED_GRID) if t.model == model])
    assert sorted(shape[0] for shape in masked) == ["block-mask"] * 2 + ["dense-mask"] * 2
    # The H200 grid's slices fit a GPU's work limit, not a CPU's.
    from simbench.calibrate.grid import GridSettings

    layers = 24 if model == "bert-large" else 4
    GridSettings(model=get_model(model), layers=layers, device="cuda", threads=1).check_work(
        grid_shapes(get_model(model), "cuda"))
    with pytest.raises(InputError, match="a timing run on cpu may take"):
        GridSettings(model=get_model(model), layers=layers, device="cpu", threads=1).check_work(
            grid_shapes(get_model(model), "cpu"))


def test_calibrate_grid_times_the_grid_writes_it_beside_the_profile_and_fits_it(tmp_path):
    torch = pytest.importorskip("torch")
    output = tmp_path / "profile.yaml"
    result = runner.invoke(app, ["calibrate", "--grid", "--quick", "--device", "cpu", "--model", "tiny",
                                 "--threads", "1", "-o", str(output)])
    assert result.exit_code == 0, result.output
    grid_path = tmp_path / "profile.grid.jsonl"
    records = [json.loads(line) for line in grid_path.read_text().splitlines()]
    assert all(list(record)[:len(GRID_FIELDS)] == list(GRID_FIELDS) for record in records)
    assert all(record["model"] == "tiny" and record["layers"] == 2 and record["repeats"] == 3 for record in records)
    assert all(record["p25_ms"] <= record["median_ms"] <= record["p75_ms"] for record in records)
    timings = load_timing_grid(grid_path)  # the stored grid's format, line for line
    assert len(timings) == len(records) and {timing.kind for timing in timings} == {"padded", "varlen", "dense-mask"}
    profile = load_hardware(output)
    record = profile.calibration
    assert record["device"] == "cpu" and record["torch_version"] == str(torch.__version__)
    assert record["grid_file"] == "profile.grid.jsonl" and record["unpadded_attention"] == "grouped"
    assert len(record["grid"]) == len(records) and record["held_out_errors"]
    for name in ("linear_flops_per_s", "first_sight_padded_seconds", "first_sight_varlen_seconds",
                 "dense_mask_attention_fraction"):
        assert profile.provenance[name].startswith("fitted: simbench calibrate --grid")
    # No rows under a block mask on a CPU: that rate stays the base profile's, and says where it comes from.
    from simbench.costmodels.hardware_profile import field_provenance

    assert field_provenance(profile)["block_mask_attention_fraction"].startswith("assumed")
    assert profile.first_sight_padded_seconds >= 0 and profile.first_sight_varlen_seconds >= 0
    # The profile is what a refit of the written grid gives.
    refit = fit_grid(timings, profile)
    assert refit.profile.linear_flops_per_s == pytest.approx(profile.linear_flops_per_s, rel=1e-6)
    assert "held out" in result.stderr


def test_a_decoder_slice_is_timed_on_the_cpu_with_causal_attention_per_document():
    """No variable-length kernel on the CPU: documents attend causally one group of equal lengths at a time."""
    torch = pytest.importorskip("torch")
    from simbench.calibrate.decoder import DecoderLayer
    from simbench.calibrate.grid import GridSettings, GridShape, time_grid

    decoder = get_model({"layers": 1, "hidden": 32, "heads": 4, "ffn": 64, "family": "decoder", "kv_heads": 2,
                         "max_positions": 256, "name": "tiny-decoder"})
    torch.manual_seed(0)
    layer = DecoderLayer(decoder)
    x = torch.randn(1, 12, 32)
    offsets = torch.tensor([0, 5, 8, 12], dtype=torch.int32)
    together = layer(x, offsets, 5)
    apart = torch.cat([layer(x[:, start:stop]) for start, stop in ((0, 5), (5, 8), (8, 12))], dim=1)
    torch.testing.assert_close(together, apart, atol=1e-5, rtol=1e-4)

    settings = GridSettings(model=decoder, layers=1, device="cpu", threads=1, repeats=2, quick=True)
    records = time_grid(settings)
    assert len(records) == len(settings.shapes()) and all(record["median_ms"] > 0 for record in records)
    assert GridShape("varlen", 1, 256, (32,) * 8) in settings.shapes()


@pytest.mark.parametrize("arguments, message", [
    (["--model", "layers=2,hidden=128,heads=2,ffn=512"], "--model must be a preset for a timing grid"),
    (["--model", "bert-large"], "training FLOPs, more than the 1e+14 a timing run on cpu may take"),
    (["--timings", "grid.jsonl"], "not both"),
    (["--unpadded-attention", "torch_varlen"], "runs on CUDA only"),
])
def test_grids_the_cpu_cannot_or_should_not_time_are_refused_before_any_work(tmp_path, arguments, message):
    pytest.importorskip("torch")
    output = tmp_path / "p.yaml"
    result = runner.invoke(app, ["calibrate", "--grid", "--device", "cpu", "-o", str(output), *arguments])
    assert isinstance(result.exception, InputError), result.output
    assert message in str(result.exception)
    assert not output.exists() and not (tmp_path / "p.grid.jsonl").exists()


def test_layers_and_a_base_profile_go_with_a_grid(tmp_path):
    result = runner.invoke(app, ["calibrate", "--quick", "--layers", "2", "-o", str(tmp_path / "p.yaml")])
    assert isinstance(result.exception, InputError), result.output
    assert "--layers and --hardware go with --grid or --timings" in str(result.exception)


def test_a_fitted_profile_states_each_fitted_terms_uncertainty_and_list_shows_it(tmp_path):
    """`calibrate --timings` writes each fitted term's bootstrap spread in the profile, says how it was made, and
    `list --profile` shows it beside the term (and nothing beside a term nobody fitted)."""
    from simbench.calibrate.grid_uncertainty import BOOTSTRAP_RULE

    output = tmp_path / "p.yaml"
    result = runner.invoke(app, ["calibrate", "--timings", str(COMMITTED_GRID), "--hardware", str(COMMITTED_PROFILE),
                                 "-o", str(output)])
    assert result.exit_code == 0, result.output
    profile = load_hardware(output)
    assert profile.calibration["uncertainty"] == BOOTSTRAP_RULE
    assert ({"linear_flops_per_s", "attention_flops_per_s", "dense_mask_attention_fraction"} <= set(profile.uncertainty)
            <= set(GRID_PROFILE_FIELDS) | {"dense_mask_attention_fraction"})
    # A CPU grid of one width, encoder only, no block mask: those terms are held, not fitted, and state no spread.
    assert not {"dense_half_saturation_width", "block_mask_attention_fraction"} & set(profile.uncertainty)
    listed = runner.invoke(app, ["list", "--profile", str(output), "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {row["field"]: row for row in map(json.loads, listed.stdout.splitlines())}
    spread = profile.uncertainty["linear_flops_per_s"]
    assert rows["linear_flops_per_s"]["uncertainty"] == (
        f"± {spread:.3g} ({spread / profile.linear_flops_per_s:.1%})")
    assert rows["step_overhead_seconds"]["uncertainty"] == ""
