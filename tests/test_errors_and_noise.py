"""Errors and noise (issue 24, part 7): a model that does not fit the data fails before sampling,
naming both; ``lit-bayes`` reports the library's own messages without traceback or usage text;
the known-harmless warnings of the dependencies stay out of a run's output; the Feynman-Kac
samplers refuse a model without deterministic parameters psi."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.trainer.connectors import data_connector
from torch import nn
from torch.utils.data import DataLoader

from lit_bayes import HMC, MAP, OHSMC, SGMCMC, SGSMC, BlockGibbs, Categorical, Gaussian, IntermediateHMC, NoisyGibbs
from lit_bayes import Bernoulli, StructuredSGMCMC
from lit_bayes.cli import library_error, quiet_known_noise
from lit_bayes.data.base import BayesDataModule
from lit_bayes.models import MLP, NoisyMLP, PartialBNN, PartialMLP
from lit_bayes.validation import check_positive

RECIPE = str(Path(__file__).resolve().parents[1] / "recipes" / "xor_sgld.yaml")
TINY = ["--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false", "--model.init_args.num_chains", "2",
        "--model.init_args.burn_in", "0", "--data.init_args.num_train", "200", "--data.init_args.num_test", "100"]


class Points(BayesDataModule):
    """Twelve random points of ``dim`` features with ``classes`` labels (or regression targets)."""

    def __init__(self, dim: int = 2, classes: int | None = 2) -> None:
        task = "regression" if classes is None else "classification"
        super().__init__(task=task, num_classes=classes, input_shape=(dim,), batch_size=None, eval_batch_size=None,
                         seed=0)
        self.classes = classes

    def load(self):
        x = torch.randn(12, self.input_shape[0], generator=torch.Generator().manual_seed(0))
        y = torch.randn(12) if self.classes is None else torch.arange(12) % self.classes
        return {split: (x, y) for split in ("train", "val", "test")}


def fit(sampler, data) -> None:
    L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False).fit(sampler, datamodule=data)


# a sampler of every family whose network takes 3 inputs (the data has 2), and the task it models
WRONG_INPUT = {
    "sgmcmc": (lambda: SGMCMC(MLP([3, 4, 1]), Bernoulli(), num_chains=2), 2, "input width widths[0]=3"),
    "structured": (lambda: StructuredSGMCMC(MLP([3, 4, 1]), Bernoulli(), num_chains=2), 2, "widths[0]=3"),
    "map": (lambda: MAP(nn.Linear(3, 1), Gaussian(), num_chains=2), None, "in_features=3"),
    "hmc": (lambda: HMC(nn.Linear(3, 1), Gaussian(), num_chains=2), None, "in_features=3"),
    "block_gibbs": (lambda: BlockGibbs(MLP([3, 2, 1]), Bernoulli(), num_chains=2), 2, "widths[0]=3"),
    "noisy_gibbs": (lambda: NoisyGibbs(NoisyMLP([3, 2, 1]), num_chains=2), None, "widths[0]=3"),
    "intermediate_hmc": (lambda: IntermediateHMC(NoisyMLP([3, 2, 1]), num_chains=2), None, "widths[0]=3"),
    "ohsmc": (lambda: OHSMC(PartialMLP([3, 4, 1], 0), Bernoulli(), num_particles=4), 2, "widths[0]=3"),
    "sgsmc": (lambda: SGSMC(PartialMLP([3, 4, 1], 1), Bernoulli(), num_particles=4), 2, "widths[0]=3"),
}


@pytest.mark.parametrize("family", sorted(WRONG_INPUT))
def test_input_width_that_does_not_fit_the_data_fails_before_sampling(family):
    make, classes, expected = WRONG_INPUT[family]
    sampler = make()
    with pytest.raises(ValueError, match=r"does not fit the data: Points gives inputs of shape \(2,\)") as error:
        fit(sampler, Points(dim=2, classes=classes))
    assert expected in str(error.value)
    assert sampler.global_step == 0


def test_output_width_and_classes_that_do_not_fit_fail_before_sampling():
    sampler = SGMCMC(MLP([2, 4, 2]), Categorical(3), num_chains=2)
    with pytest.raises(ValueError, match=r"outputs of shape \(2,\) per point, which do not fit the likelihood "
                                         r"Categorical: output has 2 logits, Categorical expects num_classes=3"):
        fit(sampler, Points(classes=3))
    assert sampler.global_step == 0
    with pytest.raises(ValueError, match="likelihood Categorical models 2 classes but Points has num_classes=3"):
        fit(SGMCMC(MLP([2, 4, 2]), Categorical(2), num_chains=2), Points(classes=3))


def test_a_model_that_fits_passes_the_check():
    sampler = SGMCMC(MLP([2, 4, 3]), Categorical(3), num_chains=2)
    fit(sampler, Points(classes=3))
    assert sampler.global_step == 2


class ReportsAnotherDevice(L.Callback):
    """Does what Lightning does before ``setup`` on a GPU: every module reports the accelerator's
    device (here ``meta``) while its tensors are still on the CPU."""

    def setup(self, trainer, pl_module, stage):
        for module in pl_module.modules():
            if isinstance(module, L.LightningModule):
                module._device = torch.device("meta")


FITTING = {
    "sgmcmc": lambda: SGMCMC(MLP([2, 4, 1]), Bernoulli(), num_chains=2),
    "hmc": lambda: HMC(nn.Linear(2, 1), Gaussian(), num_chains=2),
    "noisy_gibbs": lambda: NoisyGibbs(NoisyMLP([2, 2, 1]), num_chains=2),
    "ohsmc": lambda: OHSMC(PartialMLP([2, 4, 1], 0), Bernoulli(), num_particles=4),
}


@pytest.mark.parametrize("family", sorted(FITTING))
def test_the_fit_check_runs_where_the_chains_are(family):
    """The check at setup evaluates the chain on its own device, not on the one Lightning reports
    there (the accelerator's, before the module is moved): on a GPU every fit failed the check."""
    sampler = FITTING[family]()
    data = Points(dim=2, classes=None if family in ("hmc", "noisy_gibbs") else 2)
    L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, callbacks=[ReportsAnotherDevice()]).fit(sampler, datamodule=data)
    assert sampler.global_step == 2


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``lit-bayes fit`` of the tiny XOR run (the console script beside this Python, else ``-m``)."""
    script = Path(sys.executable).parent / "lit-bayes"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "lit_bayes.cli"]
    return subprocess.run([*command, "fit", "-c", RECIPE, *TINY, *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env})


@pytest.mark.parametrize("args, message", [
    (["--model.init_args.model.init_args.widths", "[3, 2, 1]"],
     "lit-bayes: error: model MLP does not fit the data: NoisyXOR gives inputs of shape (2,), the model expects "
     "input width widths[0]=3"),
    (["--model.init_args.step_size", "-1"], "lit-bayes: error: step_size must be a finite number > 0, got -1.0"),
    (["--model.init_args.bogus", "3"], "Option 'bogus' is not accepted"),
])
def test_cli_reports_the_message_without_traceback_or_usage(tmp_path, args, message):
    result = run_cli("--wandb", "false", "--trainer.default_root_dir", str(tmp_path), *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and "usage:" not in result.stderr
    assert len(result.stderr.splitlines()) < 15, result.stderr


def test_library_error_finds_the_library_report_and_leaves_bugs_alone():
    try:
        try:
            check_positive("step_size", -1.0)
        except ValueError as inner:
            raise ValueError("Does not validate against any of the Union subtypes") from inner
    except ValueError as outer:
        wrapped = outer
    assert str(library_error(wrapped)) == "step_size must be a finite number > 0, got -1.0"
    try:
        torch.zeros(2) @ torch.zeros(3)
    except RuntimeError as bug:
        assert library_error(bug) is None
    try:
        int("x")  # a ValueError raised outside lit_bayes
    except ValueError as foreign:
        assert library_error(foreign) is None


KNOWN_NOISE = ["litlogger", "estimate number of stepping batches", "anonymous setting", "Previous log files", "LeafSpec", "Total length of",
               "does not have many workers"]


def test_cli_run_output_holds_no_known_harmless_warnings(tmp_path):
    """A W&B (offline) run with an empty validation split checked every epoch into a fresh directory."""
    result = run_cli("--trainer.default_root_dir", str(tmp_path), "--data.init_args.num_val", "0",
                     "--trainer.check_val_every_n_epoch", "1", WANDB_MODE="offline")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "version_0" / "wandb").is_dir()
    output = result.stderr + result.stdout
    assert [noise for noise in KNOWN_NOISE if noise in output] == []


@pytest.mark.parametrize("quiet", [False, True])
def test_dataloader_worker_advice_is_filtered(monkeypatch, quiet):
    """Lightning advises more DataLoader workers on machines with more cores (not on two): the
    command filters that advice (the data sets are in-memory tensors)."""
    monkeypatch.setattr(data_connector, "suggested_max_num_workers", lambda devices: 4)
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if quiet:
            quiet_known_noise()
        data_connector._worker_check(trainer, DataLoader([0, 1]), "train_dataloader")
    assert any("does not have many workers" in str(w.message) for w in caught) != quiet


@pytest.mark.parametrize("sampler", [OHSMC, SGSMC])
def test_feynman_kac_without_psi_names_psi(sampler):
    every_parameter_stochastic = PartialBNN(nn.Sequential(nn.Linear(2, 1)), "0")
    with pytest.raises(ValueError, match=r"psi of the PartialBNN, but its stochastic=\['0.weight', '0.bias'\] "
                                         "covers every parameter, leaving psi empty"):
        sampler(every_parameter_stochastic, Bernoulli(), num_particles=4)
