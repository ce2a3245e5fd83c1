"""Where in a scenario's YAML a key was written: the line an error names (`_line_of`, `key_error`), whether a key
is written at all (`_written`, `written`) and pydantic's errors as one line each, with the keys allowed where one
is unknown."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from simbench.errors import InputError, did_you_mean
from simbench.scenario.schema import Scenario
from simbench.scenario.specs import _FULL, _SHORT, _Strict

def _written(root: yaml.Node, path: tuple) -> bool:
    """Whether the YAML holds a node at `path` (mapping keys and list indices)."""
    node = root
    for part in path:
        if isinstance(node, yaml.MappingNode):
            node = next((value for key, value in node.value if key.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return False
        if node is None:
            return False
    return True


def written(scenario: Scenario, key: tuple) -> bool:
    """Whether the scenario states `key` (mapping keys and list indices): in its YAML where it was read from a
    file, else among the fields set where it was built in code."""
    if scenario.origin is not None:
        return _written(scenario.origin[0], key)
    value = scenario
    for part in key:
        if isinstance(value, BaseModel):
            if part not in value.model_fields_set and part not in (value.model_extra or {}):
                return False
            value = getattr(value, part)
        elif isinstance(value, list | tuple) and isinstance(part, int) and part < len(value):
            value = value[part]
        else:
            return False
    return True


def key_error(scenario: Scenario, key: tuple, message: str, parameter: str | None = None) -> InputError:
    """An error about the scenario's `key`, at the key's line where the scenario was read from a file."""
    if scenario.origin is None:
        return InputError(message, parameter=parameter)
    root, source = scenario.origin
    return InputError(message, source=source, line=_line_of(root, key), parameter=parameter)


def _path_in_yaml(loc: tuple) -> list:
    return [part for part in loc if part not in (_SHORT, _FULL)]


def _line_of(root: yaml.Node | None, loc: tuple) -> int | None:
    """Line of the deepest YAML node along `loc`: the key's line for mapping entries."""
    node, line_node = root, root
    for part in _path_in_yaml(loc):
        if isinstance(node, yaml.MappingNode):
            match = next(((key, value) for key, value in node.value if key.value == part), None)
            if match is None:
                break
            line_node, node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            line_node = node = node.value[part]
        else:
            break
    return line_node.start_mark.line + 1 if line_node is not None else None


def _describe(error: dict, data: Any) -> str:
    """One line: the dotted key, what is wrong and, where known, the allowed keys or values."""
    path = _path_in_yaml(error["loc"])
    key = ".".join(str(part) for part in path) or "(top level)"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(path[:-1], data)
        return f"unknown key {path[-1]!r};{did_you_mean(path[-1], allowed)} allowed keys here: {', '.join(allowed)}"
    if error["type"] == "missing":
        return f"missing required key {key!r}"
    return f"{key}: {message}"


def _allowed_keys(parent: list, data: Any) -> list[str]:
    """Keys of the model at `parent` in the schema (list indices and union tags skipped), for the
    mapping found there in `data` (a strategy's keys depend on its plan)."""
    model: type[_Strict] = Scenario
    for part in parent:
        data = _child(data, part)
        if isinstance(part, int):
            continue
        annotation = model.model_fields[part].annotation
        nested = _nested_model(annotation)
        if nested is None:
            break
        model = nested
    return model.allowed_keys(data)


def _child(data: Any, part: str | int) -> Any:
    if isinstance(data, dict):
        return data.get(part)
    return data[part] if isinstance(data, list) and isinstance(part, int) and part < len(data) else None


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in getattr(annotation, "__args__", ()) + getattr(annotation, "__metadata__", ()):
        found = _nested_model(argument)
        if found is not None:
            return found
    return None
