"""Bundled files live inside the package and are found from any folder (CI also checks a built wheel)."""

import tomllib
from pathlib import Path

import pytest

import simbench
from simbench.commands import bench
from simbench.errors import InputError
from simbench.histogram import load_histogram
from simbench.scenario import bundled_scenarios
from simbench.checked import load_checked_scenarios as load_scenarios

CHECKOUT = Path(__file__).resolve().parents[1]


def test_bundled_scenarios_run_by_name_from_any_folder(tmp_path, monkeypatch):
    from_checkout = load_scenarios(CHECKOUT / "scenarios" / "wiki512.yaml")
    monkeypatch.chdir(tmp_path)
    assert load_scenarios("wiki512") == from_checkout
    assert [scenario.name for scenario in load_scenarios("vts", seed=4)] == ["vts-wmt", "vts-wiki512"]
    assert {scenario.seed for scenario in load_scenarios("vts", seed=4)} == {4}
    assert load_histogram("wikipedia_512").sequences == 16_279_552


def test_the_root_scenarios_folder_is_the_bundled_one():
    root = sorted(path.name for path in (CHECKOUT / "scenarios").glob("*.yaml"))
    assert root == sorted(f"{name}.yaml" for name in bundled_scenarios())


def test_an_unknown_scenario_name_lists_the_bundled_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"^wiki51: no such scenario file or bundled scenario \(bundled: .*wiki512"):
        load_scenarios("wiki51")


def test_package_data_patterns_cover_every_file_the_package_reads():
    """A file under simbench/ that no package-data pattern names would be missing from the wheel."""
    patterns = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package_dir = Path(simbench.__file__).parent
    files = [path for path in package_dir.rglob("*")
             if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".py", ".pyc")]
    assert any(path.name == "wikipedia_512.csv" for path in files)
    missing = []
    for path in files:
        package = next(folder for folder in path.parents if (folder / "__init__.py").is_file())
        name = ".".join(package.relative_to(package_dir.parent).parts)
        relative = path.relative_to(package).as_posix()
        # setuptools globs the patterns from the package's folder: `*` stays within one folder.
        if not any(path in package.glob(pattern) for pattern in patterns.get(name, ())):
            missing.append(f"{name}: {relative}")
    assert missing == []


def test_bench_outside_a_checkout_says_it_needs_one(tmp_path, monkeypatch):
    (tmp_path / "tests" / "benchmarks").mkdir(parents=True)  # site-packages may hold a stray tests/ folder
    monkeypatch.setattr(bench, "CHECKOUT_DIR", tmp_path)
    monkeypatch.setattr(bench, "BENCHMARKS_DIR", tmp_path / "tests" / "benchmarks")
    with pytest.raises(InputError, match="runs the benchmarks of a source checkout .* `pip install -e"):
        bench.bench(keyword=None, quick=False, save=None)
