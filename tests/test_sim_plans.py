"""Execution plans: parsing of `--strategy` names, `all`, the padding reference, and bad names."""

import pytest

from simbench.costmodels.base import ExecutionMode
from simbench.errors import InputError
from simbench.sim.plans import DEFAULT_BASELINE, PLANS, Exchange, PlanKind, parse_plan, parse_plans, with_reference
from simbench.sim.plans.vts import DEFAULT_BUCKET_WINDOW, DEFAULT_VTS_STAGES
from simbench.strategies import available_strategies


def test_packer_names_run_padded_with_their_depth():
    plan = parse_plan("spfhp:4")
    assert (plan.name, plan.kind, plan.mode, plan.packer, plan.max_depth) == (
        "spfhp:4", PlanKind.PACKING, ExecutionMode.PADDED, "spfhp", 4)
    assert parse_plan("spfhp").max_depth is None and parse_plan("spfhp").name == "spfhp:max"
    assert parse_plan("spfhp:max").max_depth is None
    assert parse_plan("none").name == "none" and parse_plan("none").max_depth == 1


def test_one_default_depth_rule_and_every_label_names_its_depth():
    """A packer's default depth is its own everywhere (no limit, nnlshp's 3), and the label says which."""
    from simbench.strategies import available_strategies

    for strategy in available_strategies().values():
        plan = parse_plan(strategy.name)
        assert plan.max_depth == (strategy.default_depth if strategy.uses_depth else plan.max_depth)
        if strategy.uses_depth:
            depth = "max" if strategy.default_depth is None else str(strategy.default_depth)
            assert plan.name == f"{strategy.name}:{depth}"
            assert parse_plan(f"packed-varlen:{strategy.name}").name == f"packed-varlen:{strategy.name}:{depth}"
        else:
            assert plan.name == strategy.name
    assert parse_plan("nnlshp").name == "nnlshp:3"


def test_unpad_family_and_exchange_modes():
    assert parse_plan("unpad").exchange is Exchange.NONE
    assert parse_plan("unpad-exchange").exchange is Exchange.BLOCKING
    overlap = parse_plan("unpad-exchange-overlap")
    assert (overlap.kind, overlap.mode, overlap.exchange) == (PlanKind.UNPAD, ExecutionMode.UNPADDED,
                                                              Exchange.OVERLAPPED)


def test_packed_varlen_defaults_to_lpfhp_without_depth_limit():
    plan = parse_plan("packed-varlen")
    assert (plan.name, plan.mode, plan.packer, plan.max_depth) == (
        "packed-varlen:lpfhp:max", ExecutionMode.PACKED_VARLEN, "lpfhp", None)
    other = parse_plan("packed-varlen:spfhp:2")
    assert (other.name, other.packer, other.max_depth) == ("packed-varlen:spfhp:2", "spfhp", 2)


def test_vts_parameters():
    assert (parse_plan("vts").stages, parse_plan("vts").bucket_window) == (DEFAULT_VTS_STAGES, 0)
    bucketed = parse_plan("vts-bucketed:stages=6:window=3")
    assert (bucketed.name, bucketed.stages, bucketed.bucket_window) == ("vts-bucketed:stages=6:window=3", 6, 3)
    assert parse_plan("vts-bucketed").bucket_window == DEFAULT_BUCKET_WINDOW


@pytest.mark.parametrize("text, fragment", [
    ("bogus", "unknown strategy 'bogus'"),
    ("spfhp:0", "neither a depth"),
    ("spfhp:lpfhp", "only a depth"),
    ("unpad:3", "takes no parameters"),
    ("vts:window=2", "unknown parameter"),
    ("vts:stages=0", "stages must be a whole number"),
    ("packed-varlen:nosuch", "neither a depth"),
])
def test_bad_names_raise_input_errors_naming_the_problem(text, fragment):
    with pytest.raises(InputError, match=fragment):
        parse_plan(text)


def test_all_expands_to_every_packer_and_simulator_plan_once():
    names = {plan.packer or plan.name for plan in parse_plans(["all", "unpad"])}
    expected_plans = [parse_plan(name) for name in [*available_strategies(), *PLANS]]
    assert names == {plan.packer or plan.name for plan in expected_plans}
    assert len(parse_plans(["unpad", "unpad"])) == 1


def test_padding_reference_always_comes_first_and_only_once():
    plans = with_reference(parse_plans(["unpad", "none"]), "none")
    assert [plan.name for plan in plans] == ["none", "unpad"]
    assert plans[0].is_reference


@pytest.mark.parametrize("baseline", [None, "pad-to-longest", "sort", "unpad"])
def test_the_baseline_follows_padding_once(baseline):
    plans = with_reference(parse_plans(["unpad", "none", "sort"]), baseline)
    names = [plan.name for plan in plans]
    assert names[:2] == ["none", baseline or DEFAULT_BASELINE]
    assert sorted(names) == sorted(set(names)) and {"unpad", "sort"} <= set(names)


@pytest.mark.parametrize("text", ["sort:3", "none:max", "sort:sort"])
def test_a_depth_for_a_batcher_without_one_is_an_input_error(text):
    with pytest.raises(InputError, match="takes no depth"):
        parse_plan(text)
