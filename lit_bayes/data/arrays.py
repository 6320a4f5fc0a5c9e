"""Your own data from memory or from ``.npz`` / ``.npy`` files: :class:`ArrayDataModule`.

The arrays are read, converted and checked when the DataModule is built, so bad input fails early
with the argument named; the split (when one ``x``, ``y`` is given) and the standardisation happen
in :meth:`ArrayDataModule.setup`, as for the other DataModules (:mod:`lit_bayes.data.base`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Optional

import numpy as np
import torch
from torch import Tensor

from .base import SPLITS, BayesDataModule, Task, check_choice
from lit_bayes.validation import check_int, check_interval

__all__ = ["ArrayDataModule"]

Standardize = Literal["per_feature", "global", "none"]
SPLIT_KEYS = tuple(f"{axis}_{split}" for split in SPLITS for axis in ("x", "y"))  # x_train, y_train, x_val, ...
DEFAULT_FRACTION = 0.1


class ArrayDataModule(BayesDataModule):
    """In-memory arrays as a DataModule: numpy arrays, torch tensors, or ``.npz`` / ``.npy`` files.

    Give the data one of three ways (exactly one):

    - ready splits: ``x_train, y_train`` and optionally ``x_val, y_val`` and ``x_test, y_test``
      (a split not given is empty);
    - one data set ``x, y``, cut by a permutation seeded with ``seed`` into disjoint test
      (``round(test_fraction * n)`` points), validation (``round(val_fraction * n)``) and training
      (the rest) splits; both fractions default to 0.1;
    - ``path`` to an ``.npz`` file holding either the keys ``x_train, y_train`` (and optionally
      ``x_val, y_val, x_test, y_test``) or the keys ``x, y`` (then split as above).

    Each array argument may also be the path of an ``.npy`` file (a string or ``Path``), which is
    how a YAML config names arrays one by one. Files are loaded with ``allow_pickle=False``.

    Inputs ``x`` have the points on the first dimension; a 1-d ``x`` is taken as one feature per
    point, shape ``(n, 1)``. Targets ``y`` have shape ``(n,)`` (``(n, 1)`` is flattened).
    Classification labels must be integers (or booleans) in ``0..num_classes-1``; regression
    targets any real numbers. Nothing may be NaN or infinite.

    Standardisation (``standardize``), always with statistics of the **training split only**,
    applied to every split: ``"per_feature"`` centres and scales every input coordinate by its own
    mean and std (ddof 0); ``"global"`` uses one scalar mean and std over all training inputs;
    ``"none"`` keeps the values. A coordinate (or, for ``"global"``, the whole input) constant on the
    training split is only centred. Regression targets are standardised likewise with the training
    mean and std (``standardize_target``; by default when ``standardize`` is not ``"none"``, as
    :class:`~lit_bayes.data.TabularCSV` does); ``unstandardize_target`` maps predictions back.

    From Python::

        import lightning as L
        import numpy as np
        from lit_bayes import SGMCMC, Categorical, GaussianPrior
        from lit_bayes.data import ArrayDataModule
        from lit_bayes.models import MLP

        x = np.random.default_rng(0).normal(size=(500, 4))
        y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
        data = ArrayDataModule(x=x, y=y, task="classification", val_fraction=0.1, test_fraction=0.2,
                               batch_size=50)
        sampler = SGMCMC(MLP([4, 32, 2]), Categorical(2), GaussianPrior(variance=1.0), stepper="sgld",
                         step_size=1e-3, burn_in=100)
        L.Trainer(max_epochs=20).fit(sampler, datamodule=data)

    From a ``lit-bayes fit`` config (``data.npz`` holding ``x, y`` or ``x_train, y_train, ...``)::

        data:
          class_path: lit_bayes.data.ArrayDataModule
          init_args:
            path: data.npz
            task: regression
            standardize: per_feature
            batch_size: 32

    or, with ``.npy`` files: ``init_args: {x_train: xtr.npy, y_train: ytr.npy, x_test: xte.npy,
    y_test: yte.npy, task: classification}``.

    Args:
        x_train, y_train, x_val, y_val, x_test, y_test: ready splits (arrays, tensors or ``.npy``
            paths); ``val`` and ``test`` are optional, each as a pair.
        x, y: one data set to split by ``val_fraction`` / ``test_fraction``.
        path: an ``.npz`` file with the keys above; not together with array arguments.
        task: ``"classification"`` or ``"regression"``.
        num_classes: classification only; ``None`` infers ``max label + 1`` over all splits (>= 2).
        val_fraction, test_fraction: fractions of ``x, y`` for validation and test, each in [0, 1)
            with a sum below 1 (default 0.1 each); only with ``x, y``.
        standardize: ``"per_feature"`` (default), ``"global"`` or ``"none"`` (see above).
        standardize_target: regression only: standardise the targets with training statistics;
            ``None`` (default): when ``standardize`` is not ``"none"``.
        batch_size: training batch size; ``None`` = full batch.
        eval_batch_size: val/test batch size; ``None`` = one batch.
        seed: seed of the random split and of the shuffle.
        num_workers: DataLoader workers.
        drop_last: drop a smaller last training batch (default: under sum scaling only; see
            :class:`~lit_bayes.data.base.BayesDataModule`).

    Attributes:
        feature_mean, feature_std: float32 tensors of the input's point shape (``"per_feature"``) or
            of shape ``()`` (``"global"``, ``"none"``), after :meth:`setup`.
        target_mean, target_std: floats (0 and 1 without target standardisation), after :meth:`setup`.
    """

    def __init__(
        self,
        *,
        task: Task,
        x_train: Optional[Any] = None,
        y_train: Optional[Any] = None,
        x_val: Optional[Any] = None,
        y_val: Optional[Any] = None,
        x_test: Optional[Any] = None,
        y_test: Optional[Any] = None,
        x: Optional[Any] = None,
        y: Optional[Any] = None,
        path: Optional[str | Path] = None,
        num_classes: Optional[int] = None,
        val_fraction: Optional[float] = None,
        test_fraction: Optional[float] = None,
        standardize: Standardize = "per_feature",
        standardize_target: Optional[bool] = None,
        batch_size: Optional[int] = 50,
        eval_batch_size: Optional[int] = None,
        seed: int = 0,
        num_workers: int = 0,
        drop_last: Optional[bool] = None,
    ) -> None:
        check_choice("task", task, ("classification", "regression"))
        check_choice("standardize", standardize, ("per_feature", "global", "none"))
        if standardize_target not in (None, True, False):
            raise ValueError(f"standardize_target must be True, False or None, got {standardize_target!r}")
        if standardize_target and task != "regression":
            raise ValueError(f"standardize_target=True needs task='regression', got task={task!r}")
        given = {name: value for name, value in zip(
            SPLIT_KEYS + ("x", "y"), (x_train, y_train, x_val, y_val, x_test, y_test, x, y)) if value is not None}
        if path is not None:
            if given:
                raise ValueError(f"path: give either path or arrays, not both; got path={str(path)!r} and "
                                 f"{', '.join(sorted(given))}")
            given = _read_npz(path)
        arrays = {name: _as_array(name, value) for name, value in given.items()}
        pairs = _pair_up(arrays, None if path is None else str(path))
        splits = {names: _normalised(x_arr, y_arr) for names, (x_arr, y_arr) in pairs.items()}
        whole = "x" in arrays
        if not whole and (val_fraction is not None or test_fraction is not None):
            name = "val_fraction" if val_fraction is not None else "test_fraction"
            raise ValueError(f"{name} is only used with one x, y to split; the splits x_train, y_train, ... "
                             "were given ready")
        fractions = tuple(
            DEFAULT_FRACTION if f is None else check_interval(name, f, 0.0, 1.0, low_closed=True)
            for name, f in (("val_fraction", val_fraction), ("test_fraction", test_fraction)))
        if sum(fractions) >= 1.0:
            raise ValueError(f"val_fraction + test_fraction must be below 1 (training needs points), got "
                             f"val_fraction={fractions[0]!r}, test_fraction={fractions[1]!r}")
        for names, (x_arr, y_arr) in splits.items():
            _check_pair(names, x_arr, y_arr, task)
        point_shapes = {names[0]: x_arr.shape[1:] for names, (x_arr, _) in splits.items()}
        first, shape = next(iter(point_shapes.items()))
        for name, other in point_shapes.items():
            if other != shape:
                raise ValueError(f"{name} has point shape {other}, but {first} has {shape}; every split needs the same")
        if task == "classification":
            num_classes = _check_labels(splits, num_classes)
        super().__init__(
            task=task,
            num_classes=num_classes,
            input_shape=shape,
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            seed=seed,
            num_workers=num_workers,
            drop_last=drop_last,
        )
        self._splits = splits
        self._whole = whole
        self.path = None if path is None else Path(path)
        self.val_fraction, self.test_fraction = fractions if whole else (None, None)  # None: splits given ready
        self.standardize = standardize
        self.standardize_target = (standardize != "none") if standardize_target is None else standardize_target
        self.standardize_target = self.standardize_target and task == "regression"
        if whole:
            n = len(splits[("x", "y")][1])
            if n - round(fractions[0] * n) - round(fractions[1] * n) < 1:
                raise ValueError(f"val_fraction={fractions[0]!r} and test_fraction={fractions[1]!r} leave no "
                                 f"training point out of the {n} points of x; lower them")

    def load(self) -> dict[str, tuple[Tensor, Tensor]]:
        raw = self._split_arrays()
        train_x = raw["train"][0].astype(np.float64)
        if self.standardize == "per_feature":
            mean, std = train_x.mean(axis=0), train_x.std(axis=0)
            std[std == 0] = 1.0
        elif self.standardize == "global":
            mean, std = np.asarray(train_x.mean()), np.asarray(train_x.std())
            std = np.asarray(1.0) if std == 0 else std
        else:
            mean, std = np.asarray(0.0), np.asarray(1.0)
        target_mean, target_std = 0.0, 1.0
        if self.standardize_target:
            train_y = raw["train"][1].astype(np.float64)
            target_mean, target_std = float(train_y.mean()), float(train_y.std()) or 1.0
        self.feature_mean = torch.from_numpy(np.asarray(mean)).float()
        self.feature_std = torch.from_numpy(np.asarray(std)).float()
        self.target_mean, self.target_std = target_mean, target_std
        out = {}
        for split, (x_arr, y_arr) in raw.items():
            x_std = torch.from_numpy((x_arr.astype(np.float64) - mean) / std).float()
            if self.task == "classification":
                y_out = torch.from_numpy(y_arr.astype(np.int64))
            else:
                y_out = torch.from_numpy((y_arr.astype(np.float64) - target_mean) / target_std).float()
            out[split] = (x_std, y_out)
        return out

    def input_transform(self) -> dict[str, Tensor]:
        """The training split's feature mean and std (identity ones under ``standardize="none"``)."""
        return {"mean": self.feature_mean, "std": self.feature_std}

    def unstandardize_target(self, y: Tensor) -> Tensor:
        """Map standardised regression targets or predictions back to the data's units."""
        return y * self.target_std + self.target_mean

    def _split_arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The raw (unstandardised) ``(x, y)`` of each split: the given splits, or ``x, y`` cut by a
        permutation seeded with ``seed`` (test first, then validation, the rest for training)."""
        if not self._whole:
            train_x, _ = self._splits[("x_train", "y_train")]
            empty = (np.zeros((0, *train_x.shape[1:]), train_x.dtype), np.zeros(0, np.int64))
            return {split: self._splits.get((f"x_{split}", f"y_{split}"), empty) for split in SPLITS}
        x_all, y_all = self._splits[("x", "y")]
        n = len(y_all)
        num_val, num_test = round(self.val_fraction * n), round(self.test_fraction * n)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed)).numpy()
        index = {"test": order[:num_test], "val": order[num_test:num_test + num_val],
                 "train": np.sort(order[num_test + num_val:])}
        return {split: (x_all[index[split]], y_all[index[split]]) for split in SPLITS}


def _read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The split arrays of an ``.npz`` file (only its keys among ``x_train, ..., x, y``)."""
    file = Path(path)
    if file.suffix != ".npz":
        raise ValueError(f"path must be an .npz file (keys x_train, y_train, ... or x, y), got {str(path)!r}; "
                         "pass .npy files as x_train=..., y_train=... (or x=..., y=...) instead")
    if not file.is_file():
        raise FileNotFoundError(f"path: no .npz file at {str(path)!r}")
    try:
        with np.load(file, allow_pickle=False) as archive:
            keys = list(archive.keys())
            wanted = [key for key in SPLIT_KEYS + ("x", "y") if key in keys]
            if not wanted:
                raise ValueError(f"path: {str(path)!r} holds the keys {keys}; it needs x_train and y_train "
                                 "(optionally x_val, y_val, x_test, y_test) or x and y")
            return {key: archive[key] for key in wanted}
    except ValueError as error:
        if str(error).startswith("path:"):
            raise
        raise ValueError(f"path: {str(path)!r} could not be read as an .npz of numeric arrays ({error})") from None


