"""UCI tables standardised as in the Feynman-Kac paper's code (Zhao et al., AISTATS 2024, Sec. 4.3, App. C).

Feynman-kac spec §6.3: the rows are permuted and cut 60% / 30% / 10% into train / validation /
test, and the features (and regression targets) are standardised with the mean and std of the
*whole* data set, before the split. :class:`TabularCSV` standardises with training statistics
only; :class:`UCICSV` adds the whole-data choice and makes it the default.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from .base import Task, check_choice
from .tabular import TabularCSV

__all__ = ["UCICSV"]


class UCICSV(TabularCSV):
    """:class:`TabularCSV` whose standardisation statistics come from every row (the paper's) or
    from the training split.

    Args:
        stats_from: ``"all"``: mean and std (ddof 0) over all rows, before the split (the
            Feynman-Kac code, spec §6.3); ``"train"``: the training split only (as
            :class:`TabularCSV`). A feature constant over those rows is only centred.
        other arguments: as :class:`TabularCSV` (defaults: 60/30/10 splits, batch size 50).
    """

    def __init__(
        self,
        path: str | Path,
        target: str,
        task: Task = "regression",
        num_classes: int | None = None,
        splits: Sequence[float] = (0.6, 0.3, 0.1),
        split_column: str | None = None,
        standardize: bool = True,
        stats_from: Literal["all", "train"] = "all",
        batch_size: int | None = 50,
        eval_batch_size: int | None = None,
        seed: int = 0,
        delimiter: str = ",",
        num_workers: int = 0,
        drop_last: bool | None = None,
    ) -> None:
        check_choice("stats_from", stats_from, ("all", "train"))
        super().__init__(
            path, target, task, num_classes, splits, split_column, standardize, batch_size, eval_batch_size, seed,
            delimiter, num_workers, drop_last,
        )
        self.stats_from = stats_from

    def load(self) -> dict[str, tuple[Tensor, Tensor]]:
        if self.stats_from == "train" or not self.standardize:
            return super().load()
        feature_mean, feature_std = self._x.mean(axis=0), self._x.std(axis=0)
        feature_std[feature_std == 0] = 1.0
        target_mean, target_std = 0.0, 1.0
        if self.task == "regression":
            target_mean, target_std = float(self._y.mean()), float(self._y.std()) or 1.0
        self.feature_mean = torch.from_numpy(feature_mean).float()
        self.feature_std = torch.from_numpy(feature_std).float()
        self.target_mean, self.target_std = target_mean, target_std
        x = (self._x - feature_mean) / feature_std
        y = self._y if self.task == "classification" else (self._y - target_mean) / target_std
        y_dtype = torch.int64 if self.task == "classification" else torch.float32
        return {
            split: (torch.from_numpy(x[rows]).float(), torch.from_numpy(y[rows]).to(y_dtype))
            for split, rows in self._split_indices().items()
        }
