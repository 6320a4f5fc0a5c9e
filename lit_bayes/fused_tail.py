"""The layers above a changed node, compiled into one loop over the points per layer (FNBG, fused path).

After a block inside node k of layer j, the incremental path (module :mod:`lit_bayes.incremental`,
Eq. 3.2 of [003]) adds the rank-one term w_{j+1}[:, k] (h_jk' - h_jk) to layer j + 1's
pre-activations, recomputes every layer above and the per-point log-likelihoods. In eager mode
each of these small products and activations is a pass over ``(C, d, B)`` tensors: with 32
chains and B = 3000 a block streams ~25 MB through the caches for a few hundred flops per point.

Written unit by unit on ``(C, B)`` slices, every step is elementwise in the points (the layer
products become sums of d terms ``w[:, o, i] * h_i``), so ``torch.compile`` emits one vectorised
loop over chains and points per layer, which keeps a point's pre-activations in registers. Each
hidden layer's activations are stacked into one ``(C, d, B)`` buffer (on CPU inductor writes a
stack as a concat kernel) that the next loop reads: without it inductor inlines every unit into
each unit above it, and the code generation of that expression tree, not the kernel, is what
the first compile spends its time on (the buffers halve it at the same sweep time;
``benchmarks/block_gibbs.py`` prints it). The products accumulate by ``addcmul``, one graph node
per term. Besides the buffers, the loops write only the node's new activations ``(C, B)`` and
every chain's summed log-likelihood (the node's own activation and the float64 sum are in the
loops too; the sigmoid is taken through ``exp2``, inductor's own calls the slower ``exp``). The
unrolled graph has sum_l d_l d_{l-1} terms: the fused path is for the narrow layers above the
first (the paper's MLP(784, 10, 10, 10, 10): 210 terms for a block of layer 1) and is capped by
``max_terms``; wider stacks keep the eager path.

It needs a working ``torch.compile`` backend (on CPU a C++ compiler); the first call of each
layer compiles (seconds to tens of seconds), once per process for a network's layer
(:class:`FusedTail`). Values equal the eager path's up to float rounding (tested).
"""
from __future__ import annotations

import types
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from lit_bayes import logspace
from lit_bayes.linear_stack import LinearStack
from lit_bayes.posterior import Likelihood
from lit_bayes.validation import check_int

__all__ = ["FusedTail", "compilable", "tail_log_likelihood"]


def tail_log_likelihood(column: Tensor, start: Tensor, pre_above: Tensor, w_column: Tensor,
                        weights: Sequence[Tensor], biases: Sequence[Tensor | None],
                        activations: Sequence[Callable[[Tensor], Tensor]], likelihood: Likelihood,
                        target: Tensor) -> tuple[Tensor, Tensor]:
    """Summed log-likelihoods ``(C,)`` (float64) after one node's pre-activations change to ``column``,
    and that node's new activations ``(C, B)``.

    ``column`` ``(C, B)``: the node's new pre-activations g_jk'; ``activations[0]`` gives
    h_jk' from it. ``pre_above`` ``(C, d, B)``: pre-activations of layer j + 1 computed with
    h_jk = ``start``, so that layer becomes ``pre_above + w_column ⊗ (h_jk' - start)`` (Eq. 3.2;
    ``w_column`` ``(C, d)``). ``weights`` ``(C, d_out, d_in)``, ``biases`` ``(C, d_out)`` and
    ``activations[1:]`` are the layers above (``activations[l + 1]`` is applied before
    ``weights[l]``); ``likelihood`` a :class:`lit_bayes.posterior.Likelihood`, given the outputs
    unit by unit (``log_prob_units``).
    """
    h_column = activations[0](column)
    dh = h_column - start
    units = [pre_above[:, i] + w_column[:, i, None] * dh for i in range(pre_above.shape[1])]
    for weight, bias, activation in zip(weights, biases, activations[1:]):
        hidden = torch.stack([activation(u) for u in units], 1).unbind(1)  # one buffer (module docstring)
        units = []
        for o in range(weight.shape[1]):
            total = None if bias is None else bias[:, o, None]
            for i, h in enumerate(hidden):
                w = weight[:, o, i, None]
                total = w * h if total is None else torch.addcmul(total, w, h)
            units.append(total)
    return likelihood.log_prob_units(units, target).sum(-1, dtype=torch.float64), h_column


