"""UCI-style tables from a CSV file (feynman-kac spec §6.3, structured-sgmcmc spec §6.4).

The file is read with the standard library ``csv`` module when the DataModule is built, so bad
files fail early with the offending column and row; splitting and standardisation happen in
:meth:`TabularCSV.setup`.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .base import BayesDataModule, Task, check_choice
from lit_bayes.validation import check_bool, check_float, check_int

__all__ = ["TabularCSV"]

MISSING = {"", "na", "n/a", "nan", "null", "none", "?"}
SPLIT_NAMES = ("train", "val", "test")


class TabularCSV(BayesDataModule):
    """A CSV table with a header row: one target column, every other column a numeric feature.

    Rows are numbered as lines of the file (the header is row 1) in error messages.

    Splits: without ``split_column`` the rows are permuted with ``seed`` and cut into
    ``splits = (train, val, test)`` fractions. The default ``(0.6, 0.3, 0.1)`` is the
    Feynman-Kac paper's UCI protocol (spec §6.3: 60% train, 30% validation, 10% test); the
    structured SG-MCMC paper uses ``(0.75, 0.1, 0.15)`` (its spec §6.4). The val and test counts
    are ``round(fraction * n)``; train gets the rest. With ``split_column``, that column holds
    ``train``/``val``/``test`` per row (case-insensitive) and ``splits`` is not used.

    Standardisation (``standardize=True``): features, and regression targets, are centred and
    scaled with the mean and std (ddof 0) of the **training split only** (the Feynman-Kac code uses
    whole-data statistics instead). A feature that is constant on the training split is only
    centred. ``target_mean``/``target_std`` (0 and 1 without standardisation) map standardised
    predictions back: ``y = y_std * target_std + target_mean`` (:meth:`unstandardize_target`).

    Args:
        path: the CSV file.
        target: name of the target column.
        task: ``"regression"`` (float targets) or ``"classification"`` (integer labels
            ``0..num_classes-1``).
        num_classes: classification only; ``None`` infers ``max label + 1``.
        splits: ``(train, val, test)`` fractions, each in [0, 1], train > 0, summing to 1.
        split_column: optional column naming each row's split; it is not a feature.
        standardize: standardise with training statistics (see above).
        batch_size: training batch size (the paper uses 50, or 20 for small sets); ``None`` =
            full batch.
        eval_batch_size: val/test batch size; ``None`` = one batch.
        seed: seed of the random split and of the shuffle.
        delimiter: the one-character field separator.
        num_workers: DataLoader workers.
        drop_last: drop a smaller last training batch (default: under sum scaling only; see
            :class:`~lit_bayes.data.base.BayesDataModule`).

    Attributes:
        feature_names: the feature columns, in file order.
        feature_mean, feature_std: float32 tensors ``(d,)`` (after :meth:`setup`).
        target_mean, target_std: floats (after :meth:`setup`).
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
        batch_size: int | None = 50,
        eval_batch_size: int | None = None,
        seed: int = 0,
        delimiter: str = ",",
        num_workers: int = 0,
        drop_last: bool | None = None,
    ) -> None:
        check_choice("task", task, ("classification", "regression"))
        if not isinstance(delimiter, str) or len(delimiter) != 1:
            raise ValueError(f"delimiter must be a single character, got {delimiter!r}")
        check_bool("standardize", standardize)
        if split_column is None:
            self.splits = _check_splits(splits)
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"path: no CSV file at {str(path)!r}")
        table = _read_table(path, target, split_column, delimiter)
        self.feature_names, self._x, self._y, self._split_of_row, self._rows = table
        if task == "classification":
            num_classes = _check_labels(self._y, self._rows, num_classes, target)
        super().__init__(
            task=task,
            num_classes=num_classes,
            input_shape=(len(self.feature_names),),
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            seed=seed,
            num_workers=num_workers,
            drop_last=drop_last,
        )
        self.path = path
        self.target = target
        self.split_column = split_column
        self.standardize = standardize

    def load(self) -> dict[str, tuple[Tensor, Tensor]]:
        index = self._split_indices()
        train_x, train_y = self._x[index["train"]], self._y[index["train"]]
        if self.standardize:
            feature_mean, feature_std = train_x.mean(axis=0), train_x.std(axis=0)
            feature_std[feature_std == 0] = 1.0
        else:
            feature_mean, feature_std = np.zeros(self._x.shape[1]), np.ones(self._x.shape[1])
        target_mean, target_std = 0.0, 1.0
        if self.standardize and self.task == "regression" and len(train_y):
            target_mean, target_std = float(train_y.mean()), float(train_y.std()) or 1.0
        self.feature_mean = torch.from_numpy(feature_mean).float()
        self.feature_std = torch.from_numpy(feature_std).float()
        self.target_mean, self.target_std = target_mean, target_std
        y_dtype = torch.int64 if self.task == "classification" else torch.float32
        out = {}
        for split, rows in index.items():
            x = (self._x[rows] - feature_mean) / feature_std
            y = self._y[rows] if self.task == "classification" else (self._y[rows] - target_mean) / target_std
            out[split] = (torch.from_numpy(x).float(), torch.from_numpy(y).to(y_dtype))
        return out

    def input_transform(self) -> dict[str, Tensor]:
        """The training split's feature mean and std."""
        return {"mean": self.feature_mean, "std": self.feature_std}

    def unstandardize_target(self, y: Tensor) -> Tensor:
        """Map standardised regression targets or predictions back to the file's units."""
        return y * self.target_std + self.target_mean

    def _split_indices(self) -> dict[str, np.ndarray]:
        n = len(self._y)
        if self.split_column is not None:
            return {split: np.flatnonzero(self._split_of_row == split) for split in SPLIT_NAMES}
        _, val_fraction, test_fraction = self.splits
        num_val, num_test = round(val_fraction * n), round(test_fraction * n)
        num_train = n - num_val - num_test
        if num_train < 1:
            raise ValueError(f"splits={self.splits} leave no training row out of {n} rows; raise the train fraction")
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed)).numpy()
        return {
            "train": order[:num_train],
            "val": order[num_train : num_train + num_val],
            "test": order[num_train + num_val :],
        }


