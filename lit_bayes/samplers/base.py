"""``SamplerModule``: the LightningModule every sampler family builds on.

It owns the sampled state (``num_chains`` parameter sets of the wrapped network and of
the likelihood, stacked along a leading chain dimension), the sampler's own random
generator, the energy of :mod:`lit_bayes.posterior`, and the burn-in/thinning rule the
sample-collecting callbacks follow. Subclasses implement ``configure_optimizers`` (the
stepper) and ``training_step`` (one transition of every chain).
"""
from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping
from typing import Any, Literal

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn
import numpy as np
import torch
from torch import Tensor, nn

from lit_bayes.chains import ChainState, stacked_call
from lit_bayes.cuda_probe import restore_nvml_probe, skip_nvml_probe_without_driver
from lit_bayes.linear_stack import StackedLinear
from lit_bayes.map_fit import MapFit, fit_map
from lit_bayes.models.mlp import MLP
from lit_bayes.posterior import GaussianPrior, Likelihood, Posterior, Prior
from lit_bayes.predictive import Predictive, marginal_predictive, posterior_samples, uniform_log_weights
from lit_bayes.prior_scales import LearnedScalePrior
from lit_bayes.strategy import release_process_group_at_exit
from lit_bayes.unchanged import DerivedFrom
from lit_bayes.validation import check_int, check_interval, check_optional_int

__all__ = ["SamplerModule", "module_draws"]

#: the starts of :class:`SamplerModule`'s ``init``
INITS = ("module", "prior", "template", "map")

# SamplerModule overrides Lightning's transfer hook on purpose (its full-batch cache); Lightning's note that a
# DataModule passed to fit therefore has its hook unused (the library's have none) is no news to a user
warnings.filterwarnings("ignore", r"You have overridden `transfer_batch_to_device` in `LightningModule` but have "
                                  r"passed in a `LightningDataModule`")

_GENERATORS_KEY = "lit_bayes_generators"
_LEGACY_GENERATOR_KEYS = {"stepper": "lit_bayes_generator_state", "structure": "lit_bayes_structure_generator_state"}


def check_burn_in(value: object) -> int | float:
    """A burn-in is an integer number of steps >= 0 or a fraction of the run in (0, 1)."""
    if isinstance(value, float):
        return check_interval("burn_in", value, 0.0, 1.0)
    return check_int("burn_in", value, 0)


def sampling_steps(total_steps: int, burn_in: int | float, thinning: int, num_draws: int | None) -> tuple[int, int]:
    """``(burn_in, thinning)`` in steps for a run of ``total_steps`` steps: a fractional
    ``burn_in`` becomes that share of the steps (rounded down); with ``num_draws`` the
    thinning is the largest interval that fits ``num_draws`` kept states after the burn-in,
    and the burn-in grows so that the last kept state is the final step."""
    steps = int(burn_in * total_steps) if isinstance(burn_in, float) else int(burn_in)
    if num_draws is None:
        return steps, thinning
    after = total_steps - steps
    if after <= num_draws:  # fewer steps than draws: keep every step after the burn-in
        return steps, 1
    thinning = after // num_draws
    return total_steps - (num_draws - 1) * thinning - 1, thinning  # draws at burn_in + 1, ..., total_steps


def rank_seed(seed: int, rank: int, stream: int) -> int:
    """A 63-bit seed for (root seed, process rank, stream) so no two processes or uses share one."""
    return int(np.random.SeedSequence([seed, rank, stream]).generate_state(1, np.uint64)[0] >> 1)


def _one_training_point(datamodule: Any) -> tuple[Tensor, Tensor | None] | None:
    """``(x, y)`` of the first training point as a batch of one, from ``datamodule.train_data``;
    else ``(zeros of input_shape, None)``; ``None`` when the DataModule exposes neither."""
    data = getattr(datamodule, "train_data", None)
    if data is not None and len(data) > 0:
        x, y = data[0][:2]
        return x.unsqueeze(0), torch.as_tensor(y).reshape(1)
    shape = getattr(datamodule, "input_shape", None)
    return None if shape is None else (torch.zeros(1, *shape), None)


def _expected_input(model: nn.Module) -> str:
    """What the first layer of ``model`` takes, for error messages."""
    for owner in (model, getattr(model, "net", None)):
        if getattr(owner, "widths", None) is not None:
            return f"input width widths[0]={owner.widths[0]}"
        if getattr(owner, "input_shape", None) is not None:
            return f"input_shape {tuple(owner.input_shape)}"
    for name, module in model.named_modules():
        for attr in ("in_features", "in_channels"):
            if isinstance(getattr(module, attr, None), int):
                return f"{attr}={getattr(module, attr)} in its first layer {name}"
    return "another input shape"


