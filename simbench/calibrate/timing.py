"""Times full training steps (forward, backward, optimizer) of the encoder on real batches.

Repeats are interleaved across batches so that noise from other processes hits every batch alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from simbench.calibrate.batches import TorchBatch
from simbench.calibrate.encoder import Encoder, EncoderShape, training_loss


@dataclass(frozen=True)
class Trainer:
    """An encoder, its optimizer and the device they live on."""

    model: Encoder
    optimizer: torch.optim.Optimizer
    device: torch.device

    def step(self, batch: TorchBatch) -> None:
        """One full training step on a batch already on the device (bfloat16 autocast on CUDA, as
        GPU training runs, and as flash-attention requires)."""
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            loss = training_loss(self.model, batch)
        loss.backward()
        self.optimizer.step()

    def timed_step_seconds(self, batch: TorchBatch) -> float:
        """Wall-clock seconds of one step; the device is synchronised before and after."""
        _synchronize(self.device)
        start = time.perf_counter()
        self.step(batch)
        _synchronize(self.device)
        return time.perf_counter() - start


@dataclass(frozen=True)
class StepTiming:
    """Repeated timings of one batch."""

    samples_seconds: tuple[float, ...]

    @property
    def median_seconds(self) -> float:
        return float(np.median(self.samples_seconds))

    @property
    def spread_fraction(self) -> float:
        """Inter-quartile range over the median: how noisy the timing was."""
        low, high = np.percentile(self.samples_seconds, [25, 75])
        return float((high - low) / self.median_seconds)


def build_trainer(shape: EncoderShape, device: torch.device | str, seed: int) -> Trainer:
    """A freshly initialised encoder (seeded) with AdamW, on `device`."""
    device = torch.device(device)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)  # nn.Module initialisers draw from the global generator only
    model = Encoder(shape).to(device).train()
    torch.random.set_rng_state(generator_state)
    return Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-4), device)


def time_batches(trainer: Trainer, batches: Sequence[TorchBatch], warmup: int, repeats: int,
                 progress: Callable[[], None] = lambda: None,
                 order_rng: np.random.Generator | None = None) -> list[StepTiming]:
    """Time every batch `repeats` times after `warmup` untimed steps each, in rounds.

    With `order_rng` every round visits the batches in a new random order, so a burst of load
    from other processes lands on different batches in different rounds and the median drops it.
    `progress` is called after every step (timed or not), for a progress bar at the edge.
    """
    on_device = [batch.to(trainer.device) for batch in batches]
    for _ in range(warmup):
        for batch in on_device:
            trainer.step(batch)
            progress()
    samples: list[list[float]] = [[] for _ in on_device]
    for _ in range(repeats):
        order = order_rng.permutation(len(on_device)) if order_rng is not None else range(len(on_device))
        for index in order:
            samples[index].append(trainer.timed_step_seconds(on_device[index]))
            progress()
    return [StepTiming(tuple(times)) for times in samples]


def device_description(device: torch.device | str) -> dict:
    """What the profile records about the machine the timings came from."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        import platform

        name = platform.processor() or platform.machine()
    return {"device": device.type, "device_name": name, "torch_version": str(torch.__version__),
            "threads": torch.get_num_threads()}


def training_precision(device: torch.device | str) -> str:
    return "bfloat16 autocast" if torch.device(device).type == "cuda" else "float32"


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
