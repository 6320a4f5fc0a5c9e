"""Block targets: the energy of C chains under single-block proposals, on one batch.

A Metropolis-within-Gibbs step of block q (FNBG spec §2.1, Prop. 1 of [000], Eq. 4.1 of
[003]) needs U(theta*) - U(theta), where theta* is the current state with block q replaced and

    U(theta) = -(s * sum_{i in batch} log p(y_i | x_i, theta) + log pi(theta)) / T,

s = 1 (the paper's raw batch sum) or N/B, T the temperature: both parts come from the energy
layer, :class:`lit_bayes.posterior.Posterior` (``likelihood_energy``, ``prior_energy``, linear in
the summed log-likelihood and the log prior, so a proposal's energy is one scaled sum). The prior
factorises over the parameters, so its change is the block's own,
log pi(theta*_q) - log pi(theta_q) (:meth:`lit_bayes.posterior.FlatPrior.change`; for a Gaussian
prior -sum_{i in q} ((theta*_i)^2 - theta_i^2) / (2 v_i)).

A target holds the state of every chain, ``(C, P)`` in ``ChainState.flat`` order, and its
energy on the batch. ``propose(q, step)`` evaluates every chain's proposal at once and
``commit(accept)`` keeps it only for the chains that accept: a rejected block leaves state
and cached energy untouched (the reference code's bug, spec §8 item 5, cannot happen).
Energies are sums in float64 (spec §8 item 16).

- :class:`FullForwardTarget`: the naive reference, one full forward pass per block.
- :class:`IncrementalTarget`: for MLPs of ``nn.Linear`` layers it keeps every layer's
  pre-activations g_j and activations h_j = phi(g_j) of the current state (Eqs. 3.1-3.2).
  A block inside one node k of layer j changes only that node's pre-activation column,
  g_jk <- g_jk + h_{j-1}[:, S] dw_S + db_k, so that column and h_jk are recomputed, layer
  j + 1 takes the rank-one update g_{j+1} <- g_{j+1} + w_{j+1}[:, k] (h_jk' - h_jk) and the
  layers above it are recomputed; any other block (a whole layer) recomputes from its lowest
  layer up. An accepted block at layer j keeps only the caches it needs next (layers <= j + 1);
  the layers above are recomputed once, when a block above needs them, not copied at every
  block. The caches are rebuilt at every ``reset`` (every sweep, on its new batch), so
  rounding never accumulates beyond one sweep. In the input layer h_{-1} = x does not depend on
  the state, so the products x[:, S] dw_S of a sweep's input-layer node blocks are computed
  together when the sweep's steps are known, one GEMM per run of columns S.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from lit_bayes.blocks import Partition
from lit_bayes.linear_stack import LinearStack
from lit_bayes.posterior import FlatPrior, Posterior

if TYPE_CHECKING:
    from lit_bayes.fused_tail import FusedTail

__all__ = [
    "BlockPlan",
    "BlockTarget",
    "FullForwardTarget",
    "IncrementalTarget",
    "block_plans",
]

# input-layer node blocks' products x[:, S] dw_S computed ahead at once take at most this many bytes
INPUT_PRODUCT_BYTES = 64 << 20
# activations written into a given tensor (the others allocate their result)
WRITES_OUT = {nn.Sigmoid: torch.sigmoid, nn.Tanh: torch.tanh}


@dataclass(frozen=True)
class BlockPlan:
    """What one block touches: its flat members and the lowest layer they reach. When all
    members are weights (input columns ``columns``, at ``weight_pos`` among the members) or
    the bias (at ``bias_pos``) of one ``node`` of that layer, the column update applies."""

    members: Tensor
    layer: int
    node: int | None = None
    columns: Tensor | slice | None = None
    weight_pos: Tensor | slice | None = None
    bias_pos: int | None = None

    @cached_property
    def index(self) -> Tensor | slice:
        """``members`` as a slice when they are a contiguous run (a layer, or a run of one node's weights
        without its bias): the state's block is then a view, read and written without a gather or a scatter."""
        return _as_slice(self.members)


