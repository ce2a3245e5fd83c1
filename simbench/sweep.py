"""Design-space sweeps: a base scenario and axes of values, every cell (a combination of values) run as
a scenario, serially or on a Dask cluster, results written as one Parquet dataset while cells finish.

A sweep file::

    name: context-vs-scale
    base: {dataset: {histogram: squad_1_1_384}, strategies: [spfhp:3, unpad], steps: 20}
    axes:                        # every combination; dotted keys reach into the scenario
      model: [bert-base, bert-large]
      devices: [1, 8, 64]        # a number is one device count; a list, several
    cells: [{model: bert-base, batch_size: 64}]   # optional: explicit cells besides the product
    report: {x: devices, y: model}                # axes of the winner heatmap

Packing is shared: each distinct (histogram, packer, depth, seed, batch size) is packed once, its LP
bound computed once, and handed to every cell that simulates it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import json
import logging
import os
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from simbench.errors import InputError, read_text_file
from simbench.scenario import Scenario, check_scenario_memory, check_scenario_work, scenario_from_mapping
from simbench.strategies.packing import PackOptions
from simbench.sweep_ledger import FAILURES, RESULTS, SweepLedger, cell_file, kept, read_ledger
from simbench.validation import SIMULATED_ROWS_MAX
from simbench.yamlfile import load_yaml_documents

SWEEP_KEYS = ("name", "base", "axes", "cells", "report")
BUNDLED_FOLDER = "scenarios/sweeps"
CELLS_MAX = 100_000
# The dry run's estimate, an order of magnitude: rows drawn and priced per second and worker, the fixed
# cost of a cell (running the experiment, fits, writing) and, per strategy, of each device count past
# simulate.PER_DEVICE_MAX (the order-statistics engine's draws). The bundled 200-cell context-vs-scale
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


def cell_seconds(cell: SweepCell) -> float:
    """A cell's work in nominal seconds: the rows it draws and prices at `ROWS_PER_SECOND`, plus a fixed cost.
    Cells differ by orders of magnitude (one device or 524,288), so a sweep's progress is measured in it."""
    from simbench.sim.simulate import PER_DEVICE_MAX

    scenario = cell.scenario
    # With a layout the simulator's devices are replicas, each drawing every microbatch's rows.
    rows = len(scenario.strategies) * scenario.steps * scenario.device_batch_size * len(scenario.replica_devices)
    large = sum(devices > PER_DEVICE_MAX for devices in scenario.replica_devices)
    return rows / ROWS_PER_SECOND + CELL_OVERHEAD_SECONDS + LARGE_CLUSTER_SECONDS * len(scenario.strategies) * large


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
# Scenario keys whose checks look at the value alone (and at the simulation's work, checked per cell): cells
# that differ from a validated one only in these are checked one new value at a time, not as new scenarios.
_OWN_CHECK_KEYS = ("seed", "steps", "batch_size", "devices", "training_steps", "shapes")


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
            where = ", ".join(f"{key}={value}" for key, value in values.items())
            # Every error of the cell, not the first alone: a sweep file has no `validate` to list the rest.
            problems = "; ".join(each.message for each in getattr(error, "errors", [error]))
            raise InputError(f"cell {index} ({where}): {problems}", source=self.source,
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
            self.scenarios[fingerprint] = (scenario, mapping)
            return scenario
        scenario, mapping = known
        update = {"name": name}
        for key in _OWN_CHECK_KEYS:
            if key in values:
                update[key] = self._own_value(fingerprint, mapping, key, values[key], name, written)
        scenario = scenario.model_copy(update=update)
        self._check_work(fingerprint, scenario, written)
        self._check_memory(fingerprint, scenario, written)
        return scenario

    def _check_memory(self, fingerprint: tuple, scenario: Scenario, written: dict) -> None:
        """Memory depends on the rows of a microbatch and the fewest replicas: checked once per pair."""
        memo = (fingerprint, scenario.batch_size, min(scenario.replica_devices))
        if memo not in self.memory_checked:
            check_scenario_memory(scenario, _cell_node(self.base_node, written), self.source)
            self.memory_checked.add(memo)

    def _own_value(self, fingerprint: tuple, mapping: dict, key: str, value, name: str, written: dict):
        memo = (fingerprint, key, _frozen(value))
        if memo not in self.own_values:
            single = scenario_from_mapping({**copy.deepcopy(mapping), key: copy.deepcopy(value), "name": name},
                                           _cell_node(self.base_node, written), self.source, self.base_dir)
            self.own_values[memo] = getattr(single, key)
        return self.own_values[memo]

    def _check_work(self, fingerprint: tuple, scenario: Scenario, written: dict) -> None:
        from simbench.sim.simulate import simulation_rows

        memo = (fingerprint, scenario.device_batch_size, scenario.replica_devices)
        if memo not in self.rows_per_step:  # as check_scenario_work counts them: replicas and their microbatches
            self.rows_per_step[memo] = simulation_rows([spec.plan() for spec in scenario.strategies],
                                                       scenario.dataset.load(), list(scenario.replica_devices),
                                                       scenario.device_batch_size, 1,
                                                       baseline=scenario.baseline.plan())
        rows = scenario.steps * self.rows_per_step[memo]
        if rows > SIMULATED_ROWS_MAX:  # the check's own cost, 10^5 times, would be a third of a dry run
            check_scenario_work(scenario, _cell_node(self.base_node, written), self.source, rows=rows)


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


def _product_size(axes: dict) -> int:
    size = 1
    for values in axes.values():
        size *= len(values)
    return size


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


# Running


@dataclass(frozen=True)
class PackingJob:
    """One packing shared by the cells that simulate it."""

    dataset: str  # the DatasetSpec as JSON: histogram and max length
    packer: str
    max_depth: int | None
    options: PackOptions  # as the cell's own run would pack: `simulate.pack_options`
    with_bound: bool

    @property
    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:16]