def module_draws(model: nn.Module, num: int, generator: torch.Generator) -> dict[str, Tensor]:
    """``num`` re-initialisations of ``model``'s parameters by its layers' own ``reset_parameters``, stacked
    ``(num, ...)`` by the model's parameter names; each from torch's global generator seeded by one draw of
    ``generator`` inside a forked RNG state (the caller's is untouched). The model is not changed."""
    draws = []
    for _ in range(num):
        net = copy.deepcopy(model)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
            for module in net.modules():
                if hasattr(module, "reset_parameters"):
                    module.reset_parameters()
        draws.append(dict(net.named_parameters()))
    return {n: torch.stack([d[n].detach() for d in draws]) for n in draws[0]}


def restore_generator(gen: torch.Generator, state: Tensor, stream: str) -> None:
    """Set ``gen`` to a checkpointed ``state``. A state from another kind of generator (a CUDA
    run resumed on the CPU, or the reverse) cannot be set: the stream then goes on from a seed
    drawn from the saved state, so it neither replays the run's first draws nor repeats the
    uninterrupted run, and a warning says so."""
    expected = gen.get_state().numel()
    if state.numel() == expected:
        gen.set_state(state)
        return
    seed = int(np.random.default_rng(state.to(torch.uint8).cpu().numpy()).integers(2**62))
    gen.manual_seed(seed)
    rank_zero_warn(
        f"the checkpoint's {stream!r} random stream was saved by a generator of another device type "
        f"({state.numel()} state bytes, this {gen.device.type} generator has {expected}): "
        "the chains continue from their saved state with a new stream seeded from the saved one, so this "
        "run will not repeat the uninterrupted run bit for bit. Resume on the device type that wrote the "
        "checkpoint to continue it exactly."
    )


