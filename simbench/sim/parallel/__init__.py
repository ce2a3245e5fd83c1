"""Model parallelism inside a replica: pipeline schedules and context-parallel attention, priced per microbatch.

`pipeline` turns per-microbatch stage times into a step under GPipe, 1F1B or interleaved 1F1B;
`context_parallel` shards a packed row's causal attention over context-parallel ranks; `gradient_sync` says how
much of the gradients' sync between replicas a step leaves exposed.
"""
