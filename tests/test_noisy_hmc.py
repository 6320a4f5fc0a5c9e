"""IntermediateHMC / IntermediateMALA (noisy-gibbs spec §5): HMC and MALA on the intermediate-noise joint
of weights, biases and latents (eq. 4). Exact moments of a tiny linear network computed by quadrature,
agreement with NoisyGibbs on ReLU regression and probit networks, the informed start, exact resume and bad inputs."""
import copy
import os

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lit_bayes.callbacks.thermalization import ThermalizationCheck
from lit_bayes.data.teacher_student import TeacherStudent
from lit_bayes.diagnostics import ess_bulk
from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.samplers.noisy_gibbs import NoisyGibbs, canonical_order
from lit_bayes.samplers.noisy_hmc import IntermediateHMC, IntermediateMALA

Z = 4.5  # tolerance in standard errors (fixed seeds: a pass is deterministic)
LINEAR = dict(widths=[2, 1, 1], activation="linear", delta_z=[0.5, 0.3], delta_x=0.4)


class Recorder(Callback):
    """Records ``functions(params, latents)`` ``(C, k)`` after every step of any NoisyMLP sampler."""

    def __init__(self, functions):
        self.functions, self.rows = functions, []

    @torch.no_grad()
    def on_train_batch_end(self, trainer, pl_module, *args):
        self.rows.append(self.functions(pl_module.chains.as_dict(), pl_module.latents.as_dict()).double())

    def trace(self, burn):
        return torch.stack(self.rows, 1)[:, burn:]


def fit(sampler, data, steps, callbacks=(), root=None, ckpt_path=None):
    torch.set_num_threads(1)
    L.Trainer(max_epochs=steps, logger=False, enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
              enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, callbacks=list(callbacks),
              default_root_dir=root).fit(sampler, datamodule=data, ckpt_path=ckpt_path)
    return sampler


def mean_and_se(trace):
    """Mean of each column of ``trace`` (chains, draws, k) and its standard error from the smallest bulk
    ESS over the columns (capped at the number of draws: HMC can be antithetic)."""
    flat = trace.reshape(-1, trace.shape[-1])
    ess = min(float(ess_bulk(trace).min()), float(len(flat)))
    assert ess > 200, f"too few effective samples ({ess:.0f})"
    return flat.mean(0), flat.std(0) / ess**0.5


def linear_functions(params, latents):
    """Sign-flip invariant functions (W1, b1, Z2, X2, w) -> -(...) of the linear network: b2, w^2, w X2_0,
    X2_0^2, Z2_0 X2_0, w b1, w W1_00 (row 0 of the canonical order)."""
    w, b2 = params["net.layers.1.weight"][:, 0, 0], params["net.layers.1.bias"][:, 0]
    x, z = latents["x2"][:, 0, 0], latents["z2"][:, 0, 0]
    return torch.stack([b2, w * w, w * x, x * x, z * x, w * params["net.layers.0.bias"][:, 0],
                        w * params["net.layers.0.weight"][:, 0, 0]], -1)


