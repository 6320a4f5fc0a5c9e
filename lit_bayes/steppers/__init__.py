"""Optimizer-like steppers: each ``step`` advances every chain by one transition."""
from lit_bayes.steppers.block_metropolis import BlockMetropolis
from lit_bayes.steppers.feynman_kac import OHSMCStepper, SGSMCStepper
from lit_bayes.steppers.hmc import HMCStepper
from lit_bayes.steppers.noisy_gibbs import NoisyGibbsStepper
from lit_bayes.steppers.noisy_gibbs_conv import NoisyConvGibbsStepper
from lit_bayes.steppers.psgld import PSGLD
from lit_bayes.steppers.scale_adapted_sghmc import ScaleAdaptedSGHMC
from lit_bayes.steppers.sghmc import SGHMC
from lit_bayes.steppers.sgld import SGLD
from lit_bayes.steppers.structured import StructuredEnergy

__all__ = [
    "BlockMetropolis", "HMCStepper", "NoisyConvGibbsStepper", "NoisyGibbsStepper", "OHSMCStepper", "PSGLD", "SGHMC",
    "SGLD", "SGSMCStepper", "ScaleAdaptedSGHMC", "StructuredEnergy",
]
