"""Lightning callbacks of lit_bayes (installed as ``lit_bayes.callbacks``)."""
from lit_bayes.callbacks.chain_diagnostics import ChainDiagnostics
from lit_bayes.callbacks.plots import DiagnosticPlots
from lit_bayes.callbacks.posterior_samples import PosteriorSamples
from lit_bayes.callbacks.predictive_marginal import PredictiveMarginal
from lit_bayes.callbacks.run_summary import RunSummary
from lit_bayes.callbacks.uncertainty_metrics import UncertaintyMetrics

__all__ = [
    "ChainDiagnostics",
    "DiagnosticPlots",
    "PosteriorSamples",
    "PredictiveMarginal",
    "RunSummary",
    "UncertaintyMetrics",
]
