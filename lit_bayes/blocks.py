"""Parameter partitions: which block (group) every scalar parameter belongs to.

A :class:`Partition` labels each position of a chain's flat parameter vector (the order of
:meth:`lit_bayes.chains.ChainState.flat`: parameters in ``named_parameters`` order, each
flattened row-major) with a block id in ``[0, num_blocks)``. Block ids follow the scan
order. Constructors:

- :func:`layer_partition`: one block per layer (a ``weight`` and its ``bias``).
- :func:`node_partition`: one block per node: its incoming weights and its own bias
  (FNBG spec §2.2, "NBG"; structured-sgmcmc spec §4, "by neurons").
- :func:`finer_node_partition`: each node's block split contiguously into ``beta_j``
  sub-blocks (weights first, bias in the last one; the paper's beta_j, 130 blocks for the
  MNIST MLP with beta_1 = 10), into sub-blocks of at most ``max_block_size``, or into
  ``floor(size / subblock_size)`` sub-blocks of about ``subblock_size`` (the reference
  code's chunk size, 810 blocks for the MNIST MLP) (FNBG spec §2.2 and §8 item 9); uneven
  sizes give the extra element to the first sub-blocks.
- :func:`modulo_partition`: parameter i goes to block ``i mod M`` (structured-sgmcmc
  spec §4, equal-size interleaved groups).
- :func:`random_partition`: i.i.d. uniform block ids (spec §4, App. G "random").
- :func:`fully_factorised`: every scalar its own block.
- :func:`user_partition`: any block id per parameter.

:func:`make_partition` builds any of them by name, as the samplers' ``blocks`` / ``partition``
arguments give it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from lit_bayes.validation import check_int

__all__ = [
    "Partition",
    "finer_node_partition",
    "fully_factorised",
    "layer_partition",
    "make_partition",
    "modulo_partition",
    "node_partition",
    "random_partition",
    "user_partition",
]

Shapes = Mapping[str, Sequence[int]]


@dataclass
class Partition:
    """Block id of every flat parameter, with a layer and a node label per block."""

    block_ids: Tensor  # (P,) long
    layers: list[str]  # label of each block's layer, len num_blocks
    nodes: list[str]  # label of each block's node, len num_blocks

    @property
    def num_blocks(self) -> int:
        return len(self.layers)

    @property
    def num_params(self) -> int:
        return self.block_ids.numel()

    def sizes(self) -> Tensor:
        """Number of parameters in each block."""
        return torch.bincount(self.block_ids, minlength=self.num_blocks)

    def members(self, block: int) -> Tensor:
        """Flat indices of the parameters of ``block``, in increasing order."""
        return (self.block_ids == block).nonzero().flatten()

    def masks(self) -> Tensor:
        """One-hot membership ``(num_blocks, P)`` as booleans."""
        return self.block_ids.unsqueeze(0) == torch.arange(self.num_blocks).unsqueeze(1)


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _offsets(shapes: Shapes) -> dict[str, int]:
    out, start = {}, 0
    for name, shape in shapes.items():
        out[name] = start
        start += _numel(shape)
    return out


def _linear_layers(shapes: Shapes) -> list[tuple[str, str | None]]:
    """(weight name, bias name or None) of every linear layer, in parameter order."""
    layers = []
    for name, shape in shapes.items():
        if not name.endswith("weight"):
            if not name.endswith("bias"):
                raise ValueError(f"parameter {name!r} is neither a weight nor a bias: node blocks need nn.Linear layers")
            continue
        if len(shape) != 2:
            raise ValueError(f"parameter {name!r} has shape {tuple(shape)}: node blocks need 2-D nn.Linear weights")
        bias = name[: -len("weight")] + "bias"
        layers.append((name, bias if bias in shapes else None))
    covered = {n for pair in layers for n in pair if n}
    stray = [n for n in shapes if n not in covered]
    if stray:
        raise ValueError(f"parameters {stray} belong to no linear layer: node blocks need nn.Linear layers")
    return layers


def _layer_label(weight_name: str) -> str:
    return weight_name[: -len(".weight")] if weight_name.endswith(".weight") else weight_name


def _split_sizes(total: int, parts: int) -> list[int]:
    """``parts`` contiguous chunk sizes of ``total`` elements, the larger ones first."""
    base, extra = divmod(total, parts)
    return [base + 1] * extra + [base] * (parts - extra)


def layer_partition(shapes: Shapes) -> Partition:
    """One block per linear layer (weight and bias together), in parameter order."""
    offsets = _offsets(shapes)
    ids = torch.empty(sum(_numel(s) for s in shapes.values()), dtype=torch.long)
    labels = []
    for block, (weight, bias) in enumerate(_linear_layers(shapes)):
        for name in (weight, bias):
            if name:
                ids[offsets[name] : offsets[name] + _numel(shapes[name])] = block
        labels.append(_layer_label(weight))
    return Partition(ids, labels, labels)


def _per_layer(name: str, value, num_layers: int) -> list:
    """One entry per linear layer: a scalar repeated, or a sequence of the right length."""
    if not isinstance(value, Sequence):
        return [value] * num_layers
    values = list(value)
    if len(values) != num_layers:
        raise ValueError(f"{name} has {len(values)} entries, the network has {num_layers} linear layers")
    return values


def _num_subblocks(layer: str, node_size: int, beta, max_block_size, subblock_size) -> int:
    """Sub-blocks per node of ``layer`` under whichever rule was given."""
    if max_block_size is not None:
        return -(-node_size // check_int("max_block_size", max_block_size, 1))
    if subblock_size is not None:
        if isinstance(subblock_size, bool) or not isinstance(subblock_size, int) or subblock_size < 1:
            raise ValueError(
                f"subblock_size for layer {layer!r} must be a positive integer or None (whole node), "
                f"got {subblock_size!r}"
            )
        return max(1, node_size // subblock_size)
    b = 1 if beta is None else beta
    if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= node_size:
        raise ValueError(
            f"beta for layer {layer!r} must be an integer in [1, {node_size}] "
            f"(its nodes have {node_size} parameters), got {b!r}"
        )
    return b


def finer_node_partition(
    shapes: Shapes,
    beta: int | Sequence[int] | None = None,
    max_block_size: int | None = None,
    subblock_size: int | Sequence[int | None] | None = None,
) -> Partition:
    """Node blocks (incoming weights + bias of one node) split into sub-blocks (FNBG spec §2.2).

    Give at most one rule (none gives node blocking):

    - ``beta``: sub-blocks per node (the paper's beta_j), one integer for every layer or
      one per layer; 1 is node blocking.
    - ``max_block_size``: the fewest sub-blocks of at most that many parameters.
    - ``subblock_size``: ``floor(size / subblock_size)`` sub-blocks per node (at least
      one), i.e. the reference code's chunk size; one value for every layer or one per
      layer, ``None`` keeping that layer's nodes whole.

    Order: layer, node, sub-block; each node's parameters are its weights in input order,
    then its bias, split contiguously with the larger sub-blocks first.
    """
    given = [n for n, v in (("beta", beta), ("max_block_size", max_block_size), ("subblock_size", subblock_size))
             if v is not None]
    if len(given) > 1:
        raise ValueError(f"give only one of beta, max_block_size and subblock_size, got {' and '.join(given)}")
    layers = _linear_layers(shapes)
    betas = _per_layer("beta", beta, len(layers))
    sizes = _per_layer("subblock_size", subblock_size, len(layers))
    offsets = _offsets(shapes)
    ids = torch.empty(sum(_numel(s) for s in shapes.values()), dtype=torch.long)
    layer_labels, node_labels = [], []
    for (weight, bias), b, size in zip(layers, betas, sizes):
        out_dim, in_dim = shapes[weight]
        node_size = in_dim + (1 if bias else 0)
        parts = _num_subblocks(_layer_label(weight), node_size, b, max_block_size, size)
        for node in range(out_dim):
            members = [offsets[weight] + node * in_dim + i for i in range(in_dim)]
            if bias:
                members.append(offsets[bias] + node)
            start = 0
            for chunk in _split_sizes(node_size, parts):
                ids[members[start : start + chunk]] = len(layer_labels)
                layer_labels.append(_layer_label(weight))
                node_labels.append(f"{_layer_label(weight)}.{node}")
                start += chunk
    return Partition(ids, layer_labels, node_labels)


def node_partition(shapes: Shapes) -> Partition:
    """One block per node: its incoming weights and its bias (FNBG's NBG)."""
    return finer_node_partition(shapes)


def _check_groups(num_params: int, num_groups: int) -> None:
    if not isinstance(num_groups, int) or not 1 <= num_groups <= num_params:
        raise ValueError(f"num_groups must be an integer in [1, {num_params}] (the parameter count), got {num_groups!r}")


def _unlabelled(ids: Tensor, num_groups: int) -> Partition:
    labels = [f"group_{g}" for g in range(num_groups)]
    return Partition(ids, labels, labels)


def modulo_partition(num_params: int, num_groups: int) -> Partition:
    """Parameter i in group ``i mod num_groups`` (interleaved, equal sizes)."""
    _check_groups(num_params, num_groups)
    return _unlabelled(torch.arange(num_params) % num_groups, num_groups)


def random_partition(num_params: int, num_groups: int, seed: int = 0) -> Partition:
    """I.i.d. uniform group ids (group sizes vary); a group that draws no member is
    dropped, and ids are renumbered so every group is non-empty."""
    _check_groups(num_params, num_groups)
    draws = torch.randint(num_groups, (num_params,), generator=torch.Generator().manual_seed(seed))
    _, ids = torch.unique(draws, return_inverse=True)
    return _unlabelled(ids, int(ids.max()) + 1)


def fully_factorised(num_params: int) -> Partition:
    """Every scalar parameter its own group."""
    return _unlabelled(torch.arange(num_params), num_params)


def user_partition(block_ids: Sequence[int] | Tensor, num_params: int) -> Partition:
    """Any assignment of the ``num_params`` flat parameters to blocks ``0..M-1`` (all used)."""
    ids = torch.as_tensor(block_ids, dtype=torch.long).flatten()
    if ids.numel() != num_params:
        raise ValueError(f"block_ids has {ids.numel()} entries, the model has {num_params} parameters")
    if ids.numel() and (ids.min() < 0 or set(ids.unique().tolist()) != set(range(int(ids.max()) + 1))):
        raise ValueError("block_ids must use every id 0..M-1 (no gaps, no negatives)")
    return _unlabelled(ids, int(ids.max()) + 1)


KINDS = ("layer", "node", "finer_node", "modulo", "random", "fully_factorised", "user")


def make_partition(
    kind: str,
    shapes: Shapes,
    allowed: Sequence[str] = KINDS,
    argument: str = "partition",
    beta: int | Sequence[int] | None = None,
    max_block_size: int | None = None,
    subblock_size: int | Sequence[int | None] | None = None,
    num_groups: int | None = None,
    group_ids: Sequence[int] | Tensor | None = None,
    seed: int = 0,
) -> Partition:
    """The partition named ``kind`` (one of ``allowed``, the sampler's argument ``argument``) of flat
    parameters shaped ``shapes``: ``beta``, ``max_block_size`` and ``subblock_size`` go with
    ``"finer_node"``, ``num_groups`` with ``"modulo"`` and ``"random"`` (``seed`` too), ``group_ids``
    with ``"user"``; an option given to another kind is an error naming it."""
    if kind not in allowed:
        raise ValueError(f"{argument} must be one of {', '.join(allowed)}, got {kind!r}")
    finer = {"beta": beta, "max_block_size": max_block_size, "subblock_size": subblock_size}
    given = [name for name, value in finer.items() if value is not None]
    if given and kind != "finer_node":
        raise ValueError(f"{', '.join(given)} only apply to {argument}='finer_node', got {argument}={kind!r}")
    wants_groups = kind in ("modulo", "random")
    if wants_groups and num_groups is None:
        raise ValueError(f"{argument}={kind!r} needs num_groups (the number of groups M), got None")
    if not wants_groups and num_groups is not None:
        raise ValueError(f"num_groups is only used by {argument} 'modulo' or 'random', got {num_groups!r} "
                         f"with {argument}={kind!r}")
    if (kind == "user") != (group_ids is not None):
        raise ValueError(f"group_ids (one group id per flat parameter) goes with {argument}='user' and only with "
                         f"it; got {argument}={kind!r} and group_ids {'set' if group_ids is not None else 'None'}")
    num_params = sum(_numel(s) for s in shapes.values())
    builders = {
        "layer": lambda: layer_partition(shapes),
        "node": lambda: node_partition(shapes),
        "finer_node": lambda: finer_node_partition(shapes, **finer),
        "modulo": lambda: modulo_partition(num_params, num_groups),
        "random": lambda: random_partition(num_params, num_groups, seed),
        "fully_factorised": lambda: fully_factorised(num_params),
        "user": lambda: user_partition(group_ids, num_params),
    }
    return builders[kind]()
