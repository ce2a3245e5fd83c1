"""Outputs without --force are created, never replaced: a file that another run wrote under the same name
while this one worked is refused at the end and left whole (`simbench.atomic.atomic_file(replace=False)`)."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from simbench.atomic import atomic_file, check_output_file
from simbench.cli import app
from simbench.errors import InputError

LOG = "gpus,per_gpu_batch,unpadded,seq/s\n" + "8,4,true,300\n" * 60


def test_a_file_that_appears_during_the_work_is_kept_and_the_writer_refused(tmp_path):
    output = tmp_path / "profile.yaml"
    check_output_file(output)  # nothing there before the work
    with pytest.raises(InputError, match="appeared while simbench worked.*--force") as refused:
        with atomic_file(output, replace=False) as temporary:
            temporary.write_text("this run's profile")
            output.write_text("the other run's profile")
    assert refused.value.source == str(output)
    assert output.read_text() == "the other run's profile"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["profile.yaml"]  # no temporary left behind


def test_without_a_rival_the_file_is_created_and_with_force_replaced(tmp_path):
    output = tmp_path / "profile.yaml"
    with atomic_file(output, replace=False) as temporary:
        temporary.write_text("first")
    assert output.read_text() == "first"
    with atomic_file(output, replace=True) as temporary:
        temporary.write_text("second")
    assert output.read_text() == "second"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["profile.yaml"]


def _rival_writes_first(monkeypatch, output: Path, module, name: str) -> None:
    """`module.name` runs as before, but another run writes `output` while it works."""
    real = getattr(module, name)

    def racing(*arguments, **options):
        output.write_text("the other run's profile")
        return real(*arguments, **options)

    monkeypatch.setattr(module, name, racing)


def test_two_fit_logs_to_one_output_the_second_refuses_unless_forced(tmp_path, monkeypatch):
    from simbench.calibrate import logfit

    log, output = tmp_path / "log.csv", tmp_path / "p.yaml"
    log.write_text(LOG)
    _rival_writes_first(monkeypatch, output, logfit, "fit_logs")
    result = CliRunner().invoke(app, ["fit-logs", str(log), "-o", str(output)])
    assert result.exit_code != 0 and isinstance(result.exception, InputError), result.output
    assert "pass --force" in str(result.exception)
    assert output.read_text() == "the other run's profile"
    forced = CliRunner().invoke(app, ["fit-logs", str(log), "-o", str(output), "--force"])
    assert forced.exit_code == 0, forced.output
    assert "linear_flops_per_s" in output.read_text()
