"""A sweep's cells: each a scenario, validated with a sweep's size in mind (a cell that differs from a validated
one only in values checked on their own costs one check per new value), and each cell's work estimated for
progress and the dry run."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from simbench.errors import InputError
from simbench.checked import check_scenario, check_scenario_memory, check_scenario_work
from simbench.scenario import Scenario, scenario_from_mapping
from simbench.validation import DEFAULT_ENGINE, SIMULATED_ROWS_MAX


# The dry run's estimate, an order of magnitude: rows drawn and priced per second and worker, the fixed
# cost of a cell (running the experiment, fits, writing) and, per strategy, of each device count that
# `sim.engines.choice.split_by_size` sends past the per-device engines (the order-statistics engine's draws). The bundled 200-cell context-vs-scale
# sweep took 16.4 s serially on one core of this project's 2-core machine; its cells of up to 64 devices
# took about a fifth of those of 128 to 524,288.
ROWS_PER_SECOND = 3e6
CELL_OVERHEAD_SECONDS = 0.025
LARGE_CLUSTER_SECONDS = 0.032


@dataclass(frozen=True)
class SweepCell:
    index: int
    values: dict[str, Any]  # axis key -> this cell's value
    scenario: Scenario

    @property
    def key(self) -> str:
        return f"cell={self.index:05d}"

    @property
    def label(self) -> str:
        """The cell as messages name it: `cell 3 (model=bert-base, devices=8)`."""
        return cell_label(self.index, self.values)


def cell_label(index: int, values: dict[str, Any]) -> str:
    return f"cell {index} ({', '.join(f'{key}={value}' for key, value in values.items())})"


def cell_seconds(cell: SweepCell) -> float:
    """A cell's work in nominal seconds: the rows it draws and prices at `ROWS_PER_SECOND`, plus a fixed cost.
    Cells differ by orders of magnitude (one device or 524,288), so a sweep's progress is measured in it."""
    from simbench.sim.engines.choice import split_by_size

    scenario = cell.scenario
    # With a layout the simulator's devices are replicas, each drawing every microbatch's rows.
    rows = len(scenario.strategies) * scenario.steps * scenario.device_batch_size * len(scenario.replica_devices)
    large = len(split_by_size(sorted(scenario.replica_devices), DEFAULT_ENGINE)[1])  # scenarios run the default
    return rows / ROWS_PER_SECOND + CELL_OVERHEAD_SECONDS + LARGE_CLUSTER_SECONDS * len(scenario.strategies) * large


# Scenario keys whose checks look at the value alone (and at the simulation's work, checked per cell): cells
# that differ from a validated one only in these are checked one new value at a time, not as new scenarios.
_OWN_CHECK_KEYS = ("seed", "steps", "batch_size", "devices", "training_steps", "shapes")


def _cell_node(base: yaml.Node, written: dict) -> yaml.Node:
    """The base scenario's YAML tree with each of a cell's keys set where the sweep sets it (`written`: key ->
    (key node, value node)), so that a cell's errors name the swept key, `parallel.pp`, at its line."""
    for key, (key_node, value_node) in written.items():
        base = _with_entry(base, key.split("."), key_node, value_node)
    return base


def _with_entry(node, parts: list[str], key_node: yaml.Node, value_node: yaml.Node) -> yaml.MappingNode:
    entries = list(node.value) if isinstance(node, yaml.MappingNode) else []
    index = next((at for at, (key, _) in enumerate(entries) if key.value == parts[0]), None)
    if len(parts) == 1:
        entry = (yaml.ScalarNode("tag:yaml.org,2002:str", parts[0], key_node.start_mark, key_node.end_mark),
                 value_node)
    else:
        below = _with_entry(entries[index][1] if index is not None else None, parts[1:], key_node, value_node)
        entry = (entries[index][0] if index is not None else
                 yaml.ScalarNode("tag:yaml.org,2002:str", parts[0], key_node.start_mark, key_node.end_mark), below)
    if index is None:
        entries.append(entry)
    else:
        entries[index] = entry
    mark = node.start_mark if isinstance(node, yaml.MappingNode) else key_node.start_mark
    return yaml.MappingNode("tag:yaml.org,2002:map", entries, mark, mark)


