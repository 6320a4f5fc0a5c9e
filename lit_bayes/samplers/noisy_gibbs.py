"""``NoisyGibbs``: the exact Gibbs sampler of the intermediate-noise posterior (noisy-gibbs spec §1-§2).

Full batch only: every training point carries its latent pre- and post-activations
(:class:`NoisyMLP`: ``z2, x2, ..., zL, xL`` and, for a probit output, the scores ``z{L+1}``;
:class:`NoisyCNN`: the layer outputs ``h1, ..., h{K-1}`` [and ``h{K}``], flattened), stored for
every chain as buffers ``(C, n, d_l)`` of :class:`Latents` and saved in checkpoints with the
weights. One training step is one sweep of :class:`lit_bayes.steppers.noisy_gibbs.NoisyGibbsStepper`
(MLP) or :class:`lit_bayes.steppers.noisy_gibbs_conv.NoisyConvGibbsStepper` (CNN, App. G).
The kept samples are the weights and biases (the latents are discarded, §1.1); predictions use
the noiseless network (§3) through the model's likelihood (:meth:`NoisyMLP.likelihood`).

Training batches may arrive in any order (a DataLoader may shuffle them): the rows are put into
one canonical order (:func:`canonical_order`) before the sweep, so each point keeps its own
latents; :class:`CanonicalBatch` does it once for a batch that comes back unchanged (the
library's DataModules hand a full batch over as the same tensors every epoch).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn

from lit_bayes.models.noisy_cnn import NoisyCNN
from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.noisy_energy import tempered
from lit_bayes.samplers.base import SamplerModule
from lit_bayes.steppers.noisy_gibbs import NoisyGibbsStepper
from lit_bayes.steppers.noisy_gibbs_conv import NoisyConvGibbsStepper
from lit_bayes.unchanged import DerivedFrom

__all__ = ["CanonicalBatch", "InformedStart", "Latents", "NoisyGibbs"]

DTYPES = {"float32": torch.float32, "float64": torch.float64}
INITS = ("zeros", "prior", "template")


class Latents(nn.Module):
    """The latent variables of every chain, one persistent buffer ``(C, n, d_l)`` per name."""

    def __init__(self, tensors: Mapping[str, Tensor]) -> None:
        super().__init__()
        for name, value in tensors.items():
            self.register_buffer(name, value.detach().clone())

    def as_dict(self) -> dict[str, Tensor]:
        return dict(self.named_buffers())


def canonical_order(x: Tensor, y: Tensor) -> Tensor:
    """A permutation putting the rows ``(x_i, y_i)`` in one fixed order, whatever order they came in.

    Rows are sorted by a fixed random float64 projection (O(n d), in chunks); only if two
    different rows share a key (practically never) does it fall back to an exact lexicographic
    sort. Identical rows may swap places, which leaves the posterior unchanged (their latents
    are exchangeable).
    """
    inputs = x.flatten(1)
    direction = torch.randn(inputs.shape[1] + 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    direction = direction.to(inputs.device)
    keys = torch.cat([chunk.double() @ direction[:-1] for chunk in inputs.split(8192)]) + y.double() * direction[-1]
    order = torch.argsort(keys, stable=True)
    tied = (keys[order][1:] == keys[order][:-1]).nonzero().flatten()
    first, second = order[tied], order[tied + 1]
    if tied.numel() and not (torch.equal(inputs[first], inputs[second]) and torch.equal(y[first], y[second])):
        rows = torch.cat([inputs.double(), y.double().reshape(len(y), -1)], dim=1)
        _, inverse = torch.unique(rows, dim=0, sorted=True, return_inverse=True)
        order = torch.argsort(inverse, stable=True)
    return order


class CanonicalBatch:
    """The full training batch in canonical order, remade only when different tensors arrive.

    At MNIST size ordering costs about as much as a sweep (keys, sort and a 188 MB gather), so
    the ordered copy of the last batch is kept while the same tensors, unmodified, come back.
    """

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self._ordered: DerivedFrom[tuple[Tensor, Tensor]] = DerivedFrom()

    def __call__(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """``(inputs, targets)``: ``x`` flattened to ``(n, d)`` in ``dtype`` and ``y``, in canonical order."""
        return self._ordered((x, y), self._order)

    def _order(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        order = canonical_order(x, y)
        return x[order].flatten(1).to(self.dtype), y[order]


class InformedStart:
    """Starting chosen chains at given weights and latents instead of the sampler's ``init``: the
    informed chain of the teacher-student test (spec §4 step 4, §8 item 5). Mixed into the sampler
    modules of the intermediate-noise posterior, which set ``_pending_parameters`` and
    ``_pending_latents`` to ``None`` and ``dtype_name`` in ``__init__``."""

    def _chain_index(self, chains: Sequence[int] | None) -> Tensor:
        """The chain indices of ``chains`` (default: every chain), checked."""
        if chains is None:
            return torch.arange(self.num_chains)
        index = list(chains)
        if not index or len(set(index)) != len(index) or any(
                isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < self.num_chains for c in index):
            raise ValueError(f"chains must list distinct chain indices in [0, {self.num_chains}), got {chains!r}")
        return torch.tensor(index)

    def set_initial_parameters(self, parameters: Mapping[str, Tensor], chains: Sequence[int] | None = None) -> None:
        """Start the given chains (default all) at ``parameters`` instead of ``init``'s weights, e.g. the
        teacher W* for an informed chain (spec §4 step 4). ``parameters`` map the model's parameter
        names (``layers.{l}.weight``, ``layers.{l}.bias``) to tensors of their shapes. Call it before ``fit``."""
        if self.chains is not None:
            raise RuntimeError("set_initial_parameters must be called before fit: the chains already exist")
        shapes = {name: p.shape for name, p in self.model.named_parameters()}
        if sorted(parameters) != sorted(shapes):
            raise ValueError(f"parameters must hold exactly {sorted(shapes)}, got {sorted(parameters)}")
        for name, value in parameters.items():
            if value.shape != shapes[name]:
                raise ValueError(f"parameters[{name!r}] must have shape {tuple(shapes[name])}, got {tuple(value.shape)}")
        self._pending_parameters = (self._chain_index(chains), {n: v.detach().clone() for n, v in parameters.items()})

    def apply_initial_parameters(self, state: dict[str, Tensor], dtype: torch.dtype) -> dict[str, Tensor]:
        """``state`` (stacked initial parameters) with the chains given to :meth:`set_initial_parameters` replaced."""
        if self._pending_parameters is not None:
            chains, values = self._pending_parameters
            for name, value in values.items():
                state[f"net.{name}"][chains] = value.to(dtype)
            self._pending_parameters = None
        return state

    def queue_initial_latents(self, inputs: Tensor, targets: Tensor, latents: Mapping[str, Tensor],
                              chains: Sequence[int] | None) -> None:
        """Check ``latents`` (``(n, d)`` or ``(C, n, d)`` per name, rows following ``(inputs, targets)``)
        and keep them, in canonical row order, for :meth:`apply_initial_latents`."""
        index = self._chain_index(chains)
        order = canonical_order(inputs, targets)
        pending = {}
        for name, value in latents.items():
            if value.dim() not in (2, 3) or value.shape[-2] != len(inputs) or (
                    value.dim() == 3 and value.shape[0] not in (1, len(index))):
                raise ValueError(f"latents[{name!r}] must have shape (n, d) or (C, n, d) with n = {len(inputs)} "
                                 f"and C = {len(index)} chains, got {tuple(value.shape)}")
            pending[name] = value[..., order, :].to(DTYPES[self.dtype_name])
        self._pending_latents = (index, pending)

    def apply_initial_latents(self, latents: dict[str, Tensor]) -> dict[str, Tensor]:
        """``latents`` (every chain's) with the chains given to the latents queue replaced."""
        if self._pending_latents is not None:
            index, pending = self._pending_latents
            for name, value in pending.items():
                latents[name][index] = value.to(latents[name].device).expand_as(latents[name][index])
            self._pending_latents = None
        return latents


class NoisyGibbs(InformedStart, SamplerModule):
    """Gibbs sampling the intermediate-noise posterior of a :class:`NoisyMLP` or :class:`NoisyCNN`
    (Algorithm 1, §2.5; App. G for conv and pooling layers).

    Args:
        model: the :class:`lit_bayes.models.NoisyMLP` or :class:`lit_bayes.models.noisy_cnn.NoisyCNN`
            (its noise variances and prior precisions define the target, eq. 4).
        num_chains: chains advanced together (batched Cholesky factors and matrix products).
        burn_in, thinning, seed, num_draws: as in :class:`SamplerModule`.
        init: ``"zeros"`` (every weight, bias and latent 0, as in the paper, §5), ``"prior"``
            (weights from the prior, latents through the generative process eq. 7 with fresh
            noise), or ``"template"`` (every chain starts at ``model``'s parameters, e.g. a
            teacher, latents as for ``"prior"`` unless :meth:`set_initial_latents` gives them).
        dtype: ``"float32"`` or ``"float64"`` for the weights and latents (the truncated
            Gaussians are always drawn in float64).
        temperature: T > 0 (finite): the target is the joint of eq. 4 raised to 1/T (1: the posterior).
            Every Gaussian factor's variance is multiplied by T (noise variances times T, prior
            precisions over T, :func:`lit_bayes.noisy_energy.tempered`), so every conditional keeps its
            mean and has its variance multiplied by T: the weights, biases and post-activations
            (eqs. 8-9, 52-55, App. G), the pieces of the pre-activation laws (eq. 10) and the truncated
            Gaussians of the probit scores (eqs. 50-51), whose truncation (the hard constraint
            y = argmax Z^(L+1)) no power changes.
    """

    def __init__(
        self,
        model: NoisyMLP | NoisyCNN,
        num_chains: int = 1,
        burn_in: int | float = 0,
        thinning: int = 1,
        seed: int = 0,
        init: Literal["zeros", "prior", "template"] = "zeros",
        dtype: Literal["float32", "float64"] = "float32",
        num_draws: int | None = None,
        temperature: float = 1.0,
    ) -> None:
        if not isinstance(model, (NoisyMLP, NoisyCNN)):
            raise ValueError(f"model must be a lit_bayes.models.NoisyMLP or NoisyCNN, got {type(model).__name__}")
        if init not in INITS:
            raise ValueError(f"init must be one of {', '.join(map(repr, INITS))}, got {init!r}")
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
        super().__init__(model=model, likelihood=model.likelihood(), prior=model.prior(), num_data=None,
                         temperature=temperature, minibatch_scaling="sum", num_chains=num_chains, burn_in=burn_in,
                         thinning=thinning, seed=seed, init="template" if init == "zeros" else init, vectorize=True,
                         num_draws=num_draws)
        self.start = init
        self.dtype_name = dtype
        self.latents: Latents | None = None
        self.canonical_batch = CanonicalBatch(DTYPES[dtype])
        self._pending_latents: tuple[Tensor, dict[str, Tensor]] | None = None
        self._pending_parameters: tuple[Tensor, dict[str, Tensor]] | None = None
        self.automatic_optimization = False

    # ------------------------------------------------------------------ state
    def initial_state(self, generator: torch.Generator) -> dict[str, Tensor]:
        state = super().initial_state(generator)
        dtype = DTYPES[self.dtype_name]
        state = {name: (torch.zeros_like(p) if self.start == "zeros" else p).to(dtype) for name, p in state.items()}
        return self.apply_initial_parameters(state, dtype)

    def set_initial_latents(self, inputs: Tensor, targets: Tensor, latents: Mapping[str, Tensor],
                            chains: Sequence[int] | None = None) -> None:
        """Start the given chains (default all) from given latents (e.g. the teacher's, spec §8 item 5)
        instead of ``init``'s.

        ``latents`` map the model's ``latent_names()`` to ``(n, d_l)`` or ``(C, n, d_l)`` tensors (C the
        number of chains given) whose rows belong to the rows of the training set ``(inputs, targets)``,
        in that order. Call it before ``fit``.
        """
        names = self.model.latent_names()
        if sorted(latents) != sorted(names):
            raise ValueError(f"latents must hold exactly {names}, got {sorted(latents)}")
        self.queue_initial_latents(inputs, targets, latents, chains)

    def initial_latents(self, inputs: Tensor) -> dict[str, Tensor]:
        """Every chain's latents at the first sweep (see ``init``)."""
        if self.start == "zeros":
            latents = {name: inputs.new_zeros(self.num_chains, len(inputs), size)
                       for name, size in self.model.latent_sizes().items()}
        else:
            net, _ = self.split_parameters(self.chains.snapshot())
            latents, _ = self.model.generate(net, inputs, self.generator)
        return self.apply_initial_latents(latents)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        saved = {k[len("latents."):]: v for k, v in checkpoint.get("state_dict", {}).items() if k.startswith("latents.")}
        if saved and self.latents is None:
            self.latents = Latents({name: torch.empty_like(v, device=self.device) for name, v in saved.items()})

    # ----------------------------------------------------------------- sweeps
    def layer_tensors(self) -> tuple[list[Tensor], list[Tensor | None]]:
        """The chains' weight and bias tensors per layer of a :class:`NoisyMLP` (live storage)."""
        params = self.chains.as_dict()
        depth = self.model.depth
        return ([params[f"net.layers.{j}.weight"] for j in range(depth)],
                [params.get(f"net.layers.{j}.bias") for j in range(depth)])

    def configure_optimizers(self):
        target = tempered(self.model, self.posterior.temperature)  # the conditionals' variances (eq. 4 to 1/T)
        if isinstance(self.model, NoisyCNN):
            net, _ = self.split_parameters(self.chains.as_dict())
            return NoisyConvGibbsStepper(target, net, self.make_generator())
        weights, biases = self.layer_tensors()
        return NoisyGibbsStepper(target, weights, biases, self.make_generator())

    def sweep_inputs(self, batch: Any) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """The full training set in canonical order (inputs in the state's dtype) and the latents."""
        x, y = self.check_batch(batch)
        held = list(self.latents.as_dict().values()) if self.latents is not None else []
        num = held[0].shape[1] if held else None
        num_train = getattr(getattr(self._trainer, "datamodule", None), "num_train", None)
        expected = num or num_train
        if expected is not None and x.shape[0] != expected:
            raise ValueError(f"NoisyGibbs is full batch: the training batch has {x.shape[0]} points, the training "
                             f"set {expected}; use batch_size=None")
        inputs, targets = self.canonical_batch(x, y)
        if self.latents is None:
            self.latents = Latents(self.initial_latents(inputs))
        return inputs, targets, self.latents.as_dict()

    def training_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets, latents = self.sweep_inputs(batch)
        self.optimizers().step(closure=lambda: (inputs, targets, latents))  # through Lightning: counts the step
