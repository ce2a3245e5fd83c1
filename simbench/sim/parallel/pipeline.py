"""One pipeline-parallel training step whose stage times depend on each microbatch's content.
GPipe, 1F1B and interleaved 1F1B, on SimPy and on an exact recurrence vectorized over replicas.

    >>> from simbench.sim.parallel.pipeline import pipeline_step
    >>> step = pipeline_step([[1.0] * 4] * 8, [[2.0] * 4] * 8, schedule="1f1b")   # 8 microbatches, 4 stages
    >>> float(step.step_seconds), round(float(step.bubble_fraction), 4)   # (m + p - 1)(f + b); (p-1)/(m+p-1)
    (33.0, 0.2727)

Every stage runs its operations (a microbatch's forward or backward through one model chunk) in the
fixed order the schedule gives it. An operation starts when the one before it on its stage has ended
and its input has arrived: a forward needs the previous chunk's forward of the same microbatch, a
backward the next chunk's backward (the last chunk's backward its own forward), each delayed by the
point-to-point send between them. Sends are asynchronous: they delay the receiver, they do not occupy
the sender. Stage times are given, not priced here: the caller prices each microbatch from its own
sequences, so a microbatch holding one long document is slower on every stage and stalls the rest.

Arrays are (..., microbatches, chunks): chunks = stages x virtual_stages, chunk c running on stage
c mod stages (Megatron's interleaving: stage s holds chunks s, s + p, s + 2p, ...). Leading axes are
independent replicas; the recurrence prices them together, wave by wave of independent operations.

The VTS pipeline (`simbench.sim.vts`) streams samples forward through stages that block when the
FIFO behind them is full. Here sends are asynchronous, so GPipe's forward phase is that pipeline with
FIFOs as long as the batch, and the two agree exactly there (tested, equal or unequal samples). VTS's
short FIFOs have no counterpart: what bounds a pipeline-parallel stage's in-flight microbatches is
1F1B's schedule (a stage starts a forward only after the backward ahead of it in its order).

One slow microbatch, closed form (tested). With equal microbatches (f forward, b backward per stage,
no send time) GPipe and 1F1B both take (m + p - 1)(f + b). The step is the longest path through the
operations' dependency graph, each operation weighing its duration. A path meets microbatch k at most
p times going forward and p times going backward (its chunks form one chain through the stages), so
making k slower by df forward and db backward on every stage adds at most p (df + db). For GPipe every
k has a path of base length (m + p - 1)(f + b) through all 2p of its operations; for 1F1B the last
microbatch does (stage 0 starts its forward at (m - 1)(f + b), the last stage runs its forward and
backward back to back, stage 0 ends with its backward) when m > p, and so does the first; other 1F1B
microbatches stay within the bound, some below it. In those cases the step becomes exactly
(m + p - 1)(f + b) + p (df + db). Against m equal microbatches of the same mean (each df / m, db / m
slower: (m + p - 1)(f + b + (df + db) / m)) the stall is (df + db)(p - 1)(m - 1) / m.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from simbench.errors import InputError
from simbench.validation import check_choice, check_whole_number

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")
ENGINES = ("recurrence", "simpy")
FORWARD, BACKWARD = 0, 1


@dataclass(frozen=True)
class PipelineStep:
    """One step of every replica (leading axes of the input; shape () for one replica)."""

    step_seconds: np.ndarray          # first operation's start to last one's end
    stage_busy_seconds: np.ndarray    # (..., stages): seconds each stage computes
    bubble_fraction: np.ndarray       # idle share of stages x step_seconds
    equal_step_seconds: np.ndarray    # the same schedule with every microbatch at the replica's mean
    # step_seconds - equal_step_seconds: what unequal microbatches cost. Negative where their order
    # helps: 1F1B fills with its first microbatches and drains with its last, so short ones there can
    # beat equal ones (4 microbatches of 0.45, 0.90, 0.82, 0.65 s per stage, backward twice that, on 3
    # stages: 12.01 s against 12.69 s at the mean). GPipe with stage-independent times never gains.
    stall_seconds: np.ndarray

    @property
    def idle_seconds(self) -> np.ndarray:
        """Idle device-seconds of the whole pipeline per step: stages x step - busy."""
        return self.step_seconds * self.stage_busy_seconds.shape[-1] - self.stage_busy_seconds.sum(axis=-1)


@dataclass(frozen=True)
class Operation:
    """One forward (kind 0) or backward (kind 1) of one microbatch through one model chunk."""

    kind: int
    microbatch: int
    chunk: int


def analytic_bubble_fraction(microbatches: int, stages: int, virtual_stages: int = 1) -> float:
    """Idle share of a step with equal microbatches and no send time: (p - 1) / (v m + p - 1).

    Exact for GPipe and 1F1B (v = 1); interleaving divides the fill and drain by v, Megatron's estimate.
    """
    m = check_whole_number(microbatches, "microbatches", minimum=1)
    p = check_whole_number(stages, "stages", minimum=1)
    v = check_whole_number(virtual_stages, "virtual_stages", minimum=1)
    return (p - 1) / (v * m + p - 1)


def pipeline_schedule(schedule: str, microbatches: int, stages: int, virtual_stages: int = 1
                      ) -> tuple[tuple[Operation, ...], ...]:
    """Each stage's operations in the order it runs them (one tuple per stage)."""
    schedule, m, p, v = _check_shape_parameters(schedule, microbatches, stages, virtual_stages)
    return tuple(tuple(Operation(*op) for op in ops) for ops in _stage_orders(schedule, m, p, v))


