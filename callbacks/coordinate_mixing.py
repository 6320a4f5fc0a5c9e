"""``CoordinateMixing``: the kept states of a fixed subset of parameter coordinates, and their
mixing summary (:func:`lit_bayes.mixing.coordinate_mixing`) in ``summary.json``."""
from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from lit_bayes.diagnostics import MIN_DRAWS
from lit_bayes.mixing import coordinate_mixing, pick_coordinates
from lit_bayes.validation import check_int

__all__ = ["CoordinateMixing"]

PREFIX = "mixing/"


class CoordinateMixing(Callback):
    """Keeps, after every step the sampler's ``is_sample_step()`` accepts (its burn-in and
    thinning), the values of ``num_coords`` fixed random parameter coordinates of every chain
    (the last ``max_draws`` of them): enough for the mixing summary without holding thousands of
    full network states. At the end of fit it reports, through :meth:`summary_metrics`
    (:class:`RunSummary` writes them into ``summary.json``):

    - ``mixing/ess_median``, ``mixing/ess_within_median``, ``mixing/iac_median``,
      ``mixing/draws_per_chain``, ``mixing/coords``: :func:`lit_bayes.mixing.coordinate_mixing`
      (only with at least 4 kept draws);
    - ``mixing/forward_backward_passes``: the steps times the network passes each step costs
      (the sampler's ``num_composites``, 1 for a plain sampler), the cost the paper's ESS is set against.

    Args:
        num_coords: coordinates traced (all of them when the network has fewer).
        max_draws: newest kept draws used per chain.
        seed: seed of the coordinate subset.
    """

    def __init__(self, num_coords: int = 1000, max_draws: int = 5000, seed: int = 0) -> None:
        self.num_coords = check_int("num_coords", num_coords, 1)
        self.max_draws = check_int("max_draws", max_draws, 1)
        self.seed = seed
        self.picks: Tensor | None = None
        self.draws: list[Tensor] = []
        self._metrics: dict[str, float] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not pl_module.is_sample_step():
            return
        flat = pl_module.chains.flat()
        if self.picks is None:
            self.picks = pick_coordinates(flat.shape[1], self.num_coords, self.seed)
        self.draws.append(flat[:, self.picks.to(flat.device)].detach().cpu())
        if len(self.draws) > self.max_draws:
            del self.draws[0]

    def trace(self) -> Tensor | None:
        """``(chains, draws, coords)`` of the kept draws, or ``None`` before the first."""
        return torch.stack(self.draws, dim=1) if self.draws else None

    def on_fit_end(self, trainer, pl_module) -> None:
        passes = trainer.global_step * int(getattr(pl_module, "num_composites", 1))
        self._metrics = {f"{PREFIX}forward_backward_passes": float(passes)}
        trace = self.trace()
        if trace is not None and trace.shape[1] >= MIN_DRAWS:
            # the coordinates are picked already: no second subset
            summary = coordinate_mixing(trace, num_coords=trace.shape[-1], seed=self.seed)
            self._metrics.update({f"{PREFIX}{k}": float(v) for k, v in summary.items()})

    def summary_metrics(self) -> dict[str, float]:
        """The mixing summary of the last fit (empty before one ends)."""
        return dict(self._metrics)

    def state_dict(self) -> dict[str, Any]:
        return {"picks": self.picks, "draws": self.trace()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.picks = state_dict.get("picks")
        draws = state_dict.get("draws")
        self.draws = [] if draws is None else list(draws.unbind(1))
