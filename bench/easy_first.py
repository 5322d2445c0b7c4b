"""Benchmark: training speed of the easy-first taggers against the BiLSTM tagger.

One step = forward, loss, backward and an Adagrad update of :class:`EasyFirstTagger` at the
paper's sizes on the same batches of 32 English UD training sentences for every model. The
models take turns batch by batch so that load on a shared machine hits all of them; reported:
sentences per second and the ratio to the BiLSTM (targets: NEF-F N=5 >= 0.5x, NEF-F N=L >= 0.2x).

    python -m bench.easy_first [--steps 40] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from bench.timing import markdown_table, write_report
from lit_structattn.datamodules.ud_pos import UDPOSDataModule
from lit_structattn.models.easy_first import EasyFirstDecoderOptions, EasyFirstTagger

REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_easy_first.md"
MODELS = {
    "BiLSTM (N=0)": {"steps": 0},
    "NEF-F csoftmax, N=5": {"steps": 5},
    "NEF-F csoftmax, N=L": {"steps": "L"},
    "NEF-CRF-F csoftmax, N=5": {"steps": 5, "crf": True},
}  # the decoder's steps, and the CRF


def sentences_per_second(steps: int) -> dict[str, float]:
    data = UDPOSDataModule(batch_size=32)
    data.setup("fit")
    loader = iter(data.train_dataloader())
    batches = [next(loader) for _ in range(steps + 3)]
    sizes = (data.vocab_size, data.num_tags, data.affix_vocab_size)  # as the CLI links them
    models = {name: EasyFirstTagger(*sizes, crf=row.get("crf", False),
                                    decoder=EasyFirstDecoderOptions(steps=row["steps"],
                                                                    attention="csoftmax",
                                                                    update="full"))
              for name, row in MODELS.items()}
    # Adagrad lr 0.1 fused, as TaggingTask.configure_optimizers makes it on the CPU
    optimizers = {name: torch.optim.Adagrad(m.parameters(), lr=0.1, fused=True)
                  for name, m in models.items()}
    seconds = dict.fromkeys(models, 0.0)
    sentences = 0
    for index, batch in enumerate(batches):
        for name, model in models.items():
            start = time.perf_counter()
            outputs = model(batch["words"], batch["lengths"], batch["prefixes"], batch["suffixes"])
            loss = model.loss(outputs, batch["tags"], batch["lengths"])
            optimizers[name].zero_grad()
            loss.backward()
            optimizers[name].step()
            if index >= 3:  # warm-up
                seconds[name] += time.perf_counter() - start
        sentences += len(batch["words"]) if index >= 3 else 0
    return {name: sentences / total for name, total in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-report", action="store_true", help="print only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    speed = sentences_per_second(args.steps)
    base = speed["BiLSTM (N=0)"]
    table = markdown_table(["model", "sentences / s", "/ BiLSTM"],
                           [[name, f"{s:.0f}", f"{s / base:.2f}x"] for name, s in speed.items()])
    print(table)
    if not args.no_report:
        body = (f"{__doc__.split(chr(10) * 2)[1]}\n\n{args.steps} batches of 32 sentences.\n\n"
                f"{table}\n\nTargets: NEF-F N=5 >= 0.5x, N=L >= 0.2x the BiLSTM.")
        command = f"python -m bench.easy_first --steps {args.steps} --threads {args.threads}"
        write_report(REPORT, "Easy-first taggers: training speed against the BiLSTM", command,
                     body)


if __name__ == "__main__":
    main()
