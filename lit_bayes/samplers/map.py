"""``MAP``: deterministic training (Adam, SGD or any torch optimiser) of the same posterior, the baseline."""
from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn

from lit_bayes.optimizers import check_optimizer_arguments, make_optimizer
from lit_bayes.posterior import Likelihood, Prior
from lit_bayes.samplers.base import SamplerModule

__all__ = ["MAP"]


class MAP(SamplerModule):
    """Maximum a posteriori training: minimise U(theta) / N with a torch optimiser.

    The loss is the energy of :mod:`lit_bayes.posterior` divided by ``num_data`` (the
    batch size with ``minibatch_scaling="sum"`` and no ``num_data``), so learning rates
    do not depend on the data size; its minimiser is the MAP estimate of
    the tempered posterior. With ``num_chains > 1`` the independently initialised chains
    form a deep ensemble. MAP keeps no samples: predictions use the current parameters.
    ``temperature`` has no meaning for the estimate: exp(-U/T) has the same maximiser for every T,
    and the loss is only scaled by 1/T (which changes SGD's effective learning rate, not Adam's).

    ``optimizer`` is any ``torch.optim`` class by its lower-case name (``"adam"``, ``"sgd"``,
    ``"adamw"``, ``"rmsprop"``, ...), ``lr`` its learning rate and ``optimizer_options`` its
    other arguments.
    """

    keeps_draws = False

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: Prior | None = None,
        optimizer: str = "adam",
        lr: float = 1e-2,
        optimizer_options: dict[str, Any] | None = None,
        num_data: int | None = None,
        temperature: float = 1.0,
        minibatch_scaling: Literal["rescaled", "sum"] = "rescaled",
        num_chains: int = 1,
        seed: int = 0,
        init: Literal["module", "prior", "template"] = "module",
        vectorize: bool = True,
    ) -> None:
        super().__init__(
            model=model, likelihood=likelihood, prior=prior, num_data=num_data, temperature=temperature,
            minibatch_scaling=minibatch_scaling, num_chains=num_chains, burn_in=0, thinning=1, seed=seed, init=init,
            vectorize=vectorize,
        )
        self.optimizer_name, self.lr, self.optimizer_options = check_optimizer_arguments(optimizer, lr,
                                                                                          optimizer_options)

    def configure_optimizers(self):
        self.make_generator()
        return make_optimizer(self.optimizer_name, self.chains.parameters(), self.lr, self.optimizer_options)

    def is_sample_step(self) -> bool:
        return False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = self.check_batch(batch)
        energy = self.energy(self.chains.as_dict(), x, y)
        self.check_energy(energy)
        loss = energy.sum() / (self.posterior.num_data or x.shape[0])  # per-point scale for the optimiser
        self.log_train({"train/loss": loss.detach() / self.num_chains}, prog_bar=("train/loss",))
        return loss
