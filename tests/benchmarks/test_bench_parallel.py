"""Speed of the pipeline recurrence and of context-parallel work at 16k-GPU scale (target: well under 1 s).

A pipeline step of 2048 replicas x 256 microbatches x 16 stages and one of 256 microbatches x 64 stages
(each priced twice: as given and at the microbatches' mean, for the stall); context-parallel work of
2000 rows of 256k positions holding 60 documents each, over 16 ranks.
"""

import numpy as np
import pytest

from simbench.sim.parallel.context_parallel import SHARDINGS, context_parallel_work
from simbench.sim.parallel.pipeline import pipeline_schedule, pipeline_step


@pytest.mark.parametrize("replicas,microbatches,stages", [(2048, 256, 16), (1, 256, 64), (128, 256, 64)])
def test_pipeline_step(benchmark, replicas, microbatches, stages):
    forward = np.random.default_rng(0).uniform(0.5, 1.5, (replicas, microbatches, stages))
    pipeline_schedule("1f1b", microbatches, stages)  # the schedule's plan is built once per shape
    step = benchmark.pedantic(pipeline_step, args=(forward, 2 * forward), rounds=3, iterations=1)
    assert step.step_seconds.shape == (replicas,)


@pytest.mark.parametrize("sharding", SHARDINGS)
def test_context_parallel_work(benchmark, sharding):
    rows = 2000
    lengths = np.random.default_rng(0).integers(1, 4000, size=rows * 60)
    row_of_document = np.repeat(np.arange(rows), 60)
    work = benchmark.pedantic(context_parallel_work, args=(lengths, 2**18, 16, sharding),
                              kwargs=dict(row_of_document=row_of_document), rounds=3, iterations=1)
    assert work.pairs.shape == (rows, 16, 16)
