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

`spec` reads and checks a sweep file, `cells` makes and validates its cells, `tasks` is the work handed out
(shared packings, batches of cells), `run` runs a sweep into its folder and reads the results back, and
`dask_cluster` runs the tasks on Dask.
"""

from simbench.sweep.cells import (CELL_OVERHEAD_SECONDS, LARGE_CLUSTER_SECONDS, ROWS_PER_SECOND, SweepCell,
                                  cell_seconds)
from simbench.sweep.dask_cluster import SCHEDULER_SCHEMES, SCHEDULER_TIMEOUT_SECONDS, scheduler_address
from simbench.sweep.run import SweepProgress, read_failures, read_results, run_sweep
from simbench.sweep.spec import BUNDLED_FOLDER, CELLS_MAX, SWEEP_KEYS, Sweep, bundled_sweeps, load_sweep
from simbench.sweep.tasks import CellOutcome, PackingFailure, PackingJob, packing_jobs, run_cell, run_cells, run_packing

__all__ = [
    "Sweep", "SweepCell", "SweepProgress", "load_sweep", "bundled_sweeps", "run_sweep", "read_results",
    "read_failures", "cell_seconds", "PackingJob", "PackingFailure", "CellOutcome", "packing_jobs", "run_packing",
    "run_cell", "run_cells", "scheduler_address", "SWEEP_KEYS", "BUNDLED_FOLDER", "CELLS_MAX", "ROWS_PER_SECOND",
    "CELL_OVERHEAD_SECONDS", "LARGE_CLUSTER_SECONDS", "SCHEDULER_SCHEMES", "SCHEDULER_TIMEOUT_SECONDS",
]
