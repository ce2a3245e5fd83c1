"""Cost models: price per-device batches (see `base`) on a model and a hardware profile.

Also the Gumbel straggler model of data-parallel speed-ups and a parser for MLPerf step logs.
"""

from simbench.costmodels.base import BatchSet, CostModel, ExecutionMode, StepCosts
from simbench.costmodels.gumbel import (
    GumbelFit, expected_min_speedup, extrapolate_cluster_speedups, fit_gumbel, max_of_n_gumbel, median_min_of_n,
    min_of_n_cdf, min_of_n_pdf, monte_carlo_min_speedup, single_device_from_cluster,
)
from simbench.costmodels.hardware import HARDWARE_PRESETS, HardwareProfile, load_hardware, profile_to_yaml
from simbench.costmodels.mlperf import MlperfRun, parse_mlperf_lines, parse_mlperf_log
from simbench.costmodels.model import MODEL_PRESETS, ModelSpec, get_model
from simbench.costmodels.transformer import TransformerCostModel

__all__ = [
    "BatchSet", "CostModel", "ExecutionMode", "StepCosts",
    "GumbelFit", "expected_min_speedup", "extrapolate_cluster_speedups", "fit_gumbel", "max_of_n_gumbel",
    "median_min_of_n", "min_of_n_cdf", "min_of_n_pdf", "monte_carlo_min_speedup", "single_device_from_cluster",
    "MlperfRun", "parse_mlperf_lines", "parse_mlperf_log",
    "HARDWARE_PRESETS", "HardwareProfile", "load_hardware", "profile_to_yaml",
    "MODEL_PRESETS", "ModelSpec", "get_model",
    "TransformerCostModel",
]
