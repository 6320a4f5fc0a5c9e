"""ChainDiagnostics through short SGLD runs on a conjugate linear-regression posterior."""
from __future__ import annotations

import csv
import json

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from lit_bayes import SGMCMC, Bernoulli, Gaussian, GaussianPrior
from lit_bayes.callbacks import ChainDiagnostics, PosteriorSamples, RunSummary
from lit_bayes.data import LinearRegression, TwoMoons
from lit_bayes.diagnostics import random_projections
from lit_bayes.models import MLP

PROJECTIONS = 2


def data() -> LinearRegression:
    """256 points, 3 covariates: a posterior with covariance about I / 257, batches of 32."""
    return LinearRegression(num_train=256, num_val=32, num_test=32, batch_size=32)


def sampler(**options) -> SGMCMC:
    settings = dict(stepper="sgld", step_size=3e-3, num_chains=4, burn_in=50, seed=0)
    settings.update(options)
    return SGMCMC(nn.Linear(3, 1), Gaussian(1.0), **settings)


def trainer(root, max_steps: int, callbacks, **options) -> L.Trainer:
    settings = dict(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    settings.update(options)
    return L.Trainer(max_steps=max_steps, default_root_dir=root, callbacks=callbacks, **settings)


def test_mixed_chains_have_rhat_near_one_and_reach_logger_and_summary(tmp_path):
    diagnostics = ChainDiagnostics(num_projections=PROJECTIONS)
    logger = CSVLogger(tmp_path, name="run")
    fit = trainer(tmp_path, 450, [diagnostics, RunSummary()], logger=logger)
    fit.fit(sampler(), datamodule=data())

    traces = diagnostics.traces()
    function_space = {"heldout_lpd", "point_lpd_0", "point_lpd_1", "point_lpd_2", "point_lpd_3"}
    assert set(traces) == {"energy", "projection_0", "projection_1", "config_temperature"} | function_space
    assert all(trace.shape == (4, 400 - (name == "config_temperature")) for name, trace in traces.items())
    metrics = diagnostics.summary_metrics()
    assert metrics["diag/rhat_max"] < 1.05
    assert metrics["diag/ess_bulk_min"] > 100
    assert {"diag/rhat/energy", "diag/ess_tail/projection_1", "diag/iat/projection_0"} <= set(metrics)

    summary = json.loads((tmp_path / "run" / "version_0" / "summary.json").read_text())
    assert summary["metrics"]["diag/rhat_max"] == pytest.approx(metrics["diag/rhat_max"])
    with open(tmp_path / "run" / "version_0" / "metrics.csv") as f:
        logged = [row for row in csv.DictReader(f) if row.get("diag/rhat_max")]
    assert float(logged[-1]["diag/rhat_max"]) == pytest.approx(metrics["diag/rhat_max"])


def test_chains_started_far_apart_and_stopped_early_have_large_rhat(tmp_path):
    diagnostics = ChainDiagnostics(num_projections=PROJECTIONS, every_n_steps=2)
    model = sampler(init="prior", prior=GaussianPrior(100.0), step_size=1e-7, burn_in=0)
    trainer(tmp_path, 40, [diagnostics]).fit(model, datamodule=data())

    assert diagnostics.traces()["energy"].shape == (4, 20)
    assert diagnostics.summary_metrics()["diag/rhat_max"] > 1.1


def test_projection_traces_equal_random_projections_of_the_recorded_states(tmp_path):
    """The callback draws its directions once; every step's projections equal those of
    :func:`lit_bayes.diagnostics.random_projections` (which draws them at each call) on that step's state."""
    diagnostics = ChainDiagnostics(num_projections=3, seed=5)
    samples = PosteriorSamples(max_draws=10)
    trainer(tmp_path, 10, [diagnostics, samples]).fit(sampler(burn_in=0), datamodule=data())
    expected = random_projections(samples.trace(), 3, seed=5)  # (chains, draws, 3)
    traces = diagnostics.traces()
    for j in range(3):
        torch.testing.assert_close(traces[f"projection_{j}"], expected[..., j].double())


def test_val_nlpd_is_recorded_once_per_validation_epoch_after_burn_in(tmp_path):
    diagnostics = ChainDiagnostics(num_projections=1)
    model = sampler(burn_in=16)
    # 8 steps per epoch: validation after steps 8 (burn-in), 16 (burn-in), 24, 32, 40, 48
    trainer(tmp_path, 48, [diagnostics], limit_val_batches=None).fit(model, datamodule=data())

    val_nlpd = diagnostics.traces()["val_nlpd"]
    assert val_nlpd.shape == (4, 4)
    x, y = data().load()["val"]
    with torch.no_grad():
        params = model.chains.as_dict()
        expected = -model.log_likelihood(params, model.outputs(params, x), y).mean(-1)
    torch.testing.assert_close(val_nlpd[:, -1], expected.double())
    assert "diag/rhat/val_nlpd" in diagnostics.summary_metrics()


def test_traces_survive_a_checkpoint_and_a_resumed_run_appends(tmp_path):
    first = ChainDiagnostics(num_projections=PROJECTIONS)
    fit = trainer(tmp_path, 72, [first])  # 9 epochs of 8 steps, 22 after burn-in
    model = sampler()
    fit.fit(model, datamodule=data())
    path = tmp_path / "mid.ckpt"
    fit.save_checkpoint(path)
    before = first.traces()
    saved = torch.load(path, weights_only=True)["callbacks"]
    assert any("ChainDiagnostics" in key for key in saved)

    copy = ChainDiagnostics(num_projections=PROJECTIONS)
    copy.load_state_dict(first.state_dict())
    assert copy.traces().keys() == before.keys()
    for name, trace in before.items():
        assert torch.equal(copy.traces()[name], trace)

    resumed = ChainDiagnostics(num_projections=PROJECTIONS)
    trainer(tmp_path, 96, [resumed]).fit(sampler(), datamodule=data(), ckpt_path=path)
    for name, trace in resumed.traces().items():
        kept = 22 - (name == "config_temperature")  # the virial of a kept state comes with the next step's gradient
        assert trace.shape == (4, 24 + kept)
        assert torch.equal(trace[:, :kept], before[name])


def test_a_trace_buffer_holds_8_bytes_a_value_and_saves_only_its_draws():
    """Long runs record 10^5 steps: the draws go into one float64 buffer per trace (doubled when full),
    not a tensor per draw; the checkpoint holds exactly the draws, and a loaded trace appends on."""
    diagnostics, draws = ChainDiagnostics(), torch.randn(3000, 4, generator=torch.Generator().manual_seed(0))
    for row in draws:
        diagnostics._append("energy", row.float())
    buffer = diagnostics._draws["energy"]
    assert torch.equal(buffer.trace(), draws.T.float().double())
    assert buffer.trace().untyped_storage().nbytes() <= 2 * draws.numel() * 8
    saved = diagnostics.state_dict()["traces"]["energy"]
    assert saved.untyped_storage().nbytes() == draws.numel() * 8
    resumed = ChainDiagnostics()
    resumed.load_state_dict(diagnostics.state_dict())
    resumed._append("energy", torch.zeros(4))
    assert resumed.traces()["energy"].shape == (4, 3001) and torch.equal(resumed.traces()["energy"][:, :3000], saved)


def test_a_single_chain_reports_the_split_rhat_of_its_halves():
    """A stationary chain near 1, a drifting one far above; fewer than 8 draws report nothing."""
    generator = torch.Generator().manual_seed(0)
    for trace, stationary in ((torch.randn(1, 400, generator=generator), True),
                              (torch.randn(1, 400, generator=generator).cumsum(1), False)):
        diagnostics = ChainDiagnostics()
        diagnostics.load_state_dict({"traces": {"energy": trace}, "sample_steps": torch.tensor(400)})
        rhat = diagnostics.summary_metrics()["diag/rhat/energy"]
        assert rhat < 1.05 if stationary else rhat > 1.2
    diagnostics.load_state_dict({"traces": {"energy": torch.randn(1, 7)}, "sample_steps": torch.tensor(7)})
    assert diagnostics.summary_metrics() == {}


def test_too_short_traces_report_nothing_until_four_draws():
    diagnostics = ChainDiagnostics()
    diagnostics.load_state_dict({"traces": {"energy": torch.randn(4, 3)}, "sample_steps": torch.tensor(3)})
    assert diagnostics.summary_metrics() == {}


@pytest.mark.parametrize(
    "options, name",
    [({"num_projections": 0}, "num_projections"), ({"every_n_steps": 1.5}, "every_n_steps"), ({"seed": "a"}, "seed")],
)
def test_bad_arguments_are_named(options, name):
    with pytest.raises(ValueError, match=name):
        ChainDiagnostics(**options)


def test_function_space_traces_are_each_chains_held_out_log_density(tmp_path):
    """heldout_lpd is the mean of log p(y_i | x_i, theta_c) over the first validation points,
    point_lpd_j that of fixed single points; their R-hat is summarised as diag/fs_rhat_max."""
    diagnostics = ChainDiagnostics(num_projections=1, heldout_size=20, num_fixed_inputs=3)
    model = sampler()
    trainer(tmp_path, 120, [diagnostics]).fit(model, datamodule=data())

    traces = diagnostics.traces()
    assert traces["heldout_lpd"].shape == (4, 70) and "point_lpd_2" in traces and "point_lpd_3" not in traces
    x, y = data().load()["val"]
    with torch.no_grad():
        params = model.chains.as_dict()
        log_lik = model.log_likelihood(params, model.outputs(params, x[:20]), y[:20])
    torch.testing.assert_close(traces["heldout_lpd"][:, -1], log_lik.mean(-1).double())
    torch.testing.assert_close(traces["point_lpd_1"][:, -1], log_lik[:, 10].double())  # points 0, 10, 19
    metrics = diagnostics.summary_metrics()
    fs = [metrics[f"diag/rhat/{n}"] for n in ("heldout_lpd", "point_lpd_0", "point_lpd_1", "point_lpd_2")]
    assert metrics["diag/fs_rhat_max"] == max(fs)
    assert metrics["diag/fs_ess_bulk_min"] <= metrics["diag/ess_bulk/heldout_lpd"]


def test_without_a_validation_split_the_held_out_batch_is_a_fixed_training_slice(tmp_path):
    diagnostics = ChainDiagnostics(num_projections=1, heldout_size=8, num_fixed_inputs=0)
    model = SGMCMC(MLP([2, 4, 1]), Bernoulli(), stepper="sgld", step_size=1e-3, num_chains=4, burn_in=10)
    no_val = TwoMoons(num_train=64, num_val=0, num_test=16, batch_size=16)
    trainer(tmp_path, 60, [diagnostics]).fit(model, datamodule=no_val)
    x, y = no_val.train_data.tensors
    with torch.no_grad():
        params = model.chains.as_dict()
        expected = model.log_likelihood(params, model.outputs(params, x[:8]), y[:8]).mean(-1)
    torch.testing.assert_close(diagnostics.traces()["heldout_lpd"][:, -1], expected.double())


def test_num_fixed_inputs_above_heldout_size_is_refused():
    with pytest.raises(ValueError, match="num_fixed_inputs"):
        ChainDiagnostics(heldout_size=2, num_fixed_inputs=3)
