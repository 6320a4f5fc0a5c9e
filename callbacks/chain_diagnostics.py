"""``ChainDiagnostics``: per-chain scalar traces during fit (weight space and function space),
their R-hat, ESS and IAT, and the particle diagnostics of SMC samplers."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor

from lit_bayes.diagnostics import min_draws, projection_directions, summarize
from lit_bayes.health import CONFIG_TEMPERATURE
from lit_bayes.validation import check_int

__all__ = ["ChainDiagnostics"]

PREFIX = "diag/"
GLOBAL_TRACES = {"val_nlpd"}  # computed for the chains of every process already
HELDOUT = "heldout_lpd"
POINT = "point_lpd_"


def is_function_space(name: str) -> bool:
    """Whether trace ``name`` is a function-space quantity (a predictive density, not a weight)."""
    return name == HELDOUT or name.startswith(POINT)


def heldout_batch(datamodule: Any, size: int) -> tuple[Tensor, Tensor] | None:
    """A fixed held-out batch: the first ``size`` validation points, or the first ``size``
    training points when the DataModule has no validation split (``None`` without either)."""
    for split in ("val_data", "train_data"):
        data = getattr(datamodule, split, None)
        tensors = getattr(data, "tensors", None)
        if tensors is not None and len(tensors) == 2 and len(tensors[0]) > 0:
            return tensors[0][:size], tensors[1][:size]
    return None


class TraceBuffer:
    """One trace's draws, a float64 ``(rows, capacity)`` CPU buffer filled column by column and doubled
    when full: 8 bytes a value. (A list of one small tensor per draw costs ~100x that in allocations,
    tens of KB a step over the ~10 traces of a run: GBs over the 10^5 steps of a long one.)"""

    def __init__(self, trace: Tensor | None = None) -> None:
        self._data = None if trace is None else trace.to("cpu", torch.float64).clone()
        self.count = 0 if trace is None else trace.shape[1]

    def append(self, values: Tensor) -> None:
        """Add one draw (``values.numel()`` rows, the same at every draw)."""
        values = values.detach().reshape(-1)
        if self._data is None or self.count == self._data.shape[1]:
            rows, capacity = values.numel(), max(1024, 2 * self.count)
            grown = torch.empty(rows, capacity, dtype=torch.float64)
            if self._data is not None:
                grown[:, :self.count] = self._data[:, :self.count]
            self._data = grown
        self._data[:, self.count] = values
        self.count += 1

    def trace(self) -> Tensor:
        """The draws so far, ``(rows, count)`` (a view of the buffer)."""
        return self._data[:, :self.count]


def returned_energy(outputs: Any) -> Tensor | None:
    """The per-chain energy a sampler's ``training_step`` returned (Lightning wraps it as ``{"loss": ...}``)."""
    energy = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
    return energy if isinstance(energy, Tensor) else None


