"""Inputs that could hang, exhaust memory or be read wrongly are refused with one line, quickly."""

import json
import os
import threading

import pytest
from typer.testing import CliRunner

from simbench.cli import app
from simbench.errors import InputError, read_text_file
from simbench.histogram import load_histogram
from simbench.checked import load_checked_scenarios as load_scenarios

MINIMAL = "dataset: {histogram: squad_1_1_384}\nstrategies: [unpad]\ndevices: [1]\nsteps: 2\n"


def alias_bomb(levels: int = 8, width: int = 10) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, message", [
    (MINIMAL + "hardware:\n  overrides:\n" + "".join("    " + line + "\n" for line in alias_bomb().splitlines()),
     "holds more than 100,000 values"),
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
    assert isinstance(result.exception, InputError) and "holds more than 100,000 values" in str(result.exception)


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


def test_a_key_given_twice_is_refused_not_silently_overwritten(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text(MINIMAL + "steps: 5\n")
    with pytest.raises(InputError, match=r"key 'steps' appears twice in one mapping \(lines 4 and 5\)"):
        load_scenarios(path)


@pytest.mark.parametrize("override, message", [
    ({"unpad_group_boundaries": [512, 128]}, "increasing order"),
    ({"unpad_group_boundaries": []}, "increasing order"),
    ({"unpad_group_boundaries": [-5, 128]}, "increasing order"),
    ({"linear_flops_per_s": 1e-300}, "greater than or equal to 1000000"),
    ({"attention_flops_per_s": float("nan")}, "finite number"),
])
def test_impossible_hardware_fields_are_refused(override, message):
    from simbench.costmodels.hardware import load_hardware

    with pytest.raises(InputError, match=message):
        load_hardware("a100", override)


def test_token_totals_are_exact_beyond_int64():
    import numpy as np

    from simbench.histogram import LengthHistogram

    counts = np.zeros(2**20, dtype=np.int64)
    counts[-16:] = 2**40  # 2^44 sequences of about 2^20 tokens: nearly 2^64 tokens, past int64
    counts[0] = 7
    histogram = LengthHistogram(counts)
    exact = sum(2**40 * length for length in range(2**20 - 15, 2**20 + 1)) + 7
    assert exact > 2**63 and histogram.real_tokens == exact
    assert histogram.padding_tokens == histogram.sequences * 2**20 - exact


def test_running_out_of_memory_is_one_line_not_a_traceback(monkeypatch):
    import subprocess
    import sys

    # The library's simulate runs out of memory (the command imports it when it runs).
    code = ("import sys; from simbench import cli\n"
            "def boom(*a, **k): raise MemoryError\n"
            "sys.argv = ['simbench', 'simulate', 'squad_1_1_384', '--strategy', 'unpad', '--devices', '1']\n"
            "import simbench.sim.simulate as sim; sim.simulate = boom\n"
            "cli.main()\n")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and "Traceback" not in completed.stderr
    assert "out of memory" in completed.stderr


def test_the_simulation_budget_is_stated_and_can_be_raised():
    from simbench.costmodels.transformer import TransformerCostModel
    from simbench.sim.simulate import simulate

    squad = load_histogram("squad_1_1_384")
    cost_model = TransformerCostModel("bert-base", "a100")
    with pytest.raises(InputError, match=r"about 6.4e\+03 sequences or packs, more than the 1e\+03 allowed"):
        simulate(squad, ["unpad"], [1], cost_model, batch_size=32, steps=100, seed=0, max_rows=1000, baseline="none")
    result = simulate(squad, ["unpad"], [1], cost_model, batch_size=32, steps=100, seed=0, max_rows=10_000,
                      baseline="none")
    assert set(result.summary["strategy"]) == {"none", "unpad"}
