"""Values no device or log can have are refused where they enter; what passes gives finite, exact answers."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simbench.calibrate.logfit import fit_logs
from simbench.costmodels.hardware import load_hardware
from simbench.costmodels.hardware_profile import (_LOWEST_DIVISORS, _PHYSICAL_RANGES, UNLIMITED_FIELDS,
                                                  HardwareProfile, profile_to_yaml)
from simbench.sim.stragglers.mlperf_logs import parse_step_csv
from simbench.errors import InputError
from simbench.histogram_build import _percent, build_histogram
from simbench.resolved import Run

NOT_NUMBERS = ("name", "source", "calibration", "provenance", "uncertainty", "unpad_group_boundaries")
NUMERIC_FIELDS = [name for name in HardwareProfile.model_fields if name not in NOT_NUMBERS]


def extremes():
    """Every numeric field at the highest value it accepts, and divisors at the lowest."""
    for name in NUMERIC_FIELDS:
        whole = "int" in str(HardwareProfile.model_fields[name].annotation)
        for kinds in (_PHYSICAL_RANGES, _LOWEST_DIVISORS):
            value = next((kind[1] for kind in kinds if kind[0] in name), None)
            if value is not None:
                yield name, int(value) if whole else value


@pytest.mark.parametrize("name, value", list(extremes()))
def test_every_field_at_its_extreme_prices_finite_steps_or_is_refused_cleanly(name, value):
    try:
        run = Run.from_options("squad_1_1_384", ["unpad", "spfhp", "packed-varlen", "unpad-exchange", "vts"], [1, 64],
                               overrides={name: value}, steps=3, batch_size=4)
        summary = run.simulate().summary
    except InputError:
        return  # refused by name (a bound that depends on the pack depth, say)
    numbers = summary.select_dtypes("number").drop(columns=["max_depth"])  # padding and un-padding have none
    assert np.isfinite(numbers.to_numpy(dtype=float)).all(), numbers.columns[~np.isfinite(numbers).all()].tolist()


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1e308, -1.0, 10**400])
@pytest.mark.parametrize("name", NUMERIC_FIELDS)
def test_a_value_no_device_has_is_refused_naming_the_field(name, value):
    if name in UNLIMITED_FIELDS and value == math.inf:
        assert load_hardware("a100", {name: value}).model_dump()[name] == math.inf  # no limit
        return
    if value == -1.0 and name in ("devices_per_node", "varlen_kernels_per_layer", "unpadded_kernels_per_layer"):
        value = -2  # whole numbers
    with pytest.raises(InputError, match=f"`{name}`"):
        load_hardware("a100", {name: value})


def test_links_without_a_limit_stay_infinite_through_a_profile_file(tmp_path):
    profile = HardwareProfile(name="x", source="y", linear_flops_per_s=1e12, attention_flops_per_s=1e12)
    assert all(math.isinf(getattr(profile, name)) for name in UNLIMITED_FIELDS)  # the defaults: no limit
    path = tmp_path / "profile.yaml"
    path.write_text(profile_to_yaml(profile))
    assert load_hardware(path) == profile


def test_shares_of_lengths_near_two_to_the_62_are_exact():
    built = build_histogram(np.full(4, 2**62 - 1, dtype=np.int64), 512, truncate=False)
    assert built.tokens_read == 4 * (2**62 - 1) and built.tokens_beyond == 4 * (2**62 - 1 - 512)
    assert "100.00 % of the tokens lie past 512" in built.describe()


@given(st.integers(0, 2**90), st.integers(1, 2**90))
def test_a_percentage_is_the_exact_share_rounded_and_never_over_100(part, whole):
    part = min(part, whole)
    shown = _percent(part, whole)
    assert Fraction(shown) == Fraction(math.floor(Fraction(100 * 100 * part, whole) + Fraction(1, 2)), 100)
    assert Fraction(shown) <= 100


@pytest.mark.parametrize("throughput, message", [
    ("seq/s\n-5", "line 2|:2: `seq/s` must be a positive number"),
    ("step_seconds\n1e-320", ":2: `step_seconds` must be at least 1e-06"),
    ("seq/s\n1e307", ":2: a throughput of 1e\\+307 sequences/s is beyond any cluster"),
])
def test_a_step_log_with_an_impossible_throughput_is_refused_at_its_line(tmp_path, throughput, message):
    column, value = throughput.split("\n")
    path = tmp_path / "log.csv"
    path.write_text(f"gpus,per_gpu_batch,unpadded,{column}\n8,4,true,{value}\n")
    with pytest.raises(InputError, match=message):
        parse_step_csv(path)


def test_a_log_whose_steps_never_vary_is_fitted_without_dividing_by_zero(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("gpus,per_gpu_batch,unpadded,seq/s\n" + "8,4,true,300\n" * 60)
    fit = fit_logs([parse_step_csv(path)], steps=20)
    assert np.isfinite(fit.table["simbench"]).all() and 0 <= fit.fitted["unpadded_noise_cv"] <= 1


def test_histogram_build_never_prints_a_share_over_100_percent(tmp_path):
    from typer.testing import CliRunner

    from simbench.cli import app

    path = tmp_path / "l.txt"
    path.write_text(f"{2**62 - 1}\n" * 4)
    result = CliRunner().invoke(app, ["histogram", "build", str(path), "--max-length", "512", "-o",
                                      str(tmp_path / "h.csv")])
    assert result.exit_code == 0, result.output
    assert "100.00 % of the sequences, 100.00 % of the tokens lie past 512" in result.output
