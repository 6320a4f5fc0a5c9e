"""The command's help and outputs: a fast top-level help, the DataModules under ``--data``, figures whose
axes all hold data and are labelled, wall time across a resume, the resumed run's own directory, and no
directory left by a start that fails."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch import LightningDataModule
from matplotlib.figure import Figure

import lit_bayes.data
from lit_bayes.callbacks.plots import acceptance_plot, reliability_diagram, trace_plot, uncertain_points_plot
from lit_bayes.cli import fit_and_test, main
from lit_bayes.cli_help import SUBCOMMANDS, asks_top_level_help
from lit_bayes.run_directories import claim_run_directory, remove_failed_start, resumed_run_directory

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "regression_psgld.yaml"
TINY = ["--trainer.limit_train_batches", "2", "--model.init_args.burn_in", "1", "--trainer.enable_progress_bar",
        "false", "--wandb", "false", "--trainer.log_every_n_steps", "1"]


# ----------------------------------------------------------------------------------------- help
def test_top_level_help_lists_the_subcommands_without_importing_torch_or_lightning():
    probe = ("import sys\nfrom lit_bayes.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit as stop:\n"
             "    code = stop.code\n"
             "print(code, sorted(m for m in ('torch', 'lightning', 'jsonargparse') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    *help_text, last = done.stdout.strip().splitlines()
    assert last == "0 []"
    for name, description in SUBCOMMANDS.items():
        assert any(line.split()[:1] == [name] for line in help_text), name
        assert description.split()[0] in "\n".join(help_text)


def test_the_fast_help_has_the_subcommands_of_the_full_cli():
    from lit_bayes.cli import LitBayesCLI

    assert list(LitBayesCLI.subcommands()) == list(SUBCOMMANDS)


@pytest.mark.parametrize("args, asks", [
    (["--help"], True), (["-h"], True), (["-c", "fit", "--help"], True), (["fit", "--help"], False),
    (["test", "-h"], False), ([], False), (["fit", "-c", "a.yaml"], False),
])
def test_only_a_help_flag_before_any_subcommand_asks_the_top_level_help(args, asks):
    assert asks_top_level_help(args) is asks


def test_fit_help_names_every_datamodule_of_lit_bayes_under_data():
    """In a fresh process, where nothing but the command has imported lit_bayes.data."""
    done = subprocess.run([sys.executable, "-m", "lit_bayes.cli", "fit", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    data_help = done.stdout.split("--data CONFIG", 2)[-1]
    modules = [name for name in lit_bayes.data.__all__
               if isinstance(getattr(lit_bayes.data, name), type)
               and issubclass(getattr(lit_bayes.data, name), LightningDataModule)]
    assert "NoisyXOR" in modules
    for name in modules:
        assert f"lit_bayes.data.{name}" in data_help, name


# ---------------------------------------------------------------------------------------- plots
def assert_axes_hold_data_and_labels(fig: Figure) -> None:
    """Every axes shows data (a line through 2 or more finite points, or a bar) and names both axes;
    the figure has a title."""
    assert fig.axes
    for ax in fig.axes:
        lines = [np.asarray(line.get_ydata(), dtype=float) for line in ax.lines]
        assert ax.patches or any(np.isfinite(y).sum() >= 2 for y in lines), ax.get_title()
        assert ax.get_ylabel(), ax.get_title()
        assert ax.get_xlabel() or not any(label.get_visible() for label in ax.get_xticklabels()), ax.get_title()
    assert fig.axes[0].get_title() or fig.get_suptitle()


def test_trace_plot_leaves_out_traces_without_a_line_and_explains_the_projections():
    generator = torch.Generator().manual_seed(0)
    traces = {"energy": torch.randn(3, 10, generator=generator),
              "projection_1": torch.randn(3, 10, generator=generator),
              "val_nlpd": torch.randn(3, 1, generator=generator),  # one validation run: no line
              "point_lpd_0": torch.full((3, 10), float("nan"))}
    fig = trace_plot(traces)
    assert_axes_hold_data_and_labels(fig)
    assert len(fig.axes) == 2
    assert "random projection 1 of the weights" in fig.axes[1].get_title().lower()
    assert "val_nlpd" in fig.get_suptitle() and "point_lpd_0" in fig.get_suptitle()
    with pytest.raises(ValueError, match="traces"):
        trace_plot({"val_nlpd": torch.randn(3, 1)})


def test_uncertain_points_reliability_and_acceptance_figures_are_labelled():
    generator = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(30, 2, generator=generator), dim=1)
    target = torch.randint(2, (30,), generator=generator)
    uncertain = uncertain_points_plot(probs, target, k=5)
    for fig in (uncertain, reliability_diagram(probs, target), acceptance_plot({"layer_1": 0.3, "layer_2": 0.7})):
        assert_axes_hold_data_and_labels(fig)
    assert all("nats" in ax.get_title() for ax in uncertain.axes)
    assert "entropy" in uncertain.get_suptitle()


# ------------------------------------------------------------------------------- runs and resumes
def test_resumed_fit_continues_in_its_run_directory_and_adds_up_the_wall_time(tmp_path):
    root = tmp_path / "runs"
    main(["fit", "-c", str(RECIPE), "--trainer.default_root_dir", str(root), *TINY, "--trainer.max_epochs", "1"])
    run = root / "version_0"
    checkpoint = run / "checkpoints" / "last.ckpt"
    before = torch.load(checkpoint, map_location="cpu", weights_only=True)["callbacks"]["RunSummary"]["wall_time_s"]
    with (run / "metrics.csv").open() as f:
        first_steps = [int(row["step"]) for row in csv.DictReader(f)]

    main(["fit", "-c", str(RECIPE), "--trainer.default_root_dir", str(root), *TINY, "--trainer.max_epochs", "2",
          "--ckpt_path", str(checkpoint)])
    assert sorted(path.name for path in root.iterdir()) == ["version_0"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 4
    assert 0 < before < summary["wall_time_s"]
    assert summary["wall_time_s"] == pytest.approx(before + summary["wall_time_segment_s"], abs=2e-3)
    with (run / "metrics.csv").open() as f:
        steps = [int(row["step"]) for row in csv.DictReader(f)]
    assert steps[:len(first_steps)] == first_steps and max(steps) == 4  # the first segment's rows, then more


def test_a_script_resuming_with_fit_and_test_continues_in_the_same_run_directory(tmp_path):
    """The recipe scripts resume through :func:`fit_and_test` (``exp_c.py --resume``): before, the resumed
    segment opened a new ``version_1`` holding only its own metrics."""
    settings = ["--trainer.default_root_dir", str(tmp_path), *TINY]
    fit_and_test(RECIPE, [*settings, "--trainer.max_epochs", "1"])
    checkpoint = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    fit_and_test(RECIPE, [*settings, "--trainer.max_epochs", "2"], ckpt_path=checkpoint)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["version_0"]
    assert json.loads((tmp_path / "version_0" / "summary.json").read_text())["steps"] == 4
    with (tmp_path / "version_0" / "metrics.csv").open() as f:
        assert max(int(row["step"]) for row in csv.DictReader(f) if row["step"]) == 4


def test_a_fit_without_resume_reports_its_wall_time_once(tmp_path):
    main(["fit", "-c", str(RECIPE), "--trainer.default_root_dir", str(tmp_path), *TINY, "--trainer.max_epochs", "1"])
    summary = json.loads((tmp_path / "version_0" / "summary.json").read_text())
    assert summary["wall_time_s"] == summary["wall_time_segment_s"] > 0


def test_a_test_of_the_best_checkpoint_does_not_add_its_wall_time(tmp_path):
    """Testing the best checkpoint restores the callbacks' states, RunSummary's included: the fit's clock
    must not restart from that checkpoint's wall time (it did: wall_time_s was the checkpoint's time plus
    the whole segment)."""
    main(["fit", "-c", str(RECIPE), "--trainer.default_root_dir", str(tmp_path), *TINY, "--trainer.max_epochs", "3",
          "--trainer.check_val_every_n_epoch", "1", "--test_ckpt", "best", "--checkpoint.monitor", "val/nlpd",
          "--checkpoint.mode", "min", "--checkpoint.save_top_k", "1"])
    summary = json.loads((tmp_path / "version_0" / "summary.json").read_text())
    assert summary["wall_time_s"] == summary["wall_time_segment_s"] > 0


def test_a_missing_ckpt_path_fails_before_any_directory_is_made(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["fit", "-c", str(RECIPE), "--trainer.default_root_dir", str(tmp_path / "runs"), *TINY,
              "--ckpt_path", str(tmp_path / "missing.ckpt")])
    assert stop.value.code == 2
    assert "--ckpt_path" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_start_failing_in_the_data_removes_the_run_directory_it_made(tmp_path):
    (tmp_path / "no_images").mkdir()
    with pytest.raises(FileNotFoundError, match="dataset files missing"):
        main(["fit", "-c", str(RECIPE), "--trainer.default_root_dir", str(tmp_path / "runs"), *TINY,
              "--data", "lit_bayes.data.TorchvisionImages", "--data.init_args.name", "mnist",
              "--data.init_args.root", str(tmp_path / "no_images")])
    assert list((tmp_path / "runs").iterdir()) == []


def test_remove_failed_start_keeps_a_directory_that_holds_results(tmp_path):
    started, ran = tmp_path / "version_0", tmp_path / "version_1"
    for directory in (started, ran):
        (directory / "wandb" / "run").mkdir(parents=True)
        (directory / "config.yaml").write_text("seed_everything: 0\n")
        (directory / "wandb" / "run" / "log.txt").write_text("started\n")
    (ran / "metrics.csv").write_text("step\n1\n")
    assert remove_failed_start(started) and not started.exists()
    assert not remove_failed_start(ran) and (ran / "metrics.csv").exists()


def test_runs_started_at_the_same_moment_claim_different_directories(tmp_path):
    """16 starts released together on one root, five times: every one gets its own version_<n>."""
    (tmp_path / "version_2").mkdir()
    (tmp_path / "version_notes").mkdir()  # not a number: ignored
    barrier = threading.Barrier(16)

    def start(_):
        barrier.wait()
        return claim_run_directory(tmp_path)

    with ThreadPoolExecutor(16) as pool:
        names = [name for _ in range(5) for name in pool.map(start, range(16))]
    assert sorted(names, key=lambda n: int(n.split("_")[1])) == [f"version_{n}" for n in range(3, 3 + 80)]


def test_resumed_run_directory_is_the_checkpoints_run_under_the_same_root(tmp_path):
    checkpoint = tmp_path / "runs" / "version_3" / "checkpoints" / "last.ckpt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"")
    assert resumed_run_directory(checkpoint, tmp_path / "runs") == checkpoint.parents[1].resolve()
    assert resumed_run_directory(checkpoint, tmp_path / "other") is None
    assert resumed_run_directory(None, tmp_path / "runs") is None
    assert resumed_run_directory(tmp_path / "runs" / "missing.ckpt", tmp_path / "runs") is None


def test_a_checkpoint_is_evaluated_with_the_commands_model_arguments_and_resumed_with_its_own(tmp_path):
    """Lightning's CLI replaces the model's arguments by a checkpoint's saved hyperparameters: ``test`` would drop
    a value given on its command line (SWAG's ``variant``, say) without a word."""
    from lit_bayes.lightning_cli import make_cli

    settings = ["-c", str(RECIPE), "--trainer.default_root_dir", str(tmp_path), *TINY]
    main(["fit", *settings, "--trainer.max_epochs", "1"])
    checkpoint = str(tmp_path / "version_0" / "checkpoints" / "last.ckpt")
    with pytest.warns(UserWarning, match=r"test evaluates the checkpoint with the command's model arguments, not "
                                         r"those saved in it \(temperature: 2.0 given, 1.0 saved\)"):
        tested = make_cli(["test", *settings, "--ckpt_path", checkpoint, "--model.init_args.temperature", "2.0"])
    assert tested.model.posterior.temperature == 2.0
    with pytest.warns(UserWarning, match=r"fit --ckpt_path resumes with the checkpoint's model arguments"):
        resumed = make_cli(["fit", *settings, "--trainer.max_epochs", "2", "--ckpt_path", checkpoint,
                            "--model.init_args.temperature", "2.0"])
    assert resumed.model.posterior.temperature == 1.0
