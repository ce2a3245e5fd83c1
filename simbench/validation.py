"""Checks of the values that enter the library, each limit and default defined once here.

Every message names the value, the bound and what was found, e.g. "batch_size must be a whole
number >= 1, found 0"; the CLI only swaps the library's name for its option (`--batch-size`).

    >>> from simbench.validation import check_whole_number
    >>> check_whole_number(3, "steps", minimum=1)
    3
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real

from simbench.errors import InputError

# Beyond any context length trained today; a typo such as 5120000 for 512 would otherwise ask
# for a counts array (and packer tables) of that many entries and run out of memory.
MAX_LENGTH = 1 << 20
# A plan that simulates every device prices one step of its largest cluster at once, so its rows
# (devices x batch size) bound peak memory: 2**22 rows (131,072 devices at batch 32) peak near 0.6 GB.
ROWS_PER_STEP_MAX = 1 << 22
# Clusters of up to 2**20 devices, beyond today's largest: independent devices are drawn by order
# statistics and coupled plans priced by distinct batches, so memory no longer grows with devices.
DEVICES_MAX = 1 << 20
DEFAULT_DEVICES = tuple(2**power for power in range(12))  # 1, 2, 4, ..., 2048
# A run's settings where neither a scenario, `simbench simulate` nor `simbench.simulate` gives them: the scenario
# schema, `Run.from_options`, the API and the command all take theirs from here.
DEFAULT_MODEL = "bert-large"
DEFAULT_HARDWARE = "a100"
DEFAULT_COST_MODEL = "transformer"
DEFAULT_GPUS_PER_REPLICA = 1
DEFAULT_BATCH_SIZE = 32
DEFAULT_STEPS = 200
DEFAULT_SEED = 0
DEFAULT_ENGINE = "auto"
DEFAULT_SHAPES = "auto"
# A chosen training run length when a scenario names none (`shapes: auto` averages first-sight costs over it):
# long enough that fixed shapes cost nothing, short enough that a token budget's rarer shapes still appear new
# (the report states it with the answer).
DEFAULT_TRAINING_STEPS = 10_000
# Far beyond any count a scenario holds (10**12 training steps has 13 digits), far below Python's 4,300.
MAX_INTEGER_DIGITS = 40
# Rows (sequences or packs) one simulation may draw and price: a few minutes on two cores at most.
# `--steps 1000000000` asked for ~10^11 and ran for hours; the default wiki512 run draws ~10^7.
SIMULATED_ROWS_MAX = 500_000_000
# Whole simulations a run repeats with successive seeds to measure its spread across them: enough for a
# standard error of the mean; each costs a full simulation.
SEEDS_MAX = 100


def check_whole_number(value, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """`value` as an int when it is a whole number (an int or numpy integer, not a bool) within bounds."""
    if isinstance(value, Integral) and not isinstance(value, bool):
        value = int(value)
        if (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
            return value
    raise InputError(f"{name} must be {_whole_number_phrase(minimum, maximum)}, found {value!r}", parameter=name)


def _whole_number_phrase(minimum: int | None, maximum: int | None, plural: bool = False) -> str:
    phrase = "whole numbers" if plural else "a whole number"
    if minimum is not None and maximum is not None:
        return f"{phrase} in {minimum}..{maximum:,}"
    if minimum is not None:
        return f"{phrase} >= {minimum}"
    if maximum is not None:
        return f"{phrase} <= {maximum:,}"
    return phrase


def check_seed(seed, name: str = "seed") -> int:
    """A seed of numpy's Generator: a whole number >= 0."""
    return check_whole_number(seed, name, minimum=0)


def check_finite_float(value, name: str) -> float:
    if isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise InputError(f"{name} must be a finite number, found {value!r}", parameter=name)


def check_positive_float(value, name: str) -> float:
    if isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    raise InputError(f"{name} must be positive and finite, found {value!r}", parameter=name)


def check_non_negative_float(value, name: str) -> float:
    if isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    raise InputError(f"{name} must be a finite number >= 0, found {value!r}", parameter=name)


def check_max_length(max_length, name: str = "max_length") -> int:
    """A sequence or pack length in tokens: 1..MAX_LENGTH."""
    return check_whole_number(max_length, name, minimum=1, maximum=MAX_LENGTH)


