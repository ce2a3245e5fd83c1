"""All-reduce, all-gather and reduce-scatter seconds as NCCL runs them: ring or double binary tree, whichever its
tuner predicts faster, over NVLink inside a node and one NIC rail per GPU across nodes.

    >>> from simbench.costmodels.collectives import Link, allreduce
    >>> time = allreduce(2**20, 8, 672e6, Link(5e-6, 360e9), Link(10e-6, 45e9))
    >>> time.algorithm, round(time.seconds * 1e3, 2)
    ('tree', 4.56)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

from simbench.errors import InputError
from simbench.validation import check_whole_number

# NCCL's tuner (src/graph/tuning.cc, ncclTopoTuneModel; NVIDIA/nccl at 01afd20a) prices a collective as
# latency + bytes / algorithm bandwidth for each algorithm and keeps the fastest:
#   ring all-reduce: 2 (n - 1) steps, 2 (nodes - 1) of them crossing the network; algorithm
#     bandwidth = bus bandwidth x n / (2 (n - 1));
#   tree all-reduce (double binary tree across nodes, a chain inside each): latency
#     2 x ((ranks per node - 1) x intra-node hop + log2(nodes) x network hop); algorithm bandwidth =
#     bus bandwidth x 0.5, the bus bandwidth first multiplied by 0.9 ("busBw*.9"): the trees' reduce and
#     broadcast halves cannot keep every link busy the way a ring does;
#   all-gather and reduce-scatter: rings only, n - 1 steps, algorithm bandwidth = bus bandwidth x n / (n - 1).
NCCL_TREE_BANDWIDTH_FRACTION = 0.9


@dataclass(frozen=True)
class Link:
    """One level of the network as a collective sees it: the latency of one hop (one step of a ring, one
    level of a tree) and the bus bandwidth one rank drives over it (nccl-tests' `busbw`)."""

    latency_seconds: float
    bytes_per_s: float

    def __post_init__(self):
        if not (isinstance(self.latency_seconds, Real) and 0 <= self.latency_seconds < math.inf):
            raise InputError(f"link `latency_seconds` must be a finite number >= 0, found {self.latency_seconds!r}",
                             parameter="latency_seconds")
        if not (isinstance(self.bytes_per_s, Real) and self.bytes_per_s > 0):
            raise InputError(f"link `bytes_per_s` must be a number > 0 (inf: no limit), found {self.bytes_per_s!r}",
                             parameter="bytes_per_s")


@dataclass(frozen=True)
class CollectiveTime:
    """A collective's predicted seconds, the algorithm NCCL's tuner would pick across nodes, and the bus
    bandwidth nccl-tests would print for it (bytes x 2 (n - 1) / n / seconds for an all-reduce)."""

    seconds: float
    algorithm: str  # "ring", "tree", or "none" for a single rank
    bus_bytes_per_s: float


def allreduce(ranks: int, ranks_per_node: int | None, payload_bytes: float, intra_node: Link,
              inter_node: Link) -> CollectiveTime:
    """An all-reduce of `payload_bytes` on each of `ranks` ranks, `ranks_per_node` of them sharing a node's
    NVLink (None: every rank on its own node, all on `inter_node`), by ring or double binary tree,
    whichever NCCL's tuner predicts faster.

    Across nodes the traffic runs on k rails at once (k = ranks per node, a NIC each), each carrying 1/k of
    the buffer, so the bus bandwidth is k x the NIC's, capped by NVLink's. A ring crosses the network
    2 (nodes - 1) of its 2 (n - 1) hops; a tree chains the node's k ranks and climbs log2(nodes) levels.
    """
    ranks, per_node, nodes = _layout(ranks, ranks_per_node, payload_bytes)
    if ranks == 1:
        return CollectiveTime(0.0, "none", math.inf)
    bus_bytes_per_s = _bus_bytes_per_s(per_node, nodes, intra_node, inter_node)
    ring = (2 * (ranks - nodes) * intra_node.latency_seconds + 2 * (nodes - 1) * inter_node.latency_seconds
            + 2 * (ranks - 1) / ranks * payload_bytes / bus_bytes_per_s)
    tree = (2 * ((per_node - 1) * intra_node.latency_seconds
                 + math.ceil(math.log2(nodes)) * inter_node.latency_seconds)
            + 2 * payload_bytes / (NCCL_TREE_BANDWIDTH_FRACTION * bus_bytes_per_s))
    algorithm, seconds = ("ring", ring) if ring <= tree else ("tree", tree)
    return CollectiveTime(seconds, algorithm, _bus(2 * (ranks - 1) / ranks * payload_bytes, seconds))


def allgather(ranks: int, ranks_per_node: int | None, payload_bytes: float, intra_node: Link,
              inter_node: Link) -> CollectiveTime:
    """An all-gather whose gathered buffer is `payload_bytes` (each rank contributes 1/n of it) on rings, as
    NCCL runs it: n - 1 hops, nodes - 1 of them across the network, each rank sending (n - 1) / n of the
    buffer at the bus bandwidth `allreduce` uses. A reduce-scatter of a `payload_bytes` input costs the same."""
    ranks, per_node, nodes = _layout(ranks, ranks_per_node, payload_bytes)
    if ranks == 1:
        return CollectiveTime(0.0, "none", math.inf)
    bus_bytes_per_s = _bus_bytes_per_s(per_node, nodes, intra_node, inter_node)
    seconds = ((ranks - nodes) * intra_node.latency_seconds + (nodes - 1) * inter_node.latency_seconds
               + (ranks - 1) / ranks * payload_bytes / bus_bytes_per_s)
    return CollectiveTime(seconds, "ring", _bus((ranks - 1) / ranks * payload_bytes, seconds))


def reduce_scatter(ranks: int, ranks_per_node: int | None, payload_bytes: float, intra_node: Link,
                   inter_node: Link) -> CollectiveTime:
    """A reduce-scatter of a `payload_bytes` input into 1/n shards: the all-gather's ring run backwards."""
    return allgather(ranks, ranks_per_node, payload_bytes, intra_node, inter_node)


def _layout(ranks, ranks_per_node, payload_bytes) -> tuple[int, int, int]:
    """(ranks, ranks per node, nodes), checked."""
    ranks = _check(ranks, payload_bytes)
    if ranks_per_node is None:
        return ranks, 1, ranks
    per_node = min(check_whole_number(ranks_per_node, "ranks_per_node", minimum=1), ranks)
    return ranks, per_node, -(-ranks // per_node)


def _bus_bytes_per_s(per_node: int, nodes: int, intra_node: Link, inter_node: Link) -> float:
    if nodes == 1:
        return intra_node.bytes_per_s
    if per_node == 1:
        return inter_node.bytes_per_s
    return min(intra_node.bytes_per_s, per_node * inter_node.bytes_per_s)


def _bus(bus_bytes: float, seconds: float) -> float:
    return bus_bytes / seconds if seconds > 0 else math.inf


def _check(ranks, payload_bytes) -> int:
    ranks = check_whole_number(ranks, "ranks", minimum=1)
    if isinstance(payload_bytes, bool) or not isinstance(payload_bytes, Real) or not (
            0 <= payload_bytes < math.inf):
        raise InputError(f"`payload_bytes` must be a finite number >= 0, found {payload_bytes!r}",
                         parameter="payload_bytes")
    return ranks
