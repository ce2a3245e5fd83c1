"""Times full training steps (forward, backward, optimizer) of the encoder or causal LM on real batches.

Repeats go round all batches in a fresh random order, and each round's shared slowdown from other
processes is factored out, so that machine load hits every batch alike and then drops out.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from simbench.calibrate.batches import TorchBatch
from simbench.errors import InputError

# Training FLOPs one timing run (calibrate, calibrate-decoder, measure) may take: about 10 minutes at the
# ~1.5e11 FLOP/s the `tiny` encoder reaches on this project's 2-core CPU, and on a GPU at ~1.5e14 (a few times
# below the H100's measured dense rate, for slower GPUs and small kernels). Checked before any work: BERT-large
# calibrated on a CPU, or 80 layers of a 70B decoder, would have run for hours or run out of memory.
TIMED_FLOPS_MAX = {"cpu": 1e14, "cuda": 1e17}
TIMED_RUN_SECONDS = 600  # the "about 10 minutes" those limits stand for


def assumed_flops_per_s(device: str | torch.device) -> float:
    """The training rate the work limits assume on the device, for a first estimate of a step's seconds."""
    return TIMED_FLOPS_MAX["cpu" if str(device).startswith("cpu") else "cuda"] / TIMED_RUN_SECONDS


def check_timed_work(flops: float, device: str | torch.device, what: str, remedy: str,
                     parameter: str | None = None) -> None:
    """Refuse a timing run whose training FLOPs exceed what a run on the device may take."""
    kind = "cpu" if str(device).startswith("cpu") else "cuda"
    limit = TIMED_FLOPS_MAX[kind]
    if flops > limit:
        raise InputError(f"{what} would take about {flops:.1e} training FLOPs, more than the {limit:.0e} a timing run "
                         f"on {kind} may take (about 10 minutes); {remedy}", parameter=parameter)


@dataclass(frozen=True)
class Trainer:
    """A model (an `Encoder` or a `CausalLM`: anything with `loss(batch)`), its optimizer and its device."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    cpu_clock: bool = False  # time steps by this process's CPU seconds instead of wall-clock seconds

    def step(self, batch: TorchBatch) -> None:
        """One full training step on a batch already on the device (bfloat16 autocast on CUDA, as
        GPU training runs, and as flash-attention requires)."""
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            loss = self.model.loss(batch)
        loss.backward()
        self.optimizer.step()

    def timed_step_seconds(self, batch: TorchBatch) -> float:
        """Seconds of one step; the device is synchronised before and after."""
        clock = time.process_time if self.cpu_clock else time.perf_counter
        _synchronize(self.device)
        start = clock()
        self.step(batch)
        _synchronize(self.device)
        return clock() - start


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


@dataclass(frozen=True)
class LoadAdjustedTimings:
    """Per-batch step seconds with the machine's round-to-round load factored out."""

    seconds: np.ndarray  # (batches,) at the median round's load
    round_factors: np.ndarray  # (rounds,) how much slower each round ran than the median round


def load_adjusted(timings: Sequence[StepTiming], sweeps: int = 10) -> LoadAdjustedTimings:
    """Split log step times into a batch effect plus a round effect (median polish).

    Every round times every batch, so when other processes slow the machine down for a while, all
    batches of the rounds in that while are slower by about the same factor; the polish removes
    that factor, and its medians shrug off single-step spikes. Seconds are given at the load of
    the median round (all factors are 1 on a quiet machine).
    """
    log_seconds = np.log(np.array([timing.samples_seconds for timing in timings]))
    batch_effect = np.median(log_seconds, axis=1)
    round_effect = np.zeros(log_seconds.shape[1])
    for _ in range(sweeps):
        round_effect = np.median(log_seconds - batch_effect[:, None], axis=0)
        round_effect -= np.median(round_effect)
        batch_effect = np.median(log_seconds - round_effect[None, :], axis=1)
    return LoadAdjustedTimings(np.exp(batch_effect), np.exp(round_effect))


def uses_cpu_clock(device: str, threads: int, wall_clock: bool = False) -> bool:
    """Single-threaded CPU steps are timed in CPU seconds: on a machine shared with other processes
    they exclude the time the scheduler hands the core to others (on a dedicated core the two agree).
    Multi-threaded and GPU steps need wall-clock time."""
    return not wall_clock and device == "cpu" and threads == 1


def build_trainer(shape, device: torch.device | str, seed: int, cpu_clock: bool = False) -> Trainer:
    """A freshly initialised model of `shape` (an `EncoderShape` or a `causal_lm.DecoderShape`; seeded) with
    AdamW, on `device`."""
    device = torch.device(device)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)  # nn.Module initialisers draw from the global generator only
    model = shape.build().to(device).train()
    torch.random.set_rng_state(generator_state)
    return Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-4), device, cpu_clock)


def time_batches(trainer: Trainer, batches: Sequence[TorchBatch], warmup: int, repeats: int,
                 progress: Callable[[], None] = lambda: None,
                 order_rng: np.random.Generator | None = None, *, deadline: float | None = None,
                 fewest_repeats: int = 1) -> list[StepTiming]:
    """Time every batch `repeats` times after `warmup` untimed steps each, in rounds.

    With `order_rng` every round visits the batches in a new random order, so a burst of load
    from other processes lands on different batches in different rounds and the median drops it.
    `progress` is called after every step (timed or not), for a progress bar at the edge. With a `deadline`
    (`time.monotonic()` seconds) no round starts, after the first `fewest_repeats`, that the rounds so far say
    would end past it: every batch keeps the same number of samples.
    """
    on_device = [batch.to(trainer.device) for batch in batches]
    for _ in range(warmup):
        for batch in on_device:
            trainer.step(batch)
            progress()
    samples: list[list[float]] = [[] for _ in on_device]
    started = time.monotonic()
    for done in range(repeats):
        if deadline is not None and done >= fewest_repeats and (
                time.monotonic() + (time.monotonic() - started) / done > deadline):
            break
        order = order_rng.permutation(len(on_device)) if order_rng is not None else range(len(on_device))
        for index in order:
            samples[index].append(trainer.timed_step_seconds(on_device[index]))
            progress()
    return [StepTiming(tuple(times)) for times in samples]


def device_description(device: torch.device | str) -> dict:
    """What the profile records about the machine the timings came from."""
    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    return {"device": device.type, "device_name": name, "torch_version": str(torch.__version__),
            "threads": torch.get_num_threads()}


def training_precision(device: torch.device | str) -> str:
    return "bfloat16 autocast" if torch.device(device).type == "cuda" else "float32"


def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