def compilable(activation: nn.Module) -> Callable[[Tensor], Tensor]:
    """``activation`` as the fused tail evaluates it: the sigmoid through ``exp2``
    (:func:`lit_bayes.logspace.sigmoid`), others as they are."""
    return logspace.sigmoid if isinstance(activation, nn.Sigmoid) else activation


#: chains per call of a compiled tail (:meth:`FusedTail.__call__`), whose graph has static shapes; fewer chains
#: (but one) stay eager
CHAIN_GROUP = 8

#: inductor options of the compiled tails: no vectorised variant of the loops' remainders (the last points of a row,
#: fewer than one vector; dead code when the batch is a multiple of the vector width, and scalar code otherwise),
#: whose generation took ~6 of the ~31 s of C++ code generation in the first compile at 8 chains (2026-12-03, AMD
#: EPYC Zen3, AVX2: 8 float32 a vector, B = 3000; fresh cache; the sweep's time unchanged)
COMPILE_OPTIONS = {"cpp.enable_loop_tail_vec": False}

#: the compiled tails of this process, one per structure (:meth:`FusedTail.structure`), shared by every FusedTail
_COMPILED: dict[tuple, Callable[..., tuple[Tensor, Tensor]]] = {}


def _compiled_tail(structure: tuple) -> Callable[..., tuple[Tensor, Tensor]]:
    """``torch.compile`` of :func:`tail_log_likelihood` for one ``structure``, in a copy of the function with a
    code object of its own: ``torch.compile`` keeps compiled variants, and counts its recompile limit, per
    code object, so tails of other structures (other layers, other networks) do not use up this one's."""
    kernel = _COMPILED.get(structure)
    if kernel is None:
        code = tail_log_likelihood.__code__.replace()  # equal, but a distinct object
        copy = types.FunctionType(code, tail_log_likelihood.__globals__, tail_log_likelihood.__name__)
        kernel = _COMPILED[structure] = torch.compile(copy, dynamic=False, options=COMPILE_OPTIONS)
    return kernel


