"""Partial Bayesian neural networks: a network f(x; psi, phi) with a stochastic part phi.

Feynman-Kac spec §1: the parameters of any ``nn.Module`` are split into a random latent phi
(a chosen sub-module, or a list of parameter names) with a Gaussian prior, and the
deterministic rest psi, estimated by maximum likelihood. A forward pass evaluates J
particles phi^1..phi^J at once (:meth:`PartialBNN.particle_forward`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from lit_bayes.models.activations import TanhGELU
from lit_bayes.models.particle_kernel import ParticleNetwork
from lit_bayes.models.sequential_backprop import (Tape, psi_gradients, stochastic_linear, supports,
                                                  taped_particle_forward)
from lit_bayes.validation import check_widths

__all__ = ["PartialBNN", "PartialMLP"]


class PartialBNN(nn.Module):
    """``net`` with the parameters named by ``stochastic`` made random (phi), the rest kept as psi.

    Args:
        net: any ``nn.Module``; its own values of the phi parameters are ignored by
            :meth:`particle_forward` (particles replace them).
        stochastic: the name of a sub-module of ``net`` (all its parameters are phi, e.g.
            ``"2"`` for the third layer of an ``nn.Sequential``), or a list of parameter names.

    When ``net`` is an ``nn.Sequential`` and phi sits in one of its children, the layers below
    it (the deterministic trunk) are evaluated once per batch and the layers above it once on
    all J x B rows: only the stochastic child is evaluated per particle (one batched matrix
    product for an ``nn.Linear``). The layers above must treat rows independently (no
    batch-statistics normalisation). Any other network is evaluated with ``vmap`` over
    ``functional_call``.
    """

    def __init__(self, net: nn.Module, stochastic: str | Sequence[str]) -> None:
        super().__init__()
        if not isinstance(net, nn.Module):
            raise ValueError(f"net must be an nn.Module, got {type(net).__name__}")
        self.net = net
        names = [n for n, _ in net.named_parameters()]
        if isinstance(stochastic, str):
            try:
                module = net.get_submodule(stochastic)
            except AttributeError:
                raise ValueError(f"stochastic={stochastic!r} is not a sub-module of net") from None
            prefix = f"{stochastic}." if stochastic else ""
            phi = [prefix + n for n, _ in module.named_parameters()]
        else:
            phi = list(stochastic)
            unknown = [n for n in phi if n not in names]
            if unknown:
                raise ValueError(f"stochastic names {unknown} are not parameters of net (it has {names})")
        if not phi:
            raise ValueError(f"stochastic={stochastic!r} selects no parameters")
        self.stochastic_names = [n for n in names if n in set(phi)]
        self.deterministic_names = [n for n in names if n not in set(phi)]
        self.fixed_parameter_names: list[str] = []
        # (trunk, stochastic layer, layers above) of an nn.Sequential split, sliced once: a plain
        # tuple, so the shared sub-modules are not registered twice
        k = self._sequential_split()
        self._parts = None if k is None else (net[:k], net[k], net[k + 1 :])
        #: whether :meth:`taped_particle_forward` and :meth:`psi_gradients` apply: a linear stochastic layer
        #: between linear layers and activations that :mod:`~lit_bayes.models.sequential_backprop` knows
        self.hand_backprop = (self._parts is not None and isinstance(self._parts[1], nn.Linear)
                              and supports(self._parts[0]) and supports(self._parts[2]))
        #: the network as the particle kernel runs it, where that applies to its shape
        self.particle_network = ParticleNetwork.of(self.net, self._parts[1]) if self.hand_backprop else None

    def fix_deterministic(self) -> PartialBNN:
        """Hold psi fixed at its current values for the generic samplers: a
        :class:`lit_bayes.samplers.SamplerModule` then samples phi only (``HMC`` over phi given
        psi: the paper's MAP-HMC and SGSMC-HMC, spec §5). Returns ``self``."""
        self.fixed_parameter_names = [f"net.{n}" for n in self.deterministic_names]
        return self

    def _sequential_split(self) -> int | None:
        """Index of the ``nn.Sequential`` child holding every phi parameter, else ``None``."""
        if not isinstance(self.net, nn.Sequential):
            return None
        children = {n.split(".", 1)[0] for n in self.stochastic_names}
        if len(children) != 1:
            return None
        index = int(children.pop())
        inner = {f"{index}.{n}" for n, _ in self.net[index].named_parameters()}
        return index if inner == set(self.stochastic_names) else None

    def stochastic_parameters(self) -> dict[str, Tensor]:
        """phi: the template values of the stochastic parameters, by name."""
        params = dict(self.net.named_parameters())
        return {n: params[n] for n in self.stochastic_names}

    def deterministic_parameters(self) -> list[nn.Parameter]:
        """psi: the parameters an optimiser trains."""
        params = dict(self.net.named_parameters())
        return [params[n] for n in self.deterministic_names]

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def _check_phi(self, phi: Mapping[str, Tensor]) -> None:
        if set(phi) != set(self.stochastic_names):
            raise ValueError(f"phi must hold exactly {self.stochastic_names}, got {sorted(phi)}")

    def particle_forward(self, phi: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """Outputs ``(J, B, ...)`` for J particles ``phi`` (named as in ``net``, leading J)
        and the module's current psi; differentiable in psi."""
        self._check_phi(phi)
        if self._parts is None:
            return vmap(lambda p: functional_call(self.net, dict(p), (x,)), in_dims=(0,))(dict(phi))
        trunk, layer, above = self._parts
        h = trunk(x)  # once per batch
        local = {n.split(".", 1)[1]: p for n, p in phi.items()}
        num = next(iter(local.values())).shape[0]
        if isinstance(layer, nn.Linear) and h.dim() == 2:  # phi holds every parameter of the layer
            top = above(stochastic_linear(h, local["weight"], local.get("bias")).flatten(0, 1))
            return top.reshape(h.shape[0], num, *top.shape[1:]).transpose(0, 1)
        out = vmap(lambda p: functional_call(layer, dict(p), (h,)), in_dims=(0,))(local)
        top = above(out.flatten(0, 1))  # every row at once
        return top.reshape(num, out.shape[1], *top.shape[1:])

    def taped_particle_forward(self, phi: Mapping[str, Tensor], x: Tensor,
                               fused: bool = False) -> tuple[Tensor, Tape]:
        """:meth:`particle_forward` without autograd and the tape of :meth:`psi_gradients`; needs :attr:`hand_backprop`
        and inputs ``(B, d)``. The same outputs to the bit, or with ``fused`` the network in the particle kernel
        (:attr:`particle_network`, :mod:`lit_bayes.models.particle_kernel`) where it applies: the same outputs to ~1e-15
        relative in float64, ~1e-6 in float32."""
        self._check_phi(phi)
        if not self.hand_backprop or x.dim() != 2:
            raise ValueError("taped_particle_forward needs a linear stochastic layer of an nn.Sequential between "
                             "nn.Linear layers and known activations (hand_backprop) and inputs of shape (B, d), "
                             f"got hand_backprop={self.hand_backprop} and inputs of shape {tuple(x.shape)}")
        local = {n.split(".", 1)[1]: p for n, p in phi.items()}
        return taped_particle_forward(self._parts, local["weight"], local.get("bias"), x,
                                      self.particle_network if fused else None)

    def psi_gradients(self, tape: Tape, grad_output: Tensor) -> dict[Tensor, Tensor]:
        """The gradients of psi's parameters (by parameter) for the gradient ``grad_output`` ``(J, B, ...)``
        of a loss with respect to the outputs of :meth:`taped_particle_forward` (the particles held constant)."""
        return psi_gradients(tape, grad_output)

    def particle_forward_loop(self, phi: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """Reference path of :meth:`particle_forward`: one full forward pass per particle."""
        self._check_phi(phi)
        num = next(iter(phi.values())).shape[0]
        return torch.stack([functional_call(self.net, {n: p[j] for n, p in phi.items()}, (x,)) for j in range(num)])

    def stacked_forward(self, params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """Entry point of :meth:`lit_bayes.samplers.SamplerModule.outputs`: stacked parameters
        named as in this module's ``named_parameters`` (``net.*``). Stacked phi alone (with psi
        fixed) takes the particle path; any other set is evaluated with ``vmap``."""
        phi = {n[len("net."):]: p for n, p in params.items()}
        if set(phi) == set(self.stochastic_names):
            return self.particle_forward(phi, x)
        return vmap(lambda p: functional_call(self, dict(p), (x,)), in_dims=(0,))(dict(params))


class PartialMLP(PartialBNN):
    """A dense pBNN of the Feynman-Kac paper (spec §1): ``Linear-act`` hidden layers and a
    linear output layer, with hidden layer ``stochastic_layer`` (0-based over all linear
    layers) stochastic.

    Args:
        widths: ``[input, hidden..., output]`` sizes, e.g. ``[2, 100, 20, 5, 1]`` for two moons.
        stochastic_layer: index of the stochastic linear layer (``2``: the third, as for moons).
        activation: ``"gelu_tanh"`` (Flax's default GELU, the paper's; :class:`~lit_bayes.models.activations.TanhGELU`),
            ``"gelu"``, ``"relu"`` or ``"tanh"``.
        init: ``"xavier_normal"`` weights with zero biases (the paper's) or ``"torch"`` defaults.
    """

    ACTIVATIONS = {
        "gelu_tanh": TanhGELU,
        "gelu": nn.GELU,
        "relu": nn.ReLU,
        "tanh": nn.Tanh,
    }

    def __init__(
        self,
        widths: Sequence[int],
        stochastic_layer: int,
        activation: str = "gelu_tanh",
        init: str = "xavier_normal",
    ) -> None:
        widths = check_widths("widths", widths)
        num_layers = len(widths) - 1
        if isinstance(stochastic_layer, bool) or not isinstance(stochastic_layer, int) or not 0 <= stochastic_layer < num_layers:
            raise ValueError(f"stochastic_layer must be an integer in [0, {num_layers - 1}], got {stochastic_layer!r}")
        if activation not in self.ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(self.ACTIVATIONS)}, got {activation!r}")
        if init not in ("xavier_normal", "torch"):
            raise ValueError(f"init must be 'xavier_normal' or 'torch', got {init!r}")
        layers: list[nn.Module] = []
        for j, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            linear = nn.Linear(a, b)
            if init == "xavier_normal":
                nn.init.xavier_normal_(linear.weight)
                nn.init.zeros_(linear.bias)
            layers.append(linear)
            if j < num_layers - 1:
                layers.append(self.ACTIVATIONS[activation]())
        super().__init__(nn.Sequential(*layers), str(2 * stochastic_layer))
        self.widths = widths
