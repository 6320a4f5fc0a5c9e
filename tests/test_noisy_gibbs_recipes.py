"""The noisy-gibbs Exp. A recipe (noisy-gibbs spec §6.1) at a tiny size: the CLI run reports the
thermalization check in summary.json, and the comparison script prints ours beside the paper."""
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lit_bayes.cli import main

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes" / "noisy_gibbs"


def test_exp_a_recipe_runs_at_tiny_size(tmp_path):
    """The recipe with n = 40, 30 sweeps and a record every 2 sweeps (so the merge rule has its
    ``window`` of records): summary.json holds the thermalization metrics and the test metrics."""
    config = yaml.safe_load((RECIPES / "exp_a.yaml").read_text())
    assert config["data"]["init_args"]["num_train"] == 2084 and config["model"]["init_args"]["model"]["init_args"][
        "widths"] == [50, 10, 1]
    config["trainer"]["callbacks"][0]["init_args"]["every_n_steps"] = 2
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    main(["fit", "-c", str(path), "--trainer.default_root_dir", str(tmp_path), "--wandb", "false",
          "--trainer.max_epochs", "30", "--model.init_args.burn_in", "10", "--data.init_args.num_train", "40",
          "--data.init_args.num_test", "50", "--checkpoint.every_n_epochs", "30", "--trainer.enable_progress_bar",
          "false"])
    (summary_path,) = tmp_path.rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["sampler"] == "NoisyGibbs" and summary["dataset"] == "TeacherStudent" and summary["steps"] == 30
    metrics = summary["metrics"]
    assert metrics["thermalization/records"] == 16.0
    assert 0 <= metrics["thermalization/informed_test_mse"] < metrics["thermalization/uninformed_test_mse"]
    for name in ("thermalization/merged", "thermalization/merge_step", "thermalization/score_step", "test/nlpd"):
        assert name in metrics, name
    assert list(tmp_path.rglob("last.ckpt"))


def test_exp_a_script_prints_ours_beside_the_paper(tmp_path):
    result = subprocess.run(
        [sys.executable, str(RECIPES / "run_exp_a.py"), "--inits", "zeros", "--steps", "20", "--every", "2",
         "--rhat-block", "4", "--num-train", "30", "--num-test", "20", "--root", str(tmp_path)],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )
    assert "paper" in result.stdout and "informed_test_mse" in result.stdout
    fig4 = json.loads((tmp_path / "exp_a.json").read_text())["zeros"]["rhat_percentiles"]  # 11 records: 2 blocks
    assert [(step, chains) for step, chains, _ in fig4] == [(6, "all"), (14, "all")] and "(Fig. 4; all chains)" \
        in result.stdout
    assert all(len(v) == 5 and v[1] <= v[2] <= v[3] <= v[4] for _, _, v in fig4)  # mean, then p25 <= ... <= p95
    table = json.loads((tmp_path / "exp_a.json").read_text())
    assert table["zeros"]["steps"] == 20 and table["zeros"]["paper"]["informed_test_mse"] == 1.5e-4
    assert table["zeros"]["ours"]["records"] == 11.0 and table["zeros"]["trace"][0][0] == 0
    verdict = table["zeros"]["verdict"]
    (summary,) = (tmp_path / "zeros").glob("summary.json")
    assert verdict in ("ok", "warning", "failed") and verdict == json.loads(summary.read_text())["health"]["verdict"]
    assert f"zeros: health verdict {verdict}" in result.stdout


def run_exp_a(*args: str) -> dict:
    subprocess.run([sys.executable, str(RECIPES / "run_exp_a.py"), "--inits", "zeros", "--every", "2",
                    "--num-train", "30", "--num-test", "20", *args], cwd=ROOT, check=True, capture_output=True)
    root = Path(args[args.index("--root") + 1])
    return json.loads((root / "exp_a.json").read_text())["zeros"]


