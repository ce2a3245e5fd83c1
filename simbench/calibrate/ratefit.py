"""Fits a profile's achieved compute rates on one published throughput of a padded training run.

    >>> from simbench.calibrate.ratefit import PublishedThroughput, fit_padded_rates
    >>> run = PublishedThroughput(sequences_per_s=620.0, gpus=8, per_gpu_batch=16, accumulation_steps=256,
    ...                           max_length=512, source="a README")
    >>> fit = fit_padded_rates(run, hardware="a100", model="bert-large")
    >>> round(fit.predicted_sequences_per_s, 3)
    620.0

Padded rows cost their full slots whatever they hold, so a padded run's throughput is one step's
price: no batches need drawing. Both of the profile's rates (dense layers and attention) are scaled by
one factor, keeping the ratio the profile states between them; only that factor is fitted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.costmodels.hardware import HardwareProfile, load_hardware, scale_compute_rates
from simbench.costmodels.transformer import TransformerCostModel
from simbench.errors import InputError
from simbench.validation import check_whole_number


@dataclass(frozen=True)
class PublishedThroughput:
    """A published padded training throughput and the run it was measured on.

    With gradient accumulation a GPU runs `accumulation_steps` micro-batches of `per_gpu_batch`
    rows before one all-reduce and one optimizer update.
    """

    sequences_per_s: float
    gpus: int
    per_gpu_batch: int
    accumulation_steps: int
    max_length: int
    source: str

    def __post_init__(self):
        for name in ("gpus", "per_gpu_batch", "accumulation_steps", "max_length"):
            check_whole_number(getattr(self, name), name, minimum=1)
        if not self.sequences_per_s > 0:
            raise InputError(f"sequences_per_s must be positive, found {self.sequences_per_s}", source=self.source)


@dataclass(frozen=True)
class RateFit:
    """The profile with its rates scaled by `rate_scale`, and the throughput it predicts for the run."""

    profile: HardwareProfile
    rate_scale: float
    predicted_sequences_per_s: float


def padded_sequences_per_s(run: PublishedThroughput, cost_model: TransformerCostModel) -> float:
    """The run's cluster throughput as simbench prices it: every micro-step the GPU's padded batch,
    and once per `accumulation_steps` micro-steps the optimizer update and the all-reduce."""
    rows = np.arange(run.per_gpu_batch)
    # Full rows: a padded row costs its slots whatever its real length.
    batch = BatchSet(np.full(rows.size, run.max_length), rows, np.full(rows.size, run.max_length),
                     np.zeros(rows.size, dtype=np.int64), 1)
    micro_step_seconds = float(cost_model.step_costs(batch, ExecutionMode.PADDED).total_seconds[0])
    hardware = cost_model.hardware
    optimizer_seconds = hardware.optimizer_seconds_per_parameter * cost_model.model.parameters
    # The cost model charges the optimizer every step; accumulation pays it once per update.
    micro_step_seconds -= optimizer_seconds
    update_seconds = optimizer_seconds + cost_model.allreduce_seconds(run.gpus)
    step_seconds = micro_step_seconds + update_seconds / run.accumulation_steps
    return run.gpus * run.per_gpu_batch / step_seconds


def fit_padded_rates(run: PublishedThroughput, *, hardware="a100", model="bert-large") -> RateFit:
    """The factor on the profile's dense and attention FLOP/s at which simbench prices the run at its
    published throughput (root-found; throughput rises with the factor)."""
    from scipy.optimize import brentq

    base = load_hardware(hardware)

    def excess(log_scale: float) -> float:
        cost_model = TransformerCostModel(model, scale_compute_rates(base, float(np.exp(log_scale))))
        return np.log(padded_sequences_per_s(run, cost_model) / run.sequences_per_s)

    low, high = np.log(1e-3), np.log(1e3)
    if excess(low) > 0 or excess(high) < 0:
        raise InputError(f"no compute rate puts simbench at {run.sequences_per_s:g} seq/s: its fixed costs alone "
                         "set the pace", source=run.source)
    scale = float(np.exp(brentq(excess, low, high, xtol=1e-12)))
    fitted = scale_compute_rates(base, scale)
    fitted = fitted.model_copy(update={"source": f"{base.source} Dense and attention FLOP/s scaled by {scale:.4f}, "
                                                 f"fitted on {run.source}"})
    return RateFit(fitted, scale, padded_sequences_per_s(run, TransformerCostModel(model, fitted)))
