"""`simbench calibrate` on the CPU (quick): the profile it writes, its raw timings, and its errors."""

import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from simbench.cli import app
from simbench.costmodels.hardware import load_hardware
from simbench.errors import InputError

runner = CliRunner()


def test_the_cli_does_not_import_torch():
    code = "import sys, simbench.cli; print('torch' in sys.modules)"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == "False"


@pytest.mark.parametrize("command", [["calibrate", "--quick"], ["measure", "wikipedia_512"], ["calibrate-decoder"]])
def test_commands_without_torch_say_how_to_install_it(monkeypatch, tmp_path, command):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    result = runner.invoke(app, [*command, "-o", str(tmp_path / "out")])
    assert isinstance(result.exception, InputError)
    assert "torch is not installed: pip install 'simbench-seq[torch]'" in str(result.exception)
    assert not (tmp_path / "out").exists()


def test_calibrate_decoder_names_a_bad_option_with_or_without_torch(monkeypatch, tmp_path):
    arguments = ["calibrate-decoder", "-o", str(tmp_path / "p.yaml"), "--lengths", "1,x"]
    with_torch = runner.invoke(app, arguments)
    monkeypatch.setitem(sys.modules, "torch", None)
    without_torch = runner.invoke(app, arguments)
    for result in (with_torch, without_torch):
        assert isinstance(result.exception, InputError) and "--lengths" in str(result.exception)
    assert not (tmp_path / "p.yaml").exists()


def test_calibrate_output_that_is_a_folder_or_under_a_file_is_refused_before_timing(tmp_path):
    (tmp_path / "afile").write_text("keep me")
    for output, message in ((tmp_path, "is a folder"), (tmp_path / "afile" / "profile.yaml", "is a file")):
        result = runner.invoke(app, ["calibrate", "--quick", "--device", "cpu", "-o", str(output)])
        assert isinstance(result.exception, InputError), result.output
        assert message in str(result.exception)


