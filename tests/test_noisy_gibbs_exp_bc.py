"""The noisy-gibbs Exp. B script (spec §6.2) and the Exp. C MNIST recipes and script (spec §6.3) at tiny sizes."""
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from lit_bayes.cli import main
from lit_bayes.lightning_cli import make_cli
from tests.script_modules import load_script
from tests.test_data import write_mnist

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes" / "noisy_gibbs"


def load_exp_b():
    return load_script("exp_b", RECIPES / "exp_b.py")


def test_exp_b_merge_rule_and_paper_hyperparameters():
    exp_b = load_exp_b()
    times = [0.1 * t for t in range(40)]
    wiggle = 0.05 * torch.sin(torch.arange(40.0))
    informed = 1.0 + wiggle
    merging = 1.0 + 4.0 * torch.exp(-torch.arange(40.0) / 3) + wiggle
    stuck = 3.0 + wiggle
    result = exp_b.thermalization(times, torch.stack([informed, merging]).double(), 3)
    assert result["thermalized"] and result["informed_stationary"] and 0.3 < result["thermalization_time_s"] < 1.5
    assert abs(result["equilibrium_test_mse"] - 1.0) < 0.05
    assert not exp_b.thermalization(times, torch.stack([informed, stuck]).double(), 3)["thermalized"]
    rising = exp_b.thermalization(times, torch.stack([torch.linspace(0, 1, 40), merging]).double(), 3)
    assert not rising["informed_stationary"]
    # Tables 1, 2 and 4 at Delta = 1e-3 (index 9): 5e-5 / 1000 leapfrogs, MALA eta = 1e-8
    assert exp_b.hyperparameters("hmc_intermediate", 1e-3, 0) == {"step_size": 5e-5, "num_leapfrog": 1000,
                                                                   "paper_num_leapfrog": 1000}
    assert exp_b.hyperparameters("hmc_classical", 0.464, 100)["num_leapfrog"] == 20
    assert exp_b.hyperparameters("hmc_classical", 0.0215, 50)["num_leapfrog"] == 50
    assert exp_b.hyperparameters("mala_classical", 1e-3, 0)["eta"] == 1e-8
    assert len(exp_b.DELTAS) == 17 and exp_b.key(exp_b.DELTAS[7]) == "0.00464" and exp_b.key(1e-5) in exp_b.PAPER


def test_exp_b_script_runs_every_sampler_at_tiny_size(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [
        "exp_b.py", "--teachers", "1", "--deltas", "0.1", "--budget-s", "0.3", "--records", "8", "--window", "2",
        "--num-train", "30", "--num-test", "20", "--max-leapfrog", "5", "--root", str(tmp_path)])
    load_exp_b().main()
    printed = capsys.readouterr().out
    assert "72/72 (0.0411)" in printed  # the paper's intermediate-HMC cell at Delta = 0.1
    assert "health verdicts of the 4 run(s): " in printed
    table = json.loads((tmp_path / "exp_b.json").read_text())
    assert sorted(table["summary"]["0.1"]) == ["gibbs", "hmc_classical", "hmc_intermediate", "mala_classical"]
    runs = {r["algorithm"]: r for r in table["runs"]}
    for algorithm, run in runs.items():
        assert run["steps"] >= 1 and len(run["trace_s"]) >= 2, algorithm
        assert run["trace_test_mse"][0][0] < 1e-10, algorithm  # chain 0 starts at the teacher
        assert run["trace_test_mse"][1][0] > 1e-3, algorithm  # chain 1 does not
    assert runs["hmc_intermediate"]["hyperparameters"] == {"step_size": 5e-4, "num_leapfrog": 5,
                                                           "paper_num_leapfrog": 1000}
    assert runs["gibbs"]["acceptance"] is None and len(runs["mala_classical"]["acceptance"]) == 2
    for algorithm, run in runs.items():
        summary = json.loads((Path(run["directory"]) / "summary.json").read_text())
        assert run["verdict"] == summary["health"]["verdict"], algorithm


