"""Scenarios: the YAML file that says what `simbench run` simulates, as validated pydantic models.

    >>> from pathlib import Path
    >>> from simbench.scenario import load_scenario
    >>> scenario = load_scenario(Path("scenarios/wiki512.yaml"))
    >>> scenario.name, [plan.label for plan in scenario.strategies][:3]
    ('wiki512', ['none', 'sort', 'greedy:max'])

`specs` holds a scenario's parts (dataset, hardware, strategies, outputs, layout), `schema` the `Scenario`
they make, `loading` reads files and `yaml_lines` finds the YAML line each error names. A scenario here is a
schema, each key valid alone; the checks of one key against another are its run's (`simbench.checked`).
"""

from simbench.scenario.loading import (bundled_scenarios, load_scenario, load_scenarios, parse_scenarios,
                                       scenario_from_mapping)
from simbench.scenario.schema import Scenario
from simbench.scenario.yaml_lines import key_error, written
from simbench.scenario.specs import (PLOTS, SPLIT_PIECES_MAX, DatasetSpec, HardwareSpec, LogNormalComponent,
                                     OutputsSpec, ParallelSpec, QuickSpec, StrategySpec, SyntheticHistogram)

__all__ = [
    "Scenario", "DatasetSpec", "HardwareSpec", "LogNormalComponent", "OutputsSpec", "ParallelSpec", "QuickSpec",
    "StrategySpec", "SyntheticHistogram", "PLOTS", "SPLIT_PIECES_MAX",
    "bundled_scenarios", "load_scenario", "load_scenarios", "parse_scenarios", "scenario_from_mapping",
    "key_error", "written",
]
