"""The decoder-LLM scenarios: synthetic mixtures, documents split at the context length, multi-GPU replicas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import lognorm

from simbench.errors import InputError
from simbench.scenario import SyntheticHistogram
from simbench.checked import load_checked_scenario as load_scenario, parse_checked_scenarios as parse_scenarios

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def synthetic(**fields) -> SyntheticHistogram:
    return SyntheticHistogram(synthetic="lognormal", **fields)


def test_a_mixture_of_one_is_the_single_log_normal():
    single = synthetic(sequences=100_000, median_length=300, sigma=0.9).build(2048)
    mixture = synthetic(sequences=100_000, mixture=[{"share": 3.0, "median_length": 300, "sigma": 0.9}]).build(2048)
    assert np.array_equal(single.counts, mixture.counts)


def test_mixture_shares_weight_their_components():
    short, long = {"median_length": 50, "sigma": 0.3}, {"median_length": 900, "sigma": 0.3}
    histogram = synthetic(sequences=200_000, mixture=[{"share": 3, **short}, {"share": 1, **long}]).build(4096)
    below = histogram.counts[:300].sum() / histogram.sequences
    assert below == pytest.approx(0.75, abs=1e-3)


def test_split_documents_keep_their_tokens_and_cut_only_the_long_ones():
    documents, max_length, median, sigma = 50_000, 1024, 200, 1.5
    split = synthetic(sequences=documents, median_length=median, sigma=sigma, long_sequences="split").build(max_length)
    truncated = synthetic(sequences=documents, median_length=median, sigma=sigma).build(max_length)
    # The mean of a log-normal cut off at 64 max lengths (its tail beyond counts as that length).
    cap = 64 * max_length
    lengths = np.arange(1, cap + 1)
    pmf = np.diff(lognorm.cdf(np.arange(0.5, cap + 1), s=sigma, scale=median))
    expected_tokens = documents * (lengths @ pmf + cap * lognorm.sf(cap + 0.5, s=sigma, scale=median))
    assert split.real_tokens == pytest.approx(expected_tokens, rel=1e-3)
    assert split.sequences > truncated.sequences
    # Below max_length only remainders are added to the truncated histogram's counts.
    assert np.all(split.counts[:-1] >= truncated.counts[:-1])
    assert split.name.endswith("-split")


@pytest.mark.parametrize("fields", [{"median_length": 5, "sigma": 1, "mixture": [{"share": 1, "median_length": 5,
                                                                                   "sigma": 1}]},
                                    {}, {"median_length": 5}])
def test_a_synthetic_histogram_takes_one_distribution(tmp_path, fields):
    text = ("name: bad\ndataset:\n  max_length: 64\n  histogram: "
            + str({"synthetic": "lognormal", "sequences": 10, **fields}).replace("'", "") + "\nstrategies: [none]\n")
    with pytest.raises(InputError, match=r"scenario.yaml:4: .*either `median_length` and `sigma`, or a `mixture`"):
        parse_scenarios(text, source="scenario.yaml", base_dir=tmp_path)


def test_the_llm_scenarios_say_what_they_simulate():
    sft = load_scenario(SCENARIOS / "llama8b-sft-8k.yaml")
    histogram = sft.dataset.load()
    assert sft.layout.gpus_per_replica == 1 and sft.devices[0] == 8 and max(sft.devices) == 1024
    assert (sft.layout.zero_stage, sft.layout.recompute) == (3, "full") and histogram.max_length == 8192
    # The figures its comment states.
    assert histogram.sequences == 500_000 and round(histogram.real_tokens / histogram.sequences) == 1614
    assert round(100 * (1 - histogram.efficiency), 1) == 80.3
    pretrain = load_scenario(SCENARIOS / "llama70b-pretrain-32k.yaml")
    histogram = pretrain.dataset.load()
    assert pretrain.layout.gpus_per_replica == 8 and pretrain.replica_devices[0] == 2 and max(pretrain.devices) == 1024
    assert histogram.sequences == 1_024_100 and round(histogram.real_tokens / histogram.sequences) == 2801
    assert round(100 * (1 - histogram.efficiency), 1) == 91.5


def test_a_decoder_can_be_given_by_its_dimensions(tmp_path):
    text = """\
name: custom-decoder
dataset: {histogram: squad_1_1_384}
model: {layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn: 128, vocab: 1000, family: decoder, gated_mlp: true,
        positions: rotary, tied_embeddings: false, biases: none, norm: rmsnorm}
hardware: h200
gpus_per_replica: 2
strategies: [none]
"""
    (scenario,) = parse_scenarios(text, source="scenario.yaml", base_dir=tmp_path)
    assert scenario.model["gated_mlp"] is True and scenario.model["positions"] == "rotary"
    with pytest.raises(InputError, match=r"scenario.yaml:6: gpus_per_replica"):
        parse_scenarios(text.replace("gpus_per_replica: 2", "gpus_per_replica: 0"), source="scenario.yaml",
                        base_dir=tmp_path)
