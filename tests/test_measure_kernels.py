"""`simbench measure` runs what is priced: the kernel each attention implementation runs, the rows and batch size
it times, the time budget that sizes its steps and repeats, its progress lines and its device's advice."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from simbench.calibrate import kernels   # noqa: E402
from simbench.calibrate.batches import batch_for_layout   # noqa: E402
from simbench.calibrate.causal_lm import _attention_arguments   # noqa: E402
from simbench.calibrate.encoder import Encoder, EncoderShape, attention_mask   # noqa: E402
from simbench.calibrate.layout import BatchLayout   # noqa: E402
from simbench.calibrate.measure_budget import BUDGET_STEPS_MIN, budgeted_passes   # noqa: E402
from simbench.calibrate.measure_compare import judge   # noqa: E402
from simbench.calibrate.measure_run import measure_shape   # noqa: E402
from simbench.commands.common import step_lines   # noqa: E402
from simbench.costmodels.base import ROW_MODE_OF_ATTENTION, Attention, ExecutionMode   # noqa: E402
from simbench.costmodels.hardware import load_hardware   # noqa: E402
from simbench.costmodels.model import get_model   # noqa: E402
from simbench.errors import InputError   # noqa: E402
from simbench.histogram import LengthHistogram   # noqa: E402

ROWS = [[5, 7, 3], [9, 4], [16]]


def _layout(attention: Attention) -> BatchLayout:
    return BatchLayout.packed(ROWS, 16, ROW_MODE_OF_ATTENTION[attention])


def _batch(attention: Attention, unpadded_attention: str = "grouped"):
    return batch_for_layout(_layout(attention), 50, np.random.default_rng(0), unpadded_attention)


def test_row_packs_run_without_a_mask_and_the_masks_run_as_named():
    assert attention_mask(_batch(Attention.ROW)) is None
    assert _attention_arguments(_batch(Attention.ROW)) == {}  # a decoder: plain causal attention over the row
    dense = attention_mask(_batch(Attention.DENSE_MASK))
    assert isinstance(dense, torch.Tensor) and dense.shape == (3, 1, 16, 16)
    assert "mask" in _attention_arguments(_batch(Attention.DENSE_MASK))
    from torch.nn.attention.flex_attention import BlockMask

    assert isinstance(attention_mask(_batch(Attention.BLOCK_MASK)), BlockMask)
    assert isinstance(_attention_arguments(_batch(Attention.BLOCK_MASK))["block_mask"], BlockMask)
    varlen = _batch(Attention.VARLEN, "torch_varlen")
    assert varlen.unpadded_attention == "torch_varlen" and _attention_arguments(varlen)["kernel"] == "torch_varlen"


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # eager is the CPU's reference
def test_a_document_block_mask_attends_as_the_dense_mask_does():
    """FlexAttention's document mask and the dense block-diagonal mask give every real token the same output."""
    torch.manual_seed(0)
    encoder = Encoder(EncoderShape(layers=1, hidden=16, heads=2, intermediate=32, vocabulary=50, max_length=16))
    with torch.no_grad():  # FlexAttention has no backward on a CPU; its forward runs there
        dense, block = (encoder.encode(_batch(attention)) for attention in (Attention.DENSE_MASK,
                                                                             Attention.BLOCK_MASK))
    real = _batch(Attention.DENSE_MASK).row_sequence_ids.reshape(-1) > 0
    torch.testing.assert_close(block[real], dense[real], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("flash, torch_varlen, expected", [(True, True, "flash_varlen"), (False, True, "torch_varlen"),
                                                           (False, False, "grouped")])
def test_cuda_runs_a_varlen_kernel_per_sequence_never_jagged_by_default(monkeypatch, flash, torch_varlen, expected):
    monkeypatch.setattr(kernels, "flash_attn_installed", lambda: flash)
    monkeypatch.setattr(kernels, "torch_varlen_available", lambda causal: torch_varlen)
    for causal in (False, True):
        assert kernels.per_sequence_kernel("cuda", causal) == expected
        assert kernels.per_sequence_kernel("cpu", causal) == "grouped"
    from simbench.calibrate.calibration import decoder_attention, default_unpadded_attention

    assert default_unpadded_attention("cuda") == decoder_attention("cuda") == expected


def test_block_mask_rows_are_refused_where_flex_attention_cannot_train():
    with pytest.raises(InputError, match="no backward pass on a CPU"):
        kernels.check_runnable(ExecutionMode.PACKED_BLOCK_MASK, "cpu")
    for mode in (ExecutionMode.PADDED, ExecutionMode.PACKED_DENSE_MASK, ExecutionMode.PACKED_VARLEN):
        kernels.check_runnable(mode, "cpu")


def test_rows_are_the_scenarios_on_cuda_and_rescaled_with_a_note_on_a_cpu():
    histogram = LengthHistogram.from_lengths([10, 200, 512], max_length=512)
    notes = []
    assert measure_shape(histogram, get_model("bert-large"), "cuda", None, notes.append) == (histogram, 512)
    assert notes == []
    scaled, length = measure_shape(histogram, get_model("tiny"), "cpu", None, notes.append)
    assert length == 128 and scaled.max_length == 128 and "rescaled" in notes[0]
    with pytest.raises(InputError, match="positions"):
        measure_shape(histogram, dataclasses.replace(get_model("tiny"), max_positions=256), "cuda", None, notes.append)


def _layouts(steps: int) -> dict[str, list[BatchLayout]]:
    return {"padding": [BatchLayout.padded([100, 300], 512)] * steps,
            "packs": [BatchLayout.packed([[200, 300], [500]], 512)] * steps}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_time_budget_sizes_steps_and_repeats_and_says_so(device):
    model, profile = get_model("bert-base"), load_hardware("h200")
    previous = None
    for seconds in (0.5, 2.0, 10.0, 1e4):
        budget = budgeted_passes(_layouts(32), model, device, profile, 0, seconds, None, None)
        assert BUDGET_STEPS_MIN <= budget.steps <= 32 and 2 <= budget.repeats <= 5
        assert f"time budget {seconds:.0f} s" in budget.message
        if previous is not None:  # a larger budget never times less
            assert (budget.steps, budget.repeats) >= (previous.steps, previous.repeats)
        previous = budget
    assert "over the budget" in budgeted_passes(_layouts(32), model, device, profile, 0, 1e-6, None, None).message
    given = budgeted_passes(_layouts(32), model, device, profile, 0, 1.0, 7, 4)
    assert (given.steps, given.repeats, given.message) == (7, 4, None)
    assert budgeted_passes(_layouts(32), model, device, profile, 0, 1e-6, 9, None).steps == 9
    with pytest.raises(InputError, match="seconds"):
        budgeted_passes(_layouts(32), model, device, profile, 0, 0.0, None, None)


def test_progress_lines_speak_at_the_first_and_last_step_and_between_at_most_as_often_as_asked():
    lines = []
    advance = step_lines(lines.append, "timed", every_seconds=float("inf"))
    for _ in range(5):
        advance(5)
    assert lines == ["timed 1 of 5 steps", "timed 5 of 5 steps"]
    every = []
    advance = step_lines(every.append, "timed", every_seconds=0.0)
    for _ in range(3):
        advance(3)
    assert len(every) == 3
    assert step_lines(None, "timed") is None  # a terminal shows its bar instead


def test_the_verdict_advises_for_the_device_it_ran_on():
    table = pd.DataFrame({"strategy": ["none", "lpfhp"], "problem": ["", ""], "speedup_noise": [0.0, 0.5]})
    on_cpu, on_gpu = judge(table, baseline="none", device="cpu"), judge(table, baseline="none", device="cuda")
    assert not on_cpu.valid and not on_gpu.valid
    assert "--threads 1" in on_cpu.message
    assert "--threads" not in on_gpu.message and "CPU clock" not in on_gpu.message and "GPU" in on_gpu.message
