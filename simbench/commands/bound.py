"""`simbench bound`: the certified LP lower bound on packs; `simbench assign`: sequences to packs.

`assign` turns a histogram packing into per-pack dataset indices, written atomically as .npy or parquet.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import typer
from rich.console import Console

from simbench.errors import InputError, writing_to
from simbench.histogram import load_histogram
from simbench.atomic import atomic_file


def bound(
    histogram_name: str = typer.Argument(..., metavar="HISTOGRAM", help="histogram CSV/JSON file or bundled name"),
    max_depth: int = typer.Option(None, "--max-depth", help="at most this many sequences per pack"),
    max_length: int = typer.Option(None, "--max-length", help="pack length in tokens [default: the histogram's]"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
) -> None:
    """The fewest packs any packer can reach: the LP relaxation's optimum, rounded up."""
    from simbench.strategies import checked_max_length
    from simbench.strategies.optimal import lp_lower_bound

    histogram = load_histogram(histogram_name)
    max_length = checked_max_length(histogram, max_length, max_depth)
    start = time.perf_counter()
    result = lp_lower_bound(histogram, max_length, max_depth)
    seconds = time.perf_counter() - start
    if as_json:
        print(json.dumps({"histogram": histogram_name, "max_length": max_length, "max_depth": max_depth,
                          "lp_value": result.value, "lower_bound_packs": result.lower_bound_packs,
                          "seconds": seconds}, indent=2))
        return
    depth = "no depth limit" if max_depth is None else f"depth <= {max_depth}"
    efficiency = histogram.real_tokens / (result.lower_bound_packs * max_length) if result.lower_bound_packs else 1.0
    stop = "converged" if result.converged else "stopped early: Farley bound"
    Console().print(
        f"{histogram_name} at max length {max_length}, {depth}:\n"
        f"  lower bound {result.lower_bound_packs} packs (efficiency at most {100 * efficiency:.3f} %)\n"
        f"  LP value {result.value:.4f} ({stop}, {result.pricing_rounds} pricing rounds, {seconds:.2f} s)",
        highlight=False, soft_wrap=True)


def assign(
    histogram_name: str = typer.Argument(..., metavar="HISTOGRAM", help="histogram CSV/JSON file or bundled name"),
    lengths_path: Path = typer.Option(..., "--lengths", help=".npy file of every sequence's length, in dataset order"),
    strategy: str = typer.Option(..., "--strategy", help="packing strategy (see `simbench pack --help`)"),
    max_depth: int = typer.Option(None, "--max-depth", help="at most this many sequences per pack"),
    max_length: int = typer.Option(None, "--max-length", help="pack length in tokens [default: the histogram's]"),
    seed: int = typer.Option(0, "--seed", help="seed of the shuffles (same seed, same assignment)"),
    output: Path = typer.Option(..., "-o", "--output", help="OUT.npy (packs x depth, -1 = empty) or OUT.parquet"),
) -> None:
    """Pack the histogram, then say which dataset sequence goes into each pack slot."""
    from simbench.strategies import PackOptions, get_strategy
    from simbench.strategies.assign import assign_sequences

    if output.suffix not in (".npy", ".parquet"):
        raise InputError(f"output must end in .npy or .parquet, found {output.name!r}")
    histogram = load_histogram(histogram_name)
    lengths = _load_lengths(lengths_path)
    packing = get_strategy(strategy)(histogram, max_length, max_depth, PackOptions(seed=seed))
    try:
        assignment = assign_sequences(packing, lengths, np.random.default_rng(seed))
    except InputError as error:
        raise InputError(f"{error} (histogram {histogram_name})", source=str(lengths_path)) from None
    with writing_to(output), atomic_file(output) as temporary:
        if output.suffix == ".npy":
            with temporary.open("wb") as handle:
                np.save(handle, assignment)
        else:
            _write_parquet(assignment, temporary)
    Console(stderr=True).print(f"{packing.packs_total} packs of {packing.sequences} sequences "
                               f"({strategy}, efficiency {100 * packing.efficiency:.3f} %): wrote {output}",
                               highlight=False, soft_wrap=True)


def _load_lengths(path: Path) -> np.ndarray:
    if path.suffix != ".npy":
        raise InputError("expected a .npy file of sequence lengths", source=str(path))
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError("no such file", source=str(path)) from None
    except (ValueError, OSError) as error:
        raise InputError(f"not a readable .npy array: {error}", source=str(path)) from None


def _write_parquet(assignment: np.ndarray, path: Path) -> None:
    """One row per pack, its sequence indices as a list column (empty slots left out)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    filled = assignment >= 0
    offsets = np.concatenate([[0], np.cumsum(filled.sum(axis=1))]).astype(np.int64)
    indices = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(assignment[filled]))
    pq.write_table(pa.table({"sequence_indices": indices}), path)


def register(app: typer.Typer) -> None:
    app.command()(bound)
    app.command()(assign)
