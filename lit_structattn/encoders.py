"""Sequence encoders and masks shared by the structured layers and the models (imports only
torch)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def lengths_to_mask(lengths: Tensor, max_len: int) -> Tensor:
    """``lengths [B]`` -> bool ``mask [B, max_len]``, True at real positions."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


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
        states, (h, c) = self.lstm(packed)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=inputs.shape[1])
        final = (torch.cat([h[-2], h[-1]], -1), torch.cat([c[-2], c[-1]], -1))
        return states.to(inputs.dtype), tuple(t.to(inputs.dtype) for t in final)
