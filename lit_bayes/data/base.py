"""Shared base of every lit_bayes DataModule: validated tensor splits and reproducible loaders.

Every dataset of the papers (fnbg spec §4, feynman-kac spec §6.2-6.4, structured-sgmcmc spec §6)
is small enough to live in memory, so a DataModule here holds three ``TensorDataset`` splits of
``(x, y)`` (:class:`IndexedTensors`): ``x`` float32 with the points on the first dimension, ``y`` int64 class labels
(classification) or float32 targets of shape ``(n,)`` (regression). Batches are ``(x, y)`` tuples.

Training batches are reshuffled every epoch with an order that depends only on ``(seed, epoch)``
(:class:`EpochBatchSampler`), and the DataModule's checkpointed state records how many batches
of the current epoch were done, so a run resumed from any checkpoint, also one written in the
middle of an epoch, sees exactly the batches an uninterrupted run would have seen.

When the batch size does not divide the training set, each epoch ends with a smaller batch.
Under ``minibatch_scaling="sum"`` (the energy is the batch's raw log-likelihood sum, as in the
FNBG paper) a smaller batch is a different target, so by default (``drop_last=None``) that batch
is dropped when the module being fit sums its batches, and kept otherwise (under the default
``"rescaled"`` each batch is scaled by N/|B| and every batch estimates the same energy);
``drop_last=True`` / ``False`` decides it for any module.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from lit_bayes.validation import check_int

__all__ = ["BayesDataModule", "EpochBatchSampler", "IndexedTensors", "transform_raw_inputs"]

Task = Literal["classification", "regression"]
SPLITS = ("train", "val", "test")


def check_choice(name: str, value: object, choices: tuple) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def check_batch_size(name: str, value: object) -> int | None:
    """A batch size is a positive integer, or ``None`` for the whole split in one batch."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer or None (one batch), got {value!r}")
    return int(value)


