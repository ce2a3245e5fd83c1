"""Regression check: no packer may fall below its recorded efficiency (data/baselines).

Each record is measured again; a packer may need at most one pack more than its record
(baseline.ALLOWED_EXTRA_PACKS: why one).
"""

import pytest

from simbench.errors import InputError
from simbench.histogram import bundled_histograms, load_histogram
from simbench.strategies import available_strategies
from simbench.strategies.baseline import (BaselineRecord, Comparison, compare_with_baseline, load_baseline,
                                          write_baseline)
from simbench.strategies.lp_bound import lp_lower_bound

RECORDS = load_baseline()


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: f"{r.histogram}-{r.strategy}-{r.max_depth}")
def test_packer_reaches_its_record(record):
    (comparison,) = compare_with_baseline([record])
    assert not comparison.regressed, (
        f"{record.strategy} on {record.histogram} at depth {record.max_depth}: "
        f"{comparison.measured_efficiency!r} < recorded {record.efficiency!r}")


def test_every_registered_built_in_strategy_has_records_on_every_bundled_histogram():
    recorded = {(record.histogram, record.strategy) for record in RECORDS}
    for histogram in bundled_histograms():
        for strategy in available_strategies():
            assert (histogram, strategy) in recorded


def test_optimal_records_are_proven_optima():
    # optimal meets the LP bound on every bundled histogram at every recorded depth: no packing of them can
    # reach a higher efficiency than its records (Wikipedia: 8,143,829 packs at depth 3, 8,135,727 without a limit).
    records = [record for record in RECORDS if record.strategy == "optimal"]
    recorded = {(record.histogram, record.max_depth) for record in records}
    assert recorded >= {("wikipedia_512", 3), ("wikipedia_512", None)}
    for record in records:
        histogram = load_histogram(record.histogram)
        bound = lp_lower_bound(histogram, histogram.max_length, record.max_depth).lower_bound_packs
        assert record.efficiency == pytest.approx(histogram.real_tokens / (bound * histogram.max_length), rel=1e-15)


def test_more_than_one_pack_beyond_the_record_is_a_regression():
    # 900 real tokens in 1,000 packs of 1 token: efficiency 0.9; each further pack lowers it.
    record = BaselineRecord("squad_1_1_384", "spfhp", 2, 0, 32, 0.9)
    assert not Comparison(record, 900 / 1000, 1000).regressed
    assert not Comparison(record, 900 / 1001, 1001).regressed
    assert Comparison(record, 900 / 1001, 1001).extra_packs == pytest.approx(1.0)
    assert Comparison(record, 900 / 1002, 1002).regressed
    assert not Comparison(record, 900 / 950, 950).regressed
    assert Comparison(record, 900 / 950, 950).extra_packs == pytest.approx(-50.0)
    (comparison,) = compare_with_baseline([record])
    assert comparison.regressed and comparison.shortfall == pytest.approx(0.9 - 0.8759718737362597)
    assert comparison.measured_packs == 45335
    assert comparison.extra_packs == pytest.approx(45335 * (1 - 0.8759718737362597 / 0.9))


def test_records_round_trip(tmp_path):
    path = tmp_path / "baseline.csv"
    write_baseline(RECORDS, path)
    assert load_baseline(path) == RECORDS


@pytest.mark.parametrize("text, line, message", [
    ("histogram,strategy\n", 1, "expected the header"),
    ("histogram,strategy,max_depth,seed,batch_size,efficiency\nsquad_1_1_384,spfhp,2,0,32\n", 2, "expected 6 columns"),
    ("histogram,strategy,max_depth,seed,batch_size,efficiency\n\nsquad_1_1_384,spfhp,two,0,32,0.5\n", 3, "bad number"),
    ("histogram,strategy,max_depth,seed,batch_size,efficiency\nsquad_1_1_384,spfhp,2,0,32,87.6\n", 2, "fraction"),
    ("histogram,strategy,max_depth,seed,batch_size,efficiency\nsquad_1_1_384,spfhp,0,0,32,0.5\n", 2,
     "max_depth must be at least 1 or empty, found 0"),
    ("histogram,strategy,max_depth,seed,batch_size,efficiency\nsquad_1_1_384,sort,,0,0,0.5\n", 2,
     "batch_size must be a whole number >= 1, found 0"),
    ("histogram,strategy,max_depth,seed,batch_size,efficiency\nsquad_1_1_384,greedy,,-1,32,0.5\n", 2,
     "seed must be a whole number >= 0, found -1"),
])
def test_bad_baseline_names_file_and_line(tmp_path, text, line, message):
    path = tmp_path / "baseline.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as caught:
        load_baseline(path)
    assert (caught.value.source, caught.value.line) == (str(path), line)
