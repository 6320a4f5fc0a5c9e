"""Metropolis-within-blocked-Gibbs: one systematic-scan sweep per ``step``, batched over chains.

Sweep t visits blocks q = 1..M in order (FNBG spec §2.1, Algorithm 2 of [000]). For block q
every chain proposes theta*_q ~ N(theta_q, sigma_q^2 I) (an isotropic Gaussian with the
chain's variance for that block) and accepts iff

    log u < U(theta) - U(theta*),   u ~ U(0, 1)                      (Eq. 4.1 of [003], in log space)

where theta* is the current full state with block q replaced (U includes the prior, so the
ratio holds the block's prior ratio). A proposal whose energy is NaN or infinite is a
rejection. The energies come from a block target (:mod:`lit_bayes.incremental`) that the
closure returns, bound to the sweep's batch, so the current energy is recomputed on every
new batch (spec §8 item 4).

Adaptive variances (optional, spec §6 item 2): during the first ``adapt_steps`` sweeps each
chain's log sigma_q^2 moves by t^(-0.6) (alpha_q - target_accept) after sweep t, alpha_q being
that sweep's acceptance probability min(1, exp(log ratio)) (Robbins-Monro, Andrieu & Thoms
2008, Sec. 5); afterwards the variances are frozen, so the kept chain is a valid MH chain.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor
from torch.optim import Optimizer

from lit_bayes.chains import flat_rows
from lit_bayes.incremental import BlockTarget
from lit_bayes.validation import check_int, check_interval, check_positive

__all__ = ["BlockMetropolis"]

_ADAPT_DECAY = 0.6


class BlockMetropolis(Optimizer):
    """One Metropolis-within-Gibbs sweep over all blocks per ``step(closure)``, every chain at once.

    Args:
        params: every chain-stacked parameter tensor ``(C, ...)``, in ``ChainState.flat`` order.
        variances: initial proposal variance sigma_q^2 of every block (length M).
        target_accept: acceptance rate the adaptation aims at, in (0, 1).
        adapt_steps: sweeps with adaptive variances (0: fixed variances).
        generator: the sampler's generator (proposals and uniforms), for exact resume.

    ``closure()`` returns a :class:`~lit_bayes.incremental.BlockTarget` with M blocks bound to
    the sweep's batch; ``step`` returns the energies ``(C,)`` of the states after the sweep.
    The state (``variance`` (C, M), ``accepted`` (C, M) and ``step``) is in ``state_dict``.
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        variances: Sequence[float],
        target_accept: float = 0.3,
        adapt_steps: int = 0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(params, self.options(variances, target_accept, adapt_steps))
        if len(self.param_groups) != 1:
            raise ValueError("BlockMetropolis takes one parameter group (all chains move together)")
        self.generator = generator

    @staticmethod
    def options(variances: Sequence[float], target_accept: float = 0.3, adapt_steps: int = 0) -> dict:
        """The checked options (the stepper's ``defaults``), without building a stepper."""
        variances = [check_positive(f"variances[{i}]", v) for i, v in enumerate(variances)]
        if not variances:
            raise ValueError("variances must hold one proposal variance per block, got none")
        return {"variances": variances, "target_accept": check_interval("target_accept", target_accept, 0.0, 1.0),
                "adapt_steps": check_int("adapt_steps", adapt_steps, 0)}

    def _state(self) -> dict:
        params = self.param_groups[0]["params"]
        state = self.state[params[0]]
        if "variance" not in state:
            like = {"dtype": params[0].dtype, "device": params[0].device}  # so checkpoints load back unchanged
            variances = torch.tensor(self.param_groups[0]["variances"], **like).expand(params[0].shape[0], -1)
            # integer counts stay exact however long the chain (a float32 count stalls at 2^24)
            state.update(variance=variances.clone(),
                         accepted=torch.zeros(variances.shape, dtype=torch.long, device=params[0].device),
                         step=torch.zeros((), dtype=torch.long))
        return state

    def proposal_variances(self) -> Tensor:
        """Current proposal variance of every chain and block ``(C, M)``."""
        return self._state()["variance"]

    def acceptance(self) -> tuple[Tensor, int]:
        """Accepted proposals per chain and block ``(C, M)`` and the proposals made per block."""
        state = self._state()
        return state["accepted"], int(state["step"])

    def _proposal_steps(self, std: Tensor, sizes: list[int]) -> tuple[Tensor, ...]:
        """Every block's proposal step ``(C, size_q)`` for one sweep, sigma_q times standard normals, drawn
        in one call (the proposals do not depend on the state) and returned as views, one per block."""
        noise = torch.randn((std.shape[0], sum(sizes)), generator=self.generator, device=std.device, dtype=std.dtype)
        scale = std.repeat_interleave(torch.tensor(sizes, device=std.device), dim=1, output_size=noise.shape[1])
        return noise.mul_(scale).split(sizes, dim=1)

    @torch.no_grad()
    def step(self, closure: Callable[[], BlockTarget]) -> Tensor:  # type: ignore[override]
        group = self.param_groups[0]
        params = group["params"]
        state = self._state()
        target = closure()
        chains, blocks = state["variance"].shape
        if target.num_blocks != blocks:
            raise ValueError(f"the target has {target.num_blocks} blocks, this stepper was built for {blocks}")
        std = state["variance"].sqrt()
        log_u = torch.rand((chains, blocks), generator=self.generator, device=std.device, dtype=std.dtype).log()
        steps = self._proposal_steps(std, [target.block_size(q) for q in range(blocks)])
        target.reset(flat_rows(p.detach() for p in params), steps)
        adapt = int(state["step"]) < group["adapt_steps"]
        alpha = torch.empty_like(std) if adapt else None
        accepts = []
        for q, (step, threshold) in enumerate(zip(steps, log_u.T)):
            # a NaN state moves to any finite proposal; a NaN or infinite proposal is +inf, never accepted
            # (log_ratio -inf, or NaN where the state is infinite too)
            now = torch.nan_to_num(target.energy, nan=math.inf)
            log_ratio = now - torch.nan_to_num(target.propose(q, step), nan=math.inf, posinf=math.inf, neginf=math.inf)
            accept = threshold < log_ratio
            target.commit(accept)
            accepts.append(accept)
            if adapt:
                alpha[:, q] = log_ratio.clamp(max=0.0).exp().nan_to_num(nan=0.0)  # NaN: a rejection
        state["accepted"] += torch.stack(accepts, dim=1)
        state["step"] += 1
        if adapt:
            rate = float(state["step"]) ** -_ADAPT_DECAY
            state["variance"].mul_(torch.exp(rate * (alpha - group["target_accept"])))
        start = 0
        for p in params:
            size = p[0].numel()
            p.copy_(target.state[:, start : start + size].view_as(p))
            start += size
        return target.energy