def packing_jobs(cell: SweepCell) -> list[PackingJob]:
    """The packings `cell` needs (one per packing plan), as shareable jobs."""
    from simbench.resolved import scenario_plans
    from simbench.sim.simulate import pack_options

    scenario = cell.scenario
    dataset = scenario.dataset.model_dump_json()
    microbatches = scenario.parallel.microbatches if scenario.parallel is not None else 1
    jobs = []
    for plan in scenario_plans(scenario):
        request = plan.source.packing_request(plan)
        if request is not None:
            own = plan.source.packing_options(plan, scenario.dataset.load(), scenario.device_batch_size, microbatches)
            options = pack_options(request[0], seed=scenario.seed, batch_size=scenario.device_batch_size,
                                   attention_parity=lambda: _attention_parity(scenario), **own)
            jobs.append(PackingJob(dataset, request[0], request[1], options, scenario.outputs.lp_bounds))
    return jobs


# A cost model's attention parity by what it is built from (model, hardware, layout): built once per process.
_ATTENTION_PARITY: dict[str, float | None] = {}


def _attention_parity(scenario: Scenario) -> float | None:
    """The attention parity of the cost model the scenario's own run builds (`resolved.scenario_cost_model`)."""
    from simbench.resolved import scenario_cost_model

    key = json.dumps(scenario.model_dump(mode="json", include={"model", "hardware", "cost_model", "gpus_per_replica",
                                                               "parallel"}), sort_keys=True)
    if key not in _ATTENTION_PARITY:
        _ATTENTION_PARITY[key] = scenario_cost_model(scenario).attention_parity_tokens
    return _ATTENTION_PARITY[key]


def run_packing(job: PackingJob):
    """Pack once (and bound once, if asked): (Packing, LP bound in packs or None)."""
    from simbench.scenario import DatasetSpec
    from simbench.strategies import get_strategy
    from simbench.strategies.optimal import lp_lower_bound

    histogram = DatasetSpec.model_validate_json(job.dataset).load()
    packing = get_strategy(job.packer)(histogram, histogram.max_length, job.max_depth, job.options)
    bound = lp_lower_bound(histogram, histogram.max_length, job.max_depth).lower_bound_packs if job.with_bound else None
    return packing, bound


