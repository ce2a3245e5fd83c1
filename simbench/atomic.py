r"""Atomic writes: a report folder or a single file appears whole or not at all, so a failed or
interrupted run never leaves a half-written file over a good one.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from simbench.atomic import atomic_directory, atomic_file
    >>> with tempfile.TemporaryDirectory() as root:
    ...     with atomic_directory(Path(root, "report")) as folder:  # a hidden sibling until the block ends
    ...         _ = (folder / "scaling.csv").write_text("devices,speedup\n1,2.18\n")
    ...     with atomic_file(Path(root, "lengths.txt")) as temporary:
    ...         _ = temporary.write_text("3\n5\n")
    ...     sorted(str(path.relative_to(root)) for path in Path(root).rglob("*"))
    ['lengths.txt', 'report', 'report/scaling.csv']
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield an empty sibling folder of `target`; on success it replaces `target`, on any failure
    (KeyboardInterrupt included) it is deleted and `target` is left as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        staging.chmod(0o777 & ~_umask())  # mkdtemp makes folders private; give the usual mode
        yield staging
        _swap_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


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
    """Yield a temporary path beside `path`; whatever is written there replaces `path` on success."""
    path = Path(path)
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
