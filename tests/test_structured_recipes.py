"""recipes/structured: the mixing summary (pooled and per-chain ESS, lit_bayes.mixing), the Fig. 3
MNIST script end to end on MNIST idx files of random pixels, every YAML of the folder at a tiny
size, and the library pieces the recipes use (CoordinateMixing, the stand-in data sets, fit_cell)."""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

import lit_bayes.samplers
from lit_bayes import Gaussian, GaussianPrior
from lit_bayes.callbacks import CoordinateMixing
from lit_bayes.data import ClassPrototypes, CorrelatedLinearRegression, LinearRegression, RandomFeatureRegression
from lit_bayes.mixing import coordinate_mixing
from lit_bayes.recipe_runs import fit_cell, health_verdict, settings_overrides, verdict_lines
from lit_bayes.samplers.structured_sgmcmc import StructuredSGMCMC
from tests.test_data import write_mnist

STRUCTURED = Path(__file__).resolve().parents[1] / "recipes" / "structured"


def test_per_chain_ess_sees_independent_draws_that_the_pooled_ess_does_not():
    """Four chains of independent N(0, 1) draws, each around its own far-away centre (chains in
    different modes): every chain alone is an i.i.d. sample (ESS ~ its draws), pooled they
    disagree (ESS near the number of chains)."""
    draws = 400
    trace = torch.randn(4, draws, 30, generator=torch.Generator().manual_seed(0))
    trace += 50.0 * torch.arange(4.0)[:, None, None]
    result = coordinate_mixing(trace)
    assert result["coords"] == 30 and result["draws_per_chain"] == draws
    assert 0.7 * draws < result["ess_within_median"] < 1.3 * draws
    assert result["ess_median"] < 10


def test_fig3_script_runs_on_mnist_files(tmp_path):
    write_mnist(tmp_path / "data", "MNIST")
    out = tmp_path / "runs"
    printed = subprocess.run([sys.executable, str(STRUCTURED / "mnist_mlp.py"), "--data", "mnist", "--root",
                              str(tmp_path / "data"), "--stepper", "sgld", "--lr", "1e-5", "--epochs", "4",
                              "--batch-size", "8", "--s-groups", "", "--groups", "all", "--keep-probs", "0.5",
                              "--num-masks", "2", "--out", str(out)],
                             check=True, capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"}).stdout
    results = json.loads((out / "summary.json").read_text())["results"]
    assert sorted(results) == ["S_d-sgld M=42310 rho=0.5", "sgld"]
    sgld, dropout = results["sgld"], results["S_d-sgld M=42310 rho=0.5"]
    assert sgld["steps"] == dropout["steps"] == 12  # 24 images in batches of 8, 4 epochs
    assert dropout["forward_backward_passes"] == 2 * sgld["forward_backward_passes"]  # K = 2 composites a step
    for run in results.values():
        assert run["mixing"]["draws_per_chain"] == 6  # the second half of the run
        assert run["ess_within_per_1000_passes"] > 0
    # each cell's verdict as its run's summary gives it, in the printed row and counted under the table
    for name, run in results.items():
        summary = json.loads((out / name.replace(" ", "_") / "summary.json").read_text())
        assert run["verdict"] == summary["health"]["verdict"]
        assert run["function_space_rhat_max"] == summary["metrics"].get("diag/fs_rhat_max")
        row = next(line for line in printed.splitlines() if line.startswith(name + " "))
        assert row.split("max R-hat")[1].split()[1] == run["verdict"]
    assert "health verdicts of the 2 run(s): " in printed


TINY = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3", "--model.init_args.burn_in", "2",
        "--trainer.check_val_every_n_epoch", "1"]
SMALL_DATA = {  # the recipes' data at a tiny size (MNIST: idx files written by the test)
    "toy_sd_sgld.yaml": ["--data.init_args.batch_size", "20"],
    "mnist_mlp.yaml": ["--data.init_args.batch_size", "8"],
    "resnet20.yaml": ["--data.class_path", "lit_bayes.data.ClassPrototypes", "--data.init_args.input_shape",
                      "[3, 32, 32]", "--data.init_args.num_train", "24", "--data.init_args.num_test", "8",
                      "--data.init_args.batch_size", "8"],
    "uci_partitions.yaml": ["--data.class_path", "lit_bayes.data.RandomFeatureRegression",
                            "--data.init_args.num_features", "8"],
}