def run_cell(cell: SweepCell, packings: dict[str, Any]):
    """One cell's rows: a row per strategy and device count, with the cell's axis values and seed."""
    import pandas as pd

    from simbench import __version__
    from simbench.experiment import run_experiment

    scenario = cell.scenario.model_copy(update={"outputs": cell.scenario.outputs.model_copy(
        update={"lp_bounds": False})})  # bounds are the packing jobs' work, done once per packing
    shared = {f"shared-{index}": packing for index, (packing, _) in enumerate(packings.values())}
    # A cell reports no Gumbel fits and no assumption table: the sweep's axes are its sensitivity study.
    result = run_experiment(scenario, packings=shared, stragglers=False, assumptions=False)
    rows = result.scaling.copy()
    bounds = {(packing.strategy, packing.max_depth): bound for packing, bound in packings.values()}
    if not result.packing.empty:
        rows["packs"] = rows["strategy"].map(result.packing.set_index("label")["packs"])
    rows["lp_bound_packs"] = [bounds.get((packer, None if pd.isna(depth) else int(depth)))
                              if isinstance(packer, str) else None
                              for packer, depth in zip(rows["packer"], rows["max_depth"])]
    rows.insert(0, "cell", cell.index)
    swept = [(key, value) for key, value in cell.values.items() if key not in rows.columns]  # devices already is
    for position, (key, value) in enumerate(swept, start=1):
        rows.insert(position, key, _cell_value(value))
    # Comparable across cells of different layouts: what a device is (devices count replicas, `gpus` all GPUs).
    layout = scenario.layout
    settings = {} if layout is None else _layout_columns(layout, rows["devices"])
    for position, (key, value) in enumerate(settings.items(), start=1 + len(swept)):
        rows.insert(position, key, value)
    rows.insert(rows.columns.get_loc("gpus"), "gpus_per_replica", scenario.gpus_per_device)
    rows["seed"] = scenario.seed
    rows["simbench_version"] = __version__
    return rows


def _cell_value(value):
    """A value as a Parquet column holds it: lists and mappings as JSON."""
    return json.dumps(value) if isinstance(value, list | tuple | dict) else value


def _layout_columns(layout, replicas) -> dict[str, Any]:
    """A cell's 4D layout as columns: each `parallel` setting, `dp` as each row's replica count."""
    from dataclasses import asdict

    columns = {key: _cell_value(value) for key, value in asdict(layout).items()}
    columns["dp"] = replicas.to_numpy()
    return columns


@dataclass(frozen=True)
class CellOutcome:
    """A finished cell as the process that writes the results receives it: its Parquet file's bytes, or
    its failure record (both made where the cell ran, so that the writer only writes)."""

    parquet: bytes | None = None
    failure: dict | None = None


def run_cells(cells: list[SweepCell], packings: dict[str, Any]) -> list[CellOutcome]:
    """Several cells in turn (one Dask task): fewer, larger tasks keep the scheduler's share small."""
    with _on_one_thread():
        return [_outcome(cell, packings) for cell in cells]