def pipeline_step(forward_seconds, backward_seconds, *, schedule: str = "1f1b", virtual_stages: int = 1,
                  p2p_seconds=0.0, engine: str = "recurrence", equal_reference: bool = True) -> PipelineStep:
    """A step of `schedule` over per-(microbatch, chunk) forward and backward seconds.

    `forward_seconds`, `backward_seconds`: (..., microbatches, stages x virtual_stages), >= 0; the
    leading axes are independent pipelines (replicas, steps), priced together.
    `p2p_seconds`: the send between chunk c and c + 1 of a microbatch (activations forward, their
    gradients backward), broadcastable to (..., microbatches, chunks - 1); a scalar for every hop.
    `engine`: "recurrence" (vectorized, exact) or "simpy" (one process per stage; small inputs).
    `equal_reference`: also price the microbatches at their mean for the stall (half the time);
    False leaves equal_step_seconds and stall_seconds NaN.
    """
    forward, backward, p2p, schedule, p, v = _check_inputs(forward_seconds, backward_seconds, schedule,
                                                           virtual_stages, p2p_seconds)
    engine = check_choice(engine, "engine", ENGINES)
    run = _recurrence_step_seconds if engine == "recurrence" else _simpy_step_seconds
    step = run(forward, backward, p2p, schedule, p, v)
    # The reference the stall is measured against: each chunk's (and hop's) mean over microbatches.
    if equal_reference:
        equal = run(*(np.broadcast_to(values.mean(axis=-2, keepdims=True), values.shape)
                      for values in (forward, backward, p2p)), schedule, p, v)
    else:
        equal = np.full_like(step, np.nan)
    busy = (forward + backward).sum(axis=-2)
    busy = busy.reshape(*busy.shape[:-1], v, p).sum(axis=-2)
    safe_step = np.where(step > 0, step, 1.0)
    # Clipped at 0: a pipeline of one stage is never idle, but its sums round either way.
    bubble = np.where(step > 0, np.maximum(1.0 - busy.sum(axis=-1) / (p * safe_step), 0.0), 0.0)
    return PipelineStep(step_seconds=step, stage_busy_seconds=busy, bubble_fraction=bubble,
                        equal_step_seconds=equal, stall_seconds=np.asarray(step - equal))


def operation_end_seconds(forward_seconds, backward_seconds, *, schedule: str = "1f1b", virtual_stages: int = 1,
                          p2p_seconds=0.0) -> np.ndarray:
    """When each operation ends: (..., 2, microbatches, chunks), [..., 0] forwards, [..., 1] backwards."""
    forward, backward, p2p, schedule, p, v = _check_inputs(forward_seconds, backward_seconds, schedule,
                                                           virtual_stages, p2p_seconds)
    return _recurrence_end_seconds(forward, backward, p2p, schedule, p, v)


# ---------------------------------------------------------------------------------------------- checks

