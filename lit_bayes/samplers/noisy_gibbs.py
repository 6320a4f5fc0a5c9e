"""``NoisyGibbs``: the exact Gibbs sampler of the intermediate-noise posterior (noisy-gibbs spec §1-§2).

Full batch only: every training point carries its latent pre- and post-activations
(:class:`NoisyMLP`: ``z2, x2, ..., zL, xL`` and, for a probit output, the scores ``z{L+1}``;
:class:`NoisyCNN`: the layer outputs ``h1, ..., h{K-1}`` [and ``h{K}``], flattened), stored for
every chain as ``(C, n, d_l)`` tensors of :class:`LatentChains` (shared with
:class:`lit_bayes.samplers.noisy_hmc.IntermediateHMC`) and saved in checkpoints with the weights. One training step is one sweep of :class:`lit_bayes.steppers.noisy_gibbs.NoisyGibbsStepper`
(MLP) or :class:`lit_bayes.steppers.noisy_gibbs_conv.NoisyConvGibbsStepper` (CNN, App. G).
The kept samples are the weights and biases (the latents are discarded, §1.1); predictions use
the noiseless network (§3) through the model's likelihood (:meth:`NoisyMLP.likelihood`).

Training batches may arrive in any order (a DataLoader may shuffle them): the rows are put into
one canonical order (:func:`canonical_order`) before the sweep, so each point keeps its own
latents; :class:`CanonicalBatch` does it once for a batch that comes back unchanged (the
library's DataModules hand a full batch over as the same tensors every epoch).

The informed start of the teacher-student test (spec §4) is configuration: ``informed_chains: k``
starts the first k chains at the teacher of the DataModule (:class:`InformedStart`, read at setup).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn

from lit_bayes.chains import flat_rows
from lit_bayes.data.teacher_student import check_student, teacher_of
from lit_bayes.models.noisy_cnn import NoisyCNN
from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.noisy_energy import tempered
from lit_bayes.samplers.base import SamplerModule
from lit_bayes.steppers.noisy_gibbs import NoisyGibbsStepper
from lit_bayes.steppers.noisy_gibbs_conv import NoisyConvGibbsStepper
from lit_bayes.unchanged import DerivedFrom
from lit_bayes.validation import check_bool, check_int

__all__ = ["CanonicalBatch", "InformedStart", "LatentChains", "NoisyGibbs", "check_informed_chains"]

DTYPES = {"float32": torch.float32, "float64": torch.float64}
INITS = ("zeros", "prior", "template")


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


class LatentChains(nn.Module):
    """The latent variables of every chain (spec §1.1: the pre- and post-activations of every training
    point), one ``(C, n, d_l)`` tensor per name: the one store of :class:`NoisyGibbs` and
    :class:`lit_bayes.samplers.noisy_hmc.IntermediateHMC`, saved in checkpoints as ``latents.<name>``.

    The storage is allocated once the number of training points n is known (:meth:`allocate`: at setup,
    or at the first sweep) and holds zeros until the sampler fills it with its starting values
    (:meth:`fill`) at the first sweep (:attr:`fresh` until then); a checkpoint restores it instead
    (:meth:`restore`, before Lightning loads the state). ``requires_grad``: whether the store takes part
    in a gradient-based stepper (HMC over the latents) or is written in place (Gibbs).
    """

    def __init__(self, sizes: Mapping[str, int], num_chains: int, dtype: torch.dtype, requires_grad: bool) -> None:
        super().__init__()
        self.sizes = dict(sizes)
        self.num_chains = num_chains
        self.latent_dtype = dtype
        self.requires_grad = requires_grad
        self.fresh = False  # allocated, starting values still to be filled in

    @property
    def allocated(self) -> bool:
        return bool(self.sizes) and next(iter(self.sizes)) in self._parameters

    @property
    def num_rows(self) -> int | None:
        """The number of training points the store holds (``None`` before :meth:`allocate`)."""
        return getattr(self, next(iter(self.sizes))).shape[1] if self.allocated else None

    def allocate(self, num_rows: int, device: torch.device | None = None) -> None:
        """Zero storage ``(C, num_rows, d_l)`` per name, to be filled at the first sweep."""
        for name, size in self.sizes.items():
            value = torch.zeros(self.num_chains, num_rows, size, dtype=self.latent_dtype, device=device)
            self.register_parameter(name, nn.Parameter(value, requires_grad=self.requires_grad))
        self.fresh = True

    def restore(self, state_dict: Mapping[str, Tensor], prefix: str, device: torch.device | None = None) -> None:
        """Get ready to load the latents saved under ``prefix`` in a checkpoint's ``state_dict``: storage of
        their shapes (allocated if needed, checked if already there), not to be filled again."""
        saved = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
        if not saved:
            return
        if not self.allocated:
            self.allocate(next(iter(saved.values())).shape[1], device)
        for name, value in self.as_dict().items():
            if name in saved and saved[name].shape != value.shape:
                raise ValueError(f"checkpoint holds latents {name} of shape {tuple(saved[name].shape)}, this "
                                 f"sampler has {tuple(value.shape)}: another training set, model or num_chains")
        self.fresh = False

    def as_dict(self) -> dict[str, Tensor]:
        """The live storage by name."""
        return {name: getattr(self, name) for name in self.sizes}

    def flat(self) -> Tensor:
        """Every latent of each chain as one ``(C, sum_l n d_l)`` tensor, in name order (detached)."""
        return flat_rows(v.detach() for v in self.as_dict().values())

    @torch.no_grad()
    def fill(self, values: Mapping[str, Tensor]) -> None:
        """Write the starting values (every name, ``(C, n, d_l)``) into the storage."""
        for name, value in self.as_dict().items():
            value.copy_(values[name])
        self.fresh = False


class InformedStart:
    """Where given chains start instead of their sampler's ``init``: given weights and latents, e.g. the
    teacher's (the informed chain of the teacher-student test, spec §4 step 4, §8 item 5).

    A component owned by the samplers of the intermediate-noise posterior and by the classical
    :class:`lit_bayes.samplers.hmc.HMC` / ``MALA`` (their ``informed`` attribute; the classical ones keep
    no latents: ``latent_names`` empty, :meth:`at_teacher` with ``latents=False``). Everything it needs
    is given to it: the number of chains, the shapes of the sampled parameters (the model's names), the
    latents the sampler keeps (``latent_names``; names in ``ignored_latents`` are accepted and dropped,
    e.g. probit scores a sampler integrates out) and their dtype. The sampler applies what was set to its
    initial state (:meth:`apply_parameters`) and to its first latents (:meth:`apply_latents`); either is
    applied once.
    """

    def __init__(self, num_chains: int, parameter_shapes: Mapping[str, torch.Size], latent_names: Sequence[str],
                 dtype: torch.dtype, ignored_latents: Sequence[str] = ()) -> None:
        self.num_chains = num_chains
        self.parameter_shapes = dict(parameter_shapes)
        self.latent_names = list(latent_names)
        self.ignored_latents = set(ignored_latents)
        self.dtype = dtype
        self._parameters: tuple[Tensor, dict[str, Tensor]] | None = None
        self._latents: tuple[Tensor, dict[str, Tensor]] | None = None

    def chain_index(self, chains: Sequence[int] | None) -> Tensor:
        """The chain indices of ``chains`` (default: every chain), checked."""
        if chains is None:
            return torch.arange(self.num_chains)
        index = list(chains)
        if not index or len(set(index)) != len(index) or any(
                isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < self.num_chains for c in index):
            raise ValueError(f"chains must list distinct chain indices in [0, {self.num_chains}), got {chains!r}")
        return torch.tensor(index)

    def set_parameters(self, parameters: Mapping[str, Tensor], chains: Sequence[int] | None = None) -> None:
        """Start ``chains`` (default all) at ``parameters``, the model's parameter names (``layers.{l}.weight``,
        ``layers.{l}.bias``) to tensors of their shapes."""
        shapes = self.parameter_shapes
        if sorted(parameters) != sorted(shapes):
            raise ValueError(f"parameters must hold exactly {sorted(shapes)}, got {sorted(parameters)}")
        for name, value in parameters.items():
            if value.shape != shapes[name]:
                raise ValueError(f"parameters[{name!r}] must have shape {tuple(shapes[name])}, got {tuple(value.shape)}")
        self._parameters = (self.chain_index(chains), {n: v.detach().clone() for n, v in parameters.items()})

    def set_latents(self, inputs: Tensor, targets: Tensor, latents: Mapping[str, Tensor],
                    chains: Sequence[int] | None = None) -> None:
        """Start ``chains`` (default all) from ``latents``: ``latent_names`` to ``(n, d)`` or ``(C, n, d)``
        tensors (C the number of chains given) whose rows follow the rows of the training set ``(inputs,
        targets)``; kept in canonical row order (:func:`canonical_order`)."""
        given = {name: value for name, value in latents.items() if name not in self.ignored_latents}
        if sorted(given) != sorted(self.latent_names):
            raise ValueError(f"latents must hold exactly {self.latent_names}, got {sorted(latents)}")
        index = self.chain_index(chains)
        order = canonical_order(inputs, targets)
        pending = {}
        for name, value in given.items():
            if value.dim() not in (2, 3) or value.shape[-2] != len(inputs) or (
                    value.dim() == 3 and value.shape[0] not in (1, len(index))):
                raise ValueError(f"latents[{name!r}] must have shape (n, d) or (C, n, d) with n = {len(inputs)} "
                                 f"and C = {len(index)} chains, got {tuple(value.shape)}")
            pending[name] = value[..., order, :].to(self.dtype)
        self._latents = (index, pending)

    @property
    def pending(self) -> bool:
        """Whether given parameters or latents are still to be applied."""
        return self._parameters is not None or self._latents is not None

    def at_teacher(self, datamodule: Any, student: nn.Module, chains: int, temperature: float = 1.0,
                   latents: bool = True) -> None:
        """Start the first ``chains`` chains at the teacher of a teacher-student DataModule (after its
        setup): its weights and biases and, with ``latents``, its training latents, with the noise actually
        used for the labels (spec §4 step 4, §8 item 5; ``latents=False`` for a sampler of the classical
        posterior, which has none). Checks that ``student`` is the teacher's network and warns when the
        teacher's joint is not the target (:func:`lit_bayes.data.teacher_student.check_student`)."""
        teacher, train_latents = teacher_of(datamodule, "informed_chains")
        check_student(teacher, student, temperature, getattr(datamodule, "noiseless_labels", False))
        self.set_parameters(dict(teacher.named_parameters()), range(chains))
        if latents:
            x, y = datamodule.train_data.tensors
            self.set_latents(x, y, train_latents, range(chains))

    def apply_parameters(self, state: dict[str, Tensor]) -> dict[str, Tensor]:
        """``state`` (stacked initial parameters ``net.*``) with the given chains' parameters replaced."""
        if self._parameters is not None:
            chains, values = self._parameters
            for name, value in values.items():
                state[f"net.{name}"][chains] = value.to(state[f"net.{name}"].dtype)
            self._parameters = None
        return state

    def apply_latents(self, latents: dict[str, Tensor]) -> dict[str, Tensor]:
        """``latents`` (every chain's) with the given chains' latents replaced."""
        if self._latents is not None:
            index, pending = self._latents
            for name, value in pending.items():
                latents[name][index] = value.to(latents[name].device).expand_as(latents[name][index])
            self._latents = None
        return latents