def _on_one_thread():
    """Cells run their linear algebra on one thread, here and on every worker: a least-squares fit's last
    bits depend on how many threads shared it, and a worker is one core (forked workers would otherwise
    inherit this process's thread pool, whose threads contend with the other workers for the same cores)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


@dataclass(frozen=True)
class PackingFailure:
    """A packing that raised: every cell that needs it fails with its error (as on Dask, where the cells'
    task fails with the packing task it waits for)."""

    error: Exception


def _pack_or_fail(job: PackingJob):
    try:
        return run_packing(job)
    except Exception as error:  # noqa: BLE001 - recorded in each cell that needs it, the sweep goes on
        return PackingFailure(error)


def _outcome(cell: SweepCell, packings: dict[str, Any]) -> CellOutcome:
    import io

    failed = next((packings[job.key] for job in packing_jobs(cell)
                   if isinstance(packings[job.key], PackingFailure)), None)
    if failed is not None:
        return CellOutcome(failure=_failure_record(cell, failed.error))
    try:
        rows = run_cell(cell, {job.key: packings[job.key] for job in packing_jobs(cell)})
    except Exception as error:  # noqa: BLE001 - a failing cell is recorded, the sweep goes on
        return CellOutcome(failure=_failure_record(cell, error))
    parquet = io.BytesIO()
    rows.to_parquet(parquet, index=False)
    return CellOutcome(parquet=parquet.getvalue())


@dataclass(frozen=True)
class SweepProgress:
    """Where a sweep stands. In the "packing" phase (cells run here, in turn: their shared packings come
    first), `done` and `total` count packings; in the "cells" phase, cells (those of an earlier run resumed
    included in `done`)."""

    done: int
    failed: int
    total: int
    elapsed_seconds: float
    phase: str = "cells"
    finished_work: float = 0.0  # nominal seconds (`cell_seconds`) of the cells timed so far
    remaining_work: float = 0.0  # nominal seconds of the cells still to run
    cells_seconds: float = 0.0  # wall seconds the cells timed so far took

    @property
    def remaining_seconds(self) -> float | None:
        """Calibrated on the cells timed so far: their wall seconds per nominal second of work, times the
        work left; None before any is timed."""
        if self.phase != "cells" or self.finished_work <= 0:
            return None
        return self.cells_seconds / self.finished_work * self.remaining_work


def run_sweep(sweep: Sweep, out: Path, *, workers: int | None = None, scheduler: str | None = None,
              resume: bool = False, progress: Callable[[SweepProgress], None] | None = None,
              note: Callable[[str], None] = lambda message: None) -> Path:
    """Run every cell not already finished in `out`, writing each cell's rows as it finishes and recording
    it, with its hash, in `out`/sweep.json (see `simbench.sweep_ledger`).

    Before any work: the scheduler's address and the folder are checked. With `resume`, a cell runs again
    when its file is missing, damaged, another cell's or unrecorded; `note` is told which and why.
    `workers=0` runs in this process, one cell after another; otherwise on a Dask cluster: the one at
    `scheduler` (or DASK_SCHEDULER_ADDRESS), else a local one of `workers` processes (default: one per core).
    A failing cell (or the packing it needs) is recorded in `out`/failures either way; the sweep goes on.
    `progress` hears of each packing made here and each cell finished (`SweepProgress`).
    """
    address = scheduler_address(scheduler)
    ledger = SweepLedger.open(Path(out), name=sweep.name, fingerprint=_fingerprint(sweep), resume=resume,
                              inputs=[sweep.source, *sweep.input_files()])
    with kept(ledger):
        todo = _cells_to_run(sweep, ledger, note)
        jobs = {job.key: job for cell in todo for job in packing_jobs(cell)}
        start = time.perf_counter()
        counts = {"done": len(sweep.cells) - len(todo), "failed": 0, "finished_work": 0.0,
                  "remaining_work": sum(cell_seconds(cell) for cell in todo)}
        tell = progress or (lambda state: None)

        def finished(cell: SweepCell, outcome: CellOutcome, at: float | None = None) -> None:
            """`cell` is done; `at`: when its task finished (the cells of one Dask task finish together)."""
            if outcome.failure is None:
                ledger.write_cell(RESULTS, cell_file(cell.index, "parquet"), outcome.parquet)
                counts["done"] += 1
            else:
                ledger.write_cell(FAILURES, cell_file(cell.index, "json"),
                                  json.dumps(outcome.failure, indent=1).encode())
                counts["failed"] += 1
            work = cell_seconds(cell)
            counts["finished_work"] += work
            counts["remaining_work"] = max(counts["remaining_work"] - work, 0.0)
            now = time.perf_counter() if at is None else at
            # Timed from the first cells to finish: a worker's first task also pays for its start (imports, the
            # first packings), once, where the later cells show the rate at which the rest will go.
            first = counts.setdefault("first", now)
            if now == first:
                counts["first_work"] = counts["finished_work"]
            tell(SweepProgress(counts["done"], counts["failed"], len(sweep.cells), now - start, "cells",
                               counts["finished_work"] - counts["first_work"], counts["remaining_work"], now - first))

        if not todo:
            return Path(out)
        if workers == 0 and address is None:
            packed = {}
            for number, (key, job) in enumerate(jobs.items(), start=1):
                packed[key] = _pack_or_fail(job)
                tell(SweepProgress(number, 0, len(jobs), time.perf_counter() - start, "packing"))
            with _on_one_thread():
                for cell in todo:
                    finished(cell, _outcome(cell, packed))
            return Path(out)
        _run_on_dask(todo, jobs, finished, workers, address)
    return Path(out)

def _cells_to_run(sweep: Sweep, ledger: SweepLedger, note: Callable[[str], None]) -> list[SweepCell]:
    """The cells without a finished file recorded in the ledger; each one that had a file is named with the
    reason, and each one's earlier failure record removed (if simbench wrote it)."""
    todo, reasons = [], {}
    for cell in sweep.cells:
        reason = ledger.cell_state(cell.index)
        if reason is None:
            continue
        todo.append(cell)
        if reason:
            reasons.setdefault(reason, []).append(cell.index)
    for cell in todo:
        ledger.clear_failure(cell.index)
    for reason, cells in reasons.items():
        shown = ", ".join(map(str, cells[:10])) + (f" and {len(cells) - 10} more" if len(cells) > 10 else "")
        note(f"{ledger.folder / RESULTS}: {reason}: running {'cell' if len(cells) == 1 else 'cells'} {shown} "
             "again")
    return todo


