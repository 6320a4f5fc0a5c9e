"""Bad input gets a clear error at the boundary (DESIGN.md, Conventions).

One test per bad input: each asserts the exception type and that the message names the
argument (and, where the library states it, the value and what is allowed). DataModule
errors live in tests/test_data.py.
"""
import math

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lit_bayes import MAP, OHSMC, SGMCMC, SWAG, Bernoulli, Categorical, Gaussian, GaussianPrior, MeanFieldVB, Posterior
from lit_bayes.callbacks import PosteriorSamples, PredictiveMarginal
from lit_bayes.chains import ChainState
from lit_bayes.data import LinearRegression, TwoMoons
from lit_bayes.models import MLP, PartialMLP
from lit_bayes.predictive import marginal_predictive, uniform_log_weights
from lit_bayes.schedules import StepSizeSchedule

B = 5  # points in the hand-made batches


def trainer(**kwargs) -> L.Trainer:
    options = dict(
        logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        limit_val_batches=0, accelerator="cpu", devices=1,
    )
    options.update(kwargs)
    return L.Trainer(**options)


def tiny_regression() -> LinearRegression:
    return LinearRegression(num_train=10, num_val=1, num_test=1, batch_size=None, seed=0)


def tiny_moons() -> TwoMoons:
    return TwoMoons(num_train=20, num_val=1, num_test=1, batch_size=10, seed=0)


def regression_sampler(**kwargs) -> SGMCMC:
    return SGMCMC(nn.Linear(3, 1), Gaussian(noise_std=1.0), **kwargs)


# ----------------------------------------------------------------- likelihood shapes
@pytest.mark.parametrize(
    "likelihood, output, message",
    [
        (Categorical(3), torch.randn(B, 4), "output has 4 logits, Categorical expects num_classes=3"),
        (Bernoulli(), torch.randn(B, 2), "Bernoulli expects one output logit per point"),
        (Gaussian(), torch.randn(B, 2), "Gaussian expects one output per point"),
    ],
    ids=["categorical", "bernoulli", "gaussian"],
)
def test_likelihood_rejects_output_of_wrong_width(likelihood, output, message):
    target = torch.zeros(B, dtype=torch.long) if isinstance(likelihood, Categorical) else torch.zeros(B)
    with pytest.raises(ValueError, match=message):
        likelihood(output, target)


def _target_for(likelihood, shape):
    return torch.zeros(shape, dtype=torch.long) if isinstance(likelihood, Categorical) else torch.zeros(shape)


LIKELIHOODS = {
    "categorical": (lambda: Categorical(3), 3),
    "bernoulli": (lambda: Bernoulli(), 1),
    "gaussian": (lambda: Gaussian(), 1),
}


@pytest.mark.parametrize("name", sorted(LIKELIHOODS))
def test_likelihood_rejects_target_with_other_number_of_points(name):
    make, width = LIKELIHOODS[name]
    likelihood = make()
    with pytest.raises(ValueError, match="target"):
        likelihood(torch.randn(B, width), _target_for(likelihood, (B + 1,)))


@pytest.mark.parametrize("name", sorted(LIKELIHOODS))
def test_likelihood_rejects_column_target(name):
    make, width = LIKELIHOODS[name]
    likelihood = make()
    with pytest.raises(ValueError, match="target"):
        likelihood(torch.randn(B, width), _target_for(likelihood, (B, 1)))


def test_check_batch_rejects_column_regression_targets():
    sampler = regression_sampler(num_data=10)
    with pytest.raises(ValueError, match="target"):
        sampler.check_batch((torch.randn(B, 3), torch.randn(B, 1)))


# ----------------------------------------------------------------- batch contents
def test_check_batch_rejects_row_mismatch():
    sampler = regression_sampler(num_data=10)
    with pytest.raises(ValueError, match="batch inputs have 5 rows but targets have 4"):
        sampler.check_batch((torch.randn(5, 3), torch.randn(4)))


def test_check_batch_rejects_non_pair():
    sampler = regression_sampler(num_data=10)
    with pytest.raises(ValueError, match=r"batch must be a pair \(inputs, targets\)"):
        sampler.check_batch((torch.randn(5, 3),))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_check_batch_rejects_non_finite_inputs(bad):
    sampler = regression_sampler(num_data=10)
    x = torch.randn(B, 3)
    x[2, 1] = bad
    with pytest.raises(ValueError, match="batch inputs contain NaN or infinite values"):
        sampler.check_batch((x, torch.randn(B)))


