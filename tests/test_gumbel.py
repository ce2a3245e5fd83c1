"""The Gumbel straggler model against the packing paper's appendix E, and its own invariants."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize, stats
from typer.testing import CliRunner

from simbench.cli import app
from simbench.sim.stragglers.gumbel import (
    PAPER_DEVICES, PAPER_LOCATION, PAPER_SCALE, expected_min_speedup, extrapolate_cluster_speedups, fit_gumbel,
    gumbel_pdf, max_of_n_gumbel, median_min_of_n, min_of_n_cdf, min_of_n_pdf, monte_carlo_min_speedup,
    single_device_from_cluster,
)
from simbench.errors import InputError

PAPER_MEDIAN = stats.gumbel_r.median(PAPER_LOCATION, PAPER_SCALE)


def test_single_gpu_fit_of_appendix_e():
    single = single_device_from_cluster(PAPER_LOCATION, PAPER_SCALE, PAPER_DEVICES)
    assert single.location == pytest.approx(1.941, abs=0.002)
    assert single.scale == pytest.approx(0.318, abs=0.002)
    # It meets both defining equations: the 8-device minimum has the fit's median and mode.
    assert min_of_n_cdf(PAPER_MEDIAN, *single.parameters, 8) == pytest.approx(0.5, abs=1e-9)
    assert min_of_n_cdf(PAPER_LOCATION, *single.parameters, 8) == pytest.approx(np.exp(-1), abs=1e-9)


def test_closed_form_matches_a_nelder_mead_search_like_the_papers():
    def mismatch(parameters):
        location, scale = parameters
        return ((min_of_n_cdf(PAPER_MEDIAN, location, scale, 8) - 0.5) ** 2
                + (min_of_n_cdf(PAPER_LOCATION, location, scale, 8) - np.exp(-1)) ** 2)

    searched = optimize.minimize(mismatch, [1.9, 0.1], method="Nelder-Mead",
                                 options={"xatol": 1e-8, "fatol": 1e-16}).x
    single = single_device_from_cluster(PAPER_LOCATION, PAPER_SCALE, 8)
    assert searched == pytest.approx(single.parameters, abs=1e-4)


def test_the_texts_scale_is_inconsistent_with_the_equations():
    """The paper's text states location ~1.94, scale ~0.108: with that scale, the minimum of 8 draws
    essentially never falls below the 8-GPU fit's median (P = 4e-6 instead of 1/2) or mode."""
    at_median = min_of_n_cdf(PAPER_MEDIAN, 1.94, 0.108, 8)
    at_mode = min_of_n_cdf(PAPER_LOCATION, 1.94, 0.108, 8)
    assert abs(at_median - 0.5) > 0.4
    assert abs(at_mode - np.exp(-1)) > 0.3


@pytest.mark.parametrize("devices, claimed_mean", [(1, 2.12), (2, 1.90), (32, 1.51), (2048, 1.28)])
def test_cluster_claims_of_appendix_e(devices, claimed_mean):
    """1 device: 2.12 (above packing's 2.001); 2: 1.90 (below packing's 1.913); 32: ~50 % gain; 2048: ~30 %."""
    single = single_device_from_cluster(PAPER_LOCATION, PAPER_SCALE, PAPER_DEVICES)
    mean = expected_min_speedup(*single.parameters, devices)
    assert mean == pytest.approx(claimed_mean, abs=0.02)
    draws = 200_000 // devices + 400
    simulated = monte_carlo_min_speedup(*single.parameters, devices, draws, np.random.default_rng(devices))
    spread = np.sqrt(integrate.quad(lambda s: (s - mean) ** 2 * min_of_n_pdf(s, *single.parameters, devices),
                                    single.location - 8 * single.scale, single.location + 40 * single.scale)[0])
    assert simulated == pytest.approx(mean, abs=4 * spread / np.sqrt(draws))


def test_packing_beats_unpadding_from_two_devices_on():
    table = extrapolate_cluster_speedups(devices=(1, 2, 32, 2048)).set_index("devices")
    packing_depth_3_nnlshp = 1.913  # realized speed-up, packing paper Table 1: the same on any cluster size
    assert table.loc[1, "mean_speedup"] > 2.001 > packing_depth_3_nnlshp
    assert (table.loc[[2, 32, 2048], "mean_speedup"] < packing_depth_3_nnlshp).all()
    assert list(table.columns) == ["mean_speedup", "median_speedup", "mean_gain_percent"]
    assert table["mean_speedup"].is_monotonic_decreasing


@settings(max_examples=40, deadline=None)
@given(st.floats(0.5, 5.0), st.floats(0.01, 0.6), st.integers(2, 512))
def test_single_device_solution_reproduces_any_cluster_fit(location, scale, devices):
    single = single_device_from_cluster(location, scale, devices)
    median = stats.gumbel_r.median(location, scale)
    assert min_of_n_cdf(median, *single.parameters, devices) == pytest.approx(0.5, abs=1e-7)
    assert median_min_of_n(*single.parameters, devices) == pytest.approx(median, rel=1e-7)
    assert min_of_n_cdf(location, *single.parameters, devices) == pytest.approx(np.exp(-1), abs=1e-7)


