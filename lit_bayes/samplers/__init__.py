"""Sampler LightningModules, one file per family."""
from lit_bayes.samplers.base import SamplerModule
from lit_bayes.samplers.block_gibbs import BlockGibbs
from lit_bayes.samplers.feynman_kac import OHSMC, SGSMC
from lit_bayes.samplers.hmc import HMC, MALA
from lit_bayes.samplers.map import MAP
from lit_bayes.samplers.noisy_gibbs import NoisyGibbs
from lit_bayes.samplers.noisy_hmc import IntermediateHMC, IntermediateMALA
from lit_bayes.samplers.replica_exchange import ReplicaExchangeSGMCMC
from lit_bayes.samplers.sgmcmc import SGMCMC
from lit_bayes.samplers.structured_sgmcmc import StructuredSGMCMC
from lit_bayes.samplers.swag import SWAG
from lit_bayes.samplers.variational import MeanFieldVB

__all__ = ["BlockGibbs", "HMC", "IntermediateHMC", "IntermediateMALA", "MALA", "MAP", "MeanFieldVB", "NoisyGibbs",
           "OHSMC", "ReplicaExchangeSGMCMC", "SGMCMC", "SGSMC", "SWAG", "SamplerModule", "StructuredSGMCMC"]