def test_check_batch_accepts_finite_inputs_whose_sum_overflows():
    sampler = regression_sampler(num_data=10)
    x = torch.full((B, 3), 3e38)  # finite float32 values; their sum is inf
    assert sampler.check_batch((x, torch.randn(B)))[0] is x


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_gaussian_rejects_non_finite_targets(bad):
    sampler = regression_sampler(num_data=10)
    y = torch.randn(B)
    y[0] = bad
    with pytest.raises(ValueError, match="batch targets contains NaN or infinite values"):
        sampler.check_batch((torch.randn(B, 3), y))


def test_gaussian_rejects_integer_targets():
    with pytest.raises(ValueError, match="target must be a floating-point tensor for Gaussian, got torch.int64"):
        Gaussian().check_target(torch.zeros(B, dtype=torch.long))


@pytest.mark.parametrize("labels, shown", [([0, 1, 3], r"\[0, 3\]"), ([-1, 0, 2], r"\[-1, 2\]")])
def test_categorical_rejects_labels_out_of_range(labels, shown):
    with pytest.raises(ValueError, match=rf"target has labels in {shown}, allowed range is \[0, 2\]"):
        Categorical(3).check_target(torch.tensor(labels))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_categorical_rejects_non_integer_labels(dtype):
    with pytest.raises(ValueError, match=f"target must hold integer class labels, got dtype {dtype}"):
        Categorical(3).check_target(torch.tensor([0, 1, 1]).to(dtype))


def test_categorical_labels_are_checked_in_the_batch():
    sampler = SGMCMC(MLP([2, 3, 3]), Categorical(3), num_data=10)
    with pytest.raises(ValueError, match=r"batch targets has labels in \[0, 5\], allowed range is \[0, 2\]"):
        sampler.check_batch((torch.randn(3, 2), torch.tensor([0, 5, 1])))


@pytest.mark.parametrize("labels", [[0.0, 1.0, 2.0], [0.0, 0.5, 1.0], [0.0, math.nan, 1.0], [-1.0, 0.0, 1.0]])
def test_bernoulli_rejects_non_binary_labels(labels):
    with pytest.raises(ValueError, match="target must hold binary labels 0 or 1 for Bernoulli"):
        Bernoulli().check_target(torch.tensor(labels))


def test_categorical_needs_two_classes():
    with pytest.raises(ValueError, match="num_classes must be an integer >= 2, got 1"):
        Categorical(1)


@pytest.mark.parametrize("noise_std", [0.0, -1.0])
def test_gaussian_rejects_non_positive_noise(noise_std):
    with pytest.raises(ValueError, match="noise_std must be a finite number > 0"):
        Gaussian(noise_std=noise_std)


# ----------------------------------------------------------------- step sizes and schedules
@pytest.mark.parametrize("step_size", [0.0, -1e-3, math.nan])
def test_sgmcmc_rejects_non_positive_step_size(step_size):
    with pytest.raises(ValueError, match="step_size must be a finite number > 0"):
        regression_sampler(step_size=step_size)


@pytest.mark.parametrize("step_size", [0.0, -0.1])
def test_schedule_rejects_non_positive_step_size(step_size):
    with pytest.raises(ValueError, match=f"step_size must be a finite number > 0, got {step_size}"):
        StepSizeSchedule(step_size, "polynomial")


def test_schedule_rejects_unknown_kind():
    with pytest.raises(ValueError, match="schedule must be 'constant', 'polynomial' or 'cyclical', got 'linear'"):
        regression_sampler(schedule="linear")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"decay_steps": 0}, "decay_steps must be a finite number > 0, got 0"),
        ({"decay_steps": -5.0}, "decay_steps must be a finite number > 0"),
        ({"decay_power": -0.5}, "decay_power must be a finite real number >= 0.0, got -0.5"),
        ({"cycle_length": 0}, "cycle_length must be an integer >= 1, got 0"),
        ({"cycle_length": 2.5}, "cycle_length must be an integer >= 1, got 2.5"),
        ({"cycle_length": True}, "cycle_length must be an integer >= 1, got True"),
    ],
)
def test_schedule_rejects_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        regression_sampler(schedule="cyclical", schedule_options=options)


def test_schedule_rejects_unknown_option_name():
    # A misspelt option is a TypeError naming it (Python's own keyword check), not silently ignored.
    with pytest.raises(TypeError, match="decay_step"):
        regression_sampler(schedule="polynomial", schedule_options={"decay_step": 10})