@settings(max_examples=40, deadline=None)
@given(st.floats(-5, 5), st.floats(0.01, 3), st.integers(1, 4096), st.floats(-3, 8))
def test_max_of_n_gumbel_is_max_stable(location, scale, devices, standard_score):
    time_seconds = location + scale * standard_score
    shifted = max_of_n_gumbel(location, scale, devices)
    assert stats.gumbel_r.cdf(time_seconds, location, scale) ** devices == pytest.approx(
        stats.gumbel_r.cdf(time_seconds, *shifted.parameters), rel=1e-9, abs=1e-300)


@settings(max_examples=40, deadline=None)
@given(st.floats(-5, 5), st.floats(0.01, 3), st.floats(-3, 20))
def test_gumbel_pdf_is_scipys_gumbel_r(location, scale, standard_score):
    value = location + scale * standard_score
    assert gumbel_pdf(value, location, scale) == pytest.approx(stats.gumbel_r.pdf(value, location, scale),
                                                               rel=1e-12, abs=1e-300)


def test_min_of_n_distribution_is_a_distribution():
    for devices in (1, 8, 2048):
        total, _ = integrate.quad(min_of_n_pdf, -5, 10, args=(1.9, 0.3, devices), limit=200)
        assert total == pytest.approx(1.0, abs=1e-8)
    grid = np.linspace(0, 4, 50)
    assert min_of_n_cdf(grid, 1.9, 0.3, 1) == pytest.approx(stats.gumbel_r.cdf(grid, 1.9, 0.3))
    assert np.all(np.diff(min_of_n_cdf(grid, 1.9, 0.3, 8)) >= 0)


@pytest.mark.parametrize("side", ["right", "left"])
def test_fit_recovers_known_parameters(side):
    rng = np.random.default_rng(11)
    draws = rng.gumbel(2.0, 0.25, size=20_000)
    samples = draws if side == "right" else 4.0 - draws  # mirrored: a left tail at location 2.0
    fit = fit_gumbel(samples, side=side)
    assert fit.location == pytest.approx(2.0, rel=0.01)
    assert fit.scale == pytest.approx(0.25, rel=0.03)
    other = fit_gumbel(samples, side="left" if side == "right" else "right")
    assert fit.log_likelihood > other.log_likelihood


@pytest.mark.parametrize("samples, side", [([1.0, 1.0, 1.0], "right"), ([2.0], "right"), ([1.0, 2.0], "up")])
def test_bad_fits_are_input_errors(samples, side):
    with pytest.raises(InputError):
        fit_gumbel(samples, side=side)


def _expected_min_by_adaptive_quadrature(location, scale, devices):
    """E[min] = low + integral from low of (1 - P_n(s)) ds, by scipy's adaptive quad (the reference)."""
    low, high = location - 8 * scale, location + 60 * scale
    survival = lambda s: np.exp(devices * stats.gumbel_r.logsf(s, location, scale))  # noqa: E731
    area, _ = integrate.quad(survival, low, high, points=[median_min_of_n(location, scale, devices)], limit=200,
                             epsabs=1e-12, epsrel=1e-10)
    return low + area


@pytest.mark.parametrize("location, scale", [(1.941, 0.318), (1.0, 0.01), (5.0, 2.0), (0.9, 0.05)])
def test_expected_minimum_agrees_with_adaptive_quadrature_from_1_to_2_to_the_20_devices(location, scale):
    devices = np.array([*(2 ** np.arange(21)), 3, 5, 7, 1000, 999_999])
    together = expected_min_speedup(location, scale, devices)
    reference = [_expected_min_by_adaptive_quadrature(location, scale, int(count)) for count in devices]
    assert together == pytest.approx(reference, rel=1e-12)
    assert [expected_min_speedup(location, scale, int(count)) for count in devices] == pytest.approx(together,
                                                                                                      rel=1e-15)


@settings(max_examples=40, deadline=None)
@given(st.floats(-5, 5), st.floats(0.01, 3))
def test_expected_minimum_of_one_and_two_devices_in_closed_form(location, scale):
    # One device: the Gumbel's mean. Two: min + max = X1 + X2, and the max of two is Gumbel(mu + beta ln 2).
    mean = location + np.euler_gamma * scale
    assert expected_min_speedup(location, scale, 1) == pytest.approx(mean, rel=1e-13, abs=1e-13)
    assert expected_min_speedup(location, scale, 2) == pytest.approx(mean - scale * np.log(2), rel=1e-13, abs=1e-13)


def test_expected_minimum_matches_a_40_digit_integral_up_to_10_to_the_18_devices():
    mpmath = pytest.importorskip("mpmath")
    for devices in (1, 7, 2**10, 2**20, 2**30, 10**12, 10**18):
        with mpmath.workdps(40):
            n = mpmath.mpf(devices)
            quantile = lambda p, n=n: -mpmath.log(-mpmath.log(-mpmath.expm1(mpmath.log1p(-p) / n)))  # noqa: E731
            exact = float(mpmath.quad(quantile, [0, 0.5, 1]))
        assert expected_min_speedup(0.0, 1.0, devices) == pytest.approx(exact, abs=1e-14)


