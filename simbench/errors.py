"""Errors caused by the user's input (files, options, scenarios), and reading or writing the files it names.

The CLI prints these as one clear message without a traceback; anything else is a bug.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TypeVar


class InputError(Exception):
    """Bad user input; the message names the file, line or key and what is wrong.

    `parameter` is the library's name for the value the message is about (e.g. `max_length`), so
    that a command can call it by its option name instead (`--max-length`).
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None,
                 parameter: str | None = None):
        self.message = message
        self.source = source
        self.line = line
        self.parameter = parameter
        where = ""
        if source is not None:
            where = f"{source}:{line}: " if line is not None else f"{source}: "
        super().__init__(f"{where}{message}")

    def located(self, source: str | None, line: int | None = None) -> InputError:
        """The same error, said of a place in a file (a check that knew only the value)."""
        return InputError(self.message, source=source, line=line, parameter=self.parameter)

    def renamed(self, names: dict[str, str]) -> InputError:
        """The same error with its parameter called by the caller's name for it (`--max-length`)."""
        if self.parameter not in names:
            return self
        name = names[self.parameter]
        message = re.sub(rf"(?<![\w-]){re.escape(self.parameter)}(?![\w-])", lambda _: name, self.message, count=1)
        return InputError(message, source=self.source, line=self.line, parameter=name)


class InputErrors(InputError):
    """Every error found in one input at once (`simbench validate` lists them all); as a message, the
    first with how many more there are, so that other commands still say one line."""

    def __init__(self, errors: list[InputError]):
        first = errors[0]
        more = f" (and {len(errors) - 1} more; `simbench validate` lists them all)" if len(errors) > 1 else ""
        super().__init__(first.message + more, source=first.source, line=first.line, parameter=first.parameter)
        self.errors = errors


T, R = TypeVar("T"), TypeVar("R")


def each_checked(items: Iterable[T], check: Callable[[T], R]) -> list[R]:
    """`check` of every item, in order; where any refuses, InputErrors holding every refusal of every item (each
    InputErrors' own list, flattened), so that one reading lists them all."""
    results, errors = [], []
    for item in items:
        try:
            results.append(check(item))
        except InputErrors as error:
            errors += error.errors
        except InputError as error:
            errors.append(error)
    if errors:
        raise InputErrors(errors)
    return results


def did_you_mean(name: str, known: list[str]) -> str:
    """' did you mean X?' for the known name closest to a misspelt `name`, or '' when none is close."""
    import difflib

    # 0.8: two letters swapped in a short name still match ('spfph'), an unrelated word does not ('nope').
    close = difflib.get_close_matches(str(name), [str(item) for item in known], n=1, cutoff=0.8)
    return f" did you mean {close[0]!r}?" if close else ""


# Far above any scenario, profile, log or histogram a user has (a CSV of every length to 2^20 with
# 2^40-sized counts is ~25 MB), and far below what takes long to parse: bigger inputs are refused.
MAX_TEXT_FILE_BYTES = 64 * 2**20


# Far beyond any line of lengths, token lists or a log (an MLPerf log's are 1.5 KB; a JSON line of 10^6 token
# ids ~8 MB), far below a line that exhausts memory before it ends (a one-line 8 GiB file).
MAX_LINE_BYTES = 16 * 2**20


def bounded_lines(handle: BinaryIO, source: str, what: str, *, max_bytes: int | None = None,
                  max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each line of a binary stream, never holding more than one line: a line over
    `max_line_bytes`, or with `max_bytes` more than that in all, is an InputError naming `source` (and the
    line). Counted as read, so after decompression for a gzip stream (3 MB of gzip can hold 3 GiB)."""
    total = 0
    number = 0
    while True:
        raw = handle.readline(max_line_bytes + 1)
        if not raw:
            return
        number += 1
        if len(raw) > max_line_bytes:
            raise InputError(f"a line longer than {max_line_bytes // 2**20} MiB, more than any {what} holds",
                             source=source, line=number)
        total += len(raw)
        if max_bytes is not None and total > max_bytes:
            raise InputError(f"the {what} holds more than {max_bytes // 2**20} MiB (after decompression), more than "
                             f"any valid one needs", source=source, line=number)
        yield number, raw


def check_decompressed_bytes(handle: BinaryIO, source: str, what: str, max_bytes: int) -> None:
    """Refuse, before any line is parsed, a compressed stream (opened for reading from its start) that
    decompresses to more than `max_bytes`: read in blocks that takes a fraction of a second, where parsing lines
    up to the bound took 20 s of CPU for a 3 MB gzip of 3 GiB of short lines."""
    total = 0
    while block := handle.read(2**20):
        total += len(block)
        if total > max_bytes:
            raise InputError(f"the {what} holds more than {max_bytes // 2**20} MiB (after decompression), more than "
                             f"any valid one needs", source=source)


def read_text_file(path: str | Path, what: str, max_bytes: int = MAX_TEXT_FILE_BYTES) -> str:
    """The UTF-8 text of a file the user named; a folder, a FIFO or device (which could block or never
    end), a file over `max_bytes`, a missing or unreadable file, or bytes that are not UTF-8 are an
    InputError naming the file (`what` says what the file should be)."""
    try:
        with open(path, "rb", opener=_open_regular_file) as handle:
            data = handle.read(max_bytes + 1)
    except OSError as error:
        raise InputError(f"cannot read the {what}: {error.strerror or error}", source=str(path)) from None
    if len(data) > max_bytes:
        raise InputError(f"the {what} is larger than {max_bytes // 2**20} MiB, more than any valid one needs",
                         source=str(path))
    try:
        # utf-8-sig: spreadsheet programs save CSV with an invisible byte-order mark before the header.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(f"not a UTF-8 text file (byte {error.start}): the {what} must be text",
                         source=str(path)) from None


def _open_regular_file(path: str, flags: int) -> int:
    # O_NONBLOCK: opening a FIFO with no writer must not hang before its type can be checked.
    descriptor = os.open(path, flags | os.O_NONBLOCK)
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        if stat.S_ISDIR(mode):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
        raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket), so it could block or never end")
    os.set_blocking(descriptor, True)
    return descriptor


@contextmanager
def writing_to(path: str | Path) -> Iterator[None]:
    """Report a failure to write a file the user named (a missing or read-only folder, a folder in
    the way, a full disk) as an InputError naming that file rather than as a traceback."""
    try:
        yield
    except OSError as error:
        reason = error.strerror or str(error)
        if error.filename and Path(error.filename) in Path(path).parents:
            reason += f" ({error.filename})"  # e.g. a file where the output's folder should be
        raise InputError(f"cannot write: {reason}", source=str(path)) from None