def test_exp_c_mlp_recipe_runs_on_tiny_mnist(tmp_path):
    """exp_c_mlp.yaml (spec §6.3: 784-12-10 ReLU, Delta = 2, probit output, lambda = fan-in, zero init)
    for 3 sweeps on 24 tiny MNIST images: the CLI fits, tests and writes summary.json."""
    config = yaml.safe_load((RECIPES / "exp_c_mlp.yaml").read_text())
    net = config["model"]["init_args"]["model"]["init_args"]
    assert net["widths"] == [784, 12, 10] and net["output"] == "probit" and net["delta_z"] == [2.0, 2.0]
    assert net["prior_precision"] == [784.0, 12.0] and config["model"]["init_args"]["init"] == "zeros"
    write_mnist(tmp_path / "data", "MNIST")
    main(["fit", "-c", str(RECIPES / "exp_c_mlp.yaml"), "--data.init_args.root", str(tmp_path / "data"),
          "--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "3", "--model.init_args.burn_in", "1",
          "--model.init_args.thinning", "1", "--checkpoint.every_n_epochs", "3", "--wandb", "false",
          "--trainer.enable_progress_bar", "false"])
    (summary_path,) = tmp_path.rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["sampler"] == "NoisyGibbs" and summary["dataset"] == "TorchvisionImages" and summary["steps"] == 3
    metrics = summary["metrics"]
    assert 0.0 <= metrics["test/accuracy"] <= 1.0 and "test/accuracy_per_sample" in metrics


def test_exp_c_cnn_recipe_runs_on_tiny_mnist(tmp_path):
    """exp_c_cnn.yaml (spec §6.3, Fig. 5: conv 2x4x4 stride 2 -> 2x2 average pool -> ReLU -> dense 72 -> 10,
    Delta = 100 after every layer, probit output, lambda = fan-in 16 / 72, zero init) for 3 sweeps on 24
    tiny MNIST images."""
    config = yaml.safe_load((RECIPES / "exp_c_cnn.yaml").read_text())
    net = config["model"]["init_args"]["model"]["init_args"]
    assert net["layers"] == ["conv:2:4:2", "pool:2", "relu", "dense:10"] and net["delta"] == 100.0
    assert net["prior_precision"] == [16.0, 72.0] and net["output"] == "probit"
    write_mnist(tmp_path / "data", "MNIST")
    main(["fit", "-c", str(RECIPES / "exp_c_cnn.yaml"), "--data.init_args.root", str(tmp_path / "data"),
          "--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "3", "--model.init_args.burn_in", "1",
          "--model.init_args.thinning", "1", "--checkpoint.every_n_epochs", "3", "--wandb", "false",
          "--trainer.enable_progress_bar", "false"])
    (summary_path,) = tmp_path.rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["sampler"] == "NoisyGibbs" and summary["steps"] == 3
    assert 0.0 <= summary["metrics"]["test/accuracy"] <= 1.0 and "test/accuracy_per_sample" in summary["metrics"]


def test_exp_c_script_scores_every_kept_draw_and_resumes_the_chain(tmp_path, monkeypatch, capsys):
    """exp_c.py on 24 tiny MNIST images: one accuracy per kept draw (every 2nd sweep from sweep 1), whose
    mean is the run's own per-sample accuracy over the same draws; --resume extends the same chain."""
    write_mnist(tmp_path / "data", "MNIST")
    exp_c = load_script("exp_c", RECIPES / "exp_c.py")
    command = ["exp_c.py", "--model", "mlp", "--thinning", "2", "--test-images", "12", "--root",
               str(tmp_path / "data"), "--out", str(tmp_path / "runs")]
    monkeypatch.setattr(sys, "argv", [*command, "--sweeps", "8"])
    exp_c.main()
    assert "Gibbs 0.91, MALA 0.914, HMC 0.912" in capsys.readouterr().out
    first = json.loads((tmp_path / "runs" / "exp_c_mlp.json").read_text())
    assert first["sweeps"] == 8 and [row["sweep"] for row in first["trace"]] == [1, 3, 5, 7]
    accuracy = [row["accuracy"] for row in first["trace"]]
    (summary_path,) = (tmp_path / "runs" / "mlp").rglob("summary.json")
    per_sample = json.loads(summary_path.read_text())["metrics"]["test/accuracy_per_sample"]
    assert abs(sum(accuracy) / 4 - per_sample) < 1e-6

    monkeypatch.setattr(sys, "argv", [*command, "--sweeps", "12", "--resume"])
    exp_c.main()
    resumed = json.loads((tmp_path / "runs" / "exp_c_mlp.json").read_text())
    assert resumed["sweeps"] == 12 and [row["sweep"] for row in resumed["trace"]] == [1, 3, 5, 7, 9, 11]
    assert [row["accuracy"] for row in resumed["trace"][:4]] == accuracy
    exp_c.main()  # the finished chain reported again: no sweep runs, the time axis is the run's average
    again = json.loads((tmp_path / "runs" / "exp_c_mlp.json").read_text())
    assert again["sweeps"] == 12 and again["trace"] == resumed["trace"] and again["seconds_per_sweep"] > 0

    monkeypatch.setattr(sys, "argv", [*command, "--sweeps", "8", "--num-train", "12"])
    exp_c.main()
    subset = json.loads((tmp_path / "runs" / "exp_c_mlp_n12.json").read_text())  # its own run, beside mlp
    assert subset["num_train"] == 12 and first["num_train"] == 24 and subset["sweeps"] == 8
    assert list((tmp_path / "runs" / "mlp_n12").rglob("last.ckpt"))


