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
import hashlib
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


def check_output_file(path: Path, *, inputs=(), force: bool = False, option: str = "-o") -> Path:
    """Refuse, before any work, a file output that would destroy something: one of the command's `inputs`
    (the same file under any name: through symbolic or hard links), a folder, a device, FIFO or socket, or
    (unless `force`) any existing file or link, whoever wrote it.

        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as root:
        ...     _ = Path(root, "lengths.txt").write_text("3")
        ...     try:
        ...         check_output_file(Path(root, "lengths.txt"), inputs=[Path(root, "lengths.txt")])
        ...     except InputError as error:
        ...         print(error.message)
        -o is also an input of this command (lengths.txt): writing it would destroy what is read; choose another -o
    """
    path = Path(path)
    check_writable_parent(path, option)
    for item in inputs:
        if item is not None and _same_file(path, Path(item)):
            name = Path(item).name or str(item)
            raise InputError(f"{option} is also an input of this command ({name}): writing it would destroy what "
                             f"is read; choose another {option}", source=str(path))
    if not (path.is_symlink() or path.exists()):
        return path
    target = path.resolve()
    if target.is_dir():
        raise InputError(f"{option} is a folder; give a file name", source=str(path))
    if target.exists() and not target.is_file():
        raise InputError("the output is not a regular file (a device, FIFO or socket); simbench writes only "
                         "regular files", source=str(path))
    if not force:
        what = f"a symbolic link to {target}" if path.is_symlink() else "a file"
        raise InputError(f"{option} is {what} that exists; pass --force to replace it, or choose another {option}",
                         source=str(path))
    return path


def check_output_folder(target: Path, *, inputs=(), option: str = "--out") -> Path:
    """Refuse, before any work, a folder output that is or holds one of the command's `inputs`: replacing
    the folder would delete them. Returns the folder a write really replaces (see `resolve_output_folder`)."""
    folder = resolve_output_folder(target, option)
    check_writable_parent(folder, option)
    real_folder = Path(os.path.realpath(folder))
    for item in inputs:
        if item is None or not os.path.exists(item):
            continue
        real_input = Path(os.path.realpath(item))
        if real_input == real_folder or real_folder in real_input.parents:
            held = "is" if real_input == real_folder else "holds"
            raise InputError(f"{option} {held} this command's input {item}: replacing the folder would destroy it; "
                             f"choose another {option}", source=str(target))
    return folder


def check_writable_parent(path: Path, option: str) -> None:
    """Refuse, before any work, an output whose folder cannot be made or written: a file where a folder of its
    path should be, or a folder this user may not write (the work would be lost at the end)."""
    ancestor = Path(os.path.abspath(path)).parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(f"{option}: {ancestor} is a file, not a folder; choose another {option}", source=str(path))
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise InputError(f"{option}: the folder {ancestor} is not writable; choose another {option}",
                         source=str(path))


def _same_file(first: Path, second: Path) -> bool:
    try:
        return first.exists() and second.exists() and os.path.samefile(first, second)
    except OSError:
        return False


def check_owned_folder(target: Path, option: str = "--out") -> None:
    """Refuse to replace a folder that is not empty and was not written whole by simbench, or whose files
    a user has changed since (their content no longer has the hash the marker recorded)."""
    try:
        entries = [path for path in Path(target).rglob("*") if path.is_file() or path.is_symlink()]
    except OSError as error:
        raise InputError(f"cannot read the folder: {error.strerror}; choose another {option}",
                         source=str(target)) from None
    if not entries and not any(Path(target).iterdir()):
        return
    record = _marker(Path(target))
    if record is None:
        raise InputError(f"the folder is not empty and holds no {MARKER}, so simbench did not write it and will "
                         f"not replace it; choose another {option}", source=str(target))
    listed = set(record["files"])
    foreign = sorted(str(path.relative_to(target)) for path in entries
                     if path.name != MARKER and str(path.relative_to(target)) not in listed)
    if foreign:
        raise InputError(f"the folder holds {len(foreign)} file(s) simbench did not write ({_names(foreign)}); move "
                         f"them out or choose another {option}", source=str(target))
    changed = changed_files(Path(target), record)
    if changed:
        raise InputError(f"the folder holds {len(changed)} file(s) changed since simbench wrote them "
                         f"({_names(changed)}): their content no longer has the hash in {MARKER}, so they may "
                         f"hold your edits; move them out or choose another {option}", source=str(target))


def check_replaceable(target: Path, option: str = "--out", inputs=()) -> None:
    """Refuse, before any work, to write where the write would fail or lose a user's files: a folder
    simbench did not write whole or whose files were edited since (see this module's docstring), a folder that
    is or holds one of the command's `inputs`, a file in the way, an unwritable place."""
    target = check_output_folder(target, inputs=inputs, option=option)
    if not target.exists():
        blocking = next((parent for parent in target.parents if parent.exists()), None)
        if blocking is not None and not blocking.is_dir():
            raise InputError(f"cannot create the report folder: {blocking} is a file; choose another {option}",
                             source=str(target))
        _check_writable(blocking or Path.cwd(), target, option)
        return
    if not target.is_dir():
        raise InputError(f"the report folder is a file; choose another {option}", source=str(target))
    check_owned_folder(target, option)
    _check_writable(target.parent, target, option)


