"""Diagnostic: gradient norms of NEF-F taggers in their first training steps, per attention.

Why NEF-F with sparsemax trains badly here (reports/easy_first_pos.md). Each model trains
as the `cpu` budget does (Adagrad lr 0.1, clipping at norm 5, dropout 0.2, batches of 16
English UD training sentences, the same batches in the same order for every model); reported:
the median and largest gradient norm *before* clipping over the steps, and the training loss
of the last step. ``scores detached`` cuts the gradient through the attention scores ``z``
(the sketches still get theirs): if the norms fall back, they grow along the score path
``z^n -> alpha^n -> s^n -> z^{n+1}``, compounded over the N sketch steps.

    python -m bench.easy_first_gradients [--steps 150]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import torch

from bench.timing import markdown_table, write_report
from lit_structattn.attention import Transform
from lit_structattn.datamodules.ud_pos import UDPOSDataModule
from lit_structattn.models.easy_first import EasyFirstDecoderOptions, EasyFirstTagger

REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_easy_first_gradients.md"
MODELS = {  # name: (attention, N, detach the scores)
    "softmax, N=L": ("softmax", "L", False),
    "csoftmax, N=L": ("csoftmax", "L", False),
    "sparsemax, N=2": ("sparsemax", 2, False),
    "sparsemax, N=5": ("sparsemax", 5, False),
    "sparsemax, N=L": ("sparsemax", "L", False),
    "sparsemax, N=L, scores detached": ("sparsemax", "L", True),
}


def detached_scores(transform: Transform) -> Transform:
    """``transform`` with no gradient flowing back through its scores ``z``."""
    return dataclasses.replace(transform, function=lambda z, *args, **kwargs:
                               transform.function(z.detach(), *args, **kwargs))


def gradient_norms(batches: list[dict], sizes: tuple[int, int, int], attention: str,
                   steps: int | str, detach: bool) -> tuple[list[float], float]:
    """Pre-clipping gradient norms of every step and the last step's loss."""
    torch.manual_seed(0)
    model = EasyFirstTagger(*sizes, dropout=0.2, decoder=EasyFirstDecoderOptions(
        steps=steps, attention=attention, update="full"))
    if detach:
        model.decoder.transform = detached_scores(model.decoder.transform)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1)
    norms = []
    for batch in batches:
        outputs = model(batch["words"], batch["lengths"], batch["prefixes"], batch["suffixes"])
        loss = model.loss(outputs, batch["tags"], batch["lengths"])
        optimizer.zero_grad()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)))
        optimizer.step()
    return norms, loss.item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--no-report", action="store_true", help="print only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = UDPOSDataModule(batch_size=16, max_train_length=50, min_count=2)
    data.setup("fit")
    loader = iter(data.train_dataloader())
    batches = [next(loader) for _ in range(args.steps)]
    sizes = (data.vocab_size, data.num_tags, data.affix_vocab_size)  # as the CLI links them
    rows = []
    for name, (attention, steps, detach) in MODELS.items():
        norms, loss = gradient_norms(batches, sizes, attention, steps, detach)
        rows.append([name, f"{statistics.median(norms):.3g}", f"{max(norms):.3g}", f"{loss:.1f}"])
        print(name, rows[-1][1:], flush=True)
    table = markdown_table(["NEF-F attention", "median gradient norm", "largest", "last loss"],
                           rows)
    print(table)
    if not args.no_report:
        body = f"{__doc__.split(chr(10) * 2)[1]}\n\n{args.steps} training steps.\n\n{table}"
        write_report(REPORT, "Easy-first taggers: gradient norms in the first training steps",
                     f"python -m bench.easy_first_gradients --steps {args.steps}", body)


if __name__ == "__main__":
    main()