def _fingerprint(sweep: Sweep) -> str:
    """What makes two runs the same sweep: its name and every cell's resolved scenario."""
    import hashlib

    digest = hashlib.sha256(json.dumps(sweep.name).encode())
    for cell in sweep.cells:
        digest.update(json.dumps(cell.scenario.model_dump(mode="json"), sort_keys=True).encode())
    return digest.hexdigest()


# Where a Dask scheduler can be: an address of one of these transports, host and port.
SCHEDULER_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss")
_SCHEDULER_ADDRESS = re.compile(r"(?:(?P<scheme>[a-z]+)://)?(?P<host>\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.-]+)"
                                r":(?P<port>\d{1,5})")
SCHEDULER_TIMEOUT_SECONDS = 5


def scheduler_address(scheduler: str | None) -> tuple[str, str] | None:
    """The Dask scheduler to use, (address, where it was given), from `scheduler` or DASK_SCHEDULER_ADDRESS;
    None for a local cluster. Its form is checked here, before any connection or work."""
    if scheduler is not None:
        address, origin = scheduler, "--scheduler"
    elif os.environ.get("DASK_SCHEDULER_ADDRESS") is not None:
        address, origin = os.environ["DASK_SCHEDULER_ADDRESS"], "DASK_SCHEDULER_ADDRESS"
    else:
        return None
    match = _SCHEDULER_ADDRESS.fullmatch(address.strip())
    if (address.strip().startswith("inproc://") and len(address.strip()) > len("inproc://")) or (
            match and (match["scheme"] is None or match["scheme"] in SCHEDULER_SCHEMES)
            and 1 <= int(match["port"]) <= 65_535):
        return address.strip(), origin
    raise InputError(f"{origin} must be a Dask scheduler's address, [{'|'.join(SCHEDULER_SCHEMES)}://]HOST:PORT such "
                     f"as tcp://10.0.0.5:8786, found {address!r}"
                     + ("; correct it, or unset it to run on this machine" if origin != "--scheduler" else ""))


def _connect(address: tuple[str, str]):
    from distributed import Client

    where, origin = address
    try:
        return Client(where, timeout=SCHEDULER_TIMEOUT_SECONDS)
    except (OSError, TimeoutError, ValueError, TypeError) as error:
        unset = " and unset DASK_SCHEDULER_ADDRESS" if origin == "DASK_SCHEDULER_ADDRESS" else ""
        raise InputError(f"cannot reach the Dask scheduler at {where} (from {origin}) within "
                         f"{SCHEDULER_TIMEOUT_SECONDS} s ({type(error).__name__}: {error}): start it "
                         f"(`dask scheduler`) or correct the address; or leave out --scheduler{unset} to run on "
                         "this machine (--workers N)") from None



def _run_on_dask(todo, jobs, finished, workers, address) -> None:
    try:
        import distributed  # noqa: F401
        from distributed import Client, as_completed
    except ImportError:
        raise InputError("sweeps on Dask need the extra: pip install 'simbench-seq[sweep]' (or --workers 0 to run "
                         "the cells one after another here)") from None
    from simbench.workers import sigint_held

    # Ctrl-C is for this process alone, which ends the cluster: the threads the cluster starts here inherit
    # SIGINT blocked, and so does every worker process they fork, which would otherwise run this process's
    # handler and print its traceback (a worker's "Process Dask Worker process (from Nanny)").
    with sigint_held():
        client = _connect(address) if address is not None else Client(_local_cluster(workers))
    # Here as in a local cluster's processes (`_local_cluster`), Dask's own messages below CRITICAL are for no one
    # while the sweep runs: a cell's failure is recorded with its traceback, and a cluster shut down by Ctrl-C
    # or a lost scheduler logs lost connections and cancelled tasks.
    silenced = contextlib.ExitStack()
    silenced.enter_context(_dask_logs_silenced())
    try:
        packed = {key: client.submit(run_packing, job, key=f"pack-{key}", pure=False) for key, job in jobs.items()}
        tasks = {}
        for number, batch in enumerate(_batches(todo, sum(client.nthreads().values()))):
            needed = {job.key: packed[job.key] for cell in batch for job in packing_jobs(cell)}
            tasks[client.submit(run_cells, batch, needed, key=f"cells-{number}-{batch[0].index}", pure=False)] = batch
        for future in as_completed(tasks):
            batch, at = tasks[future], time.perf_counter()
            if future.status == "error":  # the task itself failed (a worker lost, say): every cell of it did
                outcomes = [CellOutcome(failure=_failure_record(cell, future.exception())) for cell in batch]
            else:
                outcomes = future.result()
            for cell, outcome in zip(batch, outcomes):
                finished(cell, outcome, at)
    finally:
        cluster = client.cluster
        client.close()
        if cluster is not None:
            cluster.close()
        silenced.close()


