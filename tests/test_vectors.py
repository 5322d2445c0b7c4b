"""Pretrained word vectors are read on the data side: the loader of
lit_structattn.datamodules.vectors (formats, lowercase fallback, errors naming file:line), the
tagging DataModules' ``pretrained_vectors`` (the initial embedding matrix after setup) and
TaggingTask copying it into the tagger when fitting."""

from __future__ import annotations

import gzip

import pytest
import torch

from lit_structattn.datamodules.vectors import load_pretrained_vectors
from lit_structattn.datamodules.word_qe import WordQEDataModule
from lit_structattn.models.tagging_encoder import TaggingEncoder, TaggingEncoderOptions


def write(path, lines, compress=False):
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if compress:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


VOCAB_TOKENS = ["<pad>", "<unk>", "the", "Paris", "cat", ". . .", "missing"]


@pytest.mark.parametrize("style", ["glove", "word2vec", "tabs", "gzip"])
def test_pretrained_vectors(tmp_path, style):
    lines = ["the 0.1 0.2 0.3", "paris 1 2 3", "cat -1e-1 0 2.5", ". . . 7 8 9", "dog 4 4 4",
             "the 9 9 9"]
    if style == "word2vec":
        lines = ["6 3"] + lines
    if style == "tabs":
        lines = [line.replace(" ", "\t", 1) if not line.startswith(".") else line
                 for line in lines]
    name = "vectors.txt.gz" if style == "gzip" else "vectors.txt"
    path = write(tmp_path / name, lines, compress=style == "gzip")
    matrix, found = load_pretrained_vectors(path, VOCAB_TOKENS, 3)
    assert matrix.shape == (7, 3) and matrix.dtype == torch.float32
    assert found == 4  # the, Paris (lowercase fallback), cat, ". . ."
    torch.testing.assert_close(matrix[2], torch.tensor([0.1, 0.2, 0.3]))  # first one wins
    torch.testing.assert_close(matrix[3], torch.tensor([1.0, 2, 3]))
    torch.testing.assert_close(matrix[4], torch.tensor([-0.1, 0, 2.5]))
    torch.testing.assert_close(matrix[5], torch.tensor([7.0, 8, 9]))
    assert torch.all(matrix[0] == 0)
    assert torch.all(matrix[6] != 0)  # random initialisation of words not found
    again, _ = load_pretrained_vectors(path, VOCAB_TOKENS, 3)
    assert torch.equal(matrix, again)
    _, found = load_pretrained_vectors(path, VOCAB_TOKENS, 3, lowercase_fallback=False)
    assert found == 3
    encoder = TaggingEncoder(7, 5, options=TaggingEncoderOptions(word_dim=3, affix_dim=2,
                                                                 hidden_dim=2))
    encoder.init_word_embeddings(matrix)
    assert torch.equal(encoder.word_embedding.weight.data, matrix)


def test_no_word_found_gives_standard_normal_rows(tmp_path):
    path = write(tmp_path / "vectors.txt", ["dog 1 2 3"])
    matrix, found = load_pretrained_vectors(path, VOCAB_TOKENS, 3, seed=5)
    assert found == 0 and matrix.shape == (7, 3)
    expected = torch.randn(7, 3, generator=torch.Generator().manual_seed(5))
    expected[0] = 0
    assert torch.equal(matrix, expected)


@pytest.mark.parametrize(
    "lines, line_no, message",
    [
        (["the 0.1 0.2 0.3", "cat 0.1 oops 0.3"], 2, "not a finite number"),
        (["the 0.1 0.2 0.3", "cat 0.1 0.2"], 2, "expected a token and 3 values"),
        (["the 0.1 0.2 0.3 0.4", "cat 1 2 3 4"], 1, "dimension mismatch"),
        (["2 4", "the 0.1 0.2 0.3 0.4"], 1, "header says vectors of size 4"),
        (["the 0.1 0.2 0.3", "cat 1 nan 3"], 2, "not a finite number"),
    ],
)
def test_pretrained_vectors_errors(tmp_path, lines, line_no, message):
    path = write(tmp_path / "bad.txt", lines)
    with pytest.raises(ValueError, match=message) as info:
        load_pretrained_vectors(path, VOCAB_TOKENS + ["cat"], 3)
    assert f"bad.txt:{line_no}:" in str(info.value)


