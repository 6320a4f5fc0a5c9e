"""Diagnostic figures and the DiagnosticPlots callback in a fit + test run."""
from __future__ import annotations

import re
from unittest import mock

import lightning as L
import matplotlib.image
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from matplotlib.figure import Figure
from torchmetrics.classification import MulticlassCalibrationError

from lit_bayes import SGMCMC, Bernoulli
from lit_bayes.callbacks import ChainDiagnostics, DiagnosticPlots, PredictiveMarginal, RunSummary
from lit_bayes.callbacks.plots import (
    acceptance_plot,
    log_figure,
    reliability_diagram,
    trace_plot,
    uncertain_points_plot,
)
from lit_bayes.data import NoisyXOR
from lit_bayes.models import MLP


def predictions(n: int = 300, classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    probs = torch.softmax(3 * torch.randn(n, classes, generator=generator), dim=1)
    return probs, torch.randint(classes, (n,), generator=generator)


def test_reliability_diagram_has_a_bar_per_bin_and_the_torchmetrics_ece_in_its_title():
    probs, target = predictions()
    fig = reliability_diagram(probs, target, n_bins=10)
    accuracy_axes, count_axes = fig.axes
    assert isinstance(fig, Figure)
    assert len(accuracy_axes.patches) == len(count_axes.patches) == 10
    assert sum(bar.get_height() for bar in count_axes.patches) == len(target)
    ece = float(re.search(r"ECE = ([0-9.]+)", accuracy_axes.get_title()).group(1))
    expected = MulticlassCalibrationError(3, n_bins=10, norm="l1")(probs, target)
    assert ece == pytest.approx(float(expected), abs=1e-4)


def test_trace_plot_has_an_axes_per_trace_and_a_line_per_chain():
    fig = trace_plot({"energy": torch.randn(3, 50), "projection_0": torch.randn(3, 50).numpy()})
    assert [len(ax.lines) for ax in fig.axes] == [3, 3]
    assert "energy" in fig.axes[0].get_ylabel() and fig.axes[1].get_title().startswith("Random projection 0 ")


def test_acceptance_plot_has_a_bar_per_layer():
    fig = acceptance_plot({"layer_1": 0.2, "layer_2": 0.5, "layer_3": 0.9})
    assert [bar.get_height() for bar in fig.axes[0].patches] == [0.2, 0.5, 0.9]


def test_uncertain_points_plot_shows_the_highest_entropy_points_first():
    probs, target = predictions(n=40)
    probs[7] = 1.0 / 3.0
    fig = uncertain_points_plot(probs, target, k=16)
    assert len(fig.axes) == 16
    assert all(len(ax.patches) == 3 for ax in fig.axes)
    assert fig.axes[0].get_title().startswith("point 7: ")
    assert len(uncertain_points_plot(probs[:5], target[:5], k=16).axes) == 5


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda p, t: reliability_diagram(p[:, 0], t), "probs"),
        (lambda p, t: reliability_diagram(p, t[:-1]), "target"),
        (lambda p, t: reliability_diagram(p, t + 3), "target"),
        (lambda p, t: reliability_diagram(p, t, n_bins=0), "n_bins"),
        (lambda p, t: uncertain_points_plot(p, t, k=0), "k"),
        (lambda p, t: trace_plot({"energy": p[:, 0]}), "traces"),
        (lambda p, t: acceptance_plot({"layer_1": 1.5}), "rates_by_layer"),
    ],
)
def test_bad_inputs_are_named(call, name):
    probs, target = predictions(n=20)
    with pytest.raises(ValueError, match=name):
        call(probs, target)


def test_log_figure_uses_wandb_and_tensorboard_and_skips_other_loggers(tmp_path):
    fig = acceptance_plot({"layer_1": 0.3})
    wandb, tensorboard = mock.Mock(spec=WandbLogger), mock.Mock(spec=TensorBoardLogger)
    log_figure([wandb, tensorboard, CSVLogger(tmp_path)], "plots/acceptance", fig, step=5)
    wandb.log_image.assert_called_once_with(key="plots/acceptance", images=[fig], step=5)
    tensorboard.experiment.add_figure.assert_called_once_with("plots/acceptance", fig, global_step=5, close=False)


def test_callback_writes_pngs_next_to_summary_in_a_fit_and_test_run(tmp_path):
    data = NoisyXOR(num_train=40, num_val=0, num_test=40, batch_size=20)
    model = SGMCMC(MLP([2, 4, 1]), Bernoulli(), step_size=1e-3, num_chains=2, burn_in=4)
    callbacks = [ChainDiagnostics(num_projections=2), PredictiveMarginal(), DiagnosticPlots(k=4), RunSummary()]
    trainer = L.Trainer(
        max_steps=20,
        logger=TensorBoardLogger(tmp_path, name="run"),
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(model, datamodule=data)
    trainer.test(model, datamodule=data, verbose=False)

    log_dir = tmp_path / "run" / "version_0"
    assert (log_dir / "summary.json").exists()
    for name in ("reliability_diagram", "uncertain_points", "traces"):
        assert matplotlib.image.imread(log_dir / f"{name}.png").ndim == 3
    assert list(log_dir.glob("events.out.tfevents.*"))


def test_acceptance_plot_written_for_mh_samplers(tmp_path):
    from lit_bayes import HMC, Gaussian, GaussianPrior
    from lit_bayes.callbacks import AcceptanceMonitor, DiagnosticPlots
    from lit_bayes.data import LinearRegression

    sampler = HMC(torch.nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), num_chains=2, burn_in=3)
    trainer = L.Trainer(max_steps=8, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path,
                        callbacks=[AcceptanceMonitor(), DiagnosticPlots()])
    trainer.fit(sampler, datamodule=LinearRegression(num_train=32, num_val=8, num_test=8, batch_size=None))
    assert (tmp_path / "acceptance.png").stat().st_size > 0