class ChainDiagnostics(Callback):
    """Records per-chain scalar traces of a sampler and reports their convergence diagnostics.

    On every ``every_n_steps``-th sample step (the sampler's ``is_sample_step()``: after
    burn-in, thinned) it appends, for each chain:

    - ``energy``: the training energy the step returned (``training_step``'s ``(chains,)`` output);
    - ``config_temperature``: for a gradient sampler that measures it, its ``virial`` ((theta - c) . grad E
      at its last kept state, which the next step's gradient gives) over the number of sampled parameters:
      its mean is 1 for exact draws of exp(-E) (the configurational temperature; :class:`RunHealth` reads it
      to see draws too wide or too narrow); one draw fewer than the other traces;
    - ``projection_0 ... projection_{k-1}``: the flat parameters projected on ``num_projections``
      fixed random unit directions (:func:`lit_bayes.diagnostics.random_projections` with ``seed``;
      drawn once);
    - function space: ``heldout_lpd``, the chain's mean log predictive density
      log p(y_i | x_i, theta) over a fixed held-out batch (the first ``heldout_size`` validation
      points, or training points when there is no validation split), and ``point_lpd_0 ...``,
      log p(y_i | x_i, theta) of ``num_fixed_inputs`` fixed points of that batch. Chains in
      different weight-space modes can agree in function space, where the predictive lives:
      these are the traces whose R-hat (``diag/fs_rhat_max``) says whether the predictive
      averages converged (:class:`RunHealth` reads them).

    For samplers whose particles are resampled (``independent_chains`` False) it records instead,
    at every step: ``particle_ess`` (the effective sample size before reweighting, as a
    fraction of the particles), ``resampled`` (1 when the step resampled) and ``log_evidence``
    (the running log normalising-constant estimate); their summary is
    ``diag/particle_ess_min``, ``diag/particle_ess_mean``, ``diag/resample_count`` and
    ``diag/log_evidence`` (its final value).

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
        heldout_size: points of the held-out batch of the function-space traces (0: none).
        num_fixed_inputs: fixed points whose log predictive density is traced (<= heldout_size).
    """

    def __init__(self, num_projections: int = 4, seed: int = 0, every_n_steps: int = 1,
                 heldout_size: int = 256, num_fixed_inputs: int = 4) -> None:
        for name, value in (("num_projections", num_projections), ("every_n_steps", every_n_steps)):
            check_int(name, value, 1)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.heldout_size = check_int("heldout_size", heldout_size, 0)
        self.num_fixed_inputs = check_int("num_fixed_inputs", num_fixed_inputs, 0)
        if self.num_fixed_inputs > self.heldout_size:
            raise ValueError(f"num_fixed_inputs must be <= heldout_size={heldout_size}, got {num_fixed_inputs}")
        self.num_projections = num_projections
        self.seed = seed
        self.every_n_steps = every_n_steps
        self._heldout: tuple[Tensor, Tensor] | None = None
        self._directions: Tensor | None = None  # of the projections, (P, num_projections), the chains' dtype
        self._global_traces: dict[str, Tensor] | None = None
        self._draws: dict[str, TraceBuffer] = {}
        self._sample_steps = 0
        self._val_sum: Tensor | None = None
        self._val_count = 0

    # ------------------------------------------------------------------ traces
    def _append(self, name: str, values: Tensor) -> None:
        buffer = self._draws.get(name)
        if buffer is None:
            buffer = self._draws[name] = TraceBuffer()
        buffer.append(values)

    def traces(self) -> dict[str, Tensor]:
        """Every recorded trace as a float64 ``(chains, draws)`` tensor, by name (this process's
        chains; a particle trace has one row)."""
        return {name: draws.trace().clone() for name, draws in self._draws.items()}

    def global_traces(self) -> dict[str, Tensor]:
        """:meth:`traces` over the chains of every process (gathered at the end of fit)."""
        return self._global_traces if self._global_traces is not None else self.traces()

    # ------------------------------------------------------------------- fit
    def on_fit_start(self, trainer, pl_module) -> None:
        batch = heldout_batch(getattr(trainer, "datamodule", None), self.heldout_size) if self.heldout_size else None
        if batch is None:
            self._heldout = None
            return
        # float inputs (and regression targets) in the chains' dtype: float64 under precision 64-true
        dtype = next(iter(pl_module.chains.as_dict().values())).dtype
        self._heldout = tuple(t.to(pl_module.device, dtype if t.is_floating_point() else None) for t in batch)

    @torch.no_grad()
    def _record_function_space(self, pl_module) -> None:
        x, y = self._heldout
        params = pl_module.chains.as_dict()
        log_lik = pl_module.log_likelihood(params, pl_module.outputs(params, x), y)  # (chains, B)
        self._append(HELDOUT, log_lik.mean(-1))
        points = torch.linspace(0, y.shape[0] - 1, self.num_fixed_inputs).round().long().tolist()
        for j, i in enumerate(points):
            self._append(f"{POINT}{j}", log_lik[:, i])

    def _record_particles(self, pl_module) -> None:
        result = getattr(pl_module, "last_reweight", None)  # set by Feynman-Kac samplers
        if result is None:
            return
        self._append("particle_ess", result.ess / pl_module.num_chains)
        self._append("resampled", torch.tensor(float(result.ancestors is not None)))
        self._append("log_evidence", pl_module.log_evidence)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not pl_module.independent_chains:
            self._record_particles(pl_module)
            return
        if not pl_module.is_sample_step():
            return
        self._sample_steps += 1
        if (self._sample_steps - 1) % self.every_n_steps:
            return
        energy = returned_energy(outputs)
        if energy is not None and energy.numel() == pl_module.num_chains:
            self._append("energy", energy)
        flat = pl_module.chains.flat()  # (chains, P)
        virial = getattr(pl_module, "virial", None)  # theta . grad E of a gradient sampler's step
        if virial is not None and virial.numel() == pl_module.num_chains:
            self._append(CONFIG_TEMPERATURE, virial / flat.shape[1])
        if self._directions is None or self._directions.shape[0] != flat.shape[1]:
            directions = projection_directions(flat.shape[1], self.num_projections, self.seed)
            self._directions = directions.to(device=flat.device, dtype=flat.dtype)
        projections = flat @ self._directions  # (chains, num_projections)
        for j in range(self.num_projections):
            self._append(f"projection_{j}", projections[:, j])
        if self._heldout is not None:
            self._record_function_space(pl_module)

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
        if trainer.world_size > 1 and pl_module.independent_chains:
            # chains of every process; val_nlpd already covers them all
            self._global_traces = {
                name: trace if name in GLOBAL_TRACES else
                pl_module.gather_across_processes(trace.to(pl_module.device)).cpu()
                for name, trace in self.traces().items()
            }
        metrics = self.summary_metrics()
        if metrics:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)

    # ---------------------------------------------------------------- report
    def summary_metrics(self) -> dict[str, float]:
        """``summarize`` of the traces with >= 4 finite draws per chain (one chain: >= 8, for the split R-hat
        of its halves), keys prefixed ``diag/`` (empty when no trace qualifies), with ``diag/fs_rhat_max`` and
        ``diag/fs_ess_bulk_min`` over the function-space traces; with several processes, over the chains of
        all of them (gathered at the end of fit). Particle samplers get their particle summary."""
        traces = self.global_traces()
        if "particle_ess" in traces:
            return self._particle_summary(traces)
        return self.summarize_traces(traces)

    @staticmethod
    def _particle_summary(traces: dict[str, Tensor]) -> dict[str, float]:
        ess = traces["particle_ess"][0]
        return {
            PREFIX + "particle_ess_min": float(ess.min()),
            PREFIX + "particle_ess_mean": float(ess.mean()),
            PREFIX + "resample_count": float(traces["resampled"].sum()),
            PREFIX + "log_evidence": float(traces["log_evidence"][0, -1]),
        }

    @staticmethod
    def summarize_traces(traces: dict[str, Tensor]) -> dict[str, float]:
        """:meth:`summary_metrics` of the traces ``traces`` (chains, draws) by name."""
        usable = {
            name: trace
            for name, trace in traces.items()
            if trace.shape[1] >= min_draws(trace.shape[0]) and torch.isfinite(trace).all()
            and bool((trace.std(dim=1) > 0).all())  # a chain that never moved has no IAT or R-hat
        }
        if not usable:
            return {}
        summary = {PREFIX + key: value for key, value in summarize(usable).items()}
        function_space = [name for name in usable if is_function_space(name)]
        if function_space:
            summary[PREFIX + "fs_rhat_max"] = max(summary[f"{PREFIX}rhat/{name}"] for name in function_space)
            summary[PREFIX + "fs_ess_bulk_min"] = min(summary[f"{PREFIX}ess_bulk/{name}"] for name in function_space)
        return summary

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {"traces": self.traces(), "sample_steps": torch.tensor(self._sample_steps)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._draws = {name: TraceBuffer(trace) for name, trace in state_dict["traces"].items()}
        self._sample_steps = int(state_dict["sample_steps"])