def _check_shape_parameters(schedule, microbatches, stages, virtual_stages):
    schedule = check_choice(schedule, "schedule", SCHEDULES)
    m = check_whole_number(microbatches, "microbatches", minimum=1)
    p = check_whole_number(stages, "stages", minimum=1)
    v = check_whole_number(virtual_stages, "virtual_stages", minimum=1)
    if schedule != "interleaved-1f1b" and v != 1:
        raise InputError(f"virtual_stages must be 1 for schedule {schedule!r} (only interleaved-1f1b splits a "
                         f"stage into model chunks), found {v}", parameter="virtual_stages")
    if schedule == "interleaved-1f1b" and v > 1 and m % p:
        # Megatron's interleaved schedule walks microbatches in groups of p per model chunk.
        raise InputError(f"microbatches must be a multiple of the pipeline stages ({p}) for interleaved-1f1b "
                         f"with virtual_stages {v}, found {m}", parameter="microbatches")
    return schedule, m, p, v


def _check_inputs(forward_seconds, backward_seconds, schedule, virtual_stages, p2p_seconds):
    forward = _seconds_array(forward_seconds, "forward_seconds")
    backward = _seconds_array(backward_seconds, "backward_seconds")
    if forward.ndim < 2:
        raise InputError(f"forward_seconds must be (..., microbatches, chunks), found shape {forward.shape}",
                         parameter="forward_seconds")
    if backward.shape != forward.shape:
        raise InputError(f"backward_seconds must have forward_seconds' shape {forward.shape}, found "
                         f"{backward.shape}", parameter="backward_seconds")
    m, chunks = forward.shape[-2:]
    if m < 1 or chunks < 1:
        raise InputError(f"forward_seconds needs at least one microbatch and one chunk, found shape "
                         f"{forward.shape}", parameter="forward_seconds")
    v = check_whole_number(virtual_stages, "virtual_stages", minimum=1)
    if chunks % v:
        raise InputError(f"virtual_stages must divide the chunks (last axis, {chunks}) of forward_seconds, "
                         f"found {v}", parameter="virtual_stages")
    schedule, m, p, v = _check_shape_parameters(schedule, m, chunks // v, v)
    p2p = _seconds_array(p2p_seconds, "p2p_seconds")
    try:
        p2p = np.broadcast_to(p2p, forward.shape[:-1] + (chunks - 1,))
    except ValueError:
        raise InputError(f"p2p_seconds must broadcast to (..., microbatches, chunks - 1) = "
                         f"{forward.shape[:-1] + (chunks - 1,)}, found shape {p2p.shape}",
                         parameter="p2p_seconds") from None
    return forward, backward, p2p, schedule, p, v


def _seconds_array(values, name: str) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be an array of seconds", parameter=name) from None
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise InputError(f"{name} must be finite and >= 0", parameter=name)
    return array


# -------------------------------------------------------------------------------------------- schedules

def _stage_orders(schedule: str, m: int, p: int, v: int) -> list[list[tuple[int, int, int]]]:
    """(kind, microbatch, chunk) per stage, in order."""
    if schedule == "gpipe":
        # All forwards, then all backwards, both in microbatch order: 1F1B with a warm-up of m everywhere.
        return [[(FORWARD, i, s) for i in range(m)] + [(BACKWARD, i, s) for i in range(m)] for s in range(p)]
    if schedule == "1f1b" or v == 1:
        orders = []
        for s in range(p):
            warmup = min(p - 1 - s, m)  # PipeDream-flush: the last stage alternates from the start
            ops = [(FORWARD, i, s) for i in range(warmup)]
            for i in range(m - warmup):
                ops += [(FORWARD, warmup + i, s), (BACKWARD, i, s)]
            ops += [(BACKWARD, i, s) for i in range(m - warmup, m)]
            orders.append(ops)
        return orders
    return [_interleaved_order(s, m, p, v) for s in range(p)]


def _interleaved_order(s: int, m: int, p: int, v: int) -> list[tuple[int, int, int]]:
    """Megatron's interleaved 1F1B on stage s: virtual microbatch k of this stage runs model chunk
    (k // p) mod v of microbatch (k // (p v)) p + k mod p; backwards visit the chunks in reverse."""
    total = m * v

    def virtual(k: int, kind: int) -> tuple[int, int, int]:
        model_chunk = (k // p) % v
        if kind == BACKWARD:
            model_chunk = v - 1 - model_chunk
        return (kind, (k // (p * v)) * p + k % p, model_chunk * p + s)

    warmup = min((p - s - 1) * 2 + (v - 1) * p, total)
    ops = [virtual(k, FORWARD) for k in range(warmup)]
    for k in range(total - warmup):
        ops += [virtual(warmup + k, FORWARD), virtual(k, BACKWARD)]
    ops += [virtual(k, BACKWARD) for k in range(total - warmup, total)]
    return ops


@lru_cache(maxsize=64)
def _plan(schedule: str, m: int, p: int, v: int):
    """The operations grouped into waves: every operation's predecessors sit in earlier waves, so one
    wave is priced at once for all its operations and replicas."""
    chunks = p * v
    count = 2 * m * chunks
    none_op, none_hop = count, m * (chunks - 1)

    def index(kind, i, c):
        return (kind * m + i) * chunks + c

    prev = np.full(count, none_op, dtype=np.int64)
    dep = np.full(count, none_op, dtype=np.int64)
    hop = np.full(count, none_hop, dtype=np.int64)
    orders = _stage_orders(schedule, m, p, v)
    for ops in orders:
        for before, op in zip(ops, ops[1:]):
            prev[index(*op)] = index(*before)
    for i in range(m):
        for c in range(chunks):
            if c > 0:
                dep[index(FORWARD, i, c)] = index(FORWARD, i, c - 1)
                hop[index(FORWARD, i, c)] = i * (chunks - 1) + c - 1
            if c < chunks - 1:
                dep[index(BACKWARD, i, c)] = index(BACKWARD, i, c + 1)
                hop[index(BACKWARD, i, c)] = i * (chunks - 1) + c
            else:
                dep[index(BACKWARD, i, c)] = index(FORWARD, i, c)  # same stage: no send
    # Longest-path depth of each operation, walking the stages' orders as far as inputs allow.
    depth = np.zeros(count + 1, dtype=np.int64)
    done = np.zeros(count + 1, dtype=bool)
    done[none_op] = True
    flat_orders = [[index(*op) for op in ops] for ops in orders]
    position = [0] * p
    remaining = count
    while remaining:
        progressed = False
        for s, ops in enumerate(flat_orders):
            while position[s] < len(ops) and done[dep[ops[position[s]]]]:
                op = ops[position[s]]
                depth[op] = max(depth[prev[op]], depth[dep[op]]) + 1
                done[op] = True
                position[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # a schedule whose stages wait on each other: a bug, not an input
            raise RuntimeError(f"pipeline schedule {schedule} deadlocks (m={m}, p={p}, v={v})")
    depth = depth[:count]
    # Operations are stored in wave order, so that a wave reads its durations and writes its end
    # times as one contiguous block; only the inputs (predecessor, dependency) are gathered.
    order = np.argsort(depth, kind="stable")
    position = np.empty(count + 1, dtype=np.int64)
    position[order] = np.arange(count)
    position[none_op] = count
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(depth[order])) + 1, [count]])
    prev_position, dep_position = position[prev[order]], position[dep[order]]
    waves = tuple((int(a), int(b), prev_position[a:b], dep_position[a:b]) for a, b in zip(bounds, bounds[1:]))
    return _Plan(order=order, position=position[:count], hop=hop[order], waves=waves)


@dataclass(frozen=True)
class _Plan:
    order: np.ndarray      # operation (flat index) at each position
    position: np.ndarray   # position of each operation
    hop: np.ndarray        # send hop feeding each position (m (chunks - 1): none)
    waves: tuple           # (first position, end position, predecessor positions, dependency positions)


# --------------------------------------------------------------------------------------------- engines

# Replicas priced together: a block's operation-by-replica table stays near 16 MB, in cache between
# waves (one table of 2048 replicas x 8192 operations ran 4x slower than blocks of 512).
_BLOCK_VALUES = 1 << 21
# ... but never fewer replicas than this: each wave is a few numpy calls whatever its width, and a schedule of
# hundreds of microbatches has thousands of waves.
_BLOCK_REPLICAS_MIN = 64


def _recurrence_blocks(forward, backward, p2p, schedule, p, v):
    """Each block of replicas' operation end seconds, (positions + 1, replicas in block), in wave order."""
    m, chunks = forward.shape[-2:]
    # Views where the input allows: a broadcast input (the equal-microbatch reference) is copied a block
    # at a time, never whole.
    forward = forward.reshape(-1, m, chunks)
    backward = backward.reshape(-1, m, chunks)
    replicas = forward.shape[0]
    sends = bool(np.any(p2p))  # without send times the waves skip gathering them
    if sends:
        p2p = p2p.reshape(replicas, m, chunks - 1)
    plan = _plan(schedule, m, p, v)
    count = 2 * m * chunks
    block = max(_BLOCK_REPLICAS_MIN, _BLOCK_VALUES // (count + 1))
    for first in range(0, replicas, block):
        rows = slice(first, first + block)
        width = forward[rows].shape[0]
        # Operation-major rows, replicas along the row, in wave order.
        values = np.concatenate([forward[rows].reshape(width, -1), backward[rows].reshape(width, -1)], axis=1)
        durations = values.T[plan.order]
        if sends:
            hops = np.concatenate([p2p[rows].reshape(width, -1).T, np.zeros((1, width))])[plan.hop]
        end = np.zeros((count + 1, width))  # the last row: a zero for operations without an input
        for a, b, prev, dep in plan.waves:
            out = end[a:b]
            if sends:
                np.add(end[dep], hops[a:b], out=out)
                np.maximum(out, end[prev], out=out)
            else:
                np.maximum(end[dep], end[prev], out=out)
            out += durations[a:b]
        yield end, plan


def _recurrence_end_seconds(forward, backward, p2p, schedule, p, v) -> np.ndarray:
    *batch_shape, m, chunks = forward.shape
    blocks = [end[plan.position].T for end, plan in _recurrence_blocks(forward, backward, p2p, schedule, p, v)]
    return np.concatenate(blocks).reshape(*batch_shape, 2, m, chunks)


def _recurrence_step_seconds(forward, backward, p2p, schedule, p, v) -> np.ndarray:
    batch_shape = forward.shape[:-2]
    steps = [end.max(axis=0) for end, _ in _recurrence_blocks(forward, backward, p2p, schedule, p, v)]
    return np.concatenate(steps).reshape(batch_shape)


def _simpy_step_seconds(forward, backward, p2p, schedule, p, v) -> np.ndarray:
    batch_shape = forward.shape[:-2]
    m, chunks = forward.shape[-2:]
    replicas = int(np.prod(batch_shape, dtype=np.int64))
    flat = [values.reshape(replicas, *values.shape[-2:]) for values in (forward, backward, p2p)]
    steps = [simpy_end_seconds(f, b, h, schedule, p, v).max() for f, b, h in zip(*flat)]
    return np.array(steps, dtype=np.float64).reshape(batch_shape)


def simpy_end_seconds(forward: np.ndarray, backward: np.ndarray, p2p: np.ndarray, schedule: str, stages: int,
                      virtual_stages: int) -> np.ndarray:
    """One replica on SimPy: each stage a process taking its inputs from a Store in its own order;
    a finished operation sends its output to the neighbour's Store after the hop's send time.
    Returns when each operation ends, (2, microbatches, chunks) like `operation_end_seconds`."""
    import simpy  # only this engine needs it: the recurrence is the large-scale path

    m, chunks = forward.shape
    env = simpy.Environment()
    inboxes = [simpy.FilterStore(env) for _ in range(stages)]
    end = np.zeros((2, m, chunks))
    durations = (forward, backward)

    def send(message, stage, delay):
        yield env.timeout(delay)
        yield inboxes[stage].put(message)

    def stage_process(ops):
        for kind, i, c in ops:
            needs_input = (kind == FORWARD and c > 0) or (kind == BACKWARD and c < chunks - 1)
            if needs_input:
                # Blocks until the neighbour's output for exactly this operation has arrived.
                yield inboxes[c % stages].get(lambda message, wanted=(kind, i, c): message == wanted)
            yield env.timeout(durations[kind][i, c])
            end[kind, i, c] = env.now
            if kind == FORWARD and c + 1 < chunks:
                env.process(send((FORWARD, i, c + 1), (c + 1) % stages, p2p[i, c]))
            elif kind == BACKWARD and c > 0:
                env.process(send((BACKWARD, i, c - 1), (c - 1) % stages, p2p[i, c - 1]))

    for ops in _stage_orders(schedule, m, stages, virtual_stages):
        env.process(stage_process(ops))
    env.run()
    return end