def exact_linear_moments(model, x, y):
    """E of :func:`linear_functions` under eq. 4 for widths [d, 1, 1], linear sigma, by quadrature.

    Given the output weight w and bias b2 the energy is quadratic in v = (W1, b1, Z2, X2): each squared
    residual (a.v - c)^2 / (2 s) adds a a^T / s to the precision A and a c / s to the linear term h, so
    p(w, b2) ~ exp(-const + h^T A^-1 h / 2) det(A)^-1/2 and v | w, b2 ~ N(A^-1 h, A^-1); the moments are
    averages of the conditional ones over a fine (w, b2) grid.
    """
    x, y = x.double(), y.double()
    n, d = x.shape
    (lam1, lam2), (lamb1, lamb2) = model.prior_precision, model.bias_precision
    (dz1, dz2), (dx,) = model.delta_z, model.delta_x
    size = d + 1 + 2 * n
    i_w, i_b, i_z, i_x = list(range(d)), d, list(range(d + 1, d + 1 + n)), list(range(d + 1 + n, size))
    base = torch.zeros(size, size, dtype=torch.float64)
    base[i_w, i_w] += lam1
    base[i_b, i_b] += lamb1
    for mu in range(n):
        pre = torch.zeros(size, dtype=torch.float64)  # Z2 - W1 x - b1 (eq. 5)
        pre[i_z[mu]], pre[i_w], pre[i_b] = 1.0, -x[mu], -1.0
        post = torch.zeros(size, dtype=torch.float64)  # X2 - Z2 (eq. 6, sigma = identity)
        post[i_x[mu]], post[i_z[mu]] = 1.0, -1.0
        base += torch.outer(pre, pre) / dz1 + torch.outer(post, post) / dx
    w = torch.linspace(-6, 6, 1201, dtype=torch.float64)
    b2 = torch.linspace(-6, 6, 1201, dtype=torch.float64)
    precision = base.expand(len(w), size, size).clone()
    precision[:, i_x, i_x] += w[:, None] ** 2 / dz2  # (y - w X2 - b2)^2 / (2 dz2)
    cov = torch.linalg.inv(precision)
    residual = y[None] - b2[:, None]  # (b2, n)
    linear = torch.zeros(len(w), len(b2), size, dtype=torch.float64)
    linear[..., i_x] = w[:, None, None] / dz2 * residual[None]
    mean = torch.einsum("wij,wbj->wbi", cov, linear)
    log_p = (-(residual**2).sum(-1)[None] / (2 * dz2) - lam2 * w[:, None] ** 2 / 2 - lamb2 * b2[None] ** 2 / 2
             + 0.5 * (linear * mean).sum(-1) - 0.5 * torch.linalg.slogdet(precision)[1][:, None])
    p = (log_p - log_p.max()).exp()
    p = p / p.sum()
    edge = p[0].sum() + p[-1].sum() + p[:, 0].sum() + p[:, -1].sum()
    assert edge < 1e-10, "the quadrature grid is too narrow"
    w, b2 = w[:, None], b2[None]
    m_x, m_z, m_b, m_w = mean[..., i_x[0]], mean[..., i_z[0]], mean[..., i_b], mean[..., i_w[0]]
    values = [b2, w**2, w * m_x, m_x**2 + cov[:, None, i_x[0], i_x[0]], m_z * m_x + cov[:, None, i_z[0], i_x[0]],
              w * m_b, w * m_w]
    return torch.stack([(p * v).sum() for v in values])


@pytest.fixture(scope="module")
def linear_problem():
    data = TeacherStudent(**LINEAR, num_train=4, num_test=0, seed=3)
    data.setup()
    x, y = data.train_data.tensors
    order = canonical_order(x, y)  # the samplers' latent rows
    return data, exact_linear_moments(NoisyMLP(**LINEAR), x[order], y[order])


@pytest.mark.parametrize("sampler_cls, kwargs, steps", [
    (IntermediateHMC, dict(step_size=0.2, num_leapfrog=5), 400),
    (IntermediateMALA, dict(step_size=0.3), 900),
    (NoisyGibbs, dict(dtype="float64"), 400),  # the exact Gibbs sampler of the same joint
])
def test_linear_network_matches_the_exact_joint(linear_problem, sampler_cls, kwargs, steps):
    """One hidden linear unit: given (w, b2) the joint is Gaussian, so its moments are exact by 2-d
    quadrature. 128 chains from the prior (dual averaging during the burn-in for HMC/MALA) match them,
    and so does NoisyGibbs: both samplers target the same joint (eq. 4)."""
    data, exact = linear_problem
    recorder = Recorder(linear_functions)
    burn = 100
    extra = dict(init="prior", burn_in=burn) if sampler_cls is not NoisyGibbs else {}
    fit(sampler_cls(NoisyMLP(**LINEAR), num_chains=128, seed=1, **extra, **kwargs), data, steps, [recorder])
    mean, se = mean_and_se(recorder.trace(burn))
    assert ((mean - exact).abs() <= Z * se).all(), f"{mean} vs exact {exact} (se {se})"


