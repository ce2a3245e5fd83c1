"""The bundled Open Web Text 512 histogram, built from OpenWebText's published statistics.

Cerebras measured VTS on BERT-large pre-training data built from Open Web Text at max length 512; no
histogram of that data is published. This module builds one from what is published about the corpus
and from how BERT-style pre-training data is cut from documents, and writes
`simbench/data/histograms/openwebtext_512.csv` (`python -m simbench.openwebtext`, about 10 s).

Published (the sources are cited in simbench/data/histograms/README.md):
- DOCUMENTS: OpenWebText's 8,013,769 documents (the corpus page; the Hugging Face dataset's train split).
- MIN_DOCUMENT_TOKENS: the corpus dropped documents under 128 tokens.
- GPT2_TOKENS: 9,035,582,198 + 4,434,897 GPT-2 tokens in nanoGPT's train and val files of the whole
  corpus, which hold one end-of-text token a document (taken off here).

Modelling choices (none fitted to any speed-up):
- WORDPIECE_TOKENS_PER_GPT2_TOKEN = 1: BERT's WordPiece and GPT-2's BPE cut English web text into about
  as many tokens; the corpus's token count is not published in WordPiece.
- Document lengths: MIN_DOCUMENT_TOKENS plus a log-normal excess of log-space spread
  DOCUMENT_LOG_SIGMA (web pages' lengths are heavy-tailed and roughly log-normal; the spread is chosen,
  not published), scaled so the documents hold exactly the published tokens. Documents are the
  distribution's quantiles at (i + 1/2) / DOCUMENTS, so no randomness enters them.
- Sequences: BERT's create_pretraining_data at max_seq_length 512 with its defaults (short_seq_prob
  0.1, next-sentence pairs with a random second segment half of the time), one pass over the corpus
  (dupe_factor 1: more passes repeat the same shape), with a token as the unit where BERT uses a
  sentence: each sequence aims at 509 tokens plus [CLS] and two [SEP]s, or with probability 0.1 at a
  uniform 2..509; a chunk that reaches its target fills the sequence to it; a random-next pair keeps a
  uniform share of the chunk as its first segment, fills the rest from another document and puts the
  unused tokens back; at a document's end a chunk short of its target is either filled that way
  (random next) or emitted as it is, the short sequences of the histogram besides the 10 % short targets.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from simbench.histogram import LengthHistogram

MAX_LENGTH = 512
DOCUMENTS = 8_013_769
MIN_DOCUMENT_TOKENS = 128
GPT2_TOKENS = 9_035_582_198 + 4_434_897 - DOCUMENTS  # nanoGPT's files less one end-of-text token a document
WORDPIECE_TOKENS_PER_GPT2_TOKEN = 1.0
DOCUMENT_LOG_SIGMA = 1.0
# BERT's create_pretraining_data.
SPECIAL_TOKENS = 3  # [CLS] A [SEP] B [SEP]
SHORT_SEQUENCE_PROBABILITY = 0.1
RANDOM_NEXT_PROBABILITY = 0.5
MIN_SHORT_TARGET_TOKENS = 2
SEED = 0


def document_tokens(documents: int = DOCUMENTS, total_tokens: int | None = None,
                    log_sigma: float = DOCUMENT_LOG_SIGMA) -> np.ndarray:
    """Each document's WordPiece tokens: at least MIN_DOCUMENT_TOKENS, log-normal above it, summing to
    exactly `total_tokens` (the published total by default)."""
    if total_tokens is None:
        total_tokens = round(GPT2_TOKENS * WORDPIECE_TOKENS_PER_GPT2_TOKEN)
    quantiles = (np.arange(documents) + 0.5) / documents
    shape = np.exp(log_sigma * norm.ppf(quantiles))
    excess = shape * ((total_tokens - documents * MIN_DOCUMENT_TOKENS) / shape.sum())
    tokens = MIN_DOCUMENT_TOKENS + np.floor(excess).astype(np.int64)
    # Largest remainders take the tokens the floors dropped, so the total is exact.
    missing = total_tokens - int(tokens.sum())
    tokens[np.argsort(excess - np.floor(excess), kind="stable")[::-1][:missing]] += 1
    return tokens


def pretraining_sequence_lengths(documents: np.ndarray, rng: np.random.Generator,
                                 max_length: int = MAX_LENGTH) -> np.ndarray:
    """Lengths (special tokens included) of the sequences BERT's pre-training data cuts from documents
    of these token counts, in one pass; every document is consumed, all documents at once."""
    full_target = max_length - SPECIAL_TOKENS
    remaining = np.asarray(documents, dtype=np.int64).copy()
    lengths = []
    active = np.flatnonzero(remaining > 0)
    while active.size:
        left = remaining[active]
        short = rng.random(active.size) < SHORT_SEQUENCE_PROBABILITY
        target = np.where(short, rng.integers(MIN_SHORT_TARGET_TOKENS, full_target + 1, active.size), full_target)
        chunk = np.minimum(target, left)
        random_next = (rng.random(active.size) < RANDOM_NEXT_PROBABILITY) | (chunk < 2)
        # A random-next pair keeps a uniform 1..chunk-1 of the chunk as its first segment (all of a
        # one-token chunk) and fills the second from another document up to the target.
        first = np.minimum(np.floor(rng.random(active.size) * (chunk - 1)).astype(np.int64) + 1, chunk)
        consumed = np.where(random_next, first, chunk)
        lengths.append(np.where(random_next, target, chunk) + SPECIAL_TOKENS)
        remaining[active] = left - consumed
        active = active[remaining[active] > 0]
    return np.concatenate(lengths)


def openwebtext_histogram(documents: int = DOCUMENTS, total_tokens: int | None = None,
                          log_sigma: float = DOCUMENT_LOG_SIGMA, seed: int = SEED) -> LengthHistogram:
    """The Open Web Text 512 histogram (arguments other than the defaults: a smaller corpus for tests,
    another spread of document lengths for the sensitivity the docs state)."""
    lengths = pretraining_sequence_lengths(document_tokens(documents, total_tokens, log_sigma),
                                           np.random.default_rng(seed))
    return LengthHistogram.from_lengths(lengths, MAX_LENGTH, name="openwebtext_512")


if __name__ == "__main__":
    from simbench.data import bundled_file

    path = bundled_file("histograms", "openwebtext_512.csv")
    openwebtext_histogram().to_csv(path)
    print(path)
