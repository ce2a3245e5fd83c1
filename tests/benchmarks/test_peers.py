"""simbench beside other packers on the same inputs, in alternating rounds: packs, efficiency, time.

Peers: seqpacker's OBFD (`pip install seqpacker`: a Rust build from source, or its PyPI wheel loaded as
abi3, see SEQPACKER_WHEEL), binpacking's
to_constant_volume and TRL's pack_dataset with its "bfd" strategy (`pip install -e '.[peers]'`);
one not installed is skipped with the reason. simbench's side gives what a peer's user gets, the
sequence indices of every pack: the histogram of the lengths, `bfd` on it, then `assign_packs`.
Inputs are Wikipedia-512 lengths drawn from the bundled histogram (seed 0). The table goes to
reports/peers.md and reports/peers.csv; `simbench bench -k peers` runs this file alone.
"""

import csv
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import statistics
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from simbench.histogram import LengthHistogram, load_histogram
from simbench.strategies import get_strategy
from simbench.strategies.assign import assign_packs

MAX_LENGTH = 512
REPORT_DIR = Path(__file__).resolve().parents[2] / "reports"
COLUMNS = ["peer", "version", "loaded from", "sequences", "peer packs", "simbench packs", "peer efficiency %",
           "simbench efficiency %", "peer seconds", "simbench seconds", "time ratio simbench/peer", "rounds"]


def wikipedia_lengths(sequences: int | str) -> np.ndarray:
    """Wikipedia-512 lengths in a random order: all of them, or a sample of `sequences`."""
    histogram = load_histogram("wikipedia_512")
    if sequences == "all":
        lengths = histogram.expand()
    else:
        lengths = np.random.default_rng(0).choice(histogram.lengths, size=sequences,
                                                  p=histogram.counts / histogram.sequences)
    np.random.default_rng(0).shuffle(lengths)
    return lengths


def simbench_packs(lengths: np.ndarray):
    packing = get_strategy("bfd")(LengthHistogram.from_lengths(lengths, MAX_LENGTH), MAX_LENGTH, None)
    return assign_packs(packing, lengths, np.random.default_rng(0))


def seqpacker_packs(lengths: np.ndarray):
    from seqpacker import Packer

    return Packer(capacity=MAX_LENGTH, strategy="obfd").pack_flat(lengths.astype(np.int64))


def binpacking_packs(lengths: np.ndarray):
    import binpacking

    return binpacking.to_constant_volume(list(enumerate(lengths.tolist())), MAX_LENGTH, weight_pos=1)


def trl_packs(dataset):
    from trl import pack_dataset

    return pack_dataset(dataset, MAX_LENGTH, strategy="bfd")


# Readers: (pack offsets, the packed sequences' indices) in the ragged layout of `assign_packs`.
def read_simbench(result):
    return result.pack_offsets, result.sequence_indices


def read_seqpacker(result):
    items, boundaries = (np.asarray(part, dtype=np.int64) for part in result)
    # The boundaries may or may not include 0 and the end: empty packs are no packs.
    offsets = np.unique(np.concatenate([[0], boundaries, [items.size]]))
    return offsets, items


def read_binpacking(result):
    packs = [[index for index, _ in pack] for pack in result if pack]
    return np.concatenate([[0], np.cumsum([len(pack) for pack in packs])]), np.concatenate(packs)


def read_trl(result):
    # TRL keeps no sequence ids, only each pack's sequence lengths: None says so.
    sizes = [len(pack) for pack in result["seq_lengths"]]
    return np.concatenate([[0], np.cumsum(sizes)]), None, np.concatenate(result["seq_lengths"])


def trl_input(lengths: np.ndarray):
    import pyarrow as pa
    from datasets import Dataset, disable_progress_bars

    disable_progress_bars()
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    token_ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.ones(int(offsets[-1]), dtype=np.int32)))
    return Dataset(pa.table({"input_ids": token_ids}))


