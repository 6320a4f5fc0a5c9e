"""Teacher-student data of the noisy-gibbs paper (spec §4, §6.1-6.2).

A teacher :class:`lit_bayes.models.NoisyMLP` is drawn from its prior, inputs are i.i.d. N(0, 1),
and the training labels come from the intermediate-noise generative process (eq. 7), or from the
noiseless network (``noiseless_labels=True``, as in the paper's Fig. 2). Validation and test labels
are always noiseless (§3). The teacher and its training latents (with the noise realisations
actually used for the labels) are exposed for the informed initialisation (spec §8 item 5):
a sampler of the intermediate posterior given ``informed_chains`` reads them at setup
(:func:`teacher_of`, :func:`check_student`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from .base import BayesDataModule
from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.validation import check_bool, check_int

__all__ = ["TeacherStudent", "check_student", "teacher_of"]

ARCHITECTURE = ("widths", "activation", "output", "has_bias")
MATCHED = ("delta_z", "delta_x", "prior_precision", "bias_precision")


def teacher_of(datamodule: Any, user: str) -> tuple[NoisyMLP, dict[str, Tensor]]:
    """The teacher network and its training latents of a teacher-student DataModule (after its setup),
    or a clear error naming ``user``, the one who needs them."""
    teacher = getattr(datamodule, "teacher", None)
    latents = getattr(datamodule, "train_latents", None)
    if teacher is None or latents is None:
        raise ValueError(f"{user} needs a teacher-student DataModule exposing `teacher` and `train_latents` "
                         f"(lit_bayes.data.TeacherStudent), got {type(datamodule).__name__}")
    return teacher, latents


def check_student(teacher: NoisyMLP, student: nn.Module, temperature: float = 1.0,
                  noiseless_labels: bool = False, warn: bool = True) -> None:
    """Raise if ``student`` is not the teacher's network (widths, activation, output, biases); with
    ``warn``, warn when the teacher's joint is not the student's posterior (other noise variances or
    priors, a temperature other than 1, noiseless labels): a chain started at the teacher is then only
    approximately an equilibrium sample (spec §8 item 5)."""
    for attribute in ARCHITECTURE:
        if getattr(teacher, attribute) != getattr(student, attribute, None):
            raise ValueError(f"the teacher's {attribute} ({getattr(teacher, attribute)!r}) differs from the "
                             f"sampler model's ({getattr(student, attribute, None)!r})")
    if not warn:
        return
    mismatched = [a for a in MATCHED if getattr(teacher, a) != getattr(student, a)]
    if temperature != 1.0:
        mismatched.append("temperature")
    if mismatched or noiseless_labels:
        rank_zero_warn(f"the teacher's {mismatched or 'labels (noiseless)'} differ from the posterior's: the "
                       "informed start is only approximately an equilibrium sample (spec §8 item 5)")


class TeacherStudent(BayesDataModule):
    """Data from a random intermediate-noise teacher.

    Args:
        widths, activation, delta_z, delta_x, prior_precision, bias_precision, bias, output: the
            teacher, as in :class:`NoisyMLP` (defaults: the paper's §6.1 network, d = 50, 10 hidden
            ReLU units, scalar output, all Delta = 1e-4, lambda = fan-in).
        num_train, num_val, num_test: split sizes (the paper: n = 2084 = 4 x 521 parameters; 2000 test).
        noiseless_labels: training labels y = f(x, W*) (regression) or argmax f(x, W*) (probit).
        batch_size: training batch size; ``None`` (full batch, needed by ``NoisyGibbs``).
        eval_batch_size: val/test batch size; ``None`` = one batch.
        seed: seed of the teacher, the inputs and the noise (drawn in that order), and of the shuffle.
        num_workers: DataLoader workers.
        drop_last: drop a smaller last training batch (default: under sum scaling only; see
            :class:`~lit_bayes.data.base.BayesDataModule`).

    Attributes (after :meth:`setup`):
        teacher: the teacher network (a ``NoisyMLP`` holding W*).
        train_latents: the teacher's latents on the training inputs, named as
            :meth:`NoisyMLP.latent_names`, each ``(num_train, d_l)``, rows in training-set order.
    """

    def __init__(
        self,
        widths: Sequence[int] = (50, 10, 1),
        activation: Literal["relu", "sign", "abs", "linear"] = "relu",
        delta_z: float | Sequence[float] = 1e-4,
        delta_x: float | Sequence[float] = 1e-4,
        prior_precision: float | Sequence[float] | None = None,
        bias_precision: float | Sequence[float] | None = None,
        bias: bool = True,
        output: Literal["regression", "probit"] = "regression",
        num_train: int = 2084,
        num_val: int = 0,
        num_test: int = 2000,
        noiseless_labels: bool = False,
        batch_size: int | None = None,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        drop_last: bool | None = None,
    ) -> None:
        teacher = NoisyMLP(widths, activation, delta_z, delta_x, prior_precision, bias_precision, bias, output)
        super().__init__(
            task="regression" if output == "regression" else "classification",
            num_classes=None if output == "regression" else teacher.widths[-1],
            input_shape=(teacher.widths[0],),
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            seed=seed,
            num_workers=num_workers,
            drop_last=drop_last,
        )
        self.sizes = (check_int("num_train", num_train, 1), check_int("num_val", num_val, 0),
                      check_int("num_test", num_test, 0))
        self.noiseless_labels = check_bool("noiseless_labels", noiseless_labels)
        self.teacher = teacher.requires_grad_(False)
        self.train_latents: dict[str, Tensor] | None = None

    def _labels(self, top: Tensor) -> Tensor:
        return top[:, 0].float() if self.task == "regression" else top.argmax(-1)

    def load(self) -> dict[str, tuple[Tensor, Tensor]]:
        generator = torch.Generator().manual_seed(self.seed)
        names = dict(self.teacher.named_parameters())
        draws = self.teacher.prior().sample({f"net.{n}": p.unsqueeze(0) for n, p in names.items()}, generator)
        with torch.no_grad():
            for name, p in names.items():
                p.copy_(draws[f"net.{name}"][0])
        return self.draw_splits(generator)

    def draw_splits(self, generator: torch.Generator,
                    dtype: torch.dtype = torch.float64) -> dict[str, tuple[Tensor, Tensor]]:
        """Inputs, then the noise of eq. 7 for the training labels, split by split from ``generator``,
        with the current teacher; the teacher and its latents computed (and the noise drawn) in
        ``dtype``. Sets :attr:`train_latents`."""
        params = {n: p.to(dtype).unsqueeze(0) for n, p in self.teacher.named_parameters()}
        splits = {}
        for split, n in zip(("train", "val", "test"), self.sizes):
            x = torch.randn(n, self.teacher.widths[0], generator=generator)
            noiseless = split != "train" or self.noiseless_labels
            latents, top = self.teacher.generate(params, x.to(dtype), generator, noiseless=noiseless)
            if split == "train":
                self.train_latents = {name: v[0].float() for name, v in latents.items()}
            splits[split] = (x, self._labels(top[0]))
        return splits
