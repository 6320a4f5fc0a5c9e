"""Feynman-Kac UCI and MNIST (spec §6.3-6.4): whole-data standardisation, the UCI preprocessing and
seed runner, the Table 9 conv pBNN's stacked-filter particle path, and both recipes at a tiny size."""
import csv
import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lit_bayes.cli import main
from lit_bayes.data import TabularCSV
from lit_bayes.data.uci import UCICSV
from lit_bayes.models import PartialBNN
from lit_bayes.models.partial_convnet import PartialConvNet
from tests.test_data import write_mnist

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes" / "feynman_kac"
QUIET = ["--trainer.enable_progress_bar", "false", "--wandb", "false"]


def write_table(path, rows, header=None):
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        if header is not None:
            writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture
def run_uci():
    """The UCI preprocessing that run_uci.py applies (lit_bayes.data.uci_sets)."""
    return importlib.import_module("lit_bayes.data.uci_sets")


# ----------------------------------------------------------------------------- UCI data


def test_uci_csv_standardises_with_whole_data_statistics(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(40, 3))
    y = x @ [1.0, -2.0, 0.5] + 10.0
    path = write_table(tmp_path / "t.csv", np.column_stack([x, y]).tolist(), ["a", "b", "c", "y"])
    data = UCICSV(path, target="y", batch_size=8)
    data.setup("fit")
    splits = [data.train_data, data.val_data, data.test_data]
    assert [len(s) for s in splits] == [24, 12, 4]  # 60 / 30 / 10
    all_x = torch.cat([s.tensors[0] for s in splits]).double()
    all_y = torch.cat([s.tensors[1] for s in splits]).double()
    assert torch.allclose(all_x.mean(0), torch.zeros(3, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(all_x.std(0, correction=0), torch.ones(3, dtype=torch.float64), atol=1e-6)
    assert abs(float(all_y.mean())) < 1e-6 and abs(float(all_y.std(correction=0)) - 1) < 1e-6
    assert data.target_mean == pytest.approx(float(y.mean()))
    # stats_from="train" is TabularCSV's training-split standardisation, on the same split
    train = UCICSV(path, target="y", stats_from="train")
    reference = TabularCSV(path, target="y")
    train.setup("fit")
    reference.setup("fit")
    assert torch.equal(train.test_data.tensors[0], reference.test_data.tensors[0])
    assert torch.equal(data.test_data.tensors[1].argsort(), reference.test_data.tensors[1].argsort())
    with pytest.raises(ValueError, match="stats_from"):
        UCICSV(path, target="y", stats_from="val")


def test_uci_preprocessing_per_data_set(run_uci):
    rng = np.random.default_rng(1)
    # energy: 8 features, then Y1 (the target) and Y2 (dropped)
    rows = [[f"{v:.3f}" for v in rng.normal(size=10)] for _ in range(6)]
    features, targets, classes = run_uci.preprocess(run_uci.DATASETS["energy"], rows)
    assert len(features[0]) == 8 and classes is None
    assert targets == [float(r[8]) for r in rows]
    # naval: 16 features (two constant), the compressor decay (target), the turbine decay (dropped)
    rows = [[f"{v:.3f}" for v in rng.normal(size=18)] for _ in range(6)]
    for row in rows:
        row[8], row[11] = "288", "0.998"
    features, targets, _ = run_uci.preprocess(run_uci.DATASETS["naval"], rows)
    assert len(features[0]) == 14 and targets == [float(r[16]) for r in rows]
    # glass: an id column, 9 features, labels 1..7 without 4, remapped to 0..5
    labels = ["1", "2", "3", "5", "6", "7", "7"]
    rows = [[str(i)] + [f"{v:.3f}" for v in rng.normal(size=9)] + [label] for i, label in enumerate(labels)]
    features, targets, classes = run_uci.preprocess(run_uci.DATASETS["glass"], rows)
    assert len(features[0]) == 9 and classes == 6 and targets == [0, 1, 2, 3, 4, 5, 5]
    # ionosphere: a constant second column (dropped) and string labels
    rows = [[f"{rng.normal():.3f}", "0"] + [f"{v:.3f}" for v in rng.normal(size=32)] + [g] for g in "gbgbb"]
    features, targets, classes = run_uci.preprocess(run_uci.DATASETS["ionosphere"], rows)
    assert len(features[0]) == 33 and classes == 2 and targets == [1, 0, 1, 0, 0]
    with pytest.raises(ValueError, match="csv: column 2 of data row 1"):
        run_uci.preprocess(run_uci.DATASETS["yacht"], [["1", "x", "2"], ["2", "3", "4"]])
    with pytest.raises(ValueError, match="csv: data row 2 has 2 fields"):
        run_uci.preprocess(run_uci.DATASETS["yacht"], [["1", "2", "3"], ["2", "3"]])


def test_uci_recipe_runs_at_tiny_size(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(50, 6))
    path = write_table(tmp_path / "yacht.csv", np.column_stack([x, x[:, 0] - x[:, 1] ** 2]).tolist(),
                       [f"x{k}" for k in range(1, 7)] + ["y"])
    main(["fit", "-c", str(RECIPES / "uci_ohsmc.yaml"), "--data.init_args.path", str(path),
          "--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "2",
          "--model.init_args.num_particles", "50", *QUIET])
    (summary,) = tmp_path.rglob("summary.json")
    summary = json.loads(summary.read_text())
    assert summary["sampler"] == "OHSMC" and summary["steps"] == 4  # 30 training rows, batch 20
    for name in ("test/nlpd", "test/rmse_per_sample", "test/rmse"):
        assert 0.0 < summary["metrics"][name] < 10.0, name
    assert summary["metrics"]["best/val/nlpd"] <= summary["metrics"]["val/nlpd"] + 1e-12
    assert len(list(tmp_path.rglob("*.ckpt"))) == 1


def test_uci_script_runs_seeds_and_both_moves_beside_table_3(tmp_path):
    """ionosphere's layout: 34 columns with a constant second one, then g/b labels."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(60, 34))
    x[:, 1] = 0.0
    labels = np.where(x[:, 0] + x[:, 2] > 0, "g", "b")
    path = write_table(tmp_path / "ionosphere.data", [[f"{v:.4f}" for v in row] + [g] for row, g in zip(x, labels)])
    result = subprocess.run(
        [sys.executable, str(RECIPES / "run_uci.py"), "ionosphere", str(path), "--no-header", "--seeds", "2",
         "--root", str(tmp_path / "runs"), "--trainer.max_epochs", "1", "--model.init_args.num_particles", "30", *QUIET],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = json.loads((tmp_path / "runs" / "ionosphere" / "table.json").read_text())
    assert (table["n"], table["d"], table["num_classes"], table["seeds"]) == (60, 33, 2, 2)
    assert set(table["rows"]) == {"rw", "ou"} and table["selected"] in ("rw", "ou")
    assert table["paper"]["NLPD"] == {"mean": 0.21, "std": 0.13} and table["paper"]["ECE"]["mean"] == 0.08
    for row in table["rows"].values():
        assert len(row["ECE"]["values"]) == 2 and 0 <= row["Acc."]["mean"] <= 1
        assert row["NLPD"]["values"][0] != row["NLPD"]["values"][1]  # seeds differ
    config = (tmp_path / "runs" / "ionosphere" / "ou" / "seed_0" / "config.yaml").read_text()
    assert "kernel: ou" in config and "batch_size: 20" in config and "- 33" in config
    assert "paper 0.21 (0.13)" in result.stdout and "selected" in result.stdout
    assert set(table["verdicts"]) == {f"{k} seed {s}" for k in ("rw", "ou") for s in (0, 1)}
    assert "health verdicts of the 4 run(s): " in result.stdout


def test_uci_script_rejects_a_missing_file(tmp_path, run_uci):
    with pytest.raises(ValueError, match="csv: no file"):
        run_uci.read_rows(tmp_path / "none.csv", ",", header=True)


# ----------------------------------------------------------------------------- MNIST conv pBNN


def test_conv_pbnn_has_the_table_9_sizes():
    model = PartialConvNet()
    assert model.stochastic_names == ["0.weight", "0.bias"]
    assert sum(p.numel() for p in model.stochastic_parameters().values()) == 320
    assert sum(p.numel() for p in model.deterministic_parameters()) == 824138
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_conv_stacked_filter_path_equals_the_vmap_and_loop_paths_with_gradient_to_psi_only():
    torch.manual_seed(0)
    model = PartialConvNet(input_shape=(1, 12, 12), max_images=6)  # 5 particles x 3 images: chunks of 2
    generic = PartialBNN(model.net, "0")
    generic._split = None  # vmap(functional_call) over the whole network
    phi = {n: torch.randn(5, *p.shape) for n, p in model.stochastic_parameters().items()}
    x = torch.rand(3, 1, 12, 12)
    out = model.particle_forward(phi, x)
    assert out.shape == (5, 3, 10)
    for reference in (PartialBNN.particle_forward(model, phi, x), generic.particle_forward(phi, x),
                      model.particle_forward_loop(phi, x)):
        assert torch.allclose(out, reference, atol=1e-5), (out - reference).abs().max()
    # gradients (through the recomputed chunks) equal the loop's, and reach psi only
    weights = torch.randn(5, 3, 10)
    grads = []
    for forward in (model.particle_forward, model.particle_forward_loop):
        model.zero_grad(set_to_none=True)
        (weights * forward(phi, x)).sum().backward()
        assert all(p.grad is None for p in model.stochastic_parameters().values())
        grads.append([p.grad.clone() for p in model.deterministic_parameters()])
    for fast, loop in zip(*grads):
        assert torch.allclose(fast, loop, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kwargs, message", [
    ({"input_shape": (28, 28)}, "input_shape"),
    ({"input_shape": (1, 3, 28)}, "input_shape"),
    ({"num_classes": 1}, "num_classes"),
    ({"max_images": 0}, "max_images"),
    ({"recompute": 1}, "recompute"),
    ({"init": "xavier"}, "init"),
])
def test_conv_pbnn_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PartialConvNet(**kwargs)


def test_mnist_recipe_runs_at_tiny_size(tmp_path):
    write_mnist(tmp_path, "MNIST", n_train=24, n_test=12)
    main(["fit", "-c", str(RECIPES / "mnist_ohsmc.yaml"), "--data.init_args.root", str(tmp_path),
          "--data.init_args.num_val", "4", "--data.init_args.batch_size", "10", "--trainer.max_epochs", "1",
          "--model.init_args.num_particles", "4", "--model.init_args.model.init_args.max_images", "20",
          "--trainer.default_root_dir", str(tmp_path / "run"), *QUIET])
    (summary,) = (tmp_path / "run").rglob("summary.json")
    summary = json.loads(summary.read_text())
    assert summary["sampler"] == "OHSMC" and summary["steps"] == 2  # 20 training images, batch 10
    for name in ("test/nlpd", "test/ece_per_sample", "test/accuracy_per_sample", "test/ece", "test/accuracy"):
        assert 0.0 <= summary["metrics"][name] < 10.0, name
    assert summary["metrics"]["best/val/nlpd"] <= summary["metrics"]["val/nlpd"] + 1e-6
    assert len(list((tmp_path / "run").rglob("*.ckpt"))) == 1


def test_mnist_vb_and_swag_baselines_run_through_their_scripts_at_tiny_size(tmp_path):
    """Table 4's VB row (``run_table.py --method vb``) and SWAG row (``run_baselines.py``: MAP, then SWAG from
    its phi with psi fixed) on files in MNIST's own format."""
    write_mnist(tmp_path, "MNIST", n_train=24, n_test=12)
    data = ["--data.init_args.root", str(tmp_path), "--data.init_args.num_val", "4", "--data.init_args.batch_size",
            "10", *QUIET]
    subprocess.run([sys.executable, str(RECIPES / "run_table.py"), "mnist", "--method", "vb", "--seeds", "1",
                    "--root", str(tmp_path / "tables"), "--trainer.max_epochs", "1", *data,
                    "--model.init_args.num_train_samples", "2", "--model.init_args.num_samples", "4",
                    "--model.init_args.model.init_args.max_images", "20"],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    vb = json.loads((tmp_path / "tables" / "mnist" / "vb" / "table.json").read_text())
    assert vb["rows"]["NLPD"]["paper_mean"] == 0.0453 and vb["verdicts"] == {"seed 0": "ok"}
    summary = json.loads((tmp_path / "tables" / "mnist" / "vb" / "seed_0" / "summary.json").read_text())
    assert summary["sampler"] == "MeanFieldVB" and summary["steps"] == 2  # 20 training images, batch 10
    assert summary["metrics"]["best/val/nlpd"] <= summary["metrics"]["val/nlpd"] + 1e-6
    subprocess.run([sys.executable, str(RECIPES / "run_baselines.py"), "mnist", "swag", "--seeds", "1",
                    "--epochs", "1", "--swag-epochs", "3", "--root", str(tmp_path / "baselines"), *data],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    swag = json.loads((tmp_path / "baselines" / "mnist" / "swag.json").read_text())
    assert swag["verdicts"] == {"seed 0 stage 1": "ok", "seed 0 SWAG": "ok"}
    assert swag["rows"]["Acc."]["paper_mean"] == 0.9776
    summary = json.loads((tmp_path / "baselines" / "mnist" / "swag" / "swag" / "seed_0" / "summary.json").read_text())
    assert summary["sampler"] == "SWAG" and summary["steps"] == 6  # 3 epochs of 2 batches: 3 snapshots
    for name in ("test/nlpd", "test/ece_per_sample", "test/accuracy_per_sample"):
        assert 0.0 <= summary["metrics"][name] < 10.0, name
