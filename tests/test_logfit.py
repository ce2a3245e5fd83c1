"""`simbench fit-logs`: per-step CSV logs, fitting profile fields on logs and predicting held-out ones."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simbench.calibrate.logfit import LogSimulation, PublishedRunStatistics, fit_logs, measured_statistics
from simbench.cli import app
from simbench.costmodels import BatchSet, ExecutionMode, TransformerCostModel, load_hardware
from simbench.sim.stragglers.mlperf_logs import MlperfRun, parse_step_csv, read_training_log
from simbench.costmodels.noise import step_noise_factors
from simbench.errors import InputError
from simbench.histogram import load_histogram

MLPERF_DIR = Path(__file__).resolve().parent / "data" / "mlperf"  # NVIDIA's logs, README.md there
LOG_8, LOG_16, LOG_256 = (MLPERF_DIR / f"nvidia_v0.7_dgxa100{name}_ngc20.06_pytorch_bert_result_0.txt.gz"
                          for name in ("", "_n2", "_n32"))
TRUTH = {"unpadded_flops_fraction": 0.7, "unpadded_noise_cv": 0.08, "step_overhead_seconds": 4e-3}


def synthetic_log(path: Path, gpus: int, batch: int, unpadded: bool = True, steps: int = 300, seed: int = 1) -> Path:
    """A per-step CSV log simulated with the known TRUTH profile (its own draws, not the fit's)."""
    run = MlperfRun(str(path), None, {}, gpus, batch, unpadded, 0)
    model = TransformerCostModel("bert-large", load_hardware("a100", TRUTH))
    throughput = LogSimulation(run, load_histogram("wikipedia_512"), steps, np.random.default_rng(seed)
                               ).sequences_per_s(model)
    rows = [f"{step},{gpus},{batch},{str(unpadded).lower()},{float(value)!r}" for step, value in enumerate(throughput, 1)]
    path.write_text("step,gpus,per_gpu_batch,unpadded,seq/s\n" + "\n".join(rows) + "\n")
    return path


def test_noise_factors_have_mean_one_and_the_given_spread():
    normal = np.random.default_rng(0).standard_normal(400_000)
    for cv in (0.02, 0.1, 0.3):
        factors = step_noise_factors(normal, cv)
        assert factors.min() > 0
        assert factors.mean() == pytest.approx(1, abs=0.003)
        assert factors.std() / factors.mean() == pytest.approx(cv, rel=0.02)
    assert np.array_equal(step_noise_factors(normal[:5], 0.0), np.ones(5))


def test_unpadded_flops_fraction_slows_only_unpadded_compute():
    lengths = np.array([100, 300, 512, 40])
    rows = np.arange(4)
    batches = BatchSet(lengths, rows, np.full(4, 512), rows // 2, 2)
    plain = TransformerCostModel("bert-large", "a100-ideal")
    slower = TransformerCostModel("bert-large", load_hardware("a100-ideal", {"unpadded_flops_fraction": 0.5}))
    for mode in ExecutionMode:
        before, after = plain.step_costs(batches, mode), slower.step_costs(batches, mode)
        factor = 2 if mode is ExecutionMode.UNPADDED else 1
        np.testing.assert_allclose(after.compute_seconds, factor * before.compute_seconds)
        np.testing.assert_allclose(after.overhead_seconds, before.overhead_seconds)


def test_csv_logs_are_read_from_seconds_or_throughput(tmp_path):
    seconds = tmp_path / "seconds.csv"
    seconds.write_text("\ufeffgpus,per_gpu_batch,unpadded,step_seconds\n4,8,yes,0.5\n4,8,yes,0.25\n")
    run = read_training_log(seconds)
    assert (run.gpus, run.per_gpu_batch, run.unpadded) == (4, 8, True)
    assert run.steps["step"].tolist() == [1, 2] and run.steps["sequences_per_s"].tolist() == [64.0, 128.0]
    throughput = synthetic_log(tmp_path / "throughput.csv", gpus=2, batch=4, unpadded=False, steps=12)
    run = read_training_log(throughput)
    assert (run.gpus, run.per_gpu_batch, run.unpadded, len(run.steps)) == (2, 4, False, 12)


@pytest.mark.parametrize("text, message, line", [
    ("gpus,per_gpu_batch,seq/s\n1,2,3\n", "missing column.*unpadded", None),
    ("gpus,per_gpu_batch,unpadded,step\n1,2,true,1\n", "one of sequences_per_s / seq/s / step_seconds", None),
    ("gpus,per_gpu_batch,unpadded,seq/s\n", "no step rows", None),
    ("gpus,per_gpu_batch,unpadded,seq/s\n8,2,true,3\n4,2,true,3\n", "`gpus` must be the same", 3),
    ("gpus,per_gpu_batch,unpadded,seq/s\n8,2.5,true,3\n", "`per_gpu_batch` must be a whole number", 2),
    ("gpus,per_gpu_batch,unpadded,seq/s\n8,2,maybe,3\n", "`unpadded` must be true or false", 2),
    ("gpus,per_gpu_batch,unpadded,seq/s\n8,2,true,3\n8,2,true,-1\n", "`seq/s` must be a positive number", 3),
    ("step,gpus,per_gpu_batch,unpadded,seq/s\n2,8,2,true,3\n1,8,2,true,3\n", "`step` must be increasing", None),
])
def test_bad_csv_logs_are_input_errors_naming_the_line(tmp_path, text, message, line):
    path = tmp_path / "log.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as error:
        parse_step_csv(path)
    assert error.value.source == str(path) and error.value.line == line


def test_a_fit_recovers_the_parameters_a_log_was_made_with_and_predicts_another_setup(tmp_path):
    """Logs at two batch sizes made with known fields; the fit starts from the plain a100 preset."""
    fit_on = [read_training_log(synthetic_log(tmp_path / "a.csv", gpus=4, batch=16)),
              read_training_log(synthetic_log(tmp_path / "b.csv", gpus=4, batch=4, seed=2))]
    held_out = read_training_log(synthetic_log(tmp_path / "c.csv", gpus=12, batch=8, seed=3))
    result = fit_logs(fit_on, [held_out], free=tuple(TRUTH), steps=300, seed=5)
    assert result.fitted["unpadded_flops_fraction"] == pytest.approx(0.7, rel=0.05)
    assert result.fitted["unpadded_noise_cv"] == pytest.approx(0.08, rel=0.25)
    assert result.fitted["step_overhead_seconds"] == pytest.approx(4e-3, rel=0.3)
    table = result.table.set_index(["log", "quantity"])
    assert (table.loc["a.csv"]["role"] == "fitted").all()
    predicted = table.loc["c.csv"]
    assert (predicted["role"] == "predicted").all()
    assert abs(predicted.loc["median seq/s", "error_percent"]) < 3
    assert abs(predicted.loc["CV of seq/s", "error_percent"]) < 25
    assert result.profile.unpadded_flops_fraction == result.fitted["unpadded_flops_fraction"]
    assert "fit-logs on a.csv, b.csv" in result.profile.source


def test_a_compute_rate_scale_fitted_on_published_statistics_recovers_the_one_they_were_made_with(tmp_path):
    """Two runs known only by median and CV (as a paper gives them), one padded and one un-padded, made
    with rates 1.6 x the preset's: the scale, the un-padded fraction and the noise come back; the padded
    run's per-GPU scaling is fitted with the medians, not a prediction."""
    truth = load_hardware("a100", {"unpadded_flops_fraction": 0.7, "unpadded_noise_cv": 0.08,
                                   "linear_flops_per_s": 1.6 * load_hardware("a100").linear_flops_per_s,
                                   "attention_flops_per_s": 1.6 * load_hardware("a100").attention_flops_per_s})
    made = []
    for name, gpus, batch, unpadded in (("un-padded", 8, 16, True), ("padded", 64, 12, False)):
        log = fit_logs([read_training_log(synthetic_log(tmp_path / f"{name}.csv", gpus, batch, unpadded))],
                       free=(), hardware=truth, after_step=0, steps=300, seed=7).table.set_index("quantity")
        made.append(PublishedRunStatistics(name, gpus, batch, unpadded, float(log.loc["median seq/s", "simbench"]),
                                           float(log.loc["CV of seq/s", "simbench"])))
    result = fit_logs(made, free=("compute_rate_scale", "unpadded_flops_fraction", "unpadded_noise_cv"),
                      steps=300, seed=8)
    assert result.fitted["compute_rate_scale"] == pytest.approx(1.6, rel=0.02)
    assert result.fitted["unpadded_flops_fraction"] == pytest.approx(0.7, rel=0.05)
    assert result.fitted["unpadded_noise_cv"] == pytest.approx(0.08, rel=0.25)
    assert result.profile.linear_flops_per_s == pytest.approx(1.6 * load_hardware("a100").linear_flops_per_s, rel=0.02)
    table = result.table.set_index(["log", "quantity"])
    assert table.loc[("padded", "per-GPU scaling"), "role"] == "fitted"
    assert table.loc[("padded", "CV of seq/s"), "role"] == "predicted"  # padded steps' spread is not fitted
    assert np.isnan(table.loc[("padded", "CV of seq/s"), "error_percent"])  # identical steps: no relative error
    with pytest.raises(InputError, match="median throughput must be positive"):
        PublishedRunStatistics("paper", 8, 16, True, 0.0, 0.1)


def test_set_holds_a_profile_field_and_a_bad_setting_is_an_input_error(tmp_path):
    fit_log = synthetic_log(tmp_path / "fit.csv", gpus=2, batch=8, steps=40)
    held = CliRunner().invoke(app, ["fit-logs", str(fit_log), "--after-step", "0", "--steps", "40", "--json",
                                    "--set", "unpadded_flops_fraction=0.7", "--fit", "unpadded_noise_cv"])
    assert held.exit_code == 0, held.output
    median = next(json.loads(line) for line in held.stdout.splitlines() if "median" in line)
    assert abs(median["error_percent"]) < 3  # the held fraction is the log's own
    for setting, message in (("unpadded_flops_fraction=fast", "--set takes FIELD=VALUE with a number"),
                             ("unpadded_flops_fraction=-1", "unpadded_flops_fraction"), ("speed=2", "speed")):
        result = CliRunner().invoke(app, ["fit-logs", str(fit_log), "--after-step", "0", "--set", setting])
        # An InputError: the command line prints it as one line and exits with status 2.
        assert isinstance(result.exception, InputError) and message in str(result.exception)


def test_a_fit_that_cannot_reach_its_log_says_so(tmp_path):
    """Un-padded steps spread by 0.1 %: the batches' content alone spreads simbench's far more, so no
    noise can match the log's spread (and the least-squares compromise leaves the median off too)."""
    path = tmp_path / "steady.csv"
    path.write_text("gpus,per_gpu_batch,unpadded,seq/s\n" + "".join(f"8,32,true,{1000 * (1 + 0.001 * (-1) ** step)}\n"
                                                                     for step in range(200)))
    result = fit_logs([read_training_log(path)], after_step=0, steps=200)
    unmatched = result.unmatched.set_index("quantity")["error_percent"]
    assert unmatched["CV of seq/s"] > 100
    assert set(result.table["role"]) == {"fitted"} and len(result.table) == 2
    command = CliRunner().invoke(app, ["fit-logs", str(path), "--after-step", "0", "--steps", "200"])
    assert command.exit_code == 0 and "warning: the fit did not match" in command.stderr
    assert "8 x 32 un-padded CV of seq/s" in command.stderr


def test_fitting_nothing_only_compares(tmp_path):
    run = read_training_log(synthetic_log(tmp_path / "a.csv", gpus=2, batch=8, steps=60))
    result = fit_logs([run], free=(), steps=60, hardware="a100-ideal")
    assert result.fitted == {} and set(result.table["role"]) == {"predicted"}
    assert result.profile.unpadded_flops_fraction == 1.0
    # The plain preset prices un-padded kernels at the padded rate: faster than the log's 0.7.
    assert result.table.set_index("quantity").loc["median seq/s", "error_percent"] > 20


def test_parameters_a_log_cannot_tell_apart_are_refused(tmp_path):
    unpadded = read_training_log(synthetic_log(tmp_path / "a.csv", gpus=2, batch=8, steps=20))
    padded = read_training_log(synthetic_log(tmp_path / "b.csv", gpus=2, batch=8, unpadded=False, steps=20))
    with pytest.raises(InputError, match="two batch sizes"):
        fit_logs([unpadded], free=("step_overhead_seconds",))
    with pytest.raises(InputError, match="need an un-padded log"):
        fit_logs([padded], free=("unpadded_noise_cv",))
    with pytest.raises(InputError, match="cannot fit linear_flops_per_s"):
        fit_logs([unpadded], free=("linear_flops_per_s",))
    with pytest.raises(InputError, match="only 0 steps after step 50"):
        measured_statistics(unpadded)
    huge = PublishedRunStatistics("2,048 GPUs", 2048, 32, True, 3e5, 0.1)
    with pytest.raises(InputError, match="would draw 6.6e\\+07 sequences") as error:
        fit_logs([huge])  # refused before drawing anything
    assert error.value.parameter == "steps"


def test_command_prints_json_rows_and_writes_the_fitted_profile(tmp_path):
    fit_log = synthetic_log(tmp_path / "fit.csv", gpus=2, batch=8, steps=80)
    held_out = synthetic_log(tmp_path / "held.csv", gpus=4, batch=8, steps=80, seed=2)
    profile = tmp_path / "fitted.yaml"
    result = CliRunner().invoke(app, ["fit-logs", str(fit_log), "--predict", str(held_out), "--after-step", "0",
                                      "--steps", "80", "--json", "-o", str(profile)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(row["log"], row["quantity"], row["role"]) for row in rows] == [
        ("fit.csv", "median seq/s", "fitted"), ("fit.csv", "CV of seq/s", "fitted"),
        ("held.csv", "median seq/s", "predicted"), ("held.csv", "CV of seq/s", "predicted"),
        ("held.csv", "per-GPU scaling", "predicted")]
    loaded = load_hardware(profile)
    assert loaded.unpadded_flops_fraction == pytest.approx(0.7, rel=0.1)
    table = CliRunner().invoke(app, ["fit-logs", str(fit_log), "--after-step", "0", "--steps", "20", "--fit", ""])
    assert table.exit_code == 0 and "fitted: nothing" in table.stdout


def test_fitted_on_the_8_gpu_log_simbench_predicts_the_16_and_256_gpu_logs():
    """Fit un-padded efficiency and noise on the 8-GPU log (median 1,056.9 seq/s, CV 0.092): 0.833 and
    0.115 over 1,000 simulated steps, seed 0 (the command's defaults; this test simulates 400).
    Predicted: 16 GPUs 1,905 seq/s against 1,895 (+0.5 %), per-GPU scaling 0.901 against 0.897, CV
    0.081 against 0.071 (+14 %); 256 GPUs padded 23,803 against 24,227 (-1.8 %). The 256-GPU figure
    uses the a100 preset's padded rates, which were chosen on that very log: it is not an independent
    prediction (the un-padded fit does not touch padded steps)."""
    result = fit_logs([read_training_log(LOG_8)], [read_training_log(LOG_16), read_training_log(LOG_256)],
                      steps=400)
    table = result.table.set_index(["gpus", "quantity"])["error_percent"]
    assert abs(table[(8, "median seq/s")]) < 0.5 and abs(table[(8, "CV of seq/s")]) < 1  # fitted
    assert abs(table[(16, "median seq/s")]) < 10 and abs(table[(16, "per-GPU scaling")]) < 10
    assert abs(table[(16, "CV of seq/s")]) < 20
    assert abs(table[(256, "median seq/s")]) < 5
    assert 0.6 < result.fitted["unpadded_flops_fraction"] < 0.95


def test_the_simulator_with_the_fitted_profile_spreads_8_gpu_steps_as_the_log_does():
    """`simbench simulate` draws the fitted per-device noise beside batch content: its 8-GPU un-padded
    run (batch 32) has the log's median throughput and a CV of seq/s within 20 % of the log's 0.092."""
    from simbench.costmodels import TransformerCostModel
    from simbench.sim.simulate import simulate

    fit = fit_logs([read_training_log(LOG_8)], steps=400)
    measured = measured_statistics(read_training_log(LOG_8))
    result = simulate(load_histogram("wikipedia_512"), ["unpad"], [8], TransformerCostModel("bert-large", fit.profile),
                      batch_size=32, steps=600, seed=0)
    traces = result.traces
    unpad = traces[traces["strategy"] == "unpad"]
    sequences_per_s = (unpad["sequences"] / unpad["step_seconds"]).to_numpy()
    assert np.median(sequences_per_s) == pytest.approx(measured.median_sequences_per_s, rel=0.03)
    cv = sequences_per_s.std() / sequences_per_s.mean()
    assert cv == pytest.approx(measured.cv, rel=0.2)


def test_noise_is_drawn_for_unpadded_batches_only_and_leaves_a_noiseless_profile_alone():
    from simbench.costmodels.noise import StepNoise, with_step_noise

    plain = TransformerCostModel("bert-large", "a100-ideal")
    assert with_step_noise(plain, seed=0) is plain
    noisy = with_step_noise(TransformerCostModel("bert-large", load_hardware("a100-ideal", {"unpadded_noise_cv": 0.2})), 0)
    assert isinstance(noisy, StepNoise) and noisy.allreduce_seconds(8) == plain.allreduce_seconds(8)
    lengths = np.full(2000, 200)
    rows = np.arange(2000)
    batches = BatchSet(lengths, rows, np.full(2000, 512), rows, 2000)
    padded = noisy.step_costs(batches, ExecutionMode.PADDED).total_seconds
    np.testing.assert_allclose(padded, plain.step_costs(batches, ExecutionMode.PADDED).total_seconds)
    unpadded = noisy.step_costs(batches, ExecutionMode.UNPADDED).total_seconds
    base = plain.step_costs(batches, ExecutionMode.UNPADDED).total_seconds
    assert (unpadded / base).std() == pytest.approx(0.2, rel=0.1)
    assert (unpadded / base).mean() == pytest.approx(1.0, abs=0.02)
