"""recipes/fnbg/tables.py at a tiny length on MNIST idx files of random pixels: the Table 3 grid
runs end to end, the Table 2 grid on chosen batch sizes, the Table 4 grid keeps each transform in
its own run, and ``--resume`` picks a finished cell up from its checkpoint (chain and sample store)
instead of sampling it again."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.test_data import write_mnist

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TABLES = Path(__file__).resolve().parents[1] / "recipes" / "fnbg" / "tables.py"


@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory) -> Path:
    """The script takes 60,000 / B batches per epoch, so the training file has MNIST's size."""
    root = tmp_path_factory.mktemp("data")
    write_mnist(root, "MNIST", n_train=60_000, n_test=50)
    return root


def test_length_grid_runs_and_resume_reuses_the_finished_chain(mnist_root, tmp_path):
    out = tmp_path / "runs"
    command = [sys.executable, str(TABLES), "length", "--sweeps", "30", "--datasets", "mnist",
               "--root", str(mnist_root), "--out", str(out)]
    subprocess.run(command, check=True, capture_output=True, env=ENV)
    first = json.loads((out / "length.json").read_text())
    # 30 sweeps ask for 2 epochs of 20 batches: 40 sweeps, 2 of them burn-in, the last 28 kept
    assert [cell["last"] for cell in first] == [28] * 4
    assert [cell["paper_last"] for cell in first] == [1000, 10000, 20000, 30000]
    assert [cell["paper_accuracy"] for cell in first] == [88.31, 90.75, 91.12, 91.20]
    assert all(0.0 <= cell["accuracy"] <= 100.0 for cell in first)

    subprocess.run([*command, "--resume"], check=True, capture_output=True, env=ENV)
    assert json.loads((out / "length.json").read_text()) == first
    (resumed,) = (out / "mnist" / "3000").iterdir()  # continued in its own run directory
    assert json.loads((resumed / "summary.json").read_text())["steps"] == 40


def test_batch_grid_runs_the_chosen_batch_sizes(mnist_root, tmp_path):
    out = tmp_path / "runs"
    printed = subprocess.run([sys.executable, str(TABLES), "batch", "--batches", "600", "--sweeps", "110", "--datasets",
                              "mnist", "--root", str(mnist_root), "--out", str(out)],
                             check=True, capture_output=True, text=True, env=ENV).stdout
    (cell,) = json.loads((out / "batch.json").read_text())
    assert (cell["dataset"], cell["batch"], cell["paper_accuracy"]) == ("mnist", 600, 85.99)
    assert cell["paper_accept"] == [45.56, 26.43, 26.28, 29.18]  # Table 5, B = 600
    assert len(cell["accept"]) == 4 and all(0.0 < rate < 100.0 for rate in cell["accept"])
    (summary,) = (out / "mnist" / "600").rglob("summary.json")
    summary = json.loads(summary.read_text())
    assert summary["steps"] == 200  # 110 sweeps ask for 2 epochs of 100 batches
    # fewer than 10,000 draws kept: the last 10,000 are all of them, the summary's pooled predictive
    assert cell["accuracy"] == pytest.approx(100 * summary["metrics"]["test/accuracy"], abs=1e-4)
    # one chain: its verdict is at best a warning, kept with the cell and named under the table
    assert cell["verdict"] == summary["health"]["verdict"] != "ok"
    assert f"NOT CONVERGED: the verdict of mnist B=600 ({cell['verdict']})" in printed


def test_tables_2_and_4_score_the_last_10000_kept_draws(monkeypatch, tmp_path):
    """The B = 3000 cell is shared with Table 3, which keeps 30,000 draws: Tables 2 and 4 score the
    chain's last ``SCORED_DRAWS`` (the paper's 10,000), or all of them when it kept fewer, not the
    summary's pool of every kept draw."""
    monkeypatch.syspath_prepend(str(TABLES.parent))
    import tables

    asked = []

    class Chain:
        num_draws = 30_000

    monkeypatch.setattr(tables, "kept_draws", lambda run_dir: Chain)
    monkeypatch.setattr(tables, "chain_accuracies", lambda chain, last: asked.append(last) or [0.9])
    assert tables.SCORED_DRAWS == 10_000
    assert tables.last_draws_accuracy(tmp_path) == pytest.approx(90.0) and asked == [10_000]
    Chain.num_draws = 28
    tables.last_draws_accuracy(tmp_path)
    assert asked[-1] == 28


def test_augment_grid_keeps_each_transform_in_its_own_run(mnist_root, tmp_path):
    out = tmp_path / "runs"
    command = [sys.executable, str(TABLES), "augment", "--augmentations", "none", "inversion", "--sweeps", "30",
               "--datasets", "mnist", "--root", str(mnist_root), "--out", str(out)]
    subprocess.run(command, check=True, capture_output=True, env=ENV)
    first = json.loads((out / "augment.json").read_text())
    assert [(c["augmentation"], c["paper_accuracy"]) for c in first] == [("none", 90.75), ("inversion", 36.87)]
    states = [torch.load(out / "mnist" / "3000" / name / "version_0" / "checkpoints" / "last.ckpt",
                         weights_only=False)["state_dict"] for name in ("none", "inversion")]
    # the same seed on other training images: the chains part
    assert not all(torch.equal(states[0][key], states[1][key]) for key in states[0])

    subprocess.run([*command, "--resume"], check=True, capture_output=True, env=ENV)
    assert json.loads((out / "augment.json").read_text()) == first  # each cell continued its own chain
    for name in ("none", "inversion"):
        (resumed,) = (out / "mnist" / "3000" / name).iterdir()  # continued in its own run directory
        assert json.loads((resumed / "summary.json").read_text())["steps"] == 40