def _as_array(name: str, value: Any) -> np.ndarray:
    """``value`` (array, tensor, nested list, or ``.npy`` path) as a real-valued numpy array."""
    if isinstance(value, (str, os.PathLike)):
        file = Path(value)
        if file.suffix != ".npy" or not file.is_file():
            raise ValueError(f"{name}: a path must name an existing .npy file, got {str(value)!r}")
        try:
            value = np.load(file, allow_pickle=False)
        except ValueError as error:
            raise ValueError(f"{name}: {str(value)!r} could not be read as a numeric .npy file ({error})") from None
    if isinstance(value, Tensor):
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be a numeric array, tensor or .npy path, got {type(value).__name__} "
                         f"({error})") from None
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold real numbers (bool, integer or float), got dtype {array.dtype}")
    if array.ndim == 0:
        raise ValueError(f"{name} must have the points on its first dimension, got a scalar")
    return array


def _pair_up(arrays: dict[str, np.ndarray], file: str | None) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """Group the arrays into ``(x, y)`` pairs: the train (and optional val, test) splits, or ``x, y``.
    ``file`` is the ``.npz`` they came from (errors then name ``path`` and the key), else ``None``."""

    def missing(name: str, why: str) -> ValueError:
        if file is not None:
            return ValueError(f"path: {file!r} has no key {name!r} ({why}); its keys are {sorted(arrays)}")
        return ValueError(f"{name}: missing ({why})")

    has_whole = {"x", "y"} & arrays.keys()
    has_splits = set(SPLIT_KEYS) & arrays.keys()
    if has_whole and has_splits:
        where = f"path: {file!r} holds" if file is not None else "got"
        raise ValueError(f"x, y and x_train, y_train, ... exclude each other (one data set to split, or ready "
                         f"splits); {where} {', '.join(sorted(arrays))}")
    if not arrays:
        raise ValueError("x_train: no data given; pass x_train and y_train (optionally x_val, y_val, x_test, "
                         "y_test), or x and y, or path to an .npz file")
    pairs = [("x", "y")] if has_whole else [(f"x_{split}", f"y_{split}") for split in SPLITS]
    out = {}
    for x_name, y_name in pairs:
        present = [name for name in (x_name, y_name) if name in arrays]
        if len(present) == 1:
            partner = y_name if present[0] == x_name else x_name
            raise missing(partner, f"{present[0]} was given and needs its partner")
        if present:
            out[(x_name, y_name)] = (arrays[x_name], arrays[y_name])
        elif x_name == "x_train":
            raise missing("x_train", "ready splits need x_train and y_train")
    return out


