"""Lengths from where LLM data lives: Hugging Face datasets (saved to disk or Parquet shards) and tokenizers.

A column holds lengths, token lists, text, or chat rows (a list of {role, content} messages) that a
tokenizer folder renders with its chat template. Needs the optional extra: `pip install simbench-seq[hf]`.

    >>> import tempfile, pyarrow, pyarrow.parquet
    >>> from pathlib import Path
    >>> from simbench.histogram_hf import read_dataset_lengths
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     pyarrow.parquet.write_table(pyarrow.table({"ids": [[1, 2], [3]]}), Path(folder, "train-0.parquet"))
    ...     read_dataset_lengths(Path(folder), column="ids").tolist()
    [2, 1]
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from simbench.errors import InputError

# Rows tokenized per call: the fast tokenizers work through a batch in parallel.
TOKENIZE_BATCH_ROWS = 1024
SAVED_DATASET_FILES = ("dataset_dict.json", "state.json")


class TransformersTokenizer:
    """A tokenizer folder (`save_pretrained`, as on the Hub): counts the tokens of a text, with the special
    tokens it adds, and of a chat row rendered by its chat template, as training would see them."""

    def __init__(self, folder: Path):
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise InputError("a tokenizer folder needs the `transformers` package (pip install 'simbench-seq[hf]')",
                             source=str(folder)) from None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError) as error:
            raise InputError(f"not a tokenizer folder: {error}", source=str(folder)) from None
        self.folder = folder

    def __call__(self, text: str) -> int:
        return int(self.count_texts([text])[0])

    def count_texts(self, texts: list[str], *, special_tokens: bool = True) -> np.ndarray:
        encoded = self.tokenizer(texts, add_special_tokens=special_tokens)["input_ids"]
        return np.fromiter(map(len, encoded), dtype=np.int64, count=len(texts))

    def count_chats(self, chats: list[list[dict]], source: str) -> np.ndarray:
        """Tokens of each conversation rendered with the chat template (which writes its own special tokens)."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise InputError(f"the tokenizer in {self.folder} has no chat template to render the messages with",
                             source=source)
        try:
            texts = [self.tokenizer.apply_chat_template(chat, tokenize=False) for chat in chats]
        except Exception as error:  # jinja2 raises its own errors for a template that does not fit the rows
            raise InputError(f"the chat template cannot render these messages: {error}", source=source) from None
        return self.count_texts(texts, special_tokens=False)


def read_dataset_lengths(folder: Path, *, column: str, split: str | None = None, tokenizer=None) -> np.ndarray:
    """Per-row lengths of `column` in a saved dataset (`save_to_disk`) or a folder of Parquet shards.

    A dataset with several splits (or shards named after them) needs `split`.
    """
    folder = Path(folder)
    if column is None:
        raise InputError("a dataset folder needs --column NAME: the column of lengths, token lists, text or messages",
                         source=str(folder))
    lengths = [column_lengths(values, column, tokenizer, source)
               for values, source in _column_batches(folder, column, split)]
    return np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)


def _column_batches(folder: Path, column: str, split: str | None) -> Iterator[tuple[object, str]]:
    """The column's values, a record batch at a time, with the file they come from."""
    import pyarrow.parquet

    if any((folder / name).is_file() for name in SAVED_DATASET_FILES):
        table = _saved_dataset(folder, split).data.table
        if column not in table.column_names:
            raise InputError(f"no column {column!r}; columns: {', '.join(table.column_names)}", source=str(folder))
        yield from ((batch.column(column), str(folder)) for batch in table.select([column]).to_batches())
        return
    shards = _parquet_shards(folder, split)
    for shard in shards:
        try:
            parquet = pyarrow.parquet.ParquetFile(shard)
        except (pyarrow.ArrowException, OSError) as error:
            raise InputError(f"not a readable Parquet file: {error}", source=str(shard)) from None
        if column not in parquet.schema_arrow.names:
            raise InputError(f"no column {column!r}; columns: {', '.join(parquet.schema_arrow.names)}",
                             source=str(shard))
        try:
            for batch in parquet.iter_batches(columns=[column]):
                yield batch.column(0), str(shard)
        except (pyarrow.ArrowException, OSError) as error:  # corrupt pages: a bad snappy block, a short page
            raise InputError(f"not a readable Parquet file: {error}", source=str(shard)) from None


