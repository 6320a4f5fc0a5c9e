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
available; ``seed`` still seeds the shuffle. Used by ``run_exp_a.py --data released``, which
prints the released logs' test MSE (``RELEASED_LOG``) beside ours.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from lit_bayes.data import TeacherStudent

__all__ = ["RELEASED_LOG", "RELEASED_NORMS", "RELEASED_NORMS_SWEEP", "ReleasedExpATeacher", "released_test_mse"]

TEACHER_SEED, DATA_SEED, DELTA = 3, 10000, 1e-4
WIDTHS, NUM_TRAIN, NUM_TEST = (50, 10, 1), 2084, 2000

# Test MSE against the teacher in the released Fig. 1 logs (column ``test_mse``), at the logged sweep
# nearest each key: the informed chain, the zero-initialised one and the two random ones.
RELEASED_LOG = {
    0: (3.1499e-08, 3.4063e-01, 6.9515e-01, 1.2755e+00),
    100: (6.0386e-05, 6.3056e-02, 3.3530e-01, 2.5936e-01),
    1000: (1.2785e-04, 1.8496e-02, 1.6225e-01, 2.9373e-01),
    3000: (1.5756e-04, 1.1760e-02, 1.2859e-01, 1.4192e-01),
    10006: (1.5714e-04, 1.7137e-03, 9.1743e-02, 9.6061e-02),
    19992: (1.5814e-04, 5.9088e-04, 7.7787e-02, 8.1800e-02),
    40003: (1.7609e-04, 2.5508e-04, 5.9943e-02, 6.2950e-02),
    59967: (1.6720e-04, 2.1143e-04, 4.4529e-02, 4.2242e-02),
    80042: (1.6679e-04, 1.7935e-04, 2.4197e-02, 3.0541e-02),
    99939: (1.7210e-04, 1.7322e-04, 1.7709e-02, 2.4415e-02),
    150031: (1.6841e-04, 1.7179e-04, 1.2186e-02, 1.0665e-02),
    199965: (1.6680e-04, 1.7574e-04, 1.1235e-02, 7.6608e-03),
    250035: (1.4930e-04, 1.6396e-04, 1.0081e-02, 4.9173e-03),
    300194: (1.5825e-04, 1.7727e-04, 9.5803e-03, 2.9095e-03),
    500289: (1.6920e-04, 1.6032e-04, 4.7935e-03, 1.1352e-03),
    999563: (1.5784e-04, 1.5319e-04, 1.2196e-03, 1.1460e-03),
    1997099: (1.5960e-04, 1.5667e-04, 1.2026e-03, 1.1152e-03),
}

# |W1| and |W2| (columns ``W_norm``, ``a_norm``): the teacher's (the informed log's first row) and the two
# random chains' at the last logged sweep of the released Fig. 1 logs (on their plateau), whose output
# weights end at twice the teacher's norm.
RELEASED_NORMS_SWEEP = 1997099
RELEASED_NORMS = {"teacher": (3.1136, 0.98691), "random 1": (2.8317, 2.1618), "random 2": (2.8342, 2.2182)}


def released_test_mse(step: int, init: str) -> tuple[int, float, float]:
    """(logged sweep, informed, uninformed) test MSE of the released Fig. 1 logs nearest ``step``
    (on a log scale); uninformed: the zero chain for ``init == "zeros"``, else the random chains' mean."""
    logged = min(RELEASED_LOG, key=lambda t: abs(math.log1p(t) - math.log1p(step)))
    informed, zero, *random = RELEASED_LOG[logged]
    return logged, informed, zero if init == "zeros" else sum(random) / len(random)


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
        # the parent's draw order (training inputs, their Z2, X2 and y noise, then the noiseless test
        # inputs) is the released script's; its draws were float32
        return self.draw_splits(torch.Generator().manual_seed(DATA_SEED), torch.float32)
