"""The benchmarks' target check: absolute targets scaled by load, ratios to a reference, floors."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("root_conftest", Path(__file__).parent.parent / "conftest.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_absolute_targets_hold_or_say_by_how_much():
    assert bench.missed_target({"target_seconds": 2.0}, 1.9, 1.0) is None
    assert "target 2.0 s" in bench.missed_target({"target_seconds": 2.0}, 2.1, 1.0)
    # On a machine twice as busy as its cores, twice the time.
    assert bench.missed_target({"target_seconds": 2.0}, 3.9, 2.0) is None
    assert "load" in bench.missed_target({"target_seconds": 2.0}, 4.1, 2.0)


def test_ratio_targets_ignore_the_load():
    info = {"target_ratio": 1.2, "reference_seconds": 1.0}
    assert bench.missed_target(info, 1.19, 5.0) is None
    assert "1.25x its reference" in bench.missed_target(info, 1.25, 5.0)


def test_a_paired_ratio_is_held_in_place_of_the_fastest_rounds():
    info = {"target_ratio": 1.2, "reference_seconds": 1.0, "paired_ratio": 0.9}
    assert bench.missed_target(info, 1.3, 1.0) is None  # the fastest rounds' 1.3x is not what is held
    assert "1.25x its reference (median of paired rounds)" in bench.missed_target({**info, "paired_ratio": 1.25},
                                                                                   1.0, 1.0)


def test_floor_targets():
    info = {"target_at_least": 0.85, "measured_value": 0.80, "measured": "parallel efficiency"}
    assert "parallel efficiency 0.800" in bench.missed_target(info, 1.0, 1.0)
    assert bench.missed_target({**info, "measured_value": 0.9}, 1.0, 1.0) is None
    assert bench.missed_target({}, 100.0, 1.0) is None


def test_ceiling_targets_on_a_measured_duration_scale_with_the_load():
    info = {"target_at_most_seconds": 5.0, "measured_value": 6.0, "measured": "longest silence"}
    assert "longest silence 6.00 s, target at most 5.0 s" in bench.missed_target(info, 100.0, 1.0)
    assert bench.missed_target(info, 100.0, 1.5) is None  # a machine half again as busy as its cores
    assert bench.missed_target({**info, "measured_value": 4.0}, 100.0, 1.0) is None


def test_noisy_machines_check_only_robust_targets():
    cold = {"target_ratio": 2.0, "reference_seconds": 1.0, "ratio_needs_quiet_machine": True, "target_seconds": 9}
    assert bench.missed_target(bench.targets_checked(cold, every=False), 3.0, 1.0) is None
    assert "3.00x its reference" in bench.missed_target(bench.targets_checked(cold, every=True), 3.0, 1.0)
    warm = {"target_ratio": 1.2, "reference_seconds": 1.0, "target_seconds": 0.5}
    assert "1.30x its reference" in bench.missed_target(bench.targets_checked(warm, every=False), 1.3, 1.0)