def test_exp_a_script_reports_from_a_checkpoint_and_resumes_exactly(tmp_path):
    """``--report`` reads the thermalization verdict of a run from its newest checkpoint, and a run of
    20 sweeps continued with ``--resume`` to 40 gives the uninterrupted 40-sweep run's records."""
    split, whole = str(tmp_path / "split"), str(tmp_path / "whole")
    first = run_exp_a("--steps", "20", "--root", split)
    reported = run_exp_a("--report", "--root", split)
    assert reported["steps"] == 20 and reported["checkpoint"].endswith("last.ckpt")
    assert reported["ours"] == first["ours"] and reported["verdict"] is None and first["verdict"] is not None
    (checkpoint,) = (tmp_path / "split" / "zeros").glob("version_*/checkpoints/last.ckpt")
    chains = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    norms = [[float(w1.norm()), float(w2.norm())] for w1, w2 in zip(chains["chains.net__layers__0__weight"],
                                                                    chains["chains.net__layers__1__weight"])]
    assert len(norms) == 4 and reported["weight_norms"] == first["weight_norms"]
    assert sum(reported["weight_norms"], []) == pytest.approx(sum(norms, []), rel=1e-6)
    resumed = run_exp_a("--steps", "40", "--resume", "--root", split)
    uninterrupted = run_exp_a("--steps", "40", "--root", whole)
    assert resumed["steps"] == 40 and resumed["ours"]["records"] == 21.0
    assert resumed["ours"] == uninterrupted["ours"]
    assert resumed["trace"] == uninterrupted["trace"] and resumed["trace"][-1][0] == 40
    (run,) = (tmp_path / "split" / "zeros").glob("version_*")  # continued in its own run directory
    with (run / "metrics.csv").open() as f:  # continued, not restarted: no record twice
        recorded = [int(row["step"]) for row in csv.DictReader(f) if row.get("thermalization/test_mse/chain_0")]
    assert len(recorded) == len(set(recorded)) and min(recorded) < 20 < max(recorded)
    refused = subprocess.run([sys.executable, str(RECIPES / "run_exp_a.py"), "--inits", "zeros", "--steps", "60",
                              "--resume", "--seed", "1", "--root", split], cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode != 0 and "was run with other settings" in refused.stderr


def test_exp_a_script_reads_the_informed_chain_of_an_earlier_run(tmp_path):
    """``--informed-from``: a run of uninformed chains only, judged against the informed records of an
    earlier run on the same data (its informed test MSE and trace column, empty past the earlier run's
    20 sweeps), also in ``--report``."""
    earlier = run_exp_a("--steps", "20", "--root", str(tmp_path / "earlier"))
    (checkpoint,) = (tmp_path / "earlier" / "zeros").glob("version_*/checkpoints/last.ckpt")
    read = run_exp_a("--steps", "40", "--chains", "1", "--informed-from", str(checkpoint),
                     "--root", str(tmp_path / "read"))
    assert read["ours"]["informed_test_mse"] == earlier["ours"]["informed_test_mse"]
    recorded = {step: informed for step, informed, _ in earlier["trace"]}
    shared = [(step, informed) for step, informed, _ in read["trace"] if step in recorded]
    assert len(shared) >= 3 and all(informed == recorded[step] for step, informed in shared)
    assert [informed for step, informed, _ in read["trace"] if step > 20] == [None, None]
    assert read["trace"][0][2] > 0.01  # chain 0 is uninformed (the zero start)
    assert read["ours"]["rhat"] is None  # no R-hat with the informed chain (the table: n/a, not never)
    assert read["informed_read"] and not earlier["informed_read"]
    assert run_exp_a("--report", "--root", str(tmp_path / "read"))["ours"] == read["ours"]


def test_released_teacher_matches_the_released_informed_log():
    """The paper's Exp. A teacher redrawn from its script's seeds: the first row of the released
    informed log (|W1|, |W2|, mean squared noiseless training output), and labels that follow eq. 7
    from the exposed latents with noise of variance Delta."""
    sys.path.insert(0, str(RECIPES))
    try:
        from released_teacher import DELTA, ReleasedExpATeacher, released_test_mse
    finally:
        sys.path.remove(str(RECIPES))
    data = ReleasedExpATeacher()
    splits = data.load()
    first, second = data.teacher.layers
    assert abs(first.weight.norm().item() - 3.1136) < 1e-4 and abs(second.weight.norm().item() - 0.98691) < 1e-5
    x, y = splits["train"]
    assert x.shape == (2084, 50) and splits["test"][0].shape == (2000, 50) and splits["val"][0].shape == (0, 50)
    assert abs(data.teacher(x).square().mean().item() - 0.36279) < 1e-5
    latents = data.train_latents
    z_noise = latents["z2"] - (x @ first.weight.T + first.bias)
    x_noise = latents["x2"] - latents["z2"].relu()
    y_noise = y - (latents["x2"] @ second.weight.T + second.bias)[:, 0]
    for noise in (z_noise, x_noise, y_noise):
        assert abs(noise.var().item() / DELTA - 1) < 0.1
    assert torch.allclose(splits["test"][1], data.teacher(splits["test"][0])[:, 0])
    assert released_test_mse(95_000, "zeros") == (99939, 1.7210e-04, 1.7322e-04)
    assert released_test_mse(0, "prior") == (0, 3.1499e-08, (6.9515e-01 + 1.2755e+00) / 2)


def test_exp_a_script_runs_on_the_released_data(tmp_path):
    result = subprocess.run(
        [sys.executable, str(RECIPES / "run_exp_a.py"), "--inits", "zeros", "--steps", "200", "--every", "100",
         "--data", "released", "--root", str(tmp_path)],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )
    assert "released logs" in result.stdout and "6.306e-02" in result.stdout  # the zero chain at sweep 100
    config = yaml.safe_load((tmp_path / "zeros" / "exp_a.yaml").read_text())
    assert config["data"]["class_path"] == "released_teacher.ReleasedExpATeacher"
    zeros = json.loads((tmp_path / "exp_a.json").read_text())["zeros"]
    assert zeros["steps"] == 200
    # at sweep 0 the zero chains' test MSE is the teacher's mean squared test output: the released
    # zero chain's first logged value, 3.4063e-01, when the test inputs are the released ones
    assert zeros["trace"][0][0] == 0 and abs(zeros["trace"][0][2] - 3.4063e-01) < 1e-4
