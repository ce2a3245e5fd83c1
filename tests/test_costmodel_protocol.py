"""The `CostModel` contract: the simulator calls what `CostModel` declares, plainly (no probing a cost model with
getattr or hasattr, no wrapper passing everything on through `__getattr__`); every wrapper passes on every member
by name; an object that does not subclass `CostModel` (a plug-in's) keeps its own members and gets the defaults
for the rest."""

import ast
import re
from pathlib import Path

import numpy as np
import pytest

import simbench
from simbench.costmodels import TransformerCostModel
from simbench.costmodels.base import (COST_MODEL_MEMBERS, REQUIRED_MEMBERS, BatchSet, CostModel, CostModelWrapper,
                                      ExecutionMode, PluginCostModel, StepCosts, as_cost_model)
from simbench.costmodels.hardware import load_hardware
from simbench.costmodels.layout import ParallelLayout
from simbench.costmodels.linear import LinearCostModel
from simbench.costmodels.noise import StepNoise
from simbench.errors import InputError
from simbench.sim.accumulation import AccumulatingCostModel
from simbench.sim.replica import ReplicaCostModel
from simbench.sim.replica_breakdown import _Recorder

PACKAGE = Path(simbench.__file__).parent
# The simulator and what builds and drives it: where a cost model is asked anything.
SIMULATOR_SOURCES = sorted([*(PACKAGE / "sim").rglob("*.py"), *(PACKAGE / "costmodels").rglob("*.py"),
                            *(PACKAGE / "sweep").rglob("*.py"), PACKAGE / "resolved.py", PACKAGE / "experiment.py"])
# What an expression holding a cost model is called in these modules.
COST_MODEL_NAMES = re.compile(r"cost_model|gpu_model|\bgpu\b|plugin|replica")
# Every attribute a cost model has: a probe asks for one of these by name.
COST_MODEL_ATTRIBUTES = {name for model in (CostModel, TransformerCostModel, LinearCostModel, ReplicaCostModel)
                         for name in dir(model) if not name.startswith("_")} | {"hardware", "model", "layout"}
# The one look at which members an object from outside has: where a plug-in becomes a `CostModel`.
ALLOWED_PROBES = {("costmodels/base.py", "PluginCostModel.__init__")}


def _probes(source: str, relative: str) -> list[str]:
    """getattr/hasattr calls on a cost model (by what the expression is called, or what it asks for), and
    classes that define __getattr__, in one module's `source`: 'file:line where: call'."""
    found = []

    def visit(node: ast.AST, where: tuple[str, ...]) -> None:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in ("__getattr__", "__getattribute__"):
                    found.append(f"{relative}:{item.lineno} {node.name}.{item.name} passes on every attribute")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2):
            target, name = node.args[0], node.args[1]
            asks = isinstance(name, ast.Constant) and name.value in COST_MODEL_ATTRIBUTES
            allowed = (relative, ".".join(where)) in ALLOWED_PROBES
            if (asks or COST_MODEL_NAMES.search(ast.unparse(target))) and not allowed:
                found.append(f"{relative}:{node.lineno} {'.'.join(where)}: {ast.unparse(node)}")
        inner = (*where, node.name) if isinstance(node, (ast.ClassDef, ast.FunctionDef)) else where
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(source), ())
    return found


def test_the_simulator_calls_cost_models_plainly():
    probes = [probe for path in SIMULATOR_SOURCES
              for probe in _probes(path.read_text(), path.relative_to(PACKAGE).as_posix())]
    assert not probes, "declare these in CostModel (with a default) and call them plainly:\n" + "\n".join(probes)


def test_the_probe_finder_finds_the_probes_it_is_for():
    source = """
class Wrapper:
    def __getattr__(self, name):
        return getattr(self.inner, name)

def first_sight(settings, costs, name):
    seconds = getattr(settings.cost_model, "first_sight_seconds", None)
    latency = getattr(hardware, "allreduce_latency_seconds", 0.0)
    floored = hasattr(gpu, "something")
    return getattr(costs, name)
"""
    found = [probe.split(" ", 1)[0] for probe in _probes(source, "sim/example.py")]
    assert found == ["sim/example.py:3", "sim/example.py:7", "sim/example.py:8", "sim/example.py:9"]
    adapter = """
class PluginCostModel:
    def __init__(self, plugin):
        self.own = hasattr(plugin, "step_costs")
"""
    assert _probes(adapter, "costmodels/base.py") == []  # the one allowed
    assert len(_probes(adapter, "sim/example.py")) == 1


