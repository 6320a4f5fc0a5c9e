"""Every sampler runs on CUDA and resumes there exactly (skipped without a GPU; see tests/conftest.py)."""
import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn

from lit_bayes import (
    HMC, MALA, MAP, OHSMC, SGMCMC, SGSMC, BlockGibbs, Gaussian, GaussianPrior, NoisyGibbs, StructuredSGMCMC,
)
from lit_bayes.callbacks import MAPBaseline, PosteriorSamples, PredictiveMarginal, UncertaintyMetrics
from lit_bayes.data import LinearRegression
from lit_bayes.models import MLP, NoisyMLP, PartialMLP
from lit_bayes.predictive import marginal_predictive
from tests.resume_runs import fit as fit_small_regression

pytestmark = pytest.mark.gpu

SAMPLERS = {
    "sgld": lambda: SGMCMC(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), stepper="sgld", step_size=1e-3,
                           num_chains=4, burn_in=5),
    "psgld": lambda: SGMCMC(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), stepper="psgld", step_size=1e-3,
                            num_chains=4, burn_in=5),
    "sghmc": lambda: SGMCMC(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), stepper="sghmc", step_size=1e-2,
                            num_chains=4, burn_in=5),
    "map": lambda: MAP(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), num_chains=2),
    "hmc": lambda: HMC(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), num_chains=4, burn_in=5),
    "mala": lambda: MALA(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), num_chains=4, burn_in=5),
    "block_gibbs": lambda: BlockGibbs(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), num_chains=4, burn_in=5),
    "block_gibbs_fused": lambda: BlockGibbs(MLP([3, 4, 4, 1]), Gaussian(1.0), GaussianPrior(1.0), fused=True,
                                            num_chains=4, burn_in=5),
    "structured": lambda: StructuredSGMCMC(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), step_size=1e-3,
                                           mode="dropout", partition="fully_factorised", num_chains=4, burn_in=5),
    "ohsmc": lambda: OHSMC(PartialMLP([3, 4, 3, 1], 1), Gaussian(1.0), num_particles=64, burn_in=5),
    "sgsmc": lambda: SGSMC(PartialMLP([3, 4, 3, 1], 1), Gaussian(1.0), num_particles=64, burn_in=5),
    "noisy_gibbs": lambda: NoisyGibbs(NoisyMLP([3, 4, 1]), num_chains=4, burn_in=5),
}


class ChainsAtTrainEnd(L.Callback):
    """Keeps the flat chain state as it is when training ends, before Lightning's teardown moves it."""

    def on_train_end(self, trainer, pl_module):
        self.chains = pl_module.chains.flat().detach().clone()


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_runs_on_cuda(name, tmp_path):
    sampler = SAMPLERS[name]()
    data = LinearRegression(num_train=64, num_val=16, num_test=16, batch_size=None, seed=0)
    seen = ChainsAtTrainEnd()
    trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=20, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, callbacks=[PosteriorSamples(), PredictiveMarginal(),
                                                              UncertaintyMetrics(), seen], default_root_dir=tmp_path)
    trainer.fit(sampler, datamodule=data)
    # Lightning moves the module back to the CPU when fit ends: look at the chains while it trains
    assert seen.chains.is_cuda and torch.isfinite(seen.chains).all()
    metrics = trainer.test(sampler, datamodule=data, verbose=False)[0]
    assert torch.isfinite(torch.tensor(metrics["test/nlpd"]))


class BatchesSeen(L.Callback):
    def __init__(self):
        self.inputs = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.inputs.append(batch[0])


@pytest.mark.parametrize("batch_size", [None, 16])
def test_a_full_batch_goes_to_cuda_once(batch_size, tmp_path):
    """Full batch: every step gets the same CUDA tensors (copied once); minibatches: a new copy each step."""
    seen = BatchesSeen()
    data = LinearRegression(num_train=64, num_val=16, num_test=16, batch_size=batch_size, seed=0)
    trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=6, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, callbacks=[seen], default_root_dir=tmp_path)
    trainer.fit(SAMPLERS["mala"](), datamodule=data)
    assert len(seen.inputs) == 6 and all(x.is_cuda for x in seen.inputs)
    distinct = len({id(x) for x in seen.inputs})
    assert distinct == (1 if batch_size is None else 6)


