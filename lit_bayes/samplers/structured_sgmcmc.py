"""``StructuredSGMCMC``: S-SGMCMC and S_d-SGMCMC (Alexos et al., structured SG-MCMC, seed 001).

The parameters are partitioned into M groups (:mod:`lit_bayes.blocks`). Each step forms
composite parameter sets ``r θ + (1 - r) θ̃`` that keep the current value of the groups a
mask ``r`` selects and take the others from θ̃, a detached draw from the buffer of past
states q̂^(t) (:class:`lit_bayes.sample_buffer.SampleBuffer`), and replaces the energy
gradient of the base stepper by the gradient of (structured-sgmcmc spec §1-2)

- ``mode="structured"`` (S-SGMCMC, Eqs. 14-15 / Algorithm 1): the M one-hot masks,
  ``U_hat^(S)(θ) = Σ_{i=1..M} U_hat([θ_i, θ̃^(i)_{-i}])``; group i gets its gradient from
  term i only. Cost: M composites per step.
- ``mode="dropout"`` (S_d-SGMCMC, Eq. 16 / Eq. 43 / Algorithm 2): K random masks,
  ``U_hat^(S_d)(θ) = M / (K E[Σ r_i]) Σ_{k=1..K} U_hat(r^(k) θ + (1 - r^(k)) θ̃^(k))`` with the
  Bernoulli(ρ), uniform or one-hot laws of :mod:`lit_bayes.masks`. Cost: K composites.

Only the gradient changes: the noise, preconditioner and momentum are the base stepper's
(SGLD, pSGLD, SGHMC; Eqs. 44-46), applied to every parameter (spec §3, §7 item 6). The
structured energy, Algorithms 1 and 2 step by step, is
:class:`lit_bayes.steppers.structured.StructuredEnergy`; this module keeps the state (the
partition, the buffer of past states), the generators, checkpoints and logging. Every
composite of a step sees the same minibatch, and the C·K composites of all chains are
evaluated in one vectorised call (one leading dimension of C·K parameter sets through
:func:`lit_bayes.chains.stacked_call`).

Randomness: the stepper noise comes from the module's generator (as in :class:`SGMCMC`);
masks and buffer indices come from the module's ``"structure"`` stream
(:attr:`SamplerModule.STREAMS`). Both are checkpointed. Keeping the streams apart means a
structured chain with keep-probability 1 draws exactly the noise of the plain chain.
"""
from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

from lit_bayes import blocks
from lit_bayes.chains import flat_rows
from lit_bayes.masks import MaskLaw
from lit_bayes.posterior import Likelihood, Prior
from lit_bayes.sample_buffer import SampleBuffer
from lit_bayes.samplers.sgmcmc import SGMCMC
from lit_bayes.steppers.structured import StructuredEnergy
from lit_bayes.validation import check_int

__all__ = ["StructuredSGMCMC"]

PARTITIONS = ("layer", "node", "modulo", "random", "fully_factorised", "user")


