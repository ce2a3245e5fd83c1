"""Packing without cross-contamination: a packed batch and the same sequences un-packed give the
same per-sequence outputs and losses (float64, eval mode)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from simbench.calibrate.batches import packed_batch, padded_batch, random_sequences, unpadded_batch  # noqa: E402
from simbench.calibrate.encoder import Encoder, EncoderShape, per_sequence_losses  # noqa: E402

SHAPE = EncoderShape(layers=2, hidden=32, heads=4, intermediate=64, vocabulary=97, max_length=32)
LENGTHS = [7, 12, 3, 20, 9, 1, 16, 5]
ROWS = [[3, 2, 5], [6, 0, 4], [1, 7]]  # depth 3, 3 and 2 in rows of 32 slots


def _model(seed=0):
    torch.manual_seed(seed)
    return Encoder(SHAPE).double().eval()


def _sequences():
    return random_sequences(LENGTHS, SHAPE.vocabulary, np.random.default_rng(1))


def _outputs_by_sequence(model, batch, order):
    """Per-sequence (hidden states of its tokens, masked-token logits, sequence logits, loss),
    keyed by the sequence's index in LENGTHS."""
    with torch.no_grad():
        hidden = model.encode(batch)
        token_logits, sequence_logits = model(batch)
        losses = per_sequence_losses(batch, token_logits, sequence_logits)
    first = batch.sequence_first_token
    lengths = batch.sequence_lengths
    return {index: (hidden[first[n]:first[n] + lengths[n]], token_logits[batch.masked_sequence == n],
                    sequence_logits[n], losses[n])
            for n, index in enumerate(order)}


def _alone(model, sequences):
    """Each sequence in a batch of its own, no padding: the reference a packed batch must match."""
    return {index: _outputs_by_sequence(model, padded_batch([sequence]), [index])[index]
            for index, sequence in enumerate(sequences)}


@pytest.mark.parametrize("layout", ["packed", "padded", "unpadded-grouped", "unpadded-jagged"])
def test_every_layout_matches_each_sequence_run_alone(layout):
    model, sequences = _model(), _sequences()
    order = [index for row in ROWS for index in row]
    if layout == "packed":
        batch = packed_batch(sequences, ROWS, row_length=SHAPE.max_length)
    elif layout == "padded":
        order = list(range(len(sequences)))
        batch = padded_batch(sequences, row_length=SHAPE.max_length)
    else:
        batch = unpadded_batch([sequences[index] for index in order], attention=layout.removeprefix("unpadded-"))
    reference = _alone(model, sequences)
    got = _outputs_by_sequence(model, batch, order)
    for index in range(len(sequences)):
        for produced, expected in zip(got[index], reference[index]):
            torch.testing.assert_close(produced, expected, rtol=1e-10, atol=1e-10)


def test_packed_loss_equals_mean_of_per_sequence_losses():
    model, sequences = _model(), _sequences()
    batch = packed_batch(sequences, ROWS, row_length=SHAPE.max_length)
    with torch.no_grad():
        packed_losses = per_sequence_losses(batch, *model(batch))
    alone = _alone(model, sequences)
    order = [index for row in ROWS for index in row]
    expected = torch.stack([alone[index][3] for index in order])
    torch.testing.assert_close(packed_losses, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(packed_losses.mean(), expected.mean(), rtol=1e-10, atol=1e-10)


def test_packed_gradients_equal_the_gradients_of_the_sequences_unpacked():
    sequences = _sequences()
    packed_model, unpacked_model = _model(), _model()
    packed = packed_batch(sequences, ROWS, row_length=SHAPE.max_length)
    per_sequence_losses(packed, *packed_model(packed)).sum().backward()
    for sequence in sequences:
        alone = padded_batch([sequence])
        per_sequence_losses(alone, *unpacked_model(alone)).sum().backward()
    for (name, packed_parameter), unpacked_parameter in zip(packed_model.named_parameters(),
                                                            unpacked_model.parameters()):
        torch.testing.assert_close(packed_parameter.grad, unpacked_parameter.grad, rtol=1e-9, atol=1e-10,
                                   msg=f"gradient of {name} differs")


def test_without_the_block_diagonal_mask_sequences_contaminate_each_other():
    """The control: the same packed rows with a plain padding mask must give different outputs."""
    model, sequences = _model(), _sequences()
    packed = packed_batch(sequences, ROWS, row_length=SHAPE.max_length)
    contaminated = type(packed)(**{**packed.__dict__, "packed": False})
    order = [index for row in ROWS for index in row]
    reference = _alone(model, sequences)
    got = _outputs_by_sequence(model, contaminated, order)
    later_in_row = [row[1] for row in ROWS]
    for index in later_in_row:
        assert not torch.allclose(got[index][0], reference[index][0], rtol=1e-6, atol=1e-6)


def test_position_ids_restart_for_every_packed_sequence():
    sequences = _sequences()
    batch = packed_batch(sequences, ROWS, row_length=SHAPE.max_length)
    row = ROWS[0]
    expected = np.concatenate([np.arange(LENGTHS[index]) for index in row])
    assert batch.position_ids[0, :expected.size].tolist() == expected.tolist()
    assert batch.row_sequence_ids[0].tolist() == (
        [1] * LENGTHS[row[0]] + [2] * LENGTHS[row[1]] + [3] * LENGTHS[row[2]]
        + [0] * (SHAPE.max_length - sum(LENGTHS[index] for index in row)))
