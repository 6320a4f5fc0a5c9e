"""ArviZ export of a run's kept draws (``lit_bayes.arviz_export``), checked with ArviZ's own packages:
a 4-chain HMC run written by ``lit-bayes fit`` becomes a DataTree whose posterior holds the kept draws
chain by chain, whose sample statistics line up with the draws, on which arviz-stats' summary gives the
R-hat and ESS of ``summary.json`` and PSIS-LOO runs."""
import sys

import numpy as np
import pytest
import torch

arviz_base = pytest.importorskip("arviz_base")
azs = pytest.importorskip("arviz_stats")
xr = pytest.importorskip("xarray")

from lit_bayes.arviz_export import run_to_arviz, to_arviz  # noqa: E402
from lit_bayes.callbacks import PosteriorSamples  # noqa: E402
from lit_bayes.cli import fit_and_test, run_summary  # noqa: E402

CHAINS, DRAWS, NUM_VAL = 4, 50, 60
CONFIG = f"""
seed_everything: 0
threads: 1
trainer:
  max_epochs: 120
  check_val_every_n_epoch: 120
  log_every_n_steps: 50
  enable_model_summary: false
model:
  class_path: lit_bayes.HMC
  init_args:
    model:
      class_path: lit_bayes.models.MLP
      init_args: {{widths: [2, 8, 1], activation: tanh}}
    likelihood: {{class_path: lit_bayes.Bernoulli}}
    prior: {{class_path: lit_bayes.GaussianPrior, init_args: {{variance: 1.0}}}}
    step_size: 0.05
    num_leapfrog: 5
    num_chains: {CHAINS}
    burn_in: 0.5
    num_draws: {DRAWS}
    init: prior
data:
  class_path: lit_bayes.data.TwoMoons
  init_args: {{num_train: 40, num_val: {NUM_VAL}, num_test: 60, batch_size: null, seed: 0}}
samples:
  max_draws: {DRAWS}
"""


@pytest.fixture(scope="module")
def hmc_run(tmp_path_factory):
    """A full-batch HMC fit of 4 chains (120 steps, the last 50 kept), its run directory and summary."""
    root = tmp_path_factory.mktemp("arviz_run")
    config = root / "hmc.yaml"
    config.write_text(CONFIG)
    cli = fit_and_test(config, ["--trainer.default_root_dir", str(root)])
    return cli, cli.trainer.log_dir, run_summary(cli)["metrics"]


@pytest.fixture(scope="module")
def exported(hmc_run):
    _, run_dir, _ = hmc_run
    return run_to_arviz(run_dir, log_likelihood="val")


