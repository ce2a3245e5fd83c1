"""Property: a report of any small scenario holds no impossible number (summary.json and summary.md)."""

import json
import math
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simbench.experiment import run_experiment
from simbench.report.summary import summary_markdown, summary_record
from simbench.scenario import Scenario

FAST_STRATEGIES = ["sort", "greedy", "spfhp", "lpfhp", "ffd", "bfd", "optimal", "nnlshp", "unpad",
                   "unpad-exchange", "vts", "token-budget", "group-by-length", "packed-varlen"]
NEGATIVE_NUMBER = re.compile(r"(?<![\w.-])-\d")


@st.composite
def scenarios(draw):
    max_length = draw(st.integers(8, 96))
    counts = draw(st.lists(st.integers(0, 40), min_size=max_length, max_size=max_length))
    counts[draw(st.integers(0, max_length - 1))] += 1  # at least one sequence
    return {
        "counts": counts,
        "strategies": draw(st.lists(st.sampled_from(FAST_STRATEGIES), min_size=1, max_size=4, unique=True)),
        "devices": draw(st.lists(st.sampled_from([1, 2, 8, 64]), min_size=1, max_size=3, unique=True)),
        "batch_size": draw(st.integers(1, 8)),
        "steps": draw(st.integers(2, 4)),
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_no_report_holds_an_impossible_number(drawn):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "lengths.csv")
        path.write_text("length,count\n" + "".join(f"{length},{count}\n"
                                                    for length, count in enumerate(drawn["counts"], start=1)))
        scenario = Scenario(name="random", dataset={"histogram": str(path)}, strategies=drawn["strategies"],
                            devices=drawn["devices"], batch_size=drawn["batch_size"], steps=drawn["steps"],
                            seed=drawn["seed"], outputs={"lp_bounds": True, "plots": []})
        histogram = scenario.dataset.load()
        tables = run_experiment(scenario, histogram)
        record = json.loads(json.dumps(summary_record(scenario, histogram, tables), allow_nan=False))
        markdown = summary_markdown(scenario, histogram, tables)

    for row in record["scaling"] + record["winners"]:
        assert math.isfinite(row["speedup"]) and row["speedup"] > 0, row
    for row in record["scaling"]:
        assert math.isfinite(row["tokens_per_s"]) and row["tokens_per_s"] > 0, row
    assert 1.0 <= record["dataset"]["theoretical_speedup"] < math.inf
    # The ideal is a ceiling: no strategy gains more over padding than every sequence alone at full rate.
    ideal = record["dataset"]["ideal_speedup"]
    assert 1.0 <= ideal < math.inf
    for row in record["scaling"]:
        if row["reference"] == "none":
            assert row["speedup"] <= ideal * (1 + 1e-12), row
    for row in record["packing"]:
        assert 0 < row["efficiency"] <= 1.0, row
        if row["lower_bound_packs"] is not None:
            # No packing beats the LP bound at its depth, so no gap is negative.
            assert row["packs"] >= row["lower_bound_packs"], row
            assert row["gap_to_bound"] >= 0, row
            assert row["efficiency"] <= histogram.real_tokens / (row["lower_bound_packs"] * histogram.max_length) + 1e-12
    assert not re.search(r"\b(nan|inf)\b", markdown, re.IGNORECASE)
    assert not NEGATIVE_NUMBER.search(markdown), NEGATIVE_NUMBER.search(markdown)
