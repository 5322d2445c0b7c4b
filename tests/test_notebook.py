"""notebooks/attention_gallery.ipynb runs from top to bottom (at a tiny training budget)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "attention_gallery.ipynb"


def test_attention_gallery_runs(monkeypatch, tmp_path):
    # The kernel inherits this process's environment: a tiny budget, one thread.
    monkeypatch.setenv("GALLERY_TRAIN_PER_DEPTH", "20")
    monkeypatch.setenv("GALLERY_EPOCHS", "1")
    monkeypatch.setenv("GALLERY_TAGGER_BATCHES", "5")
    monkeypatch.setenv("GALLERY_BABI_EPOCHS", "2")
    monkeypatch.setenv("GALLERY_NMT_BATCHES", "3")
    monkeypatch.setenv("GALLERY_NMT_RUNS", str(tmp_path))  # no checkpoints: trains briefly
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        "store the notebook without outputs"
    )
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell

    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert images, "no cell produced a figure"
    from lit_structattn.datamodules.files import data_root

    # the cells drawing from real data: NLI parses, the raindrop plot, translation heatmaps,
    # bAbI marginals
    for folder, marker in (("snli", 'data_root() / "snli"'),
                           ("ud_english_ewt", 'data_root() / "ud_english_ewt"'),
                           ("multi30k_en_de", "TranslationDataModule"),
                           ("babi_v1.2_en", 'data_root() / "babi_v1.2_en"')):
        if (data_root() / folder).is_dir():
            outputs = code_cell(notebook, marker).outputs
            assert any("image/png" in out.get("data", {}) for out in outputs), folder


def code_cell(notebook, marker: str):
    """The one code cell whose source contains ``marker``."""
    cells = [c for c in notebook.cells if c.cell_type == "code" and marker in c.source]
    assert len(cells) == 1, f"{len(cells)} code cells contain {marker!r}"
    return cells[0]
