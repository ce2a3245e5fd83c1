"""A packer's size limit (nnlshp's fit at long context) is refused before any work, in the words of
where the depth was given: a scenario's line and key, `--max-depth`, or `--strategy NAME:DEPTH`."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from simbench.cli import app
from simbench.errors import InputError
from simbench.checked import load_checked_scenario as load_scenario
from simbench.strategies.nnlshp import MAX_FIT_CELLS, MAX_STRATEGIES, check_fit_size, count_exact_fill_strategies

SFT_8K = Path(__file__).resolve().parent.parent / "scenarios" / "llama8b-sft-8k.yaml"
RUNNER = CliRunner()


def said(result) -> str:
    """What a command told the user: stderr, or the one-line error `simbench` prints from its exception."""
    return result.stderr + (str(result.exception) if result.exception else "")


def scenario_with(tmp_path: Path, strategy_lines: str) -> tuple[Path, int]:
    """The 8k SFT scenario with `strategy_lines` after its `ffd` strategy, and the first added line's number."""
    lines = SFT_8K.read_text().splitlines()
    after = lines.index("  - ffd") + 1
    path = tmp_path / "sft.yaml"
    path.write_text("\n".join([*lines[:after], *strategy_lines.splitlines(), *lines[after:]]) + "\n")
    return path, after + 1


def test_nnlshp_at_8k_in_a_scenario_names_the_file_line_and_a_packer_that_works(tmp_path):
    path, line = scenario_with(tmp_path, "  - nnlshp:3")
    with pytest.raises(InputError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: strategies.6 (nnlshp:3): nnlshp at depth 3 and max length 8,192")
    assert "use max_depth 2 or less, or a packer that works at this length such as lpfhp" in message
    assert "--" not in message  # scenarios have no command-line options


def test_a_written_max_depth_is_named_at_its_own_line(tmp_path):
    path, line = scenario_with(tmp_path, "  - name: packed-varlen\n    packer: nnlshp\n    max_depth: 4")
    with pytest.raises(InputError, match=rf"^{path}:{line + 2}: strategies\.6\.max_depth \(packed-varlen:nnlshp:4\)"):
        load_scenario(path)


def test_validate_reports_it_without_running(tmp_path):
    path, line = scenario_with(tmp_path, "  - nnlshp\n  - spfhp")
    result = RUNNER.invoke(app, ["validate", str(path)])
    assert result.exit_code != 0
    assert f"{path}:{line}: strategies.6 (nnlshp:3): nnlshp at depth 3" in said(result)


def test_commands_name_their_own_options(tmp_path):
    histogram = tmp_path / "long.csv"
    histogram.write_text("length,count\n100,5\n8192,1\n")
    packed = RUNNER.invoke(app, ["pack", str(histogram), "--strategy", "nnlshp", "--max-depth", "4"])
    assert packed.exit_code != 0 and "use --max-depth 2 or less" in said(packed)
    simulated = RUNNER.invoke(app, ["simulate", str(histogram), "--strategy", "nnlshp:3", "--devices", "1"])
    assert simulated.exit_code != 0
    assert "strategy nnlshp:3: " in said(simulated) and "--strategy NAME:DEPTH with a DEPTH of 2" in said(simulated)
    assert "max_depth" not in said(simulated) and "packed none" not in said(simulated)  # refused before any work


@settings(max_examples=60, deadline=None)
@given(max_length=st.integers(1, 20_000), depth=st.integers(1, 6))
def test_the_check_refuses_exactly_the_fits_over_the_limits_and_its_suggestion_fits(max_length, depth):
    depth = min(depth, max_length)
    count = count_exact_fill_strategies(max_length, depth)
    if count <= MAX_STRATEGIES and count * max_length <= MAX_FIT_CELLS:
        check_fit_size(max_length, depth)
        return
    with pytest.raises(InputError) as caught:
        check_fit_size(max_length, depth)
    assert caught.value.parameter == "max_depth"
    suggested = caught.value.message.partition("use max_depth ")[2].partition(" or less")[0]
    if suggested:  # the deepest that fits: it passes, one deeper does not
        check_fit_size(max_length, int(suggested))
        with pytest.raises(InputError):
            check_fit_size(max_length, int(suggested) + 1)
