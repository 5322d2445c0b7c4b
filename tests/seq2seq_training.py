"""Teacher-forced training of a bare ``Seq2Seq`` for the model tests."""

from __future__ import annotations

import torch


def train(model, src, lengths, tgt_in, tgt_out, steps: int, lr: float = 0.02) -> list[float]:
    """``steps`` Adam updates of ``model.loss`` on one batch; returns the loss before each
    update."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = model.loss(src, lengths, tgt_in, tgt_out)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
