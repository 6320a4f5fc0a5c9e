"""``ReplicaExchangeSGMCMC``: SGLD, pSGLD or SGHMC on a temperature ladder with exchanges between neighbours."""
from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

from lit_bayes.chains import ChainState
from lit_bayes.posterior import Likelihood, Prior
from lit_bayes.replica_exchange import (
    check_ladder, difference_variance, geometric_ladder, swap_log_acceptance, swap_pairs,
)
from lit_bayes.samplers.sgmcmc import SGMCMC
from lit_bayes.validation import check_int

__all__ = ["ReplicaExchangeSGMCMC"]

#: replica k steps with eps * tau_k ** power: the power that keeps the deterministic part of a step on
#: U / tau_k as large as the cold chain's on U (SGLD's drift is eps grad U / (2 tau); pSGLD's preconditioner and
#: the scale-adapted SGHMC's inverse mass already grow like tau; SGHMC moves theta by eps^2 grad U / tau per step
#: from rest)
STEP_SCALE_POWER = {"sgld": 1.0, "psgld": 0.0, "sghmc": 0.5, "scale_adapted_sghmc": 0.0}
SWAP_ENERGIES = ("full_batch", "minibatch")
#: a swap rate below which the health notes say the ladder is cut
LOW_SWAP_RATE = 0.05


def _swap_rows(cold: ChainState, hot: ChainState, accept: Tensor) -> None:
    """Exchange the states of the chains ``accept`` marks between two replicas, in place."""
    for a, b in zip(cold.as_dict().values(), hot.as_dict().values()):
        mask = accept.view(-1, *([1] * (a.dim() - 1)))
        new_cold = torch.where(mask, b, a)
        b.copy_(torch.where(mask, a, b))
        a.copy_(new_cold)