def relu_functions(params, latents):
    """Hidden-unit permutation invariant functions of a ReLU network: the output biases, |W1|^2, |X2_0|^2
    and sum_i Z2_0i (row 0)."""
    return torch.stack([*params["net.layers.1.bias"].unbind(-1), params["net.layers.0.weight"].pow(2).sum((-2, -1)),
                        latents["x2"][:, 0].pow(2).sum(-1), latents["z2"][:, 0].sum(-1)], -1)


def assert_hmc_agrees_with_gibbs(spec, functions, num_train, seed, chains=128, hmc_steps=400, gibbs_steps=400,
                                 num_leapfrog=5):
    """IntermediateHMC and NoisyGibbs on the same teacher-student data: the means of ``functions`` after a
    burn-in of 100 steps agree within ``Z`` combined standard errors."""
    data = TeacherStudent(**spec, num_train=num_train, num_test=0, seed=seed)
    burn, traces = 100, []
    for sampler, steps in ((IntermediateHMC(NoisyMLP(**spec), step_size=0.2, num_leapfrog=num_leapfrog,
                                            num_chains=chains, burn_in=burn, init="prior", seed=2), hmc_steps),
                           (NoisyGibbs(NoisyMLP(**spec), num_chains=chains, seed=2, dtype="float64"), gibbs_steps)):
        recorder = Recorder(functions)
        fit(sampler, data, steps, [recorder])
        traces.append(mean_and_se(recorder.trace(burn)))
    (hmc, hmc_se), (gibbs, gibbs_se) = traces
    assert ((hmc - gibbs).abs() <= Z * (hmc_se**2 + gibbs_se**2).sqrt()).all(), f"{hmc} vs {gibbs}"


def test_relu_network_agrees_with_noisy_gibbs():
    """ReLU (a kink at 0, allowed): no closed form, but HMC and the exact Gibbs sampler target the same
    joint (eq. 4), so the invariant functions agree within their standard errors."""
    spec = dict(widths=[2, 2, 1], activation="relu", delta_z=[0.3, 0.2], delta_x=0.3)
    assert_hmc_agrees_with_gibbs(spec, relu_functions, num_train=5, seed=4)


def probit_functions(params, latents):
    """Hidden-unit permutation invariant functions that the likelihood of the labels shapes most: the output
    biases and |W2|^2."""
    return torch.stack([*params["net.layers.1.bias"].unbind(-1), params["net.layers.1.weight"].pow(2).sum((-2, -1))], -1)


def test_probit_network_agrees_with_noisy_gibbs():
    """Probit output: HMC integrates the scores Z^(3) out through the probit likelihood (App. E.4), the Gibbs
    sampler draws them; both target the same joint of the rest, so the invariant functions agree. (With the
    softmax of the scores in HMC's energy instead, its output biases were 5-8 standard errors off.)"""
    spec = dict(widths=[2, 2, 3], activation="relu", delta_z=[0.3, 0.2], delta_x=0.3, output="probit")
    assert_hmc_agrees_with_gibbs(spec, probit_functions, num_train=20, seed=5, chains=64, hmc_steps=300,
                                 gibbs_steps=700, num_leapfrog=3)


def test_informed_start_and_thermalization_check(tmp_path):
    """ThermalizationCheck drives IntermediateHMC as it drives NoisyGibbs: chain 0 starts at the teacher's
    weights and latents (spec §4), so its test MSE stays of order Delta; chain 1 starts near 0."""
    spec = dict(widths=[3, 4, 1], activation="relu", delta_z=1e-3, delta_x=1e-3)
    data = TeacherStudent(**spec, num_train=40, num_test=100, seed=5)
    data.setup()
    sampler = IntermediateHMC(copy.deepcopy(data.teacher), step_size=2e-3, num_leapfrog=10, num_chains=2, seed=0,
                              adapt_steps=0, informed_chains=1)
    check = ThermalizationCheck(informed_chains=1, every_n_steps=1, window=2, rhat_block=4)
    fit(sampler, data, 10, [check])
    mse = check.traces()["test_mse"]
    assert mse.shape == (2, 11) and mse[0, 0] < 1e-10 and (mse[0] < 0.01).all()
    assert mse[1, -1] > mse[0, -1]
    assert check.summary_metrics()["thermalization/records"] == 11.0


