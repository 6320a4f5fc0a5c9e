"""Plain ``nn.Module`` networks used by the samplers."""
from lit_bayes.models.mlp import MLP
from lit_bayes.models.resnet import FrozenBatchNorm2d, ResNet20

__all__ = ["FrozenBatchNorm2d", "MLP", "ResNet20"]
