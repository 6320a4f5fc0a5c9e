"""Plain ``nn.Module`` networks used by the samplers."""
from lit_bayes.models.activations import TanhGELU
from lit_bayes.models.crescent import Crescent
from lit_bayes.models.mlp import MLP
from lit_bayes.models.noisy_cnn import NoisyCNN
from lit_bayes.models.noisy_mlp import MultinomialProbit, NoisyMLP
from lit_bayes.models.partial_bnn import PartialBNN, PartialMLP
from lit_bayes.models.partial_convnet import PartialConvNet
from lit_bayes.models.partial_from_run import PartialFromRun
from lit_bayes.models.resnet import FrozenBatchNorm2d, ResNet20
from lit_bayes.models.small_cnn import SmallCNN

__all__ = ["Crescent", "FrozenBatchNorm2d", "MLP", "MultinomialProbit", "NoisyCNN", "NoisyMLP", "PartialBNN", "PartialConvNet", "PartialFromRun", "PartialMLP", "ResNet20", "SmallCNN", "TanhGELU"]
