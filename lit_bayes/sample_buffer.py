"""``SampleBuffer``: the empirical approximation q̂^(t) of structured SG-MCMC.

Structured SG-MCMC (structured-sgmcmc spec §1.4-1.7, Eqs. 14-16, Algorithms 1-2) replaces
the other groups' parameters by a draw θ̃ from q̂^(t), "composed of samples from previous
timesteps". The paper leaves the details open (spec §1.7, §7 item 7); this buffer makes
them explicit and follows the authors' code where the paper is silent:

- a FIFO ring of the last ``capacity`` states of every chain (the oldest is overwritten);
- entries are detached copies (no aliasing with the live parameters, spec §7 item 4);
- a draw picks, for every chain, every composite and every group, an independent index
  uniform over the stored states, so θ̃ follows the product of the groups' empirical
  marginals, the mean-field family of Theorem 1/2.

The stored states, their count and the write position are registered buffers: they go
into ``state_dict`` and so into Lightning checkpoints, and load with ``weights_only=True``.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from lit_bayes.validation import check_int

__all__ = ["SampleBuffer"]


class SampleBuffer(nn.Module):
    """A ring buffer of ``capacity`` past flat states of each of ``num_chains`` chains.

    ``samples`` has shape ``(num_chains, num_params, capacity)``: the states of one
    parameter lie side by side, so a draw with a different past index for every group
    (every parameter, when fully factorised) reads memory locally.

    Args:
        num_chains: C, chains stored side by side.
        num_params: P, the length of a chain's flat parameter vector.
        capacity: states kept per chain (the authors' code keeps 5000).
        dtype, device: of the stored states (those of the chains).
    """

    def __init__(self, num_chains: int, num_params: int, capacity: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        super().__init__()
        for name, value in (("num_chains", num_chains), ("num_params", num_params), ("capacity", capacity)):
            check_int(name, value, 1)
        self.register_buffer("samples", torch.zeros(num_chains, num_params, capacity, dtype=dtype, device=device))
        self.register_buffer("count", torch.zeros((), dtype=torch.long, device=device))
        self.register_buffer("position", torch.zeros((), dtype=torch.long, device=device))

    @property
    def capacity(self) -> int:
        return self.samples.shape[2]

    def __len__(self) -> int:
        """Number of states stored per chain."""
        return int(self.count)

    @torch.no_grad()
    def push(self, flat: Tensor) -> None:
        """Store a copy of the current states ``(num_chains, num_params)``."""
        expected = tuple(self.samples.shape[:2])
        if tuple(flat.shape) != expected:
            raise ValueError(f"flat must have shape {expected} (chains, parameters), got {tuple(flat.shape)}")
        self.samples[..., int(self.position)] = flat.detach()
        self.position.copy_((self.position + 1) % self.capacity)
        self.count.clamp_(max=self.capacity - 1).add_(1)

    @torch.no_grad()
    def clear(self) -> None:
        """Forget every stored state."""
        self.count.zero_()
        self.position.zero_()

    @torch.no_grad()
    def draw(self, group_ids: Tensor | None, num_groups: int, num_draws: int, generator: torch.Generator) -> Tensor:
        """``num_draws`` samples θ̃ per chain, shape ``(num_chains, num_draws, num_params)``
        (a transposed view of a fresh tensor).

        Group g of draw k of chain c is copied from stored state ``I[c, g, k]``, with all
        ``I`` i.i.d. uniform over the stored states (one independent past index per group).
        ``group_ids`` ``(num_params,)`` gives each flat parameter's group in ``[0, num_groups)``;
        ``None`` means every parameter is its own group (``num_groups == num_params``).
        """
        stored = len(self)
        if stored == 0:
            raise RuntimeError("the sample buffer is empty: push a state before drawing from it")
        chains, num_params, _ = self.samples.shape
        if group_ids is None and num_groups != num_params:
            raise ValueError(f"group_ids=None means one group per parameter ({num_params}), got num_groups={num_groups}")
        index = torch.randint(stored, (chains, num_groups, num_draws), generator=generator, device=self.samples.device)
        per_param = index if group_ids is None else index.index_select(1, group_ids)
        return torch.gather(self.samples, 2, per_param).transpose(1, 2)
