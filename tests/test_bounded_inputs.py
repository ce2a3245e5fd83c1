"""Inputs that could hang, exhaust memory or be read wrongly are refused with one line, quickly."""

import json
import os
import threading

import pytest
from typer.testing import CliRunner

from simbench.cli import app
from simbench.errors import InputError, read_text_file
from simbench.histogram import load_histogram
from simbench.scenario import load_scenarios

MINIMAL = "dataset: {histogram: squad_1_1_384}\nstrategies: [unpad]\ndevices: [1]\nsteps: 2\n"


def alias_bomb(levels: int = 8, width: int = 10) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, message", [
    (MINIMAL + "hardware:\n  overrides:\n" + "".join("    " + line + "\n" for line in alias_bomb().splitlines()),
     "expands to more than 100,000 values"),
    (MINIMAL.replace("devices: [1]", "devices: " + "[" * 20_000 + "]" * 20_000), "nested more than"),
    (MINIMAL + "notes: &loop [*loop]\n", "refers to a value that contains it"),
    (MINIMAL + "seed: !!python/object:os.system {}\n", "not valid YAML"),
])
def test_hostile_yaml_scenarios_are_refused_with_the_line(tmp_path, text, message):
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as refused:
        load_scenarios(path)
    assert str(refused.value).startswith(str(path))


def test_a_hardware_profile_alias_bomb_is_refused(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text(alias_bomb())
    result = CliRunner().invoke(app, ["simulate", "squad_1_1_384", "--strategy", "unpad", "--devices", "1",
                                      "--hardware", str(path)])
    assert isinstance(result.exception, InputError) and "expands to more than" in str(result.exception)


def test_a_fifo_with_no_writer_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "histogram.csv"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_refusal(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert outcome and "not a regular file" in outcome[0]


def _refusal(path) -> str:
    try:
        load_histogram(str(path))
    except InputError as error:
        return str(error)
    return "accepted"


def test_a_device_is_refused():
    with pytest.raises(InputError, match="not a regular file"):
        read_text_file("/dev/zero", "histogram")


def test_a_file_larger_than_any_valid_input_is_refused_before_parsing(tmp_path):
    path = tmp_path / "huge.csv"
    path.write_text("length,count\n" + "5,1\n" * 1000)
    with pytest.raises(InputError, match="larger than 0 MiB"):
        read_text_file(path, "histogram", max_bytes=1024)


def test_a_json_histogram_nested_thousands_deep_is_refused(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="nested thousands of levels deep"):
        load_histogram(str(path))


def test_one_length_spelt_twice_in_a_json_histogram_is_refused(tmp_path):
    path = tmp_path / "twice.json"
    path.write_text(json.dumps({"counts": {"10": 9, "010": 12}}))
    with pytest.raises(InputError, match="length 10 appears twice"):
        load_histogram(str(path))