# ----------------------------------------------------------------- sampler settings
@pytest.mark.parametrize(
    "name, value, message",
    [
        ("num_chains", 0, "num_chains must be an integer >= 1, got 0"),
        ("num_chains", 2.0, "num_chains must be an integer >= 1, got 2.0"),
        ("num_chains", True, "num_chains must be an integer >= 1, got True"),
        ("burn_in", -1, "burn_in must be an integer >= 0, got -1"),
        ("thinning", 0, "thinning must be an integer >= 1, got 0"),
        ("init", "zeros", "init must be one of 'module', 'prior', 'template', 'map', got 'zeros'"),
        ("stepper", "hmc", r"stepper must be one of \['psgld', 'scale_adapted_sghmc', 'sghmc', 'sgld'\], got 'hmc'"),
    ],
)
def test_sgmcmc_rejects_bad_settings(name, value, message):
    with pytest.raises(ValueError, match=message):
        regression_sampler(**{name: value})


def test_sampler_rejects_non_module_model():
    with pytest.raises(ValueError, match="model must be an nn.Module, got function"):
        SGMCMC(lambda x: x, Gaussian())


def test_sampler_rejects_non_likelihood():
    with pytest.raises(ValueError, match="likelihood must be a lit_bayes.posterior.Likelihood, got MSELoss"):
        SGMCMC(nn.Linear(3, 1), nn.MSELoss())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"optimizer": "rms_prop"}, r"optimizer must be one of \[.*'adam'.*'rmsprop'.*\], got 'rms_prop'"),
        ({"lr": 0.0}, "lr must be a finite number > 0, got 0.0"),
        ({"lr": -0.1}, "lr must be a finite number > 0, got -0.1"),
        ({"lr": "0.1"}, "lr must be a finite number > 0, got '0.1'"),
        ({"optimizer_options": 0.9}, "optimizer_options must be a dict of adam's arguments, got 0.9"),
    ],
)
@pytest.mark.parametrize("build", [
    lambda **kw: MAP(nn.Linear(3, 1), Gaussian(), **kw),
    lambda **kw: SWAG(nn.Linear(3, 1), Gaussian(), **kw),
    lambda **kw: OHSMC(PartialMLP([3, 4, 1], 1), Gaussian(), num_particles=4, **kw),
    lambda **kw: MeanFieldVB(PartialMLP([3, 4, 1], 1), Gaussian(), **kw),
], ids=["map", "swag", "ohsmc", "vb"])
def test_optimisers_reject_bad_optimizer_settings(build, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build(**kwargs)


# ----------------------------------------------------------------- prior and posterior
@pytest.mark.parametrize("variance", [0.0, -1.0, math.nan])
def test_prior_rejects_non_positive_variance(variance):
    with pytest.raises(ValueError, match="variance must be a finite number > 0"):
        GaussianPrior(variance)


@pytest.mark.parametrize("variance", [0.0, -2.0, math.nan])
def test_prior_rejects_non_positive_group_variance(variance):
    with pytest.raises(ValueError, match=rf"group_variances\['\*.bias'\] must be a number > 0 \(inf: flat\), got {variance}"):
        GaussianPrior(1.0, group_variances={"net.*.weight": 2.0, "*.bias": variance})


def test_flat_prior_group_adds_nothing_and_cannot_be_sampled():
    prior = GaussianPrior(1.0, group_variances={"net.psi": math.inf})
    params = {"net.psi": torch.full((3, 2), 5.0), "net.phi": torch.zeros(3, 1)}
    torch.testing.assert_close(prior(params), prior({"net.phi": params["net.phi"]}))
    torch.testing.assert_close(prior({"net.psi": params["net.psi"]}), torch.zeros(3))
    with pytest.raises(ValueError, match="flat"):
        prior.sample(params)


@pytest.mark.parametrize("temperature", [0.0, -1.0, math.nan])
def test_posterior_rejects_non_positive_temperature(temperature):
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        Posterior(Gaussian(), GaussianPrior(), num_data=10, temperature=temperature)


@pytest.mark.parametrize("num_data", [0, -3, 10.0])
def test_posterior_rejects_bad_num_data(num_data):
    with pytest.raises(ValueError, match=rf"num_data must be an integer >= 1, got {num_data!r}"):
        Posterior(Gaussian(), GaussianPrior(), num_data=num_data)


def test_posterior_rejects_bool_num_data():
    with pytest.raises(ValueError, match="num_data must be an integer >= 1"):
        Posterior(Gaussian(), GaussianPrior(), num_data=True)


def test_posterior_rejects_unknown_minibatch_scaling():
    with pytest.raises(ValueError, match="minibatch_scaling must be 'rescaled' or 'sum', got 'mean'"):
        Posterior(Gaussian(), GaussianPrior(), num_data=10, minibatch_scaling="mean")


def test_posterior_rescaled_without_num_data():
    posterior = Posterior(Gaussian(), GaussianPrior(), num_data=None, minibatch_scaling="rescaled")
    with pytest.raises(ValueError, match="num_data is not set: pass num_data or use a DataModule that exposes num_train"):
        posterior.energy(torch.zeros(1, B), torch.zeros(1))


def test_fit_without_num_data_and_without_datamodule():
    loader = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8)), batch_size=4)
    with pytest.raises(ValueError, match="num_data is not set"):
        trainer(max_steps=2).fit(regression_sampler(), train_dataloaders=loader)


