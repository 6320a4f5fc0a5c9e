"""``ChainDiagnostics``: per-chain scalar traces during fit, and their R-hat, ESS and IAT."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor

from lit_bayes.diagnostics import MIN_DRAWS, random_projections, summarize
from lit_bayes.validation import check_int

__all__ = ["ChainDiagnostics"]

PREFIX = "diag/"
GLOBAL_TRACES = {"val_nlpd"}  # computed for the chains of every process already


def _energy(outputs: Any) -> Tensor | None:
    """The per-chain energy a sampler's ``training_step`` returned (Lightning wraps it as ``{"loss": ...}``)."""
    energy = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
    return energy if isinstance(energy, Tensor) else None


class ChainDiagnostics(Callback):
    """Records per-chain scalar traces of a sampler and reports their convergence diagnostics.

    On every ``every_n_steps``-th sample step (the sampler's ``is_sample_step()``: after
    burn-in, thinned) it appends, for each chain:

    - ``energy``: the training energy the step returned (``training_step``'s ``(chains,)`` output);
    - ``projection_0 ... projection_{k-1}``: the flat parameters projected on ``num_projections``
      fixed random unit directions (:func:`lit_bayes.diagnostics.random_projections` with ``seed``).

    At the end of each validation epoch of fit after burn-in it appends ``val_nlpd``, each chain's
    mean negative log-likelihood of the validation points under its current parameters.

    At train end the traces with at least 4 draws go through :func:`lit_bayes.diagnostics.summarize`;
    the results (``diag/rhat_max``, ``diag/ess_bulk_min``, ``diag/rhat/energy``, ``diag/iat/projection_0``,
    ...) are sent to every logger of the trainer and returned by :meth:`summary_metrics`, which
    :class:`RunSummary` writes into ``summary.json``. R-hat, and ``summarize`` as a whole, need at
    least 2 chains: with a single chain no diagnostic is reported. Samplers whose chains are not
    independent (``independent_chains`` False: resampled SMC particles) are not traced.

    The traces are part of Lightning checkpoints (tensors only); a resumed run appends to them.

    Args:
        num_projections: number of random projections of the parameters to trace (>= 1).
        seed: seed of the projection directions.
        every_n_steps: record one sample step out of every ``every_n_steps`` (>= 1).
    """

    def __init__(self, num_projections: int = 4, seed: int = 0, every_n_steps: int = 1) -> None:
        for name, value in (("num_projections", num_projections), ("every_n_steps", every_n_steps)):
            check_int(name, value, 1)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.num_projections = num_projections
        self.seed = seed
        self.every_n_steps = every_n_steps
        self._draws: dict[str, list[Tensor]] = {}
        self._sample_steps = 0
        self._val_sum: Tensor | None = None
        self._val_count = 0
        self._summary: dict[str, float] | None = None

    # ------------------------------------------------------------------ traces
    def _append(self, name: str, values: Tensor) -> None:
        self._draws.setdefault(name, []).append(values.detach().to("cpu", torch.float64).reshape(-1))

    def traces(self) -> dict[str, Tensor]:
        """Every recorded trace as a float64 ``(chains, draws)`` tensor, by name."""
        return {name: torch.stack(draws, dim=1) for name, draws in self._draws.items()}

    # ------------------------------------------------------------------- fit
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not (pl_module.independent_chains and pl_module.is_sample_step()):
            return
        self._sample_steps += 1
        if (self._sample_steps - 1) % self.every_n_steps:
            return
        energy = _energy(outputs)
        if energy is not None and energy.numel() == pl_module.num_chains:
            self._append("energy", energy)
        flat = pl_module.chains.flat().unsqueeze(1)  # (chains, 1, P)
        projections = random_projections(flat, self.num_projections, self.seed)[:, 0]
        for j in range(self.num_projections):
            self._append(f"projection_{j}", projections[:, j])

    def _recording_validation(self, trainer, pl_module) -> bool:
        return (
            trainer.state.fn == TrainerFn.FITTING
            and pl_module.independent_chains
            and not trainer.sanity_checking
            and pl_module.global_step > pl_module.burn_in
        )

    @torch.no_grad()
    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if not self._recording_validation(trainer, pl_module):
            return
        x, y = batch
        params = {n: pl_module.gather_across_processes(p.detach()) for n, p in pl_module.chains.as_dict().items()}
        nll = -pl_module.log_likelihood(params, pl_module.outputs(params, x), y).sum(-1)
        self._val_sum = nll if self._val_sum is None else self._val_sum + nll
        self._val_count += y.shape[0]

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if self._val_sum is None:
            return
        total = trainer.strategy.reduce(self._val_sum, reduce_op="sum")
        count = trainer.strategy.reduce(torch.tensor(float(self._val_count), device=total.device), reduce_op="sum")
        self._append("val_nlpd", total / count)
        self._val_sum, self._val_count = None, 0

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.world_size > 1:  # chains of every process; val_nlpd already covers them all
            self._summary = self._summarize({
                name: trace if name in GLOBAL_TRACES else
                pl_module.gather_across_processes(trace.to(pl_module.device)).cpu()
                for name, trace in self.traces().items()
            })
        metrics = self.summary_metrics()
        if metrics:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)

    # ---------------------------------------------------------------- report
    def summary_metrics(self) -> dict[str, float]:
        """``summarize`` of the traces with >= 4 finite draws and >= 2 chains, keys prefixed ``diag/``
        (empty when no trace qualifies); with several processes, over the chains of all of
        them (gathered at the end of fit)."""
        return self._summary if self._summary is not None else self._summarize(self.traces())

    @staticmethod
    def _summarize(traces: dict[str, Tensor]) -> dict[str, float]:
        usable = {
            name: trace
            for name, trace in traces.items()
            if trace.shape[0] >= 2 and trace.shape[1] >= MIN_DRAWS and torch.isfinite(trace).all()
            and bool((trace.std(dim=1) > 0).all())  # a chain that never moved has no IAT or R-hat
        }
        if not usable:
            return {}
        return {PREFIX + key: value for key, value in summarize(usable).items()}

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {"traces": self.traces(), "sample_steps": torch.tensor(self._sample_steps)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._draws = {name: list(trace.unbind(dim=1)) for name, trace in state_dict["traces"].items()}
        self._sample_steps = int(state_dict["sample_steps"])
