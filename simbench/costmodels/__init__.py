"""Cost models: price per-device batches (see `base`) on a model and a hardware profile.

Also the MLPerf log parser, loaded on first use (pandas).
"""

import importlib

from simbench.costmodels.base import BatchSet, CostModel, ExecutionMode, StepCosts
from simbench.costmodels.hardware import HARDWARE_PRESETS, HardwareProfile, load_hardware, profile_to_yaml
from simbench.costmodels.model import MODEL_PRESETS, ModelSpec, get_model
from simbench.costmodels.registry import COST_MODELS, CostModelType, register_cost_model
from simbench.costmodels.transformer import TransformerCostModel

_LAZY_MODULES = {
    "mlperf": ("MlperfRun", "parse_mlperf_lines", "parse_mlperf_log"),
}
_LAZY_NAMES = {name: module for module, names in _LAZY_MODULES.items() for name in names}

__all__ = [
    "BatchSet", "CostModel", "ExecutionMode", "StepCosts",
    "HARDWARE_PRESETS", "HardwareProfile", "load_hardware", "profile_to_yaml",
    "MODEL_PRESETS", "ModelSpec", "get_model",
    "COST_MODELS", "CostModelType", "register_cost_model",
    "TransformerCostModel",
    *_LAZY_NAMES,
]


def __getattr__(name: str):
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f"simbench.costmodels.{_LAZY_NAMES[name]}"), name)
    raise AttributeError(f"module 'simbench.costmodels' has no attribute {name!r}")