@pytest.mark.parametrize("recipe", sorted(p.name for p in STRUCTURED.glob("*.yaml")))
def test_recipe_runs_at_tiny_size(recipe, tmp_path):
    """The smoke test of tests/test_cli.py for the recipes of this folder (same assertions), plus the
    mixing block every one of them writes."""
    extra = list(SMALL_DATA[recipe])
    if recipe == "mnist_mlp.yaml":
        write_mnist(tmp_path / "data", "MNIST")
        extra += ["--data.init_args.root", str(tmp_path / "data")]
    summary = fit_cell(STRUCTURED / recipe, tmp_path / "run", [*TINY, *extra])
    assert summary["sampler"] in lit_bayes.samplers.__all__
    assert summary["steps"] == 6
    assert summary["wall_time_s"] > 0
    assert "test/nlpd" in summary["metrics"]
    assert (tmp_path / "run" / "config.yaml").exists()
    assert list((tmp_path / "run").rglob("*.ckpt"))
    assert summary["metrics"]["mixing/draws_per_chain"] == 4
    assert fit_cell(STRUCTURED / recipe, tmp_path / "run", ["--no-such-option"]) == summary  # finished: read back


def test_toy_script_prints_each_column_verdict_and_says_when_one_is_not_ok(tmp_path, monkeypatch, capsys):
    """Fig. 2's toy at a length far too short to converge: the table carries each run's verdict and a
    loud line names the columns whose verdict is not ok."""
    toy = load_recipe("toy_linear_regression", monkeypatch)
    rows, _ = toy.main(["--methods", "SGLD,S_d-SGLD (ii)", "--steps", "40", "--burn-in", "10", "--chains", "2",
                        "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert {row["verdict"] for row in rows.values()} <= {"ok", "warning", "failed"}
    assert json.loads((tmp_path / "summary.json").read_text())["methods"]["SGLD"]["verdict"] == rows["SGLD"]["verdict"]
    unsettled = [name for name, row in rows.items() if row["verdict"] != "ok"]
    assert unsettled, "40 steps of 2 chains should not pass the health checks"
    assert "NOT CONVERGED: the verdict of " + ", ".join(f"{n} ({rows[n]['verdict']})" for n in unsettled) in out


def test_fit_cell_continues_an_interrupted_run_from_its_last_checkpoint(tmp_path, monkeypatch):
    """A cell stopped after its first epoch (its last.ckpt written, no finished summary) continues from
    that checkpoint on the next call and ends where an uninterrupted run ends; ``rerun`` starts afresh."""
    import lit_bayes.cli

    calls, main = [], lit_bayes.cli.main
    monkeypatch.setattr(lit_bayes.cli, "main", lambda args: (calls.append(args), main(args))[1])
    recipe, data = STRUCTURED / "toy_sd_sgld.yaml", SMALL_DATA["toy_sd_sgld.yaml"]
    whole = fit_cell(recipe, tmp_path / "whole", [*TINY, *data])
    fit_cell(recipe, tmp_path / "cut", [*TINY, *data, "--trainer.max_epochs", "1"])
    (tmp_path / "cut" / "summary.json").unlink()  # as if killed after the epoch-1 checkpoint
    resumed = fit_cell(recipe, tmp_path / "cut", [*TINY, *data])
    assert calls[-1][-2:] == ["--ckpt_path", str(tmp_path / "cut" / "checkpoints" / "last.ckpt")]
    assert "--ckpt_path" not in calls[0] + calls[1]
    assert resumed["steps"] == whole["steps"] == 6
    assert resumed["metrics"]["test/nlpd"] == whole["metrics"]["test/nlpd"]
    assert resumed["metrics"]["mixing/draws_per_chain"] == whole["metrics"]["mixing/draws_per_chain"]
    (tmp_path / "cut" / "summary.json").unlink()
    short = fit_cell(recipe, tmp_path / "cut", [*TINY, *data, "--trainer.max_epochs", "1"], rerun=True)
    assert short["steps"] == 3  # not the 6 of the checkpoint


def test_coordinate_mixing_callback_counts_composite_passes_and_resumes():
    sampler = StructuredSGMCMC(torch.nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), num_chains=2, burn_in=3,
                               partition="fully_factorised", mode="dropout", keep_prob=0.5, num_masks=3, seed=0)
    callback = CoordinateMixing(num_coords=3, max_draws=5)
    data = LinearRegression(num_train=20, num_val=5, num_test=5)
    trainer = L.Trainer(max_steps=12, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[callback])
    trainer.fit(sampler, datamodule=data)
    metrics = callback.summary_metrics()
    assert metrics["mixing/forward_backward_passes"] == 12 * 3
    assert metrics["mixing/draws_per_chain"] == 5 and metrics["mixing/coords"] == 3  # the newest 5 of 9 kept
    assert torch.equal(callback.trace()[:, -1], sampler.chains.flat()[:, callback.picks])
    again = CoordinateMixing(num_coords=3, max_draws=5)
    again.load_state_dict(callback.state_dict())
    assert torch.equal(again.trace(), callback.trace()) and torch.equal(again.picks, callback.picks)


def test_coordinate_mixing_rejects_a_short_or_frozen_trace():
    with pytest.raises(ValueError, match="draws >= 4"):
        coordinate_mixing(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="no coordinate"):
        coordinate_mixing(torch.ones(2, 10, 5))


def test_stand_in_data_sets():
    toy = CorrelatedLinearRegression(covariate_corr=0.8, num_train=4000, seed=1)
    toy.setup()
    x, _ = toy.train_data.tensors
    assert abs(float(torch.corrcoef(x.T)[0, 1]) - 0.8) < 0.05 and abs(float(torch.corrcoef(x.T)[1, 2]) - 0.64) < 0.05
    with pytest.raises(ValueError, match="covariate_corr"):
        CorrelatedLinearRegression(covariate_corr=1.0)
    images = ClassPrototypes((1, 4, 4), num_classes=3, num_train=30, num_test=9, seed=0)
    images.setup()
    assert images.train_data.tensors[0].shape == (30, 1, 4, 4) and int(images.test_data.tensors[1].max()) < 3
    table = RandomFeatureRegression(num_features=5, num_train=20, num_val=4, num_test=6, seed=0)
    table.setup()
    assert table.val_data.tensors[0].shape == (4, 5) and table.test_data.tensors[1].shape == (6,)
    again = RandomFeatureRegression(num_features=5, num_train=20, num_val=4, num_test=6, seed=0)
    again.setup()
    assert torch.equal(again.train_data.tensors[1], table.train_data.tensors[1])


def test_settings_overrides():
    assert settings_overrides({"model.init_args.group_ids": [0, 1], "data.init_args.download": False,
                               "--trainer.max_epochs": 3}) == [
        "--model.init_args.group_ids", "[0, 1]", "--data.init_args.download", "false", "--trainer.max_epochs", "3"]


def test_verdict_lines_count_every_verdict_and_name_the_runs_not_ok():
    assert verdict_lines({"a": "ok", "b": "ok"}, "rerun") == ["health verdicts of the 2 run(s): 2 ok"]
    lines = verdict_lines({"a": "ok", "b": "failed", "c": "warning", "d": health_verdict({})}, "run longer")
    assert lines == ["health verdicts of the 4 run(s): 1 ok, 1 warning, 1 failed, 1 missing",
                     "NOT CONVERGED: the verdict of b (failed), c (warning), d (missing) is not ok (the reasons and "
                     "fixes: each run's summary.json, 'health'): run longer"]
    many = verdict_lines({f"seed {s}": "failed" for s in range(20)}, "x")[1]
    assert "seed 11 (failed) and 8 more is not ok" in many and "seed 12" not in many


def load_recipe(name, monkeypatch):
    """A recipe script of recipes/structured as a module (the folder is not a package; its scripts import
    each other as when run, with the folder on the path)."""
    monkeypatch.syspath_prepend(str(STRUCTURED))
    spec = importlib.util.spec_from_file_location(name, STRUCTURED / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_partition_script_keeps_and_counts_every_run_verdict(tmp_path, monkeypatch, capsys):
    """Table 1's script on its generated data at a tiny size: each run's verdict in the table, counted under it."""
    script = load_recipe("uci_partitions", monkeypatch)
    table = script.main(["--synthetic", "--partitions", "random", "--lrs", "1e-3", "--seeds", "2", "--epochs", "2",
                         "--out", str(tmp_path)])
    runs = table["synthetic"]["random"]["runs"]["0.001"]
    for seed, run in enumerate(runs):
        directory = tmp_path / "synthetic" / "random" / "lr=0.001" / f"seed_{seed}"
        summary = json.loads((directory / "summary.json").read_text())
        assert run["verdict"] == summary["health"]["verdict"]
    assert "health verdicts of the 2 run(s): " in capsys.readouterr().out


def test_mixing_study_counts_gradient_evaluations_per_cell(tmp_path, monkeypatch):
    """The S_d mixing study end to end at a tiny synthetic size (2 chains, 4 training images a step,
    2 epochs): gradient evaluations of the kept window, ESS per 1,000 of them, the JSON, and finished
    cells read back."""
    study = load_recipe("mixing_study", monkeypatch)
    args = ["--data", "synthetic", "--epochs", "2", "--max-epochs", "2", "--chains", "2", "--num-val", "8",
            "--groups", "all", "--keep-probs", "0.5", "--num-masks", "3", "--buffer-size", "4", "--out", str(tmp_path),
            "--data.init_args.num_train", "16", "--data.init_args.num_test", "8", "--data.init_args.batch_size", "4",
            "--diagnostics.heldout_size", "8", "--samples.max_draws", "4"]
    results = study.main(args)
    assert sorted(results) == ["SGLD", "S_d-pSGLD M=42310 rho=0.5", "pSGLD"]
    base, dropout, sgld = results["pSGLD"], results["S_d-pSGLD M=42310 rho=0.5"], results["SGLD"]
    config = yaml.safe_load((tmp_path / "SGLD" / "e2" / "config.yaml").read_text())["model"]["init_args"]
    assert (config["stepper"], config["step_size"], config["stepper_options"]) == ("sgld", study.SGLD_LR, {})
    assert sgld["grad_evals_kept"] == 4
    for run in results.values():
        assert run["steps"] == 8 and run["kept_steps"] == 4  # 16 images in batches of 4, 2 epochs, half kept
        assert run["ess_heldout_per_1000"] == pytest.approx(1000 * run["ess_heldout"] / run["grad_evals_kept"])
        assert [a["epochs"] for a in run["attempts"]] == [2]
    assert base["grad_evals_kept"] == 4 and dropout["grad_evals_kept"] == 3 * 4  # K = 3 composites a step
    assert dropout["ess_heldout_per_1000_vs_pSGLD"] == pytest.approx(
        dropout["ess_heldout_per_1000"] / base["ess_heldout_per_1000"])
    assert dropout["ess_point_min_per_1000_vs_SGLD"] == pytest.approx(
        dropout["ess_point_min_per_1000"] / sgld["ess_point_min_per_1000"])
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["results"]["pSGLD"]["ess_heldout"] == base["ess_heldout"]
    written = (tmp_path / "pSGLD" / "e2" / "summary.json").stat().st_mtime_ns
    assert study.main(args) == results  # finished cells are read back, not run again
    assert (tmp_path / "pSGLD" / "e2" / "summary.json").stat().st_mtime_ns == written


def test_mixing_study_runs_the_cells_named_and_rejects_unknown_ones(tmp_path, monkeypatch):
    """--cells runs those cells alone (ratios to a reference not run are missing, not made up);
    a name not in the grid is an error naming the grid's cells; --sgld-lr 0 leaves SGLD out."""
    study = load_recipe("mixing_study", monkeypatch)
    ran = []

    def fake_fit_cell(config, directory, overrides, rerun):
        ran.append(Path(directory).parent.name)
        return {"steps": 10, "wall_time_s": 1.0, "health": {"verdict": "ok", "reasons": []},
                "metrics": {"diag/ess_bulk/heldout_lpd": 5.0, "diag/ess_bulk/point_lpd_0": 2.0,
                            "test/accuracy": 0.9, "test/nlpd": 0.3}}

    monkeypatch.setattr(study, "fit_cell", fake_fit_cell)
    base = ["--data", "synthetic", "--epochs", "1", "--max-epochs", "1", "--groups", "all", "--keep-probs", "0.5",
            "--out", str(tmp_path)]
    results = study.main([*base, "--cells", "SGLD"])
    assert ran == ["SGLD"] and list(results) == ["SGLD"]
    assert results["SGLD"]["ess_heldout_per_1000_vs_pSGLD"] is None
    assert results["SGLD"]["ess_heldout_per_1000_vs_SGLD"] == pytest.approx(1.0)
    # a cell not named is read back from its finished runs (the longest; its own burn-in and K), never run
    tested = {"test/accuracy": 0.9, "test/nlpd": 0.3}
    sd = "S_d-pSGLD M=42310 rho=0.5"
    for cell, options in (("pSGLD", {"burn_in": 0.8}), (sd, {"burn_in": 0.5, "num_masks": 3})):
        for epochs, metrics in ((2, tested), (4, {}), (8, tested)):
            run = tmp_path / cell.replace(" ", "_") / f"e{epochs}"
            run.mkdir(parents=True)
            (run / "config.yaml").write_text(yaml.safe_dump({"model": {"init_args": options}}))
            (run / "summary.json").write_text(json.dumps({  # e4 has no test metrics: unfinished, skipped
                "steps": 10 * epochs, "wall_time_s": 1.0, "health": {"verdict": "ok", "reasons": []},
                "metrics": {"diag/ess_bulk/heldout_lpd": 4.0, **metrics}}))
    ran.clear()
    results = study.main([*base, "--cells", "SGLD", "--num-masks", "5"])
    assert ran == ["SGLD"] and list(results) == ["pSGLD", "SGLD", sd]
    psgld = results["pSGLD"]
    assert psgld["read_back"] and not results["SGLD"]["read_back"]
    assert [a["epochs"] for a in psgld["attempts"]] == [2, 8] and psgld["kept_steps"] == 16  # 80 steps, 0.8 burnt
    assert psgld["grad_evals_kept"] == 16 and results[sd]["grad_evals_kept"] == 40 * 3  # its own K, not --num-masks
    assert results["SGLD"]["ess_heldout_per_1000_vs_pSGLD"] == pytest.approx((5.0 / 5) / (4.0 / 16))
    with pytest.raises(SystemExit):
        study.main([*base, "--cells", "SGLD,nope"])
    ran.clear()
    assert list(study.main([*base, "--sgld-lr", "0"])) == ["pSGLD", "S_d-pSGLD M=42310 rho=0.5"]
    with pytest.raises(SystemExit):
        study.main([*base, "--sgld-lr", "-1"])


def test_mixing_study_lengthens_a_cell_until_its_verdict_is_ok(tmp_path, monkeypatch):
    """A cell is run again twice as long while its verdict is not ok, within --max-epochs; a run too
    short to diagnose (no function-space ESS) is reported without one."""
    study = load_recipe("mixing_study", monkeypatch)
    runs = []

    def fake_fit_cell(config, directory, overrides, rerun):
        epochs = int(overrides[overrides.index("--trainer.max_epochs") + 1])
        runs.append(Path(directory).name)
        diag = {} if epochs == 1 else {"diag/ess_bulk/heldout_lpd": 10.0 * epochs, "diag/ess_bulk/point_lpd_0": 5.0,
                                       "diag/ess_bulk/point_lpd_1": 3.0, "diag/fs_rhat_max": 1.0 + 0.1 / epochs}
        return {"steps": 10 * epochs, "wall_time_s": 1.0, "metrics": {**diag, "test/accuracy": 0.9, "test/nlpd": 0.3},
                "health": {"verdict": "ok" if epochs >= 4 else "warning", "reasons": []}}

    monkeypatch.setattr(study, "fit_cell", fake_fit_cell)
    args = argparse.Namespace(epochs=1, max_epochs=16, burn_in=0.5, rerun=False)
    attempts = study.run_cell(tmp_path, [], 3, args)
    assert runs == ["e1", "e2", "e4"] and [a["verdict"] for a in attempts] == ["warning", "warning", "ok"]
    assert attempts[0]["ess_heldout"] is None and attempts[0]["ess_heldout_per_1000"] is None
    last = attempts[-1]
    assert last["kept_steps"] == 20 and last["grad_evals_kept"] == 60 and last["ess_point_min"] == 3.0
    assert last["ess_heldout_per_1000"] == pytest.approx(1000 * 40.0 / 60)
    runs.clear()
    args.max_epochs = 2
    assert [a["epochs"] for a in study.run_cell(tmp_path, [], 3, args)] == [1, 2] and runs == ["e1", "e2"]