# (peer, its module, package name, sequences, rounds, its input from the lengths, pack function, reader)
CASES = {
    "seqpacker-obfd-100k": ("seqpacker OBFD", "seqpacker", "seqpacker", 100_000, 7, None, seqpacker_packs,
                            read_seqpacker),
    "seqpacker-obfd-16.3M": ("seqpacker OBFD", "seqpacker", "seqpacker", "all", 3, None, seqpacker_packs,
                             read_seqpacker),
    "binpacking-10k": ("binpacking to_constant_volume", "binpacking", "binpacking", 10_000, 3, None,
                       binpacking_packs, read_binpacking),
    "trl-bfd-100k": ("TRL pack_dataset bfd", "trl", "trl", 100_000, 3, trl_input, trl_packs, read_trl),
}


INSTALL = {
    "seqpacker": "pip install seqpacker builds 0.1.3 from source (Rust and crates.io)",
    "binpacking": "pip install -e '.[peers]'",
    "trl": "pip install -e '.[peers]'",
}

# A seqpacker wheel (the file, or a folder holding it) to load when seqpacker is not installed. PyPI's only
# x86-64 Linux wheel of 0.1.3, seqpacker-0.1.3-cp38-cp38-manylinux_2_17_x86_64.manylinux2014_x86_64.whl, is a
# limited-API (abi3) build tagged cp38 while the release requires Python >= 3.9, so pip never selects it: a plain
# `pip download seqpacker==0.1.3` takes the sdist (a Rust build), and --only-binary=:all: finds nothing, on
# CPython 3.11 as with --platform manylinux2014_x86_64 --abi abi3 --python-version 3.9. This fetches it (once,
# with network; the benchmark itself needs none):
#   pip download seqpacker==0.1.3 --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
#       --python-version 3.8 --implementation cp --abi cp38 --ignore-requires-python -d WHEELS
SEQPACKER_WHEEL = "SIMBENCH_SEQPACKER_WHEEL"


def seqpacker_wheel() -> Path | None:
    """The wheel SEQPACKER_WHEEL names, or None when it names none."""
    given = os.environ.get(SEQPACKER_WHEEL)
    if not given:
        return None
    path = Path(given)
    wheels = sorted(path.glob("seqpacker-*.whl")) if path.is_dir() else [path]
    if not wheels or not wheels[-1].is_file():
        pytest.fail(f"{SEQPACKER_WHEEL}={given} names no seqpacker wheel")
    return wheels[-1]


