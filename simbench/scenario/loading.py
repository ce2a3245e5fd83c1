"""Reading scenarios: a file or a bundled one by name, one or several YAML documents, relative paths resolved
against the file's folder, every error of every document raised at once with its line."""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from simbench.data import bundled_files
from simbench.errors import InputError, InputErrors, each_checked, read_text_file
from simbench.scenario.schema import Scenario
from simbench.scenario.yaml_lines import _describe, _line_of, _path_in_yaml
from simbench.yamlfile import load_yaml_documents

def bundled_scenarios() -> dict[str, Traversable]:
    """Bundled scenario files by name (file stem): `simbench run wiki512` runs `wiki512.yaml`."""
    return bundled_files("scenarios", ".yaml")


def load_scenarios(path: Path | str, *, seed: int | None = None, seeds: int | None = None) -> list[Scenario]:
    """Read and validate a scenario file, or a bundled one by name: one scenario, or several as YAML
    documents separated by `---`.

    Relative paths in it are resolved against the file's folder.
    """
    bundled = bundled_scenarios()
    if str(path) in bundled:
        with resources.as_file(bundled[str(path)]) as bundled_path:
            return load_scenarios(bundled_path, seed=seed, seeds=seeds)
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such scenario file or bundled scenario (bundled: {', '.join(bundled)})",
                         source=str(path))
    scenarios = parse_scenarios(read_text_file(path, "scenario"), source=str(path), base_dir=path.resolve().parent, seed=seed,
                                 seeds=seeds)
    names = [scenario.name for scenario in scenarios]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InputError(f"the scenarios in one file need distinct names; repeated: {', '.join(repeated)}",
                         source=str(path))
    return scenarios


def load_scenario(path: Path | str, *, seed: int | None = None) -> Scenario:
    """Read a file that holds exactly one scenario (a report's resolved.yaml, for instance)."""
    scenarios = load_scenarios(path, seed=seed)
    if len(scenarios) != 1:
        raise InputError(f"expected one scenario, found {len(scenarios)}", source=str(path))
    return scenarios[0]


def parse_scenarios(text: str, *, source: str, base_dir: Path, seed: int | None = None,
                    seeds: int | None = None) -> list[Scenario]:
    """Every scenario of the file; an invalid file raises every error of every document at once."""
    documents = [(data, root) for root, data in load_yaml_documents(text, source) if data is not None]
    scenarios = each_checked(documents, lambda document: _validate(*document, source, base_dir, seed, seeds))
    if not scenarios:
        raise InputError("the file holds no scenario", source=source)
    return scenarios


def scenario_from_mapping(data: dict, root: yaml.Node, source: str, base_dir: Path) -> Scenario:
    """A scenario from YAML already read (`root`, its node tree, gives error lines): a sweep's cells."""
    return _validate(data, root, source, base_dir, None)


def _validate(data: Any, root: yaml.Node, source: str, base_dir: Path, seed: int | None,
              seeds: int | None = None) -> Scenario:
    if not isinstance(data, dict):
        raise InputError("a scenario must be a mapping of keys such as `name`, `dataset`, `strategies`",
                         source=source, line=root.start_mark.line + 1)
    if seed is not None:
        data["seed"] = seed
    if seeds is not None:
        data["seeds"] = seeds
    _resolve_paths(data, base_dir)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as error:
        found = error.errors()
        # A list's own error (too short once its bad items are left out) only echoes its items' errors.
        paths = [tuple(_path_in_yaml(each["loc"])) for each in found]
        errors = [InputError(_describe(each, data), source=source, line=_line_of(root, each["loc"]))
                  for each, path in zip(found, paths)
                  if not any(len(other) > len(path) and other[:len(path)] == path for other in paths)]
        raise InputErrors(sorted(errors, key=lambda each: each.line or 0)) from None
    return scenario.read_from(root, source)


def _resolve_paths(data: dict, base_dir: Path) -> None:
    """Make relative file paths absolute against the scenario's folder (bundled names stay names)."""
    dataset = data.get("dataset")
    if isinstance(dataset, dict) and isinstance(dataset.get("histogram"), str):
        dataset["histogram"] = _resolve_file(dataset["histogram"], base_dir)
    hardware = data.get("hardware")
    if isinstance(hardware, str):
        data["hardware"] = _resolve_file(hardware, base_dir)
    elif isinstance(hardware, dict) and isinstance(hardware.get("profile"), str):
        hardware["profile"] = _resolve_file(hardware["profile"], base_dir)


def _resolve_file(name: str, base_dir: Path) -> str:
    candidate = base_dir / name
    return str(candidate.resolve()) if candidate.is_file() else name