# ----------------------------------------------------------------------------------------------- wrappers


class _Answers:
    """Answers every member with a value of its own, none a default: whom a wrapper asks shows in what it says."""

    def step_costs(self, batches, mode):
        return StepCosts(np.full(batches.batches, 0.75), np.zeros(batches.batches), np.zeros(batches.batches))

    def allreduce_seconds(self, devices):
        return 0.5 * devices

    def gradient_sync(self, devices):
        return ("synced", devices)

    def ideal_sequence_seconds(self, sequence_lengths):
        return 3.0 * np.asarray(sequence_lengths, dtype=np.float64)

    def first_sight_seconds(self, mode):
        return 0.25 if mode is ExecutionMode.UNPADDED else 0.5

    def first_sight_hidden_seconds(self, mode):
        return 0.125 if mode is ExecutionMode.UNPADDED else 0.0625

    def vts_stage_seconds(self, sequence_lengths, stages):
        return np.asarray(sequence_lengths, dtype=np.float64) + stages

    def vts_pipeline_stages(self):
        return 7

    vts_buffer_samples = 5
    attention_parity_tokens = 1234.0
    fixed_step_seconds = 0.125
    allreduce_latency_seconds = 3e-6
    unpadded_noise_cv = 0.2


class Answers(_Answers, CostModel):
    pass


class Bare(CostModel):
    """Only what a cost model must define: the rest is `CostModel`'s defaults."""

    step_costs, allreduce_seconds = _Answers.step_costs, _Answers.allreduce_seconds


ONE_BATCH = BatchSet(np.array([3, 5]), np.array([0, 1]), np.array([8, 8]), np.array([0, 0]), 1)
ARGUMENTS = {"step_costs": (ONE_BATCH, ExecutionMode.UNPADDED), "allreduce_seconds": (4,), "gradient_sync": (4,),
             "ideal_sequence_seconds": (np.array([10, 20]),), "first_sight_seconds": (ExecutionMode.UNPADDED,),
             "first_sight_hidden_seconds": (ExecutionMode.UNPADDED,),
             "vts_stage_seconds": (np.array([10, 20]), 2), "vts_pipeline_stages": ()}


def _answer(model, name: str):
    """What `model` answers for member `name` (a property's value, a method's on the arguments above)."""
    if name not in ARGUMENTS:
        return getattr(model, name)
    answer = getattr(model, name)(*ARGUMENTS[name])
    return answer.total_seconds.tolist() if isinstance(answer, StepCosts) else answer


def _same(first, second) -> bool:
    return bool(np.array_equal(first, second)) if isinstance(first, np.ndarray) else first == second


def test_every_member_is_declared_and_the_declaration_is_what_these_tests_call():
    assert set(ARGUMENTS) | {"vts_buffer_samples", "attention_parity_tokens", "fixed_step_seconds",
                             "allreduce_latency_seconds", "unpadded_noise_cv"} == set(COST_MODEL_MEMBERS)
    assert set(REQUIRED_MEMBERS) == {"step_costs", "allreduce_seconds"}
    with pytest.raises(TypeError):
        CostModel()  # the required members are abstract


def test_the_answers_differ_from_every_default():
    # Else a wrapper that fell back on a default would pass the tests below.
    for name in COST_MODEL_MEMBERS:
        if name in REQUIRED_MEMBERS:
            continue
        if name == "vts_stage_seconds":
            with pytest.raises(InputError, match="cannot price VTS plans"):
                _answer(Bare(), name)
            continue
        assert not _same(_answer(Answers(), name), _answer(Bare(), name)), name


def _wrapper_classes() -> set[type]:
    found, pending = set(), [CostModelWrapper]
    while pending:
        cls = pending.pop()
        found.add(cls)
        pending.extend(cls.__subclasses__())
    return found | {ReplicaCostModel, PluginCostModel}


