"""The scenario's key reference as Markdown tables, written from the pydantic models of simbench.scenario
(each field's default and description) and the registries' built-in names, for docs/scenarios.md.

    >>> print(key_table("QuickSpec").splitlines()[2])
    | `steps` | `5` | simulated steps per strategy and device count under --quick |
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

MODELS = ("Scenario", "DatasetSpec", "SyntheticHistogram", "LogNormalComponent", "HardwareSpec", "StrategySpec",
          "OutputsSpec", "QuickSpec")


def _builtin(registry) -> list[str]:
    """Names registered by simbench itself, not by an installed plug-in (the page describes simbench)."""
    return [name for name in registry.names() if name in registry.entries
            and registry.module_of(registry.entries[name]).startswith("simbench.")]


def _known_names(model: str, field: str) -> str:
    """The names a field takes from a registry or the package's data, as the page should list them."""
    if (model, field) == ("Scenario", "model"):
        from simbench.costmodels.model import MODEL_PRESETS

        return "presets: " + ", ".join(f"`{name}`" for name in MODEL_PRESETS.names())
    if (model, field) == ("Scenario", "cost_model"):
        from simbench.costmodels import COST_MODELS

        return "built in: " + ", ".join(f"`{name}`" for name in _builtin(COST_MODELS))
    if (model, field) == ("HardwareSpec", "profile"):
        from simbench.costmodels.hardware import HARDWARE_PRESETS

        return "presets: " + ", ".join(f"`{name}`" for name in HARDWARE_PRESETS.names())
    if (model, field) == ("DatasetSpec", "histogram"):
        from simbench.histogram import bundled_histograms

        return "bundled: " + ", ".join(f"`{name}`" for name in bundled_histograms())
    if (model, field) == ("StrategySpec", "name"):
        from simbench.sim.plans import PLANS
        from simbench.strategies import STRATEGIES

        packers = _builtin(STRATEGIES)
        plans = [name for name in _builtin(PLANS) if name not in packers]
        return ("packers and batchers: " + ", ".join(f"`{name}`" for name in packers)
                + "; simulator plans: " + ", ".join(f"`{name}`" for name in plans))
    return ""


def _default(info) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default
    return _yaml(value)


def _yaml(value: Any) -> str:
    if isinstance(value, BaseModel):
        return "see below"
    if value is None:
        return "-"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    if isinstance(value, dict):
        return "`{" + ", ".join(f"{key}: {item}" for key, item in value.items()) + "}`"
    if isinstance(value, (tuple, list)):
        items = [str(item) for item in value]
        if len(items) > 6:
            items = [*items[:3], "...", items[-1]]
        return "`[" + ", ".join(items) + "]`"
    return f"`{value}`"


def key_table(model: str) -> str:
    """The keys of `model` (a class name of simbench.scenario) as a Markdown table: key, default, meaning."""
    import simbench.scenario

    found: type[BaseModel] = getattr(simbench.scenario, model)
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for field, info in found.model_fields.items():
        meaning = "; ".join(part for part in (info.description, _known_names(model, field)) if part)
        lines.append(f"| `{field}` | {_default(info)} | {meaning.replace('|', '&#124;')} |")
    return "\n".join(lines) + "\n"
