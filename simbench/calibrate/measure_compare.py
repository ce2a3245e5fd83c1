"""Measured against predicted: each strategy's realized speed-up over the baseline beside the cost model's, at first
sight and repeated (`compare`), whether the timing noise lets the errors mean anything (`judge`), and the un-padded
steps' noise fitted on the measured steps (`fit_unpadded_noise`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simbench.calibrate.fit import step_seconds_by_term
from simbench.calibrate.measure import BASELINE, ERROR_TARGET
from simbench.calibrate.measure_timing import MeasuredSteps
from simbench.calibrate.noisefit import MIN_STEPS as NOISE_MIN_STEPS, NoiseFit, fit_step_noise
from simbench.costmodels.base import ExecutionMode
from simbench.costmodels.hardware import HardwareProfile
from simbench.costmodels.model import ModelSpec
from simbench.costmodels.transformer import TransformerCostModel
from simbench.errors import InputError

def per_step_speedups(measured: MeasuredSteps) -> pd.DataFrame:
    """Each timed step's real tokens per second over padding's mean, one column per strategy: the
    per-step speed-up samples a Gumbel straggler fit takes (`simbench gumbel --samples`)."""
    baseline = measured.baseline
    if baseline not in measured.layouts:
        raise InputError(f"per-step speed-ups need the {baseline!r} baseline among the strategies")

    def tokens_per_s(name: str) -> np.ndarray:
        return np.array([layout.real_tokens for layout in measured.layouts[name]]) / measured.seconds[name]

    # The reference is padding's overall throughput, as `compare` has it (tokens over seconds, summed).
    padding_tokens_per_s = (sum(layout.real_tokens for layout in measured.layouts[baseline])
                            / measured.seconds[baseline].sum())
    steps = {name: tokens_per_s(name) / padding_tokens_per_s for name in measured.layouts}
    return pd.DataFrame({"step": np.arange(measured.seconds[baseline].size), **steps})


def compare(measured: MeasuredSteps, model: ModelSpec, profile: HardwareProfile) -> pd.DataFrame:
    """One row per strategy: measured and predicted throughput, speed-up over padding, and the
    predicted step seconds split by cost-model term next to the measured step seconds; the same at
    first sight where first steps were timed (NaN where not).

    Repeated: every shape seen (the rounds' medians against the cost model's price). First sight: each step
    whose shape was new to the process when it first ran (`new_shape_steps` of them) at its first step
    (`MeasuredSteps.first_sight_step_seconds`), against the price plus the profile's first-sight cost for the
    step's mode; first sight is never faster than repeated, measured or predicted.

    `speedup_noise` is the relative standard deviation of the speed-up measured round by round (each
    round's load factored out): how far one round's figure strays. A strategy the profile cannot
    price keeps its measured figures and says why in `problem`; the others are compared as usual.
    """
    baseline_name = measured.baseline
    cost_model = TransformerCostModel(model, profile)
    records = []
    for name, layouts in measured.layouts.items():
        real_tokens = sum(layout.real_tokens for layout in layouts)
        measured_seconds = float(measured.seconds[name].sum())
        problem = ""
        try:
            terms = step_seconds_by_term(model, profile, layouts)
        except InputError as error:
            terms, problem = np.full((len(layouts), 3), np.nan), f"cannot predict: {error}"
        predicted_seconds = float(terms.sum())
        first_sight = _first_sight_columns(measured, name, cost_model, predicted_seconds / len(layouts),
                                           kernel_seconds=terms[:, 0] + terms[:, 1])
        records.append({
            "strategy": name,
            "mode": layouts[0].kind,
            "steps": len(layouts),
            "real_tokens_per_step": real_tokens / len(layouts),
            "token_slots_per_step": sum(layout.slots for layout in layouts) / len(layouts),
            "measured_step_seconds": measured_seconds / len(layouts),
            "predicted_step_seconds": predicted_seconds / len(layouts),
            "predicted_compute_seconds": float(terms[:, 0].mean()),
            "predicted_padding_seconds": float(terms[:, 1].mean()),
            "predicted_overhead_seconds": float(terms[:, 2].mean()),
            "measured_spread_fraction": float(np.median(measured.spread_fractions[name])),
            "measured_tokens_per_s": real_tokens / measured_seconds,
            "predicted_tokens_per_s": real_tokens / predicted_seconds,
            **first_sight,
            "problem": problem,
        })
    table = pd.DataFrame.from_records(records)
    if baseline_name not in set(table["strategy"]):
        raise InputError(f"measuring speed-ups needs the {baseline_name} strategy as the baseline")
    baseline = table.set_index("strategy").loc[baseline_name]
    if baseline["problem"]:
        raise InputError(f"the {baseline_name} baseline: {baseline['problem']}")
    table["measured_speedup"] = table["measured_tokens_per_s"] / baseline["measured_tokens_per_s"]
    table["predicted_speedup"] = table["predicted_tokens_per_s"] / baseline["predicted_tokens_per_s"]
    table["error"] = table["predicted_speedup"] / table["measured_speedup"] - 1
    table["speedup_noise"] = [speedup_noise(measured, name) for name in table["strategy"]]
    table["step_seconds_error"] = table["predicted_step_seconds"] / table["measured_step_seconds"] - 1
    return _with_first_sight_speedups(table, baseline_name)


def _first_sight_columns(measured: MeasuredSteps, name: str, cost_model: TransformerCostModel,
                         predicted_step_seconds: float, kernel_seconds: np.ndarray) -> dict[str, float]:
    """A strategy's steps at new shapes and its mean step at first sight, measured and predicted (NaN where no
    first steps were timed). A step's first-sight cost is what its own kernels (`kernel_seconds`, each step's
    compute and padding: not its host overhead, which hides nothing) leave shown, as the simulator prices it
    (`sim.shapes.FirstSight`)."""
    if measured.first_seconds is None:
        return {"new_shape_steps": np.nan, "measured_first_sight_step_seconds": np.nan,
                "predicted_first_sight_step_seconds": np.nan}
    from simbench.sim.shapes import shown_first_sight

    new = measured.new_shape[name]
    extra = np.array([shown_first_sight(cost_model.first_sight_seconds(layout.mode),
                                        cost_model.first_sight_hidden_seconds(layout.mode), kernels)
                      for layout, kernels in zip(measured.layouts[name], kernel_seconds)])
    return {"new_shape_steps": int(new.sum()),
            "measured_first_sight_step_seconds": measured.first_sight_step_seconds(name),
            # The repeated price plus the extra, so that first sight is never below it by a rounding.
            "predicted_first_sight_step_seconds": predicted_step_seconds + float((new * extra).mean())}


def _with_first_sight_speedups(table: pd.DataFrame, baseline_name: str) -> pd.DataFrame:
    """Speed-ups at first sight: real tokens per first-sight second over the baseline's, as for repeated steps."""
    for side in ("measured", "predicted"):
        tokens_per_s = table["real_tokens_per_step"] / table[f"{side}_first_sight_step_seconds"]
        table[f"{side}_first_sight_speedup"] = tokens_per_s / tokens_per_s[table["strategy"] == baseline_name].iloc[0]
    table["first_sight_error"] = table["predicted_first_sight_speedup"] / table["measured_first_sight_speedup"] - 1
    return table


