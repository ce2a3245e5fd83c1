"""Stragglers: the Gumbel law of a cluster's slowest device per step (`gumbel`), fitted to step times, and its
extrapolation to other cluster sizes from a fit, samples or an MLPerf log (`extrapolation`), and the reader of
MLPerf training logs and per-step CSVs (`mlperf_logs`) that those fits and `fit-logs` calibration use."""
