"""Cost models: price per-device batches (see `base`) on a model and a hardware profile."""

from simbench.costmodels.base import BatchSet, CostModel, ExecutionMode, StepCosts
from simbench.costmodels.hardware import HARDWARE_PRESETS, HardwareProfile, load_hardware, profile_to_yaml
from simbench.costmodels.model import MODEL_PRESETS, ModelSpec, get_model
from simbench.costmodels.registry import COST_MODELS, CostModelType, register_cost_model
from simbench.costmodels.transformer import TransformerCostModel

__all__ = [
    "BatchSet", "CostModel", "ExecutionMode", "StepCosts",
    "HARDWARE_PRESETS", "HardwareProfile", "load_hardware", "profile_to_yaml",
    "MODEL_PRESETS", "ModelSpec", "get_model",
    "COST_MODELS", "CostModelType", "register_cost_model",
    "TransformerCostModel",
]