class FusedTail:
    """:func:`tail_log_likelihood` compiled for the layers of ``stack`` (see the module docstring).

    Args:
        stack: the MLP as the incremental path sees it.
        likelihood: the output likelihood.
        max_terms: the largest number of unrolled products a fused tail may hold.
        min_terms_one_chain: the fewest unrolled products of a tail fused for one chain; None (the default):
            one chain fuses no tail. One chain's eager path is now at least as fast as the compiled tails,
            and staying eager saves their compile: on the paper's MLP(784, 10, 10, 10, 10), B = 3000, AMD EPYC
            Zen3, one thread, sweeps interleaved in one process, fusing layer 1's 210-term tail made a
            one-chain sweep 1.006 and 1.115 times as long as the eager one with 130 blocks (30 and 20 pairs)
            and 1.136 times with 810 blocks (12 pairs), after a ~48 s compile; at 8 chains the fused sweep
            takes 0.70 of the eager one's time (130 blocks, 10 pairs).

    The compiled tails are shared by every FusedTail of the process with the same structure above the
    layer (:meth:`structure`): another sampler of the same network compiles and traces nothing. The
    activations and the likelihood are arguments of the compiled function, so ``torch.compile``'s guards
    check that they behave the same. The graphs have static shapes: from ``CHAIN_GROUP`` chains on the chains go
    through in groups of ``CHAIN_GROUP``, the last group padded, so one graph serves every such chain count (one
    chain, when it fuses, has its own graph; 2 to ``CHAIN_GROUP - 1`` chains stay eager, where the padding would
    cost more than fusing saves). Against the dynamic chain dimension used before (2026-12-02, AMD EPYC Zen3, one
    thread, ``benchmarks/block_gibbs.py``, fresh inductor cache): the first compile of the paper's three tails at
    8 chains 55 s against 135 s, and with 32 chains the fused sweep 0.49 s against 1.03 s (130 blocks), the groups'
    tensors staying in the core's cache; at 4 chains (padded to 8) it took 1.28x the eager sweep. A later process
    finds the graphs in inductor's on-disk cache and traces, not compiles; a new batch size compiles its own graph.
    """

    def __init__(self, stack: LinearStack, likelihood: Likelihood, max_terms: int = 1024,
                 min_terms_one_chain: int | None = None) -> None:
        self.stack = stack
        self.likelihood = likelihood
        self.max_terms = check_int("max_terms", max_terms, 1)
        self.min_terms_one_chain = (None if min_terms_one_chain is None
                                    else check_int("min_terms_one_chain", min_terms_one_chain, 0))
        # per layer below the output: its structure and the activations its tail applies, built once (not per block)
        self._layers = [(self.structure(j), [compilable(a) for a in stack.activations[j:]])
                        for j in range(len(stack.layers) - 1)]

    def terms(self, layer: int) -> int:
        """Unrolled products above a node of ``layer`` (not the output layer): the rank-one update
        of layer + 1 and every layer above it."""
        layers = self.stack.layers
        return layers[layer + 1].out_features + sum(l.out_features * l.in_features for l in layers[layer + 2:])

    def fuses(self, layer: int, chains: int) -> bool:
        """Whether node blocks of ``layer`` take the fused path for ``chains`` chains: not the output layer,
        within ``max_terms``, for at least ``CHAIN_GROUP`` chains, or for one chain at least
        ``min_terms_one_chain`` products (None: never)."""
        if layer + 1 >= len(self.stack.layers):
            return False
        terms = self.terms(layer)
        one_chain = self.min_terms_one_chain is not None and terms >= self.min_terms_one_chain
        return terms <= self.max_terms and (chains >= CHAIN_GROUP or chains == 1 and one_chain)

    def structure(self, layer: int) -> tuple:
        """What the tail of ``layer`` compiles for: the shapes and biases of the layers above it, their
        activations' types and the likelihood's type (the key of the process's compiled tails)."""
        above = self.stack.layers[layer + 1:]
        return (tuple((l.out_features, l.in_features, l.bias is not None) for l in above),
                tuple(type(a) for a in self.stack.activations[layer:]), type(self.likelihood))

    def __call__(self, layer: int, state: Tensor, column: Tensor, start: Tensor, pre_above: Tensor,
                 w_column: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """:func:`tail_log_likelihood` for a node block of ``layer``; ``state`` ``(C, P)`` holds the
        (unchanged) weights of the layers above. Two chains or more go through in groups of ``CHAIN_GROUP``
        (the last one padded with copies of the last chain), so that one static graph serves them all."""
        above = self.stack.layers[layer + 2:]
        weights, biases = [l.weights(state) for l in above], [l.biases(state) for l in above]
        structure, activations = self._layers[layer]
        kernel = _compiled_tail(structure)
        chains = column.shape[0]
        if chains == 1:
            return kernel(column, start, pre_above, w_column, weights, biases, activations, self.likelihood, target)
        totals, columns = [], []
        for low in range(0, chains, CHAIN_GROUP):
            group = [chain_group(t, low) for t in (column, start, pre_above, w_column)]
            total, h_column = kernel(*group, [chain_group(w, low) for w in weights],
                                     [None if b is None else chain_group(b, low) for b in biases], activations,
                                     self.likelihood, target)
            totals.append(total)
            columns.append(h_column)
        return torch.cat(totals)[:chains], torch.cat(columns)[:chains]


def chain_group(tensor: Tensor, low: int) -> Tensor:
    """Chains ``low`` to ``low + CHAIN_GROUP`` of ``tensor`` as a contiguous tensor of ``CHAIN_GROUP`` chains,
    padded with copies of the last chain where fewer remain (every group has the same shape and strides)."""
    part = tensor[low:low + CHAIN_GROUP]
    missing = CHAIN_GROUP - part.shape[0]
    if missing:
        part = torch.cat([part, part[-1:].expand(missing, *part.shape[1:])])
    return part.contiguous()