def test_bad_device_counts_are_input_errors():
    with pytest.raises(InputError):
        expected_min_speedup(1.9, 0.3, 0)
    with pytest.raises(InputError):
        expected_min_speedup(1.9, 0.3, np.array([8, 0]))
    with pytest.raises(InputError):
        single_device_from_cluster(1.6, -0.1, 8)


def test_command_defaults_to_the_papers_fit():
    result = CliRunner().invoke(app, ["gumbel", "--devices", "1,32,2048", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["single_device"]["scale"] == pytest.approx(0.318, abs=0.002)
    means = [row["mean_speedup"] for row in report["clusters"]]
    assert means == pytest.approx([2.12, 1.51, 1.28], abs=0.02)
    table = CliRunner().invoke(app, ["gumbel", "--location", "1.6038", "--scale", "0.1288", "--devices", "2"])
    assert "1.9409" in table.output and "1.904" in table.output


@pytest.mark.parametrize("arguments, message", [
    (["--devices", "1,two"], "--devices must be comma-separated"),
    (["--location", "1.6"], "--location and --scale go together"),
    (["--location", "1.6", "--scale", "0"], "--scale must be positive"),
    (["--log", "missing.txt.gz"], "no such MLPerf log file"),
    (["--fit-devices", "0"], "--fit-devices must be a whole number >= 1"),
    (["--location", "nan", "--scale", "0.1"], "--location must be a finite number"),
    (["--location", "1.6", "--scale", "inf"], "--scale must be positive"),
    (["--devices", "1,,8"], "found ''"),
])
def test_command_errors_are_clear(arguments, message):
    result = CliRunner().invoke(app, ["gumbel", *arguments])
    assert isinstance(result.exception, InputError)
    assert message in str(result.exception)


@pytest.mark.parametrize("devices", [10**9, 10**17, 10**23])
def test_median_of_huge_clusters_stays_finite(devices):
    median = median_min_of_n(1.94, 0.318, devices)
    assert np.isfinite(median)
    assert min_of_n_cdf(median, 1.94, 0.318, devices) == pytest.approx(0.5, abs=1e-9)
    assert expected_min_speedup(1.94, 0.318, devices) < median_min_of_n(1.94, 0.318, devices // 10)


def test_gumbel_fits_per_step_samples_from_a_csv_column_and_extrapolates_their_minimum(tmp_path):
    # Per-step speed-ups of one device, drawn from the single-device Gumbel behind the paper's fit.
    draws = stats.gumbel_r.rvs(loc=1.9409, scale=0.3179, size=20_000, random_state=np.random.default_rng(3))
    samples = tmp_path / "steps.csv"
    samples.write_text("step,unpadding\n" + "".join(f"{step},{value}\n" for step, value in enumerate(draws)))
    result = CliRunner().invoke(app, ["gumbel", "--samples", str(samples), "--column", "unpadding",
                                      "--devices", "1,32", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["cluster_fit"]["devices"] == 1
    assert report["cluster_fit"]["location"] == pytest.approx(1.9409, abs=0.01)
    assert report["cluster_fit"]["scale"] == pytest.approx(0.3179, abs=0.01)
    means = {row["devices"]: row["mean_speedup"] for row in report["clusters"]}
    assert means[32] == pytest.approx(np.sort(draws.reshape(-1, 32), axis=1)[:, 0].mean(), abs=0.01)


@pytest.mark.parametrize("text, options, message", [
    ("1.2\n1.3\nabc\n", [], ":3: not a finite number"),
    ("a,b\n1,2\n", ["--column", "c"], "no column 'c'"),
    ("", [], "empty"),
    ("1.5\n1.6\n", [], "at least 3 samples"),
])
def test_gumbel_samples_errors_name_the_file_and_line(tmp_path, text, options, message):
    samples = tmp_path / "samples.txt"
    samples.write_text(text)
    result = CliRunner().invoke(app, ["gumbel", "--samples", str(samples), *options])
    assert result.exit_code != 0 and isinstance(result.exception, InputError)
    assert message in str(result.exception) and "samples.txt" in str(result.exception)


@settings(max_examples=60, deadline=None)
@given(st.floats(-5, 5), st.floats(0.01, 3), st.integers(2, 3000), st.sampled_from(["right", "left"]),
       st.integers(0, 2**32 - 1))
def test_the_fit_is_scipys_maximum_likelihood_fit(location, scale, size, side, seed):
    law = stats.gumbel_r if side == "right" else stats.gumbel_l
    samples = law.rvs(location, scale, size=size, random_state=np.random.default_rng(seed))
    fit = fit_gumbel(samples, side)
    expected_location, expected_scale = law.fit(samples)
    assert fit.location == pytest.approx(expected_location, rel=1e-6, abs=1e-6 * scale)
    assert fit.scale == pytest.approx(expected_scale, rel=1e-6)
    assert fit.log_likelihood == pytest.approx(law.logpdf(samples, expected_location, expected_scale).sum(),
                                               rel=1e-9, abs=1e-6)