class StructuredSGMCMC(SGMCMC):
    """S-SGMCMC / S_d-SGMCMC on top of any SG stepper (see the module docstring).

    Args (besides :class:`SGMCMC`'s, which keep their meaning):
        partition: ``"layer"``, ``"node"`` (by neuron: incoming weights and bias; both
            need ``nn.Linear`` layers), ``"modulo"`` (flat index mod M, the paper's equal
            interleaved groups), ``"random"`` (i.i.d. group ids, seeded by ``seed``),
            ``"fully_factorised"`` (every scalar its own group) or ``"user"``.
        num_groups: M for ``"modulo"`` and ``"random"``.
        group_ids: ``"user"``: the group of every flat parameter (order of
            :meth:`lit_bayes.chains.ChainState.flat`), ids ``0..M-1``.
        mode: ``"structured"`` (M one-hot composites per step) or ``"dropout"``.
        num_masks: K, composites per step in ``"dropout"`` mode (``"structured"`` uses M).
        mask: mask law of ``"dropout"`` mode: ``"bernoulli"``, ``"uniform"``, ``"one_hot"``.
        keep_prob: ρ of the Bernoulli law, the probability of KEEPING a group's current value.
        buffer_size: past states kept per chain for q̂ (FIFO; the authors' code keeps 5000).
            It costs ``num_chains * buffer_size * P * 4`` bytes (ResNet-20: 1.08 GB per
            chain and 1000 states), allocated when training starts.
        buffer_start: steps before it use the plain energy U(θ); from it on, composites use
            the buffer. ``None`` (default): one epoch (the Trainer's training batches), as the
            authors' code runs its first epoch unstructured. pSGLD and SGHMC need these plain
            steps: their preconditioner statistics start at zero, and a group that every mask
            drops has a zero gradient, so at ``buffer_start=0`` its preconditioner is
            1 / ``eps_precond`` (1e5) and its noise throws the weights away (seen on MNIST:
            weights ~100, test NLPD 300-3000).
        buffer_init: ``"initial"``: the buffer starts with θ⁽⁰⁾ and stores every state
            from the first step (the authors' code); ``"warm_start"``: it starts with the
            state at ``buffer_start`` and stores only later states.

    ``mode="structured"`` holds C·M composites of P parameters per step: use it for a
    few groups (the paper: M <= 16 on ResNet-20) and ``"dropout"`` for fine partitions.
    """

    measures_configurational_temperature = False  # the structured energy's gradient is not grad U

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: Prior | None = None,
        stepper: Literal["sgld", "psgld", "sghmc", "scale_adapted_sghmc"] = "sgld",
        step_size: float | None = None,
        schedule: Literal["constant", "polynomial", "cyclical"] = "constant",
        schedule_options: dict[str, Any] | None = None,
        stepper_options: dict[str, Any] | None = None,
        num_data: int | None = None,
        temperature: float = 1.0,
        minibatch_scaling: Literal["rescaled", "sum"] = "rescaled",
        num_chains: int = 1,
        burn_in: int | float = 0,
        thinning: int = 1,
        seed: int = 0,
        init: Literal["module", "prior", "template", "map"] = "module",
        vectorize: bool = True,
        partition: Literal["layer", "node", "modulo", "random", "fully_factorised", "user"] = "fully_factorised",
        num_groups: int | None = None,
        group_ids: list[int] | None = None,
        mode: Literal["structured", "dropout"] = "dropout",
        num_masks: int = 4,
        mask: Literal["bernoulli", "uniform", "one_hot"] = "bernoulli",
        keep_prob: float = 0.5,
        buffer_size: int = 1000,
        buffer_start: int | None = None,
        buffer_init: Literal["initial", "warm_start"] = "initial",
        num_draws: int | None = None,
        init_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            model=model, likelihood=likelihood, prior=prior, stepper=stepper, step_size=step_size,
            schedule=schedule, schedule_options=schedule_options, stepper_options=stepper_options,
            num_data=num_data, temperature=temperature, minibatch_scaling=minibatch_scaling,
            num_chains=num_chains, burn_in=burn_in, thinning=thinning, seed=seed, init=init,
            vectorize=vectorize, num_draws=num_draws, init_options=init_options,
        )
        if mode not in ("structured", "dropout"):
            raise ValueError(f"mode must be 'structured' (S-SGMCMC) or 'dropout' (S_d-SGMCMC), got {mode!r}")
        if buffer_init not in ("initial", "warm_start"):
            raise ValueError(f"buffer_init must be 'initial' or 'warm_start', got {buffer_init!r}")
        self.mode = mode
        self.num_masks = check_int("num_masks", num_masks, 1)
        self.buffer_size = check_int("buffer_size", buffer_size, 1)
        self.buffer_start = None if buffer_start is None else check_int("buffer_start", buffer_start, 0)
        self.buffer_init = buffer_init
        shapes = {name: tuple(p.shape) for name, p in self.template_parameters().items()}
        self.partition = blocks.make_partition(partition, shapes, allowed=PARTITIONS, num_groups=num_groups,
                                               group_ids=group_ids, seed=seed)
        self.register_buffer("group_ids", self.partition.block_ids.clone(), persistent=False)
        # group g is parameter g (fully factorised): masks and past indices need no expansion
        self.groups_are_parameters = torch.equal(self.group_ids, torch.arange(self.group_ids.numel()))
        self.structure = StructuredEnergy(mode, self.partition.num_blocks, MaskLaw(mask, keep_prob), self.num_masks)
        self.sample_buffer: SampleBuffer | None = None

    @property
    def num_groups(self) -> int:
        """M, the number of parameter groups."""
        return self.partition.num_blocks

    @property
    def num_composites(self) -> int:
        """Composite parameter sets per chain and step, the step's cost in energies: M or K."""
        return self.structure.num_composites

    # ------------------------------------------------------------------ state
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self.sample_buffer is None:
            flat = self.chains.flat()
            self.sample_buffer = SampleBuffer(flat.shape[0], flat.shape[1], self.buffer_size, flat.dtype, flat.device)
            if self.buffer_init == "initial":
                self.sample_buffer.push(flat)

    def configure_optimizers(self):
        stepper = super().configure_optimizers()
        self.make_generator("structure")
        return stepper

    @property
    def structure_generator(self) -> torch.Generator | None:
        """The generator of the group masks and the buffer draws (stream ``"structure"``)."""
        return self.generators.get("structure")

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        saved = checkpoint.get("state_dict", {}).get("sample_buffer.samples")
        if saved is not None:
            if self.sample_buffer is None:
                self.sample_buffer = SampleBuffer(saved.shape[0], saved.shape[1], saved.shape[2], saved.dtype)
            elif saved.shape != self.sample_buffer.samples.shape:
                raise ValueError(
                    f"checkpoint holds a sample buffer of shape {tuple(saved.shape)} (chains, parameters, "
                    f"buffer_size), this sampler has {tuple(self.sample_buffer.samples.shape)}: another "
                    "buffer_size, model or num_chains"
                )

    # ----------------------------------------------------------------- energy
    def draw_composites(self) -> tuple[Tensor, Tensor]:
        """One step's group masks ``(C, K, M)`` and past samples θ̃ ``(C, K, P)``
        (:meth:`lit_bayes.steppers.structured.StructuredEnergy.draw`, on the structure generator)."""
        group_ids = None if self.groups_are_parameters else self.group_ids
        return self.structure.draw(self.sample_buffer, group_ids, self.structure_generator)

    def structured_energy(self, x: Tensor, y: Tensor, masks: Tensor, tilde: Tensor) -> Tensor:
        """``U_hat^(S)`` (Eq. 14) or ``U_hat^(S_d)`` (Eq. 16) of every chain on the minibatch ``x, y``, shape
        ``(C,)`` (:meth:`lit_bayes.steppers.structured.StructuredEnergy.energy`; the C·K composites are one
        call of :meth:`energy`)."""
        flat = flat_rows(self.chains.as_dict().values())
        group_ids = None if self.groups_are_parameters else self.group_ids
        return self.structure.energy(flat, masks, tilde, group_ids,
                                     lambda sets: self.energy(self.chains.unflatten(sets), x, y))

    @property
    def plain_steps(self) -> int:
        """The steps that use the plain energy: ``buffer_start``, or one epoch of the Trainer's
        training batches when it is ``None``."""
        if self.buffer_start is not None:
            return self.buffer_start
        batches = self.trainer.num_training_batches
        if not math.isfinite(batches):
            raise ValueError("buffer_start=None means one epoch of plain steps, but the training loader has no "
                             "length: pass buffer_start as a number of steps")
        return int(batches)

    def step_energy(self, x: Tensor, y: Tensor, step: int) -> Tensor:
        """The energy whose gradient drives step ``step``: U(θ) before :attr:`plain_steps`,
        the structured energy from it on (the buffer is seeded first if it is empty)."""
        if step < self.plain_steps:
            return self.energy(self.chains.as_dict(), x, y)
        if len(self.sample_buffer) == 0:
            self.sample_buffer.push(self.chains.flat())
        return self.structured_energy(x, y, *self.draw_composites())

    def after_step(self, step: int, x: Tensor, y: Tensor) -> None:
        """Push the new states into the past-sample buffer."""
        if self.buffer_init == "initial" or step >= self.plain_steps:
            self.sample_buffer.push(self.chains.flat())
