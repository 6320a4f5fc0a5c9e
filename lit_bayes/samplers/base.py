"""``SamplerModule``: the LightningModule every sampler family builds on.

It owns the sampled state (``num_chains`` parameter sets of the wrapped network and of
the likelihood, stacked along a leading chain dimension), the sampler's own random
generator, the energy of :mod:`lit_bayes.posterior`, and the burn-in/thinning rule the
sample-collecting callbacks follow. Subclasses implement ``configure_optimizers`` (the
stepper) and ``training_step`` (one transition of every chain).
"""
from __future__ import annotations

import copy
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch import Tensor, nn

from lit_bayes.chains import ChainState, stacked_call
from lit_bayes.posterior import GaussianPrior, Likelihood, Posterior
from lit_bayes.predictive import Predictive, marginal_predictive, posterior_samples, uniform_log_weights
from lit_bayes.validation import check_int

__all__ = ["SamplerModule"]

_GENERATOR_KEY = "lit_bayes_generator_state"


def rank_seed(seed: int, rank: int, stream: int) -> int:
    """A 63-bit seed for (root seed, process rank, stream) so no two processes or uses share one."""
    return int(np.random.SeedSequence([seed, rank, stream]).generate_state(1, np.uint64)[0] >> 1)


class SamplerModule(L.LightningModule):
    """Base class of the sampler modules.

    ``predict_with_current_state`` (class attribute): predictions use the current state
    rather than the kept samples, for samplers whose kept states are only meaningful with
    the deterministic parameters they were drawn under (Feynman-Kac samplers).
    ``independent_chains`` (class attribute): whether the chains are independent Markov
    chains, so that R-hat and ESS across them mean something (not for resampled particles).

    Args:
        model: any ``nn.Module`` mapping inputs to likelihood outputs (logits, means).
        likelihood: the per-point likelihood (:mod:`lit_bayes.posterior`).
        prior: prior over all sampled parameters; default ``GaussianPrior(1.0)``.
        num_data: N for minibatch scaling; ``None`` reads ``num_train`` from the DataModule.
        temperature: T of the tempered posterior exp(-U/T); 1 is the Bayesian posterior.
        minibatch_scaling: ``"rescaled"`` (N/B times the batch sum) or ``"sum"``.
        num_chains: chains advanced together in one batched call.
        burn_in: steps before the first kept sample.
        thinning: keep one state every ``thinning`` steps after burn-in.
        seed: root seed of the sampler's generators (combined with the process rank).
        init: ``"module"`` (each chain re-initialised by the modules' ``reset_parameters``),
            ``"prior"`` (a prior draw) or ``"template"`` (every chain starts at ``model``'s
            current parameters, e.g. a MAP estimate).
        vectorize: evaluate chains with ``torch.func.vmap`` (default) or a reference loop.
    """

    predict_with_current_state = False
    independent_chains = True

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: GaussianPrior | None = None,
        num_data: int | None = None,
        temperature: float = 1.0,
        minibatch_scaling: Literal["rescaled", "sum"] = "rescaled",
        num_chains: int = 1,
        burn_in: int = 0,
        thinning: int = 1,
        seed: int = 0,
        init: Literal["module", "prior", "template"] = "module",
        vectorize: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be an nn.Module, got {type(model).__name__}")
        if not isinstance(likelihood, Likelihood):
            raise ValueError(f"likelihood must be a lit_bayes.posterior.Likelihood, got {type(likelihood).__name__}")
        for name, value, low in (("num_chains", num_chains, 1), ("burn_in", burn_in, 0), ("thinning", thinning, 1)):
            check_int(name, value, low)
        if init not in ("module", "prior", "template"):
            raise ValueError(f"init must be 'module', 'prior' or 'template', got {init!r}")
        self.save_hyperparameters(ignore=["model", "likelihood", "prior"])
        # model and likelihood are templates evaluated with each chain's parameters
        # (functional_call); their own parameters are never trained
        self.model = model.requires_grad_(False)
        self.likelihood = likelihood.requires_grad_(False)
        self.prior = prior if prior is not None else GaussianPrior(1.0)
        self.posterior = Posterior(likelihood, self.prior, num_data, temperature, minibatch_scaling)
        self.num_chains = num_chains
        self.burn_in = burn_in
        self.thinning = thinning
        self.seed = seed
        self.init = init
        self.vectorize = vectorize
        self.chains: ChainState | None = None
        self.generator: torch.Generator | None = None
        self._pending_generator_state: Tensor | None = None
        self.predict_chunk_size: int | None = None  # samples per chunk in predict_step (None: sized to the batch)
        self._predict_samples: tuple[dict[str, Tensor], Tensor] | None = None

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

    def initial_state(self, generator: torch.Generator) -> dict[str, Tensor]:
        """Stacked initial parameters of every chain, following ``init``."""
        state = {n: p.detach().unsqueeze(0).repeat(self.num_chains, *([1] * p.dim()))
                 for n, p in self.template_parameters().items()}
        if self.init == "template":
            return state
        if self.init == "prior":
            return self.prior.sample(state, generator)
        draws = []  # "module": each chain re-initialised by the layers' own reset_parameters
        for _ in range(self.num_chains):
            net = copy.deepcopy(self.model)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
                for module in net.modules():
                    if hasattr(module, "reset_parameters"):
                        module.reset_parameters()
            draws.append(dict(net.named_parameters()))
        state.update({f"net.{n}": torch.stack([d[n].detach() for d in draws]) for n in draws[0] if f"net.{n}" in state})
        return state

    def setup(self, stage: str) -> None:
        if self.posterior.num_data is None and self.posterior.minibatch_scaling == "rescaled":
            datamodule = getattr(self.trainer, "datamodule", None)
            num_train = getattr(datamodule, "num_train", None)
            if num_train is not None:
                self.posterior.num_data = int(num_train)
        if self.chains is None:
            init_gen = torch.Generator().manual_seed(rank_seed(self.seed, self.stream_rank, 0))
            self.chains = ChainState(self.initial_state(init_gen))

    @property
    def stream_rank(self) -> int:
        """The rank that seeds this process's random streams: its own global rank, so
        processes run independent chains (samplers that keep one state replicated on every
        process return 0)."""
        return self.global_rank

    def make_generator(self) -> torch.Generator:
        """The sampler's generator on the chains' device, restored from a checkpoint if one was loaded."""
        gen = torch.Generator(device=self.device).manual_seed(rank_seed(self.seed, self.stream_rank, 1))
        if self._pending_generator_state is not None:
            gen.set_state(self._pending_generator_state)
            self._pending_generator_state = None
        self.generator = gen
        return gen

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["lit_bayes_sampler"] = type(self).__name__
        if self.generator is not None:
            checkpoint[_GENERATOR_KEY] = self.generator.get_state()

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
        self._pending_generator_state = checkpoint.get(_GENERATOR_KEY)

    # ---------------------------------------------------------------- energy
    def split_parameters(self, params: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """Separate stacked parameters into the network's and the likelihood's (prefixes removed)."""
        net = {n[4:]: p for n, p in params.items() if n.startswith("net.")}
        lik = {n[11:]: p for n, p in params.items() if n.startswith("likelihood.")}
        return net, lik

    def outputs(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """Network outputs for every stacked parameter set: ``(S, B, ...)``. A model with
        its own ``stacked_forward(params, x)`` (e.g. :class:`lit_bayes.models.MLP`) uses it
        when ``vectorize`` is on; otherwise ``vmap`` (or, off, a loop) of ``functional_call``."""
        net, _ = self.split_parameters(params)
        if self.vectorize and hasattr(self.model, "stacked_forward"):
            return self.model.stacked_forward(net, x)
        return stacked_call(self.model, net, x, vectorize=self.vectorize)

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

    def check_batch(self, batch: Any) -> tuple[Tensor, Tensor]:
        """Unpack ``(x, y)`` and validate it against the likelihood (every batch: a bad
        value is reported as bad data, not later as a diverging chain)."""
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise ValueError("batch must be a pair (inputs, targets)")
        x, y = batch
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"batch inputs have {x.shape[0]} rows but targets have {y.shape[0]}")
        # a finite sum proves every value finite in one pass (isfinite().all() takes four); only a
        # NaN, an infinity or an overflowing sum needs the elementwise check
        if torch.is_floating_point(x) and not torch.isfinite(x.sum()) and not torch.isfinite(x).all():
            raise ValueError("batch inputs contain NaN or infinite values")
        self.likelihood.check_target(y, "batch targets")
        return x, y

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
        steps = self.global_step
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

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Evaluation is done by the predictive callbacks on the kept samples."""

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """Evaluation is done by the predictive callbacks on the kept samples."""