class ReplicaExchangeSGMCMC(SGMCMC):
    """Replica exchange (parallel tempering) SG-MCMC over the batched chain dimension (Deng et al. 2020 for
    stochastic gradients; the swap rule and schedule in :mod:`lit_bayes.replica_exchange`).

    Each of the ``num_chains`` chains has a ladder of K replicas: replica k targets exp(-U / (T tau_k)),
    1 = tau_0 < ... < tau_{K-1}. The K * C replicas move together, one vectorised energy call per step, each
    by the SG stepper on its own tempered energy, with step size eps tau_k for SGLD, eps sqrt(tau_k) for SGHMC
    and eps for pSGLD and scale-adapted SGHMC (whose preconditioners grow like tau_k): so every replica's
    deterministic drift is the cold chain's and only its noise grows, and the hot replicas cross the barriers
    the cold ones cannot.
    Every ``swap_every`` steps, after the move, neighbouring replicas of each chain exchange their states
    with the Metropolis probability of the swap, in even/odd rounds. Only the tau = 1 replicas are the
    sampler's :attr:`chains`: what the callbacks keep, diagnose and predict with. The hotter ones are
    :attr:`replicas`, in checkpoints beside them. The stepper's own state (SGHMC's momentum, pSGLD's
    preconditioner) stays with its temperature: swaps exchange positions only, which keeps the joint target
    because the momentum's law does not depend on the position.

    Logged: ``exchange/rate_<k>``, the share of accepted swaps between replicas k and k+1 since the run
    began (counted in checkpoints), also in ``summary.json``. Rates near 0 break the ladder (more
    temperatures or a lower top); rates near 1 waste replicas.

    Args (besides :class:`SGMCMC`'s, which keep their meaning for the tau = 1 chains):
        num_temperatures: K, replicas per chain, on a geometric ladder from 1 to ``max_temperature``.
        max_temperature: tau_{K-1}, relative to ``temperature``.
        temperatures: the ladder by hand instead (1 first, increasing).
        swap_every: steps between swap rounds.
        swap_energy: the energies a swap compares: ``"full_batch"`` evaluates U on the DataModule's whole
            training set (``train_data``) at each round, an exact Metropolis swap; ``"minibatch"`` estimates
            it on the step's batch with Deng et al.'s variance correction (exact on full batches).
    Learned prior scales and ``minibatch_scaling="sum"`` are refused: the swap needs one energy U(theta)
    of the whole data that every replica shares.
    """

    updates_prior_scales = False
    STREAMS = {**SGMCMC.STREAMS, "exchange": 8}

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
        minibatch_scaling: Literal["rescaled"] = "rescaled",
        num_chains: int = 1,
        burn_in: int | float = 0,
        thinning: int = 1,
        seed: int = 0,
        init: Literal["module", "prior", "template", "map"] = "module",
        vectorize: bool = True,
        num_draws: int | None = None,
        init_options: dict[str, Any] | None = None,
        num_temperatures: int = 4,
        max_temperature: float = 10.0,
        temperatures: list[float] | None = None,
        swap_every: int = 10,
        swap_energy: Literal["full_batch", "minibatch"] = "full_batch",
    ) -> None:
        if minibatch_scaling != "rescaled":
            raise ValueError(f"ReplicaExchangeSGMCMC needs minibatch_scaling='rescaled' (swaps compare energies of "
                             f"the whole data set), got {minibatch_scaling!r}")
        super().__init__(
            model=model, likelihood=likelihood, prior=prior, stepper=stepper, step_size=step_size,
            schedule=schedule, schedule_options=schedule_options, stepper_options=stepper_options,
            num_data=num_data, temperature=temperature, minibatch_scaling=minibatch_scaling, num_chains=num_chains,
            burn_in=burn_in, thinning=thinning, seed=seed, init=init, vectorize=vectorize, num_draws=num_draws,
            init_options=init_options,
        )
        self.ladder = (check_ladder(temperatures) if temperatures is not None
                       else geometric_ladder(num_temperatures, max_temperature))
        self.swap_every = check_int("swap_every", swap_every, 1)
        if swap_energy not in SWAP_ENERGIES:
            raise ValueError(f"swap_energy must be one of {', '.join(map(repr, SWAP_ENERGIES))}, got {swap_energy!r}")
        self.swap_energy = swap_energy
        self.step_scales = [tau ** STEP_SCALE_POWER[stepper] for tau in self.ladder]
        friction, hottest = self.stepper_options.get("friction", 1.0), self.schedule.step_size * max(self.step_scales)
        if stepper == "sghmc" and not friction * hottest < 1:
            raise ValueError(
                f"the hottest replica's SGHMC step is step_size * sqrt(max temperature) = {hottest:g}, and "
                f"friction * step must stay below 1 (friction {friction:g}): lower step_size or max_temperature"
            )
        self.replicas: nn.ModuleList | None = None  # the hotter replicas' states, built with the chains
        pairs = len(self.ladder) - 1
        self.register_buffer("swap_attempts", torch.zeros(pairs, dtype=torch.float64))
        self.register_buffer("swap_accepts", torch.zeros(pairs, dtype=torch.float64))

    # ------------------------------------------------------------------ state
    def setup(self, stage: str) -> None:
        if self.chains is None:  # every replica's start from one draw of the "init" stream
            self.check_template_names()
            count = self.num_chains
            start = self.initial_state(self.stream_generator("init", torch.device("cpu")), count * len(self.ladder))
            states = [ChainState({n: p[k * count:(k + 1) * count] for n, p in start.items()})
                      for k in range(len(self.ladder))]
            self.chains, self.replicas = states[0], nn.ModuleList(states[1:])
        super().setup(stage)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        if self.replicas is None and self.chains is not None:  # shaped here, filled by the state dict
            self.replicas = nn.ModuleList(ChainState({n: torch.zeros_like(p) for n, p in self.chains.as_dict().items()})
                                          for _ in self.ladder[1:])

    def chain_states(self) -> list[ChainState]:
        return [self.chains, *self.replicas]

    def stepper_parameters(self) -> list[dict[str, Any]]:
        """One parameter group per temperature, whose step is the base step times its scale."""
        return [{"params": list(state.parameters()), "step_scale": scale}
                for state, scale in zip(self.chain_states(), self.step_scales)]

    def replica_parameters(self) -> dict[str, Tensor]:
        """Every replica's parameters stacked ``(K * C, ...)``, temperature-major (the tau = 1 chains first)."""
        states = [state.as_dict() for state in self.chain_states()]
        return {name: torch.cat([state[name] for state in states]) for name in states[0]}

    def ladder_tensor(self, like: Tensor) -> Tensor:
        """The ladder's tau_k ``(K,)`` in ``like``'s dtype and device."""
        return torch.tensor(self.ladder, dtype=like.dtype, device=like.device)

    # ------------------------------------------------------------------- steps
    def on_fit_start(self) -> None:
        if self.swap_energy == "full_batch" and len(self.ladder) > 1:
            if getattr(getattr(self.trainer, "datamodule", None), "train_data", None) is None:
                raise ValueError("swap_energy='full_batch' needs a DataModule with train_data (every lit_bayes "
                                 "DataModule has it); use swap_energy='minibatch' otherwise")
        super().on_fit_start()

    def step_energy(self, x: Tensor, y: Tensor, step: int) -> Tensor:
        """Every replica's tempered energy U / (T tau_k), ``(K * C,)``, the tau = 1 chains first."""
        energy = self.energy(self.replica_parameters(), x, y)
        return (energy.view(len(self.ladder), self.num_chains) / self.ladder_tensor(energy)[:, None]).flatten()

    def after_step(self, step: int, x: Tensor, y: Tensor) -> None:
        """A swap round after every ``swap_every``-th step."""
        if (step + 1) % self.swap_every == 0 and len(self.ladder) > 1:
            self.exchange((step + 1) // self.swap_every, x, y)

    @torch.no_grad()
    def exchange(self, round_index: int, x: Tensor, y: Tensor) -> None:
        """Swap round ``round_index``: the even or odd pairs of every chain's ladder, each exchanged with its
        Metropolis probability (uniforms from the checkpointed ``"exchange"`` stream)."""
        lower = swap_pairs(round_index, len(self.ladder))
        if not lower:
            return
        params = {n: p.detach() for n, p in self.replica_parameters().items()}
        if self.swap_energy == "full_batch":
            energies, variance = self.full_batch_energies(params), None
        else:
            log_lik = self.log_likelihood(params, self.outputs(params, x), y)
            energies = self.posterior.energy(log_lik, self.prior(params))
            terms = self.posterior.likelihood_energy(log_lik, y.shape[0])  # each point's term of the estimate
            variance = difference_variance(terms.view(len(self.ladder), self.num_chains, -1), lower,
                                           self.posterior.num_data)
        energies = energies.double().view(len(self.ladder), self.num_chains)
        log_accept = swap_log_acceptance(energies, self.ladder_tensor(energies), lower, variance)
        generator = self.generators.get("exchange") or self.make_generator("exchange")
        uniform = torch.rand(log_accept.shape, generator=generator, device=generator.device, dtype=torch.float64)
        accept = uniform.to(log_accept.device).log() < log_accept
        states = self.chain_states()
        for row, k in enumerate(lower):
            _swap_rows(states[k], states[k + 1], accept[row])
        index = torch.as_tensor(lower, device=self.swap_attempts.device)
        self.swap_attempts[index] += self.num_chains
        self.swap_accepts[index] += accept.sum(-1).to(self.swap_accepts)

    def full_batch_energies(self, params: dict[str, Tensor]) -> Tensor:
        """U(theta) / T of every stacked parameter set on the DataModule's whole training set, in batches of
        the DataModule's ``batch_size``: ``(S,)``."""
        datamodule = self.trainer.datamodule
        x_all, y_all = datamodule.train_data.tensors[:2]
        num_points = y_all.shape[0]
        chunk = getattr(datamodule, "batch_size", None) or num_points
        dtype = next(iter(params.values())).dtype  # the run's: float64 under precision 64-true
        total = 0.0
        for start in range(0, num_points, chunk):
            x, y = (t[start:start + chunk].to(self.device, dtype if t.is_floating_point() else None)
                    for t in (x_all, y_all))
            total = total + self.log_likelihood(params, self.outputs(params, x), y).sum(-1)
        return self.posterior.likelihood_energy(total, num_points) + self.posterior.prior_energy(self.prior(params))

    def health_notes(self) -> list[str]:
        """The swap rates along the ladder, and what to change where a rate below ``LOW_SWAP_RATE`` cuts it."""
        notes = super().health_notes()
        attempts, accepts = self.swap_attempts.tolist(), self.swap_accepts.tolist()
        if len(self.ladder) < 2 or not any(attempts):
            return notes
        rates = [a / n if n else math.nan for a, n in zip(accepts, attempts)]
        pairs = ", ".join(f"{rate:.3f} ({self.ladder[k]:.3g}-{self.ladder[k + 1]:.3g})" for k, rate in enumerate(rates))
        note = f"replica exchange: swap rates between neighbouring temperatures {pairs}"
        if any(rate < LOW_SWAP_RATE for rate in rates):  # a pair not yet tried (NaN) is not low
            note += (f"; below {LOW_SWAP_RATE:g} few states cross, so the hotter replicas barely reach the kept "
                     "chains: add temperatures (model.init_args.num_temperatures) or lower the top one "
                     "(max_temperature)")
        return [*notes, note]

    def state_metrics(self) -> dict[str, Tensor]:
        """The swap rate of every neighbouring pair attempted so far, ``exchange/rate_<k>``."""
        rates = self.swap_accepts / self.swap_attempts
        tried = self.swap_attempts.gt(0).tolist()
        return {**super().state_metrics(), **{f"exchange/rate_{k}": rates[k] for k in range(len(rates)) if tried[k]}}