# the classical posteriors of Exp. C (spec §3, §5, §6.3): Delta, lambda per parameter layer, step, leapfrog
# steps, init std
BASELINES = {
    "mlp_hmc": (2.0, {"layers.0": 784.0, "layers.1": 12.0}, 1e-3, 200, 0.1),
    "mlp_mala": (2.0, {"layers.0": 784.0, "layers.1": 12.0}, math.sqrt(2 * 2e-6), 1, 1e-4),
    "cnn_hmc": (10.0, {"layers.0": 16.0, "layers.3": 72.0}, 1e-3, 50, 0.1),
    "cnn_mala": (10.0, {"layers.0": 16.0, "layers.3": 72.0}, math.sqrt(2 * 5e-6), 1, 1e-4),
}


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_exp_c_baselines_sample_the_papers_classical_posterior(name, tmp_path):
    """exp_c_<model>_{hmc,mala}.yaml write P(W) exp(-CE_sum / (2 Delta)) (eq. 2, the summed cross-entropy of
    [code]) as a tempered posterior: between two parameter sets, the sampler's energy differs by exactly the
    paper's -log posterior difference; the fixed steps and the starts are the paper's."""
    delta, precisions, step, leapfrog, init_std = BASELINES[name]
    write_mnist(tmp_path / "data", "MNIST")
    cli = make_cli(["-c", str(RECIPES / f"exp_c_{name}.yaml"), "--data.init_args.root", str(tmp_path / "data"),
                    "--trainer.default_root_dir", str(tmp_path), "--wandb", "false",
                    "--model.init_args.num_data", "24"], run=False)  # the fixture's training images (full batch)
    sampler, data = cli.model, cli.datamodule
    options = sampler.stepper_options
    assert math.isclose(options["lr"], step, rel_tol=1e-6) and options["num_leapfrog"] == leapfrog
    assert options["adapt_steps"] == 0 and sampler.init == "normal" and sampler.init_std == init_std
    data.setup("fit")
    x, y = data.train_data.tensors
    assert len(y) == 24
    generator = torch.Generator().manual_seed(0)
    params = {n: 0.1 * torch.randn(2, *p.shape, generator=generator) for n, p in sampler.template_parameters().items()}
    energy = sampler.energy(params, x, y).double()
    cross_entropy = torch.stack([F.cross_entropy(out, y, reduction="sum") for out in sampler.outputs(params, x)])
    penalty = sum(precisions[n.split(".", 1)[1].rsplit(".", 1)[0]] / 2 * p.pow(2).flatten(1).sum(1)
                  for n, p in params.items())
    paper = (cross_entropy / (2 * delta) + penalty).double()
    assert math.isclose(float(energy[0] - energy[1]), float(paper[0] - paper[1]), rel_tol=1e-4)


def test_exp_c_script_runs_the_mala_baseline(tmp_path, monkeypatch, capsys):
    """exp_c.py --sampler mala on 24 tiny MNIST images: exp_c_mlp_mala.yaml from step 1 under its own run name;
    an argument the script does not know goes to lit-bayes (two chains here), and the health verdict of the
    second half of the draws is printed and stored."""
    write_mnist(tmp_path / "data", "MNIST")
    exp_c = load_script("exp_c", RECIPES / "exp_c.py")
    monkeypatch.setattr(sys, "argv", ["exp_c.py", "--sampler", "mala", "--sweeps", "8", "--thinning", "2",
                                      "--root", str(tmp_path / "data"), "--out", str(tmp_path / "runs"),
                                      "--model.init_args.num_chains", "2"])
    exp_c.main()
    out = capsys.readouterr().out
    assert "Exp. C (MLP, MALA)" in out
    result = json.loads((tmp_path / "runs" / "exp_c_mlp_mala.json").read_text())
    assert result["sampler"] == "mala" and result["sweeps"] == 8 and len(result["trace"]) == 4
    (summary_path,) = (tmp_path / "runs" / "mlp_mala").rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["health"]["chains"] == 2 and result["verdict_all_draws"] == summary["health"]["verdict"]
    assert f"health verdict of the last 0.5 of the draws (2 chain(s), 2 draws each): {result['verdict']}" in out
    assert "too_few_draws" in " ".join(result["verdict_reasons"])  # 2 draws a chain in the second half
    (summary_path,) = (tmp_path / "runs" / "mlp_mala").rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["sampler"] == "MALA" and 0.0 < summary["metrics"]["accept/overall"] <= 1.0
