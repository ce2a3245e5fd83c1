"""A sweep file read and checked: its keys, name, axes, explicit cells and report axes, each error at its line,
and every cell built as a scenario (`simbench.sweep.cells`)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from simbench.errors import InputError, read_text_file
from simbench.sweep.cells import SweepCell, _CellValidator, cell_seconds
from simbench.yamlfile import load_yaml_documents


SWEEP_KEYS = ("name", "base", "axes", "cells", "report")
BUNDLED_FOLDER = "scenarios/sweeps"
CELLS_MAX = 100_000


@dataclass(frozen=True)
class Sweep:
    name: str
    axes: tuple[str, ...]
    cells: tuple[SweepCell, ...]
    report_axes: tuple[str, str] | None
    source: str

    def estimated_seconds(self, workers: int) -> float:
        """Every cell's `cell_seconds`, shared by `workers`: a rough figure that a run calibrates."""
        return sum(cell_seconds(cell) for cell in self.cells) / max(workers, 1)

    def input_files(self) -> list[Path]:
        """The user's files the cells read (histograms, hardware profiles): what no --out may replace."""
        return list(dict.fromkeys(path for cell in self.cells for path in cell.scenario.input_files()))


def bundled_sweeps() -> dict:
    """The sweeps that ship with simbench, by name (`simbench sweep NAME` runs one)."""
    from simbench.data import bundled_files

    return bundled_files(BUNDLED_FOLDER, ".yaml")


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file, or a bundled sweep by name: every value of every type is checked
    (keys, names, axes, cells, report) and every cell as a scenario; errors name file and line."""
    bundled = bundled_sweeps()
    if str(path) in bundled:
        from importlib import resources

        with resources.as_file(bundled[str(path)]) as bundled_path:
            return load_sweep(bundled_path)
    if not Path(path).exists():
        raise InputError(f"no such sweep file or bundled sweep (bundled: {', '.join(bundled)})", source=str(path))
    source = str(path)
    documents = load_yaml_documents(read_text_file(path, "sweep"), source)
    if len(documents) != 1 or not isinstance(documents[0][1], dict):
        raise InputError("a sweep is one mapping with `base` and `axes` (or `cells`)", source=source)
    root, data = documents[0]
    lines = _key_lines(root, data)
    unknown = [key for key in data if key not in SWEEP_KEYS]
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r}; a sweep has {', '.join(SWEEP_KEYS)}", source=source,
                         line=lines.get(unknown[0]))
    name = data.get("name", Path(path).stem)
    if not isinstance(name, str) or not _FOLDER_NAME.fullmatch(name) or name in (".", ".."):
        raise InputError(f"`name` names the results folder (sweeps/NAME): letters, digits, _ . - and not . or ..; "
                         f"found {name!r}", source=source, line=lines.get("name"))
    base = data.get("base")
    if not isinstance(base, dict):
        raise InputError("`base` must be a scenario mapping", source=source, line=lines.get("base"))
    axes = data.get("axes") or {}
    explicit = data.get("cells") or []
    nodes = {key.value: value for key, value in root.value if isinstance(key, yaml.ScalarNode)}
    _check_axes_and_cells(axes, explicit, nodes, lines, source)
    cell_nodes = getattr(nodes.get("cells"), "value", None) or []
    keys = list(dict.fromkeys([*axes, *(key for cell in explicit for key in cell)]))
    report_axes = _report_axes(data.get("report"), keys, source, lines.get("report"))
    axis_nodes = _entry_nodes(nodes.get("axes"), axes)
    product = ((dict(zip(axes, (values[at] for values, at in zip(axes.values(), place)))),
                {key: (axis_nodes[key][0], axis_nodes[key][1].value[at]) for key, at in zip(axes, place)
                 if key in axis_nodes and isinstance(axis_nodes[key][1], yaml.SequenceNode)})
               for place in itertools.product(*(range(len(values)) for values in axes.values())))
    given = ((cell, _entry_nodes(cell_nodes[number] if number < len(cell_nodes) else None, cell))
             for number, cell in enumerate(explicit))
    combos = itertools.chain(product if axes else (), given)
    base_node = nodes["base"]
    cells = _CellValidator(base, base_node, source, Path(path).resolve().parent, lines.get("axes"))
    return Sweep(name, tuple(keys), tuple(cells.cell(index, values, f"{name}-{index:05d}", written)
                                      for index, (values, written) in enumerate(combos)), report_axes, source)


_FOLDER_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _check_axes_and_cells(axes, explicit, nodes: dict, lines: dict, source: str) -> None:
    """`axes` and `cells` as a sweep holds them: scenario keys to lists of values, at least one cell, at most
    CELLS_MAX; errors name the line of the key at fault."""
    if not isinstance(axes, dict) or any(not isinstance(values, list) or not values for values in axes.values()):
        raise InputError("`axes` maps scenario keys to non-empty lists of values", source=source,
                         line=lines.get("axes"))
    axis_lines = _key_lines(nodes.get("axes"), axes)
    for key in axes:
        _check_scenario_key(key, "axis", source, axis_lines.get(key, lines.get("axes")))
    if not isinstance(explicit, list) or any(not isinstance(cell, dict) for cell in explicit):
        raise InputError("`cells` is a list of mappings of scenario keys to values", source=source,
                         line=lines.get("cells"))
    cell_nodes = getattr(nodes.get("cells"), "value", None) or []
    for number, cell in enumerate(explicit):
        cell_lines = _key_lines(cell_nodes[number] if number < len(cell_nodes) else None, cell)
        for key in cell:
            _check_scenario_key(key, f"cells[{number}]", source, cell_lines.get(key, lines.get("cells")))
    if not axes and not explicit:
        raise InputError("a sweep needs `axes` or `cells`", source=source)
    count = (_product_size(axes) if axes else 0) + len(explicit)
    if count > CELLS_MAX:
        raise InputError(f"{count:,} cells, more than {CELLS_MAX:,}: split the sweep", source=source,
                         line=lines.get("axes"))


def _key_lines(node, data: dict) -> dict:
    """Each key of `data` (as the YAML gave it: a text, a number, null) -> its line in the file."""
    if not isinstance(node, yaml.MappingNode) or len(node.value) != len(data):
        return {}
    return {key: key_node.start_mark.line + 1 for key, (key_node, _) in zip(data, node.value)}


def _entry_nodes(node, data: dict) -> dict:
    """Each key of `data` -> (its key node, its value node) in the YAML `node` read as `data`."""
    if not isinstance(node, yaml.MappingNode) or len(node.value) != len(data):
        return {}
    return dict(zip(data, node.value))


def _check_scenario_key(key, where: str, source: str, line: int | None) -> None:
    if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
        shown = "~ (null)" if key is None else repr(key)
        raise InputError(f"{where} key {shown} is no scenario key: write a key such as `seed` or a dotted path "
                         f"such as `hardware.overrides.kernel_launch_seconds`", source=source, line=line)


def _report_axes(report, keys: list[str], source: str, line: int | None) -> tuple[str, str] | None:
    if report is None:
        return None
    if (not isinstance(report, dict) or set(report) != {"x", "y"}
            or not all(isinstance(value, str) and value in keys for value in report.values())):
        raise InputError(f"`report` names two swept keys as {{x: KEY, y: KEY}}; swept: {', '.join(keys)}",
                         source=source, line=line)
    return report["x"], report["y"]


def _product_size(axes: dict) -> int:
    size = 1
    for values in axes.values():
        size *= len(values)
    return size
