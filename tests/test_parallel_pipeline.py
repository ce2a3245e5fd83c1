"""Pipeline schedules with per-microbatch stage times: closed forms, SimPy against the recurrence, VTS."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.errors import InputError
from simbench.sim.parallel.pipeline import (SCHEDULES, analytic_bubble_fraction, operation_end_seconds,
                                            pipeline_schedule, pipeline_step, simpy_end_seconds)
from simbench.sim.vts import pipeline_departures


def _equal(m, p, forward=1.0, backward=2.0, v=1):
    return np.full((m, p * v), forward / v), np.full((m, p * v), backward / v)


@pytest.mark.parametrize("p", [1, 2, 3, 8, 16, 64])
@pytest.mark.parametrize("m", [1, 5, 64, 256])
@pytest.mark.parametrize("ratio", [1.0, 2.0, 3.0, 0.5])
def test_1f1b_bubble_of_equal_microbatches_is_the_analytic_one(p, m, ratio):
    forward, backward = _equal(m, p, 1.0, ratio)
    step = pipeline_step(forward, backward, schedule="1f1b")
    # The target is 1 %; the schedule hits the closed form exactly.
    assert step.bubble_fraction == pytest.approx(analytic_bubble_fraction(m, p), rel=1e-9, abs=1e-12)
    assert float(step.step_seconds) == pytest.approx((m + p - 1) * (1.0 + ratio))
    assert float(step.stall_seconds) == pytest.approx(0.0, abs=1e-9)
    assert np.allclose(step.stage_busy_seconds, m * (1.0 + ratio))


@pytest.mark.parametrize("p,m", [(1, 4), (4, 4), (4, 9), (8, 32), (16, 3)])
def test_gpipe_and_1f1b_take_the_same_step_on_equal_microbatches(p, m):
    forward, backward = _equal(m, p, 0.7, 1.9)
    gpipe = pipeline_step(forward, backward, schedule="gpipe")
    one_f_one_b = pipeline_step(forward, backward, schedule="1f1b")
    assert float(gpipe.step_seconds) == pytest.approx(float(one_f_one_b.step_seconds))
    assert float(gpipe.step_seconds) == pytest.approx((m + p - 1) * 2.6)


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16, 32])
@pytest.mark.parametrize("v", [2, 3, 4])
@pytest.mark.parametrize("groups", [1, 2, 8])
@pytest.mark.parametrize("ratio", [1.0, 2.0, 3.0])
def test_interleaving_divides_the_bubble_by_the_virtual_stages(p, v, groups, ratio):
    """Each stage's work split into v chunks of 1 / v the time, m a multiple of p, no send time:
    the bubble is (p - 1) / (v m + p - 1) to rounding (Megatron's (p - 1) / (v m) of the ideal time)."""
    m = groups * p
    forward, backward = _equal(m, p, 1.0, ratio, v=v)
    step = pipeline_step(forward, backward, schedule="interleaved-1f1b", virtual_stages=v)
    assert float(step.bubble_fraction) == pytest.approx(analytic_bubble_fraction(m, p, v), rel=1e-9)
    plain = pipeline_step(*_equal(m, p, 1.0, ratio), schedule="1f1b")
    assert float(step.step_seconds) < float(plain.step_seconds) or p == 1


def test_interleaving_with_one_virtual_stage_is_1f1b():
    rng = np.random.default_rng(3)
    forward, backward = rng.uniform(0.1, 1.0, (2, 7, 5))
    assert np.array_equal(operation_end_seconds(forward, backward, schedule="interleaved-1f1b"),
                          operation_end_seconds(forward, backward, schedule="1f1b"))


def _one_slow(m, p, k, f=1.0, b=2.0, df=3.0, db=5.0):
    forward, backward = _equal(m, p, f, b)
    forward[k] += df
    backward[k] += db
    return forward, backward


@pytest.mark.parametrize("m", [1, 2, 5, 8, 13])
@pytest.mark.parametrize("p", [1, 2, 4, 7])
@pytest.mark.parametrize("slower", [(3.0, 5.0), (0.1, 0.3), (0.0, 1.0)])
def test_one_slow_microbatch_stalls_by_the_closed_form(m, p, slower):
    """Microbatch k slower by df forward and db backward on every stage: GPipe's step grows by exactly
    p (df + db) for any k; 1F1B's by exactly that for the first and last microbatch when m > p and by no
    more for the others (the longest-path argument in the module docstring). Against equal microbatches
    of the same mean the stall is (df + db)(p - 1)(m - 1) / m."""
    df, db = slower
    base = (m + p - 1) * 3.0
    for k in range(m):
        forward, backward = _one_slow(m, p, k, df=df, db=db)
        gpipe = pipeline_step(forward, backward, schedule="gpipe")
        assert float(gpipe.step_seconds) == pytest.approx(base + p * (df + db))
        assert float(gpipe.stall_seconds) == pytest.approx((df + db) * (p - 1) * (m - 1) / m)
        one_f_one_b = pipeline_step(forward, backward, schedule="1f1b")
        if m > p and k in (0, m - 1):
            assert float(one_f_one_b.step_seconds) == pytest.approx(base + p * (df + db))
            assert float(one_f_one_b.stall_seconds) == pytest.approx((df + db) * (p - 1) * (m - 1) / m)
        assert float(one_f_one_b.step_seconds) <= base + p * (df + db) + 1e-9


def test_short_first_microbatches_make_1f1b_beat_equal_ones():
    """The stall is measured against equal microbatches of the same mean, which is no lower bound."""
    times = np.array([0.45188403, 0.89617712, 0.82368005, 0.64915209])[:, None] * np.ones((4, 3))
    step = pipeline_step(times, 2 * times, schedule="1f1b")
    assert float(step.step_seconds) == pytest.approx(12.012016, abs=1e-6)
    assert float(step.equal_step_seconds) == pytest.approx(18 * times.mean())
    assert float(step.stall_seconds) < -0.6
    assert float(pipeline_step(times, 2 * times, schedule="gpipe").stall_seconds) > 0


def test_a_long_middle_microbatch_stalls_1f1b_less_than_gpipe():
    forward, backward = _one_slow(8, 4, 3, df=0.1, db=0.1)
    assert float(pipeline_step(forward, backward, schedule="1f1b").stall_seconds) < float(
        pipeline_step(forward, backward, schedule="gpipe").stall_seconds)


_SCHEDULE_CASES = st.sampled_from([("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 1), ("interleaved-1f1b", 2),
                                   ("interleaved-1f1b", 3)])


@settings(max_examples=60, deadline=None)
@given(_SCHEDULE_CASES, st.integers(1, 4), st.integers(1, 3), st.booleans(), st.integers(0, 2**32 - 1))
def test_simpy_and_recurrence_agree_exactly_on_unequal_microbatches(case, p, groups, sends, seed):
    schedule, v = case
    m = groups * p if v > 1 else groups * p + seed % 3
    rng = np.random.default_rng(seed)
    forward = rng.uniform(0.0, 1.0, (m, p * v))
    backward = rng.uniform(0.0, 2.0, (m, p * v))
    p2p = rng.uniform(0.0, 0.3, (m, p * v - 1)) if sends else np.zeros((m, p * v - 1))
    recurrence = operation_end_seconds(forward, backward, schedule=schedule, virtual_stages=v, p2p_seconds=p2p)
    assert np.array_equal(simpy_end_seconds(forward, backward, p2p, schedule, p, v), recurrence)
    on_simpy = pipeline_step(forward, backward, schedule=schedule, virtual_stages=v, p2p_seconds=p2p,
                             engine="simpy")
    vectorized = pipeline_step(forward, backward, schedule=schedule, virtual_stages=v, p2p_seconds=p2p)
    assert on_simpy.step_seconds == vectorized.step_seconds
    assert on_simpy.equal_step_seconds == vectorized.equal_step_seconds
    # Each stage's busy time fits in the step, and the bubble is what is left.
    assert np.all(vectorized.stage_busy_seconds <= vectorized.step_seconds + 1e-12)
    assert 0.0 <= float(vectorized.bubble_fraction) < 1.0


def test_replicas_on_leading_axes_are_priced_independently():
    rng = np.random.default_rng(7)
    forward = rng.uniform(0.1, 1.0, (3, 2, 8, 4))
    backward = 2 * forward
    p2p = rng.uniform(0.0, 0.1, (3, 2, 8, 3))
    together = pipeline_step(forward, backward, p2p_seconds=p2p)
    assert together.step_seconds.shape == (3, 2) and together.stage_busy_seconds.shape == (3, 2, 4)
    for index in np.ndindex(3, 2):
        alone = pipeline_step(forward[index], backward[index], p2p_seconds=p2p[index])
        assert together.step_seconds[index] == alone.step_seconds
        assert together.stall_seconds[index] == alone.stall_seconds
    alone = pipeline_step(forward, backward, p2p_seconds=p2p, equal_reference=False)
    assert np.array_equal(alone.step_seconds, together.step_seconds) and np.all(np.isnan(alone.stall_seconds))


def test_send_time_adds_a_hop_per_stage_to_fill_and_drain():
    """Equal microbatches, send s per hop, 1F1B: the path through the first forward and last backward
    crosses p - 1 hops each way, so the step grows by 2 (p - 1) s when the sends do not fit elsewhere."""
    m, p, s = 1, 4, 0.25
    forward, backward = _equal(m, p)
    step = pipeline_step(forward, backward, p2p_seconds=s)
    assert float(step.step_seconds) == pytest.approx(p * 3.0 + 2 * (p - 1) * s)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_gpipe_forwards_are_the_vts_pipeline_with_room_for_every_sample(samples, stages, seed):
    """The VTS pipeline streams samples through stages forward only; a stage blocks when the FIFO behind
    it is full. A pipeline-parallel stage sends asynchronously, so its forwards are that pipeline with
    a FIFO as long as the batch: GPipe's forward ends are VTS departures with buffer_samples >= m - 1.
    (With smaller FIFOs VTS blocks; 1F1B limits in-flight microbatches by the backward instead.)"""
    seconds = np.random.default_rng(seed).uniform(0.0, 2.0, size=(samples, stages))
    ends = operation_end_seconds(seconds, np.zeros_like(seconds), schedule="gpipe")
    assert np.array_equal(ends[0], pipeline_departures(seconds, buffer_samples=samples - 1))
    equal = np.full((samples, stages), 0.5)
    assert float(pipeline_step(equal, np.zeros_like(equal), schedule="gpipe").step_seconds) == pytest.approx(
        float(pipeline_departures(equal)[-1, -1]))  # equal samples never block: (m + p - 1) x 0.5 both ways


def test_schedules_list_each_operation_once_in_a_dependency_order():
    for schedule, v in [("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2)]:
        orders = pipeline_schedule(schedule, 8, 4, v)
        ops = [op for stage in orders for op in stage]
        assert len(ops) == len(set(ops)) == 2 * 8 * 4 * v
        for stage, stage_ops in enumerate(orders):
            assert all(op.chunk % 4 == stage for op in stage_ops)
    first = pipeline_schedule("1f1b", 4, 3)[0]
    assert [(op.kind, op.microbatch) for op in first] == [(0, 0), (0, 1), (0, 2), (1, 0), (0, 3), (1, 1),
                                                           (1, 2), (1, 3)]


@pytest.mark.parametrize("call,parameter", [
    (lambda: pipeline_step(np.ones((6, 8)), np.ones((6, 8)), schedule="interleaved-1f1b", virtual_stages=2),
     "microbatches"),
    (lambda: pipeline_step(np.ones((4, 6)), np.ones((4, 6)), schedule="interleaved-1f1b", virtual_stages=4),
     "virtual_stages"),
    (lambda: pipeline_step(np.ones((4, 4)), np.ones((4, 4)), schedule="1f1b", virtual_stages=2), "virtual_stages"),
    (lambda: pipeline_step(np.ones((4, 4)), np.ones((4, 3))), "backward_seconds"),
    (lambda: pipeline_step(np.ones(4), np.ones(4)), "forward_seconds"),
    (lambda: pipeline_step(-np.ones((4, 4)), np.ones((4, 4))), "forward_seconds"),
    (lambda: pipeline_step(np.ones((4, 4)), np.full((4, 4), np.nan)), "backward_seconds"),
    (lambda: pipeline_step(np.ones((4, 4)), np.ones((4, 4)), p2p_seconds=np.ones(4)), "p2p_seconds"),
    (lambda: pipeline_step(np.ones((4, 4)), np.ones((4, 4)), schedule="zb-h1"), "schedule"),
    (lambda: pipeline_step(np.ones((4, 4)), np.ones((4, 4)), engine="gpu"), "engine"),
])
def test_bad_inputs_name_their_parameter(call, parameter):
    with pytest.raises(InputError) as raised:
        call()
    assert raised.value.parameter == parameter and parameter in str(raised.value)


def test_every_schedule_is_known():
    assert SCHEDULES == ("gpipe", "1f1b", "interleaved-1f1b")
