"""The curves notebook runs top to bottom against a real (tiny) run."""

from __future__ import annotations

import nbformat
from nbclient import NotebookClient

from litforge.training import train
from tests.helpers import ROOT


def test_training_curves_notebook(make_cfg, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    train(make_cfg("debug=limit", "trainer.max_epochs=3"))
    sweep = tmp_path / "sweep"  # two runs side by side, as a sweep directory holds them
    for job, lr in (("0", "1e-3"), ("1", "1e-2")):
        train(
            make_cfg("debug=limit", f"model.optimizer.lr={lr}", "test=false", run_dir=sweep / job)
        )
    monkeypatch.setenv("LITFORGE_RUN_DIR", str(run_dir))
    monkeypatch.setenv("LITFORGE_SWEEP_DIR", str(sweep))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(ROOT / "notebooks" / "training_curves.ipynb", as_version=4)
    NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    ).execute()
    printed = "".join(
        output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", [])
    )
    assert "precision_effective" in printed and "val/loss" in printed
    assert (run_dir / "curves.png").stat().st_size > 10_000
    assert "saved" in printed and (sweep / "sweep_curves.png").stat().st_size > 10_000
