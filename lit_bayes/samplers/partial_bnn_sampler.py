"""``PartialBNNSampler``: the base of the samplers whose state is a distribution over a partial BNN's stochastic
part phi while its deterministic part psi is trained (the Feynman-Kac samplers and their VB baseline, feynman-kac
spec §§3-5)."""
from __future__ import annotations

from typing import Any

from torch import Tensor

from lit_bayes.models.partial_bnn import PartialBNN
from lit_bayes.samplers.base import SamplerModule

__all__ = ["PartialBNNSampler"]


class PartialBNNSampler(SamplerModule):
    """A :class:`SamplerModule` over the stochastic part phi of a :class:`~lit_bayes.models.PartialBNN`, whose
    deterministic part psi it trains.

    It checks that ``model`` is a ``PartialBNN`` with a non-empty psi, lets psi take gradients, samples phi only
    (:meth:`template_parameters`, named relative to the wrapped network as ``net.<name>``) and evaluates draws of
    phi under the current psi with :meth:`PartialBNN.particle_forward`. The base's generic :meth:`outputs` would
    read those net-relative names against the ``PartialBNN`` itself and silently use the template phi instead, so
    every sampler of this kind must come through here.

    Args:
        model: the partial BNN.
        **kwargs: the rest of :class:`~lit_bayes.samplers.base.SamplerModule`'s arguments.
    """

    independent_chains = False  # one cloud or one q: nothing to compare across chains

    def __init__(self, model: PartialBNN, **kwargs: Any) -> None:
        if not isinstance(model, PartialBNN):
            raise ValueError(f"model must be a lit_bayes.models.PartialBNN, got {type(model).__name__}")
        if not model.deterministic_names:
            # psi is what these samplers train; under manual optimisation its optimiser step is also what
            # advances Lightning's step count (burn-in, thinning, max_steps)
            raise ValueError(
                f"{type(self).__name__} trains the deterministic parameters psi of the PartialBNN, but its "
                f"stochastic={model.stochastic_names} covers every parameter, leaving psi empty: keep some "
                "parameters deterministic, or sample the whole network with SGMCMC, HMC or BlockGibbs"
            )
        super().__init__(model=model, **kwargs)
        for p in model.deterministic_parameters():
            p.requires_grad_(True)

    @property
    def stream_rank(self) -> int:
        return 0  # the same particles or q on every process

    def template_parameters(self) -> dict[str, Tensor]:
        """phi only, as ``net.<name>`` with the wrapped network's names."""
        return {f"net.{n}": p for n, p in self.model.stochastic_parameters().items()}

    def outputs(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """Outputs ``(S, B, ...)`` of the draws ``params`` of phi under the current psi: batched
        (:meth:`PartialBNN.particle_forward`), or with ``vectorize=False`` the reference loop."""
        phi, _ = self.split_parameters(params)
        forward = self.model.particle_forward if self.vectorize else self.model.particle_forward_loop
        return forward(phi, x)
