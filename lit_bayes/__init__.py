"""lit_bayes: Lightning samplers for Bayesian neural network posteriors."""
from lit_bayes.posterior import Bernoulli, Categorical, Gaussian, GaussianPrior, Posterior
from lit_bayes.samplers import HMC, MALA, MAP, SGMCMC, SamplerModule

__all__ = ["Bernoulli", "Categorical", "Gaussian", "GaussianPrior", "HMC", "MALA", "MAP", "Posterior", "SGMCMC", "SamplerModule"]
__version__ = "0.1.0"
