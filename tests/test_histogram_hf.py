"""`simbench histogram build` on Hugging Face datasets: saved folders, Parquet shards, chat rows and their template.

Everything is built on the fly (a word-level tokenizer trained here, a chat template string); nothing downloads.
"""

from __future__ import annotations

import numpy as np
import pyarrow
import pyarrow.parquet
import pytest
from typer.testing import CliRunner

from simbench.cli import app
from simbench.errors import InputError
from simbench.histogram import load_histogram
from simbench.histogram_build import load_tokenizer, read_lengths

datasets = pytest.importorskip("datasets", reason="the hf extra (datasets) is not installed")
pytest.importorskip("transformers", reason="the hf extra (transformers) is not installed")
tokenizers = pytest.importorskip("tokenizers", reason="the hf extra (tokenizers) is not installed")

WORDS = "the cat sat on a mat while dogs ran far away and birds sang songs".split()
ROLE_TOKENS = ["<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endfor %}"


def tokens_by_hand(chat) -> int:
    """The template's tokens: one role token, the words, one end-of-turn token per message."""
    return sum(2 + len(message["content"].split()) for message in chat)


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    word_level = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    word_level.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(
        special_tokens=["[UNK]", "<s>", "</s>", *ROLE_TOKENS]))
    wrapped = PreTrainedTokenizerFast(tokenizer_object=word_level, bos_token="<s>", eos_token="</s>",
                                      unk_token="[UNK]")
    wrapped.chat_template = CHAT_TEMPLATE
    folder = tmp_path_factory.mktemp("tokenizer")
    wrapped.save_pretrained(folder)
    return folder


def random_chats(rng, rows):
    chats = []
    for _ in range(rows):
        turns = int(rng.integers(1, 5))
        chats.append([{"role": ("user", "assistant")[turn % 2],
                       "content": " ".join(rng.choice(WORDS, int(rng.integers(1, 40))))} for turn in range(turns)])
    return chats


def test_saved_dataset_with_chat_rows_counts_the_rendered_template(tmp_path, tokenizer_folder):
    chats = random_chats(np.random.default_rng(0), 60)
    texts = [" ".join(message["content"] for message in chat) for chat in chats]
    dataset = datasets.Dataset.from_dict({"messages": chats, "text": texts,
                                          "ids": [[1] * len(text.split()) for text in texts]})
    dataset.save_to_disk(str(tmp_path / "saved"))
    tokenizer = load_tokenizer(tokenizer_folder)
    chat_lengths = read_lengths(tmp_path / "saved", column="messages", tokenizer=tokenizer)
    assert chat_lengths.tolist() == [tokens_by_hand(chat) for chat in chats]
    word_counts = [len(text.split()) for text in texts]
    assert read_lengths(tmp_path / "saved", column="text", tokenizer=tokenizer).tolist() == word_counts
    assert read_lengths(tmp_path / "saved", column="ids").tolist() == word_counts


def test_dataset_dict_needs_a_split_and_reads_only_that_one(tmp_path):
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"n": [3, 4, 5]}),
                                   "test": datasets.Dataset.from_dict({"n": [9]})})
    splits.save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(InputError, match="choose a split with --split: train, test"):
        read_lengths(tmp_path / "saved", column="n")
    assert read_lengths(tmp_path / "saved", column="n", split="test").tolist() == [9]
    with pytest.raises(InputError, match="no split 'validation'"):
        read_lengths(tmp_path / "saved", column="n", split="validation")


def test_parquet_shards_in_the_hubs_layout(tmp_path):
    data = tmp_path / "dataset" / "data"
    data.mkdir(parents=True)
    pyarrow.parquet.write_table(pyarrow.table({"ids": [[1, 2], [3]]}), data / "train-00000-of-00002.parquet")
    pyarrow.parquet.write_table(pyarrow.table({"ids": [[4, 5, 6]]}), data / "train-00001-of-00002.parquet")
    pyarrow.parquet.write_table(pyarrow.table({"ids": [[7] * 10]}), data / "test-00000-of-00001.parquet")
    assert read_lengths(tmp_path / "dataset", column="ids", split="train").tolist() == [2, 1, 3]
    assert read_lengths(tmp_path / "dataset", column="ids").tolist() == [10, 2, 1, 3]
    with pytest.raises(InputError, match="no Parquet shard of split 'validation'"):
        read_lengths(tmp_path / "dataset", column="ids", split="validation")


def test_command_reports_the_over_length_share(tmp_path, tokenizer_folder):
    chats = random_chats(np.random.default_rng(1), 80)
    datasets.Dataset.from_dict({"messages": chats}).save_to_disk(str(tmp_path / "saved"))
    lengths = np.array([tokens_by_hand(chat) for chat in chats])
    max_length = int(np.quantile(lengths, 0.8))
    out = tmp_path / "chat.csv"
    result = CliRunner().invoke(app, ["histogram", "build", str(tmp_path / "saved"), "--column", "messages",
                                      "--tokenizer", str(tokenizer_folder), "--max-length", str(max_length),
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    too_long = int(np.count_nonzero(lengths > max_length))
    beyond = int(np.maximum(lengths - max_length, 0).sum())
    assert (f"{too_long} sequences longer than {max_length} tokens: left out" in result.output
            and f"over-length share {100 * too_long / lengths.size:.2f} % of the sequences" in result.output
            and f"{100 * beyond / lengths.sum():.2f} % of the tokens" in result.output)
    histogram = load_histogram(out)
    assert np.array_equal(histogram.counts, np.bincount(lengths[lengths <= max_length],
                                                        minlength=max_length + 1)[1:])


def test_chat_rows_without_a_template_or_tokenizer_folder_are_clear_errors(tmp_path, tokenizer_folder):
    datasets.Dataset.from_dict({"messages": random_chats(np.random.default_rng(2), 3)}).save_to_disk(
        str(tmp_path / "saved"))
    with pytest.raises(InputError, match="holds chat messages; pass --tokenizer FOLDER"):
        read_lengths(tmp_path / "saved", column="messages")
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(str(tokenizer_folder))
    plain.chat_template = None
    plain.save_pretrained(tmp_path / "plain")
    (tmp_path / "plain" / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(InputError, match="has no chat template"):
        read_lengths(tmp_path / "saved", column="messages", tokenizer=load_tokenizer(tmp_path / "plain"))
    with pytest.raises(InputError, match="no column 'text'; columns: messages"):
        read_lengths(tmp_path / "saved", column="text")


def test_a_folder_that_is_no_dataset_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="not a Hugging Face dataset"):
        read_lengths(tmp_path / "empty", column="ids")
    with pytest.raises(InputError, match="needs --column"):
        read_lengths(tmp_path / "empty")