def test_pretrained_vectors_bad_utf8(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"the 1 2 3\ncat\xff 1 2 3\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: not valid UTF-8"):
        load_pretrained_vectors(path, VOCAB_TOKENS, 3)


# ---------------------------------------------------------------------- the data side


def tiny_qe(folder):
    """Word-level QE files: two training sentences, one dev and one test sentence."""
    files = {
        "train": (["a b", "c d"], ["the cat sat", "Paris sat"], ["OK BAD OK", "OK OK"],
                  ["0-0 1-1", "0-1"]),
        "dev": (["a c"], ["the dog"], ["BAD OK"], ["0-0"]),
        "test": (["c"], ["cat"], ["OK"], ["0-0"]),
    }
    for prefix, columns in files.items():
        for ext, lines in zip(("src", "mt", "tags", "align"), columns, strict=True):
            (folder / f"{prefix}.{ext}").write_text("".join(line + "\n" for line in lines))
    return write(folder / "vectors.txt", ["sat 1 2 3", "paris 4 5 6", "dog 7 8 9"])


def test_datamodule_reads_the_vectors_in_setup(tmp_path):
    vectors = tiny_qe(tmp_path)
    plain = WordQEDataModule(str(tmp_path), batch_size=2)
    plain.setup()
    assert plain.pretrained_matrix is None and plain.pretrained_found == 0
    module = WordQEDataModule(str(tmp_path), batch_size=2, pretrained_vectors=str(vectors),
                              vector_dim=3)
    assert module.pretrained_matrix is None  # nothing is read before setup
    module.setup()
    vocab = module.vocab
    matrix = module.pretrained_matrix
    assert matrix.shape == (len(vocab), 3) and module.pretrained_found == 2  # sat, Paris
    assert matrix[vocab.id("sat")].tolist() == [1, 2, 3]
    assert matrix[vocab.id("Paris")].tolist() == [4, 5, 6]  # the lowercase fallback
    assert "dog" not in vocab and torch.all(matrix[0] == 0)
    with pytest.raises(ValueError, match="vector_dim"):
        WordQEDataModule(str(tmp_path), vector_dim=0)


def tiny_tagger(module: WordQEDataModule, word_dim: int):
    """The QE task around a small tagger, sized from ``module`` as the CLI links it."""
    from lit_structattn.models.easy_first import EasyFirstDecoderOptions, EasyFirstTagger
    from lit_structattn.tasks import TaggingTask

    model = EasyFirstTagger(
        module.vocab_size, module.num_tags, module.affix_vocab_size, module.source_vocab_size,
        encoder=TaggingEncoderOptions(word_dim=word_dim, affix_dim=2, hidden_dim=2),
        decoder=EasyFirstDecoderOptions(steps=1, sketch_dim=2, preattention_dim=2))
    return TaggingTask(model, module.tag_names, metric="f1_mult")


def test_task_starts_the_embeddings_from_the_datas_matrix_when_fitting(tmp_path):
    import lightning as L

    vectors = tiny_qe(tmp_path)
    module = WordQEDataModule(str(tmp_path), batch_size=2, pretrained_vectors=str(vectors),
                              vector_dim=3)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path, max_steps=0, num_sanity_val_steps=0)
    validated = tiny_tagger(module, word_dim=3)
    trainer.validate(validated, datamodule=module)  # not a fit: the embeddings stay as built
    assert not torch.equal(validated.model.encoder.word_embedding.weight,
                           module.pretrained_matrix)
    task = tiny_tagger(module, word_dim=3)
    trainer.fit(task, datamodule=module)  # sets the fit up, takes no step
    assert torch.equal(task.model.encoder.word_embedding.weight, module.pretrained_matrix)
    wrong = tiny_tagger(module, word_dim=4)
    with pytest.raises(ValueError, match=r"pretrained matrix of shape \[\d+, 3\]"):
        trainer.fit(wrong, datamodule=module)
