"""The cost-model registry: a scenario's `cost_model` names one; plug-ins come through the entry-point
group `simbench.costmodels`, each entry point naming a `CostModelType`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simbench.registry import Registry

if TYPE_CHECKING:
    from simbench.costmodels.base import CostModel
    from simbench.costmodels.hardware import HardwareProfile
    from simbench.costmodels.model import ModelSpec


@dataclass(frozen=True)
class CostModelType:
    """A registered cost model: `build(model, hardware, gpus_per_replica)` returns a `CostModel` for the
    simulator (a data-parallel device may be a replica of several GPUs), or an object with its required members,
    which is given the rest's defaults (`simbench.costmodels.base.as_cost_model`)."""

    name: str
    description: str
    build: Callable[[ModelSpec, HardwareProfile, int], CostModel]


COST_MODELS: Registry[CostModelType] = Registry(
    "cost model", entry_point_group="simbench.costmodels", item_type=CostModelType,
    builtin_modules=("simbench.costmodels.transformer", "simbench.costmodels.linear"),
    module_of=lambda cost_model: cost_model.build.__module__)


def register_cost_model(cost_model: CostModelType) -> CostModelType:
    COST_MODELS.register(cost_model.name, cost_model)
    return cost_model
