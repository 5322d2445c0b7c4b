"""Benchmark: structured inference and structured attention against their peers.

1. Marginals forward+backward of our LinearChainCRF and DependencyCRF against torch-struct
   (``bench/structured_crf.py``).
2. One decoder attention step of segmentation attention against softmax attention (B=64,
   source length 50, D=256): score, transform/CRF marginals, context, and the backward pass.
3. One whole decoder step of an attentional NMT decoder at Kim et al.'s sizes (2-layer LSTM of
   500, input feeding, batch 128, source length 50): LSTM, attention, output layer and loss
   over a 10k-word vocabulary, and the backward pass, with either attention. Kim et al.'s
   "structured attention was about 5x slower to train" compares whole models like this.

Same inputs in one run, 2 threads, best of k after warm-up; writes ``reports/bench_structured.md``
(``reports/bench_structured_<device>.md`` on another device, where every step ends by waiting for
the device).

    python -m bench.structured [--repeats 20] [--device cuda]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from bench import structured_crf
from bench.timing import best_times, markdown_table, synced, write_report
from lit_structattn.layers.attention import Attention
from lit_structattn.layers.segmentation import SegmentationAttention
from lit_structattn.models.seq2seq import EncodedSource, Seq2Seq

REPORT = Path(__file__).resolve().parent.parent / "reports" / "bench_structured.md"


def attention_step_times(repeats: int, device: str = "cpu", batch: int = 64, length: int = 50,
                         dim: int = 256):
    """Forward+backward time of one decoder attention step, softmax vs segmentation."""
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(batch, dim, generator=generator).to(device)
    keys = torch.randn(batch, length, dim, generator=generator).to(device)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=generator)
    lengths[0] = length
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(device)
    layers = {
        "softmax": Attention(dim, dim, score="general", transform="softmax").to(device),
        "segmentation": SegmentationAttention(dim, dim, score="general").to(device),
    }

    def step(layer):
        def run() -> None:
            q = query.detach().requires_grad_()
            context, _ = layer(q, keys, mask=mask)
            context.sum().backward()

        return run

    return best_times({name: synced(step(layer), device) for name, layer in layers.items()},
                      repeats)


def decoder_step_times(
    repeats: int, device: str = "cpu", batch: int = 128, length: int = 50, dim: int = 500,
    vocab: int = 10_000,
) -> dict[str, float]:
    """Forward+backward time of one whole decoder step (2-layer LSTM with input feeding,
    attention, output layer, NLL loss) with softmax and with segmentation attention."""
    generator = torch.Generator().manual_seed(0)
    memory = torch.randn(batch, length, dim, generator=generator).to(device)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=generator)
    lengths[0] = length
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(device)
    tokens = torch.randint(3, vocab, (batch,), generator=generator).to(device)
    gold = torch.randint(3, vocab, (batch,), generator=generator).to(device)

    def step(attention: str):
        torch.manual_seed(0)
        model = Seq2Seq(vocab, vocab, embed_dim=dim, hidden_dim=dim, attention=attention,
                        input_feed=True, num_layers=2).to(device)  # the memory is given below
        state = model.initial_state(EncodedSource(memory, mask))

        def run() -> None:
            source = EncodedSource(memory.detach().requires_grad_(), mask)
            logits, _, _ = model.decode_step(tokens, state, source)
            torch.nn.functional.cross_entropy(logits, gold).backward()

        return run

    return best_times({name: synced(step(name), device)
                       for name in ("softmax", "segmentation")}, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-report", action="store_true", help="print only")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, ...")
    args = parser.parse_args()
    torch.set_num_threads(2)
    crf_rows = structured_crf.run(args.repeats, device=args.device)
    crf_table = structured_crf.render(crf_rows)
    step = attention_step_times(args.repeats, args.device)
    step_table = markdown_table(
        ["decoder attention step (B=64, L=50, D=256)", "time (us)", "/ softmax"],
        [[name, f"{t * 1e6:.0f}", f"{t / step['softmax']:.2f}x"] for name, t in step.items()],
    )
    decoder = decoder_step_times(args.repeats, args.device)
    decoder_table = markdown_table(
        ["whole decoder step (B=128, L=50, 2x500 LSTM, V=10k)", "time (ms)", "/ softmax"],
        [[name, f"{t * 1e3:.1f}", f"{t / decoder['softmax']:.2f}x"] for name, t in decoder.items()],
    )
    print(crf_table, "", step_table, "", decoder_table, sep="\n")
    if not args.no_report:
        body = (
            "## Marginals, forward + backward, ours vs torch-struct\n\n"
            f"{structured_crf.DESCRIPTION}\n\n{crf_table}\n\n"
            "Target: <= 0.5x torch-struct at every size.\n\n"
            "## One decoder attention step\n\nScore (bilinear), transform or CRF marginals, "
            "context and the backward pass to the query, best of "
            f"{args.repeats} interleaved rounds.\n\n{step_table}\n\n"
            "## One whole decoder step\n\nAn attentional NMT decoder at Kim et al.'s sizes "
            "(2-layer LSTM of 500 units, input feeding, batch 128, source length 50, a 10k-word "
            "target vocabulary, smaller than theirs): embedding, LSTM, attention, output layer, "
            "NLL loss and the backward pass, best of "
            f"{args.repeats} interleaved rounds.\n\n{decoder_table}\n\n"
            "Target: a segmentation-attention decoder step <= 2x a softmax-attention step "
            "(Kim et al.: structured attention made NMT training about 5x slower). The attention "
            "layer alone (previous table) is further from it."
        )
        on = "" if args.device == "cpu" else (
            f"On `{torch.cuda.get_device_name(args.device)}` (`--device {args.device}`).\n\n")
        report = REPORT if args.device == "cpu" else \
            REPORT.with_name(f"bench_structured_{args.device.replace(':', '')}.md")
        write_report(report, "Structured inference and attention: speed against peers",
                     "python -m bench.structured"
                     + ("" if args.device == "cpu" else f" --device {args.device}"), on + body)


if __name__ == "__main__":
    main()
