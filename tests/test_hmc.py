"""HMC and MALA: exact on a 2-D Gaussian and on conjugate linear regression; acceptance rates."""
import lightning as L
import pytest
import torch
from torch import nn

from lit_bayes import HMC, MALA, Gaussian, GaussianPrior
from lit_bayes.callbacks import AcceptanceMonitor, PosteriorSamples
from lit_bayes.data import LinearRegression
from tests.gaussian_targets import assert_matches_gaussian, conjugate_linear_regression, correlated_gaussian, hmc_chains


def run_stepper(num_leapfrog, lr, steps, adapt_steps=0, num_chains=8, energy_fn=None):
    mean, cov = correlated_gaussian()
    trace, stepper = hmc_chains(mean, cov, torch.zeros(num_chains, 2), steps, energy_fn, lr=lr,
                                num_leapfrog=num_leapfrog, adapt_steps=adapt_steps)
    return trace, stepper, mean, cov


@pytest.mark.parametrize("num_leapfrog, lr", [(1, 0.5), (5, 0.3)])  # MALA, HMC
def test_hmc_and_mala_recover_2d_gaussian(num_leapfrog, lr):
    trace, stepper, mean, cov = run_stepper(num_leapfrog, lr, 3_000)
    assert_matches_gaussian(trace[:, 300:], mean, cov)
    accepted, proposed = stepper.acceptance()
    assert proposed == 3_000 and 0.2 < float(accepted.double().mean()) / proposed < 1.0


def test_dual_averaging_adapts_then_freezes():
    trace, stepper, mean, cov = run_stepper(1, 2.0, 1_500, adapt_steps=500)
    _, early, _, _ = run_stepper(1, 2.0, 600, adapt_steps=500)
    assert torch.equal(stepper.step_sizes(), early.step_sizes())  # frozen after step 500
    assert (stepper.step_sizes() < 2.0).all()  # 2.0 is far too large for this target
    assert_matches_gaussian(trace[:, 600:], mean, cov)


def test_nan_proposal_is_rejected_not_propagated():
    def energy(theta):  # finite near 0, NaN beyond |theta| = 1
        return torch.where(theta.abs().max(1).values < 1, 0.5 * (theta**2).sum(1), torch.full_like(theta[:, 0], float("nan")))

    trace, _, _, _ = run_stepper(3, 0.8, 200, energy_fn=energy)
    assert torch.isfinite(trace).all() and trace.abs().max() < 1


@pytest.mark.parametrize("sampler_cls", [HMC, MALA])
def test_hmc_modules_recover_conjugate_posterior_with_acceptance(sampler_cls, tmp_path):
    data = LinearRegression(num_train=50, num_val=10, num_test=10, batch_size=None, seed=1)
    sampler = sampler_cls(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), step_size=0.05,
                          num_chains=8, burn_in=300, seed=2)
    store, monitor = PosteriorSamples(max_draws=2_000), AcceptanceMonitor()
    trainer = L.Trainer(max_steps=1_300, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[store, monitor],
                        default_root_dir=tmp_path)
    trainer.fit(sampler, datamodule=data)
    x, y = data.train_data.tensors
    mean, cov = conjugate_linear_regression(x, y, noise_var=1.0, prior_var=1.0)
    assert_matches_gaussian(store.trace(), mean, cov)
    target = sampler.stepper_options["target_accept"]
    window = monitor.summary_metrics()
    # the frozen step is dual averaging's averaged one, which errs on the cautious side
    assert target - 0.1 < window["accept/overall"] < 0.95, window
    assert window["accept/layer_all"] == window["accept/overall"]
    assert monitor.rates(window=False)["layer"]["all"] != window["accept/overall"]


def test_normal_init_draws_every_chain_from_an_isotropic_gaussian():
    """init="normal" (the noisy-gibbs paper's uninformed baseline start, spec §5): every parameter of every
    chain i.i.d. N(0, init_std^2), chains independent, the template's own values unused."""
    sampler = MALA(nn.Linear(200, 50), Gaussian(1.0), GaussianPrior(1.0), num_chains=3, init="normal", init_std=0.1)
    state = sampler.initial_state(torch.Generator().manual_seed(0))
    weights = state["net.weight"]
    assert weights.shape == (3, 50, 200) and state["net.bias"].shape == (3, 50)
    assert abs(float(weights.std()) - 0.1) < 0.002 and abs(float(weights.mean())) < 0.002
    assert not torch.equal(weights[0], weights[1])
    with pytest.raises(ValueError, match="init_std must be a finite number > 0"):
        HMC(nn.Linear(2, 1), Gaussian(1.0), init="normal", init_std=-1.0)
    with pytest.raises(ValueError, match="init must be 'module', 'prior', 'template' or 'normal'"):
        HMC(nn.Linear(2, 1), Gaussian(1.0), init="zeros")


def test_informed_chains_start_at_the_teacher_and_the_others_follow_init(tmp_path):
    """informed_chains=1 on a teacher-student DataModule (the classical baselines of the noisy-gibbs paper's
    Exp. B, spec §4): chain 0 starts at the teacher's weights, the others keep init="normal"; without it the
    start is init's alone, as before."""
    from lit_bayes.data.teacher_student import TeacherStudent
    from lit_bayes.models.noisy_mlp import NoisyMLP

    data = TeacherStudent(widths=(3, 4, 1), num_train=20, num_test=5, noiseless_labels=True, seed=3)
    data.setup()
    teacher = {f"net.{n}": p for n, p in data.teacher.named_parameters()}
    starts = {}

    class Start(L.Callback):
        def on_train_start(self, trainer, pl_module):
            starts[type(pl_module).__name__, pl_module.informed_chains] = pl_module.chains.snapshot()

    for cls, informed in ((HMC, 1), (MALA, 1), (HMC, 0)):
        model = NoisyMLP([3, 4, 1])
        sampler = cls(model, Gaussian(0.1), model.prior(), step_size=1e-3, num_chains=3, init="normal",
                      init_std=1e-4, adapt_steps=0, seed=4, informed_chains=informed)
        L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, limit_val_batches=0, callbacks=[Start()],
                  default_root_dir=tmp_path).fit(sampler, datamodule=data)
    uninformed = starts["HMC", 0]
    for name in ("HMC", "MALA"):
        state = starts[name, 1]
        for key, value in teacher.items():
            assert torch.equal(state[key][0], value), (name, key)
            assert torch.equal(state[key][1:], uninformed[key][1:]), (name, key)  # init's draws, unchanged
            assert float(state[key][1:].abs().max()) < 1e-3
    with pytest.raises(ValueError, match=r"informed_chains \(3\) must be at most num_chains \(2\)"):
        HMC(nn.Linear(2, 1), Gaussian(1.0), num_chains=2, informed_chains=3)
    with pytest.raises(ValueError, match="teacher-student DataModule exposing `teacher`"):
        L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  limit_val_batches=0, default_root_dir=tmp_path).fit(
            HMC(nn.Linear(3, 1), Gaussian(1.0), num_chains=2, informed_chains=1),
            datamodule=LinearRegression(num_train=10, num_val=1, num_test=5, batch_size=None))
