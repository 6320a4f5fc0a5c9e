"""recipes/fnbg/fig6.py and chain_figures.py (FNBG Figs. 5, 6 and 8) on MNIST idx files of random pixels:
the prior draw has the prior's spread, a batch of every training image gives the full-data value, and
the figures of a tiny finished tables.py chain read its kept draws and predictive."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.script_modules import load_script
from tests.test_data import write_mnist

FNBG = Path(__file__).resolve().parents[1] / "recipes" / "fnbg"


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(FNBG))  # chain_figures imports its sibling common.py
    return load_script("fig6", FNBG / "fig6.py"), load_script("chain_figures", FNBG / "chain_figures.py")


def test_fig6_prior_draw_and_the_full_batch(scripts, tmp_path):
    fig6, _ = scripts
    params = torch.cat([p.detach().flatten() for p in fig6.prior_draw(0).parameters()])
    assert params.numel() == 8180
    assert params.std().item() == pytest.approx(10**0.5, rel=0.03) and abs(params.mean().item()) < 0.1
    write_mnist(tmp_path, "MNIST", n_train=400, n_test=10)
    fig6.main(["--root", str(tmp_path), "--batches", "100", "400", "--repeats", "3", "--out", str(tmp_path / "out")])
    result = json.loads((tmp_path / "out" / "fig6.json").read_text())
    small, full = result["rows"]
    assert (small["batch"], full["batch"]) == (100, 400)
    assert len(set(small["values"])) == 3  # three different batches
    assert full["std"] < 1e-5 and full["mean"] == pytest.approx(result["full"], abs=1e-5)
    assert (tmp_path / "out" / "fig6.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        fig6.main(["--root", str(tmp_path), "--batches", "401"])


def test_ambiguity_and_confidence_read_correct_predictions_only(scripts):
    _, figures = scripts
    probs = torch.tensor([[0.9, 0.1, 0.0], [0.4, 0.35, 0.25], [0.2, 0.7, 0.1], [0.5, 0.1, 0.4], [0.1, 0.2, 0.7]])
    labels = torch.tensor([0, 0, 1, 2, 2])  # the fourth is misclassified
    assert figures.class_confidence(probs, labels) == pytest.approx({0: 0.4, 1: 0.7, 2: 0.7})
    picked = figures.most_ambiguous(probs, labels, 2)
    assert [p["index"] for p in picked] == [1, 2]
    assert picked[0]["classes"] == [0, 1] and picked[0]["probs"] == pytest.approx([0.4, 0.35])


def test_chain_figures_of_a_finished_tables_run(scripts, tmp_path):
    _, figures = scripts
    root = tmp_path / "data"
    write_mnist(root, "MNIST", n_train=60_000, n_test=30)  # tables.py takes 60,000 / B batches per epoch
    out = tmp_path / "runs"
    subprocess.run([sys.executable, str(FNBG / "tables.py"), "length", "--sweeps", "30", "--datasets", "mnist",
                    "--root", str(root), "--out", str(out)], check=True, capture_output=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    (run_dir,) = (out / "mnist" / "3000").iterdir()
    figures.main([str(run_dir), "--ambiguous", "3"])
    result = json.loads((run_dir / "chain_figures.json").read_text())
    run = figures.kept_draws(run_dir)
    draws = figures.flat_draws(run)
    assert result["draws"] == run.num_draws == draws.shape[0] == 28 and draws.shape[1] == 8180
    first = run.samples["net.layers.0.weight"].reshape(28, -1)[:, 1005]  # weight row-major: theta_1005
    assert result["traces"][0]["mean"] == pytest.approx(first.double().mean().item())
    assert [t["tensor"] for t in result["traces"]] == ["net.layers.0.weight", "net.layers.1.weight",
                                                         "net.layers.2.weight", "net.layers.3.weight"]
    assert len(result["ambiguous"]) <= 3 and all(a["classes"][0] == a["label"] for a in result["ambiguous"])
    assert (run_dir / "fig5.png").exists() and (run_dir / "fig8.png").exists() == bool(result["ambiguous"])
    figures.main([str(run_dir), "--ambiguous", "3", "--last", "10"])  # the newest 10 of the 28 draws
    newest = json.loads((run_dir / "chain_figures.json").read_text())
    assert newest["draws"] == 10
    assert newest["traces"][0]["mean"] == pytest.approx(first[-10:].double().mean().item())
