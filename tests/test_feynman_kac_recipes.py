"""The Feynman-Kac recipes at a tiny size: CLI runs, model selection, per-particle metrics, table script."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lit_bayes.cli import main

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes" / "feynman_kac"
TINY = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3", "--model.init_args.num_particles", "50",
        "--trainer.enable_progress_bar", "false", "--wandb", "false"]


@pytest.mark.parametrize("recipe, metrics", [
    ("moons_ohsmc.yaml", ("test/nlpd", "test/ece_per_sample", "test/accuracy_per_sample", "test/ece", "test/accuracy")),
    ("regression_ohsmc.yaml", ("test/nlpd", "test/rmse_per_sample", "test/rmse")),
])
def test_recipe_runs_at_tiny_size(recipe, metrics, tmp_path):
    main(["fit", "-c", str(RECIPES / recipe), "--trainer.default_root_dir", str(tmp_path), *TINY])
    (path,) = tmp_path.rglob("summary.json")
    summary = json.loads(path.read_text())
    assert summary["sampler"] == "OHSMC" and summary["steps"] == 6
    for name in metrics:
        assert 0.0 <= summary["metrics"][name] < 10.0, name
    # the test set was scored at the best validation NLPD (validation after every step)
    assert summary["metrics"]["best/val/nlpd"] <= summary["metrics"]["val/nlpd"] + 1e-12
    assert len(list(tmp_path.rglob("*.ckpt"))) == 1


@pytest.mark.parametrize("table, metrics", [
    ("moons", ("test/nlpd", "test/ece_per_sample", "test/accuracy_per_sample")),
    ("regression", ("test/nlpd", "test/rmse_per_sample")),
])
def test_vb_recipes_run_through_the_table_script(table, metrics, tmp_path):
    """The VB baseline's recipes at a tiny size, through ``run_table.py --method vb``: the test set scored at
    the best validation NLPD from draws of q, the paper's VB row beside ours."""
    tiny = [*TINY[:4], "--model.init_args.num_samples", "40", "--model.init_args.num_train_samples", "8", *TINY[6:]]
    subprocess.run([sys.executable, str(RECIPES / "run_table.py"), table, "--method", "vb", "--seeds", "1",
                    "--root", str(tmp_path), *tiny], cwd=ROOT, check=True, capture_output=True, text=True)
    table_json = json.loads((tmp_path / table / "vb" / "table.json").read_text())
    assert table_json["method"] == "vb"
    assert table_json["rows"]["NLPD"]["paper_mean"] == {"moons": 0.29, "regression": 2.13}[table]
    summary = json.loads((tmp_path / table / "vb" / "seed_0" / "summary.json").read_text())
    assert summary["sampler"] == "MeanFieldVB" and summary["steps"] == 6
    for name in metrics:
        assert 0.0 <= summary["metrics"][name] < 10.0, name
    assert summary["metrics"]["best/val/nlpd"] <= summary["metrics"]["val/nlpd"] + 1e-12
    assert summary["health"]["verdict"] == "ok"


def test_table_script_writes_every_cell_beside_the_paper(tmp_path):
    result = subprocess.run(
        [sys.executable, str(RECIPES / "run_table.py"), "moons", "--seeds", "2", "--root", str(tmp_path), *TINY],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )
    table = json.loads((tmp_path / "moons" / "table.json").read_text())
    assert table["seeds"] == 2
    assert table["rows"]["NLPD"]["paper_mean"] == 0.28
    assert len(table["rows"]["Acc."]["values"]) == 2
    assert table["rows"]["Acc."]["values"][0] != table["rows"]["Acc."]["values"][1]  # seeds differ
    # every run's verdict, as its own summary gives it, counted under the table
    verdicts = [json.loads((tmp_path / "moons" / f"seed_{s}" / "summary.json").read_text())["health"]["verdict"]
                for s in (0, 1)]
    assert table["verdicts"] == {"seed 0": verdicts[0], "seed 1": verdicts[1]}
    assert "health verdicts of the 2 run(s): " in result.stdout
    assert ("NOT CONVERGED: the verdict of" in result.stdout) == (verdicts != ["ok", "ok"])


@pytest.mark.parametrize("method", ["map_hmc", "sgsmc_hmc", "swag"])
def test_two_stage_baselines_run_at_tiny_size(method, tmp_path):
    subprocess.run(
        [sys.executable, str(RECIPES / "run_baselines.py"), "moons", method, "--seeds", "1", "--epochs", "1",
         "--hmc-steps", "4", "--particles", "20", "--swag-epochs", "3", "--root", str(tmp_path)],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )
    written = json.loads((tmp_path / "moons" / f"{method}.json").read_text())
    rows = written["rows"]
    second = "SWAG" if method == "swag" else "HMC"
    assert set(written["verdicts"]) == {"seed 0 stage 1", f"seed 0 {second}"}
    if method == "swag":  # an optimiser: only non-finite energies would fail it
        assert written["verdicts"]["seed 0 SWAG"] == "ok"
        summary = json.loads((tmp_path / "moons" / "swag" / "swag" / "seed_0" / "summary.json").read_text())
        assert summary["sampler"] == "SWAG" and summary["steps"] == 15  # 3 epochs of 5 batches: 3 snapshots
    else:
        assert written["verdicts"]["seed 0 HMC"] != "ok"  # one chain: its convergence cannot be shown
    assert 0.0 < rows["NLPD"]["values"][0] < 10.0
    assert 0.0 <= rows["Acc."]["values"][0] <= 1.0
