"""Sequence encoders shared by the attention layers and the models."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def run_lstm(lstm: nn.LSTM, inputs, state: tuple[Tensor, Tensor] | None = None):
    """``lstm(inputs, state)``, in float32 with autocast off when run under CPU autocast.

    oneDNN has no bfloat16 LSTM primitive on CPUs without native bfloat16 support (it fails
    with "could not create a primitive descriptor"), so on CPU the recurrence always runs in
    float32; on CUDA autocast applies as usual. ``inputs`` is a padded ``[B, T, D]`` tensor or a
    ``PackedSequence``; the outputs are float32 under CPU autocast, callers cast them back.
    """
    if not torch.is_autocast_enabled("cpu"):
        return lstm(inputs, state)
    with torch.autocast("cpu", enabled=False):
        if isinstance(inputs, Tensor):
            inputs = inputs.float()
        else:  # a PackedSequence
            inputs = inputs._replace(data=inputs.data.float())
        if state is not None:
            state = tuple(t.float() for t in state)
        return lstm(inputs, state)


class BiLSTMEncoder(nn.Module):
    """A (multi-layer) bidirectional LSTM over padded sequences.

    Padding never influences the states of real positions (packed sequences), and the states at
    padded positions are 0.
    """

    def __init__(self, input_dim: int, hidden_dim: int, num_layers: int = 1, dropout: float = 0.0):
        super().__init__()
        self.lstm = nn.LSTM(
            input_dim, hidden_dim, num_layers=num_layers, batch_first=True, bidirectional=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )

    def forward(self, inputs: Tensor, lengths: Tensor) -> Tensor:
        """``inputs [B, T, D]``, ``lengths [B]`` -> states ``[B, T, 2H]``."""
        return self.run(inputs, lengths)[0]

    def run(self, inputs: Tensor, lengths: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """States ``[B, T, 2H]`` and the top layer's final ``(h, c)``, each ``[B, 2H]``: the
        forward direction after the last word next to the backward one after the first; all in
        the dtype of ``inputs``. (Under CPU autocast the LSTM of a packed batch returns bfloat16
        when all its lengths are equal and float32 otherwise: the cast keeps one dtype.)"""
        packed = pack_padded_sequence(inputs, lengths.cpu(), batch_first=True, enforce_sorted=False)
        states, (h, c) = run_lstm(self.lstm, packed)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=inputs.shape[1])
        final = (torch.cat([h[-2], h[-1]], -1), torch.cat([c[-2], c[-1]], -1))
        return states.to(inputs.dtype), tuple(t.to(inputs.dtype) for t in final)