def test_posterior_holds_the_kept_draws_chain_by_chain(hmc_run, exported):
    cli, _, _ = hmc_run
    (store,) = [c for c in cli.trainer.callbacks if isinstance(c, PosteriorSamples)]
    trace = store.trace()  # (chains, draws, P) from the callback itself
    kept = cli.model.chains.unflatten(trace.reshape(-1, trace.shape[-1]))
    posterior = exported["posterior"]
    assert set(posterior.data_vars) == {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"}
    weight = posterior["layers.0.weight"]
    assert weight.dims == ("chain", "draw", "layers.0.weight_dim_0", "layers.0.weight_dim_1")
    assert weight.shape == (CHAINS, DRAWS, 8, 2)
    for name, value in kept.items():
        expected = value.reshape(CHAINS, DRAWS, *value.shape[1:]).numpy()
        np.testing.assert_array_equal(posterior[name.removeprefix("net.")].values, expected)
    assert exported.attrs["sampler"] == "HMC"
    # a rank plot's statistics (arviz-plots' plot_rank): ranks over all chains, then each chain's PIT-ECDF
    ranks = posterior.dataset.azstats.compute_ranks(dim=["chain", "draw"])
    bias = ranks["layers.0.bias"].transpose("layers.0.bias_dim_0", "chain", "draw").values.reshape(8, -1)
    np.testing.assert_array_equal(np.sort(bias, axis=1), np.tile(np.arange(1, CHAINS * DRAWS + 1), (8, 1)))
    ecdf = ranks.azstats.ecdf(dim=["draw"], pit=True)["layers.0.bias"]
    assert ecdf.sizes["chain"] == CHAINS and "draw" not in ecdf.dims


def test_sample_stats_line_up_with_the_draws(hmc_run, exported):
    """HMC's returned energy is the full-batch energy of the kept state: recomputing it from the exported
    draws gives the exported energy; the adapted step sizes are frozen after the burn-in."""
    cli, _, metrics = hmc_run
    stats = exported["sample_stats"]
    assert set(stats.data_vars) == {"energy", "step_size"}
    assert stats["energy"].dims == ("chain", "draw") and stats["energy"].shape == (CHAINS, DRAWS)
    params = {f"net.{name}": torch.as_tensor(value.values).flatten(0, 1)
              for name, value in exported["posterior"].data_vars.items()}
    x, y = cli.datamodule.train_data.tensors
    energy = cli.model.energy(params, x, y).reshape(CHAINS, DRAWS)
    np.testing.assert_allclose(stats["energy"].values, energy.numpy(), rtol=1e-4)
    step = stats["step_size"].values
    assert (step == step[:, :1]).all() and np.ptp(step[:, 0]) > 0  # one adapted step per chain
    assert step[:, 0].mean() == pytest.approx(metrics["step_size"], rel=1e-6)  # the last step's logged mean


def test_arviz_summary_reports_the_rhat_and_ess_of_summary_json(hmc_run, exported):
    """The function-space traces of summary.json are each chain's mean held-out log-likelihood and that of
    a few fixed held-out points, recorded at every kept draw: the log_likelihood group on the validation
    split holds both. ArviZ's tail ESS takes the quantiles of stats.ci_prob, summary.json those of 5%/95%."""
    _, _, metrics = hmc_run
    log_lik = exported["log_likelihood"]["y"].astype("float64")
    assert log_lik.dims == ("chain", "draw", "y_dim_0") and log_lik.shape == (CHAINS, DRAWS, NUM_VAL)
    points = torch.linspace(0, NUM_VAL - 1, 4).round().long().tolist()  # ChainDiagnostics' fixed points
    traces = {"heldout_lpd": log_lik.mean("y_dim_0"),
              **{f"point_lpd_{j}": log_lik.isel(y_dim_0=i, drop=True) for j, i in enumerate(points)}}
    traces["energy"] = exported["sample_stats"]["energy"]
    with arviz_base.rc_context({"stats.ci_prob": 0.95}):
        table = azs.summary(xr.Dataset(traces), kind="diagnostics", round_to="none")
    for name in traces:
        assert table.loc[name, "r_hat"] == pytest.approx(metrics[f"diag/rhat/{name}"], abs=1e-3)
        assert table.loc[name, "ess_bulk"] == pytest.approx(metrics[f"diag/ess_bulk/{name}"], rel=1e-3)
        assert table.loc[name, "ess_tail"] == pytest.approx(metrics[f"diag/ess_tail/{name}"], rel=1e-3)


def test_psis_loo_runs_on_the_training_points(hmc_run):
    cli, run_dir, _ = hmc_run
    data = run_to_arviz(run_dir, log_likelihood="train")
    np.testing.assert_array_equal(data["observed_data"]["y"].values, cli.datamodule.train_data.tensors[1].numpy())
    assert data["log_likelihood"].attrs["points"] == "train"
    result = azs.loo(data)
    assert np.isfinite(result.elpd) and result.elpd < 0
    assert result.n_data_points == 40 and result.n_samples == CHAINS * DRAWS


def test_named_draws_in_memory_export_with_their_chain_count(hmc_run):
    """The in-process form: PosteriorSamples' chain-major draws, the sampler and given points."""
    cli, _, _ = hmc_run
    (store,) = [c for c in cli.trainer.callbacks if isinstance(c, PosteriorSamples)]
    samples, _ = store.samples(cli.model)
    x, y = cli.datamodule.test_data.tensors
    data = to_arviz(samples, num_chains=CHAINS, module=cli.model, log_likelihood=(x, y),
                    sample_stats={"lp": np.zeros((CHAINS, DRAWS))})
    assert data["posterior"]["layers.1.bias"].shape == (CHAINS, DRAWS, 1)
    assert data["log_likelihood"]["y"].shape == (CHAINS, DRAWS, 60)
    assert set(data["sample_stats"].data_vars) == {"lp"}
    with pytest.raises(ValueError, match="num_chains=3 does not divide"):
        to_arviz(samples, num_chains=3)
    with pytest.raises(ValueError, match="num_chains is needed"):
        to_arviz(samples)
    with pytest.raises(ValueError, match="module"):
        to_arviz(samples, num_chains=CHAINS, log_likelihood=(x, y))
    with pytest.raises(ValueError, match=r"sample_stats\['lp'\] must have shape"):
        to_arviz(samples, num_chains=CHAINS, sample_stats={"lp": np.zeros(DRAWS)})


def test_bad_arguments_are_named(hmc_run, tmp_path):
    _, run_dir, _ = hmc_run
    with pytest.raises(ValueError, match="run_dir .*missing.* is not a directory"):
        run_to_arviz(tmp_path / "missing")
    with pytest.raises(ValueError, match="holds no config.yaml"):
        run_to_arviz(tmp_path)
    with pytest.raises(ValueError, match="log_likelihood must be one of"):
        run_to_arviz(run_dir, log_likelihood="holdout")
    with pytest.raises(ValueError, match="draws must be a RunPosterior"):
        to_arviz([1, 2])


def test_missing_arviz_extra_names_the_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "arviz_base", None)  # import arviz_base raises ImportError
    with pytest.raises(ImportError, match=r"pip install lit-bayes\[arviz\]"):
        run_to_arviz(tmp_path)
