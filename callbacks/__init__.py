"""Lightning callbacks of lit_bayes (installed as ``lit_bayes.callbacks``)."""
from lit_bayes.callbacks.acceptance_monitor import AcceptanceMonitor
from lit_bayes.callbacks.chain_diagnostics import ChainDiagnostics
from lit_bayes.callbacks.chain_stacking import ChainStacking
from lit_bayes.callbacks.coordinate_mixing import CoordinateMixing
from lit_bayes.callbacks.lr_decay import ExponentialLRDecay
from lit_bayes.callbacks.map_baseline import MAPBaseline
from lit_bayes.callbacks.ood_metrics import OODMetrics
from lit_bayes.callbacks.plots import DiagnosticPlots
from lit_bayes.callbacks.posterior_samples import PosteriorSamples
from lit_bayes.callbacks.predictive_marginal import PredictiveMarginal
from lit_bayes.callbacks.progress_log import ProgressLog
from lit_bayes.callbacks.run_checkpoint import RunCheckpoint
from lit_bayes.callbacks.run_health import RunHealth
from lit_bayes.callbacks.run_summary import RunSummary
from lit_bayes.callbacks.sample_store import read_disk_store
from lit_bayes.callbacks.thermalization import ThermalizationCheck
from lit_bayes.callbacks.uncertainty_metrics import UncertaintyMetrics

__all__ = [
    "AcceptanceMonitor",
    "ChainDiagnostics",
    "ChainStacking",
    "CoordinateMixing",
    "DiagnosticPlots",
    "ExponentialLRDecay",
    "MAPBaseline",
    "OODMetrics",
    "PosteriorSamples",
    "PredictiveMarginal",
    "ProgressLog",
    "RunCheckpoint",
    "RunHealth",
    "RunSummary",
    "ThermalizationCheck",
    "UncertaintyMetrics",
    "read_disk_store",
]
