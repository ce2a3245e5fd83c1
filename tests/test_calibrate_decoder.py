"""Decoder-slice calibration: FLOP accounting of the slice, the two-rate fit and its held-out check."""

import dataclasses
import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from simbench.calibrate.decoder import (SliceTiming, calibrate_decoder, fit_decoder_rates, refit_record,  # noqa: E402
                                       slice_flops, time_decoder_slice)
from simbench.costmodels.hardware import HARDWARE_PRESETS  # noqa: E402
from simbench.costmodels.model import MODEL_PRESETS, ModelSpec  # noqa: E402
from simbench.errors import InputError  # noqa: E402

TINY = ModelSpec(name="tiny-decoder", family="decoder", layers=4, hidden=64, heads=4, kv_heads=2, ffn=96,
                 vocab=1000, max_positions=4096, gated_mlp=True, positions="rotary", tied_embeddings=False,
                 biases="none", norm="rmsnorm")


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gpt2"])
def test_slice_flops_are_the_layers_matrices_alone(name):
    model = MODEL_PRESETS[name]
    head = model.hidden // model.heads
    kv = (model.kv_heads or model.heads) * head
    per_token_layer = 2 * (2 * model.hidden**2 + 2 * model.hidden * kv + (3 if model.gated_mlp else 2)
                           * model.hidden * model.ffn)
    linear, attention = slice_flops(model, 2, [1000, 3000])
    assert linear == pytest.approx(3 * 2 * per_token_layer * 4000, rel=1e-12)  # no LM head, no embedding
    assert attention == pytest.approx(3 * 2 * (2 * model.hidden) * (1000**2 + 3000**2), rel=1e-12)  # causal half


def synthetic(model, lengths, linear_rate, attention_rate, kind="causal"):
    timings = []
    for length in lengths:
        linear, attention = slice_flops(model, 2, [length])
        timings.append(SliceTiming(kind, (length,), linear / linear_rate + attention / attention_rate, 0.0,
                                   linear, attention))
    return timings


def test_the_fit_recovers_known_rates_and_predicts_the_held_out_length_exactly():
    model = MODEL_PRESETS["llama-3.1-8b"]
    causal = synthetic(model, [1024, 8192, 32768, 131072], 580e12, 470e12)
    calibration = fit_decoder_rates(model, 2, causal, (), "synthetic", torch.bfloat16)
    assert calibration.linear_flops_per_s == pytest.approx(580e12, rel=1e-9)
    assert calibration.attention_flops_per_s == pytest.approx(470e12, rel=1e-9)
    assert calibration.held_out_length == 131072 and abs(calibration.held_out_error) < 1e-9
    assert all(abs(row["error"]) < 1e-9 and row["fitted"] for row in calibration.errors())


def test_the_held_out_error_is_what_the_other_lengths_predict():
    model = MODEL_PRESETS["llama-3.1-8b"]
    causal = synthetic(model, [1024, 8192, 32768, 131072], 580e12, 470e12)
    slower = dataclasses.replace(causal[-1], seconds=causal[-1].seconds * 1.25)  # the longest runs 25 % slower
    calibration = fit_decoder_rates(model, 2, [*causal[:-1], slower], (), "synthetic", torch.bfloat16)
    assert calibration.held_out_error == pytest.approx(1 / 1.25 - 1, rel=1e-6)


def test_a_tiny_decoder_slice_is_timed_on_cpu():
    # CPU steps of a tiny model are overhead, not FLOPs: only the timing path is checked here, the fit
    # on exact synthetic timings above.
    causal, packed = time_decoder_slice(TINY, 2, (32, 64, 128, 256), torch.device("cpu"), warmup=1, repeats=3,
                                        tokens_per_step=256)
    assert packed == ()  # no variable-length kernel on the CPU
    assert [timing.lengths for timing in causal] == [(32,) * 8, (64,) * 4, (128,) * 2, (256,)]
    assert all(timing.seconds > 0 and timing.spread_fraction >= 0 for timing in causal)
    assert [timing.linear_flops for timing in causal] == [slice_flops(TINY, 2, timing.lengths)[0] for timing in causal]


def test_encoders_and_too_few_lengths_are_refused():
    with pytest.raises(InputError, match="is an encoder"):
        calibrate_decoder(MODEL_PRESETS["bert-base"], device="cpu")
    with pytest.raises(InputError, match="at least 3 lengths"):
        calibrate_decoder(TINY, lengths=(32, 64, 100_000), device="cpu")


