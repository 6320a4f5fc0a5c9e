"""Torchvision image sets held in memory as tensors: MNIST, Fashion-MNIST, CIFAR-10, SVHN.

Used by the FNBG MLP experiments (fnbg spec §4: flattened, globally standardised MNIST/FMNIST),
the Feynman-Kac MNIST experiment (feynman-kac spec §6.4: 50k/10k train/val from the 60k training
set) and the structured SG-MCMC ResNet-20 runs (structured-sgmcmc spec §6.3).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch
import torchvision
from torch import Tensor

from .base import BayesDataModule, check_choice
from lit_bayes.validation import check_bool, check_float, check_int

__all__ = ["TorchvisionImages"]


def _mnist_like(cls: type) -> Callable[[Path, bool, bool], tuple[Tensor, Tensor]]:
    def read(root: Path, train: bool, download: bool) -> tuple[Tensor, Tensor]:
        data = cls(root, train=train, download=download)
        return data.data.unsqueeze(1), data.targets

    return read


def _cifar10(root: Path, train: bool, download: bool) -> tuple[Tensor, Tensor]:
    data = torchvision.datasets.CIFAR10(root, train=train, download=download)
    return torch.from_numpy(data.data).permute(0, 3, 1, 2), torch.tensor(data.targets, dtype=torch.int64)


def _svhn(root: Path, train: bool, download: bool) -> tuple[Tensor, Tensor]:
    data = torchvision.datasets.SVHN(root, split="train" if train else "test", download=download)
    return torch.from_numpy(data.data), torch.from_numpy(data.labels).long()


_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

# name -> (reader of uint8 NCHW images and int64 labels, image shape, folder under root, files there)
DATASETS = {
    "mnist": (_mnist_like(torchvision.datasets.MNIST), (1, 28, 28), "MNIST/raw", _MNIST_FILES),
    "fashion_mnist": (_mnist_like(torchvision.datasets.FashionMNIST), (1, 28, 28), "FashionMNIST/raw", _MNIST_FILES),
    "cifar10": (
        _cifar10,
        (3, 32, 32),
        "cifar-10-batches-py",
        tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta"),
    ),
    "svhn": (_svhn, (3, 32, 32), ".", ("train_32x32.mat", "test_32x32.mat")),
}


class TorchvisionImages(BayesDataModule):
    """An image classification set (10 classes) from ``torchvision.datasets``, as float tensors.

    Images are read once, scaled from uint8 to float32 in [0, 1] (NCHW), optionally augmented,
    standardised, and flattened for MLPs.

    Standardisation (``standardize``):
        ``"global"``: one scalar mean and std over all pixels (the FNBG code, fnbg spec §4);
        ``"per_channel"``: one mean and std per channel; ``"none"``: keep [0, 1].
        ``stats_from="train"`` takes the statistics from the training split and applies them to
        every split; ``stats_from="own"`` standardises every split (train, val, test) by its own
        statistics, the FNBG code's quirk (fnbg spec §8 item 14). Stds are population stds; a
        zero std is replaced by 1.

    Transforms (the FNBG augmentation study, fnbg spec §4 E9, uses torchvision's
    ``RandomRotation((-30, 30))``, ``RandomApply([GaussianBlur((9, 9), (1.0, 1.5))], 0.9)`` and
    ``RandomInvert(p=0.5)``): each is called once per image on a float ``(C, H, W)`` tensor in
    [0, 1], before standardisation, with torch's global RNG seeded from ``seed`` inside a forked
    RNG state (the caller's RNG is untouched), and must keep the image shape.
    ``train_transform`` replaces the training split by its transformed copy, as in the paper
    (Table 4 tests on untransformed test sets); ``test_transform`` transforms the test inputs
    only (a distribution-shift test set). The validation split is never transformed.

    Args:
        name: ``"mnist"``, ``"fashion_mnist"``, ``"cifar10"`` or ``"svhn"``.
        root: directory holding the files in torchvision's layout (see the missing-files error).
        download: let torchvision download missing files (in :meth:`prepare_data` and
            :meth:`setup`).
        flatten: give points of shape ``(C*H*W,)`` instead of ``(C, H, W)``.
        standardize, stats_from: see above.
        num_val: validation points carved at random (seeded by ``seed``) from the training set:
            an integer count, or a fraction in [0, 1) (e.g. 10000 for the Feynman-Kac MNIST run).
        num_train: keep this many training points, drawn at random (seeded by ``seed``) from those
            the validation split leaves; ``None`` keeps them all (a reduced-size study).
        batch_size: training batch size; ``None`` = full batch.
        eval_batch_size: val/test batch size; ``None`` = one batch.
        seed: seed of the val split, the transforms and the shuffle.
        train_transform, test_transform: optional per-image callables, see above.
        num_workers: DataLoader workers.
        drop_last: drop a smaller last training batch (default: under sum scaling only; see
            :class:`~lit_bayes.data.base.BayesDataModule`).
    """

    def __init__(
        self,
        name: Literal["mnist", "fashion_mnist", "cifar10", "svhn"],
        root: str | Path = "data",
        download: bool = False,
        flatten: bool = False,
        standardize: Literal["per_channel", "global", "none"] = "per_channel",
        stats_from: Literal["train", "own"] = "train",
        num_val: int | float = 0,
        num_train: int | None = None,
        batch_size: int | None = 128,
        eval_batch_size: int | None = 1000,
        seed: int = 0,
        train_transform: Callable[[Tensor], Tensor] | None = None,
        test_transform: Callable[[Tensor], Tensor] | None = None,
        num_workers: int = 0,
        drop_last: bool | None = None,
    ) -> None:
        check_choice("name", name, tuple(DATASETS))
        check_choice("standardize", standardize, ("per_channel", "global", "none"))
        check_choice("stats_from", stats_from, ("train", "own"))
        check_bool("download", download)
        check_bool("flatten", flatten)
        for argument, transform in (("train_transform", train_transform), ("test_transform", test_transform)):
            if transform is not None and not callable(transform):
                raise ValueError(f"{argument} must be a callable on (C, H, W) tensors or None, got {transform!r}")
        if isinstance(num_val, float):
            check_float("num_val", num_val, minimum=0.0)
            if num_val >= 1:
                raise ValueError(f"num_val as a fraction must lie in [0, 1), got {num_val!r}")
        else:
            check_int("num_val", num_val, 0)
        if num_train is not None:
            check_int("num_train", num_train, 1)
        _, image_shape, _, _ = DATASETS[name]
        super().__init__(
            task="classification",
            num_classes=10,
            input_shape=(image_shape[0] * image_shape[1] * image_shape[2],) if flatten else image_shape,
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            seed=seed,
            num_workers=num_workers,
            drop_last=drop_last,
        )
        self.name = name
        self.root = Path(root)
        self.download = download
        self.flatten = flatten
        self.standardize = standardize
        self.stats_from = stats_from
        self.num_val = num_val
        self.train_subset = num_train
        self.train_transform = train_transform
        self.test_transform = test_transform

    def prepare_data(self) -> None:
        """Download the files once (rank 0 only under Lightning) if ``download=True``."""
        if self.download:
            self._read(train=True)
            self._read(train=False)

    def load(self) -> dict[str, tuple[Tensor, Tensor]]:
        pool_x, pool_y = self._read(train=True)
        test_x, test_y = self._read(train=False)
        num_val = self._num_val(len(pool_y))
        order = torch.randperm(len(pool_y), generator=torch.Generator().manual_seed(self.seed))
        left = len(pool_y) - num_val
        if self.train_subset is not None and self.train_subset > left:
            raise ValueError(f"num_train={self.train_subset} exceeds the {left} training images "
                             f"left after num_val={self.num_val!r}")
        kept = left if self.train_subset is None else self.train_subset
        val_rows, train_rows = order[:num_val].sort().values, order[num_val:num_val + kept].sort().values
        x = {"train": _to_float(pool_x[train_rows]), "val": _to_float(pool_x[val_rows]), "test": _to_float(test_x)}
        y = {"train": pool_y[train_rows], "val": pool_y[val_rows], "test": test_y}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            for split, transform in (("train", self.train_transform), ("test", self.test_transform)):
                if transform is not None:
                    x[split] = _transform(transform, x[split], f"{split}_transform")
        reference = (torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
        if self.standardize != "none":
            reference = _stats(x["train"], self.standardize)
            for split in x:
                mean, std = _stats(x[split], self.standardize) if self.stats_from == "own" else reference
                x[split] = (x[split] - mean) / std
        self._reference = reference
        return {split: (x[split].flatten(1) if self.flatten else x[split], y[split]) for split in x}

    def input_transform(self) -> dict[str, Any]:
        """Raw images (uint8, or floats in [0, 1]) to the model's inputs: scaled, standardised by the training
        split's statistics (also under ``stats_from="own"``, which has none for new images), flattened."""
        mean, std = self._reference
        return {"pixels": True, "shape": DATASETS[self.name][1], "mean": mean[0], "std": std[0],
                "flatten": self.flatten}

    def _num_val(self, pool_size: int) -> int:
        count = round(self.num_val * pool_size) if isinstance(self.num_val, float) else self.num_val
        if count >= pool_size:
            raise ValueError(f"num_val={self.num_val!r} leaves no training image out of {pool_size}")
        return count

    def _read(self, train: bool) -> tuple[Tensor, Tensor]:
        reader, _, folder, files = DATASETS[self.name]
        try:
            return reader(self.root, train, self.download)
        except RuntimeError as error:
            if "not found" not in str(error):
                raise
            directory = (self.root / folder).resolve()
            raise FileNotFoundError(
                f"{self.name}: dataset files missing (or failing torchvision's checksum) "
                f"under root={str(self.root)!r}. "
                f"Put {', '.join(files)} in {directory}, or pass download=True to fetch them."
            ) from error


def _to_float(images: Tensor) -> Tensor:
    return images.float().div_(255.0)


def _transform(transform: Callable[[Tensor], Tensor], images: Tensor, argument: str) -> Tensor:
    out = torch.stack([transform(image) for image in images]) if len(images) else images
    if out.shape != images.shape or not torch.is_floating_point(out):
        raise ValueError(
            f"{argument} must map float (C, H, W) images to float images of the same shape; "
            f"got {out.dtype} images of shape {tuple(out.shape[1:])} from shape {tuple(images.shape[1:])}"
        )
    return out.float()


def _stats(images: Tensor, mode: str) -> tuple[Tensor, Tensor]:
    """Population mean and std over all pixels (``"global"``) or per channel (``"per_channel"``)."""
    dims = (0, 1, 2, 3) if mode == "global" else (0, 2, 3)
    if len(images) == 0:
        shape = (1, 1, 1, 1) if mode == "global" else (1, images.shape[1], 1, 1)
        return torch.zeros(shape), torch.ones(shape)
    std, mean = torch.std_mean(images, dim=dims, correction=0, keepdim=True)
    return mean, torch.where(std > 0, std, torch.ones_like(std))
