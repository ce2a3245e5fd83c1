"""The simulator's engines, which turn priced batches into step times: `event` (SimPy: devices as processes, the
all-reduce a barrier), `vectorized` (every device's step in one numpy pass) and `order_statistics` (the slowest
of n devices drawn directly); `choice` decides which runs when (docs/engines.md tells the rules)."""
