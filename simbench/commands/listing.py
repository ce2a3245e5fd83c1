"""`simbench list`: what can be named in a scenario or on the command line, with a line on each."""

import typer

from simbench.commands.common import print_table


def list_everything(profile: str = typer.Option(None, "--profile", help="show one hardware preset or profile "
                                                                       "file: every field, its value and source"),
                    as_json: bool = typer.Option(False, "--json", help="JSON lines: one object per row, with its "
                                                                       "section")) -> None:
    """Show strategies, simulator plans, cost models, bundled histograms and scenarios, and model and hardware
    presets."""
    show = _json_section if as_json else _section
    if profile is not None:
        list_profile(profile, show)
        return
    from simbench.costmodels import COST_MODELS, HARDWARE_PRESETS, MODEL_PRESETS
    from simbench.data import bundled_files
    from simbench.histogram import bundled_histograms
    from simbench.sim.plans import PLANS
    from simbench.strategies import available_strategies

    show("Packers and batchers (registry)", ["name", "description"],
         [(name, strategy.description) for name, strategy in available_strategies().items()])
    show("Simulator plans", ["name", "description"],
         [(name, plan.description + (f"; own keys: {', '.join(plan.parameters)}" if plan.parameters else ""))
          for name, plan in PLANS.items()])
    show("Cost models", ["name", "description"],
         [(name, cost_model.description) for name, cost_model in COST_MODELS.items()])
    show("Bundled histograms", ["name", "file"], [(name, str(path)) for name, path in bundled_histograms().items()])
    show("Bundled scenarios (simbench run NAME)", ["name", "file"],
         # bundled_files, not simbench.scenario: its pydantic models cost more start-up time than the rest of `list`
         [(name, str(path)) for name, path in bundled_files("scenarios", ".yaml").items()])
    show("Bundled sweeps (simbench sweep NAME)", ["name", "file"],
         [(name, str(path)) for name, path in bundled_files("scenarios/sweeps", ".yaml").items()])
    show("Model presets", ["name", "layers", "hidden", "heads", "ffn"],
         [(name, *map(str, (model.layers, model.hidden, model.heads, model.ffn)))
          for name, model in MODEL_PRESETS.items()])
    show("Hardware presets (`simbench list --profile NAME`: every field and its source)",
         ["name", "fields: measured or fitted / datasheet / chosen", "source"],
         [(name, _field_counts(profile), profile.source) for name, profile in HARDWARE_PRESETS.items()])


def _field_counts(profile) -> str:
    from simbench.costmodels.hardware import field_provenance

    kinds = [origin.split(":")[0] for origin in field_provenance(profile).values()]
    measured = sum(kind in ("measured", "fitted", "carried from H200") for kind in kinds)
    return f"{measured} / {kinds.count('datasheet')} / {len(kinds) - measured - kinds.count('datasheet')}"


def list_profile(name: str, show=None) -> None:
    """One hardware preset or profile file: every field, its value, its uncertainty where the profile states one
    (a fitted field's standard deviation over bootstrap resamples) and where it comes from."""
    from simbench.costmodels.hardware import load_hardware
    from simbench.report.validation_table import profile_provenance

    profile = load_hardware(name)
    rows = profile_provenance(profile)
    uncertainty = profile.uncertainty
    values = [f"{row['value']:.4g}" if isinstance(row["value"], float) else str(row["value"]) for row in rows]
    (show or _section)(f"Hardware profile {name}", ["field", "value", "uncertainty", "source"],
                       [(row["field"], value, _uncertainty(row["value"], uncertainty.get(row["field"])), row["source"])
                        for row, value in zip(rows, values)])


def _uncertainty(value, deviation: float | None) -> str:
    """A standard deviation as +- itself and, beside a value other than 0, as a share of it."""
    if deviation is None:
        return ""
    share = f" ({deviation / abs(value):.1%})" if isinstance(value, int | float) and value else ""
    return f"± {deviation:.3g}{share}"


def _section(title: str, columns: list[str], rows: list[tuple[str, ...]]) -> None:
    print_table(title, columns, rows, left=columns, title_justify="left")


def _json_section(title: str, columns: list[str], rows: list[tuple[str, ...]]) -> None:
    from simbench.commands.common import print_json_lines

    print_json_lines({"section": title.split(" (")[0], **dict(zip(columns, row))} for row in rows)


def register(app: typer.Typer) -> None:
    app.command("list")(list_everything)
