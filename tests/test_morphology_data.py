"""The inflection DataModule: splits by lemma, the source/target symbols, batches, bad input;
on a generated table and on the Wiktionary files when they are present."""

from __future__ import annotations

from pathlib import Path

import pytest

from lit_structattn.common.constants import BOS_ID
from lit_structattn.datamodules.files import MalformedLine, data_root
from lit_structattn.datamodules.morphology import InflectionDataModule

NOUNS = {"Hund": ("Hundes", "Hunde"), "Katze": ("Katze", "Katzen"), "Haus": ("Hauses", "Häuser")}


def write_table(folder, broken=None):
    folder.mkdir(exist_ok=True)
    lines = []
    for lemma, (genitive, plural) in NOUNS.items():
        lines += [f"{lemma},{lemma},case=nominative:number=singular",
                  f"{genitive},{lemma},case=genitive:number=singular",
                  f"{plural},{lemma},case=nominative:number=plural"]
    if broken is not None:
        lines[broken] = "Hunde,Hund"
    (folder / "inflections_de_noun.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for split, lemmas in (("train", ["Hund", "Haus"]), ("dev", ["Katze"]), ("test", ["Katze"])):
        (folder / f"base_forms_de_noun_{split}.txt").write_text("\n".join(lemmas) + "\n")


def test_splits_by_lemma_and_symbols(tmp_path):
    write_table(tmp_path)
    dm = InflectionDataModule(data_dir=str(tmp_path), batch_size=2)
    dm.setup()
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 6, "val": 3, "test": 3}
    assert {lemma for _, lemma, _ in dm.datasets["val"].examples} == {"Katze"}
    src, tgt, _ = dm.datasets["train"].items[1]
    assert dm.vocab.decode(src) == ["case=genitive", "number=singular", *"Hund"]
    assert dm.vocab.decode(tgt) == list("Hundes")
    _, tgt, _ = dm.datasets["val"].items[2]  # "Katzen": K, t, z unseen in training -> <unk>
    assert dm.vocab.decode(tgt) == ["<unk>", "a", "<unk>", "<unk>", "e", "n"]
    batch = next(iter(dm.val_dataloader()))
    assert batch["src"].shape[0] == 2 and (batch["tgt_in"][:, 0] == BOS_ID).all()


def test_malformed_line_and_missing_files(tmp_path):
    write_table(tmp_path, broken=4)
    with pytest.raises(MalformedLine, match=r"inflections_de_noun\.csv:5: expected"):
        InflectionDataModule(data_dir=str(tmp_path)).setup()
    (tmp_path / "base_forms_de_noun_dev.txt").unlink()
    write_table(tmp_path / "other")
    (tmp_path / "other" / "base_forms_de_noun_dev.txt").unlink()
    with pytest.raises(FileNotFoundError, match="base_forms_de_noun_dev.txt is missing"):
        InflectionDataModule(data_dir=str(tmp_path / "other")).setup()
    with pytest.raises(ValueError, match="valid: noun, verb"):
        InflectionDataModule(pos="adjective")


WIKTIONARY = data_root() / "wiktionary_morphology_de"


@pytest.mark.skipif(not WIKTIONARY.is_dir(), reason="../shared/data/wiktionary_morphology_de "
                                                    "is absent")
@pytest.mark.parametrize(("pos", "sizes"), [("noun", (18912, 1600, 1600)),
                                            ("verb", (43929, 5400, 5400))])
def test_wiktionary_split_sizes(pos, sizes):
    dm = InflectionDataModule(pos=pos)
    dm.setup()
    assert tuple(len(dm.datasets[s]) for s in ("train", "val", "test")) == sizes


def test_inflection_cli_fit_and_test_with_beam_joint(tmp_path):
    """configs/morphology end to end on the generated table: exact-match accuracy logged at
    validation and test, beam-joint trained with K = 2 and decoded with K = 1."""
    from lit_structattn.run.lightning_cli import build_cli

    write_table(tmp_path / "data")
    configs = Path(__file__).resolve().parent.parent / "configs" / "morphology"
    args = ["--config", str(configs / "base.yaml"), "--config", str(configs / "nouns.yaml"),
            "--config", str(configs / "rows" / "beam_joint.yaml"),
            "--data.init_args.data_dir", str(tmp_path / "data"),
            "--model.init_args.model.init_args.joint_k", "2",
            "--model.init_args.test_joint_k", "1",
            "--trainer.max_epochs", "2", "--trainer.default_root_dir", str(tmp_path / "run"),
            "--trainer.enable_progress_bar", "false"]
    cli = build_cli(args, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert 0 <= float(cli.trainer.callback_metrics["val/accuracy"]) <= 1
    (tested,) = cli.trainer.test(cli.model, datamodule=cli.datamodule, verbose=False)
    assert set(tested) == {"test/accuracy", "test/score"} and cli.model.model.joint_k == 2
    assert tested["test/score"] == tested["test/accuracy"]