@contextlib.contextmanager
def _dask_logs_silenced():
    """Dask's log handlers in this process (its logging configuration's) raised to CRITICAL, then put back."""
    handlers = [handler for handler in logging.getLogger("distributed").handlers
                if isinstance(handler, logging.StreamHandler)]
    levels = [handler.level for handler in handlers]
    for handler in handlers:
        handler.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for handler, level in zip(handlers, levels):
            handler.setLevel(level)


def _local_cluster(workers: int | None):
    """A cluster of `workers` processes (default: one per core), one thread each, no dashboard, and no logging of
    Dask's own below CRITICAL (see `_run_on_dask`)."""
    import sys

    import dask
    from distributed import LocalCluster

    # Dask sets MALLOC_TRIM_THRESHOLD_ for the workers it spawns, in this process's environment too, so
    # every process spawned from here later inherits it: it fixes glibc's mmap threshold at 128 KiB, every
    # array a cell allocates is then mapped and zeroed afresh, and a spawned worker's cell took twice the CPU.
    settings = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                # Leave the cores to the cells: no sampling profiler in the workers, and the event loops'
                # health checks less often (together 0.08 s of CPU per second idle, 0.02 without).
                "distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
                "distributed.admin.system-monitor.interval": "5s"}
    if sys.platform == "linux":
        # Forked workers start with what this process imported (the cell's modules, below) instead of each
        # importing them again: 2.3 s of CPU to start two spawned workers, 0.1 s forked.
        import simbench.experiment  # noqa: F401 - cells fit no Gumbels, so scipy.stats is not needed
        settings["distributed.worker.multiprocessing-method"] = "fork"
    with dask.config.set(settings):
        return LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                            dashboard_address=None, silence_logs=logging.CRITICAL)


def _batches(cells: list[SweepCell], slots: int) -> list[list[SweepCell]]:
    """Consecutive cells (which share packings) in tasks of a quarter of each slot's share of what is left:
    large at first, so the scheduler handles few, and small at the end, so no worker waits long for another."""
    batches, start = [], 0
    while start < len(cells):
        size = max(1, (len(cells) - start) // (4 * max(slots, 1)))
        batches.append(cells[start:start + size])
        start += size
    return batches


def _failure_record(cell: SweepCell, error: BaseException) -> dict:
    return {"cell": cell.index, "values": json.loads(json.dumps(cell.values, default=str)),
            "error": f"{type(error).__name__}: {error}", "traceback": "".join(traceback.format_exception(error))}


def read_results(out: Path):
    """Every finished cell's rows, in cell order (the same whatever the number of workers): the files the
    folder's ledger records, with the hashes it records (others are no results of this sweep)."""
    import pandas as pd

    files = _recorded(Path(out), RESULTS, "parquet")
    if not files:
        return pd.DataFrame()
    frame = pd.concat([pd.read_parquet(file) for file in files], ignore_index=True)
    return frame.sort_values(["cell", "strategy", "devices"], kind="stable").reset_index(drop=True)


def read_failures(out: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in _recorded(Path(out), FAILURES, "json")]


def _recorded(out: Path, kind: str, suffix: str) -> list[Path]:
    from simbench.atomic import file_sha256

    ledger = read_ledger(out)
    files = sorted((out / kind).glob(f"cell=*.{suffix}"))
    if ledger is None:
        return files
    table = ledger.finished if kind == RESULTS else ledger.failed
    return [path for path in files if path.is_file() and table.get(path.name) == file_sha256(path)]
