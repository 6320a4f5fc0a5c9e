"""lit_bayes: Lightning samplers for Bayesian neural network posteriors."""
from lit_bayes.posterior import Bernoulli, Categorical, Gaussian, GaussianPrior, Posterior
from lit_bayes import strategy  # registers the strategy name "chain_parallel" with Lightning
from lit_bayes.samplers import HMC, MALA, IntermediateHMC, IntermediateMALA, MAP, OHSMC, NoisyGibbs, SGMCMC, SGSMC, BlockGibbs, SamplerModule, StructuredSGMCMC
from lit_bayes.run_loading import load_run

__all__ = ["Bernoulli", "BlockGibbs", "Categorical", "Gaussian", "GaussianPrior", "HMC", "IntermediateHMC", "IntermediateMALA", "MALA", "MAP", "NoisyGibbs", "OHSMC", "Posterior", "SGMCMC", "SGSMC", "SamplerModule", "StructuredSGMCMC", "load_run"]
__version__ = "0.1.0"