def _as_slice(index: Tensor) -> Tensor | slice:
    """A contiguous ascending index as a slice (a view instead of a gather)."""
    first, size = (int(index[0]), index.numel()) if index.numel() else (0, 0)
    if size and torch.equal(index, torch.arange(first, first + size, device=index.device)):
        return slice(first, first + size)
    return index


def _inside(members: Tensor, part: slice | None) -> Tensor:
    if part is None:
        return torch.zeros_like(members, dtype=torch.bool)
    return (members >= part.start) & (members < part.stop)


def _plan(members: Tensor, stack: LinearStack) -> BlockPlan:
    touched = [j for j, layer in enumerate(stack.layers)
               if _inside(members, layer.weight).any() or _inside(members, layer.bias).any()]
    j, layer = touched[0], stack.layers[touched[0]]
    in_weight, in_bias = _inside(members, layer.weight), _inside(members, layer.bias)
    rows = ((members[in_weight] - layer.weight.start) // layer.in_features).tolist()
    biases = (members[in_bias] - (layer.bias.start if layer.bias is not None else 0)).tolist()
    nodes = set(rows) | set(biases)
    if len(touched) > 1 or len(nodes) != 1:
        return BlockPlan(members, j)
    bias_pos = in_bias.nonzero().flatten().tolist()
    return BlockPlan(
        members, j, node=nodes.pop(),
        columns=_as_slice((members[in_weight] - layer.weight.start) % layer.in_features),
        weight_pos=_as_slice(in_weight.nonzero().flatten()), bias_pos=bias_pos[0] if bias_pos else None,
    )


def block_plans(partition: Partition, stack: LinearStack | None = None, device=None) -> list[BlockPlan]:
    """Members (and, with ``stack``, the incremental plan) of every block, on ``device``."""
    members = [partition.members(q).to(device) for q in range(partition.num_blocks)]
    if stack is None:
        return [BlockPlan(m, 0) for m in members]
    return [_plan(m, stack) for m in members]


class BlockTarget:
    """Energy of every chain's state under single-block proposals (see the module docstring).

    Subclasses evaluate the summed log-likelihood sum_{i in batch} log p(y_i | x_i, theta) ``(C,)`` float64:
    ``_reset_likelihood(state)``, ``_propose_likelihood(block, values, delta)`` (with the block replaced)
    and ``_commit_likelihood(accept, rejected)`` (``rejected``: the indices of ``~accept`` on CPU, else None).
    """

    def __init__(self, plans: list[BlockPlan], posterior: Posterior, prior: FlatPrior, batch_size: int) -> None:
        self.plans = plans
        self.posterior = posterior
        self.prior = prior
        self.batch_size = batch_size
        self.state: Tensor | None = None
        self.energy: Tensor | None = None  # U of every chain's current state, (C,) float64
        self.prior_energy: Tensor | None = None  # its prior part
        self.steps: Sequence[Tensor] | None = None  # the sweep's proposal steps, when given to reset
        self._prior_changes: Tensor | None = None  # with them, every block's prior change (C, M)
        self._pending: tuple | None = None
        # the energy's factors, -s / T on the summed log-likelihood and -1 / T on the log prior
        self._likelihood_factor = posterior.likelihood_energy(1.0, batch_size)
        self._prior_factor = posterior.prior_energy(1.0)

    @property
    def num_blocks(self) -> int:
        return len(self.plans)

    def block_size(self, block: int) -> int:
        """The number of parameters in ``block``."""
        return self.plans[block].members.numel()

    @staticmethod
    def total(log_lik: Tensor) -> Tensor:
        """The summed log-likelihoods ``(C,)`` float64 of per-point values ``(C, B)``."""
        return log_lik.sum(-1, dtype=torch.float64)

    def current(self, block: int) -> Tensor:
        """The current values of ``block`` in every chain, ``(C, size)``."""
        return self.state[:, self.plans[block].members]

    def reset(self, state: Tensor, steps: Sequence[Tensor] | None = None) -> Tensor:
        """Take ``state`` (C, P) as the current state (it is updated in place by ``commit``)
        and return its energy on this target's batch. ``steps``: every block's proposal step ``(C, size)``
        of the sweep, when drawn in advance: each block q is then proposed at most once, as ``propose(q,
        steps[q])``, so its values at the proposal are those of ``state`` and the prior changes of all blocks
        are computed here at once (a subclass may prepare more)."""
        self.state, self.steps = state, steps
        self._pending = None
        self._prior_changes = (None if steps is None
                               else self.prior.changes([plan.members for plan in self.plans], state, steps))
        self.prior_energy = self.posterior.prior_energy(self.prior.log_density(state))
        self.energy = torch.add(self.prior_energy, self._reset_likelihood(state), alpha=self._likelihood_factor)
        return self.energy

    def propose(self, block: int, step: Tensor) -> Tensor:
        """Energy ``(C,)`` of every chain's state with ``block`` moved by ``step`` (C, size)."""
        plan = self.plans[block]
        current = self.state[:, plan.index]
        values = current + step
        if self._prior_changes is None:
            change = self.prior.change(plan.index, current, step)
        else:
            change = self._prior_changes[:, block]
        prior = torch.add(self.prior_energy, change, alpha=self._prior_factor)
        energy = torch.add(prior, self._propose_likelihood(block, values, step), alpha=self._likelihood_factor)
        self._pending = (plan, values, energy, prior)
        return energy

    def commit(self, accept: Tensor) -> None:
        """Keep the last proposal in the chains where ``accept`` (C,) is true."""
        plan, values, energy, prior = self._pending
        rejected = rejected_indices(accept)
        if isinstance(plan.index, slice):  # a view: written in place
            write_accepted(self.state[:, plan.index], values, accept, rejected)
        elif unanimous(accept, rejected) is not False:
            self.state[:, plan.index] = keep_accepted(values, self.state[:, plan.index], accept, rejected)
        self.energy = select_accepted(energy, self.energy, accept, rejected)
        self.prior_energy = select_accepted(prior, self.prior_energy, accept, rejected)
        self._commit_likelihood(accept, rejected)
        self._pending = None

    def _reset_likelihood(self, state: Tensor) -> Tensor:
        raise NotImplementedError

    def _propose_likelihood(self, block: int, values: Tensor, delta: Tensor) -> Tensor:
        raise NotImplementedError

    def _commit_likelihood(self, accept: Tensor, rejected: Tensor | None) -> None:
        raise NotImplementedError


class FullForwardTarget(BlockTarget):
    """Reference path: every proposal is a full forward pass of every chain.

    ``log_likelihood(state)`` maps flat states ``(C, P)`` to per-point log-likelihoods ``(C, B)``
    on the batch (any model: the sampler passes its vmapped forward)."""

    def __init__(self, plans, posterior, prior, batch_size, log_likelihood: Callable[[Tensor], Tensor]) -> None:
        super().__init__(plans, posterior, prior, batch_size)
        self.log_likelihood = log_likelihood

    def _reset_likelihood(self, state: Tensor) -> Tensor:
        return self.total(self.log_likelihood(state))

    def _propose_likelihood(self, block: int, values: Tensor, delta: Tensor) -> Tensor:
        proposed = self.state.clone()
        proposed[:, self.plans[block].members] = values
        return self.total(self.log_likelihood(proposed))

    def _commit_likelihood(self, accept: Tensor, rejected: Tensor | None) -> None:
        """Nothing is cached besides the energy."""


class IncrementalTarget(BlockTarget):
    """Cached-activation path for a :class:`LinearStack` (see the module docstring).

    ``x`` and ``target`` are the batch's inputs, shared by every chain, and targets. The network's
    outputs, unit-major ``(C, k, B)`` as the caches hold them, are scored by the posterior's likelihood
    (:meth:`lit_bayes.posterior.Likelihood.unit_major`, bound to ``target`` at every ``reset``). Caches
    are feature-major, ``(C, out_j, B)``, so a node's column is a contiguous row and the small
    per-layer products are fast.

    With ``fused`` (a :class:`lit_bayes.fused_tail.FusedTail`), node blocks of the layers it fuses
    evaluate the rank-one update, the layers above and the likelihood in one compiled kernel; the
    cache of layer j + 1 takes the rank-one update of a run of accepted blocks in one node once,
    when the scan leaves that node.
    """

    def __init__(self, plans, posterior, prior, batch_size, stack: LinearStack, x: Tensor, target: Tensor,
                 fused: FusedTail | None = None) -> None:
        super().__init__(plans, posterior, prior, batch_size)
        self.fused, self.target = fused, target
        # (j, k, start): after fused blocks of node k of layer j, g_{j+1} is still the layer for
        # h_jk = start; it takes the accumulated rank-one update w_{j+1}[:, k] (h_jk - start) once,
        # before any block of another node (one pass over g_{j+1} per node, not per accepted block)
        self._lag: tuple[int, int, Tensor] | None = None
        if stack.flatten and x.dim() > 2:
            x = x.flatten(1)
        if x.dim() != 2 or x.shape[1] != stack.layers[0].in_features:
            raise ValueError(
                f"batch inputs have shape {tuple(x.shape)}, "
                f"the first linear layer expects (B, {stack.layers[0].in_features})"
            )
        self.stack = stack
        # every hidden layer's activation, as the torch function where there is one (no module call per block)
        self._activations = [WRITES_OUT.get(type(a), a) for a in stack.activations]
        self.log_likelihood: Callable[[Tensor, bool], Tensor] | None = None  # bound at reset
        self.x = x  # (B, in_0)
        self._products: dict[int, Tensor] = {}  # input-layer node blocks' x[:, S] dw_S, computed ahead
        self.pre: list[Tensor] = []  # g_j of every layer, (C, out_j, B)
        self.post: list[Tensor] = []  # h_j = phi(g_j) of every hidden layer, (C, out_j, B)
        self._valid = 0  # pre[l] is current for l < _valid, post[l] for l < _valid - 1
        self._cache: tuple | None = None  # the pending proposal's layers
        # per-block results go into these tensors (allocated once per sweep): fresh (C, out, B)
        # tensors at every block cost more in page faults than the arithmetic on CPU
        self._scratch: dict[tuple[str, int], Tensor] = {}
        self._views: tuple[Tensor, list[tuple[Tensor, Tensor | None]]] | None = None
        # for every layer l >= 1: (activation of layer l - 1, its output tensor or None, weights, biases, the
        # pre-activations' scratch tensor), the tail's steps with their views and scratch tensors looked up once
        self._tail_steps: list[tuple] = []

    def _layer_views(self, state: Tensor) -> list[tuple[Tensor, Tensor | None]]:
        """Every layer's weights ``(C, out, in)`` and biases ``(C, out, 1)`` (None without) as views of
        ``state``, made once per state tensor: the chains' state is written in place between resets."""
        if self._views is None or self._views[0] is not state:
            self._views = (state, [(layer.weights(state),
                                    None if layer.bias is None else layer.biases(state)[..., None])
                                   for layer in self.stack.layers])
        return self._views[1]

    def _linear(self, state: Tensor, j: int, h: Tensor | None) -> Tensor:
        """g_j = w_j h_{j-1} + b_j for every chain, ``(C, out_j, B)``; ``h`` None is the shared input."""
        layer = self.stack.layers[j]
        weight, bias = self._layer_views(state)[j]
        if h is None:  # one GEMM for all chains, without copying x per chain
            g = (weight.reshape(-1, layer.in_features) @ self.x.T).view(weight.shape[0], layer.out_features, -1)
            return g if bias is None else g.add_(bias)
        return _affine(weight, bias, h)

    def _input_product(self, block: int, delta: Tensor) -> Tensor:
        """The change x[:, S] dw_S ``(C, B)`` of node k's pre-activations for input-layer node ``block`` (its
        weights' columns S moving by ``delta[:, weight_pos]``; Eq. 3.1). It does not depend on the state, so with
        the sweep's steps known (``reset(state, steps)``) it is computed together with the coming input-layer
        node blocks' (:meth:`_window_products`)."""
        product = self._products.pop(block, None)
        if product is None:
            self._products = self._window_products(block, delta)
            product = self._products.pop(block)
        return product

    def _window_products(self, first: int, delta: Tensor) -> dict[int, Tensor]:
        """x[:, S] dw_S of input-layer node block ``first`` and, with the sweep's steps, of the input-layer node
        blocks after it, as many as ``INPUT_PRODUCT_BYTES`` hold. Blocks on the same input columns S
        (the same run of columns in every node, as the finer-node split makes them) share one GEMM, which
        reads those columns of the batch once instead of once per block, and needs no transposed copy of the
        batch: at one chain and B = 3,000 the paper's 100 input-layer blocks took 3.9 ms this way, against
        10.6 ms block by block with the transpose they read (4.9 + 5.7 ms; AMD EPYC Zen3, one thread)."""
        window = {first: delta}
        if self.steps is not None:
            limit = INPUT_PRODUCT_BYTES // max(1, self.state.shape[0] * self.x.shape[0] * self.x.element_size())
            for q in range(first + 1, self.num_blocks):
                if len(window) >= limit:
                    break
                if self.plans[q].layer == 0 and self.plans[q].node is not None:
                    window[q] = self.steps[q]
        groups: dict[tuple, list[int]] = {}
        for q in window:
            columns = self.plans[q].columns
            key = (columns.start, columns.stop) if isinstance(columns, slice) else (id(columns),)
            groups.setdefault(key, []).append(q)
        products, chains = {}, self.state.shape[0]
        for members in groups.values():
            plans = [self.plans[q] for q in members]
            steps = torch.cat([window[q][:, plan.weight_pos] for q, plan in zip(members, plans)])
            stacked = steps @ self.x[:, plans[0].columns].T  # (blocks * C, B)
            products.update((q, stacked[i * chains:(i + 1) * chains]) for i, q in enumerate(members))
        return products

    def _buffer(self, kind: str, j: int, like: Tensor) -> Tensor:
        """The scratch tensor ``(kind, j)`` shaped as ``like``."""
        buffer = self._scratch.get((kind, j))
        if buffer is None or buffer.shape != like.shape or buffer.dtype != like.dtype:
            buffer = self._scratch[kind, j] = torch.empty_like(like)
        return buffer

    def _tail_step(self, l: int) -> tuple:
        """Layer l's entry of ``_tail_steps``."""
        writes = type(self.stack.activations[l - 1]) in WRITES_OUT
        weight, bias = self._layer_views(self.state)[l]
        return (self._activations[l - 1], self._buffer("post", l - 1, self.pre[l - 1]) if writes else None,
                weight, bias, self._buffer("pre", l, self.pre[l]))

    def _tail(self, j: int, g: Tensor) -> Tensor:
        """The outputs ``(C, out_L, B)`` of the current state above layer j, whose pre-activations
        are ``g``, computed in scratch tensors (valid until the next proposal)."""
        for activation, h_out, weight, bias, g_out in self._tail_steps[j:]:  # layers j + 1, ...
            h = activation(g) if h_out is None else activation(g, out=h_out)
            g = _affine(weight, bias, h, g_out)
        return g

    def _upward(self, state: Tensor, j: int, g: Tensor, h: Tensor | None) -> tuple[list[Tensor], list[Tensor]]:
        """Pre-activations of layers j.. and activations of layers j..L-2, from layer j's
        ``g`` (and its activations ``h`` when already known)."""
        last = len(self.stack.layers) - 1
        pres, posts = [g], []
        for l in range(j + 1, last + 1):
            h = self._activations[l - 1](pres[-1]) if h is None else h
            posts.append(h)
            pres.append(self._linear(state, l, h))
            h = None
        return pres, posts

    def _output_likelihood(self, g: Tensor, scratch: bool = False) -> Tensor:
        """The summed log-likelihoods of the outputs ``g`` ``(C, k, B)``; ``scratch``: ``g`` may be overwritten."""
        return self.total(self.log_likelihood(g, scratch))

    def _reset_likelihood(self, state: Tensor) -> Tensor:
        self._lag = None
        self.pre, self.post = self._upward(state, 0, self._linear(state, 0, None), None)
        self._valid = len(self.pre)
        self.log_likelihood = self.posterior.likelihood.unit_major(self.target, self.pre[-1])
        self._tail_steps = [self._tail_step(l) for l in range(1, len(self.stack.layers))]
        return self._output_likelihood(self.pre[-1])

    def _refresh(self, upto: int) -> None:
        """Recompute the stale caches of the current state up to layer ``upto``'s pre-activations."""
        for l in range(self._valid, upto + 1):
            self.post[l - 1] = self._activations[l - 1](self.pre[l - 1])
            self.pre[l] = self._linear(self.state, l, self.post[l - 1])
        self._valid = max(self._valid, upto + 1)

    def _catch_up(self) -> None:
        """Apply the rank-one update g_{j+1} += w_{j+1}[:, k] (h_jk - h_jk at the lag's start) that
        fused blocks of node (j, k) left pending (Eq. 3.2)."""
        j, k, start = self._lag
        w_column = self._layer_views(self.state)[j + 1][0][:, :, k:k + 1]
        self.pre[j + 1].baddbmm_(w_column, (self.post[j][:, k] - start).unsqueeze(1))
        self._lag = None

    def _propose_likelihood(self, block: int, values: Tensor, delta: Tensor) -> Tensor:
        plan = self.plans[block]
        j, last = plan.layer, len(self.stack.layers) - 1
        fused = (plan.node is not None and self.fused is not None and j < last
                 and self.fused.fuses(j, self.state.shape[0]))
        if self._lag is not None and not (fused and self._lag[:2] == (j, plan.node)):
            self._catch_up()
        self._refresh(last if plan.node is None else min(j + 1, last))
        if plan.node is None:  # not inside one node: recompute from layer j with the proposal
            proposed = self.state.clone()
            proposed[:, plan.members] = values
            pres, posts = self._upward(proposed, j, self._linear(proposed, j, self.post[j - 1] if j else None), None)
            self._cache = (j, None, pres, posts)
            return self._output_likelihood(pres[-1])
        # the node's new pre-activations g_jk + h_{j-1}[:, S] dw_S + db_k (C, B): the only ones of layer j that change
        k, g_k = plan.node, self.pre[j][:, plan.node]
        if j == 0:
            column = torch.add(g_k, self._input_product(block, delta))
        else:
            dw = delta[:, plan.weight_pos]
            column = torch.baddbmm(g_k.unsqueeze(1), dw.unsqueeze(1), self.post[j - 1][:, plan.columns]).squeeze(1)
        if plan.bias_pos is not None:
            column.add_(delta[:, plan.bias_pos, None])
        if j == last:
            g = self._buffer("pre", j, self.pre[j]).copy_(self.pre[j])
            g[:, k] = column
            self._cache = (j, (k, column, None), [], [])
            return self._output_likelihood(g, scratch=True)
        # layer j + 1 by a rank-one update: g_{j+1} + w_{j+1}[:, k] (h_jk' - h_jk) (Eq. 3.2)
        w_column = self._layer_views(self.state)[j + 1][0][:, :, k:k + 1]
        if fused:
            if self._lag is None:
                self._lag = (j, k, self.post[j][:, k].clone())
            total, h_column = self.fused(j, self.state, column, self._lag[2], self.pre[j + 1], w_column.squeeze(2),
                                         self.target)
            self._cache = (j, (k, column, h_column), [], [])  # the layers above go stale
            return total
        h_column = self._activations[j](column)
        dh = h_column - self.post[j][:, k]
        g_above = torch.baddbmm(self.pre[j + 1], w_column, dh.unsqueeze(1),
                                out=self._buffer("next", j + 1, self.pre[j + 1]))
        self._cache = (j, (k, column, h_column), [g_above], [])  # the layers above go stale
        output = self._tail(j + 1, g_above)
        return self._output_likelihood(output, scratch=output is not g_above)  # g_above is kept

    def _commit_likelihood(self, accept: Tensor, rejected: Tensor | None) -> None:
        j, row, pres, posts = self._cache
        if row is not None:  # layer j changed in node k only: update that row in place
            k, column, h_column = row
            write_accepted(self.pre[j][:, k], column, accept, rejected)
            if h_column is not None:
                write_accepted(self.post[j][:, k], h_column, accept, rejected)
                self._valid = j + 2  # layer j + 1 is kept below (or lags); the ones above are stale
            j += 1  # pres and posts start at the layer above
        for l, g in enumerate(pres, start=j):
            old, self.pre[l] = self.pre[l], keep_accepted(g, self.pre[l], accept, rejected)
            if self.pre[l] is g and self._scratch.get(("next", l)) is g:  # the scratch tensor is the cache now: swap
                self._scratch["next", l] = old
        for l, h in enumerate(posts, start=j):
            self.post[l] = keep_accepted(h, self.post[l], accept, rejected)
        self._cache = None


def _affine(weight: Tensor, bias: Tensor | None, h: Tensor, out: Tensor | None = None) -> Tensor:
    """w h + b of every chain's layer, ``(C, out, B)`` from weights ``(C, out, in)``, biases ``(C, out, 1)`` (or
    None) and inputs ``(C, in, B)``, written into ``out`` when given."""
    return torch.bmm(weight, h, out=out) if bias is None else torch.baddbmm(bias, weight, h, out=out)


_NO_CHAIN, _FIRST_CHAIN = torch.zeros(0, dtype=torch.long), torch.zeros(1, dtype=torch.long)


def rejected_indices(accept: Tensor) -> Tensor | None:
    """The indices of the chains that reject (``~accept``) on CPU, None elsewhere (finding them would
    synchronise with the device); one chain's without a search (one host read)."""
    if accept.device.type != "cpu":
        return None
    if accept.numel() == 1:
        return _NO_CHAIN if bool(accept) else _FIRST_CHAIN
    return (~accept).nonzero().squeeze(1)


def unanimous(accept: Tensor, rejected: Tensor | None) -> bool | None:
    """True when every chain accepts, False when every chain rejects, None when they differ or it is not
    known without a host synchronisation (``rejected``, the indices of ``~accept``, is None off the CPU)."""
    if rejected is None or 0 < rejected.numel() < accept.numel():
        return None
    return rejected.numel() == 0


def select_accepted(new: Tensor, old: Tensor, accept: Tensor, rejected: Tensor | None) -> Tensor:
    """``where(accept, new, old)`` of per-chain values ``(C,)``; ``new`` or ``old`` itself when the decision
    is :func:`unanimous`."""
    everyone = unanimous(accept, rejected)
    if everyone is None:
        return torch.where(accept, new, old)
    return new if everyone else old


def write_accepted(target: Tensor, new: Tensor, accept: Tensor, rejected: Tensor | None) -> None:
    """``target <- where(accept, new, target)`` over the leading (chain) dimension, in place: nothing is
    written when every chain rejects and ``new`` is copied when none does (:func:`unanimous`; one chain
    always takes one of these)."""
    everyone = unanimous(accept, rejected)
    if everyone is None:
        torch.where(accept.view(-1, *([1] * (new.dim() - 1))), new, target, out=target)
    elif everyone:
        target.copy_(new)


def keep_accepted(new: Tensor, old: Tensor, accept: Tensor, rejected: Tensor | None) -> Tensor:
    """``where(accept, new, old)`` over the leading (chain) dimension, written into ``new``.

    With ``rejected`` (the indices of ``~accept``, on CPU) only the rejected chains' rows are
    copied: a full ``where`` pass over every cached layer was the bulk of a block's cost there;
    when the decision is :func:`unanimous`, ``new`` or ``old`` itself is returned, nothing copied
    (one chain always takes one of these). Without it (CUDA), one ``where``, which needs no host
    synchronisation.
    """
    everyone = unanimous(accept, rejected)
    if everyone is not None:
        return new if everyone else old
    if rejected is None:
        return torch.where(accept.view(-1, *([1] * (new.dim() - 1))), new, old)
    return new.index_copy_(0, rejected, old.index_select(0, rejected))