def test_every_wrapper_defines_every_member_itself():
    wrappers = _wrapper_classes()
    assert {StepNoise, AccumulatingCostModel, _Recorder} <= wrappers  # found, so the check below covers them
    for cls in wrappers:
        inherited = [name for name in COST_MODEL_MEMBERS
                     if next(base for base in cls.__mro__ if name in vars(base)) is CostModel]
        assert not inherited, f"{cls.__name__} answers {inherited} with CostModel's defaults, not the wrapped model's"


@pytest.mark.parametrize("wrap, changes", [(CostModelWrapper, ()),
                                           (lambda model: AccumulatingCostModel(model, 3), ("step_costs",)),
                                           (lambda model: StepNoise(model, np.random.default_rng(0)), ("step_costs",)),
                                           (PluginCostModel, ())],
                         ids=["wrapper", "accumulating", "noise", "plugin"])
def test_a_wrapper_passes_on_what_it_does_not_change(wrap, changes):
    inner = Answers()
    wrapped = wrap(inner)
    for name in COST_MODEL_MEMBERS:
        same = _same(_answer(wrapped, name), _answer(inner, name))
        assert same is (name not in changes), name


def test_a_replica_passes_on_the_gpu_models_answers_where_its_layout_changes_nothing():
    gpu = TransformerCostModel("llama-3.1-8b", "h100-sxm")
    replica = ReplicaCostModel(gpu, ParallelLayout(tp=2, pp=2, microbatches=4))
    for name in ("vts_pipeline_stages", "vts_buffer_samples", "attention_parity_tokens", "fixed_step_seconds",
                 "allreduce_latency_seconds", "unpadded_noise_cv", "first_sight_seconds",
                 "first_sight_hidden_seconds"):
        assert _same(_answer(replica, name), _answer(gpu, name)), name
    assert np.allclose(_answer(replica, "ideal_sequence_seconds"), _answer(gpu, "ideal_sequence_seconds") / 4)


def test_a_replica_is_priced_from_the_transformer_model_only():
    with pytest.raises(InputError, match="LinearCostModel cannot price a 4D layout"):
        ReplicaCostModel(LinearCostModel(), ParallelLayout(pp=2, microbatches=2))


# ----------------------------------------------------------------------------------------------- plug-ins


def test_a_plugin_keeps_its_own_members():
    plugin = _Answers()  # subclasses nothing
    assert not isinstance(plugin, CostModel) and isinstance(as_cost_model(plugin), PluginCostModel)
    for name in COST_MODEL_MEMBERS:
        assert _same(_answer(as_cost_model(plugin), name), _answer(plugin, name)), name


def test_a_plugin_with_only_the_required_members_gets_the_defaults():
    class Required:
        step_costs, allreduce_seconds = _Answers.step_costs, _Answers.allreduce_seconds

    adapted = as_cost_model(Required())
    for name in COST_MODEL_MEMBERS:
        if name == "vts_stage_seconds":
            with pytest.raises(InputError, match="Required cannot price VTS plans"):
                _answer(adapted, name)
            continue
        assert _same(_answer(adapted, name), _answer(Bare(), name)), name


def test_a_plugin_carrying_a_hardware_profile_takes_its_latency_and_noise_from_it():
    class WithHardware:
        step_costs, allreduce_seconds = _Answers.step_costs, _Answers.allreduce_seconds
        hardware = load_hardware("h100-sxm").model_copy(update={"allreduce_latency_seconds": 7e-6,
                                                                 "unpadded_noise_cv": 0.05})

    adapted = as_cost_model(WithHardware())
    assert (adapted.allreduce_latency_seconds, adapted.unpadded_noise_cv) == (7e-6, 0.05)


def test_a_plugin_without_a_required_member_is_refused_by_name():
    class NoAllreduce:
        step_costs = _Answers.step_costs

    with pytest.raises(InputError, match="NoAllreduce has no `allreduce_seconds`"):
        as_cost_model(NoAllreduce())


def test_a_cost_model_subclassing_the_contract_is_used_as_it_is():
    model = Answers()
    assert as_cost_model(model) is model
