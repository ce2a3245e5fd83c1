r"""Atomic writes: a report folder or a single file appears whole or not at all, so a failed or
interrupted run never leaves a half-written file over a good one, and never deletes what a user wrote.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from simbench.atomic import atomic_directory, atomic_file
    >>> with tempfile.TemporaryDirectory() as root:
    ...     with atomic_directory(Path(root, "report")) as folder:  # a hidden sibling until the block ends
    ...         _ = (folder / "scaling.csv").write_text("devices,speedup\n1,2.18\n")
    ...     with atomic_file(Path(root, "lengths.txt")) as temporary:
    ...         _ = temporary.write_text("3\n5\n")
    ...     sorted(str(path.relative_to(root)) for path in Path(root).rglob("*"))
    ['lengths.txt', 'report', 'report/.simbench-folder.json', 'report/scaling.csv']

A folder is only ever replaced when it is empty or when simbench wrote all of it: every folder it
writes carries a marker listing its files, and a folder holding anything else is refused by name.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from simbench.errors import InputError

# Written only by simbench, last, into every folder it writes: what it wrote and with which version.
MARKER = ".simbench-folder.json"
_STAGING_KINDS = ("partial", "old")
_LISTED_FOREIGN_FILES = 5


def resolve_output_folder(target: Path, option: str = "--out") -> Path:
    """The folder a write to `target` really replaces: through a symbolic link (the link stays a link),
    never `.`, `..` or the root, and a name the file system can hold."""
    target = Path(target)
    if target.name in ("", ".", "..") or target.absolute() == Path(target.absolute().anchor):
        raise InputError(f"{option} must name a folder to create or replace, not {str(target)!r}", source=str(target))
    try:
        return target.resolve() if target.is_symlink() else target.absolute()
    except OSError as error:
        raise InputError(f"unusable {option}: {error.strerror}", source=str(target)) from None


def check_owned_folder(target: Path, option: str = "--out") -> None:
    """Refuse to replace a folder that is not empty and was not written whole by simbench."""
    try:
        entries = [path for path in Path(target).rglob("*") if path.is_file() or path.is_symlink()]
    except OSError as error:
        raise InputError(f"cannot read the folder: {error.strerror}; choose another {option}",
                         source=str(target)) from None
    if not entries and not any(Path(target).iterdir()):
        return
    listed = _marker_files(Path(target))
    if listed is None:
        raise InputError(f"the folder is not empty and holds no {MARKER}, so simbench did not write it and will "
                         f"not replace it; choose another {option}", source=str(target))
    foreign = sorted(str(path.relative_to(target)) for path in entries
                     if path.name != MARKER and str(path.relative_to(target)) not in listed)
    if foreign:
        names = ", ".join(foreign[:_LISTED_FOREIGN_FILES]) + (" ..." if len(foreign) > _LISTED_FOREIGN_FILES else "")
        raise InputError(f"the folder holds {len(foreign)} file(s) simbench did not write ({names}); move them out "
                         f"or choose another {option}", source=str(target))


def _marker_files(folder: Path) -> set[str] | None:
    try:
        record = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        return set(record["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextmanager
def atomic_directory(target: Path, option: str = "--out", metadata: dict | None = None) -> Iterator[Path]:
    """Yield an empty sibling folder of `target`; on success it replaces `target`, on any failure
    (KeyboardInterrupt and SIGTERM included) it is deleted and `target` is left as it was.

    Writers of one parent folder take turns (a lock on the parent), so two runs with the same `--out`
    never interleave; leftovers of runs killed outright are swept while the lock is held.
    """
    from simbench import __version__

    target = resolve_output_folder(target, option)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _parent_lock(target.parent), _sigterm_as_exit():
        _sweep_leftovers(target)
        if target.is_dir():
            check_owned_folder(target, option)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        try:
            staging.chmod(0o777 & ~_umask())  # mkdtemp makes folders private; give the usual mode
            yield staging
            files = sorted(str(path.relative_to(staging)) for path in staging.rglob("*") if path.is_file())
            record = {"written_by": "simbench", "version": __version__, **(metadata or {}), "files": files}
            (staging / MARKER).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            _swap_into_place(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


@contextmanager
def _parent_lock(folder: Path) -> Iterator[None]:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


@contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """A polite kill (SIGTERM) unwinds like Ctrl-C, so the staging folder is removed, not left behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_on_sigterm(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _sweep_leftovers(target: Path) -> None:
    # Only called under the parent's lock, so no live writer owns these folders. A run killed between
    # moving the old report aside and moving the new one in leaves the old one as the only whole copy:
    # put it back rather than delete it.
    leftovers = {kind: sorted(path for path in target.parent.iterdir()
                              if path.name.startswith(f".{target.name}.{kind}-") and path.is_dir()
                              and not path.is_symlink())
                 for kind in _STAGING_KINDS}
    if not target.exists() and leftovers["old"]:
        leftovers["old"].pop().rename(target)
    for leftover in leftovers["partial"] + leftovers["old"]:
        shutil.rmtree(leftover, ignore_errors=True)


def _swap_into_place(staging: Path, target: Path) -> None:
    # Linux has no portable atomic exchange of two folders: move the old one aside first, so that at
    # every moment either the old or the new report is complete under some name.
    if not target.exists():
        staging.rename(target)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    retired.rmdir()
    target.rename(retired)
    try:
        staging.rename(target)
    except BaseException:
        retired.rename(target)
        raise
    shutil.rmtree(retired, ignore_errors=True)


@contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; whatever is written there replaces `path` on success.

    Through a symbolic link the file behind it is replaced and the link stays; a device, FIFO or socket
    at `path` is refused (as root, replacing /dev/null would break the machine).
    """
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    if path.exists() and not path.is_file() and not path.is_dir():  # a folder fails as it always did
        raise InputError("the output is not a regular file (a device, FIFO or socket); simbench writes only "
                         "regular files", source=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.partial-", dir=path.parent)
    os.close(descriptor)
    try:
        os.chmod(temporary, 0o666 & ~_umask())
        yield Path(temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
