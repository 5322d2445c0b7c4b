"""Mixed precision in every model family (DESIGN: "Every model family trains with
``--trainer.precision bf16-mixed``"): ``structattn fit`` of a row of each family's configs under
``bf16-mixed`` on CPU, two training batches and a validation, on the tiny data of the family's own
end-to-end tests; and, without data files, the taggers (whose CLI cases need UD English-EWT) and
every output of the encoder-decoder under ``torch.autocast``."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch

from lit_structattn.datamodules.files import data_root
from lit_structattn.models.seq2seq import OUTPUTS, Seq2Seq, SourceEncoderOptions
from lit_structattn.run.lightning_cli import build_cli

from .seq2seq_training import copy_task
from .test_babi_cli import tiny as babi_run
from .test_easy_first import make_batch, make_tagger
from .test_nli_cli import tiny as nli_run
from .test_seq2seq_cli import tiny as tree_run
from .test_tagging_cli import tiny as tagging_run
from .test_translation_task import CONFIGS as TRANSLATION
from .test_translation_task import corpus  # noqa: F401  (the generated corpus, a fixture)
from .test_translation_task import tiny as translation_run

MIXED = ["--trainer.precision", "bf16-mixed", "--trainer.max_epochs", "1",
         "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2",
         "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.callbacks+=tests.test_mixed_precision.TrainingLosses"]
TAGGING_DATA = (data_root() / "ud_english_ewt").is_dir()


class TrainingLosses(L.Callback):
    """Keeps the loss of every training step as ``training_step`` returned it (the logged
    value is float32 whatever the loss's dtype)."""

    def __init__(self) -> None:
        self.losses: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(outputs["loss"])


def translation(row: str, *extra: str):
    """The arguments of a translation row on the generated corpus (the ``corpus`` fixture)."""
    return lambda tmp_path, request: translation_run(request.getfixturevalue("corpus"), tmp_path,
                                                     row, *extra)


def tagging(row: str):
    return pytest.param(lambda tmp_path, _: tagging_run(tmp_path, row), id=f"tagging-{row}",
                        marks=pytest.mark.skipif(not TAGGING_DATA,
                                                 reason="UD English-EWT not available"))


CASES = {  # name -> (tmp_path, request) -> the arguments of `structattn fit`
    **{f"tree-{row}": lambda tmp_path, _, row=row: tree_run(row, tmp_path)
       for row in ("none", "simple", "structured")},
    "translation-softmax": translation("softmax"),
    "translation-csparsemax_predicted": translation("csparsemax_predicted"),
    "translation-beam_joint": translation("beam_joint"),
    "translation-characters-segmentation": translation(
        "segmentation", "--config", str(TRANSLATION / "characters.yaml"),
        "--data.init_args.word_vocab_size", "12"),
    "babi-softmax": lambda tmp_path, _: babi_run(tmp_path, "softmax"),
    "babi-sparsemax": lambda tmp_path, _: babi_run(tmp_path, "sparsemax"),
    "babi-binary_crf": lambda tmp_path, _: babi_run(tmp_path, "binary_crf"),
    "nli-structured": lambda tmp_path, _: nli_run(tmp_path, "structured",
                                                  "--data.init_args.batch_size", "8"),
    "nli-csparsemax-inter": lambda tmp_path, _: nli_run(tmp_path, "none",
                                                        "--data.init_args.batch_size", "8",
                                                        "--model.init_args.model.init_args.inter",
                                                        "csparsemax"),
}
TAGGING_ROWS = ("bilstm", "bilstm_crf", "nef_f_csoftmax", "nef_crf_f_5")


@pytest.mark.parametrize("arguments", [
    *(pytest.param(arguments, id=name) for name, arguments in CASES.items()),
    *(tagging(row) for row in TAGGING_ROWS),
])
def test_fit_bf16_mixed(arguments, tmp_path, request):
    """Two optimizer steps and one validation under ``bf16-mixed``: float32 training losses, a
    finite logged one, and the validation metric that the row's checkpointing monitors."""
    cli = build_cli(["fit", *arguments(tmp_path, request), *MIXED])
    trainer = cli.trainer
    assert trainer.precision == "bf16-mixed" and trainer.global_step == 2
    (losses,) = (callback.losses for callback in trainer.callbacks
                 if isinstance(callback, TrainingLosses))
    assert [loss.dtype for loss in losses] == [torch.float32] * 2
    assert math.isfinite(trainer.callback_metrics["train/loss"])
    best = trainer.checkpoint_callback
    assert best.monitor.startswith("val/") and best.monitor in trainer.callback_metrics
    assert math.isfinite(best.best_model_score)


@pytest.mark.parametrize(("crf", "attention", "steps"), [
    (False, "softmax", 0), (True, "softmax", 0), (False, "csoftmax", "L"), (True, "csoftmax", 5),
])
def test_tagger_forward_and_backward_under_autocast(crf, attention, steps):
    """The tagging rows of :func:`test_fit_bf16_mixed` (BiLSTM, BiLSTM-CRF, NEF-F csoftmax,
    NEF-CRF-F) without data files: a float32 loss and finite gradients from bf16 scores."""
    batch, tags = make_batch([6, 2, 5], extra=1)
    model = make_tagger(crf=crf, attention=attention, steps=steps).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outputs = model(**batch)
        loss = model.loss(outputs, tags, batch["lengths"])
    assert outputs.scores.dtype == torch.bfloat16  # autocast did reach the tagger
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert_finite_gradients(model)


def assert_finite_gradients(model: torch.nn.Module) -> None:
    for name, parameter in model.named_parameters():
        assert parameter.grad is None or torch.isfinite(parameter.grad).all(), name


@pytest.mark.parametrize("output", OUTPUTS)
def test_encoder_decoder_under_autocast(output):
    """Every output layer (the sampled ones estimate ``log p(y)`` from log-probabilities) gives
    a float32 loss with finite gradients, and greedy and beam search decode, on a batch of equal
    source lengths: the one for which the BiLSTM encoder's LSTM returns bfloat16 under autocast
    (a float32 memory keeps the coverage, fertilities and beams in float32); and a bfloat16
    model's beam search."""
    torch.manual_seed(0)
    model = Seq2Seq(14, 14, 8, 8, encoder=SourceEncoderOptions(kind="bilstm", hidden_dim=4),
                    input_feed=True, output=output, joint_k=2)
    src, lengths, tgt_in, tgt_out = copy_task(model, sentences=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model.loss(src, lengths, tgt_in, tgt_out)
        memory = model.encode(src, lengths).memory
        greedy, attention = model.greedy(src, lengths, max_len=7)
        beams = model.beam_search(src, lengths, max_len=7, beam=2)
    assert memory.dtype == torch.float32 and attention.dtype == torch.float32
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert_finite_gradients(model)
    assert len(greedy) == len(beams) == len(src)
    bf16 = model.to(torch.bfloat16)  # no autocast: a bf16 memory, still float32 beam scores
    assert len(bf16.beam_search(src, lengths, max_len=7, beam=2)) == len(src)


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed"])
@pytest.mark.parametrize("arguments", [
    *(pytest.param(arguments, id=name) for name, arguments in CASES.items()),
    *(tagging(row) for row in TAGGING_ROWS),
])
def test_fit_on_cuda(arguments, precision, tmp_path, request):
    """Every family's rows fit two steps and validate on a GPU at every precision."""
    cli = build_cli(["fit", *arguments(tmp_path, request), *MIXED, "--trainer.precision",
                     precision, "--trainer.accelerator", "cuda", "--trainer.devices", "1"])
    trainer = cli.trainer
    assert trainer.global_step == 2 and cli.model.device.type == "cuda"
    assert math.isfinite(trainer.callback_metrics["train/loss"])
    assert math.isfinite(trainer.checkpoint_callback.best_model_score)