def _check_pair(names: tuple[str, str], x: np.ndarray, y: np.ndarray, task: str) -> None:
    """Shapes, finiteness and dtype of one split's ``(x, y)``; a 1-d ``x`` is one feature per point."""
    x_name, y_name = names
    if y.ndim != 1:
        raise ValueError(f"{y_name} must have shape (n,) (or (n, 1)), got shape {y.shape}")
    if len(x) != len(y):
        raise ValueError(f"{x_name} has {len(x)} points but {y_name} has {len(y)}; their lengths must match")
    if not np.isfinite(x).all():
        raise ValueError(f"{x_name} contains NaN or infinite values (first at point "
                         f"{int(np.argwhere(~np.isfinite(x.reshape(len(x), -1)))[0, 0])})")
    if task == "classification" and y.dtype.kind not in "biu":
        raise ValueError(f"{y_name} must hold integer class labels for task='classification', got dtype {y.dtype}; "
                         "convert them (e.g. y.astype(int)) or use task='regression'")
    if not np.isfinite(y).all():
        raise ValueError(f"{y_name} contains NaN or infinite values (first at point "
                         f"{int(np.flatnonzero(~np.isfinite(y))[0])})")


def _normalised(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A 1-d ``x`` as one feature per point ``(n, 1)``; a ``y`` of shape ``(n, 1)`` flattened."""
    return (x[:, None] if x.ndim == 1 else x), (y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y)


def _check_labels(splits: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]], num_classes: int | None) -> int:
    """Labels in range over every split; ``num_classes`` given, or inferred as ``max label + 1``."""
    nonempty = [(names[1], y) for names, (_, y) in splits.items() if y.size]
    if num_classes is None:
        top = max((int(y.max()) for _, y in nonempty), default=0)
        num_classes = top + 1
        if num_classes < 2:
            raise ValueError(f"num_classes: the labels span only {num_classes} class(es), need >= 2; "
                             "pass num_classes to set it")
    check_int("num_classes", num_classes, 2)
    for name, y in nonempty:
        low, high = int(y.min()), int(y.max())
        if low < 0 or high >= num_classes:
            raise ValueError(f"{name} holds labels in [{low}, {high}], allowed are 0..{num_classes - 1} "
                             f"(num_classes={num_classes})")
    return num_classes
