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


def copy_task(model, sentences: int = 16, length: int = 5):
    """A batch of the copy task for ``model``: ``(src, lengths, tgt_in, tgt_out)`` with random
    sources of ids 3..11 and the targets ``<bos> + src`` / ``src + <eos>``."""
    src = torch.randint(3, 12, (sentences, length))
    lengths = torch.full((sentences,), length)
    tgt_in = torch.cat([torch.full((sentences, 1), model.bos_id), src], 1)
    tgt_out = torch.cat([src, torch.full((sentences, 1), model.eos_id)], 1)
    return src, lengths, tgt_in, tgt_out
