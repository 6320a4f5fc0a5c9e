"""lit_bayes: Lightning samplers for Bayesian neural network posteriors.

The names below are loaded on first use (PEP 562), so ``import lit_bayes`` and the ``lit-bayes --help``
that imports it do not load torch or Lightning. Importing any sampler (``lit_bayes.SGMCMC``,
``lit_bayes.samplers``) registers the strategy name ``"chain_parallel"`` with Lightning.
"""
from __future__ import annotations

import importlib

# each public name and the submodule that defines it
_EXPORTS = {
    **dict.fromkeys(("Bernoulli", "Categorical", "Gaussian", "GaussianPrior", "Posterior"), "lit_bayes.posterior"),
    **dict.fromkeys(("BlockGibbs", "HMC", "IntermediateHMC", "IntermediateMALA", "MALA", "MAP", "MeanFieldVB",
                     "NoisyGibbs", "OHSMC", "ReplicaExchangeSGMCMC", "SGMCMC", "SGSMC", "SWAG", "SamplerModule",
                     "StructuredSGMCMC"), "lit_bayes.samplers"),
    "LearnedScalePrior": "lit_bayes.prior_scales",
    "load_run": "lit_bayes.run_loading",
    **dict.fromkeys(("run_to_arviz", "to_arviz"), "lit_bayes.arviz_export"),
}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    """Import the submodule that defines ``name`` on first access, and keep the name here."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'lit_bayes' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
