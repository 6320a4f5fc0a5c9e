"""LightningDataModules for the papers' data sets (see :mod:`lit_bayes.data.base` for the shared contract)."""
from .arrays import ArrayDataModule
from .base import BayesDataModule, EpochBatchSampler, IndexedTensors
from .bundled import ScikitLearnData
from .crescent import CrescentData
from .images import TorchvisionImages
from .ood import FarAwayPoints
from .stand_ins import ClassPrototypes, CorrelatedLinearRegression, RandomFeatureRegression
from .synthetic import LinearRegression, NoisyXOR, SyntheticRegression, TwoMoons
from .tabular import TabularCSV
from .teacher_student import TeacherStudent
from .uci import UCICSV

__all__ = [
    "ArrayDataModule",
    "BayesDataModule",
    "ClassPrototypes",
    "CorrelatedLinearRegression",
    "CrescentData",
    "EpochBatchSampler",
    "FarAwayPoints",
    "IndexedTensors",
    "LinearRegression",
    "NoisyXOR",
    "RandomFeatureRegression",
    "ScikitLearnData",
    "SyntheticRegression",
    "TabularCSV",
    "TeacherStudent",
    "TorchvisionImages",
    "TwoMoons",
    "UCICSV",
]
