"""Property: over random scenarios (3-20 strategies, 512 to 131,072 tokens) a report's words mean one thing:
every label of a depth-limited packer names its depth, no efficiency reads 100.0 with padding left, and no
winner is called inside the run's sampling noise."""

import re

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simbench.experiment import run_experiment
from simbench.report.summary import MIN_LEAD, TIE_SIGMAS, summary_markdown, summary_record
from simbench.scenario import Scenario
from simbench.strategies import STRATEGIES

PACKERS = ["greedy", "spfhp", "lpfhp", "ffd", "bfd"]
OTHERS = ["sort", "token-budget", "group-by-length", "unpad", "unpad-exchange", "unpad-exchange-overlap"]
DEPTHS = [None, 2, 3, 4, 8, 16, "max"]
LABEL_WITH_DEPTH = re.compile(r":(\d+|max)$")

# An 8B model fits no single 80 GiB H100 (simbench.sim.memory_fit): these tests are of words, not memory, so
# their H100 holds it.
ROOMY_H100 = {"profile": "h100-sxm", "overrides": {"hbm_capacity_bytes": 1.0e15}}


@st.composite
def scenarios(draw):
    max_length = draw(st.sampled_from([512, 2048, 8192, 32768, 131072]))
    median = draw(st.floats(0.02, 0.5)) * max_length
    packers = draw(st.lists(st.tuples(st.sampled_from(PACKERS), st.sampled_from(DEPTHS)), min_size=1, max_size=14,
                            unique=True))
    specs = [{"name": name} if depth is None else {"name": name, "max_depth": depth} for name, depth in packers]
    specs += [{"name": "packed-varlen", "packer": draw(st.sampled_from(PACKERS[1:]))}] if draw(st.booleans()) else []
    specs += [{"name": name} for name in draw(st.lists(st.sampled_from(OTHERS), max_size=6, unique=True))]
    # Equal plans under two spellings (spfhp and spfhp:max) may not both be listed: keep the first of each.
    seen, distinct = set(), []
    for spec in specs:
        key = (spec["name"], spec.get("packer"), "max" if spec.get("max_depth") is None else spec["max_depth"])
        if key not in seen:
            seen.add(key)
            distinct.append(spec)
    return {"max_length": max_length, "median": median, "sigma": draw(st.floats(0.3, 1.2)),
            "strategies": ["none", *distinct][:20], "seed": draw(st.integers(0, 2**16))}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_labels_efficiencies_and_winners_mean_one_thing(drawn):
    scenario = Scenario(
        # A synthetic histogram is discretized exactly (no sampling): 4 sequences a token of context give every
        # length near the median a whole count, so no drawn scenario rounds to an empty dataset.
        name="words", dataset={"histogram": {"synthetic": "lognormal", "sequences": 4 * drawn["max_length"],
                                             "median_length": drawn["median"], "sigma": drawn["sigma"]},
                               "max_length": drawn["max_length"]},
        model="llama-3.1-8b", hardware=ROOMY_H100, strategies=drawn["strategies"], devices=[1, 8], batch_size=1,
        steps=3, seed=drawn["seed"], outputs={"lp_bounds": False, "plots": []})
    histogram = scenario.dataset.load()
    tables = run_experiment(scenario, histogram)
    record = summary_record(scenario, histogram, tables)
    markdown = summary_markdown(scenario, histogram, tables)

    for row in record["scaling"]:
        strategy = STRATEGIES.find(row["packer"]) if isinstance(row["packer"], str) else None
        if strategy is not None and strategy.uses_depth:
            assert LABEL_WITH_DEPTH.search(row["strategy"]), row["strategy"]
    packing_rows = _packing_table(markdown)
    for row in record["packing"]:
        shown = packing_rows[row["label"]]["efficiency %"]
        assert (shown == "100.0") == (row["padding_tokens"] == 0), (row["label"], shown, row["padding_tokens"])
    scaling = pd.DataFrame(record["scaling"])
    for winner in _winner_rows(markdown):
        if winner["lead %"] == "all tie":
            continue
        fastest = winner["fastest"].replace(" and ", ", ").split(", ")[0]  # the first of any tied with it
        first = scaling[(scaling["strategy"] == fastest) & (scaling["devices"] == int(winner["devices"]))]
        second = scaling[(scaling["strategy"] == winner["runner-up"]) & (scaling["devices"] == int(winner["devices"]))]
        first, second = first.iloc[0], second.iloc[0]
        lead = first["speedup"] / second["speedup"] - 1
        assert lead >= MIN_LEAD and lead > TIE_SIGMAS * (first["throughput_noise"]**2
                                                         + second["throughput_noise"]**2)**0.5, winner


def _markdown_rows(markdown: str, heading: str) -> list[dict]:
    section = markdown.split(heading, 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")))) for line in lines[2:]]


def _packing_table(markdown: str) -> dict[str, dict]:
    return {row["strategy"]: row for row in _markdown_rows(markdown, "## Packing")}


def _winner_rows(markdown: str) -> list[dict]:
    return [row for row in _markdown_rows(markdown, "## Winner at each scale") if "runner-up" in row]


def test_a_depth_that_leaves_rows_mostly_empty_is_flagged_where_the_user_looks():
    scenario = Scenario(
        name="shallow", dataset={"histogram": {"synthetic": "lognormal", "sequences": 20000, "median_length": 600,
                                               "sigma": 1.0}, "max_length": 16384},
        model="llama-3.1-8b", hardware=ROOMY_H100, strategies=["none", "spfhp:3", "spfhp", "ffd:12"], devices=[1],
        batch_size=1, steps=3, outputs={"lp_bounds": False, "plots": []})
    histogram = scenario.dataset.load()
    mean_length = histogram.real_tokens / histogram.sequences
    # Depth 3 x a mean of 828 tokens caps rows at 15 % of 16,384 slots; depth 12 at 61 %, no limit at 100 %.
    (warning,) = scenario.depth_warnings()
    assert warning.startswith("spfhp:3: ") and f"{100 * 3 * mean_length / 16384:.1f} %" in warning
    tables = run_experiment(scenario, histogram)
    assert summary_record(scenario, histogram, tables)["warnings"] == [warning]
    assert f"**Warning**: {warning}." in summary_markdown(scenario, histogram, tables)
    efficiency = tables.packing.set_index("label").loc["spfhp:3", "efficiency"]
    assert efficiency <= 3 * mean_length / 16384  # the cap the warning states holds
