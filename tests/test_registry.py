"""The one registry shape: lookups that name the known items, a fixed order, and plug-ins that are
loaded only when asked for, so that a broken one breaks nothing else."""

from importlib.metadata import EntryPoint

import pytest

import simbench.registry
from simbench.costmodels import COST_MODELS, HARDWARE_PRESETS, MODEL_PRESETS, get_model
from simbench.costmodels.model import ModelSpec
from simbench.errors import InputError
from simbench.registry import Registry
from simbench.sim.plans import PLANS
from simbench.strategies import STRATEGIES, get_strategy

GROUP = "simbench.strategies"


def serve(monkeypatch, *plugins: EntryPoint) -> None:
    STRATEGIES.available()
    monkeypatch.setattr(STRATEGIES, "entries", dict(STRATEGIES.entries))
    monkeypatch.setattr(simbench.registry, "entry_points", lambda group: [p for p in plugins if p.group == group])


def test_an_unknown_name_is_an_input_error_listing_every_known_one():
    for registry in (STRATEGIES, PLANS, COST_MODELS, MODEL_PRESETS, HARDWARE_PRESETS):
        with pytest.raises(InputError) as caught:
            registry.get("no-such-thing")
        assert f"unknown {registry.kind} 'no-such-thing'; known {registry.plural}: " in str(caught.value)
        assert all(name in str(caught.value) for name in registry)


def test_without_builtin_modules_the_order_is_the_registration_order():
    registry = Registry("colour", {"red": 1, "blue": 2})
    registry.register("green", 3)
    assert list(registry) == ["red", "blue", "green"] and registry["blue"] == 2 and "green" in registry
    assert "mauve" not in registry


def test_a_broken_plugin_breaks_only_what_asks_for_it(monkeypatch):
    serve(monkeypatch, EntryPoint("broken", "no_such_module_here:THING", GROUP))
    assert get_strategy("spfhp").name == "spfhp"  # built-ins never load plug-ins
    assert "broken" in STRATEGIES.names()  # listed from its entry point without loading it
    with pytest.raises(InputError, match=r"cannot load the strategy plug-in 'broken' \(no_such_module_here:THING\)"):
        get_strategy("broken")
    with pytest.raises(InputError, match="'broken'"):
        STRATEGIES.available()


def test_a_registered_model_preset_is_a_model_by_name(monkeypatch):
    monkeypatch.setattr(MODEL_PRESETS, "entries", dict(MODEL_PRESETS.entries))
    MODEL_PRESETS.register("small", ModelSpec(layers=6, hidden=512, heads=8, ffn=2048, name="small"))
    assert get_model("small").layers == 6 and list(MODEL_PRESETS)[-1] == "small"


@pytest.mark.parametrize("source, error", [("raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
                                           ("def broken(:\n", "SyntaxError")])
def test_a_plugin_whose_module_fails_at_import_is_named_not_a_traceback(monkeypatch, tmp_path, source, error):
    (tmp_path / "failing_plugin.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    serve(monkeypatch, EntryPoint("failing", "failing_plugin:STRATEGY", GROUP))
    assert get_strategy("spfhp").name == "spfhp"
    with pytest.raises(InputError, match=rf"cannot load the strategy plug-in 'failing' \(failing_plugin:STRATEGY\): "
                                         rf"{error}"):
        get_strategy("failing")


def test_a_plugin_named_like_a_builtin_is_ignored_with_a_warning(monkeypatch, tmp_path):
    (tmp_path / "shadow_plugin.py").write_text("from simbench.strategies import get_strategy\n"
                                                 "STRATEGY = get_strategy('bfd')  # under the name spfhp below\n"
                                                 "import dataclasses\n"
                                                 "STRATEGY = dataclasses.replace(STRATEGY, name='spfhp')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    serve(monkeypatch, EntryPoint("spfhp", "shadow_plugin:STRATEGY", GROUP))
    with pytest.warns(UserWarning, match="named like a built-in strategy, 'spfhp', and is ignored"):
        STRATEGIES.available()
    assert get_strategy("spfhp").pack_function.__module__ == "simbench.strategies.spfhp"
