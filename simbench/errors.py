"""Errors caused by the user's input (files, options, scenarios), and reading or writing the files it names.

The CLI prints these as one clear message without a traceback; anything else is a bug.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
import re
from pathlib import Path


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


def read_text_file(path: str | Path, what: str) -> str:
    """The UTF-8 text of a file the user named; a folder, a missing or unreadable file, or bytes
    that are not UTF-8 are an InputError naming the file (`what` says what the file should be)."""
    try:
        # utf-8-sig: spreadsheet programs save CSV with an invisible byte-order mark before the header.
        return Path(path).read_text(encoding="utf-8-sig")
    except OSError as error:
        raise InputError(f"cannot read the {what}: {error.strerror or error}", source=str(path)) from None
    except UnicodeDecodeError as error:
        raise InputError(f"not a UTF-8 text file (byte {error.start}): the {what} must be text",
                         source=str(path)) from None


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
