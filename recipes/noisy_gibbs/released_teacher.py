"""The paper's own Exp. A teacher and data set, redrawn from the seeds of its released script.

Exp. A (spec §6.1, Fig. 1) reports one teacher and one chain per initialisation. To compare our
chains with the released logs on the same teacher, this data module draws what the released
script draws, in its order and in float32 on the CPU generator:

- teacher (seed 3): W1 ``(10, 50)`` ~ N(0, 1/50), W2 ``(1, 10)`` ~ N(0, 1/10), b1 ``(10,)`` ~ N(0, 1/50),
  b2 ``(1,)`` ~ N(0, 1/10) (the priors of §6.1, lambda = fan-in);
- data (seed 10000): X ``(2084, 50)`` ~ N(0, 1), then the noise of Z^(2), of X^(2) and of y, each
  sqrt(Delta) N(0, 1) with Delta = 1e-4, then the test inputs ``(2000, 50)`` ~ N(0, 1);
- labels through eq. 7: Z2 = X W1^T + b1 + noise, X2 = relu(Z2) + noise, y = X2 W2^T + b2 + noise;
  test labels noiseless.

The redrawn teacher matches the first row of the released informed log (|W1| = 3.1136,
|W2| = 0.98691, mean squared noiseless training output 0.36279; tested). Only the paper's sizes are
available; ``seed`` still seeds the shuffle. Used by ``run_exp_a.py --data released``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from lit_bayes.data import TeacherStudent

__all__ = ["ReleasedExpATeacher"]

TEACHER_SEED, DATA_SEED, DELTA = 3, 10000, 1e-4
WIDTHS, NUM_TRAIN, NUM_TEST = (50, 10, 1), 2084, 2000


class ReleasedExpATeacher(TeacherStudent):
    """:class:`lit_bayes.data.TeacherStudent` at the paper's Exp. A sizes, with the released
    script's teacher, inputs and noise (module docstring).

    Args:
        batch_size, eval_batch_size, seed, num_workers: as in ``TeacherStudent`` (``seed`` seeds
            only the shuffle here).
    """

    def __init__(self, batch_size: int | None = None, eval_batch_size: int | None = None, seed: int = 0,
                 num_workers: int = 0) -> None:
        super().__init__(WIDTHS, "relu", DELTA, DELTA, num_train=NUM_TRAIN, num_val=0, num_test=NUM_TEST,
                         batch_size=batch_size, eval_batch_size=eval_batch_size, seed=seed, num_workers=num_workers)

    def load(self) -> dict[str, tuple[Tensor, Tensor]]:
        d, k, _ = WIDTHS
        teacher = torch.Generator().manual_seed(TEACHER_SEED)
        w1 = torch.randn(k, d, generator=teacher) / math.sqrt(d)
        w2 = torch.randn(1, k, generator=teacher) / math.sqrt(k)
        b1 = torch.randn(k, generator=teacher) / math.sqrt(d)
        b2 = torch.randn(1, generator=teacher) / math.sqrt(k)
        first, second = self.teacher.layers
        with torch.no_grad():
            for p, value in ((first.weight, w1), (first.bias, b1), (second.weight, w2), (second.bias, b2)):
                p.copy_(value)
        data = torch.Generator().manual_seed(DATA_SEED)
        x = torch.randn(NUM_TRAIN, d, generator=data)
        noise_z = math.sqrt(DELTA) * torch.randn(NUM_TRAIN, k, generator=data)
        noise_x = math.sqrt(DELTA) * torch.randn(NUM_TRAIN, k, generator=data)
        noise_y = math.sqrt(DELTA) * torch.randn(NUM_TRAIN, 1, generator=data)
        x_test = torch.randn(NUM_TEST, d, generator=data)
        z2 = x @ w1.T + b1 + noise_z
        x2 = torch.relu(z2) + noise_x
        y = x2 @ w2.T + b2 + noise_y
        self.train_latents = {"z2": z2, "x2": x2}
        with torch.no_grad():
            y_test = self.teacher(x_test)
        empty = torch.empty(0, d)
        return {"train": (x, y[:, 0]), "val": (empty, torch.empty(0)), "test": (x_test, y_test[:, 0])}