class EpochBatchSampler(DistributedSampler):
    """Batches of indices of a random permutation of ``range(num_samples)`` that depends only on
    ``(seed, epoch)``, split into one shard per process.

    Lightning calls :meth:`set_epoch` at the start of every training epoch (also after a resume),
    so epoch ``e`` is shuffled identically whether or not the run was interrupted before it.
    With ``num_replicas`` processes, process ``rank`` takes every ``num_replicas``-th index of the
    permutation (padded by wrapping around so every shard has the same number of batches, as
    ``DistributedSampler`` does); being a ``DistributedSampler``, Lightning leaves it in place.
    ``resume_at = (epoch, batches)`` skips the first ``batches`` batches of that epoch (a run
    resumed from a mid-epoch checkpoint). Each item is an int64 tensor of indices, which
    :class:`IndexedTensors` turns into a batch with one ``index_select`` per tensor. With ``drop_last`` the
    shard's last batch is left out when it is smaller than the others.
    """

    def __init__(
        self,
        num_samples: int,
        seed: int,
        batch_size: int,
        epoch: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        resume_at: tuple[int, int] | None = None,
        drop_last: bool = False,
    ) -> None:
        # DistributedSampler.__init__ is not called: it needs a dataset and a process group,
        # this sampler is told its shard
        self.size = check_int("num_samples", num_samples, 0)
        self.seed = check_int("seed", seed, 0)
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.num_replicas = check_int("num_replicas", num_replicas, 1)
        self.rank = check_int("rank", rank, 0)
        if self.rank >= self.num_replicas:
            raise ValueError(f"rank must be smaller than num_replicas={num_replicas}, got {rank}")
        self.resume_at = resume_at
        self.drop_last = bool(drop_last)
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of epoch ``epoch`` (a non-negative integer)."""
        self.epoch = check_int("epoch", epoch, 0)

    def permutation(self) -> Tensor:
        """The order of this epoch over all processes, as an int64 tensor."""
        state = np.random.SeedSequence([self.seed, self.epoch]).generate_state(1, dtype=np.uint64)[0]
        generator = torch.Generator().manual_seed(int(state))
        return torch.randperm(self.size, generator=generator)

    def shard(self) -> Tensor:
        """This process's indices of the epoch."""
        order = self.permutation()
        total = math.ceil(self.size / self.num_replicas) * self.num_replicas
        if total > self.size:
            order = order.repeat(math.ceil(total / self.size))[:total]
        return order[self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[Tensor]:
        # a generator: the order is drawn at the first batch, after Lightning's set_epoch (which
        # comes after the loader's iterator was made when a run is resumed)
        shard = self.shard()
        shard = shard[: len(self) * self.batch_size]  # without the dropped last batch, if any
        if self.resume_at is not None and self.resume_at[0] == self.epoch:
            shard = shard[self.resume_at[1] * self.batch_size :]
        yield from shard.split(self.batch_size)

    def __len__(self) -> int:
        shard = math.ceil(self.size / self.num_replicas)
        if self.drop_last and shard > self.batch_size:
            return shard // self.batch_size
        return math.ceil(shard / self.batch_size)


class IndexedTensors(TensorDataset):
    """A ``TensorDataset`` whose item for a 1-d int64 tensor of indices (an :class:`EpochBatchSampler` batch) is
    the batch itself, one ``index_select`` per tensor. ``TensorDataset`` indexes with a list (what the sampler
    gave before) through advanced indexing, which converts the list first: in a fit of the S_d mixing study's
    SGLD cell (softmax regression, 4 chains, MNIST batches of 500; ~11 ms a step, AMD EPYC Zen3, one thread)
    the loader's next batch took 1.31-1.37 ms that way and 0.52-0.56 ms this way. The values are the same.
    Any other index is ``TensorDataset``'s."""

    def __getitem__(self, index):
        if isinstance(index, Tensor) and index.dim() == 1 and index.dtype == torch.int64:
            return tuple(t.index_select(0, index) for t in self.tensors)
        return super().__getitem__(index)


class BayesDataModule(L.LightningDataModule):
    """In-memory train/val/test splits with the attributes every sampler relies on.

    Subclasses set ``task``, ``num_classes`` and ``input_shape`` through ``__init__`` and
    implement :meth:`load`, which returns ``{"train": (x, y), "val": (x, y), "test": (x, y)}``.
    :meth:`setup` calls it once and checks every split with :meth:`validate_split`.

    Args:
        task: ``"classification"`` (int64 labels in ``[0, num_classes)``) or ``"regression"``
            (float32 targets of shape ``(n,)``).
        num_classes: number of classes (>= 2) for classification; ``None`` for regression.
        input_shape: shape of one input point, e.g. ``(2,)`` or ``(1, 28, 28)``.
        batch_size: training batch size; ``None`` or a value >= ``num_train`` means full batch.
        eval_batch_size: batch size of the val/test/predict loaders; ``None`` means one batch.
        seed: non-negative integer seeding data generation, splits and the per-epoch shuffle.
        num_workers: DataLoader worker processes (0 loads in the main process).
        drop_last: leave out each epoch's last training batch when it is smaller than the others;
            ``None`` (default): only when the module being fit uses ``minibatch_scaling="sum"``,
            where a smaller batch would be a different target (module docstring).

    Attributes:
        num_train: number of training points (available after :meth:`setup`).
        train_data, val_data, test_data: the ``TensorDataset`` splits (after :meth:`setup`);
            a split may be empty except ``train_data``.
    """

    def __init__(
        self,
        *,
        task: Task,
        num_classes: int | None,
        input_shape: tuple[int, ...],
        batch_size: int | None,
        eval_batch_size: int | None,
        seed: int,
        num_workers: int = 0,
        drop_last: bool | None = None,
    ) -> None:
        super().__init__()
        check_choice("task", task, ("classification", "regression"))
        if task == "classification":
            check_int("num_classes", num_classes, 2)
        elif num_classes is not None:
            raise ValueError(f"num_classes must be None for task='regression', got {num_classes!r}")
        self.task = task
        self.num_classes = num_classes
        self.input_shape = tuple(input_shape)
        self.batch_size = check_batch_size("batch_size", batch_size)
        self.eval_batch_size = check_batch_size("eval_batch_size", eval_batch_size)
        self.seed = check_int("seed", seed, 0)
        self.num_workers = check_int("num_workers", num_workers, 0)
        if drop_last not in (None, True, False):
            raise ValueError(f"drop_last must be True, False or None (drop under sum scaling), got {drop_last!r}")
        self.drop_last = drop_last
        self._resume_point: tuple[int, int] | None = None  # (epoch, batches done) from a checkpoint
        self.train_data: TensorDataset | None = None
        self.val_data: TensorDataset | None = None
        self.test_data: TensorDataset | None = None

    def load(self) -> dict[str, tuple[Tensor, Tensor]]:
        """Build the splits: ``{"train": (x, y), "val": (x, y), "test": (x, y)}``."""
        raise NotImplementedError(f"{type(self).__name__} must implement load()")

    def setup(self, stage: str | None = None) -> None:
        """Load and validate the splits once; later calls (any ``stage``) reuse them."""
        if self.train_data is not None:
            return
        splits = self.load()
        for split in SPLITS:
            self.validate_split(split, *splits[split])
        self.train_data, self.val_data, self.test_data = (IndexedTensors(*splits[split]) for split in SPLITS)

    @property
    def num_train(self) -> int:
        """Number of training points."""
        return len(self._split("train"))

    def validate_split(self, split: str, x: Tensor, y: Tensor) -> None:
        """Raise ``ValueError`` naming ``split`` and the argument if ``(x, y)`` is not a valid split."""
        where = f"{type(self).__name__} {split} split"
        if not isinstance(x, Tensor) or x.dtype != torch.float32 or x.dim() < 2:
            raise ValueError(f"{where}: x must be a float32 tensor of shape (n, *input_shape), got {_describe(x)}")
        if tuple(x.shape[1:]) != self.input_shape:
            raise ValueError(
                f"{where}: x has point shape {tuple(x.shape[1:])}, expected input_shape {self.input_shape}"
            )
        want = torch.int64 if self.task == "classification" else torch.float32
        if not isinstance(y, Tensor) or y.dtype != want or y.dim() != 1:
            raise ValueError(f"{where}: y must be a 1-d {want} tensor for task={self.task!r}, got {_describe(y)}")
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"{where}: x has {x.shape[0]} rows but y has {y.shape[0]}; they must match")
        if not torch.isfinite(x).all():
            raise ValueError(f"{where}: x contains NaN or infinite values")
        if self.task == "regression" and not torch.isfinite(y).all():
            raise ValueError(f"{where}: y contains NaN or infinite values")
        if self.task == "classification" and y.numel() and (y.min() < 0 or y.max() >= self.num_classes):
            raise ValueError(
                f"{where}: y holds labels in [{int(y.min())}, {int(y.max())}], allowed are 0..{self.num_classes - 1}"
            )
        if split == "train" and x.shape[0] == 0:
            raise ValueError(f"{where}: at least one training point is needed, got 0")

    def train_dataloader(self) -> DataLoader:
        """Shuffled training batches; the order of epoch ``e`` depends only on ``(seed, e)``, each
        process (under a distributed strategy) gets its own shard, and after a mid-epoch
        checkpoint the resumed epoch continues with the batches not yet done. A full batch in one
        process is the stored training tensors themselves, every epoch: shuffling it would change
        nothing but the summation order, and copying it costs time at every step (MNIST size:
        ~0.2 s, as long as a NoisyGibbs sweep), which also lets full-batch samplers recognise it."""
        data = self._split("train")
        trainer = self.trainer
        epoch = trainer.current_epoch if trainer is not None else 0
        # one shard per process, unless the Trainer was told not to distribute samplers
        sharded = getattr(getattr(trainer, "_accelerator_connector", None), "use_distributed_sampler", True)
        replicas = getattr(trainer, "world_size", 1) if sharded else 1
        rank = trainer.global_rank if replicas > 1 else 0
        size = len(data) if self.batch_size is None else min(self.batch_size, len(data))
        if replicas == 1 and size == len(data):
            return DataLoader([data.tensors], batch_size=None, num_workers=self.num_workers)
        sampler = EpochBatchSampler(len(data), self.seed, max(size, 1), epoch, replicas, rank, self._resume_point,
                                    self.drops_last_batch())
        return DataLoader(data, sampler=sampler, batch_size=None, num_workers=self.num_workers)

    def drops_last_batch(self) -> bool:
        """Whether the training loader leaves out a smaller last batch: ``drop_last`` when set,
        else whether the module being fit sums its batches (``minibatch_scaling="sum"``)."""
        if self.drop_last is not None:
            return self.drop_last
        module = getattr(self.trainer, "lightning_module", None)
        return getattr(getattr(module, "posterior", None), "minibatch_scaling", None) == "sum"

    def input_transform(self) -> dict[str, Any]:
        """What turns raw inputs into the model's, saved with the run (:meth:`state_dict`) so that
        :meth:`lit_bayes.load_run`'s ``predict`` applies it (:func:`transform_raw_inputs`): empty when the
        inputs are used as given (this default); a subclass that standardises gives ``mean`` and ``std``
        (tensors that broadcast over a batch of raw points), and an image set also ``pixels`` (uint8 raw values
        are scaled to [0, 1] first), ``shape`` (one image's) and ``flatten``."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The epoch and the training batches of it done so far, the :meth:`input_transform` and the shape of
        one model input (saved in Lightning checkpoints)."""
        trainer = self.trainer
        if trainer is None:
            return {}
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        if done >= trainer.num_training_batches:  # the epoch is complete (the count is stale)
            done = 0
        return {"epoch": trainer.current_epoch, "batches_done": done, "input_transform": self.input_transform(),
                "input_shape": tuple(self.input_shape)}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self._resume_point = (state_dict["epoch"], state_dict["batches_done"]) if state_dict else None

    def val_dataloader(self) -> DataLoader:
        """Validation batches in a fixed order (no batches if the split is empty)."""
        return self._loader(self._split("val"), self.eval_batch_size)

    def test_dataloader(self) -> DataLoader:
        """Test batches in a fixed order."""
        return self._loader(self._split("test"), self.eval_batch_size)

    def predict_dataloader(self) -> DataLoader:
        """The test split in a fixed order, as ``(x, y)`` batches (``predict_step`` uses ``x``)."""
        return self._loader(self._split("test"), self.eval_batch_size)

    def _split(self, split: str) -> TensorDataset:
        data = getattr(self, f"{split}_data")
        if data is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before the {split} split is used")
        return data

    def _loader(self, data: TensorDataset, batch_size: int | None) -> DataLoader:
        size = len(data) if batch_size is None else min(batch_size, len(data))
        return DataLoader(data, batch_size=max(size, 1), shuffle=False, drop_last=False, num_workers=self.num_workers)


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"{value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def transform_raw_inputs(transform: Mapping[str, Any], x: Tensor) -> Tensor:
    """Raw inputs ``x`` (a batch) as the DataModule that saved ``transform``
    (:meth:`BayesDataModule.input_transform`) handed them to the model: pixels scaled to [0, 1], reshaped to
    the image shape, standardised, flattened."""
    if not transform:
        return x
    if transform.get("pixels") and x.dtype == torch.uint8:
        x = x.float() / 255.0
    if "shape" in transform:
        x = x.reshape(x.shape[0], *transform["shape"])
    x = (x - transform["mean"].to(x.device)) / transform["std"].to(x.device)
    return x.flatten(1) if transform.get("flatten") else x
