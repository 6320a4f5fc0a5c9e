"""Mask laws of structured SG-MCMC and the normaliser of their energy estimator.

A mask ``r`` holds one value per parameter group (structured-sgmcmc spec §2); the
composite parameter set it selects is ``r θ + (1 - r) θ̃`` with θ̃ a past sample, so
``r_i = 1`` keeps the current θ_i (it receives gradient) and ``r_i = 0`` replaces it.

The energy estimator of Eq. 16 (spec Eq. 7 / 16 and App. D Eq. 43, signs and the
``E[Σ r_i]`` typo corrected, spec §2.3) is

    U_hat^(S_d)(θ) = M / (K E_r[Σ_i r_i]) · Σ_{k=1..K} U_hat(r^(k) θ + (1 - r^(k)) θ̃^(k)),

and this module owns the laws of ``r`` and their normaliser ``M / (K E[Σ r_i])``:

=============  =================================  ==============  ================
law            r_i                                E[Σ_i r_i]      normaliser
=============  =================================  ==============  ================
``bernoulli``  i.i.d. Bernoulli(ρ), ρ = KEEP prob  M ρ             1 / (K ρ)
``uniform``    i.i.d. Uniform[0, 1]                M / 2           2 / K
``one_hot``    e_j, j ~ Uniform{1..M}              1               M / K
=============  =================================  ==============  ================

S-SGMCMC (Eqs. 14-15, Algorithm 1) uses the M deterministic one-hot masks once each
(:func:`structured_masks`): K = M, normaliser M / (M · 1) = 1, i.e. the plain sum of the
M group terms.
"""
from __future__ import annotations

import torch
from torch import Tensor

from lit_bayes.validation import check_int, check_interval

__all__ = ["MASK_LAWS", "MaskLaw", "structured_masks"]

MASK_LAWS = ("bernoulli", "uniform", "one_hot")


class MaskLaw:
    """A distribution over per-group masks ``r ∈ [0, 1]^M`` (spec §2.3-2.4).

    Args:
        name: ``"bernoulli"``, ``"uniform"`` or ``"one_hot"``.
        keep_prob: ρ of the Bernoulli law, the probability of KEEPING a group's current
            value (ρ → 1: plain SGMCMC; ρ → 0: S-SGMCMC; spec §2.5). Must lie in (0, 1];
            the other laws do not use it.
    """

    def __init__(self, name: str = "bernoulli", keep_prob: float = 0.5) -> None:
        if name not in MASK_LAWS:
            raise ValueError(f"mask must be one of {', '.join(map(repr, MASK_LAWS))}, got {name!r}")
        self.name = name
        self.keep_prob = check_interval("keep_prob (ρ, the probability of keeping a group)", keep_prob, 0.0, 1.0,
                                        high_closed=True)

    def expected_keep(self, num_groups: int) -> float:
        """``E[Σ_i r_i]`` over the M groups."""
        if self.name == "bernoulli":
            return num_groups * self.keep_prob
        if self.name == "uniform":
            return num_groups / 2.0
        return 1.0

    def normaliser(self, num_groups: int, num_masks: int) -> float:
        """``M / (K E[Σ r_i])`` of Eq. 16: it multiplies the whole sum of the K energies."""
        return num_groups / (num_masks * self.expected_keep(num_groups))

    def sample(self, shape: tuple[int, ...], num_groups: int, generator: torch.Generator,
               device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> Tensor:
        """Masks of shape ``(*shape, num_groups)`` drawn from ``generator`` only.

        Bernoulli masks are ``U < ρ`` with ``U ~ Uniform[0, 1)``, so ρ = 1 gives all ones
        exactly while drawing the same numbers as any other ρ.
        """
        if self.name == "one_hot":
            picks = torch.randint(num_groups, shape, generator=generator, device=device)
            return torch.nn.functional.one_hot(picks, num_groups).to(dtype)
        draws = torch.rand((*shape, num_groups), generator=generator, device=device, dtype=dtype)
        return (draws < self.keep_prob).to(dtype) if self.name == "bernoulli" else draws

    def __repr__(self) -> str:
        if self.name == "bernoulli":
            return f"MaskLaw({self.name!r}, keep_prob={self.keep_prob:g})"
        return f"MaskLaw({self.name!r})"


def structured_masks(num_groups: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> Tensor:
    """The M one-hot masks of S-SGMCMC (Eq. 14, Algorithm 1), one per group: ``(M, M)``."""
    return torch.eye(check_int("num_groups", num_groups, 1), device=device, dtype=dtype)