# ----------------------------------------------------------------- runtime failures
def test_nan_energy_mid_run_names_the_step():
    sampler = SGMCMC(nn.Linear(3, 1), Gaussian(noise_std=0.1), step_size=1e3, seed=0)
    with pytest.raises(FloatingPointError, match=r"at step \d+ .*step size is likely too large"):
        trainer(max_steps=100).fit(sampler, datamodule=tiny_regression())
    assert 0 < sampler.global_step < 100  # it stopped mid-run, not at the end


# ----------------------------------------------------------------- chains, samples, predictive
def test_chain_state_rejects_mismatched_leading_dims():
    with pytest.raises(ValueError, match=r"same leading \(chain\) dimension, got \[2, 3\]"):
        ChainState({"w": torch.zeros(2, 4), "b": torch.zeros(3)})


def test_chain_state_rejects_empty_params():
    with pytest.raises(ValueError, match="params is empty"):
        ChainState({})


def test_chain_state_unflatten_rejects_wrong_width():
    chains = ChainState({"w": torch.zeros(2, 4), "b": torch.zeros(2)})
    with pytest.raises(ValueError, match="flat holds 6 values per sample, the chains have 5 parameters"):
        chains.unflatten(torch.zeros(3, 6))


def test_posterior_samples_rejects_unknown_mode():
    with pytest.raises(ValueError, match="mode must be 'memory' or 'disk', got 'gpu'"):
        PosteriorSamples(mode="gpu")


@pytest.mark.parametrize("kwargs, message", [
    ({"max_draws": 0}, "max_draws must be an integer >= 1, got 0"),
    ({"max_draws": True}, "max_draws must be an integer >= 1, got True"),
    ({"policy": "first"}, "policy must be 'last' or 'reservoir', got 'first'"),
])
def test_posterior_samples_rejects_bad_memory_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PosteriorSamples(**kwargs)


def test_memory_store_too_large_states_the_gib():
    # Called directly on a sampler whose chains exist: 10**6 draws x 2 chains x 4 parameters x 4 bytes.
    sampler = regression_sampler(num_chains=2, num_data=10)
    sampler.chains = ChainState(sampler.initial_state(torch.Generator().manual_seed(0)))
    store = PosteriorSamples(max_draws=10**6, max_bytes=2**20)
    with pytest.raises(ValueError, match=r"would need 0\.03 GiB for max_draws=1000000 of 2 chains x 4 parameters"):
        store.on_fit_start(None, sampler)


def test_memory_store_too_large_is_refused_by_trainer_fit():
    store = PosteriorSamples(max_draws=10**6, max_bytes=2**20)
    with pytest.raises(ValueError, match=r"GiB"):
        trainer(max_steps=2, callbacks=[store]).fit(regression_sampler(num_chains=2), datamodule=tiny_regression())


def test_predictive_marginal_rejects_bad_chunk_size():
    with pytest.raises(ValueError, match="chunk_size must be an integer >= 1, got 0"):
        PredictiveMarginal(chunk_size=0)


def test_marginal_predictive_rejects_bad_chunk_size():
    sampler = regression_sampler(num_data=10)
    samples = sampler.initial_state(torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="chunk_size must be an integer >= 1, got 0"):
        marginal_predictive(sampler, samples, uniform_log_weights(1), torch.randn(B, 3), chunk_size=0)
    with pytest.raises(ValueError, match="tile_points must be an integer >= 1, got 0"):
        marginal_predictive(sampler, samples, uniform_log_weights(1), torch.randn(B, 3), tile_points=0)