def _saved_dataset(folder: Path, split: str | None):
    try:
        import datasets
    except ImportError:
        raise InputError("a saved dataset folder needs the `datasets` package (pip install 'simbench-seq[hf]')",
                         source=str(folder)) from None
    try:
        loaded = datasets.load_from_disk(str(folder))
    except (OSError, ValueError, FileNotFoundError) as error:
        raise InputError(f"not a readable saved dataset: {error}", source=str(folder)) from None
    if isinstance(loaded, datasets.DatasetDict):
        if split is None and len(loaded) == 1:
            split = next(iter(loaded))
        if split not in loaded:
            raise InputError(f"choose a split with --split: {', '.join(loaded)}" if split is None else
                             f"no split {split!r}; splits: {', '.join(loaded)}", source=str(folder))
        return loaded[split]
    if split is not None:
        raise InputError(f"--split {split}: this saved dataset has no splits", source=str(folder))
    return loaded


def _parquet_shards(folder: Path, split: str | None) -> list[Path]:
    """Every .parquet file below the folder; with `split`, those whose name or folder starts with it
    (the Hub's layouts: data/train-00000-of-00002.parquet, train/0000.parquet)."""
    shards = sorted(folder.rglob("*.parquet"))
    if not shards:
        raise InputError("not a Hugging Face dataset: no dataset_dict.json, state.json or .parquet shards",
                         source=str(folder))
    if split is None:
        return shards
    chosen = [shard for shard in shards
              if shard.name.startswith(split) or any(part.startswith(split) for part in shard.relative_to(folder).parts[:-1])]
    if not chosen:
        raise InputError(f"no Parquet shard of split {split!r} (a name or folder starting with it)", source=str(folder))
    return chosen


def column_lengths(values, column: str, tokenizer, source: str) -> np.ndarray:
    """Lengths of one Arrow array: integers as they are, token lists by size, text and chat rows tokenized."""
    import pyarrow
    import pyarrow.compute

    if isinstance(values, pyarrow.ChunkedArray):
        values = values.combine_chunks()
    kind = values.type
    if values.null_count:
        row = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0]) + 1
        raise InputError(f"column {column!r} is empty in row {row}", source=source)
    if pyarrow.types.is_integer(kind):
        lengths = values.to_numpy(zero_copy_only=False).astype(np.int64)
    elif (pyarrow.types.is_list(kind) or pyarrow.types.is_large_list(kind)) and pyarrow.types.is_struct(kind.value_type):
        lengths = _chat_lengths(values.to_pylist(), column, tokenizer, source)
    elif pyarrow.types.is_list(kind) or pyarrow.types.is_large_list(kind):
        lengths = pyarrow.compute.list_value_length(values).to_numpy(zero_copy_only=False).astype(np.int64)
    elif pyarrow.types.is_string(kind) or pyarrow.types.is_large_string(kind):
        lengths = _text_lengths(values.to_pylist(), column, tokenizer, source)
    else:
        raise InputError(f"column {column!r} holds {kind}; expected lengths, token lists, text or chat messages",
                         source=source)
    if lengths.size and lengths.min() < 0:
        raise InputError(f"column {column!r} has a negative length in row {int(np.argmin(lengths)) + 1}",
                         source=source)
    return lengths


def _text_lengths(texts: list[str], column: str, tokenizer, source: str) -> np.ndarray:
    if tokenizer is None:
        raise InputError(f"column {column!r} holds text; pass --tokenize (or --tokenizer FILE_OR_FOLDER) to count "
                         "its tokens", source=source)
    if isinstance(tokenizer, TransformersTokenizer):
        return np.concatenate([tokenizer.count_texts(texts[first:first + TOKENIZE_BATCH_ROWS])
                               for first in range(0, len(texts), TOKENIZE_BATCH_ROWS)] or [np.zeros(0, np.int64)])
    return np.fromiter((tokenizer(text) for text in texts), dtype=np.int64, count=len(texts))


def _chat_lengths(chats: list[list[dict]], column: str, tokenizer, source: str) -> np.ndarray:
    if not isinstance(tokenizer, TransformersTokenizer):
        raise InputError(f"column {column!r} holds chat messages; pass --tokenizer FOLDER, a tokenizer folder "
                         "with a chat template, to render and count them", source=source)
    for row, chat in enumerate(chats, start=1):
        if not all(isinstance(message, dict) and {"role", "content"} <= set(message) for message in chat):
            raise InputError(f"row {row}: chat messages need `role` and `content`", source=source)
    return np.concatenate([tokenizer.count_chats(chats[first:first + TOKENIZE_BATCH_ROWS], source)
                           for first in range(0, len(chats), TOKENIZE_BATCH_ROWS)] or [np.zeros(0, np.int64)])
