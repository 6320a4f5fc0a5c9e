"""Real tabular data that installs offline: the sets scikit-learn ships inside its wheel, as a DataModule.

:class:`ScikitLearnData` loads one of scikit-learn's bundled sets (no download) and hands it to
:class:`~lit_bayes.data.ArrayDataModule`, which cuts the seeded train/validation/test splits and
standardises with training statistics. scikit-learn is an optional dependency (the ``[data]`` extra).
"""
from __future__ import annotations

from typing import Literal, Optional

from .arrays import ArrayDataModule, Standardize
from .base import check_choice

__all__ = ["ScikitLearnData", "BUNDLED_SETS"]

#: name -> (scikit-learn loader, task)
BUNDLED_SETS = {
    "digits": ("load_digits", "classification"),
    "breast_cancer": ("load_breast_cancer", "classification"),
    "wine": ("load_wine", "classification"),
    "iris": ("load_iris", "classification"),
    "diabetes": ("load_diabetes", "regression"),
}


def _load(name: str):
    try:
        import sklearn.datasets
    except ImportError as err:  # an optional dependency
        raise ImportError(
            "ScikitLearnData needs scikit-learn: pip install 'lit-bayes[data]' (or pip install scikit-learn)"
        ) from err
    return getattr(sklearn.datasets, BUNDLED_SETS[name][0])(return_X_y=True)


class ScikitLearnData(ArrayDataModule):
    """One of scikit-learn's bundled data sets, split and standardised as :class:`ArrayDataModule` does.

    ``digits`` (1,797 8x8 images as 64 features, 10 classes), ``breast_cancer`` (569 x 30, 2 classes),
    ``wine`` (178 x 13, 3 classes), ``iris`` (150 x 4, 3 classes), ``diabetes`` (442 x 10, regression;
    targets standardised with training statistics). The split is a permutation seeded by ``seed``:
    ``round(test_fraction * n)`` test points, ``round(val_fraction * n)`` validation points, the rest for
    training; the same seed gives the same split on every machine.

    Args:
        name: one of the sets above.
        val_fraction, test_fraction: the validation and test shares (default 0.2 and 0.3).
        standardize: ``"per_feature"`` (default), ``"global"`` or ``"none"``.
        batch_size: training batch size; ``None`` = full batch.
        eval_batch_size, seed, num_workers, drop_last: as :class:`ArrayDataModule`.
    """

    def __init__(
        self,
        name: Literal["digits", "breast_cancer", "wine", "iris", "diabetes"],
        val_fraction: float = 0.2,
        test_fraction: float = 0.3,
        standardize: Standardize = "per_feature",
        batch_size: Optional[int] = 50,
        eval_batch_size: Optional[int] = None,
        seed: int = 0,
        num_workers: int = 0,
        drop_last: Optional[bool] = None,
    ) -> None:
        check_choice("name", name, tuple(BUNDLED_SETS))
        x, y = _load(name)
        super().__init__(
            task=BUNDLED_SETS[name][1], x=x, y=y, val_fraction=val_fraction, test_fraction=test_fraction,
            standardize=standardize, batch_size=batch_size, eval_batch_size=eval_batch_size, seed=seed,
            num_workers=num_workers, drop_last=drop_last,
        )
        self.name = name