def load_abi3_wheel(wheel: Path, folder: Path) -> str:
    """Import seqpacker from `wheel`, unpacked into `folder`, whatever CPython tag its extension's file name
    carries (a limited-API extension loads on any later CPython); say where it came from."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(folder)
    extension = next((folder / "seqpacker").glob("_core*.so"))
    # The import system only looks for this CPython's extension suffixes; load the file by its own name.
    loader = importlib.machinery.ExtensionFileLoader("seqpacker._core", str(extension))
    spec = importlib.util.spec_from_file_location("seqpacker._core", extension, loader=loader)
    core = importlib.util.module_from_spec(spec)
    loader.exec_module(core)
    sys.modules["seqpacker._core"] = core
    sys.path.insert(0, str(folder))  # the package and its dist-info (for its version)
    importlib.import_module("seqpacker")
    return f"{wheel.name}, its {extension.name} loaded as abi3 on CPython {sys.version_info[0]}.{sys.version_info[1]}"


@pytest.fixture(scope="session")
def seqpacker_source(tmp_path_factory) -> str | None:
    """Where seqpacker comes from: installed, loaded from the wheel SEQPACKER_WHEEL names, or None (skip)."""
    if importlib.util.find_spec("seqpacker") is not None:
        return "installed"
    wheel = seqpacker_wheel()
    if wheel is None:
        return None
    return load_abi3_wheel(wheel, tmp_path_factory.mktemp("seqpacker"))


@pytest.fixture(scope="module")
def table():
    rows = []
    yield rows
    if rows:
        REPORT_DIR.mkdir(exist_ok=True)
        with open(REPORT_DIR / "peers.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(str(row[column]) for column in COLUMNS) + " |" for row in rows]
        (REPORT_DIR / "peers.md").write_text("\n".join(lines) + "\n")


def checked_packs(lengths: np.ndarray, offsets, placed, pack_lengths=None) -> tuple[int, float]:
    """The number of packs and their efficiency, once every sequence is known to be placed once
    (or, without indices, the packed lengths to be the input's) and no pack to be too long."""
    offsets = np.asarray(offsets, dtype=np.int64)
    if placed is not None:
        np.testing.assert_array_equal(np.sort(placed), np.arange(lengths.size))
        pack_lengths = lengths[placed]
    else:
        np.testing.assert_array_equal(np.sort(pack_lengths), np.sort(lengths))
    assert np.add.reduceat(pack_lengths, offsets[:-1]).max() <= MAX_LENGTH
    packs = offsets.size - 1
    return packs, lengths.sum() / (packs * MAX_LENGTH)


@pytest.mark.parametrize("case", list(CASES))
def test_peer(benchmark, table, case, seqpacker_source):
    peer, module, package, sequences, rounds, make_input, pack_with_peer, read_peer = CASES[case]
    loaded_from = "installed"
    if module == "seqpacker":
        if seqpacker_source is None:
            pytest.skip(f"seqpacker is not installed and {SEQPACKER_WHEEL} names no wheel: {INSTALL[package]}; PyPI's "
                        "only x86-64 Linux wheel of 0.1.3 is tagged cp38-cp38-manylinux_2_17_x86_64 for a release "
                        "requiring Python >= 3.9, so pip selects it for no interpreter (tried: default tags on "
                        "CPython 3.11, --only-binary=:all:, --platform manylinux2014_x86_64 --abi abi3 "
                        "--python-version 3.9); see SEQPACKER_WHEEL in this file for the download that gets it")
        loaded_from = seqpacker_source
        print(f"seqpacker: {loaded_from}")
    elif importlib.util.find_spec(module) is None:
        pytest.skip(f"{package} is not installed: {INSTALL[package]}")
    lengths = wikipedia_lengths(sequences)
    peer_input = make_input(lengths) if make_input else lengths
    times = {"peer": [], "simbench": []}
    results = {}

    def alternating_rounds():
        for round_number in range(rounds):
            sides = [("peer", pack_with_peer, peer_input), ("simbench", simbench_packs, lengths)]
            for side, function, argument in sides[::-1] if round_number % 2 else sides:
                started = time.perf_counter()
                results[side] = function(argument)
                times[side].append(time.perf_counter() - started)

    benchmark.pedantic(alternating_rounds, rounds=1, iterations=1)
    peer_packs, peer_efficiency = checked_packs(lengths, *read_peer(results["peer"]))
    own_packs, own_efficiency = checked_packs(lengths, *read_simbench(results["simbench"]))
    peer_seconds, own_seconds = statistics.median(times["peer"]), statistics.median(times["simbench"])
    row = {"peer": peer, "version": importlib.metadata.version(package), "loaded from": loaded_from, "sequences": f"{lengths.size:,}",
           "peer packs": f"{peer_packs:,}", "simbench packs": f"{own_packs:,}",
           "peer efficiency %": f"{100 * peer_efficiency:.3f}", "simbench efficiency %": f"{100 * own_efficiency:.3f}",
           "peer seconds": f"{peer_seconds:.4f}", "simbench seconds": f"{own_seconds:.4f}",
           "time ratio simbench/peer": f"{own_seconds / peer_seconds:.3f}", "rounds": rounds}
    table.append(row)
    benchmark.extra_info.update(row)
