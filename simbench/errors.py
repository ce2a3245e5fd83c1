"""Errors caused by the user's input (files, options, scenarios).

The CLI prints these as one clear message without a traceback; anything else is a bug.
"""


class InputError(Exception):
    """Bad user input; the message names the file, line or key and what is wrong."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        self.source = source
        self.line = line
        where = ""
        if source is not None:
            where = f"{source}:{line}: " if line is not None else f"{source}: "
        super().__init__(f"{where}{message}")