class SamplerModule(L.LightningModule):
    """Base class of the sampler modules.

    ``predict_with_current_state`` (class attribute): predictions use the current state
    rather than the kept samples, for samplers whose kept states are only meaningful with
    the deterministic parameters they were drawn under (Feynman-Kac samplers).
    ``independent_chains`` (class attribute): whether the chains are independent Markov
    chains, so that R-hat and ESS across them mean something (not for resampled particles).
    ``keeps_draws`` (class attribute): whether the states after burn-in are posterior draws
    that a sample-keeping callback collects and predictions average over (False for MAP,
    whose predictions use the current parameters).
    ``updates_prior_scales`` (class attribute): see :meth:`update_prior_scales`.

    Args:
        model: any ``nn.Module`` mapping inputs to likelihood outputs (logits, means).
        likelihood: the per-point likelihood (:mod:`lit_bayes.posterior`).
        prior: prior over all sampled parameters; default ``GaussianPrior(1.0)``.
        num_data: N for minibatch scaling; ``None`` reads ``num_train`` from the DataModule.
        temperature: T of the tempered posterior exp(-U/T); 1 is the Bayesian posterior.
        minibatch_scaling: ``"rescaled"`` (N/B times the batch sum) or ``"sum"``.
        num_chains: chains advanced together in one batched call.
        burn_in: steps before the first kept sample: an integer number of steps, or a fraction
            in (0, 1) of the steps this fit will run (0.5: the first half), which follows
            ``max_epochs`` / ``max_steps`` overrides and the batches per process under DDP.
        thinning: keep one state every ``thinning`` steps after burn-in.
        num_draws: instead of ``thinning``: keep this many evenly spaced states per chain,
            the last one at the final step (thinning and burn-in are set from the run's length
            when fit starts; fewer when fewer steps follow the burn-in).
        seed: root seed of the sampler's generators (combined with the process rank).
        init: ``"module"`` (each chain re-initialised by the modules' ``reset_parameters``),
            ``"prior"`` (a prior draw), ``"template"`` (every chain starts at ``model``'s
            current parameters, e.g. a MAP estimate) or ``"map"`` (each chain starts at its own MAP
            fit of this posterior, begun at its own prior draw: :mod:`lit_bayes.map_fit`; run on the
            training data when fit starts, before the first step, and not again on a resume).
        init_options: with ``init="map"``: the fit's ``steps`` (1000), ``lr`` (0.01) and ``batch_size``
            (1024; ``None``: full batch) (:class:`lit_bayes.map_fit.MapFit`).
        vectorize: evaluate chains with ``torch.func.vmap`` (default) or a reference loop.
    """

    predict_with_current_state = False
    independent_chains = True
    keeps_draws = True
    #: whether every transition also draws the precisions of a :class:`~lit_bayes.prior_scales.LearnedScalePrior`
    #: (:meth:`update_prior_scales`); samplers without it refuse that prior
    updates_prior_scales = False
    #: the random streams, each seeded apart from the others (:meth:`stream_generator`): the
    #: chains' initial states, the stepper's moves, initial latents, structure masks/buffer draws,
    #: the fixed draws of a fitted distribution's predictions (:meth:`fixed_standard_normals`), the
    #: minibatches of ``init="map"``'s fits, the Gibbs draws of learned prior scales
    #: (:meth:`update_prior_scales`), the baselines' starts and minibatches (``MAPBaseline``)
    STREAMS = {"init": 0, "stepper": 1, "latents": 2, "structure": 3, "predictive": 4, "map_init": 5,
               "prior_scales": 6, "baselines": 7}

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: Prior | None = None,
        num_data: int | None = None,
        temperature: float = 1.0,
        minibatch_scaling: Literal["rescaled", "sum"] = "rescaled",
        num_chains: int = 1,
        burn_in: int | float = 0,
        thinning: int = 1,
        seed: int = 0,
        init: Literal["module", "prior", "template", "map"] = "module",
        vectorize: bool = True,
        num_draws: int | None = None,
        init_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be an nn.Module, got {type(model).__name__}")
        if not isinstance(likelihood, Likelihood):
            raise ValueError(f"likelihood must be a lit_bayes.posterior.Likelihood, got {type(likelihood).__name__}")
        for name, value, low in (("num_chains", num_chains, 1), ("thinning", thinning, 1)):
            check_int(name, value, low)
        check_burn_in(burn_in)
        check_optional_int("num_draws", num_draws, 1)
        if num_draws is not None and thinning != 1:
            raise ValueError(f"give thinning or num_draws, not both (got thinning={thinning}, num_draws={num_draws})")
        if init not in INITS:
            raise ValueError(f"init must be one of {', '.join(map(repr, INITS))}, got {init!r}")
        if init_options is not None and init != "map":
            raise ValueError(f"init_options are the options of init='map', got init={init!r}")
        self.map_init = MapFit.of(init_options)
        self.save_hyperparameters(ignore=["model", "likelihood", "prior"])
        # model and likelihood are templates evaluated with each chain's parameters
        # (functional_call); their own parameters are never trained
        self.model = model.requires_grad_(False)
        self.likelihood = likelihood.requires_grad_(False)
        self.prior = prior if prior is not None else GaussianPrior(1.0)
        self.posterior = Posterior(likelihood, self.prior, num_data, temperature, minibatch_scaling)
        if isinstance(self.prior, LearnedScalePrior) and not self.updates_prior_scales:
            raise ValueError(f"{type(self).__name__} does not sample learned prior scales (LearnedScalePrior): use "
                             "SGMCMC or StructuredSGMCMC, or a fixed prior (GaussianPrior, fan_in_scaled=True)")
        if self.prior.binds_shapes:
            self.prior.bind({n: tuple(p.shape) for n, p in self.template_parameters().items()}, num_chains)
        self.num_chains = num_chains
        self.burn_in_setting = burn_in
        self.num_draws = num_draws
        # burn_in and thinning in steps; fixed by resolve_sampling() once the run's length is known
        self.burn_in: int = burn_in if isinstance(burn_in, int) else 0
        self.thinning = thinning
        self._sampling_resolved = False
        self._total_steps = 2**62  # this fit's steps (per process), known once fit starts
        self.seed = seed
        self.init = init
        self.vectorize = vectorize
        # the batched-product path for a plain linear stack; a model with its own stacked_forward needs none
        self._stacked_linear = None if hasattr(self.model, "stacked_forward") else StackedLinear.of(self.model)
        self.chains: ChainState | None = None
        self.generators: dict[str, torch.Generator] = {}  # the checkpointed streams (make_generator)
        self._pending_generator_states: dict[str, Tensor] = {}
        self.predict_chunk_size: int | None = None  # samples per chunk in predict_step (None: sized to the batch)
        self._predict_samples: tuple[dict[str, Tensor], Tensor] | None = None
        self._fixed_normals: tuple[tuple | None, dict[str, Tensor]] = (None, {})  # (key, draws)
        self._nvml_probe_skipped = False  # setup() switched torch's NVML probe off, teardown() on
        # a training batch that comes back unmodified (a full batch): its device copy, and its checks passed
        self._device_batch: DerivedFrom[tuple[Tensor, ...]] = DerivedFrom()
        self._checked_batch: DerivedFrom[bool] = DerivedFrom()
        self._started_at_map = False  # init="map": the chains were moved to their MAP fits (once per module)

    # ------------------------------------------------------------------ state
    def template_parameters(self) -> dict[str, Tensor]:
        """The sampled parameters of one chain, named ``net.*`` and ``likelihood.*``; a model
        may hold some fixed by listing them in ``fixed_parameter_names`` (its own names)."""
        fixed = set(getattr(self.model, "fixed_parameter_names", ()))
        named = {f"net.{n}": p for n, p in self.model.named_parameters() if n not in fixed}
        named.update({f"likelihood.{n}": p for n, p in self.likelihood.named_parameters()})
        if not named:
            raise ValueError("model and likelihood have no parameters to sample")
        return named

    def check_template_names(self) -> None:
        """Raise ``ValueError`` if a sampler that keeps the generic :meth:`outputs` names a sampled parameter other
        than ``net.<the model's own name>`` or ``likelihood.<the likelihood's>``: ``functional_call`` would ignore
        it and silently use the model's own value (a partial BNN's phi named relative to its wrapped network is
        the known case; :class:`~lit_bayes.samplers.partial_bnn_sampler.PartialBNNSampler` evaluates those)."""
        if type(self).outputs is not SamplerModule.outputs:
            return
        known = {f"net.{n}" for n, _ in self.model.named_parameters()}
        known |= {f"likelihood.{n}" for n, _ in self.likelihood.named_parameters()}
        unknown = sorted(set(self.template_parameters()) - known)
        if unknown:
            raise ValueError(
                f"{type(self).__name__}.template_parameters() names {unknown}, which are no parameters of the model "
                "('net.' + its named_parameters()) or of the likelihood ('likelihood.' + its own): the generic "
                "outputs would ignore them and use the model's own values; name them as the model does, or "
                "override outputs (for a PartialBNN's phi: subclass PartialBNNSampler)"
            )

    def initial_state(self, generator: torch.Generator, num: int | None = None) -> dict[str, Tensor]:
        """Stacked initial parameters of every chain (or of ``num`` parameter sets), following ``init``."""
        num = self.num_chains if num is None else num
        state = {n: p.detach().unsqueeze(0).repeat(num, *([1] * p.dim()))
                 for n, p in self.template_parameters().items()}
        if self.init == "template":
            return state
        if self.init in ("prior", "map"):  # "map": the fit's starting points (start_chains_at_map)
            return self.prior.sample(state, generator)
        draws = module_draws(self.model, num, generator)  # "module"
        state.update({f"net.{n}": p for n, p in draws.items() if f"net.{n}" in state})
        return state

    def setup(self, stage: str) -> None:
        # process-wide settings for the run, made here rather than when lit_bayes is imported
        self._nvml_probe_skipped = skip_nvml_probe_without_driver() or self._nvml_probe_skipped
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            release_process_group_at_exit()
        if self.posterior.num_data is None and self.posterior.minibatch_scaling == "rescaled":
            datamodule = getattr(self.trainer, "datamodule", None)
            num_train = getattr(datamodule, "num_train", None)
            if num_train is not None:
                self.posterior.num_data = int(num_train)
        if self.chains is None:
            self.check_template_names()
            self.chains = ChainState(self.initial_state(self.stream_generator("init", torch.device("cpu"))))
        if stage == "fit":
            self.check_model_fits_data()

    def teardown(self, stage: str) -> None:
        self._device_batch, self._checked_batch = DerivedFrom(), DerivedFrom()  # frees the device copy
        if self._nvml_probe_skipped:
            restore_nvml_probe()
            self._nvml_probe_skipped = False

    def resolve_sampling(self) -> tuple[int, int]:
        """Fix ``burn_in`` and ``thinning`` in steps for this fit (:func:`sampling_steps` of the
        Trainer's step count) and warn when no state, or fewer than ``num_draws``, will be kept. Called when fit starts, or
        earlier by a sampler whose stepper needs the burn-in (call it from
        ``configure_optimizers`` or later: building the training loader before the checkpoint's
        DataModule state is restored would lose a resumed epoch's position)."""
        if not self._sampling_resolved and self._trainer is None:  # a stepper built by hand, outside a fit
            if isinstance(self.burn_in_setting, float) or self.num_draws is not None:
                raise ValueError(f"burn_in={self.burn_in_setting!r} / num_draws={self.num_draws!r} follow the run's "
                                 "length: attach the sampler to a Trainer (fit) first, or give burn_in in steps")
            return self.burn_in, self.thinning
        if not self._sampling_resolved:
            total = self.trainer.estimated_stepping_batches
            if not math.isfinite(total) and (isinstance(self.burn_in_setting, float) or self.num_draws is not None):
                raise ValueError(
                    f"burn_in={self.burn_in_setting!r} / num_draws={self.num_draws!r} need a run of known length: "
                    "set the Trainer's max_epochs or max_steps"
                )
            total = int(total) if math.isfinite(total) else 2**62
            self._total_steps = total
            self.burn_in, self.thinning = sampling_steps(total, self.burn_in_setting, self.thinning, self.num_draws)
            self._sampling_resolved = True
            after = total - self.burn_in  # the burn-in as set whenever fewer steps than num_draws follow it
            if self.num_draws is not None and 0 < after < self.num_draws:
                rank_zero_warn(
                    f"num_draws={self.num_draws} asks for more draws per chain than the {after} steps after the "
                    f"burn-in: every one of them is kept, {after} draws. Run longer (max_epochs / max_steps) or "
                    "lower num_draws or burn_in."
                )
            if self.burn_in >= total:
                rank_zero_warn(
                    f"burn_in={self.burn_in} is not below the {total} steps this run takes (per process): no "
                    "posterior draw will be kept. Lower burn_in (e.g. burn_in: 0.5, half the run) or run longer "
                    "(max_epochs / max_steps)."
                )
        return self.burn_in, self.thinning

    @property
    def planned_steps(self) -> int | None:
        """The steps this fit was set to take (per process), once fit has started; None when unknown (a run
        with neither ``max_epochs`` nor ``max_steps``, or before fit)."""
        return self._total_steps if self._sampling_resolved and self._total_steps < 2**62 else None

    def on_fit_start(self) -> None:
        self.resolve_sampling()
        if self.init == "map" and not self._started_at_map and self.trainer.ckpt_path is None:
            self.start_chains_at_map()
        note = self.batch_target_note()
        if note is not None:
            rank_zero_warn(note)

    def start_chains_at_map(self) -> None:
        """``init="map"``: move every chain, in place, from its prior draw to the MAP fit begun there
        (:func:`lit_bayes.map_fit.fit_map` on the DataModule's ``train_data``, on the module's device), before
        the first step. The stepper's references to the chain parameters stay valid."""
        data = getattr(getattr(self.trainer, "datamodule", None), "train_data", None)
        if data is None:
            raise ValueError("init='map' needs a DataModule with train_data (every lit_bayes DataModule has it)")
        x, y = (t.to(self.device) for t in data.tensors[:2])
        states = self.chain_states()
        starts = {name: torch.cat([state.as_dict()[name] for state in states]) for name in states[0].names}
        fitted = fit_map(self, starts, x, y, self.map_init,
                         generator=self.stream_generator("map_init", torch.device("cpu")))
        with torch.no_grad():
            first = 0
            for state in states:
                rows = slice(first, first + state.num_chains)
                for name, p in state.as_dict().items():
                    p.copy_(fitted[name][rows])
                first = rows.stop
        self._started_at_map = True

    def chain_states(self) -> list[ChainState]:
        """Every stacked state the sampler moves: :attr:`chains`, and a replica ladder's hotter states
        (:class:`~lit_bayes.samplers.replica_exchange.ReplicaExchangeSGMCMC`)."""
        return [self.chains]

    def update_prior_scales(self) -> None:
        """After the chains moved: the Gibbs draw of a :class:`~lit_bayes.prior_scales.LearnedScalePrior`'s
        precisions given every chain's new parameters (Neal 1996), from the checkpointed ``"prior_scales"``
        stream; nothing for a fixed prior. Samplers that set :attr:`updates_prior_scales` call it once per
        transition."""
        if not isinstance(self.prior, LearnedScalePrior):
            return
        generator = self.generators.get("prior_scales") or self.make_generator("prior_scales")
        self.prior.gibbs_update(self.chains.as_dict(), generator, self.posterior.temperature)

    def state_metrics(self) -> dict[str, Tensor]:
        """Values of the sampler's own state for the training logs (:meth:`log_train`): a learned prior's scales
        (:meth:`prior_scale_metrics`); subclasses add theirs."""
        return self.prior_scale_metrics()

    def prior_scale_metrics(self) -> dict[str, Tensor]:
        """``prior/variance/<group>``: each learned prior scale's variance 1 / lambda, the mean over chains
        (empty for a fixed prior), for the training logs."""
        if not isinstance(self.prior, LearnedScalePrior):
            return {}
        variances = (1.0 / self.prior.precisions).mean(0)
        if self.prior.per_element:  # one mean over each parameter's weights
            return {f"prior/variance/{name}": variances[columns].mean() for name, columns in self.prior.columns.items()}
        return {f"prior/variance/{group}": variances[g] for g, group in enumerate(self.prior.group_names)}

    def health_notes(self) -> list[str]:
        """What the sampler says of its run for the health report's notes: :meth:`batch_target_note`; subclasses
        add theirs."""
        note = self.batch_target_note()
        return [] if note is None else [note]

    def batch_target_note(self) -> str | None:
        """What the chains target under ``minibatch_scaling="sum"`` on training batches smaller than the
        training set (the DataModule's ``batch_size`` below its ``num_train``): the posterior of one batch's
        worth of data, which changes with the batch size. ``None`` otherwise, or when the DataModule does
        not give both sizes. Warned at fit start and kept in the run's health notes."""
        if self.posterior.minibatch_scaling != "sum" or self._trainer is None:
            return None
        datamodule = getattr(self.trainer, "datamodule", None)
        batch, num_train = getattr(datamodule, "batch_size", None), getattr(datamodule, "num_train", None)
        if batch is None or num_train is None or batch >= num_train:
            return None
        return (f"minibatch_scaling='sum' on batches of {batch} of the {num_train} training points: each step's "
                f"energy weighs one batch's likelihood unscaled, so the chains target a posterior about as wide as "
                f"one given {batch} points (the FNBG paper's minibatch sampler), not the posterior of all "
                f"{num_train}, and the target changes with the batch size; for that posterior use "
                "minibatch_scaling='rescaled' (N/B times the batch sum) or full batches")

    @property
    def stream_rank(self) -> int:
        """The rank that seeds this process's random streams: its own global rank, so
        processes run independent chains (samplers that keep one state replicated on every
        process return 0)."""
        return self.global_rank

    def stream_generator(self, stream: str, device: torch.device | None = None) -> torch.Generator:
        """A fresh generator for one named stream of :attr:`STREAMS`, seeded from ``seed``, the
        process's :attr:`stream_rank` and the stream, on ``device`` (default: the module's)."""
        if stream not in self.STREAMS:
            raise ValueError(f"unknown random stream {stream!r}; the streams are {sorted(self.STREAMS)}")
        device = self.device if device is None else device
        return torch.Generator(device=device).manual_seed(rank_seed(self.seed, self.stream_rank, self.STREAMS[stream]))

    def fixed_standard_normals(self, shapes: Mapping[str, tuple[int, ...]], like: Tensor) -> dict[str, Tensor]:
        """Standard-normal draws of the given ``shapes`` (by name) from the ``"predictive"`` stream, the same on
        every call, in ``like``'s dtype and on its device. They are drawn once on the CPU, so they do not depend
        on the device. A sampler that predicts with draws of a fitted distribution (VB's q, SWAG's Gaussian)
        uses them, so the same distribution always gives the same predictive and a validation metric compares
        distributions, not noise."""
        key = (like.device, like.dtype, tuple(shapes.items()))
        if self._fixed_normals[0] != key:
            gen = self.stream_generator("predictive", torch.device("cpu"))
            self._fixed_normals = (key, {name: torch.randn(shape, generator=gen, dtype=like.dtype).to(like.device)
                                         for name, shape in shapes.items()})
        return self._fixed_normals[1]

    def make_generator(self, stream: str = "stepper") -> torch.Generator:
        """The checkpointed generator of ``stream`` (:meth:`stream_generator`), restored from a
        checkpoint if one was loaded; kept in :attr:`generators` and saved with every checkpoint."""
        gen = self.stream_generator(stream)
        pending = self._pending_generator_states.pop(stream, None)
        if pending is not None:
            restore_generator(gen, pending, stream)
        self.generators[stream] = gen
        return gen

    @property
    def generator(self) -> torch.Generator | None:
        """The stepper's generator (``make_generator()``), ``None`` before the stepper is built."""
        return self.generators.get("stepper")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["lit_bayes_sampler"] = type(self).__name__
        if self.generators:
            checkpoint[_GENERATORS_KEY] = {name: gen.get_state() for name, gen in self.generators.items()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get("lit_bayes_sampler")
        if saved is not None and saved != type(self).__name__:
            raise ValueError(f"checkpoint was written by sampler {saved}, cannot load it into {type(self).__name__}")
        state = checkpoint.get("state_dict", {})
        prefix = "chains."
        stacked = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        if self.chains is None and stacked:
            names = self.template_parameters()
            by_key = {n.replace(".", "__"): n for n in names}
            missing = sorted(set(by_key) ^ set(stacked))
            if missing:
                raise ValueError(f"checkpoint parameters do not match this model: differing names {missing[:5]}")
            self.chains = ChainState({by_key[k]: v for k, v in stacked.items()})
        if self.chains is not None:
            for name, p in self.chains.as_dict().items():
                saved_p = stacked.get(name.replace(".", "__"))
                if saved_p is not None and saved_p.shape != p.shape:
                    raise ValueError(
                        f"checkpoint holds {name} with shape {tuple(saved_p.shape)} (chains first), "
                        f"this sampler has {tuple(p.shape)}: another model shape or num_chains"
                    )
        saved_generators = checkpoint.get(_GENERATORS_KEY)
        if saved_generators is None:  # written before the named streams: one key per generator
            saved_generators = {name: checkpoint[key] for name, key in _LEGACY_GENERATOR_KEYS.items() if key in checkpoint}
        self._pending_generator_states = dict(saved_generators)

    # ---------------------------------------------------------------- energy
    def split_parameters(self, params: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """Separate stacked parameters into the network's and the likelihood's (prefixes removed)."""
        net = {n[4:]: p for n, p in params.items() if n.startswith("net.")}
        lik = {n[11:]: p for n, p in params.items() if n.startswith("likelihood.")}
        return net, lik

    def outputs(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """Network outputs for every stacked parameter set: ``(S, B, ...)``. A model with
        its own ``stacked_forward(params, x)`` (e.g. :class:`lit_bayes.models.MLP`) uses it
        when ``vectorize`` is on, as does a plain ``nn.Linear`` or ``nn.Sequential`` of linear layers and
        elementwise activations (:class:`lit_bayes.linear_stack.StackedLinear`); otherwise ``vmap`` (or, off,
        a loop) of ``functional_call``."""
        net, _ = self.split_parameters(params)
        if self.vectorize and hasattr(self.model, "stacked_forward"):
            return self.model.stacked_forward(net, x)
        if self.vectorize and self._stacked_linear is not None and self._stacked_linear.accepts(x):
            return self._stacked_linear(net, x)
        return stacked_call(self.model, net, x, vectorize=self.vectorize)

    def outputs_stack(self) -> StackedLinear | None:
        """The :class:`~lit_bayes.linear_stack.StackedLinear` that :meth:`outputs` evaluates (a
        :class:`lit_bayes.models.MLP`'s, or a plain linear stack's), or None where it evaluates anything else
        (``vmap``, a model's or a subclass's own outputs): for fused evaluations of the same network
        (:class:`lit_bayes.predictive_kernel.FusedPredictive`)."""
        if not self.vectorize or type(self).outputs is not SamplerModule.outputs:
            return None
        if hasattr(self.model, "stacked_forward"):
            return self.model.stacked if type(self.model).stacked_forward is MLP.stacked_forward else None
        return self._stacked_linear

    def log_likelihood(self, params: dict[str, Tensor], output: Tensor, y: Tensor) -> Tensor:
        """Per-point log-likelihoods ``(S, B)`` of outputs ``(S, B, ...)``."""
        _, lik = self.split_parameters(params)
        if not lik:  # nothing to substitute: a plain call, without functional_call's overhead
            return self.likelihood(output, y)
        return torch.func.functional_call(self.likelihood, lik, (output, y))

    def energy(self, params: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        """Tempered minibatch energy of every stacked parameter set, shape ``(S,)``."""
        log_lik = self.log_likelihood(params, self.outputs(params, x), y)
        return self.posterior.energy(log_lik, self.prior(params))

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Lightning's hook. A training batch of tensors that comes back as the same tensors, unmodified
        (a full batch: the library's DataModules hand it over so every epoch), goes to an accelerator once
        and later steps take that copy: full-batch MNIST is ~190 MB, and a MALA step on an H100 took 42 ms
        with the copy, 10.7 ms without (each beside another job). Its device tensors, the same every step,
        also let the samplers that recognise an unchanged batch (:meth:`check_batch`, NoisyGibbs' canonical
        order) skip their work. Any other batch (the cache takes a tuple or list of tensors only), and every
        batch outside training, moves as Lightning moves it."""
        if (device.type == "cpu" or self._trainer is None or not self.trainer.training
                or type(batch) not in (tuple, list) or not all(isinstance(t, Tensor) for t in batch)):
            return super().transfer_batch_to_device(batch, device, dataloader_idx)
        moved = self._device_batch(tuple(batch), lambda *tensors: tuple(t.to(device) for t in tensors))
        return type(batch)(moved)

    def check_batch(self, batch: Any) -> tuple[Tensor, Tensor]:
        """Unpack ``(x, y)`` and validate it against the likelihood (every batch: a bad
        value is reported as bad data, not later as a diverging chain; a batch that comes back
        unmodified is checked once)."""
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise ValueError("batch must be a pair (inputs, targets)")
        x, y = batch
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"batch inputs have {x.shape[0]} rows but targets have {y.shape[0]}")
        self._checked_batch((x, y), self._check_values)
        return x, y

    def _check_values(self, x: Tensor, y: Tensor) -> bool:
        # a finite sum proves every value finite in one pass (isfinite().all() takes four); only a
        # NaN, an infinity or an overflowing sum needs the elementwise check
        if torch.is_floating_point(x) and not torch.isfinite(x.sum()) and not torch.isfinite(x).all():
            raise ValueError("batch inputs contain NaN or infinite values")
        self.likelihood.check_target(y, "batch targets")
        return True

    def check_model_fits_data(self) -> None:
        """At setup for fit, before any step, evaluate one chain on one training point of the DataModule (its
        ``train_data[0]``, else zeros of its ``input_shape``; nothing without either) and the
        likelihood on that output, so a network whose input or output width does not fit the data,
        or fewer likelihood classes than the data's ``num_classes``, is a ``ValueError`` naming both
        instead of a shape error inside a step."""
        datamodule = getattr(self._trainer, "datamodule", None)
        point = _one_training_point(datamodule)
        if point is None or self.chains is None:
            return
        one_chain = {name: p[:1] for name, p in self.chains.as_dict().items()}
        # the chain's dtype is the Trainer's precision (64-true: float64); its device, not self.device: in setup
        # Lightning already reports the accelerator's device while the module is still on the CPU
        first = next(iter(one_chain.values()))
        device, dtype = first.device, first.dtype
        x = point[0].to(device, dtype if point[0].is_floating_point() else None)
        y = None if point[1] is None else point[1].to(device, dtype if point[1].is_floating_point() else None)
        model, likelihood = type(self.model).__name__, type(self.likelihood).__name__
        data = f"{type(datamodule).__name__} gives inputs of shape {tuple(x.shape[1:])}"
        with torch.no_grad():
            try:
                output = self.outputs(one_chain, x)
            except RuntimeError as err:
                raise ValueError(f"model {model} does not fit the data: {data}, the model expects "
                                 f"{_expected_input(self.model)} (one training point failed with: {err})") from err
            if y is not None:
                try:
                    self.log_likelihood(one_chain, output, y)
                except (RuntimeError, ValueError) as err:
                    raise ValueError(f"model {model} gives outputs of shape {tuple(output.shape[2:])} per point, "
                                     f"which do not fit the likelihood {likelihood}: {err}") from err
        classes, modelled = getattr(datamodule, "num_classes", None), getattr(self.likelihood, "num_classes", None)
        if isinstance(classes, int) and isinstance(modelled, int) and modelled < classes:
            raise ValueError(f"likelihood {likelihood} models {modelled} classes but {type(datamodule).__name__} "
                             f"has num_classes={classes}")

    def log_train(self, values: dict[str, Any], prog_bar: tuple[str, ...] = ()) -> None:
        """``self.log`` the per-step training ``values``, on the steps whose logs the Trainer writes
        (every ``log_every_n_steps``) and the last steps of the run only: Lightning's bookkeeping of
        one ``log`` call costs about as much as a step of a small network, and values logged in
        between are never written. The last steps give ``summary.json`` the final values. The
        names in ``prog_bar`` are also shown in the progress bar. The sampler's :meth:`state_metrics` are
        added then, and computed on those steps only."""
        trainer = self._trainer
        final = self.global_step >= self._total_steps - 1
        if trainer is not None and not final and not trainer._logger_connector.should_update_logs:
            return
        for name, value in {**values, **self.state_metrics()}.items():
            self.log(name, value, prog_bar=name in prog_bar, on_step=True, on_epoch=False)

    def check_energy(self, energy: Tensor) -> None:
        """Raise a clear error when an SG step produced a NaN or infinite energy."""
        if not torch.isfinite(energy).all():
            bad = (~torch.isfinite(energy)).nonzero().flatten().tolist()
            raise FloatingPointError(
                f"energy is NaN or infinite at step {self.global_step} for chains {bad}: the step size is likely "
                "too large for this posterior (or the temperature too small); lower it or use a decaying schedule"
            )

    # --------------------------------------------------------- many processes
    def gather_across_processes(self, tensor: Tensor) -> Tensor:
        """Concatenate the leading (chain or sample) dimension of ``tensor`` over all
        processes, rank by rank; the tensor itself with one process. Collective: every
        process must call it."""
        trainer = self._trainer
        if trainer is None or trainer.world_size == 1:
            return tensor
        return self.all_gather(tensor).flatten(0, 1)

    # --------------------------------------------------------------- samples
    def is_sample_step(self) -> bool:
        """Whether the state after the step just taken is a kept posterior sample."""
        return self.keeps_state(self.global_step)

    def keeps_state(self, steps: int) -> bool:
        """Whether the state after ``steps`` steps is a kept posterior sample (after the burn-in, thinned)."""
        return steps > self.burn_in and (steps - self.burn_in - 1) % self.thinning == 0

    def current_samples(self) -> tuple[dict[str, Tensor], Tensor]:
        """Detached copies of every chain's current parameters ``(num_chains, ...)`` and
        their normalised log-weights (uniform over chains)."""
        return self.chains.snapshot(), uniform_log_weights(self.num_chains, self.device)

    def on_predict_epoch_start(self) -> None:
        self._predict_samples = posterior_samples(self._trainer, self)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Predictive:
        """The posterior predictive of the batch's inputs over the kept samples."""
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        samples, log_weights = self._predict_samples
        return marginal_predictive(self, samples, log_weights, x, chunk_size=self.predict_chunk_size)

    def on_predict_epoch_end(self) -> None:
        self._predict_samples = None

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, *args, **kwargs):
        """Lightning's loader: the chains' last states, rebuilt from the checkpoint's
        hyperparameters plus ``model=`` and ``likelihood=`` (and ``prior=``), which are not among
        them. The kept draws are not part of the module: to reload a finished run with its
        draws and predict from them, use :func:`lit_bayes.load_run`."""
        if "model" not in kwargs or "likelihood" not in kwargs:
            raise ValueError(
                f"{cls.__name__}.load_from_checkpoint needs model= and likelihood= (and prior=): the network, "
                "likelihood and prior are not saved in the checkpoint's hyperparameters. To reload a lit-bayes run "
                "with its kept posterior draws, use lit_bayes.load_run(run_dir)."
            )
        return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Evaluation is done by the predictive callbacks on the kept samples."""

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """Evaluation is done by the predictive callbacks on the kept samples."""