def _check_writable(folder: Path, target: Path, option: str) -> None:
    """The report is staged in a sibling folder: try making one now rather than after the simulation."""
    try:
        Path(tempfile.mkdtemp(prefix=f".{target.name}.probe-", dir=folder)).rmdir()
    except OSError as error:
        raise InputError(f"cannot create folders in {folder}: {error.strerror}; choose another {option}",
                         source=str(target)) from None


def changed_files(folder: Path, record: dict | None = None) -> list[str]:
    """The files of a folder simbench wrote whose content is no longer what it wrote (by the hashes its
    marker recorded; none for a marker of a version that recorded none), or that became links or folders."""
    record = record if record is not None else _marker(Path(folder))
    hashes = (record or {}).get("sha256")
    if not isinstance(hashes, dict):
        return []
    changed = []
    for name, digest in sorted(hashes.items()):
        path = Path(folder) / name
        if path.is_symlink() or (path.exists() and (not path.is_file() or file_sha256(path) != digest)):
            changed.append(name)
    return changed


def record_rewritten(folder: Path, written: list[Path]) -> None:
    """After simbench rewrote `written` in a folder it wrote: list them in its marker, with their new hashes."""
    record = _marker(Path(folder))
    if record is None:
        return
    names = [str(Path(path).relative_to(folder)) for path in written]
    record["files"] = sorted(set(record["files"]) | set(names))
    if isinstance(record.get("sha256"), dict):
        record["sha256"] = {**record["sha256"], **{name: file_sha256(Path(folder) / name) for name in names}}
    with atomic_file(Path(folder) / MARKER) as temporary:
        temporary.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def _names(paths: list[str]) -> str:
    return ", ".join(paths[:_LISTED_FOREIGN_FILES]) + (" ..." if len(paths) > _LISTED_FOREIGN_FILES else "")


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _marker(folder: Path) -> dict | None:
    try:
        record = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        if isinstance(record, dict) and isinstance(record["files"], list):
            return record
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        pass
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
    with _unwritable_as_input_error(target):
        target.parent.mkdir(parents=True, exist_ok=True)
    with _parent_lock(target.parent), _sigterm_as_exit():
        _sweep_leftovers(target)
        if target.is_dir():
            check_owned_folder(target, option)
        with _unwritable_as_input_error(target):
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        try:
            staging.chmod(0o777 & ~_umask())  # mkdtemp makes folders private; give the usual mode
            yield staging
            files = sorted(str(path.relative_to(staging)) for path in staging.rglob("*") if path.is_file())
            record = {"written_by": "simbench", "version": __version__, **(metadata or {}), "files": files,
                      "sha256": {name: file_sha256(staging / name) for name in files}}
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
def atomic_file(path: Path, *, replace: bool = True, option: str = "-o") -> Iterator[Path]:
    """Yield a temporary path beside `path`; whatever is written there replaces `path` on success.

    Through a symbolic link the file behind it is replaced and the link stays; a device, FIFO or socket
    at `path` is refused (as root, replacing /dev/null would break the machine). With `replace` False (a
    command's output without --force) the file is created only if no file has that name when it is done:
    `check_output_file` refused an existing one before the work, and another run that wrote the same name
    meanwhile is refused now, its file left whole, rather than silently replaced.
    """
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    if path.exists() and not path.is_file() and not path.is_dir():  # a folder fails as it always did
        raise InputError("the output is not a regular file (a device, FIFO or socket); simbench writes only "
                         "regular files", source=str(path))
    with _unwritable_as_input_error(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.partial-", dir=path.parent)
    os.close(descriptor)
    try:
        os.chmod(temporary, 0o666 & ~_umask())
        yield Path(temporary)
        if replace:
            os.replace(temporary, path)
        else:
            _create_exclusively(Path(temporary), path, option)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _create_exclusively(temporary: Path, path: Path, option: str) -> None:
    """Give the written `temporary` the name `path` only if nothing holds that name: a hard link fails if
    something does, atomically; where the file system has no hard links, the name is claimed with O_EXCL."""
    try:
        try:
            os.link(temporary, path)
        except FileExistsError:
            raise
        except OSError:  # no hard links here
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.replace(temporary, path)
            return
    except FileExistsError:
        raise InputError(f"{option} appeared while simbench worked (another run wrote it?); it is left as it is: "
                         f"pass --force to replace it, or choose another {option}", source=str(path)) from None
    temporary.unlink()


@contextmanager
def _unwritable_as_input_error(path: Path) -> Iterator[None]:
    """A folder that cannot be made or written to (permissions, a read-only file system, a file in the way)
    named as the output's problem, not a traceback."""
    try:
        yield
    except OSError as error:
        raise InputError(f"cannot write here: {error.strerror or error}; choose another output",
                         source=str(path)) from None


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