def fit_resumable(root, steps, ckpt_path=None):
    data = TeacherStudent(widths=(3, 4, 3), delta_z=0.1, delta_x=0.1, output="probit", num_train=20, num_test=0,
                          seed=2)
    sampler = IntermediateHMC(NoisyMLP([3, 4, 3], "abs", delta_z=0.1, delta_x=0.1, output="probit"),
                              step_size=0.05, num_leapfrog=3, num_chains=3, burn_in=4, seed=5, init="prior")
    checkpoint = ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), save_last=True, save_on_train_epoch_end=True,
                                 every_n_epochs=1)
    return fit(sampler, data, steps, [checkpoint], root, ckpt_path)


def test_resumed_chain_equals_uninterrupted_chain(tmp_path):
    """6 steps == 3 + checkpoint + 3 (dual averaging runs across the checkpoint): weights, latents, step
    sizes and acceptance counts bit for bit."""
    full = fit_resumable(str(tmp_path / "full"), 6)
    fit_resumable(str(tmp_path / "split"), 3)
    resumed = fit_resumable(str(tmp_path / "split"), 6, str(tmp_path / "split" / "ckpt" / "last.ckpt"))
    assert full.global_step == resumed.global_step == 6
    assert torch.equal(full.chains.flat(), resumed.chains.flat())
    assert sorted(full.latents.as_dict()) == ["x2", "z2"]
    assert torch.equal(full.latents.flat(), resumed.latents.flat())
    assert not torch.equal(full.latents.flat(), torch.zeros_like(full.latents.flat()))
    full_stepper, resumed_stepper = full.optimizers().optimizer, resumed.optimizers().optimizer
    assert torch.equal(full_stepper.step_sizes(), resumed_stepper.step_sizes())
    assert torch.equal(full_stepper.acceptance()[0], resumed_stepper.acceptance()[0])


@pytest.mark.parametrize("kwargs, message", [
    (dict(model=torch.nn.Linear(2, 1)), "model must be a lit_bayes.models.NoisyMLP"),
    (dict(model=NoisyMLP([2, 1])), "model must have a hidden layer"),
    (dict(model=NoisyMLP([2, 3, 1], "sign")), "model.activation 'sign'"),
    (dict(init="random"), "init must be one of"),
    (dict(init_std=0.0), "init_std must be a finite number > 0"),
    (dict(dtype="float16"), "dtype must be 'float32' or 'float64'"),
    (dict(step_size=-1.0), "step_size must be a finite number > 0"),
    (dict(num_leapfrog=0), "num_leapfrog must be an integer >= 1"),
    (dict(num_leapfrog=True), "num_leapfrog must be an integer >= 1, got True"),
    (dict(num_chains=0), "num_chains must be an integer >= 1"),
])
def test_bad_arguments(kwargs, message):
    kwargs = {"model": NoisyMLP([2, 3, 1]), **kwargs}
    with pytest.raises(ValueError, match=message):
        IntermediateHMC(**kwargs)


def test_bad_initial_state_and_minibatches(tmp_path):
    sampler = IntermediateMALA(NoisyMLP([2, 3, 1]), num_chains=2)
    x, y = torch.randn(5, 2), torch.randn(5)
    with pytest.raises(ValueError, match=r"latents must hold exactly \['z2', 'x2'\]"):
        sampler.set_initial_latents(x, y, {"z2": torch.zeros(5, 3)})
    with pytest.raises(ValueError, match=r"latents\['x2'\] must have shape"):
        sampler.set_initial_latents(x, y, {"z2": torch.zeros(5, 3), "x2": torch.zeros(4, 3)})
    with pytest.raises(ValueError, match="chains must list distinct chain indices"):
        sampler.set_initial_latents(x, y, {"z2": torch.zeros(5, 3), "x2": torch.zeros(5, 3)}, chains=[2])
    with pytest.raises(ValueError, match="parameters must hold exactly"):
        sampler.set_initial_parameters({"layers.0.weight": torch.zeros(3, 2)})
    data = TeacherStudent(widths=(2, 3, 1), num_train=10, num_test=0, batch_size=5)
    with pytest.raises(ValueError, match="is full batch"):
        fit(sampler, data, 1, root=tmp_path)
