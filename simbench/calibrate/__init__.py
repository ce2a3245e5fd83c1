"""Torch timing runs that calibrate the cost models (optional extra: simbench-seq[torch])."""
