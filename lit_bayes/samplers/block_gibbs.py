"""``BlockGibbs``: (minibatch) Metropolis-within-blocked-Gibbs for MLPs, FNBG (spec fnbg.md).

One training step is one sweep on one batch (spec §2.1, §8 item 12): the current energy is
recomputed on the batch, then every block is visited in order with one Metropolis step
(:class:`lit_bayes.steppers.block_metropolis.BlockMetropolis`). All chains move together;
each has its own accept/reject decision per block.
"""
from __future__ import annotations

import numbers

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn

from lit_bayes.blocks import Partition, make_partition
from lit_bayes.fused_tail import FusedTail
from lit_bayes.incremental import BlockPlan, BlockTarget, FullForwardTarget, IncrementalTarget, block_plans
from lit_bayes.linear_stack import LinearStack, linear_stack
from lit_bayes.posterior import FlatPrior, Likelihood, Prior
from lit_bayes.samplers.base import SamplerModule
from lit_bayes.steppers.block_metropolis import BlockMetropolis
from lit_bayes.validation import check_bool

__all__ = ["BlockGibbs"]

BLOCKS = ("layer", "node", "finer_node")


def _block_variances(value: float | Sequence[float], partition: Partition) -> list[float]:
    """One proposal variance per block from a scalar, one per layer or one per block."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) or torch.is_tensor(value) and value.dim() == 0:
        return [float(value)] * partition.num_blocks
    try:
        values = [float(v) for v in value]
    except TypeError:
        raise ValueError(f"proposal_variance must be a number or a list of numbers, got {value!r}") from None
    layers = list(dict.fromkeys(partition.layers))
    if len(values) == len(layers):
        by_layer = dict(zip(layers, values))
        return [by_layer[label] for label in partition.layers]
    if len(values) == partition.num_blocks:
        return values
    raise ValueError(
        f"proposal_variance must be one number, one per layer ({len(layers)}: {layers}) or one per block "
        f"({partition.num_blocks}), got {len(values)} values"
    )


class BlockGibbs(SamplerModule):
    """Minibatch (finer) node-blocked Gibbs, FNBG (Papamarkou; spec fnbg.md §2).

    Args (besides :class:`SamplerModule`'s):
        blocks: ``"layer"``, ``"node"`` (NBG) or ``"finer_node"`` (FNBG), or a
            :class:`lit_bayes.blocks.Partition` of the network's parameters.
        beta, max_block_size, subblock_size: the finer-node rule (one of them;
            :func:`lit_bayes.blocks.finer_node_partition`); e.g. ``beta=[10, 1, 1, 1]`` gives
            the paper's 130 blocks for MLP(784, 10, 10, 10, 10).
        proposal_variance: sigma^2 of the isotropic Gaussian proposal (a variance, not a
            std; spec §8 item 3): one number, one per layer or one per block.
        adapt: adapt each chain's per-block variances towards ``target_accept`` during the
            burn-in only (frozen afterwards).
        target_accept: the adaptation's target acceptance rate.
        incremental: cached-activation evaluation (:class:`lit_bayes.incremental.IncrementalTarget`);
            ``False`` is the naive full-forward reference, needed for other architectures.
        fused: with ``incremental``, node blocks evaluate the layers above them and the
            likelihood in one kernel compiled by ``torch.compile``
            (:class:`lit_bayes.fused_tail.FusedTail`; the same values up to float rounding).
            It needs a C++ compiler on CPU and compiles for tens of seconds on the first
            sweep; it pays off on large batches with narrow upper layers, for many chains or
            many blocks per node (the paper's MLP(784, 10, 10, 10, 10), batch 3000, on CPU:
            32 chains ~1.75x faster sweeps with 130 and with 810 blocks, 8 chains 1.26-1.4x), not for
            tiny networks. Chains go through the compiled tail in groups of
            ``lit_bayes.fused_tail.CHAIN_GROUP`` (8); 2-7 chains stay eager, and one chain fuses nothing
            unless ``FusedTail.min_terms_one_chain`` is set: its eager path is at least as fast.

    Defaults follow the paper: the raw batch sum (``minibatch_scaling="sum"``) and
    initial states drawn from the prior. Only the network is sampled: the likelihood must
    have no parameters, and the prior any :class:`lit_bayes.posterior.Prior` (it factorises over
    the parameters, so a block's prior change is its own).
    """

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: Prior | None = None,
        blocks: Literal["layer", "node", "finer_node"] | Partition = "node",
        beta: int | Sequence[int] | None = None,
        max_block_size: int | None = None,
        subblock_size: int | Sequence[int | None] | None = None,
        proposal_variance: float | Sequence[float] = 0.04,
        adapt: bool = False,
        target_accept: float = 0.3,
        incremental: bool = True,
        fused: bool = False,
        num_data: int | None = None,
        temperature: float = 1.0,
        minibatch_scaling: Literal["rescaled", "sum"] = "sum",
        num_chains: int = 1,
        burn_in: int | float = 0,
        thinning: int = 1,
        seed: int = 0,
        init: Literal["module", "prior", "template", "map"] = "prior",
        vectorize: bool = True,
        num_draws: int | None = None,
        init_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            model=model, likelihood=likelihood, prior=prior, num_data=num_data, temperature=temperature,
            minibatch_scaling=minibatch_scaling, num_chains=num_chains, burn_in=burn_in, thinning=thinning,
            seed=seed, init=init, vectorize=vectorize, num_draws=num_draws, init_options=init_options,
        )
        if list(likelihood.parameters()):
            raise ValueError(
                f"likelihood {type(likelihood).__name__} has parameters; BlockGibbs samples the network only "
                "(fix them, e.g. Gaussian(learn_noise=False))"
            )
        check_bool("adapt", adapt)
        shapes = {name: tuple(p.shape) for name, p in self.template_parameters().items()}
        self.partition = self._partition(blocks, shapes, beta, max_block_size, subblock_size)
        if isinstance(blocks, Partition):  # hyper-parameters stay plain values (weights_only checkpoints)
            self.hparams["blocks"] = "user partition"
        self.stepper_options = {
            "variances": _block_variances(proposal_variance, self.partition),
            "target_accept": target_accept,
            "adapt_steps": 0,  # the burn-in when adapt, set once the run's length fixes it
        }
        self.adapt = adapt
        BlockMetropolis.options(**self.stepper_options)  # bad options fail now, not at fit
        self.stack: LinearStack | None = linear_stack(model) if incremental else None
        if not isinstance(fused, bool) or fused and not incremental:
            raise ValueError(f"fused must be True or False and needs incremental=True, got fused={fused!r}, "
                             f"incremental={incremental!r}")
        self.fused_tail = FusedTail(self.stack, likelihood) if fused else None
        self.flat_prior = self.prior.flat({n: tuple(p.shape) for n, p in self.template_parameters().items()})
        self._layout: tuple[Any, list[BlockPlan], FlatPrior] | None = None
        self.automatic_optimization = False

    @staticmethod
    def _partition(blocks, shapes, beta, max_block_size, subblock_size) -> Partition:
        if isinstance(blocks, Partition):
            num_params = sum(torch.Size(s).numel() for s in shapes.values())
            if blocks.num_params != num_params:
                raise ValueError(f"blocks partitions {blocks.num_params} parameters, the model has {num_params}")
            return blocks
        if blocks == "user partition":
            raise ValueError("this checkpoint was made with a user Partition: pass the same Partition again as blocks=")
        return make_partition(blocks, shapes, allowed=BLOCKS, argument="blocks", beta=beta,
                              max_block_size=max_block_size, subblock_size=subblock_size)

    # --------------------------------------------------------------- sweeps
    def layout(self) -> tuple[list[BlockPlan], FlatPrior]:
        """Every block's plan and the prior over flat states, on the module's device (cached)."""
        if self._layout is None or self._layout[0] != self.device:
            plans = block_plans(self.partition, self.stack, self.device)
            self._layout = (self.device, plans, self.flat_prior.to(self.device))
        return self._layout[1], self._layout[2]

    def block_target(self, x: Tensor, y: Tensor) -> BlockTarget:
        """The energy of every chain under single-block proposals on the batch ``(x, y)``."""
        plans, prior = self.layout()
        options = (plans, self.posterior, prior, x.shape[0])
        if self.stack is not None:
            return IncrementalTarget(*options, self.stack, x, y, self.fused_tail)

        def log_likelihood(flat: Tensor) -> Tensor:
            params = self.chains.unflatten(flat)
            return self.log_likelihood(params, self.outputs(params, x), y)

        return FullForwardTarget(*options, log_likelihood)

    def configure_optimizers(self):
        options = {**self.stepper_options, "adapt_steps": self.resolve_sampling()[0] if self.adapt else 0}
        return BlockMetropolis(list(self.chains.parameters()), generator=self.make_generator(), **options)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = self.check_batch(batch)
        stepper = self.optimizers()
        energy = stepper.step(closure=lambda: self.block_target(x, y))  # through Lightning: global_step counts it
        self.log_train({"train/energy": energy.mean().float()}, prog_bar=("train/energy",))
        return energy.float()

    def acceptance_counts(self) -> dict[str, Any]:
        """Accepted proposals per chain and block ``(C, M)``, proposals per block, block labels."""
        accepted, proposed = self.optimizers().optimizer.acceptance()
        return {"accepted": accepted, "proposed": proposed,
                "layers": self.partition.layers, "nodes": self.partition.nodes}

    def proposal_variances(self) -> Tensor:
        """The stepper's current proposal variances ``(C, M)``."""
        return self.optimizers().optimizer.proposal_variances()
