"""Chains as a leading dimension: stacked parameter states and batched forward passes."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

__all__ = ["ChainState", "flat_rows", "index_params", "stacked_call"]


def _key(name: str) -> str:
    return name.replace(".", "__")


def flat_rows(tensors: Iterable[Tensor]) -> Tensor:
    """Tensors with one leading dimension S in common (chains, draws), ``(S, ...)`` each, as one ``(S, P)``
    tensor: each flattened after its first dimension, concatenated in order."""
    return torch.cat([t.reshape(t.shape[0], -1) for t in tensors], dim=1)


class ChainState(nn.Module):
    """Parameters of several chains, each stored as one tensor of shape ``(num_chains, *shape)``.

    Being an ``nn.Module`` of ``nn.Parameter``s, the state moves with ``.to(device)``, goes
    into Lightning checkpoints through ``state_dict`` and is stepped by any optimizer.
    """

    def __init__(self, params: Mapping[str, Tensor]) -> None:
        super().__init__()
        if not params:
            raise ValueError("params is empty: a chain needs at least one parameter")
        shapes = {p.shape[0] for p in params.values()}
        if len(shapes) != 1:
            raise ValueError(f"every parameter needs the same leading (chain) dimension, got {sorted(shapes)}")
        self.names = list(params)
        for name, p in params.items():
            self.register_parameter(_key(name), nn.Parameter(p.detach().clone()))

    @property
    def num_chains(self) -> int:
        return getattr(self, _key(self.names[0])).shape[0]

    def as_dict(self) -> dict[str, Tensor]:
        """The live parameters by their original names (views, gradients flow); read from the module's own
        parameter table, without ``nn.Module.__getattr__``'s search (an OHSMC step reads them every step)."""
        params = self._parameters
        return {name: params[_key(name)] for name in self.names}

    def snapshot(self) -> dict[str, Tensor]:
        """Detached copies of the current state (no aliasing with the live storage)."""
        return {name: p.detach().clone() for name, p in self.as_dict().items()}

    def flat(self) -> Tensor:
        """The state as one ``(num_chains, num_parameters)`` tensor, in ``names`` order."""
        return flat_rows(p.detach() for p in self.as_dict().values())

    def unflatten(self, flat: Tensor) -> dict[str, Tensor]:
        """Inverse of :meth:`flat` for any leading dimensions: ``(..., P)`` to named tensors.

        One ``split`` (its backward is one concatenation, where slices would each write a
        zero-filled gradient of the whole ``flat``)."""
        live = self.as_dict()
        sizes = [p[0].numel() for p in live.values()]
        if sum(sizes) != flat.shape[-1]:
            raise ValueError(f"flat holds {flat.shape[-1]} values per sample, the chains have {sum(sizes)} parameters")
        lead = flat.shape[:-1]
        parts = torch.split(flat, sizes, dim=-1)
        return {name: part.reshape(*lead, *p.shape[1:]) for (name, p), part in zip(live.items(), parts)}


def index_params(params: Mapping[str, Tensor], index) -> dict[str, Tensor]:
    """Select along the leading dimension of every parameter tensor."""
    return {name: p[index] for name, p in params.items()}


def stacked_call(
    module: nn.Module,
    params: Mapping[str, Tensor],
    *args: Tensor,
    vectorize: bool = True,
) -> Tensor:
    """Evaluate ``module`` with every parameter set of ``params`` (leading dimension S).

    Returns a tensor with a leading dimension S; ``args`` are shared by every parameter
    set. ``vectorize=True`` uses one ``torch.func.vmap`` over ``functional_call``; ``False`` is
    the reference loop for modules that vmap cannot handle. Buffers are shared.
    """
    buffers = dict(module.named_buffers())

    def call(p: Mapping[str, Tensor], *a: Tensor) -> Tensor:
        return functional_call(module, (dict(p), buffers), a)

    if vectorize:
        return vmap(call, in_dims=(0,) + (None,) * len(args))(dict(params), *args)
    num = next(iter(params.values())).shape[0]
    return torch.stack([call(index_params(params, s), *args) for s in range(num)])
