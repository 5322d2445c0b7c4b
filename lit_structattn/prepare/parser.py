"""The supervised dependency parser of the NLI experiments, trained on UD English-EWT gold heads.

Kim et al. (2017, §4.4) take hard parents from SyntaxNet and pretrain the parsing layer "for one
epoch on a parsed dataset"; here both come from this project's own
:class:`~lit_structattn.models.parser.DependencyParser` trained by maximizing the log-likelihood
of the gold trees under a projective :class:`~lit_structattn.structured.DependencyCRF` (Adam,
lr 0.01, beta = (0.9, 0.999) as the paper's pretraining; gradient norm 5; dropout 0.3 on the
word embeddings). Its arc scorer drops the paper's outer ``tanh``, which bounds the scores to
``[-1, 1]`` and so keeps a parser trained on gold trees from being confident. Words are lowercased;
training words seen once map to ``<unk>``; training sentences longer than ``max_length`` words
are skipped (evaluation keeps every sentence). A trained parser is cached as one file under
``~/.cache/structattn/parsers`` (``$STRUCTATTN_CACHE`` replaces ``~/.cache/structattn``) with its
vocabulary and its unlabeled attachment scores (UAS) on the EWT dev and test sets. Training
happens only in the explicit preparation step (:func:`prepare_parser`: ``NLITask.prepare_data``
or this module's command line); building a model only reads the cache (:func:`cached_parser`).

The cache is keyed by everything the parser depends on, :func:`parser_settings`: every training
option and the sha256 of the treebank files' bytes (so a changed treebank, or another data
folder with other files, trains a new parser; the same files elsewhere reuse it). The file is
named ``ewt_e<epochs>_d<embed>_h<hidden>_s<seed>_<12 hex digits of the settings>.pt`` and holds
plain values only, read with ``torch.load(weights_only=True)``
(:func:`~lit_structattn.run.cache_records.load_record`); its ``key`` must equal the settings,
else it is refused. Parsers cached under the older names (``ewt_v3_...``) are not read: they are
trained again under the new names.

    python -m lit_structattn.prepare.parser --epochs 5      # trains (or reads) and prints UAS
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import Counter
from functools import partial
from pathlib import Path

import torch

from ..datamodules.files import atomic_path, cache_root, data_root, require_files
from ..datamodules.ud_pos import DependencyTree, read_conllu_trees
from ..datamodules.vocabulary import Vocabulary
from ..models.parser import DependencyParser, ParserOptions, attachment_counts
from ..run.cache_records import load_record
from .loop import fit, length_batches

EWT_FILES = {split: f"en_ewt-ud-{split}.conllu.gz" for split in ("train", "dev", "test")}
EWT_SOURCE = ("UD English-EWT (github.com/UniversalDependencies/UD_English-EWT), its CoNLL-U "
              "files gzip-compressed")


def treebank_folder() -> Path:
    """``<data_root>/ud_english_ewt`` (:func:`~lit_structattn.datamodules.files.data_root`), checked
    to hold the EWT files (``FileNotFoundError`` naming the folder and the files otherwise)."""
    return require_files(data_root() / "ud_english_ewt", EWT_FILES.values(), EWT_SOURCE)


def parser_settings(epochs: int, embed_dim: int, hidden_dim: int, seed: int = 0,
                    batch_size: int = 32, lr: float = 0.01, dropout: float = 0.3,
                    max_length: int = 60) -> dict:
    """Everything the parser trained by :func:`train_parser` depends on, its cache key: the
    training options as given, ``batch_order`` (``"torch"``: the side models' loop draws the
    order of the batches from a torch generator; parsers of the older loop, which drew it with
    Python's ``random``, are keyed without it and trained again) and ``treebank``, the sha256
    (hex) of the bytes of the EWT files (:func:`treebank_folder`), train, dev and test in that
    order."""
    digest = hashlib.sha256()
    found = treebank_folder()
    for name in EWT_FILES.values():
        digest.update((found / name).read_bytes())
    return {"epochs": epochs, "embed_dim": embed_dim, "hidden_dim": hidden_dim, "seed": seed,
            "batch_size": batch_size, "lr": lr, "dropout": dropout, "max_length": max_length,
            "batch_order": "torch", "treebank": digest.hexdigest()}


def parser_path(settings: dict) -> Path:
    """The cache file of the parser of :func:`parser_settings` ``settings``: the main sizes
    readable, then 12 hex digits of the sha256 of all the settings."""
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    name = (f"ewt_e{settings['epochs']}_d{settings['embed_dim']}_h{settings['hidden_dim']}"
            f"_s{settings['seed']}_{key}.pt")
    return cache_root() / "parsers" / name


def tree_batch(trees: list[DependencyTree], vocab: Vocabulary) -> dict[str, torch.Tensor]:
    """``words [B, N]`` (ids of the lowercased words, 0 = padding), ``lengths [B]`` and gold
    ``heads [B, N+1]`` (index 0 = root slot, 0 there and at padding)."""
    width = max(len(t.words) for t in trees)
    words = torch.zeros(len(trees), width, dtype=torch.long)
    heads = torch.zeros(len(trees), width + 1, dtype=torch.long)
    for b, tree in enumerate(trees):
        words[b, : len(tree.words)] = torch.tensor(vocab.encode(w.lower() for w in tree.words))
        heads[b, 1 : len(tree.heads) + 1] = torch.tensor(tree.heads)
    return {"words": words, "lengths": torch.tensor([len(t.words) for t in trees]),
            "heads": heads}


@torch.no_grad()
def unlabeled_attachment(parser: DependencyParser, trees: list[DependencyTree], vocab: Vocabulary,
                         batch_size: int = 64) -> float:
    """UAS (share of words whose Eisner-parse head is the gold head) over ``trees``."""
    parser.eval()
    correct = total = 0
    for indices in length_batches([len(tree.words) for tree in trees], batch_size):
        batch = tree_batch([trees[i] for i in indices], vocab)
        predicted = parser.parse(batch["words"], batch["lengths"])
        good, words = attachment_counts(predicted, batch["heads"], batch["lengths"])
        correct, total = correct + good, total + words
    return correct / total


def train_parser(settings: dict, log=print) -> dict:
    """Train on EWT train (:func:`treebank_folder`) with the options of :func:`parser_settings`
    ``settings`` through the side models' loop (:func:`~lit_structattn.prepare.loop.fit`:
    batches of similar length in an order drawn from the seed, which also sets the
    initialization and the dropout; the global random state is left as it was), logging each
    epoch's mean loss and dev UAS; returns ``state_dict``, ``vocab`` (tokens) and ``uas``
    (``dev``/``test``)."""
    folder = treebank_folder()
    trees = {split: read_conllu_trees(folder / name) for split, name in EWT_FILES.items()}
    counts = Counter(w.lower() for t in trees["train"] for w in t.words)
    vocab = Vocabulary.build(counts, min_count=2)
    training = [tree for tree in trees["train"] if len(tree.words) <= settings["max_length"]]

    def report(parser: DependencyParser, epoch: int, loss: float) -> None:
        dev = unlabeled_attachment(parser, trees["dev"], vocab)
        log(f"parser epoch {epoch}: loss/word {loss:.3f}, dev UAS {dev:.4f}")

    parser = fit(
        lambda: DependencyParser(len(vocab), ParserOptions(settings["embed_dim"],
                                                           settings["hidden_dim"]),
                                 bounded=False, dropout=settings["dropout"]),
        training, lengths=[len(tree.words) for tree in training],
        collate=partial(tree_batch, vocab=vocab), epochs=settings["epochs"],
        batch_size=settings["batch_size"],
        optimizer=partial(torch.optim.Adam, lr=settings["lr"], betas=(0.9, 0.999)),
        clip_norm=5.0, seed=settings["seed"], description="parser", after_epoch=report)
    uas = {split: unlabeled_attachment(parser, trees[split], vocab) for split in ("dev", "test")}
    return {"state_dict": parser.state_dict(), "vocab": vocab.tokens, "uas": uas}


def prepare_parser(settings: dict, log=print) -> Path:
    """The cache file of the parser of :func:`parser_settings` ``settings``, trained by
    :func:`train_parser` and written (with :func:`~lit_structattn.datamodules.files.atomic_path`)
    only if the cache has none, with the settings as its ``key``. The explicit preparation step of
    the NLI rows (``NLITask.prepare_data``, run once on local rank 0 before any process builds its
    model)."""
    path = parser_path(settings)
    if not path.is_file():
        log(f"training the supervised parser ({settings['epochs']} epochs on UD English-EWT) "
            f"-> {path}")
        record = {**train_parser(settings, log=log), "key": settings}
        with atomic_path(path) as partial:
            torch.save(record, partial)
    return path


def cached_parser(settings: dict) -> dict:
    """The cached record of the parser of :func:`parser_settings` ``settings``; never trains.

    Raises:
        FileNotFoundError: the cache has none (the message says how to make it).
        ValueError: the file holds more than plain values, or another key
            (:func:`~lit_structattn.run.cache_records.load_record`).
    """
    path = parser_path(settings)
    if not path.is_file():
        raise FileNotFoundError(
            f"no supervised parser cached at {path}: it is trained by the preparation step "
            "(NLITask.prepare_data, which Trainer.fit/validate/test/predict run first) or by "
            f"`python -m lit_structattn.prepare.parser --epochs {settings['epochs']} "
            f"--embed-dim {settings['embed_dim']} --hidden-dim {settings['hidden_dim']} "
            f"--seed {settings['seed']}`")
    return load_record(path, settings)


def build_parser(record: dict, mode: str = "structured") -> tuple[DependencyParser, Vocabulary]:
    """The parser of a cache record (in ``mode``; its sizes are in the record's ``key``, the
    :func:`parser_settings`) and its vocabulary."""
    config = record["key"]
    parser = DependencyParser(len(record["vocab"]), ParserOptions(config["embed_dim"],
                                                                  config["hidden_dim"]),
                              mode=mode, bounded=False)
    parser.load_state_dict(record["state_dict"])
    return parser, Vocabulary(record["vocab"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--embed-dim", type=int, default=100)
    parser.add_argument("--hidden-dim", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    settings = parser_settings(args.epochs, args.embed_dim, args.hidden_dim, args.seed)
    path = prepare_parser(settings)
    uas = cached_parser(settings)["uas"]
    print(f"EWT UAS: dev {100 * uas['dev']:.2f}, test {100 * uas['test']:.2f} ({path})")


if __name__ == "__main__":
    main()
