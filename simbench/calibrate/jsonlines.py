"""Reads the JSON-lines measurement files that calibration fits (a timing grid, first-sight timings): one JSON
object a line, each line's problems an InputError naming the file and line.

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
    >>> _ = path.write_text('{"kind": "padded"}\\n\\n{"kind": "varlen"}\\n')
    >>> [(line.number, line.record["kind"]) for line in json_lines(path, "timings", ("kind",))]
    [(1, 'padded'), (3, 'varlen')]
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from simbench.errors import InputError, read_text_file
from simbench.validation import json_integer


@dataclass(frozen=True)
class JsonLine:
    """One line's JSON object, with where it was read so that a reader's checks name the line."""

    record: dict
    source: str
    number: int

    def error(self, message: str) -> InputError:
        return InputError(message, source=self.source, line=self.number)

    def whole_numbers(self, keys: Sequence[str], most: int) -> None:
        """Refuse the line unless each of `keys` holds a whole number from 1 to `most` (true and 2.0 are not)."""
        for key in keys:
            value = self.record[key]
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
                raise self.error(f"{key} must be a whole number from 1 to {most}, found {value!r}")


def json_lines(path: str | Path, what: str, fields: Sequence[str]) -> Iterator[JsonLine]:
    """Each non-blank line of the file as a JSON object holding every one of `fields`, read as the caller asks for
    them (a reader that refuses at a line reads no further); `what` names the file's kind in errors."""
    source = str(path)
    for number, text in enumerate(read_text_file(path, f"{what} (JSON lines)").splitlines(), start=1):
        if not text.strip():
            continue
        line = JsonLine({}, source, number)
        try:
            record = json.loads(text, parse_int=json_integer)
        except InputError as error:  # an integer of more digits than any count or time holds
            raise line.error(error.message) from None
        except (ValueError, RecursionError) as error:
            raise line.error(f"not a JSON object: {error}") from None
        if not isinstance(record, dict):
            raise line.error("each line must be a JSON object")
        missing = [key for key in fields if key not in record]
        if missing:
            raise line.error(f"missing field(s) {', '.join(missing)}")
        yield JsonLine(record, source, number)
