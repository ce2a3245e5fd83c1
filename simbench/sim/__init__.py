"""The simulator: per-device batches, SimPy processes and vectorized Monte Carlo."""
