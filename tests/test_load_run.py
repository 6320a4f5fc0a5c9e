"""Reloading a finished run: ``lit_bayes.load_run`` in a fresh process predicts exactly what the run's
own process predicts from its kept draws; ``lit-bayes predict`` writes its predictions; predicting
without kept draws is an error, never the chains' last states."""
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from safetensors.torch import load_file, save_file

from lit_bayes import MAP, SGMCMC, Bernoulli, load_run
from lit_bayes.cli import fit_and_test, main
from lit_bayes.data import NoisyXOR
from lit_bayes.models import MLP
from lit_bayes.predictive import marginal_predictive, posterior_samples
from lit_bayes.run_loading import concat_predictives

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "xor_sgld.yaml"
TINY = ["--trainer.max_epochs", "2", "--model.init_args.num_chains", "2", "--model.init_args.burn_in", "5",
        "--model.init_args.thinning", "3", "--model.init_args.num_draws", "null", "--data.init_args.num_test", "300",
        "--samples.shard_size", "10"]

RELOAD = """
import sys
import torch
from safetensors.torch import load_file, save_file
import lit_bayes
torch.set_num_threads(1)
run = lit_bayes.load_run(sys.argv[1])
x = load_file(sys.argv[2])["x"]
new, test = run.predict(x), run.predict_test()
save_file({"new": new.log_probs, "new_mi": new.mutual_information, "test": test.log_probs,
           "test_target": test.log_prob_target, "draws": torch.tensor(run.num_draws)}, sys.argv[3])
"""


@pytest.fixture(scope="module", params=["memory", "disk"])
def finished_run(request, tmp_path_factory):
    """A tiny SGLD run (2 chains, 100 steps, 32 draws per chain) and its in-process predictions."""
    root = tmp_path_factory.mktemp(f"run_{request.param}")
    cli = fit_and_test(RECIPE, [*TINY, "--samples.mode", request.param, "--trainer.default_root_dir", str(root)])
    x = torch.randn(7, 2, generator=torch.Generator().manual_seed(0))
    samples, log_weights = posterior_samples(cli.trainer, cli.model)
    new = marginal_predictive(cli.model, samples, log_weights, x)
    test = concat_predictives(cli.trainer.predict(cli.model, datamodule=cli.datamodule))
    return Path(cli.trainer.log_dir), x, new, test, log_weights.shape[0]


def test_reload_in_a_fresh_process_predicts_bit_for_bit_as_the_run(finished_run, tmp_path):
    run_dir, x, new, test, draws = finished_run
    assert draws == 2 * 32
    save_file({"x": x}, str(tmp_path / "x.safetensors"))
    out = tmp_path / "out.safetensors"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", RELOAD, str(run_dir), str(tmp_path / "x.safetensors"), str(out)],
                   check=True, env=env, timeout=120)
    reloaded = load_file(str(out))
    assert int(reloaded["draws"]) == draws
    assert torch.equal(reloaded["new"], new.log_probs)
    assert torch.equal(reloaded["new_mi"], new.mutual_information)
    assert torch.equal(reloaded["test"], test.log_probs)
    assert reloaded["test_target"].shape == (300,) and torch.isfinite(reloaded["test_target"]).all()


def test_lit_bayes_predict_writes_the_predictions_into_the_run(finished_run, capsys):
    run_dir, _, _, test, _ = finished_run
    shards = sorted((run_dir / "samples").glob("shard_*"))
    main(["predict", "-c", str(run_dir / "config.yaml")])
    path = run_dir / "predictions.safetensors"
    assert str(path) in capsys.readouterr().out
    written = load_file(str(path))
    assert set(written) == {"probs", "entropy", "mutual_information"}
    assert torch.equal(written["probs"], test.probs)
    assert torch.equal(written["entropy"], test.entropy)
    assert torch.equal(written["mutual_information"], test.mutual_information)
    assert sorted((run_dir / "samples").glob("shard_*")) == shards  # a disk store is read, never pruned
    assert sorted(p.name for p in run_dir.parent.iterdir()) == [run_dir.name]  # no new run directory


def tiny_trainer(root, **options) -> L.Trainer:
    return L.Trainer(max_steps=4, logger=False, enable_progress_bar=False, enable_model_summary=False,
                     limit_val_batches=0, default_root_dir=root, **options)


def test_predicting_an_sgmcmc_module_without_kept_draws_raises(tmp_path):
    data = NoisyXOR(num_train=40, num_val=0, num_test=20, batch_size=20)
    sampler = SGMCMC(MLP([2, 3, 1]), Bernoulli(), step_size=1e-3, num_chains=2, burn_in=1)
    trainer = tiny_trainer(tmp_path)
    trainer.fit(sampler, datamodule=data)
    with pytest.raises(ValueError, match="no kept posterior draws.*load_run"):
        trainer.predict(sampler, datamodule=data)
    (ckpt,) = (tmp_path / "checkpoints").glob("*.ckpt")
    with pytest.raises(ValueError, match="model= and likelihood=.*load_run"):
        SGMCMC.load_from_checkpoint(ckpt)
    reloaded = SGMCMC.load_from_checkpoint(ckpt, model=MLP([2, 3, 1]), likelihood=Bernoulli())
    assert torch.equal(reloaded.chains.flat(), sampler.chains.flat())
    with pytest.raises(ValueError, match="no kept posterior draws"):
        tiny_trainer(tmp_path).predict(reloaded, datamodule=data)


def test_map_predicts_with_its_current_parameters(tmp_path):
    data = NoisyXOR(num_train=40, num_val=0, num_test=20, batch_size=20)
    ensemble = MAP(MLP([2, 3, 1]), Bernoulli(), num_chains=2)
    trainer = tiny_trainer(tmp_path, enable_checkpointing=False)
    trainer.fit(ensemble, datamodule=data)
    (batch,) = trainer.predict(ensemble, datamodule=data)
    samples, log_weights = ensemble.current_samples()
    expected = marginal_predictive(ensemble, samples, log_weights, data.test_data.tensors[0])
    assert torch.equal(batch.log_probs, expected.log_probs)


def test_feynman_kac_run_reloads_its_particles_and_weights(tmp_path):
    """OHSMC predicts with its final particle cloud and weights (never resampled here: unequal)."""
    cli = fit_and_test(RECIPE.parent / "feynman_kac" / "moons_ohsmc.yaml", [
        "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3", "--trainer.precision", "32-true",
        "--model.init_args.num_particles", "50", "--model.init_args.ess_threshold", "0.0",
        "--checkpoint.monitor", "null", "--checkpoint.save_last", "true", "--checkpoint.save_on_train_epoch_end",
        "true", "--trainer.default_root_dir", str(tmp_path)])
    x = torch.randn(9, 2, generator=torch.Generator().manual_seed(1))
    samples, log_weights = posterior_samples(cli.trainer, cli.model)
    run = load_run(cli.trainer.log_dir)
    assert log_weights.exp().max() > 0.1 and torch.equal(run.log_weights, log_weights)
    assert torch.equal(run.predict(x).log_probs, marginal_predictive(cli.model, samples, log_weights, x).log_probs)


def test_load_run_of_a_run_without_draws_says_so(tmp_path):
    fit_and_test(RECIPE, ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3",
                          "--model.init_args.num_chains", "2", "--model.init_args.burn_in", "100",
                          "--trainer.default_root_dir", str(tmp_path)])
    (run_dir,) = tmp_path.glob("version_*")
    with pytest.raises(ValueError, match="kept no posterior draws"):
        load_run(run_dir)