def speedup_noise(measured: MeasuredSteps, name: str) -> float:
    """Relative standard deviation over rounds of the strategy's speed-up over padding (0 for padding,
    NaN with fewer than two rounds)."""
    if measured.round_seconds is None or measured.round_seconds[name].shape[1] < 2:
        return float("nan")

    def tokens_per_s(strategy: str) -> np.ndarray:
        tokens = sum(layout.real_tokens for layout in measured.layouts[strategy])
        return tokens / measured.round_seconds[strategy].sum(axis=0)

    per_round = tokens_per_s(name) / tokens_per_s(measured.baseline)
    return float(per_round.std(ddof=1) / per_round.mean())


@dataclass(frozen=True)
class Verdict:
    """Whether a measure run's errors mean anything: its noise must stay below the error target."""

    valid: bool
    message: str


# What makes a noisy measurement clean, by device.
CLEAN_RUN_ADVICE = {
    "cpu": "stop other jobs on the machine, time on one thread with the CPU clock (--threads 1, the default clock), "
           "and raise --repeats (5 or more)",
    "cuda": "stop other jobs on the GPU (nvidia-smi lists them), and raise --repeats (5 or more) or --seconds",
}


def judge(table: pd.DataFrame, error_target: float = ERROR_TARGET, baseline: str = BASELINE,
          device: str = "cpu") -> Verdict:
    """Valid when every compared strategy's speed-up noise is at most `error_target`; else the verdict says how
    to get a clean run on `device`."""
    compared = table[(table["strategy"] != baseline) & (table["problem"] == "")]
    noisy = compared[~(compared["speedup_noise"] <= error_target)]
    if noisy.empty:
        worst = compared["speedup_noise"].max() if len(compared) else 0.0
        return Verdict(True, f"valid: timing noise at most {worst:.1%}, within the {error_target:.0%} error target")
    listed = ", ".join(f"{row.strategy} {row.speedup_noise:.1%}" for row in noisy.itertuples())
    return Verdict(False, f"NOT VALID: timing noise ({listed}) exceeds the {error_target:.0%} error target, so "
                          "these errors say more about the machine's load than about the cost model. For a clean "
                          f"run: {CLEAN_RUN_ADVICE['cuda' if device.startswith('cuda') else 'cpu']}")


def fit_unpadded_noise(measured: MeasuredSteps, model: ModelSpec, profile: HardwareProfile,
                       strategy: str | None = None) -> NoiseFit | None:
    """The profile's `unpadded_noise_cv` fitted on the un-padded steps' measured over predicted seconds
    (by default of the first strategy whose batches are un-padded; None when there is none, too few steps
    to fit or the profile cannot price it)."""
    if strategy is None:
        strategy = next((name for name, layouts in measured.layouts.items()
                         if layouts[0].mode is ExecutionMode.UNPADDED), None)
    if strategy not in measured.layouts or len(measured.layouts[strategy]) < NOISE_MIN_STEPS:
        return None
    try:
        predicted = step_seconds_by_term(model, profile, measured.layouts[strategy]).sum(axis=1)
    except InputError:
        return None
    rounds = None if measured.round_seconds is None else measured.round_seconds[strategy]
    if rounds is not None and rounds.shape[1] < 2:
        rounds = None
    return fit_step_noise(measured.seconds[strategy], predicted, rounds)


def deepest_calibrated_pack(profile: HardwareProfile) -> int | None:
    """The most sequences in one row among the profile's calibration timings (None without a record):
    packs deeper than that would extrapolate the fitted packing overhead."""
    timings = (profile.calibration or {}).get("timings") or []
    depths = [len(row) for timing in timings if timing.get("kind") == "packed" for row in timing.get("rows", [])]
    return max(depths, default=None)
