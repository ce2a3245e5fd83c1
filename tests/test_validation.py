"""The shared input checks: what they accept, and messages that name the value, the bound and what was found."""

import re

import numpy as np
import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st

from simbench.commands.common import command
from simbench.errors import InputError
from simbench.validation import (DEVICES_MAX, MAX_LENGTH, check_device_counts, check_max_length,
                                 check_positive_float, check_rows_per_step, check_seed, check_whole_number)


@given(value=st.integers(-10**6, 10**6), minimum=st.integers(-100, 100), span=st.integers(0, 10**6))
def test_whole_numbers_within_bounds_pass_and_others_name_bound_and_value(value, minimum, span):
    maximum = minimum + span
    if minimum <= value <= maximum:
        assert check_whole_number(value, "steps", minimum=minimum, maximum=maximum) == value
    else:
        with pytest.raises(InputError) as raised:
            check_whole_number(value, "steps", minimum=minimum, maximum=maximum)
        assert str(raised.value) == f"steps must be a whole number in {minimum}..{maximum:,}, found {value!r}"
        assert raised.value.parameter == "steps"


@pytest.mark.parametrize("value", [True, False, 2.0, "3", None, np.float64(1.0)])
def test_bools_floats_and_text_are_not_whole_numbers(value):
    with pytest.raises(InputError, match=re.escape(f"seed must be a whole number >= 0, found {value!r}")):
        check_seed(value)


def test_numpy_integers_are_whole_numbers_and_come_back_as_int():
    value = check_whole_number(np.int32(7), "batch_size", minimum=1)
    assert value == 7 and type(value) is int


def test_limits_are_the_shared_constants():
    assert check_max_length(MAX_LENGTH) == MAX_LENGTH
    with pytest.raises(InputError, match=f"max_length must be a whole number in 1..{MAX_LENGTH:,}, found 0"):
        check_max_length(0)
    assert check_device_counts([8, 1, 8]) == [1, 8]
    with pytest.raises(InputError, match=f"devices must be whole numbers in 1..{DEVICES_MAX:,}, found none"):
        check_device_counts([])
    assert check_device_counts([10**20], maximum=None) == [10**20]
    with pytest.raises(InputError, match="rows per step"):
        check_rows_per_step(DEVICES_MAX, 8)


@pytest.mark.parametrize("value", [0.0, -1.0, float("inf"), float("nan"), True])
def test_positive_floats_exclude_zero_infinity_nan_and_bools(value):
    with pytest.raises(InputError, match="scale must be positive and finite"):
        check_positive_float(value, "scale")


def test_a_command_calls_the_value_by_its_option_name():
    def pack(max_length: int = typer.Option(None, "--max-length"), seed: int = typer.Option(0, "--seed")):
        check_seed(seed)
        check_max_length(max_length)

    with pytest.raises(InputError, match=r"^--seed must be a whole number >= 0, found -1$"):
        command(pack)(max_length=8, seed=-1)
    with pytest.raises(InputError, match=r"^--max-length must be a whole number in 1\.\.1,048,576, found 0$"):
        command(pack)(max_length=0, seed=0)


def test_renaming_keeps_the_place_in_the_file_and_leaves_other_words_alone():
    error = InputError("max_length must be a whole number, found 'x'", source="a.json", line=3, parameter="max_length")
    renamed = error.renamed({"max_length": "--max-length"})
    assert str(renamed) == "a.json:3: --max-length must be a whole number, found 'x'"
    assert error.renamed({"seed": "--seed"}) is error


@given(st.lists(st.integers(min_value=-3, max_value=3), max_size=8))
def test_each_checked_lists_every_refusal_of_every_item_in_order(values):
    """Negative values refuse with one error, zeros with two at once (an InputErrors): all of them come back
    together, flattened and in order; without a refusal, every result in order."""
    from simbench.errors import InputErrors, each_checked

    def check(value: int) -> int:
        if value < 0:
            raise InputError(f"{value} below 0")
        if value == 0:
            raise InputErrors([InputError("0 first"), InputError("0 second")])
        return value * 10

    expected = [message for value in values if value <= 0
                for message in ([f"{value} below 0"] if value < 0 else ["0 first", "0 second"])]
    if not expected:
        assert each_checked(values, check) == [value * 10 for value in values]
        return
    with pytest.raises(InputErrors) as refused:
        each_checked(values, check)
    assert [error.message for error in refused.value.errors] == expected
