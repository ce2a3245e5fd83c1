"""The work a sweep hands out: packings shared by the cells that need them (`PackingJob`) and cells run in
batches, each finished cell's rows as Parquet bytes or its failure record (`CellOutcome`)."""

from __future__ import annotations

import hashlib
import json
import traceback
from dataclasses import dataclass
from typing import Any

from simbench.scenario import Scenario
from simbench.strategies.packing import PackOptions
from simbench.sweep.cells import SweepCell


@dataclass(frozen=True)
class PackingJob:
    """One packing shared by the cells that simulate it."""

    dataset: str  # the DatasetSpec as JSON: histogram and max length
    packer: str
    max_depth: int | None
    options: PackOptions  # as the cell's own run would pack: `simulate.packing_call`
    with_bound: bool

    @property
    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:16]


def packing_jobs(cell: SweepCell) -> list[PackingJob]:
    """The packings `cell` needs (one per packing plan), as shareable jobs: each made as the cell's own run makes
    it (`simulate.packing_call`)."""
    from simbench.resolved import scenario_plans
    from simbench.sim.simulate import packing_call

    scenario = cell.scenario
    dataset, histogram = scenario.dataset.model_dump_json(), scenario.dataset.load()
    microbatches = scenario.parallel.microbatches if scenario.parallel is not None else 1
    jobs = []
    for plan in scenario_plans(scenario, histogram):
        call = packing_call(plan, histogram, batch_size=scenario.device_batch_size, microbatches=microbatches,
                            seed=scenario.seed, attention_parity=lambda: _attention_parity(scenario))
        if call is not None:
            jobs.append(PackingJob(dataset, *call, scenario.outputs.lp_bounds))
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
    from simbench.strategies.evaluation import bound_depth, is_bounded
    from simbench.strategies.optimal import lp_lower_bound

    histogram = DatasetSpec.model_validate_json(job.dataset).load()
    packing = get_strategy(job.packer)(histogram, histogram.max_length, job.max_depth, job.options)
    if not (job.with_bound and is_bounded(packing, histogram.max_length)):
        return packing, None
    return packing, lp_lower_bound(histogram, histogram.max_length, bound_depth(packing)).lower_bound_packs


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
    from simbench.plugins import calls_for

    with calls_for(cell.label):  # a plug-in call stuck in C code ends this process naming the cell
        return _cell_outcome(cell, packings)


def _cell_outcome(cell: SweepCell, packings: dict[str, Any]) -> CellOutcome:
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


def _failure_record(cell: SweepCell, error: BaseException) -> dict:
    return {"cell": cell.index, "values": json.loads(json.dumps(cell.values, default=str)),
            "error": f"{type(error).__name__}: {error}", "traceback": "".join(traceback.format_exception(error))}