class _CellValidator:
    """Each cell as a valid scenario, with the work of a sweep's size in mind: a cell whose values differ from
    an already validated cell's only in keys that are checked on their own (`_OWN_CHECK_KEYS`) is that
    scenario with those values, each new value validated once (in the validated scenario) and the
    simulation's work checked per cell from a per-step figure computed once per batch size and devices.
    A 99,856-cell plan (two axes of 316 seeds and batch sizes) validates in about 3 s instead of 47."""

    def __init__(self, base: dict, base_node, source: str, base_dir: Path, axes_line: int | None):
        self.base, self.base_node, self.source, self.base_dir = base, base_node, source, base_dir
        self.axes_line = axes_line
        self.scenarios: dict[tuple, tuple[Scenario, dict]] = {}  # others' fingerprint -> a validated cell
        self.own_values: dict[tuple, Any] = {}  # (fingerprint, key, value as JSON) -> the field's value
        self.rows_per_step: dict[tuple, int] = {}
        self.memory_checked: set[tuple] = set()

    def cell(self, index: int, values: dict, name: str, written: dict | None = None) -> SweepCell:
        """Cell `index`, its `values` set in the base scenario; `written`: each key's YAML nodes (`_cell_node`)."""
        try:
            return SweepCell(index, values, self._scenario(values, name, written or {}))
        except InputError as error:
            # Every error of the cell, not the first alone: a sweep file has no `validate` to list the rest.
            problems = "; ".join(each.message for each in getattr(error, "errors", [error]))
            raise InputError(f"{cell_label(index, values)}: {problems}", source=self.source,
                             line=error.line or self.axes_line) from None

    def _scenario(self, values: dict, name: str, written: dict) -> Scenario:
        values = {key: [value] if key == "devices" and not isinstance(value, list) else value
                  for key, value in values.items()}  # a number is one device count
        others = {key: value for key, value in values.items() if key not in _OWN_CHECK_KEYS}
        fingerprint = _frozen(others)
        known = self.scenarios.get(fingerprint)
        if known is None:
            mapping = _cell_mapping(self.base, values, name)
            scenario = scenario_from_mapping(mapping, _cell_node(self.base_node, written), self.source, self.base_dir)
            check_scenario(scenario)
            self.scenarios[fingerprint] = (scenario, mapping)
            return scenario
        scenario, mapping = known
        update = {"name": name}
        for key in _OWN_CHECK_KEYS:
            if key in values:
                update[key] = self._own_value(fingerprint, mapping, key, values[key], name, written)
        scenario = scenario.model_copy(update=update).read_from(_cell_node(self.base_node, written), self.source)
        self._check_work(fingerprint, scenario)
        self._check_memory(fingerprint, scenario)
        return scenario

    def _check_memory(self, fingerprint: tuple, scenario: Scenario) -> None:
        """Memory depends on the rows of a microbatch and the fewest replicas: checked once per pair."""
        memo = (fingerprint, scenario.batch_size, min(scenario.replica_devices))
        if memo not in self.memory_checked:
            check_scenario_memory(scenario)
            self.memory_checked.add(memo)

    def _own_value(self, fingerprint: tuple, mapping: dict, key: str, value, name: str, written: dict):
        memo = (fingerprint, key, _frozen(value))
        if memo not in self.own_values:
            single = scenario_from_mapping({**copy.deepcopy(mapping), key: copy.deepcopy(value), "name": name},
                                           _cell_node(self.base_node, written), self.source, self.base_dir)
            check_scenario(single)
            self.own_values[memo] = getattr(single, key)
        return self.own_values[memo]

    def _check_work(self, fingerprint: tuple, scenario: Scenario) -> None:
        from simbench.sim.simulate import simulation_rows

        memo = (fingerprint, scenario.device_batch_size, scenario.replica_devices)
        if memo not in self.rows_per_step:  # as check_scenario_work counts them: replicas and their microbatches
            self.rows_per_step[memo] = simulation_rows([spec.plan() for spec in scenario.strategies],
                                                       scenario.dataset.load(), list(scenario.replica_devices),
                                                       scenario.device_batch_size, 1,
                                                       baseline=scenario.baseline.plan())
        rows = scenario.steps * self.rows_per_step[memo]
        if rows > SIMULATED_ROWS_MAX:  # the check's own cost, 10^5 times, would be a third of a dry run
            check_scenario_work(scenario, rows=rows)


def _frozen(value) -> tuple:
    """A value read from YAML as a key of a dict: equal only for equal values of the same types (1, 1.0
    and true stay apart, as a scenario's validation tells them apart)."""
    if type(value) in (str, int, float, bool) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((str(key), _frozen(item)) for key, item in value.items()), key=repr)))
    if isinstance(value, list | tuple):
        return ("list", tuple(_frozen(item) for item in value))
    return (type(value).__name__, repr(value))  # dates and other YAML types


def _cell_mapping(base: dict, values: dict, name: str) -> dict:
    mapping = copy.deepcopy(base)
    mapping["name"] = name
    for key, value in values.items():
        *parents, leaf = key.split(".")
        target = mapping
        for parent in parents:
            target = target.setdefault(parent, {})
            if not isinstance(target, dict):
                raise InputError(f"axis {key!r} goes through {parent!r}, which is not a mapping")
        target[leaf] = copy.deepcopy(value)
    return mapping