def test_a_slice_that_would_run_for_hours_is_refused_before_it_is_built():
    # 2 layers of llama-3.1-8b at 1k-128k tokens: about 2e16 training FLOPs, days on a CPU.
    with pytest.raises(InputError, match="about 2.0e\\+16 training FLOPs, more than the 1e\\+14") as error:
        calibrate_decoder(MODEL_PRESETS["llama-3.1-8b"], device="cpu")
    assert "--layers" in str(error.value)


PROFILES = Path(__file__).resolve().parents[1] / "profiles"
MEASURED = {"h100-sxm": "decoder-h100-sxm.json", "h200": "decoder-h200.json"}
# The h200 preset's rates are fitted on the H200 timing grid instead (tests/test_gridfit.py), which also
# predicts decoder-h200.json's timings; the h100-sxm preset keeps the rates measured on its own GPU.
RATES_FROM_STORED = ("h100-sxm",)


def stored(preset: str) -> list[dict]:
    return json.loads((PROFILES / MEASURED[preset]).read_text())["calibrations"]


@pytest.mark.parametrize("preset", sorted(MEASURED))
def test_stored_gpu_calibrations_refit_to_their_rates_and_predict_the_held_out_length(preset):
    for record in stored(preset):
        calibration = refit_record(record)
        assert calibration.linear_flops_per_s == pytest.approx(record["linear_flops_per_s"], rel=1e-9)
        assert calibration.attention_flops_per_s == pytest.approx(record["attention_flops_per_s"], rel=1e-9)
        # Predicted from the shorter lengths only: 64k (70b) or 128k (8b) tokens within 3.5 %.
        assert calibration.held_out_length >= 65536 and abs(calibration.held_out_error) < 0.035
        assert all(abs(row["error"]) < 0.02 for row in calibration.errors() if row["fitted"])


@pytest.mark.parametrize("preset", RATES_FROM_STORED)
def test_the_gpu_presets_use_the_measured_llama_8b_rates(preset):
    record = next(record for record in stored(preset) if record["model"] == "llama-3.1-8b")
    profile = HARDWARE_PRESETS[preset]
    assert profile.linear_flops_per_s == pytest.approx(record["linear_flops_per_s"], abs=0.05e12)
    assert profile.attention_flops_per_s == pytest.approx(record["attention_flops_per_s"], abs=0.05e12)


def test_the_command_writes_a_profile_with_the_fitted_rates(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from simbench.calibrate import decoder
    from simbench.cli import app
    from simbench.costmodels.hardware import load_hardware

    model = MODEL_PRESETS["llama-3.1-8b"]
    monkeypatch.setattr(decoder, "time_decoder_slice", lambda *args, **kwargs: (
        tuple(synthetic(model, [1024, 8192, 32768], 500e12, 400e12)), ()))
    output = tmp_path / "h100-measured.yaml"
    result = CliRunner().invoke(app, ["calibrate-decoder", "-o", str(output), "--lengths", "1024,8192,32768",
                                      "--device", "cpu"])
    assert result.exit_code == 0, result.output
    profile = load_hardware(output)
    assert profile.linear_flops_per_s == pytest.approx(500e12) and profile.attention_flops_per_s == pytest.approx(400e12)
    base = HARDWARE_PRESETS["h100-sxm"]
    assert profile.allreduce_bytes_per_s == base.allreduce_bytes_per_s  # the rest from --base
    assert profile.calibration["held_out_length"] == 32768
    assert [timing["lengths"] for timing in profile.calibration["timings"]] == [[1024], [8192], [32768]]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_asking_for_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(InputError, match="sees no CUDA GPU; use --device cpu"):
        calibrate_decoder(TINY, device="cuda")


def test_the_encoder_calibration_sends_decoders_to_calibrate_decoder(tmp_path):
    from typer.testing import CliRunner

    from simbench.cli import app

    result = CliRunner().invoke(app, ["calibrate", "--model", "llama-3.1-8b", "--device", "cpu", "-o",
                                      str(tmp_path / "p.yaml")])
    assert isinstance(result.exception, InputError) and "simbench calibrate-decoder --model llama-3.1-8b" in str(
        result.exception)
