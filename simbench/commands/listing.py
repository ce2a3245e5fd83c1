"""`simbench list`: what can be named in a scenario or on the command line, with a line on each."""

import typer

from simbench.commands.common import print_table

SIMULATOR_PLAN_DESCRIPTIONS = {
    "unpad": "un-padding: no padding tokens, kernels grouped by length, each device's batch as drawn",
    "unpad-exchange": "un-padding with NVIDIA's padding exchange: the global batch sorted and dealt out",
    "unpad-exchange-overlap": "un-padding with the exchange on the host, overlapped with the step (Baidu)",
    "packed-varlen": "packs with per-sequence (varlen) attention instead of a block-diagonal mask",
    "vts": "Cerebras variable tensor shapes: samples stream through a stage pipeline, padding stripped",
    "vts-bucketed": "variable tensor shapes with batches bucketed by length",
}


def list_everything() -> None:
    """Show strategies, simulator plans, bundled histograms and scenarios, and model and hardware presets."""
    from simbench.costmodels import HARDWARE_PRESETS, MODEL_PRESETS
    from simbench.histogram import bundled_histograms
    from simbench.scenario import bundled_scenarios
    from simbench.sim.plans import EXTRA_PLANS
    from simbench.strategies import available_strategies

    _section("Packers and batchers (registry)", ["name", "description"],
             [(name, strategy.description) for name, strategy in available_strategies().items()])
    _section("Simulator plans", ["name", "description"],
             [(name, SIMULATOR_PLAN_DESCRIPTIONS.get(name, "")) for name in EXTRA_PLANS])
    _section("Bundled histograms", ["name", "file"], [(name, str(path)) for name, path in bundled_histograms().items()])
    _section("Bundled scenarios (simbench run NAME)", ["name", "file"],
             [(name, str(path)) for name, path in bundled_scenarios().items()])
    _section("Model presets", ["name", "layers", "hidden", "heads", "ffn"],
             [(name, *map(str, (model.layers, model.hidden, model.heads, model.ffn)))
              for name, model in MODEL_PRESETS.items()])
    _section("Hardware presets", ["name", "source"],
             [(name, profile.source) for name, profile in HARDWARE_PRESETS.items()])


def _section(title: str, columns: list[str], rows: list[tuple[str, ...]]) -> None:
    print_table(title, columns, rows, left=columns, title_justify="left")


def register(app: typer.Typer) -> None:
    app.command("list")(list_everything)
