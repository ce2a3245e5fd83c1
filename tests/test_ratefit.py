"""Achieved compute rates fitted on one published padded throughput."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simbench.calibrate.ratefit import PublishedThroughput, fit_padded_rates, padded_sequences_per_s
from simbench.costmodels.transformer import TransformerCostModel
from simbench.errors import InputError


def _run(sequences_per_s=620.0, gpus=8, per_gpu_batch=16, accumulation_steps=256):
    return PublishedThroughput(sequences_per_s, gpus, per_gpu_batch, accumulation_steps, 512, "test")


@settings(max_examples=25, deadline=None)
@given(st.floats(20, 400), st.sampled_from([1, 8, 64]), st.sampled_from([1, 16, 256]))
def test_the_fitted_profile_prices_the_run_at_its_published_throughput(per_gpu, gpus, accumulation):
    # Up to 400 seq/s per GPU: a100's fixed costs (launches, LAMB, host) alone cap 16 rows near 1,270 seq/s.
    sequences_per_s = per_gpu * gpus
    fit = fit_padded_rates(_run(sequences_per_s, gpus, 16, accumulation))
    assert padded_sequences_per_s(_run(sequences_per_s, gpus, 16, accumulation),
                                  TransformerCostModel("bert-large", fit.profile)) == pytest.approx(sequences_per_s)


def test_only_the_two_rates_move_and_their_ratio_stays():
    fit = fit_padded_rates(_run())
    base = TransformerCostModel("bert-large", "a100").hardware
    assert fit.profile.linear_flops_per_s / fit.profile.attention_flops_per_s == pytest.approx(
        base.linear_flops_per_s / base.attention_flops_per_s)
    assert fit.profile.linear_flops_per_s == pytest.approx(fit.rate_scale * base.linear_flops_per_s)
    unchanged = {"linear_flops_per_s", "attention_flops_per_s", "source"}
    assert {k: v for k, v in fit.profile.model_dump().items() if k not in unchanged} == {
        k: v for k, v in base.model_dump().items() if k not in unchanged}


def test_accumulation_amortises_the_update_and_the_all_reduce():
    cost_model = TransformerCostModel("bert-large", "a100")
    every_step = padded_sequences_per_s(_run(accumulation_steps=1, gpus=64), cost_model)
    accumulated = padded_sequences_per_s(_run(accumulation_steps=256, gpus=64), cost_model)
    single = padded_sequences_per_s(_run(accumulation_steps=256, gpus=1), cost_model)
    assert every_step < accumulated
    # Nearly free all-reduce once per 256 micro-steps: 64 GPUs almost 64 times one GPU.
    assert accumulated / single == pytest.approx(64, rel=1e-3)


def test_an_unreachable_throughput_is_one_line():
    with pytest.raises(InputError, match="fixed costs alone"):
        fit_padded_rates(_run(sequences_per_s=1e9))
    with pytest.raises(InputError, match="accumulation_steps"):
        _run(accumulation_steps=0)