def test_quick_calibration_writes_a_loadable_profile_with_its_raw_timings(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "profile.yaml"
    result = runner.invoke(app, ["calibrate", "--quick", "--device", "cpu", "--threads", "1", "--max-length", "32",
                                 "-o", str(path)])
    assert result.exit_code == 0, result.output
    profile = load_hardware(path)
    record = profile.calibration
    assert record["device"] == "cpu" and record["threads"] == 1
    assert record["torch_version"] == str(torch.__version__)
    kinds = {timing["kind"] for timing in record["timings"]}
    # packed-varlen packs among them: grouped attention prices them as it does un-padded batches
    assert kinds == {"padded", "packed", "unpadded", "packed_varlen"}
    for timing in record["timings"]:
        assert len(timing["samples_seconds"]) == record["repeats"]
        assert timing["median_seconds"] == pytest.approx(np.median(timing["samples_seconds"]))
    assert profile.linear_flops_per_s > 1e6 and profile.attention_flops_per_s > 1e6
    # Every distinct length is its own attention group in the per-length un-padded implementation.
    assert profile.unpad_group_boundaries[:3] == (1, 2, 3)
    # packed-varlen batches attend the same way here, and the profile says so (their price pays the groups too)
    assert profile.per_document_attention == "grouped"
    # one un-padded batch holds about as many groups as real batches do, so each group's fixed cost is measured
    groups = [len(set(length for row in timing["rows"] for length in row))
              for timing in record["timings"] if timing["kind"] == "unpadded"]
    assert max(groups) >= 32 // 2 - 1
    assert not list(tmp_path.glob(".*partial*"))


@pytest.mark.parametrize("arguments, message", [
    (["--device", "tpu"], "--device must be cpu or cuda"),
    (["--model", "layers=2,hidden=x"], "needs a whole number"),
    (["--model", "huge"], "unknown model"),
    (["--model", "tiny", "--max-length", "1024"], "exceeds the model's 512 positions"),
])
def test_bad_options_are_input_errors(tmp_path, arguments, message):
    pytest.importorskip("torch")
    result = runner.invoke(app, ["calibrate", "--quick", "-o", str(tmp_path / "p.yaml"), *arguments])
    assert isinstance(result.exception, InputError), result.output
    assert message in str(result.exception)


def test_a_calibration_that_would_run_for_hours_is_refused_before_any_batch_is_built(tmp_path):
    pytest.importorskip("torch")
    result = runner.invoke(app, ["calibrate", "--model", "bert-large", "--max-length", "512", "--device", "cpu",
                                 "-o", str(tmp_path / "p.yaml")])
    assert isinstance(result.exception, InputError), result.output
    assert "training FLOPs, more than the 1e+14 a timing run on cpu may take" in str(result.exception)
    assert not (tmp_path / "p.yaml").exists()


def test_cuda_is_refused_clearly_when_torch_sees_no_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    result = runner.invoke(app, ["calibrate", "--quick", "--device", "cuda", "-o", str(tmp_path / "p.yaml")])
    assert isinstance(result.exception, InputError)
    assert "no CUDA device" in str(result.exception)


def test_load_adjustment_removes_a_slowdown_shared_by_a_whole_round_and_ignores_a_spike():
    pytest.importorskip("torch")
    from simbench.calibrate.timing import StepTiming, load_adjusted

    base_seconds = np.array([0.01, 0.05, 0.2, 0.03])
    round_factors = np.array([1.0, 2.5, 1.0, 0.9, 1.6])  # another process ran during rounds 2 and 5
    samples = base_seconds[:, None] * round_factors[None, :]
    samples[1, 3] *= 4  # a one-step spike
    adjusted = load_adjusted([StepTiming(tuple(row)) for row in samples])
    np.testing.assert_allclose(adjusted.seconds, base_seconds * 1.0, rtol=1e-9)
    np.testing.assert_allclose(adjusted.round_factors, round_factors, rtol=1e-9)
    plain_medians = np.median(samples, axis=1)
    assert not np.allclose(plain_medians / plain_medians[0], base_seconds / base_seconds[0], rtol=0.05)


@pytest.mark.parametrize("command, arguments, message", [
    ("calibrate", ["--max-length", "4"], "--max-length must be a whole number >= 8, found 4"),
    ("calibrate", ["--threads", "0"], "--threads must be a whole number >= 1, found 0"),
    ("measure", ["--steps", "0"], "--steps must be a whole number >= 1, found 0"),
    ("measure", ["--seed", "-1"], "--seed must be a whole number >= 0, found -1"),
])
def test_settings_are_checked_by_the_library_and_named_by_option(tmp_path, command, arguments, message):
    pytest.importorskip("torch")
    source = [] if command == "calibrate" else ["squad_1_1_384"]
    result = runner.invoke(app, [command, *source, "--quick", "--device", "cpu", "-o", str(tmp_path / "out.yaml"),
                                 *arguments])
    assert isinstance(result.exception, InputError), result.output
    assert message in str(result.exception)
    assert not (tmp_path / "out.yaml").exists()


def test_a_deadline_stops_the_rounds_before_one_that_would_end_past_it_keeping_the_fewest(monkeypatch):
    """Rounds of 3 steps of 1 s (a clock the steps advance): a deadline 7.5 s away fits 2 whole rounds, so a third
    does not start; every batch keeps as many samples; the fewest rounds run whatever the deadline says."""
    pytest.importorskip("torch")
    from simbench.calibrate import timing

    clock = [100.0]

    class Trainer:
        device = "cpu"

        def timed_step_seconds(self, batch):
            clock[0] += 1.0
            return 1.0

    class Batch:
        def to(self, device):
            return self

    monkeypatch.setattr(timing.time, "monotonic", lambda: clock[0])
    batches = [Batch() for _ in range(3)]
    timed = timing.time_batches(Trainer(), batches, warmup=0, repeats=5, deadline=107.5, fewest_repeats=2)
    assert [len(timing_.samples_seconds) for timing_ in timed] == [2, 2, 2]
    clock[0] = 100.0
    late = timing.time_batches(Trainer(), batches, warmup=0, repeats=5, deadline=100.0, fewest_repeats=2)
    assert {len(timing_.samples_seconds) for timing_ in late} == {2}
    clock[0] = 100.0
    assert {len(t.samples_seconds) for t in timing.time_batches(Trainer(), batches, 0, 5)} == {5}  # no deadline