def check_informed_chains(informed_chains: int, num_chains: int) -> int:
    """``informed_chains`` checked: an integer in [0, num_chains]."""
    check_int("informed_chains", informed_chains, 0)
    if informed_chains > num_chains:
        raise ValueError(f"informed_chains ({informed_chains}) must be at most num_chains ({num_chains})")
    return informed_chains


def check_full_batch(sampler: str, batch: int, expected: int | None) -> None:
    """A clear error when a training batch of ``batch`` points is not the full set of ``expected``."""
    if expected is not None and batch != expected:
        raise ValueError(f"{sampler} is full batch: the training batch has {batch} points, the training set "
                         f"{expected}; use batch_size=None")


class NoisyGibbs(SamplerModule):
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
        informed_chains: the first ``informed_chains`` chains start at the teacher of the run's
            teacher-student DataModule (:class:`lit_bayes.data.TeacherStudent`, read at setup): its
            weights and biases and its training latents with the noise used for the labels, an exact
            posterior draw (spec §4 step 4, §8 item 5); the others follow ``init``. 0 (default): none.
            By hand, :meth:`set_initial_parameters` and :meth:`set_initial_latents` start given chains
            at given values.
        dtype: ``"float32"`` or ``"float64"`` for the weights and latents (the truncated
            Gaussians are always drawn in float64).
        temperature: T > 0 (finite): the target is the joint of eq. 4 raised to 1/T (1: the posterior).
            Every Gaussian factor's variance is multiplied by T (noise variances times T, prior
            precisions over T, :func:`lit_bayes.noisy_energy.tempered`), so every conditional keeps its
            mean and has its variance multiplied by T: the weights, biases and post-activations
            (eqs. 8-9, 52-55, App. G), the pieces of the pre-activation laws (eq. 10) and the truncated
            Gaussians of the probit scores (eqs. 50-51), whose truncation (the hard constraint
            y = argmax Z^(L+1)) no power changes.
        fused: a :class:`NoisyMLP` with relu units draws its pre-activations in C
            (:mod:`lit_bayes.steppers.relu_draw`: a round of proposals is one loop instead of ~15 torch passes, the
            rejected elements are proposed again, and the exact draw of the few left is C too; Exp. A's sweep ~0.67x
            as long, the MNIST MLP's ~0.83x) where there is a C compiler; the same law, other random numbers.
            ``False``: torch operations.
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
        informed_chains: int = 0,
        fused: bool = True,
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
        self.informed_chains = check_informed_chains(informed_chains, num_chains)
        self.fused = check_bool("fused", fused)
        self.latents = LatentChains(model.latent_sizes(), num_chains, DTYPES[dtype], requires_grad=False)
        self.informed = InformedStart(num_chains, {n: p.shape for n, p in model.named_parameters()},
                                      model.latent_names(), DTYPES[dtype])
        self.canonical_batch = CanonicalBatch(DTYPES[dtype])
        self.automatic_optimization = False

    # ------------------------------------------------------------------ state
    def initial_state(self, generator: torch.Generator) -> dict[str, Tensor]:
        state = super().initial_state(generator)
        dtype = DTYPES[self.dtype_name]
        state = {name: (torch.zeros_like(p) if self.start == "zeros" else p).to(dtype) for name, p in state.items()}
        return self.informed.apply_parameters(state)

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.informed_chains and self.chains is None:
            self.informed.at_teacher(getattr(self._trainer, "datamodule", None), self.model, self.informed_chains,
                                     self.posterior.temperature)
        super().setup(stage)

    def set_initial_parameters(self, parameters: Mapping[str, Tensor], chains: Sequence[int] | None = None) -> None:
        """Start the given chains (default all) at ``parameters`` instead of ``init``'s weights (the model's
        parameter names to tensors of their shapes, :meth:`InformedStart.set_parameters`). Call it before ``fit``."""
        if self.chains is not None:
            raise RuntimeError("set_initial_parameters must be called before fit: the chains already exist")
        self.informed.set_parameters(parameters, chains)

    def set_initial_latents(self, inputs: Tensor, targets: Tensor, latents: Mapping[str, Tensor],
                            chains: Sequence[int] | None = None) -> None:
        """Start the given chains (default all) from given latents (e.g. the teacher's, spec §8 item 5)
        instead of ``init``'s.

        ``latents`` map the model's ``latent_names()`` to ``(n, d_l)`` or ``(C, n, d_l)`` tensors (C the
        number of chains given) whose rows belong to the rows of the training set ``(inputs, targets)``,
        in that order (:meth:`InformedStart.set_latents`). Call it before ``fit``.
        """
        self.informed.set_latents(inputs, targets, latents, chains)

    def initial_latents(self, inputs: Tensor) -> dict[str, Tensor]:
        """Every chain's latents at the first sweep (see ``init``)."""
        if self.start == "zeros":
            latents = {name: inputs.new_zeros(self.num_chains, len(inputs), size)
                       for name, size in self.model.latent_sizes().items()}
        else:
            net, _ = self.split_parameters(self.chains.snapshot())
            latents, _ = self.model.generate(net, inputs, self.generator)
        return self.informed.apply_latents(latents)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self.latents.restore(checkpoint.get("state_dict", {}), "latents.", self.device)

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
        return NoisyGibbsStepper(target, weights, biases, self.make_generator(), self.fused)

    def sweep_inputs(self, batch: Any) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """The full training set in canonical order (inputs in the state's dtype) and the latents."""
        x, y = self.check_batch(batch)
        num_train = getattr(getattr(self._trainer, "datamodule", None), "num_train", None)
        check_full_batch(type(self).__name__, x.shape[0], self.latents.num_rows or num_train)
        inputs, targets = self.canonical_batch(x, y)
        if not self.latents.allocated:
            self.latents.allocate(len(inputs), inputs.device)
        if self.latents.fresh:
            self.latents.fill(self.initial_latents(inputs))
        return inputs, targets, self.latents.as_dict()

    def training_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets, latents = self.sweep_inputs(batch)
        self.optimizers().step(closure=lambda: (inputs, targets, latents))  # through Lightning: counts the step