# ----------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def sgmcmc_checkpoint(tmp_path_factory):
    """A checkpoint of SGMCMC(MLP([2, 4, 2]), 2 chains) after two steps on tiny two moons."""
    path = tmp_path_factory.mktemp("ckpt") / "sgmcmc.ckpt"
    fit = trainer(max_steps=2)
    fit.fit(SGMCMC(MLP([2, 4, 2]), Categorical(2), num_chains=2, seed=0), datamodule=tiny_moons())
    fit.save_checkpoint(path)
    return path


def test_checkpoint_of_another_sampler_class_is_refused(sgmcmc_checkpoint):
    model = MAP(MLP([2, 4, 2]), Categorical(2), num_chains=2)
    with pytest.raises(ValueError, match="checkpoint was written by sampler SGMCMC, cannot load it into MAP"):
        trainer(max_steps=4).fit(model, datamodule=tiny_moons(), ckpt_path=sgmcmc_checkpoint)


def test_on_load_checkpoint_refuses_another_sampler_class(sgmcmc_checkpoint):
    checkpoint = torch.load(sgmcmc_checkpoint, weights_only=True)
    with pytest.raises(ValueError, match="written by sampler SGMCMC"):
        MAP(MLP([2, 4, 2]), Categorical(2), num_chains=2).on_load_checkpoint(checkpoint)


@pytest.mark.parametrize(
    "widths, num_chains, message",
    [
        ([2, 4, 2], 3, r"net.layers.0.weight with shape \(2, 4, 2\) \(chains first\), this sampler has \(3, 4, 2\)"),
        ([2, 5, 2], 2, r"net.layers.0.weight with shape \(2, 4, 2\) \(chains first\), this sampler has \(2, 5, 2\)"),
    ],
    ids=["num_chains", "width"],
)
def test_checkpoint_of_another_shape_is_refused(sgmcmc_checkpoint, widths, num_chains, message):
    model = SGMCMC(MLP(widths), Categorical(2), num_chains=num_chains)
    with pytest.raises(ValueError, match=message + ": another model shape or num_chains"):
        trainer(max_steps=4).fit(model, datamodule=tiny_moons(), ckpt_path=sgmcmc_checkpoint)


def test_checkpoint_with_other_parameter_names_is_refused(sgmcmc_checkpoint):
    # Loaded into a sampler that has no chains yet (e.g. outside Trainer.fit): the names are compared.
    checkpoint = torch.load(sgmcmc_checkpoint, weights_only=True)
    model = SGMCMC(nn.Sequential(nn.Linear(2, 4), nn.Sigmoid(), nn.Linear(4, 2)), Categorical(2), num_chains=2)
    with pytest.raises(ValueError, match="checkpoint parameters do not match this model: differing names"):
        model.on_load_checkpoint(checkpoint)


# ------------------------------------------------------------- found in review
def test_block_gibbs_incremental_rejects_inplace_activations():
    from lit_bayes import BlockGibbs

    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(inplace=True), nn.Linear(4, 2))
    with pytest.raises(ValueError, match="out-of-place activations.*ReLU"):
        BlockGibbs(model, Categorical(2), num_chains=2).setup("fit")


def test_block_gibbs_rejects_non_numeric_proposal_variance():
    from lit_bayes import BlockGibbs

    with pytest.raises(ValueError, match="proposal_variance must be a number or a list of numbers"):
        BlockGibbs(nn.Linear(3, 1), Gaussian(1.0), proposal_variance=object(), num_chains=2).setup("fit")


def test_autocorrelation_time_of_a_chain_that_never_moves_is_an_error():
    from lit_bayes.diagnostics import integrated_autocorrelation_time

    trace = torch.randn(3, 50)
    trace[1] = 0.5
    with pytest.raises(ValueError, match="never moves"):
        integrated_autocorrelation_time(trace)


def test_generic_outputs_reject_template_names_the_model_does_not_have():
    """A sampler that names a partial BNN's phi relative to its wrapped network (``net.2.weight`` for the model's
    ``net.net.2.weight``) but keeps the generic outputs would evaluate the template phi for every chain."""

    class NetRelativeNames(SGMCMC):
        def template_parameters(self):
            return {f"net.{n}": p for n, p in self.model.stochastic_parameters().items()}

    model = PartialMLP([2, 4, 3, 1], 1)
    with pytest.raises(ValueError, match=r"names \['net.2.bias', 'net.2.weight'\], which are no parameters of the "
                                         r"model .*subclass PartialBNNSampler"):
        NetRelativeNames(model, Gaussian(), num_data=10).setup("fit")
    SGMCMC(model, Gaussian(), num_data=10).setup("fit")  # the model's own names
