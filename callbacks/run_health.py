"""``RunHealth``: the verdict of a fit (:mod:`lit_bayes.health`), printed, logged and summarised."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.trainer.states import TrainerFn

from lit_bayes.callbacks.acceptance_monitor import AcceptanceMonitor
from lit_bayes.callbacks.chain_diagnostics import PREFIX, ChainDiagnostics, is_function_space, returned_energy
from lit_bayes.callbacks.chain_stacking import ChainStacking
from lit_bayes.callbacks.map_baseline import MAPBaseline
from lit_bayes.callbacks.posterior_samples import PosteriorSamples
from lit_bayes.health import Health, HealthThresholds, RunRecord, assess

__all__ = ["RunHealth"]


def _find(trainer, kind: type) -> Any:
    return next((c for c in trainer.callbacks if isinstance(c, kind)), None)


class RunHealth(Callback):
    """At the end of fit, assesses whether the run's posterior draws can be trusted
    (:func:`lit_bayes.health.assess`): verdict ``ok`` / ``warning`` / ``failed`` with reasons and
    advice. It reads the traces and R-hat of a :class:`ChainDiagnostics` (function space: held-out
    log predictive densities), the draws a :class:`PosteriorSamples` kept, the rates of an
    :class:`AcceptanceMonitor` (each optional), the validation NLPD of the posterior and of a
    :class:`MAPBaseline`'s MAP fit (fitted at the end of fit when one is among the callbacks), and counts
    the non-finite energies the sampler's steps return itself.

    The verdict is printed as a short console summary (``print_report``), logged to every logger
    (``health/level``: 0 ok, 1 warning, 2 failed; ``health/draws_total``, ``health/draws_per_chain``;
    W&B also gets the verdict and reasons in its run summary), and handed to :class:`RunSummary`,
    which writes it as the ``health`` block of ``summary.json``. ``lit-bayes fit --strict true``
    exits non-zero on ``failed``.

    Args: the thresholds of :class:`lit_bayes.health.HealthThresholds` (flat, as ``lit-bayes`` options;
    its defaults), and ``print_report``.
    """

    def __init__(
        self,
        rhat_warn: float = HealthThresholds.rhat_warn,
        rhat_fail: float = HealthThresholds.rhat_fail,
        min_ess: float = HealthThresholds.min_ess,
        trend_p: float = HealthThresholds.trend_p,
        mode_sd: float = HealthThresholds.mode_sd,
        acceptance_band: tuple[float, float] = HealthThresholds.acceptance_band,
        divergence_sd: float = HealthThresholds.divergence_sd,
        temperature_warn: float = HealthThresholds.temperature_warn,
        temperature_fail: float = HealthThresholds.temperature_fail,
        temperature_z: float = HealthThresholds.temperature_z,
        print_report: bool = True,
    ) -> None:
        self.thresholds = HealthThresholds(rhat_warn, rhat_fail, min_ess, trend_p, mode_sd, tuple(acceptance_band),
                                           divergence_sd, temperature_warn, temperature_fail, temperature_z)
        self.print_report = print_report
        self.health: Health | None = None
        self._nonfinite_steps = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        energy = returned_energy(outputs)
        if energy is not None and not bool(torch.isfinite(energy).all()):
            self._nonfinite_steps += 1

    def record(self, trainer, pl_module) -> RunRecord:
        """What the run recorded, gathered from the trainer's callbacks and the sampler."""
        samples, diagnostics = _find(trainer, PosteriorSamples), _find(trainer, ChainDiagnostics)
        monitor = _find(trainer, AcceptanceMonitor)
        steps, burn_in, thinning = trainer.global_step, pl_module.burn_in, pl_module.thinning
        if samples is not None:
            draws = samples.num_draws
        else:  # the sample steps the schedule allowed
            draws = (steps - burn_in - 1) // thinning + 1 if steps > burn_in else 0
        independent = pl_module.independent_chains
        traces = diagnostics.global_traces() if diagnostics is not None else {}
        summary = diagnostics.summary_metrics() if diagnostics is not None else {}
        return RunRecord(
            steps=steps, burn_in=burn_in, thinning=thinning, planned_steps=pl_module.planned_steps,
            chains=pl_module.num_chains * (trainer.world_size if independent else 1),
            draws_per_chain=draws,
            traces=traces,
            function_space=tuple(name for name in traces if is_function_space(name)),
            diagnostics={key[len(PREFIX):]: value for key, value in summary.items()},
            acceptance=monitor.rates()["layer"] if monitor is not None else {},
            nonfinite_steps=self._nonfinite_steps,
            uses_draws=pl_module.keeps_draws and not pl_module.predict_with_current_state,
            independent_chains=independent,
            posterior_sampler=pl_module.keeps_draws,
            notes=tuple(pl_module.health_notes()),
            stacking=self._stacking(trainer, pl_module),
            **self._heldout_nlpds(trainer, pl_module),
        )

    @staticmethod
    def _stacking(trainer, pl_module) -> dict | None:
        """A :class:`ChainStacking`'s weights and validation NLPDs (fitted now if it is among the callbacks)."""
        stacking = _find(trainer, ChainStacking)
        if stacking is None or not pl_module.keeps_draws or pl_module.predict_with_current_state:
            return None
        stacking.fit_weights(trainer, pl_module)
        return stacking.health_summary()

    @staticmethod
    def _heldout_nlpds(trainer, pl_module) -> dict[str, float]:
        """The validation NLPD of the posterior predictive (the last validation's ``val/nlpd``) and of a
        :class:`MAPBaseline`'s MAP estimate, when both exist."""
        baseline, nlpd = _find(trainer, MAPBaseline), trainer.callback_metrics.get("val/nlpd")
        if baseline is None or nlpd is None or not pl_module.keeps_draws:
            return {}
        map_nlpd = baseline.validation_nlpd(trainer, pl_module)
        return {} if map_nlpd is None else {"heldout_nlpd": float(nlpd), "map_heldout_nlpd": map_nlpd}

    def on_fit_start(self, trainer, pl_module) -> None:
        self.health = None

    def assess_fit(self, trainer, pl_module) -> Health:
        """The verdict of the fit that just ended (assessed once, on its first request)."""
        if self.health is None:
            self.health = assess(self.record(trainer, pl_module), self.thresholds)
        return self.health

    def assess_last(self, trainer, pl_module, fraction: float) -> Health:
        """The verdict of the last ``fraction`` of every trace (and of the draws), R-hat and ESS
        computed again on that part: a run that keeps its draws from the first step (to show the
        transient, as Exp. C of the noisy-Gibbs paper does) judged on its end instead."""
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        record = self.record(trainer, pl_module)
        traces = {name: trace[:, trace.shape[1] - math.ceil(fraction * trace.shape[1]):]
                  for name, trace in record.traces.items()}
        draws = math.ceil(fraction * record.draws_per_chain)
        summary = ChainDiagnostics.summarize_traces(traces)
        record = replace(record, traces=traces, draws_per_chain=draws,
                         burn_in=max(record.burn_in, record.steps - draws * record.thinning),
                         diagnostics={key[len(PREFIX):]: value for key, value in summary.items()})
        return assess(record, self.thresholds)

    def on_fit_end(self, trainer, pl_module) -> None:
        self.assess_fit(trainer, pl_module)
        if not trainer.is_global_zero:
            return
        if self.print_report:
            print(self.health.report(), flush=True)
        numbers = {"health/level": float(self.health.level), "health/draws_total": float(self.health.draws_total),
                   "health/draws_per_chain": float(self.health.draws_per_chain)}
        for logger in trainer.loggers:
            logger.log_metrics(numbers, step=trainer.global_step)
            if isinstance(logger, WandbLogger):
                logger.experiment.summary.update({
                    "health/verdict": self.health.verdict,
                    "health/reasons": self.health.reason_lines(),
                })

    def summary_section(self, trainer, pl_module) -> dict[str, Any]:
        """``{"health": {...}}`` for ``summary.json``: at the end of fit (whichever of this callback
        and :class:`RunSummary` comes first), and after it; empty in a run that did not fit."""
        if self.health is None and trainer.state.fn == TrainerFn.FITTING:
            self.assess_fit(trainer, pl_module)
        return {"health": self.health.as_dict()} if self.health is not None else {}

    def state_dict(self) -> dict[str, Any]:
        return {"nonfinite_steps": self._nonfinite_steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._nonfinite_steps = int(state_dict["nonfinite_steps"])