def test_map_baseline_fits_on_cuda_inside_the_test(tmp_path):
    baseline = MAPBaseline(steps=20)
    data = LinearRegression(num_train=64, num_val=16, num_test=16, batch_size=None, seed=0)
    trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=20, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, callbacks=[baseline], default_root_dir=tmp_path)
    sampler = SAMPLERS["sgld"]()
    trainer.fit(sampler, datamodule=data)
    trainer.test(sampler, datamodule=data, verbose=False)
    assert all(p.is_cuda for p in baseline.params.values())
    assert torch.isfinite(torch.tensor(baseline.summary_metrics()["baseline/map/test/nlpd"]))


def test_predictive_marginal_on_cuda_equals_cpu():
    sampler = SAMPLERS["sgld"]()
    generator = torch.Generator().manual_seed(0)
    samples = {"net.weight": torch.randn(64, 1, 3, generator=generator), "net.bias": torch.randn(64, 1, generator=generator)}
    log_weights = torch.full((64,), -torch.log(torch.tensor(64.0)))
    x, y = torch.randn(100, 3, generator=generator), torch.randn(100, generator=generator)
    cpu = marginal_predictive(sampler, samples, log_weights, x, y)
    sampler.cuda()
    gpu = marginal_predictive(sampler, {n: p.cuda() for n, p in samples.items()}, log_weights.cuda(), x.cuda(), y.cuda())
    torch.testing.assert_close(gpu.log_prob_target.cpu(), cpu.log_prob_target, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gpu.mean.cpu(), cpu.mean, rtol=1e-5, atol=1e-5)


def test_prior_draws_from_a_cpu_generator_land_on_cuda_unchanged():
    """A sampler set up outside a Trainer after ``.cuda()`` draws its start from the CPU "init" stream:
    the draws are the CPU's, moved to the parameters' device (before, randn refused the CPU generator)."""
    prior = GaussianPrior(4.0)
    cuda = prior.sample({"w": torch.empty(2, 3, device="cuda")}, torch.Generator().manual_seed(3))["w"]
    cpu = prior.sample({"w": torch.empty(2, 3)}, torch.Generator().manual_seed(3))["w"]
    assert cuda.is_cuda
    torch.testing.assert_close(cuda.cpu(), cpu)


def fit_with_checkpoints(name, root, epochs, ckpt_path=None):
    """``epochs`` full-batch steps of one of :data:`SAMPLERS`, a checkpoint after each."""
    torch.manual_seed(0)  # the networks' own init (OHSMC's psi starts from it)
    sampler, samples = SAMPLERS[name](), PosteriorSamples()
    data = LinearRegression(num_train=64, num_val=16, num_test=16, batch_size=None, seed=0)
    checkpoints = ModelCheckpoint(dirpath=root / "ckpt", save_last=True, every_n_epochs=1, save_on_train_epoch_end=True)
    trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=epochs, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[samples, checkpoints],
                        default_root_dir=root)
    trainer.fit(sampler, datamodule=data, ckpt_path=ckpt_path)
    return sampler, samples


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_resumed_chain_on_cuda_equals_uninterrupted_chain(name, tmp_path):
    """12 steps on the GPU == 6 steps, a checkpoint and 6 more: every state tensor of the
    sampler (chains, particle weights, adapted step sizes) and every kept draw, bit for bit."""
    full, full_samples = fit_with_checkpoints(name, tmp_path / "full", 12)
    fit_with_checkpoints(name, tmp_path / "split", 6)
    resumed, resumed_samples = fit_with_checkpoints(name, tmp_path / "split", 12,
                                                    ckpt_path=tmp_path / "split" / "ckpt" / "last.ckpt")
    assert full.global_step == resumed.global_step == 12
    for key, value in full.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key
    if name != "map":  # MAP keeps no draws
        assert full_samples.trace().shape[1] == 7
        assert torch.equal(full_samples.trace(), resumed_samples.trace())


def test_cuda_checkpoint_resumes_on_the_cpu_with_a_new_stream_and_a_warning(tmp_path):
    """A CUDA generator's state cannot be set on a CPU generator: the run resumes from the saved
    chains with a stream seeded from the saved state, and says it will not repeat the GPU run."""
    fit_small_regression(str(tmp_path / "split"), 3, "sghmc", "memory", accelerator="gpu")
    with pytest.warns(UserWarning, match="another device type"):
        resumed, _ = fit_small_regression(str(tmp_path / "split"), 6, "sghmc", "memory", accelerator="cpu",
                                          ckpt_path=str(tmp_path / "split" / "ckpt" / "last.ckpt"))
    assert resumed.global_step == 24 and torch.isfinite(resumed.chains.flat()).all()
