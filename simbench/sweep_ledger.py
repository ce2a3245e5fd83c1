"""A sweep's results folder as a ledger: sweep.json records every cell file and report simbench wrote with
its SHA-256, so that --resume trusts only what it can prove it wrote, and never removes anything else.

    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as root:
    ...     ledger = SweepLedger.open(Path(root, "out"), name="demo", fingerprint="f" * 64, resume=False)
    ...     ledger.write_cell(RESULTS, "cell=00000.parquet", b"rows")
    ...     ledger.save()
    ...     ledger.close()  # the lock: one sweep at a time writes a folder
    ...     sorted(SweepLedger.open(Path(root, "out"), name="demo", fingerprint="f" * 64, resume=True).finished)
    ['cell=00000.parquet']

The folder is checked before any work: not `.`, `..`, the root, a file, a device, the sweep file or a
folder holding it; a non-empty folder only with a sweep.json of the same sweep, and only with --resume;
`results/` and `failures/` folders; no report file changed since simbench wrote it. One sweep at a time
writes a folder (a lock on it).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from simbench.atomic import atomic_file, check_output_folder, file_sha256
from simbench.errors import InputError

LEDGER = "sweep.json"
RESULTS = "results"  # Parquet dataset: one file per finished cell
FAILURES = "failures"  # one JSON file per failed cell: its error
REPORTS = ("summary.md", "scaling.png", "winners.png")
# A report's hash while simbench writes it: recorded before the first report is replaced, so that a sweep
# killed while writing its reports (SIGINT, SIGKILL) resumes and rewrites them instead of taking its own half-
# recorded files for a user's edits.
WRITING = "writing"
LEDGER_VERSION = 1
SAVE_EVERY_SECONDS = 2.0  # a killed sweep loses at most this much of its record: those cells run again
# What simbench writes, and the staging files atomic_file leaves when a process is killed mid-write.
_CELL_FILE = re.compile(r"cell=(\d{5,})\.(parquet|json)")
_STAGING = re.compile(r"\.(cell=\d{5,}\.(?:parquet|json)|sweep\.json|summary\.md|scaling\.png|winners\.png)"
                      r"\.partial-[A-Za-z0-9_]+")


def cell_file(index: int, kind: str) -> str:
    """The name of cell `index`'s file in results/ (kind "parquet") or failures/ (kind "json")."""
    return f"cell={index:05d}.{kind}"


