"""The lit-bayes CLI: every recipe at a tiny size, summary.json, plots, W&B offline runs."""
import json
import time
from pathlib import Path

import pytest

import lit_bayes.samplers
from lit_bayes.cli import main

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
TINY = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3", "--model.init_args.burn_in", "2",
        "--trainer.enable_progress_bar", "false"]


def run_dir(root: Path) -> Path:
    (summary,) = root.rglob("summary.json")
    return summary.parent


FNBG_XOR = ["fnbg/xor_nbg.yaml", "fnbg/xor_nbg_deep.yaml"]  # standalone configs outside the top level


@pytest.mark.parametrize("recipe", sorted([p.name for p in RECIPES.glob("*.yaml")] + FNBG_XOR))
def test_recipe_runs_at_tiny_size(recipe, tmp_path):
    main(["fit", "-c", str(RECIPES / recipe), "--trainer.default_root_dir", str(tmp_path), "--wandb", "false", *TINY])
    directory = run_dir(tmp_path)
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["sampler"] in lit_bayes.samplers.__all__
    assert summary["steps"] == 6
    assert summary["wall_time_s"] > 0
    assert "test/nlpd" in summary["metrics"]
    assert (directory / "config.yaml").exists()
    assert list(directory.rglob("*.ckpt"))


def test_classification_run_writes_metrics_and_plots(tmp_path):
    main(["fit", "-c", str(RECIPES / "xor_sgld.yaml"), "--trainer.default_root_dir", str(tmp_path),
          "--wandb", "false", *TINY])
    directory = run_dir(tmp_path)
    metrics = json.loads((directory / "summary.json").read_text())["metrics"]
    for name in ("test/accuracy", "test/nlpd", "test/ece", "test/brier"):
        assert 0.0 <= metrics[name] < 10.0, name
    assert (directory / "reliability_diagram.png").stat().st_size > 0


def test_threads_option_sets_torch_threads_and_rejects_zero(tmp_path):
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # the test session runs on 1: start from another value
        main(["fit", "-c", str(RECIPES / "xor_sgld.yaml"), "--trainer.default_root_dir", str(tmp_path),
              "--wandb", "false", "--threads", "1", *TINY])
        assert torch.get_num_threads() == 1
        with pytest.raises(SystemExit):
            main(["fit", "-c", str(RECIPES / "xor_sgld.yaml"), "--wandb", "false", "--threads", "0", *TINY])
    finally:
        torch.set_num_threads(before)


def test_wandb_offline_run_holds_the_logged_metrics(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    main(["fit", "-c", str(RECIPES / "xor_sgld.yaml"), "--trainer.default_root_dir", str(tmp_path), *TINY,
          "--trainer.log_every_n_steps", "1"])
    (run_file,) = run_dir(tmp_path).glob("wandb/offline-run-*/run-*.wandb")
    names = (b"test/accuracy", b"test/nlpd", b"train/energy", b"health/level", b"health/verdict", b"health/reasons")
    deadline = time.monotonic() + 60  # the W&B service process may still be writing the file
    while not all(n in run_file.read_bytes() for n in names) and time.monotonic() < deadline:
        time.sleep(0.5)
    content = run_file.read_bytes()
    for name in names:
        assert name in content, name


@pytest.mark.parametrize("args, rate", [([], 50), (["--progress_every", "7"], 7)])
def test_progress_bar_redraws_every_progress_every_batches(tmp_path, args, rate):
    from lit_bayes.lightning_cli import make_cli

    cli = make_cli(["-c", str(RECIPES / "main.yaml"), "--wandb", "false", "--trainer.default_root_dir", str(tmp_path),
                    *args], run=False)
    assert cli.trainer.progress_bar_callback.refresh_rate == rate


def test_main_job_is_ok_calibrated_and_beats_map(tmp_path):
    """The README's main job at full size: verdict ok, test ECE <= 0.05, NLPD below the MAP baseline."""
    main(["fit", "-c", str(RECIPES / "main.yaml"), "--trainer.default_root_dir", str(tmp_path),
          "--wandb", "false", "--trainer.enable_progress_bar", "false"])
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    metrics = summary["metrics"]
    assert summary["health"]["verdict"] == "ok", summary["health"]
    assert summary["health"]["draws_total"] == 800
    assert metrics["test/ece"] <= 0.05, metrics
    assert metrics["test/nlpd"] < metrics["baseline/map/test/nlpd"], metrics


def test_moons_sghmc_example_is_ok_at_full_size(tmp_path):
    """The README example at full size reaches verdict ok (its former 1,500 steps at friction 10
    left the chains in separate modes: function-space R-hat 1.20, verdict failed)."""
    main(["fit", "-c", str(RECIPES / "moons_sghmc.yaml"), "--trainer.default_root_dir", str(tmp_path),
          "--wandb", "false", "--trainer.enable_progress_bar", "false"])
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["health"]["verdict"] == "ok", summary["health"]
    assert summary["health"]["draws_total"] == 1600


def test_strict_exits_with_3_when_the_verdict_is_failed(tmp_path, capsys):
    """A burn-in past the run's 6 steps: nothing kept, the verdict printed, and --strict fails the command."""
    with pytest.warns(UserWarning, match="no posterior draw will be kept"):
        with pytest.raises(SystemExit) as stop:
            main(["fit", "-c", str(RECIPES / "xor_sgld.yaml"), "--trainer.default_root_dir", str(tmp_path),
                  "--wandb", "false", *TINY, "--model.init_args.burn_in", "100", "--strict", "true"])
    assert stop.value.code == 3
    out = capsys.readouterr().out
    assert "Posterior health: FAILED" in out and "burn_in is 100" in out
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["health"]["verdict"] == "failed"  # written before the exit


@pytest.mark.parametrize("recipe", ["main.yaml", "xor_sgld_replica_exchange.yaml"])
def test_a_run_in_float64_keeps_its_draws_and_baselines(recipe, tmp_path):
    """precision 64-true: the held-out batch of the chain diagnostics, the MAP baseline's data and the replica
    swaps' full-batch energies take the chains' dtype (a float32 batch crashed at the first kept draw)."""
    exchange = ["--model.init_args.swap_energy", "full_batch"] if "exchange" in recipe else []
    main(["fit", "-c", str(RECIPES / recipe), "--trainer.default_root_dir", str(tmp_path), "--wandb", "false", *TINY,
          "--trainer.precision", "64-true", *exchange])
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["steps"] == 6 and "test/nlpd" in summary["metrics"]


@pytest.mark.parametrize("option", ["--samples.directory", "--summary.directory"])
def test_an_unwritable_output_directory_is_refused_before_the_first_step(option, tmp_path, capsys):
    """A place the run writes at its end (the disk store's shards, summary.json) that cannot be written is a
    one-line error naming the option before any step, not a fit whose draws or summary are lost at the end.
    (A directory under a file stands in for a read-only one: the tests may run as root.)"""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    disk = ["--samples.mode", "disk"] if option == "--samples.directory" else []
    with pytest.raises(SystemExit) as stop:
        main(["fit", "-c", str(RECIPES / "xor_sgld.yaml"), "--trainer.default_root_dir", str(tmp_path / "runs"),
              "--wandb", "false", *TINY, *disk, option, str(blocker / "out")])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert f"({option[2:]}): cannot write to" in error
    assert not list(tmp_path.rglob("*.ckpt"))
