"""Running a sweep: the cells not yet finished in its folder, here one after another or on Dask, each
finished cell recorded in the folder's ledger as it arrives, and the results read back."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from simbench.sweep.cells import SweepCell, cell_seconds
from simbench.sweep.dask_cluster import _run_on_dask, scheduler_address
from simbench.sweep.spec import Sweep
from simbench.sweep.tasks import CellOutcome, _on_one_thread, _outcome, _pack_or_fail, packing_jobs
from simbench.sweep_ledger import FAILURES, RESULTS, SweepLedger, cell_file, kept, read_ledger


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
