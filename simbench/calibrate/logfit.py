"""Fits a hardware profile's free parameters on real training logs, then predicts logs it did not see.

    >>> from simbench.calibrate.logfit import fit_logs
    >>> from simbench.sim.stragglers.mlperf_logs import read_training_log
    >>> fit = fit_logs([read_training_log("8gpu.txt.gz")], [read_training_log("16gpu.txt.gz")])  # doctest: +SKIP
    >>> fit.table[["log", "quantity", "role", "simbench", "measured", "error_percent"]]  # doctest: +SKIP

A log is simulated as the run it records: every step, each of its GPUs trains on `per_gpu_batch`
sequences drawn from the dataset's length histogram, priced by `TransformerCostModel` (un-padded or
padded, as the log says), times per-device noise when un-padded; the step waits for the slowest GPU,
then the all-reduce. Draws are made once per log (common random numbers), so the fit is smooth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simbench.costmodels.base import BatchSet, ExecutionMode
from simbench.costmodels.hardware import HardwareProfile, load_hardware, scale_compute_rates
from simbench.sim.stragglers.mlperf_logs import MlperfRun
from simbench.costmodels.noise import step_noise_factors
from simbench.costmodels.transformer import TransformerCostModel
from simbench.errors import InputError
from simbench.histogram import LengthHistogram, load_histogram
from simbench.validation import check_whole_number

# Each free parameter: bounds, and the scale that makes it about 1 in the solver's coordinates.
# All but COMPUTE_RATE_SCALE are profile fields; it multiplies the dense and attention FLOP/s together.
COMPUTE_RATE_SCALE = "compute_rate_scale"
FREE_PARAMETERS = {
    COMPUTE_RATE_SCALE: ((1e-3, 1e3), 1.0),
    "unpadded_flops_fraction": ((0.05, 2.0), 1.0),
    "unpadded_noise_cv": ((0.0, 1.0), 0.1),
    "unpad_group_half_saturation_tokens": ((0.0, 1e6), 1e3),
    "step_overhead_seconds": ((0.0, 1.0), 1e-2),
}
DEFAULT_FREE = ("unpadded_flops_fraction", "unpadded_noise_cv")
DEFAULT_AFTER_STEP = 50  # MLPerf's first steps include compilation and cache warm-up
DEFAULT_SIMULATED_STEPS = 1000  # medians within about 0.5 % from seed to seed
MATCH_PERCENT = 1.0  # a fitted quantity further from its log than this was not matched (the solver gets within 0.01 %)
# Sequences drawn for all logs together: a fit prices them 20-60 times, about a second per 1e7 each on two
# cores (the 16- and 512-GPU V100 runs at 1,000 steps draw 9.6e6 and fit in 9 s); 10^5 steps of the 256-GPU
# log would have drawn 5e8 sequences and run out of memory.
FIT_SIMULATED_SEQUENCES_MAX = 30_000_000
# A log whose steps barely vary (or not at all) is matched on the absolute spread: its relative error
# would divide by zero.
CV_FLOOR = 1e-3


@dataclass(frozen=True)
class LogStatistics:
    """What a fit matches: the median per-step throughput and its coefficient of variation."""

    median_sequences_per_s: float
    cv: float

    @staticmethod
    def of(sequences_per_s: np.ndarray) -> LogStatistics:
        values = np.asarray(sequences_per_s, dtype=np.float64)
        # Rounded so that identical steps (padded, noise-free) show a spread of 0, not float dust.
        return LogStatistics(float(np.median(values)), round(float(values.std() / values.mean()), 12))


@dataclass(frozen=True)
class PublishedRunStatistics:
    """A run known only by its published statistics (no per-step log at hand): the setup a log would
    give, and the median and CV of its per-step throughput after warm-up. Fits and predicts like a log."""

    source: str
    gpus: int
    per_gpu_batch: int
    unpadded: bool
    median_sequences_per_s: float
    cv: float

    def __post_init__(self):
        for name in ("gpus", "per_gpu_batch"):
            check_whole_number(getattr(self, name), name, minimum=1)
        if not (self.median_sequences_per_s > 0 and self.cv >= 0):
            raise InputError(f"a run's median throughput must be positive and its CV not negative, found "
                             f"{self.median_sequences_per_s} and {self.cv}", source=self.source)


TrainingRun = MlperfRun | PublishedRunStatistics


def measured_statistics(run: TrainingRun, after_step: int = DEFAULT_AFTER_STEP) -> LogStatistics:
    """The log's statistics over the steps after warm-up (a published run's as published)."""
    if isinstance(run, PublishedRunStatistics):
        return LogStatistics(run.median_sequences_per_s, run.cv)
    values = run.steps_after(after_step)["sequences_per_s"].to_numpy()
    if values.size < 3:
        raise InputError(f"only {values.size} steps after step {after_step}; need at least 3 "
                         "(lower --after-step?)", source=run.source)
    return LogStatistics.of(values)


class LogSimulation:
    """One log's run, drawn once: the same batches and noise draws for every profile tried."""

    def __init__(self, run: TrainingRun, histogram: LengthHistogram, steps: int, rng: np.random.Generator):
        if run.per_gpu_batch < 1:
            raise InputError("the log does not say the per-GPU batch size (no --train_batch_size, no "
                             "global_batch_size event)", source=run.source)
        self.run = run
        self.mode = ExecutionMode.UNPADDED if run.unpadded else ExecutionMode.PADDED
        lengths = histogram.sample_lengths(steps * run.gpus * run.per_gpu_batch, rng).astype(np.int64)
        sequences = np.arange(lengths.size, dtype=np.int64)
        slots = lengths if run.unpadded else np.full(lengths.size, histogram.max_length, dtype=np.int64)
        self.batches = BatchSet(lengths, sequences, slots, sequences // run.per_gpu_batch, steps * run.gpus)
        self.standard_normal = rng.standard_normal((steps, run.gpus))
        self.shape = (steps, run.gpus)

    def sequences_per_s(self, cost_model: TransformerCostModel) -> np.ndarray:
        """Each simulated step's cluster throughput, as the log's `seq/s` measures it."""
        device_seconds = cost_model.step_costs(self.batches, self.mode).total_seconds.reshape(self.shape)
        if self.run.unpadded:
            device_seconds = device_seconds * step_noise_factors(self.standard_normal,
                                                                 cost_model.hardware.unpadded_noise_cv)
        step_seconds = device_seconds.max(axis=1) + cost_model.allreduce_seconds(self.run.gpus)
        return self.run.gpus * self.run.per_gpu_batch / step_seconds


@dataclass(frozen=True, eq=False)
class LogFit:
    """A fitted profile and, for every log, simbench's statistics against the measured ones.

    `table` has one row per (log, quantity): `role` is "fitted" for the quantities the fit was to
    match and "predicted" for all others; `per-GPU scaling` is a log's per-GPU throughput over the
    first fitted log's.
    """

    profile: HardwareProfile
    fitted: dict[str, float]
    table: pd.DataFrame

    @property
    def unmatched(self) -> pd.DataFrame:
        """Fitted quantities the fit could not bring within MATCH_PERCENT of the log: the free fields
        cannot reach it (batches whose content alone spreads steps more than the log's, fixed costs
        that bound the throughput, more logs than fields)."""
        fitted = self.table[self.table["role"] == "fitted"]
        return fitted[~(fitted["error_percent"].abs() <= MATCH_PERCENT)]


def fit_logs(fit_on: Sequence[TrainingRun], predict: Sequence[TrainingRun] = (), *, hardware="a100",
             model="bert-large", histogram="wikipedia_512", free: Sequence[str] = DEFAULT_FREE,
             after_step: int = DEFAULT_AFTER_STEP, steps: int = DEFAULT_SIMULATED_STEPS, seed: int = 0) -> LogFit:
    """Fit `free` profile fields on the `fit_on` logs' medians (and spreads, when noise is free), then
    compare simbench with every log. Each free parameter needs a statistic that moves it: un-padded
    fields need an un-padded log, `step_overhead_seconds` a second batch size."""
    if not fit_on:
        raise InputError("give at least one log to fit on")
    _check_simulated_sequences(steps, (*fit_on, *predict))
    free = _checked_free(free, fit_on)
    base = load_hardware(hardware)
    lengths = histogram if isinstance(histogram, LengthHistogram) else load_histogram(histogram)
    rng = np.random.default_rng(seed)
    fit_cases = [(run, measured_statistics(run, after_step), LogSimulation(run, lengths, steps, rng)) for run in fit_on]
    fitted = _fitted_values(base, model, free, fit_cases)
    names = ", ".join(Path(run.source).name for run in fit_on)
    profile = _profile_with(base, fitted).model_copy(update={
        "source": f"{base.source} Fitted by simbench fit-logs on {names}: "
                  + ", ".join(f"{key} = {value:.4g}" for key, value in fitted.items())})
    predict_cases = [(run, measured_statistics(run, after_step), LogSimulation(run, lengths, steps, rng))
                     for run in predict]
    rows = _comparison_rows(TransformerCostModel(model, profile), [*fit_cases, *predict_cases], fit_on, free)
    return LogFit(profile, fitted, pd.DataFrame(rows))


def _check_simulated_sequences(steps: int, runs: Sequence[TrainingRun]) -> None:
    """InputError where simulating `steps` steps of every log would draw more sequences than a fit may price."""
    check_whole_number(steps, "steps", minimum=10)
    sequences = steps * sum(run.gpus * run.per_gpu_batch for run in runs)
    if sequences > FIT_SIMULATED_SEQUENCES_MAX:
        raise InputError(f"steps = {steps:,} would draw {sequences:.2g} sequences for these logs (steps x GPUs x "
                         f"per-GPU batch, summed over the logs), more than the {FIT_SIMULATED_SEQUENCES_MAX:.0e} a fit "
                         "may price; lower it (1,000 give medians within about 0.5 %)", parameter="steps")


def _fitted_values(base: HardwareProfile, model, free: tuple[str, ...], fit_cases: list) -> dict[str, float]:
    """The free parameters' values whose simulated medians (and spreads, when noise is free) match the logs'
    best, by least squares on their log ratios; none where nothing is free."""
    from scipy.optimize import least_squares

    if not free:
        return {}
    scales = np.array([FREE_PARAMETERS[name][1] for name in free])

    def residuals(x: np.ndarray) -> np.ndarray:
        cost_model = TransformerCostModel(model, _profile_with(base, dict(zip(free, (x * scales).tolist()))))
        errors = []
        for run, measured, simulation in fit_cases:
            simulated = LogStatistics.of(simulation.sequences_per_s(cost_model))
            errors.append(np.log(simulated.median_sequences_per_s / measured.median_sequences_per_s))
            if run.unpadded and "unpadded_noise_cv" in free:
                errors.append((simulated.cv - measured.cv) / max(measured.cv, CV_FLOOR))
        return np.array(errors)

    start = np.array([_start_value(base, name, scale) for name, scale in zip(free, scales)]) / scales
    lower = np.array([FREE_PARAMETERS[name][0][0] for name in free]) / scales
    upper = np.array([FREE_PARAMETERS[name][0][1] for name in free]) / scales
    # A coarse difference step: the slowest device's time has kinks that a tiny step would see.
    solution = least_squares(residuals, np.clip(start, lower, upper), bounds=(lower, upper), diff_step=1e-2)
    return dict(zip(free, (solution.x * scales).tolist()))


def _comparison_rows(cost_model: TransformerCostModel, cases: list, fit_on: Sequence[TrainingRun],
                     free: tuple[str, ...]) -> list[dict]:
    """simbench against every log (fitted ones first), each quantity marked fitted or predicted; scaling is
    relative to the first log."""
    rows = []
    reference = None
    for run, measured, simulation in cases:
        simulated = LogStatistics.of(simulation.sequences_per_s(cost_model))
        if not (np.isfinite(simulated.median_sequences_per_s) and np.isfinite(simulated.cv)):
            raise InputError(f"the profile prices no finite throughput for this log (median "
                             f"{simulated.median_sequences_per_s}, CV {simulated.cv}): check its fields "
                             f"and --set values", source=run.source)
        reference = reference or (simulated, measured, run.gpus)
        fitted_quantities = _fitted_quantities(run, fit_on, free)
        rows += [{**row, "role": "fitted" if row["quantity"] in fitted_quantities else "predicted"}
                 for row in _rows(run, simulated, measured, reference)]
    return rows


def _profile_with(base: HardwareProfile, values: dict[str, float]) -> HardwareProfile:
    """`base` with the free parameters' values: profile fields set, the compute rate scale applied."""
    fields = dict(values)
    return scale_compute_rates(base, fields.pop(COMPUTE_RATE_SCALE, 1.0)).model_copy(update=fields)


def _start_value(base: HardwareProfile, name: str, scale: float) -> float:
    if name == COMPUTE_RATE_SCALE:
        return 1.0
    # Noise starts inside its range: at zero the spread's derivative in the noise is zero too.
    return getattr(base, name) or (0.5 * scale if name == "unpadded_noise_cv" else 0.0)


def _fitted_quantities(run: TrainingRun, fit_on: Sequence[TrainingRun], free: tuple[str, ...]) -> set[str]:
    """The quantities of `run` the fit matched: medians of every fitted log (so their per-GPU scaling over
    the first fitted log too), spreads of un-padded ones."""
    if not free or not any(run is fitted for fitted in fit_on):
        return set()
    return ({"median seq/s", "per-GPU scaling"}
            | ({"CV of seq/s"} if run.unpadded and "unpadded_noise_cv" in free else set()))


def _checked_free(free: Sequence[str], fit_on: Sequence[TrainingRun]) -> tuple[str, ...]:
    free = tuple(dict.fromkeys(free))
    unknown = [name for name in free if name not in FREE_PARAMETERS]
    if unknown:
        raise InputError(f"cannot fit {', '.join(unknown)}; free parameters: {', '.join(FREE_PARAMETERS)}")
    if any(name.startswith("unpadded_") for name in free) and not any(run.unpadded for run in fit_on):
        raise InputError("un-padded parameters need an un-padded log to fit on (--unpad in its command line, "
                         "or unpadded=true in a CSV log)")
    if "step_overhead_seconds" in free and len({(run.per_gpu_batch, run.unpadded) for run in fit_on}) < 2:
        raise InputError("a fixed step cost needs logs at two batch sizes to tell it from kernel speed")
    return free


def _rows(run: TrainingRun, simulated: LogStatistics, measured: LogStatistics, reference) -> list[dict]:
    setup = {"log": Path(run.source).name, "gpus": run.gpus, "per_gpu_batch": run.per_gpu_batch,
             "execution": "un-padded" if run.unpadded else "padded"}
    reference_simulated, reference_measured, reference_gpus = reference

    def per_gpu_scaling(statistics: LogStatistics, of_reference: LogStatistics) -> float:
        return (statistics.median_sequences_per_s / run.gpus) / (of_reference.median_sequences_per_s / reference_gpus)

    quantities = [("median seq/s", simulated.median_sequences_per_s, measured.median_sequences_per_s),
                  ("CV of seq/s", simulated.cv, measured.cv)]
    if reference_simulated is not simulated:
        quantities.append(("per-GPU scaling", per_gpu_scaling(simulated, reference_simulated),
                           per_gpu_scaling(measured, reference_measured)))
    # A log of identical steps has a spread of 0, against which no relative error exists.
    return [{**setup, "quantity": quantity, "simbench": value, "measured": truth,
             "error_percent": 100 * (value / truth - 1) if truth else float("nan")}
            for quantity, value, truth in quantities]