def _check_splits(splits: object) -> tuple[float, float, float]:
    allowed = "three fractions (train, val, test), each in [0, 1], train > 0, summing to 1"
    if isinstance(splits, (str, bytes)) or not isinstance(splits, Sequence) or len(splits) != 3:
        raise ValueError(f"splits must be {allowed}; got {splits!r}")
    values = tuple(check_float(f"splits[{i}]", f, minimum=0.0) for i, f in enumerate(splits))
    if values[0] <= 0 or max(values) > 1 or not math.isclose(sum(values), 1.0, abs_tol=1e-6):
        raise ValueError(f"splits must be {allowed}; got {splits!r} (sum {sum(values):g})")
    return values


def _read_table(
    path: Path, target: str, split_column: str | None, delimiter: str
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Parse the CSV into features, target, split names and file row numbers."""
    with path.open(newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        header = [name.strip() for name in next(reader, [])]
        if not header or header == [""]:
            raise ValueError(f"path: {str(path)!r} is empty; a header row with column names is needed")
        duplicates = sorted({name for name in header if header.count(name) > 1})
        if duplicates:
            raise ValueError(f"path: {str(path)!r} has duplicate column names {duplicates}")
        for argument, name in (("target", target), ("split_column", split_column)):
            if name is not None and name not in header:
                raise ValueError(f"{argument}: no column {name!r} in {str(path)!r}; columns are {header}")
        if split_column == target:
            raise ValueError(f"split_column must differ from target, both are {target!r}")
        features = [name for name in header if name not in (target, split_column)]
        values, split_of_row, row_numbers = [], [], []
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            line = reader.line_num
            if len(row) != len(header):
                raise ValueError(f"row {line} of {str(path)!r} has {len(row)} fields, the header has {len(header)}")
            cells = dict(zip(header, (cell.strip() for cell in row)))
            if split_column is not None:
                split = cells[split_column].lower()
                if split not in SPLIT_NAMES:
                    raise ValueError(
                        f"split_column {split_column!r}: row {line} holds {cells[split_column]!r}, "
                        f"allowed are {', '.join(SPLIT_NAMES)}"
                    )
                split_of_row.append(split)
            values.append([_number(cells[name], name, name == target, line) for name in features + [target]])
            row_numbers.append(line)
    if not values:
        raise ValueError(f"path: {str(path)!r} has a header but no data rows")
    if not features:
        raise ValueError(f"path: {str(path)!r} has no feature column besides target {target!r}")
    table = np.asarray(values, dtype=np.float64)
    return features, table[:, :-1], table[:, -1], np.asarray(split_of_row), np.asarray(row_numbers)


def _number(cell: str, column: str, is_target: bool, line: int) -> float:
    kind = "target column" if is_target else "feature column"
    if cell.lower() in MISSING:
        raise ValueError(f"{kind} {column!r}: missing value {cell!r} at row {line}; fill or drop it")
    try:
        value = float(cell)
    except ValueError:
        raise ValueError(
            f"{kind} {column!r} is not numeric: row {line} holds {cell!r}; drop the column or encode it as numbers"
        ) from None
    if not math.isfinite(value):
        raise ValueError(f"{kind} {column!r}: non-finite value {cell!r} at row {line}")
    return value


def _check_labels(labels: np.ndarray, rows: np.ndarray, num_classes: int | None, target: str) -> int:
    """Check classification labels are integers in range; return ``num_classes`` (inferred if None)."""
    fractional = np.flatnonzero(labels != np.round(labels))
    if fractional.size:
        i = fractional[0]
        raise ValueError(f"target column {target!r}: row {rows[i]} holds {labels[i]:g}, class labels must be integers")
    if num_classes is None:
        num_classes = int(labels.max()) + 1
        if num_classes < 2:
            raise ValueError(f"target column {target!r}: labels span only {num_classes} class(es), need >= 2")
    check_int("num_classes", num_classes, 2)
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if bad.size:
        i = bad[0]
        raise ValueError(
            f"target column {target!r}: row {rows[i]} holds label {labels[i]:g}, allowed are 0..{num_classes - 1}"
        )
    return num_classes
