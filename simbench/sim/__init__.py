"""The simulator: per-device batches, SimPy processes and vectorized Monte Carlo.

Entry point: `simbench.sim.simulate.simulate(histogram, plans, devices, cost_model, ...)`.
"""
