"""The result every strategy returns: distinct packs with repeat counts, and their metrics.

    >>> from simbench.strategies.packing import Packing
    >>> p = Packing.from_rows("demo", 8, None, [[5, 3], [8, 0]], repeats=[2, 1])
    >>> p.packs_total, p.sequences, p.efficiency
    (3, 5, 1.0)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from simbench.distinct import merged_rows
from simbench.errors import InputError
from simbench.histogram import LengthHistogram
from simbench.validation import check_non_negative_float, check_positive_float, check_seed, check_whole_number


@dataclass(frozen=True)
class PackOptions:
    """Options every strategy accepts; a strategy ignores those it has no use for."""

    seed: int = 0
    batch_size: int = 32  # sequences per batch, for batchers such as `sort`
    # CPU seconds `optimal` may spend searching for packs its bound proves optimal, once the bound is known.
    time_limit_seconds: float = 5.0
    # The length at which a sequence's attention costs as much as its dense layers, for packers that balance
    # predicted work (`wlb`); None: max_length. The simulator passes its cost model's.
    attention_parity_tokens: float | None = None
    # Padded token slots per batch, for batchers that fill a token budget (`token-budget`); None:
    # batch_size x max_length.
    budget_tokens: int | None = None

    def __post_init__(self):
        # Checked here, once, so that no strategy meets numpy's traceback for a negative seed.
        check_seed(self.seed)
        check_whole_number(self.batch_size, "batch_size", minimum=1)
        check_non_negative_float(self.time_limit_seconds, "time_limit_seconds")
        if self.attention_parity_tokens is not None:
            check_positive_float(self.attention_parity_tokens, "attention_parity_tokens")
        if self.budget_tokens is not None:
            check_whole_number(self.budget_tokens, "budget_tokens", minimum=1)


def efficiency_text(efficiency: float, decimals: int = 1) -> str:
    """An efficiency as a percentage with `decimals`, rounded as usual except that anything short of 1 reads
    below 100 (a packing with padding never shows 100.0), e.g. 0.99999 -> "99.9".

        >>> efficiency_text(0.99999), efficiency_text(1.0), efficiency_text(0.97654, 2)
        ('99.9', '100.0', '97.65')
    """
    percent = 100 * float(efficiency)
    if efficiency < 1:
        percent = min(percent, 100 - 10.0**-decimals)
    return f"{percent:.{decimals}f}"


# A dense table of the packs (`Packing.rows`) is built only below this size; long contexts hold
# packs of thousands of short sequences beside packs of one long one, and the padded table of
# 120k distinct packs x 7,000 slots would take 7 GB where the packs themselves take 30 MB.
DENSE_ROWS_LIMIT_BYTES = 1 << 30
# Sequence slots counted at once by `placed_histogram`.
PLACED_CHUNK_SLOTS = 1 << 20


def lengths_longest_first(counts: np.ndarray) -> list[tuple[int, int]]:
    """(length, how many) for each length present, longest first: what the histogram packers loop over
    (at 131,072 tokens, looping over every length instead took most of their time)."""
    present = np.flatnonzero(counts)[::-1]
    return list(zip((present + 1).tolist(), counts[present].tolist()))


def _summed_by_pack(groups) -> dict[tuple, int]:
    """{pack: its groups' counts summed} from (how many, pack) pairs whose packs are tuples."""
    merged: dict[tuple, int] = {}
    get = merged.get
    for count, pack in groups:
        merged[pack] = get(pack, 0) + count
    return merged


class Packing:
    """Distinct packs ("strategies" in the packing paper) and how often each is used.

    Pack i holds `pack_lengths[pack_starts[i]:pack_starts[i + 1]]`, in descending order;
    `repeats[i]` is how many packs of that content exist; `slot_lengths[i]` is the number of token
    slots the pack occupies (max_length for fixed-shape packs; the batch's longest for `sort`).
    `rows` is the same packs as one table, each row zero-padded to the widest pack.

    Build one from a table (`Packing(strategy, max_length, max_depth, rows, repeats, slot_lengths)`,
    or `from_rows` to merge duplicates) or from the flat form (`from_packs`); each form is derived
    from the other on first use.
    """

    def __init__(self, strategy: str, max_length: int, max_depth: int | None, rows=None, repeats=None,
                 slot_lengths=None, seconds: float = 0.0, details: dict | None = None, *,
                 pack_lengths=None, pack_starts=None):
        if (rows is None) == (pack_lengths is None or pack_starts is None):
            raise ValueError("a Packing needs either rows or both pack_lengths and pack_starts")
        fields = {"strategy": strategy, "max_length": int(max_length), "max_depth": max_depth,
                  "repeats": np.asarray(repeats, dtype=np.int64),
                  "slot_lengths": np.asarray(slot_lengths, dtype=np.int64), "seconds": seconds,
                  "details": {} if details is None else details}
        if rows is not None:
            fields["rows"] = rows  # the cached table; the flat form follows on first use
        else:
            fields["pack_lengths"] = np.asarray(pack_lengths, dtype=np.int64)
            fields["pack_starts"] = np.asarray(pack_starts, dtype=np.int64)
        self.__dict__.update(fields)

    def __setattr__(self, name, value):
        raise AttributeError(f"a Packing is immutable; use replace() for a changed copy (setting {name})")

    def __repr__(self) -> str:
        return (f"Packing({self.strategy!r}, max_length={self.max_length}, max_depth={self.max_depth}, "
                f"packs={self.packs_total}, distinct={self.strategies_used}, seconds={self.seconds:.3f})")

    def replace(self, **changes) -> Packing:
        """A copy with other metadata (strategy, max_depth, seconds, details); the packs are shared."""
        unknown = set(changes) - {"strategy", "max_depth", "seconds", "details"}
        if unknown:
            raise ValueError(f"replace() changes metadata only, not {', '.join(sorted(unknown))}")
        copy = object.__new__(Packing)
        copy.__dict__.update(self.__dict__, **changes)
        return copy

    @classmethod
    def from_packs(cls, strategy: str, max_length: int, max_depth: int | None, pack_lengths, pack_starts,
                   repeats, seconds: float = 0.0, details: dict | None = None) -> Packing:
        """A fixed-shape packing from the flat form; packs must be distinct, each in descending order."""
        repeats = np.asarray(repeats, dtype=np.int64)
        return cls(strategy, max_length, max_depth, None, repeats, np.full(repeats.size, max_length, dtype=np.int64),
                   seconds, details, pack_lengths=pack_lengths, pack_starts=pack_starts)

    @classmethod
    def from_groups(cls, strategy: str, max_length: int, max_depth: int | None, groups,
                    details: dict | None = None, *, descending_tuples: bool = False) -> Packing:
        """A fixed-shape packing from (how many, lengths of the pack) pairs; equal packs are merged.

        `descending_tuples`: the caller vouches that every pack is a tuple in descending order (a packer
        that places lengths longest first), which is then not checked: the check is a tenth of such a
        packer's time on a 512-token histogram.
        """
        if descending_tuples:
            groups = groups if isinstance(groups, list) else list(groups)
            # Packers' groups are mostly distinct already: a dict built in C, and the merging loop only where
            # two groups hold the same pack (a fifth of the conversion's time at 10,000 groups).
            merged = dict(zip(map(itemgetter(1), groups), map(itemgetter(0), groups)))
            if len(merged) < len(groups):
                merged = _summed_by_pack(groups)
        else:
            merged = _summed_by_pack((count, pack if type(pack) is tuple else tuple(pack))
                                     for count, pack in groups if count)
        # Tuples sort like zero-padded rows: the same pack order as `from_rows`, so seeded draws agree. The keys
        # alone, not the items: tuples of ints sort several times faster than tuples holding tuples.
        packs = sorted(merged)
        depths = np.fromiter(map(len, packs), dtype=np.int64, count=len(packs))
        lengths = np.fromiter(itertools.chain.from_iterable(packs), dtype=np.int64, count=int(depths.sum()))
        starts = np.concatenate([[0], np.cumsum(depths)])
        if not descending_tuples and np.any(np.isin(np.flatnonzero(np.diff(lengths) > 0) + 1, starts, invert=True)):
            # Some pack is not in descending order: sort each, then equal packs may merge further.
            return cls.from_groups(strategy, max_length, max_depth,
                                   ((count, sorted(pack, reverse=True)) for pack, count in merged.items()), details)
        repeats = np.fromiter(map(merged.__getitem__, packs), dtype=np.int64, count=len(packs))
        return cls.from_packs(strategy, max_length, max_depth, lengths, starts, repeats, details=details)

    @classmethod
    def from_rows(cls, strategy: str, max_length: int, max_depth: int | None, rows, repeats,
                  slot_lengths=None, seconds: float = 0.0, details: dict | None = None) -> Packing:
        """Build a packing, merging identical rows and dropping unused ones."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim == 1:
            rows = rows[:, None]
        repeats = np.asarray(repeats, dtype=np.int64)
        slots = (np.full(rows.shape[0], max_length, dtype=np.int64) if slot_lengths is None
                 else np.asarray(slot_lengths, dtype=np.int64))
        rows = -np.sort(-rows, axis=1)
        keep = repeats > 0
        rows, repeats, slots = rows[keep], repeats[keep], slots[keep]
        width = int(np.count_nonzero(rows, axis=1).max()) if rows.size else 1
        rows = rows[:, :max(width, 1)]
        keys = np.column_stack([rows, slots])
        unique, merged = merged_rows(keys, repeats)
        return cls(strategy, max_length, max_depth, unique[:, :-1].copy(), merged, unique[:, -1].copy(),
                   seconds, details or {})

    def __getattr__(self, name):
        # Called only for an attribute not yet in __dict__: derive one form from the other, once.
        if not {"rows", "pack_starts"} & self.__dict__.keys():
            raise AttributeError(name)  # an object still being built (unpickling, copying)
        if name == "rows":
            value = self._dense_rows()
        elif name in ("pack_lengths", "pack_starts"):
            rows = self.__dict__["rows"]
            present = rows > 0
            self.__dict__["pack_starts"] = np.concatenate([[0], np.cumsum(present.sum(axis=1))]).astype(np.int64)
            self.__dict__["pack_lengths"] = rows[present].astype(np.int64)
            return self.__dict__[name]
        else:
            raise AttributeError(f"'Packing' object has no attribute {name!r}")
        self.__dict__[name] = value
        return value

    def _dense_rows(self) -> np.ndarray:
        depths = self.depths
        width = max(int(depths.max(initial=0)), 1)
        size_bytes = 8 * width * depths.size
        if size_bytes > DENSE_ROWS_LIMIT_BYTES:
            # max_depth, not its option: commands call it --max-depth, scenarios by their own key.
            raise InputError(f"{self.strategy}'s {depths.size:,} distinct packs hold up to {width:,} sequences: as one "
                             f"table they would take {size_bytes / 2**30:.1f} GiB; use the flat form "
                             "(pack_lengths, pack_starts) or a smaller max_depth", parameter="max_depth")
        rows = np.zeros((depths.size, width), dtype=np.int64)
        row_of = np.repeat(np.arange(depths.size), depths)
        rows[row_of, np.arange(self.pack_lengths.size) - self.pack_starts[row_of]] = self.pack_lengths
        return rows

    @property
    def depths(self) -> np.ndarray:
        """Sequences in each distinct pack."""
        if "pack_starts" in self.__dict__:
            return np.diff(self.pack_starts)
        return np.count_nonzero(self.rows, axis=1)

    def pack_tokens(self) -> np.ndarray:
        """Real tokens in each distinct pack."""
        if "rows" in self.__dict__:
            return self.rows.sum(axis=1)
        # Sums pack by pack: running sums of every length would take two more arrays of them all.
        starts = self.pack_starts
        tokens = np.zeros(starts.size - 1, dtype=np.int64)
        filled = starts[:-1] < starts[1:]
        if filled.any():
            tokens[filled] = np.add.reduceat(self.pack_lengths, starts[:-1][filled])
        return tokens

    @property
    def packs_total(self) -> int:
        return int(self.repeats.sum())

    @property
    def sequences(self) -> int:
        return int(self.repeats @ self.depths)

    @property
    def real_tokens(self) -> int:
        return int(self.repeats @ self.pack_tokens())

    @property
    def tokens(self) -> int:
        """The token slots its steps spend, padding included: its rows' slots, or, for a batcher that fills a
        token budget per batch (token-budget), every batch's whole budget: what a batch leaves of its budget
        is spent as surely as its padding (the step was sized for the budget)."""
        if "budget_tokens" in self.details:
            return int(self.details["budget_tokens"]) * int(self.details["batches"])
        return int(self.repeats @ self.slot_lengths)

    @property
    def padding_tokens(self) -> int:
        """Token slots spent on no real token (`tokens` less the real ones)."""
        return self.tokens - self.real_tokens

    @property
    def efficiency(self) -> float:
        """Real tokens over the token slots spent (`tokens`): the one definition in every table and record."""
        return self.real_tokens / self.tokens if self.tokens else 1.0

    @property
    def packing_factor(self) -> float:
        return self.sequences / self.packs_total if self.packs_total else 0.0

    @property
    def strategies_used(self) -> int:
        return int(self.repeats.size)

    @property
    def depth_used(self) -> int:
        return int(self.depths.max(initial=0))

    def placed_histogram(self) -> LengthHistogram:
        """How many sequences of each length the packing placed (must equal the input's)."""
        counts = np.zeros(self.max_length + 1, dtype=np.int64)
        starts = self.pack_starts
        # A chunk of packs at a time: a weight per sequence slot would take 16 bytes a slot at once.
        step = max(1, PLACED_CHUNK_SLOTS * self.strategies_used // max(int(starts[-1]), 1))
        for first in range(0, self.strategies_used, step):
            last = min(first + step, self.strategies_used)
            weights = np.repeat(self.repeats[first:last], np.diff(starts[first:last + 1]))
            placed = np.bincount(self.pack_lengths[starts[first]:starts[last]], weights=weights, minlength=counts.size)
            counts += placed[:counts.size].round().astype(np.int64)  # a length past max_length is not counted
        return LengthHistogram(counts[1:])

    def metrics(self, lower_bound_packs: float | None = None) -> dict:
        """The paper's metrics, with the key names of the `simbench pack --json` contract."""
        result = {
            "strategy": self.strategy,
            "max_depth": self.max_depth,
            "sequences": self.sequences,
            "packs": self.packs_total,
            "tokens": self.tokens,
            "padding_tokens": self.padding_tokens,
            "efficiency": self.efficiency,
            "packing_factor": self.packing_factor,
            "strategies_used": self.strategies_used,
            "depth_used": self.depth_used,
            "seconds": self.seconds,
            "lower_bound_packs": lower_bound_packs,
        }
        if lower_bound_packs:
            result["gap_to_bound"] = self.packs_total / lower_bound_packs - 1.0
        result["proven_optimal"], result["proof"] = self.proof(lower_bound_packs)
        return result

    def proof(self, lower_bound_packs: int | None = None) -> tuple[bool | None, str | None]:
        """Whether the packs are proven optimal, and how (or how far from the bound, and why): the packer's
        own statement (`details["proof"]`, `optimal`'s) or else packs meeting the bound; (None, None) with
        neither, (False, None) for packs over the bound that their packer makes no claim about."""
        if "proof" in self.details:
            return bool(self.details["proven_optimal"]), self.details["proof"]
        if lower_bound_packs is None:
            return None, None
        if self.packs_total <= lower_bound_packs:
            return True, "proven optimal (LP bound)"
        return False, None
