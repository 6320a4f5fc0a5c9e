"""The structured energy of S-SGMCMC and S_d-SGMCMC (Alexos et al., structured SG-MCMC, seed 001).

The algorithm box of the structured samplers' gradient; the base stepper (SGLD, pSGLD, SGHMC,
Eqs. 44-46) then moves every parameter with it, noise, preconditioner and momentum unchanged
(spec §3, §7 item 6). One step of Algorithm 1 (``mode="structured"``) or Algorithm 2
(``mode="dropout"``), for the C chains at once (structured-sgmcmc spec §1-2):

1. masks: S-SGMCMC takes the M one-hot masks r^(i) (group i kept, Eq. 14); S_d-SGMCMC draws K
   masks r^(k) from the Bernoulli(rho), uniform or one-hot law (Eq. 16 / Eq. 43,
   :class:`lit_bayes.masks.MaskLaw`), from the structure generator;
2. past states: theta~^(k) ~ q^(t), every group of every composite from an independent uniform
   draw of the buffer of past states (:meth:`lit_bayes.sample_buffer.SampleBuffer.draw`), after
   the masks, from the same generator;
3. composites r^(k) theta + (1 - r^(k)) theta~^(k), the masks broadcast from groups to their
   parameters, gradients reaching theta only through r theta;
4. energy: U_hat^(S)(theta) = sum_{i=1..M} U_hat([theta_i, theta~^(i)_{-i}]) (Eq. 14), or
   U_hat^(S_d)(theta) = M / (K E[sum_i r_i]) sum_{k=1..K} U_hat(composite k) (Eq. 16), the C·K
   composites evaluated in one vectorised call of the caller's energy on the same minibatch.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from lit_bayes.masks import MaskLaw, structured_masks
from lit_bayes.sample_buffer import SampleBuffer

__all__ = ["StructuredEnergy"]


class StructuredEnergy:
    """Steps 1-4 of the module docstring for a partition into ``num_groups`` groups.

    Args:
        mode: ``"structured"`` (S-SGMCMC, M one-hot masks) or ``"dropout"`` (S_d-SGMCMC, K masks).
        num_groups: M.
        mask_law: the law of the dropout masks.
        num_masks: K (dropout only).
    """

    def __init__(self, mode: Literal["structured", "dropout"], num_groups: int, mask_law: MaskLaw,
                 num_masks: int) -> None:
        self.mode, self.num_groups, self.mask_law, self.num_masks = mode, num_groups, mask_law, num_masks

    @property
    def num_composites(self) -> int:
        """Composite parameter sets per chain and step: M (structured) or K (dropout)."""
        return self.num_groups if self.mode == "structured" else self.num_masks

    def normaliser(self) -> float:
        """``M / (K E[Σ r_i])`` (Eq. 16): 1 for the M one-hot masks of S-SGMCMC."""
        if self.mode == "structured":
            return 1.0
        return self.mask_law.normaliser(self.num_groups, self.num_masks)

    def draw(self, buffer: SampleBuffer, group_ids: Tensor | None, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Steps 1-2: the group masks ``(C, K, M)`` and detached past states θ̃ ``(C, K, P)``;
        ``group_ids`` ``(P,)`` maps parameters to groups (None: group g is parameter g)."""
        like = buffer.samples
        chains, groups = like.shape[0], self.num_groups
        if self.mode == "structured":
            masks = structured_masks(groups, like.device, like.dtype).expand(chains, groups, groups)
        else:
            masks = self.mask_law.sample((chains, self.num_composites), groups, generator, like.device, like.dtype)
        return masks, buffer.draw(group_ids, groups, self.num_composites, generator)

    def energy(self, flat: Tensor, masks: Tensor, tilde: Tensor, group_ids: Tensor | None,
               stacked_energy: Callable[[Tensor], Tensor]) -> Tensor:
        """Steps 3-4: U_hat^(S) or U_hat^(S_d) of every chain ``(C,)``, from the chains' flat states
        ``flat`` ``(C, P)`` (gradients flow to them), the draws of :meth:`draw`, and
        ``stacked_energy``, the energy of flat parameter sets ``(S, P)`` on the step's minibatch ``(S,)``."""
        chains, count = masks.shape[:2]
        keep = masks if group_ids is None else torch.gather(masks, 2, group_ids.expand(chains, count, -1))
        # lerp(θ̃, θ, r) = r θ + (1 - r) θ̃, exactly θ where r = 1 and θ̃ where r = 0
        composites = torch.lerp(tilde.detach(), flat.unsqueeze(1), keep)
        energies = stacked_energy(composites.reshape(chains * count, -1)).reshape(chains, count)
        return self.normaliser() * energies.sum(1)
