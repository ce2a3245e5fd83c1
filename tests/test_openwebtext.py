"""The bundled Open Web Text 512 histogram: built from the published corpus figures, as its README says."""

import re

import numpy as np
import pytest

from simbench import openwebtext
from simbench.data import bundled_file
from simbench.histogram import load_histogram
from simbench.openwebtext import (DOCUMENTS, GPT2_TOKENS, MAX_LENGTH, MIN_DOCUMENT_TOKENS, SPECIAL_TOKENS,
                                  document_tokens, openwebtext_histogram, pretraining_sequence_lengths)

FULL_TARGET = MAX_LENGTH - SPECIAL_TOKENS


@pytest.fixture(scope="module")
def bundled():
    return load_histogram("openwebtext_512")


def test_the_documents_hold_the_published_corpus():
    documents = document_tokens()
    # nanoGPT's train and val files: 9,035,582,198 + 4,434,897 GPT-2 tokens, one end-of-text token a document.
    assert documents.size == DOCUMENTS == 8_013_769
    assert int(documents.sum()) == GPT2_TOKENS == 9_035_582_198 + 4_434_897 - 8_013_769
    assert documents.min() >= MIN_DOCUMENT_TOKENS == 128  # the corpus dropped shorter documents
    assert documents.mean() == pytest.approx(1127.06, abs=0.01)
    # Most documents are longer than one 512-token sequence: the chunking decides the shape.
    assert 0.5 < np.mean(documents > FULL_TARGET) < 1


def test_the_bundled_file_is_what_the_builder_makes(bundled):
    assert np.array_equal(bundled.counts, openwebtext_histogram().counts)


def test_the_bundled_histogram_is_bert_pretraining_data_at_512(bundled):
    assert bundled.max_length == bundled.longest == MAX_LENGTH
    # Every sequence has at least one real token besides [CLS] and two [SEP]s.
    assert not bundled.counts[:SPECIAL_TOKENS].any()
    # Each sequence takes at most 509 of a document's tokens, so a document gives at least ceil(L / 509).
    documents = document_tokens()
    assert bundled.sequences >= int(np.sum(-(-documents // FULL_TARGET)))
    # Random next sentences re-read tokens of other documents: the sequences hold more than the corpus.
    assert bundled.real_tokens - SPECIAL_TOKENS * bundled.sequences >= int(documents.sum())
    # Most sequences are filled to 512; short targets (probability 0.1) and documents' ends make the rest.
    full = bundled.counts[-1] / bundled.sequences
    assert 0.5 < full < 1 - openwebtext.SHORT_SEQUENCE_PROBABILITY


def test_the_readme_states_the_bundled_histograms_figures(bundled):
    readme = bundled_file("histograms", "README.md").read_text()
    row = re.search(r"^\| openwebtext_512\.csv \|[^|]*\| (\d+) \| ([\d,]+) \| ([\d,]+) \| ([\d.]+) % \| ([\d.]+) \|$",
                    readme, flags=re.MULTILINE)
    assert row, "simbench/data/histograms/README.md has no openwebtext_512.csv row"
    max_length, sequences, tokens, padding_percent, speedup = row.groups()
    assert int(max_length) == bundled.max_length
    assert int(sequences.replace(",", "")) == bundled.sequences
    assert int(tokens.replace(",", "")) == bundled.real_tokens
    assert float(padding_percent) == round(100 * (1 - bundled.efficiency), 2)
    assert float(speedup) == round(bundled.theoretical_speedup, 4)
    assert f"{100 * bundled.counts[-1] / bundled.sequences:.1f} % of the sequences are exactly 512" in readme


def test_without_short_targets_or_random_next_a_document_is_cut_into_full_sequences_and_its_rest(monkeypatch):
    monkeypatch.setattr(openwebtext, "SHORT_SEQUENCE_PROBABILITY", 0.0)
    monkeypatch.setattr(openwebtext, "RANDOM_NEXT_PROBABILITY", 0.0)
    documents = np.array([FULL_TARGET, 2 * FULL_TARGET + 100, 128, 3 * FULL_TARGET + 2])
    lengths = np.sort(pretraining_sequence_lengths(documents, np.random.default_rng(0)))
    expected = [MAX_LENGTH] * 6 + [100 + SPECIAL_TOKENS, 128 + SPECIAL_TOKENS, 2 + SPECIAL_TOKENS]
    assert lengths.tolist() == sorted(expected)


def test_random_next_fills_every_sequence_to_its_target(monkeypatch):
    # Each pair keeps part of its chunk and fills the rest from another document: every sequence is full,
    # and a document gives more sequences than its tokens fill.
    monkeypatch.setattr(openwebtext, "SHORT_SEQUENCE_PROBABILITY", 0.0)
    monkeypatch.setattr(openwebtext, "RANDOM_NEXT_PROBABILITY", 1.0)
    documents = np.full(200, 3 * FULL_TARGET)
    lengths = pretraining_sequence_lengths(documents, np.random.default_rng(0))
    assert (lengths == MAX_LENGTH).all() and lengths.size > 3 * documents.size


def test_short_targets_are_one_sequence_in_ten_spread_over_the_lengths():
    documents = np.full(20_000, 100 * FULL_TARGET)  # long documents: ends are a small share
    lengths = pretraining_sequence_lengths(documents, np.random.default_rng(1))
    short = np.mean(lengths < MAX_LENGTH)
    assert short == pytest.approx(openwebtext.SHORT_SEQUENCE_PROBABILITY, abs=0.01)
    # Short targets are uniform on 2..509 tokens: their mean length is about half of 512.
    assert lengths[lengths < MAX_LENGTH].mean() == pytest.approx((2 + FULL_TARGET) / 2 + SPECIAL_TOKENS, rel=0.03)


def test_the_documents_sum_to_any_total_asked_for():
    documents = document_tokens(1000, 1_234_567)
    assert documents.size == 1000 and int(documents.sum()) == 1_234_567 and documents.min() >= MIN_DOCUMENT_TOKENS
    assert np.all(np.diff(documents) >= -1)  # quantiles in order, give or take one rounded token