@dataclass
class SweepLedger:
    """What simbench wrote in a sweep folder: file name -> SHA-256, per kind, saved as sweep.json."""

    folder: Path
    name: str
    fingerprint: str
    finished: dict[str, str] = field(default_factory=dict)  # results/ file -> hash
    failed: dict[str, str] = field(default_factory=dict)  # failures/ file -> hash
    reports: dict[str, str] = field(default_factory=dict)  # report file -> hash
    hashes_known: bool = True  # False for a folder an earlier simbench wrote without hashes
    _saved_at: float = 0.0
    _lock: int | None = None
    _exists: bool = False  # sweep.json is on disk: a fresh folder stays empty until a cell is written
    _changed: bool = False  # records not yet saved

    @classmethod
    def open(cls, folder: Path, *, name: str, fingerprint: str, resume: bool, inputs: Iterable = (),
             legacy_fingerprint: Callable[[], dict] | None = None) -> SweepLedger:
        """The ledger of `folder`, checked before any work (see the module's docstring), locked for this
        process; an empty or missing folder starts an empty ledger."""
        folder = _checked_folder(Path(folder), inputs)
        folder.mkdir(parents=True, exist_ok=True)
        lock = _lock(folder)
        try:
            ledger = cls._read(folder, name, fingerprint, resume, legacy_fingerprint)
            ledger._lock = lock
            ledger._check_subfolders()
            ledger._check_reports()
            ledger._remove_staging()
            ledger._exists = ledger.folder.joinpath(LEDGER).exists()
        except BaseException:
            os.close(lock)
            raise
        return ledger

    @classmethod
    def _read(cls, folder: Path, name: str, fingerprint: str, resume: bool,
              legacy_fingerprint: Callable[[], dict] | None) -> SweepLedger:
        ledger_path = folder / LEDGER
        if not any(folder.iterdir()):
            return cls(folder, name, fingerprint)
        if not ledger_path.exists() and not ledger_path.is_symlink():
            raise InputError(f"the folder is not empty and holds no {LEDGER}, so it is no sweep of simbench's; "
                             "choose another --out", source=str(folder))
        record = _read_record(ledger_path)
        if not resume:
            raise InputError("the folder holds an earlier run of a sweep: --resume to finish it, or choose another "
                             "--out", source=str(folder))
        if record.get("ledger") is None and isinstance(record.get("cells"), list):
            # Written by a simbench before the ledger: same cells, but no hashes to trust any file by.
            if legacy_fingerprint is None or record != legacy_fingerprint():
                raise InputError("the folder holds a run of a different sweep (other cells); choose another --out",
                                 source=str(folder))
            return cls(folder, name, fingerprint, hashes_known=False)
        if record.get("fingerprint") != fingerprint:
            raise InputError("the folder holds a run of a different sweep (other cells); choose another --out",
                             source=str(folder))
        return cls(folder, name, fingerprint, *(_hash_table(record, kind, ledger_path)
                                                for kind in ("finished", "failed", "reports")))

    def _check_subfolders(self) -> None:
        for sub in (RESULTS, FAILURES):
            path = self.folder / sub
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                raise InputError(f"{sub} is not a folder (a file or a link): simbench writes its cells there; move "
                                 "it out of the way or choose another --out", source=str(path))

    def _check_reports(self) -> None:
        """A report file is replaced at the end: only if simbench wrote it and nobody changed it since."""
        for name in REPORTS:
            path = self.folder / name
            if not (path.exists() or path.is_symlink()):
                continue
            if path.is_symlink() or not path.is_file():
                raise InputError(f"{name} is not the file simbench wrote (a link or a folder); move it out of the "
                                 "way or choose another --out", source=str(path))
            if self.hashes_known and self.reports.get(name) not in (WRITING, file_sha256(path)):
                raise InputError(f"{name} changed since simbench wrote it (or it did not write it): the report "
                                 "would replace your edits; move it out of the way or choose another --out",
                                 source=str(path))

    def _remove_staging(self) -> None:
        """Half-written files of a process killed mid-write (SIGKILL leaves them): simbench's names only."""
        for sub in ("", RESULTS, FAILURES):
            folder = self.folder / sub
            for path in folder.iterdir() if folder.is_dir() else ():
                if _STAGING.fullmatch(path.name) and path.is_file() and not path.is_symlink():
                    path.unlink()

    def cell_state(self, index: int) -> str | None:
        """None when cell `index` is finished as recorded; else why it must run ("" when it never ran).
        A file at its name that is not a regular file is refused: simbench did not put it there."""
        name = cell_file(index, "parquet")
        path = self.folder / RESULTS / name
        recorded = self.finished.get(name)
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise InputError(f"cell {index}'s file is not a file simbench wrote (a folder or a link): move it out of "
                             "the way, then --resume again", source=str(path))
        if not path.exists():
            return "its file is missing" if recorded is not None else ""
        if recorded is None:
            if not _is_cell_parquet(path, index):
                raise InputError(f"cell {index}'s file is not in sweep.json and holds no rows of cell {index}, so "
                                 "simbench did not write it: move it out of the way, then --resume again",
                                 source=str(path))
            return "its file is not in sweep.json (the run stopped before recording it)"
        if file_sha256(path) != recorded:
            return "its file changed since it was written (damaged, or another cell's)"
        return None

    def clear_failure(self, index: int) -> None:
        """Remove cell `index`'s failure record before it runs again, if simbench wrote it (by its hash);
        refuse to run over one it did not write."""
        name = cell_file(index, "json")
        path = self.folder / FAILURES / name
        if not (path.exists() or path.is_symlink()):
            self.failed.pop(name, None)
            return
        recorded = self.failed.get(name)
        if path.is_symlink() or not path.is_file() or (self.hashes_known and (
                file_sha256(path) != recorded if recorded is not None else not _is_cell_failure(path, index))):
            raise InputError(f"cell {index}'s failure record is not the file simbench wrote (changed since, a "
                             "folder or a link): move it out of the way, then --resume again", source=str(path))
        path.unlink()
        self.failed.pop(name, None)
        self._changed = True

    def write_cell(self, kind: str, name: str, content: bytes) -> None:
        """Write a cell's file atomically and record its hash (saved within SAVE_EVERY_SECONDS)."""
        if not self._exists:
            self.save()  # sweep.json first: a folder with cell files and no ledger would be no sweep's
        with atomic_file(self.folder / kind / name) as temporary:
            temporary.write_bytes(content)
        digest = _sha256(content)
        if kind == RESULTS:
            self.finished[name] = digest
            self.failed.pop(cell_file(int(_CELL_FILE.fullmatch(name).group(1)), "json"), None)
        else:
            self.failed[name] = digest
        self._changed = True
        if time.monotonic() - self._saved_at >= SAVE_EVERY_SECONDS or kind == FAILURES:
            self.save()

    def writing_reports(self) -> None:
        """Say, before any report file is replaced, that simbench is writing them (see WRITING)."""
        self.reports.update(dict.fromkeys(REPORTS, WRITING))
        self.save()

    def record_reports(self, paths: Iterable[Path]) -> None:
        """Record the report files just written, so that the next --resume can tell them from your edits."""
        for path in paths:
            self.reports[Path(path).name] = file_sha256(Path(path))
        for name in [name for name, digest in self.reports.items() if digest == WRITING]:
            if not (self.folder / name).exists():  # not written this time, and none left from before
                del self.reports[name]
        self.save()

    def save(self) -> None:
        record = {"written_by": "simbench", "ledger": LEDGER_VERSION, "name": self.name,
                  "fingerprint": self.fingerprint, "finished": self.finished, "failed": self.failed,
                  "reports": self.reports}
        with atomic_file(self.folder / LEDGER) as temporary:
            temporary.write_text(json.dumps(record, indent=0, sort_keys=True) + "\n", encoding="utf-8")
        self._saved_at = time.monotonic()
        self._exists, self._changed = True, False

    def close(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def read_ledger(folder: Path) -> SweepLedger | None:
    """The ledger of a finished or interrupted sweep (for its report), or None when it has none."""
    path = Path(folder) / LEDGER
    try:
        record = _read_record(path)
    except InputError:
        return None
    if record.get("ledger") is None:
        return None
    return SweepLedger(Path(folder), record.get("name", ""), record.get("fingerprint", ""),
                       *(_hash_table(record, kind, path) for kind in ("finished", "failed", "reports")))


def _checked_folder(folder: Path, inputs: Iterable) -> Path:
    if folder.is_symlink() and not folder.exists():
        raise InputError(f"--out is a symbolic link to nothing ({os.readlink(folder)}); give a folder",
                         source=str(folder))
    target = check_output_folder(folder, inputs=inputs)
    if target.exists() and not target.is_dir():
        raise InputError("--out is a file (or a device), not a folder: a sweep writes a folder of results; choose "
                         "another --out", source=str(folder))
    blocking = next((parent for parent in target.parents if parent.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise InputError(f"cannot create the folder: {blocking} is a file; choose another --out", source=str(folder))
    return target


def _read_record(path: Path) -> dict:
    from simbench.errors import read_text_file

    try:
        record = json.loads(read_text_file(path, LEDGER))
    except InputError as error:
        raise InputError(f"{error.message}: this is no sweep folder simbench can resume; choose another --out",
                         source=str(path)) from None
    except (ValueError, RecursionError) as error:
        raise InputError(f"not the JSON simbench writes ({error}): this is no sweep folder simbench can resume; "
                         "choose another --out", source=str(path)) from None
    if not isinstance(record, dict):
        raise InputError("not the ledger simbench writes (a JSON object): this is no sweep folder simbench can "
                         "resume; choose another --out", source=str(path))
    return record


def _hash_table(record: dict, kind: str, path: Path) -> dict[str, str]:
    table = record.get(kind, {})
    if not isinstance(table, dict) or not all(isinstance(key, str) and isinstance(value, str)
                                              for key, value in table.items()):
        raise InputError(f"`{kind}` is not the table of files and hashes simbench writes; this is no sweep folder "
                         "simbench can resume; choose another --out", source=str(path))
    return dict(table)


def _lock(folder: Path) -> int:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise InputError("another simbench sweep is writing this folder now; wait for it or choose another --out",
                         source=str(folder)) from None
    return descriptor


def _sha256(content: bytes) -> str:
    import hashlib

    return hashlib.sha256(content).hexdigest()


@contextmanager
def kept(ledger: SweepLedger):
    """The ledger saved whatever happens (Ctrl-C and SIGTERM included; none if nothing was written), then
    unlocked."""
    try:
        yield ledger
    finally:
        try:
            if ledger._changed:
                ledger.save()
        finally:
            ledger.close()


def _is_cell_parquet(path: Path, index: int) -> bool:
    """Whether a results file holds rows of cell `index` and nothing else: what simbench writes there."""
    try:
        import pyarrow.parquet

        cells = pyarrow.parquet.read_table(path, columns=["cell"]).column("cell").to_pylist()
    except Exception:  # noqa: BLE001 - any unreadable file is no cell's (pyarrow raises many kinds)
        return False
    return bool(cells) and set(cells) == {index}


def _is_cell_failure(path: Path, index: int) -> bool:
    try:
        record = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(record, dict) and record.get("cell") == index and "error" in record
