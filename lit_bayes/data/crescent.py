"""Data of the crescent toy (Feynman-Kac paper Sec. 4.1, Eq. 8; feynman-kac spec §6.1).

``y_k = phi_2 / psi + (phi_1^2 + psi^2) / 2 + eps_k`` with ``eps_k ~ N(0, noise_std^2)``, at the
true ``psi = 1`` and the realisation ``phi = (0, 0)``, i.e. ``y_k = 0.5 + eps_k`` (N = 100).
The model has no covariates: ``x`` is a dummy ``(n, 1)`` zeros input that only carries the
batch size (:class:`lit_bayes.models.crescent.Crescent` ignores its values).

Splits: the paper trains on all 100 points and does no model selection, so the default has
no validation split; the test split (100 further draws of the same model) only gives the
run a held-out predictive NLPD, which the paper does not report.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lit_bayes.data.synthetic import _check_sizes, _SampledSplits
from lit_bayes.models.crescent import Crescent, check_psi
from lit_bayes.validation import check_float, check_positive

__all__ = ["CrescentData"]


class CrescentData(_SampledSplits):
    """Observations of the crescent model (Eq. 8) at fixed ``(psi, phi)``.

    Args:
        num_train, num_val, num_test: split sizes (the paper: 100 training points, no val/test).
        psi: the true psi (finite, non-zero; the paper: 1).
        phi: the realised ``(phi_1, phi_2)`` (the paper: ``(0, 0)``).
        noise_std: std of the observation noise (> 0; the model's: 1).
        batch_size: training batch size (the paper uses 10); ``None`` = full batch.
        eval_batch_size: val/test batch size; ``None`` = one batch.
        seed: seed of the data generator and of the shuffle.
        num_workers: DataLoader workers.
        drop_last: drop a smaller last training batch (default: under sum scaling only; see
            :class:`~lit_bayes.data.base.BayesDataModule`).
    """

    def __init__(
        self,
        num_train: int = 100,
        num_val: int = 0,
        num_test: int = 100,
        psi: float = 1.0,
        phi: Sequence[float] = (0.0, 0.0),
        noise_std: float = 1.0,
        batch_size: int | None = 10,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        drop_last: bool | None = None,
    ) -> None:
        super().__init__(
            task="regression",
            num_classes=None,
            input_shape=(1,),
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            seed=seed,
            num_workers=num_workers,
            drop_last=drop_last,
        )
        self.sizes = _check_sizes(num_train, num_val, num_test)
        self.psi = check_psi(psi)
        if isinstance(phi, (str, bytes)) or not isinstance(phi, Sequence) or len(phi) != 2:
            raise ValueError(f"phi must be a pair (phi_1, phi_2) of finite numbers, got {phi!r}")
        self.phi = tuple(check_float(f"phi[{i}]", v) for i, v in enumerate(phi))
        self.noise_std = check_positive("noise_std", noise_std)

    @property
    def true_mean(self) -> float:
        """The noise-free mean of every observation (0.5 with the paper's values)."""
        return float(Crescent.mean(torch.tensor(self.phi[0]), torch.tensor(self.phi[1]), self.psi))

    def _sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        eps = torch.randn(n, generator=generator, dtype=torch.float64)
        return torch.zeros(n, 1), (self.true_mean + self.noise_std * eps).float()
