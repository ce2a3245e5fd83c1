"""Cost models: price per-device batches (see `base`) on a model and a hardware profile."""