def check_max_depth(max_depth, name: str = "max_depth") -> int | None:
    """At most this many sequences per pack; None for no limit."""
    return None if max_depth is None else check_whole_number(max_depth, name, minimum=1)


def check_pack_limits(histogram, max_length: int | None, max_depth: int | None) -> int:
    """The pack length to use (the histogram's when None) once both limits are valid for `histogram`."""
    max_length = check_max_length(histogram.max_length if max_length is None else max_length)
    if histogram.longest > max_length:
        raise InputError(f"histogram {histogram.name} has sequences of length {histogram.longest}, "
                         f"longer than max_length {max_length}", parameter="max_length")
    check_max_depth(max_depth)
    return max_length


def check_device_count(devices, name: str = "devices", *, maximum: int | None = DEVICES_MAX) -> int:
    """A cluster size: 1..DEVICES_MAX devices when simulated; closed forms take `maximum=None`."""
    return check_whole_number(devices, name, minimum=1, maximum=maximum)


def check_device_counts(devices: Iterable, name: str = "devices", *, maximum: int | None = DEVICES_MAX) -> list[int]:
    """Cluster sizes, sorted without repeats; at least one, each in 1..DEVICES_MAX (or 1.. with `maximum=None`)."""
    devices = list(devices)
    bad = [count for count in devices if isinstance(count, bool) or not isinstance(count, Integral)
           or count < 1 or (maximum is not None and count > maximum)]
    if not devices or bad:
        found = repr(bad[0]) if bad else "none"
        raise InputError(f"{name} must be {_whole_number_phrase(1, maximum, plural=True)}, found {found}",
                         parameter=name)
    return sorted({int(count) for count in devices})


def check_gpus_per_replica(gpus, name: str = "gpus_per_replica") -> int:
    """GPUs in one data-parallel device (a tensor- or context-parallel replica): a whole number >= 1.
    Device counts then count replicas: a replica computes as fast as its GPUs together (less the
    profile's tensor-parallel efficiency), and each of its GPUs all-reduces its share of the gradients."""
    return check_whole_number(gpus, name, minimum=1)


def check_rows_per_step(devices: int, batch_size: int, plan: str | None = None, remedy: str = "") -> None:
    """The largest cluster's rows per step (devices x batch_size) must fit in memory, for a `plan`
    that simulates every device; `remedy`, if any, says how that plan could avoid it."""
    rows = devices * batch_size
    if rows > ROWS_PER_STEP_MAX:
        who = f"strategy {plan} simulates every device: " if plan else ""
        raise InputError(f"{who}{devices:,} devices x batch_size {batch_size} is {rows:,} rows per step; "
                         f"at most {ROWS_PER_STEP_MAX:,} fit in memory{remedy}", parameter="batch_size")


def check_simulation_work(rows: int, max_rows: int = SIMULATED_ROWS_MAX,
                          raising: str = "raise the limit (max_rows; `simbench simulate --max-rows`)") -> None:
    """Refuse, before any work, a simulation that would draw and price more than `max_rows` rows;
    `raising` says how the caller's user can allow more."""
    check_whole_number(max_rows, "max_rows", minimum=1)
    if rows > max_rows:
        raise InputError(f"this simulation would draw and price about {rows:.2g} sequences or packs, more than the "
                         f"{max_rows:.0e} allowed (about a minute on two cores per 1e8): lower steps (a few hundred "
                         f"give speed-ups within 1 %), batch_size, the device counts or the strategies, or "
                         f"{raising}", parameter="steps")


def check_choice(value, name: str, choices: Iterable[str]) -> str:
    """One of a fixed set of names."""
    choices = tuple(choices)
    if value not in choices:
        raise InputError(f"{name} must be one of {', '.join(choices)}, found {value!r}", parameter=name)
    return value


def json_integer(digits: str) -> int:
    """`parse_int` for json.loads: a whole number of at most MAX_INTEGER_DIGITS digits, else an InputError
    (Python refuses one past 4,300 digits with a ValueError of its own, a traceback where a reader did not
    expect it; the reader names the file and line)."""
    if len(digits.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise InputError(f"an integer of {len(digits):,} characters; simbench reads whole numbers of up to "
                         f"{MAX_INTEGER_DIGITS} digits")
    return int(digits)
