"""Plain ``nn.Module`` networks used by the samplers."""
from lit_bayes.models.mlp import MLP

__all__ = ["MLP"]
