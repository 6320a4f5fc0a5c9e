"""The health verdict of a run: can its posterior draws be trusted?

:func:`assess` turns what a run recorded (steps, burn-in, draws kept, per-chain traces in weight
and function space, acceptance rates, non-finite energies) into a :class:`Health`: a verdict
``"ok"``, ``"warning"`` or ``"failed"``, and one :class:`Reason` per problem found, each with the
advice that fixes it. The checks:

- ``no_draws`` (failed): no state was kept after the burn-in.
- ``stopped_early`` (warning): the run stopped before the steps it was set to take (``max_time``, an
  interruption), so it kept fewer draws than planned.
- ``too_few_draws`` (warning): fewer than 4 draws per chain, too few to diagnose.
- ``single_chain`` (warning): one chain: R-hat, and any check across chains, is undefined.
- ``unchecked`` (warning): draws were kept from several chains, but no function-space R-hat could be
  computed (no function-space trace was recorded, or fewer than 4 points of it per chain, e.g. the
  chain diagnostics' ``every_n_steps`` longer than the run allowed): the chains' agreement was never measured.
- ``rhat`` (warning above ``rhat_warn``, failed above ``rhat_fail``): the rank-normalised split
  R-hat of Vehtari et al. (2021) on the function-space traces (each chain's held-out log
  predictive density and that of a few fixed points); 1.01 is their recommended threshold. With
  one chain, the R-hat of its two halves: a chain still drifting fails it.
- ``low_ess`` (warning): their bulk ESS below ``min_ess`` (Vehtari et al. suggest 100).
- ``trend`` (warning): the held-out log predictive density still moves between the first and
  second half of the kept draws: a t-test of the per-chain half-differences across chains,
  p below ``trend_p``. The burn-in was too short.
- ``separate_modes`` (failed): chains whose mean held-out log predictive density lies more than
  ``mode_sd`` pooled within-chain standard deviations from the median chain's: they sit in
  different modes, and the averaged predictive weighs the modes by how many chains started
  near each, not by their posterior mass.
- ``acceptance`` (warning): a Metropolis acceptance rate (per layer or block) outside
  ``acceptance_band``.
- ``nonfinite`` (failed): NaN or infinite energies were seen.
- ``divergence`` (failed): chains whose energy rose from the first to the second half of the
  kept draws by more than ``divergence_sd`` within-chain standard deviations (the median
  chain's, over the first half): a stochastic-gradient chain running away.
- ``temperature`` (warning when further from 1 than ``temperature_warn``, failed beyond
  ``temperature_fail``): the draws' configurational temperature, the mean of (theta - c) . grad E / P over
  the kept draws of a gradient sampler (P sampled parameters, c a constant per chain), is 1 for exact draws
  of the target exp(-E) (integration by parts, E[(theta_i - c_i) dE/dtheta_i] = 1 where the density vanishes
  in the tails, as under the library's priors). Above 1 the draws are too wide (a step too large for the
  posterior, or minibatch noise above the injected noise); below 1 too narrow (chains that have not yet
  spread from a narrow start). Reported when its distance from 1 also exceeds ``temperature_z`` Monte Carlo
  standard errors: chains that agree with one another can all be wrong.
- ``worse_than_map`` (warning): the posterior predictive's NLPD on the validation split is above that
  of the MAP estimate of the same energy (:class:`~lit_bayes.callbacks.MAPBaseline`): the draws may be
  right, but this posterior predicts worse than its own mode, which usually points at the prior.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats
from torch import Tensor

from lit_bayes.diagnostics import MIN_DRAWS, integrated_autocorrelation_time
from lit_bayes.validation import check_interval, check_positive

__all__ = ["Health", "HealthThresholds", "Reason", "RunRecord", "assess"]

VERDICTS = ("ok", "warning", "failed")
#: the trace of (theta - c) . grad E / P that a gradient sampler's chain diagnostics record (ChainDiagnostics)
CONFIG_TEMPERATURE = "config_temperature"


@dataclass
class Reason:
    """One problem: a short ``code``, its ``severity`` (``"warning"`` or ``"failed"``), what was
    seen (``message``) and what to do about it (``advice``)."""

    code: str
    severity: str
    message: str
    advice: str


@dataclass
class Health:
    """The verdict, its reasons and the draws kept (per chain and over every chain)."""

    verdict: str
    reasons: list[Reason]
    draws_per_chain: int
    draws_total: int
    chains: int
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def level(self) -> int:
        """0 ok, 1 warning, 2 failed (for loggers that take numbers only)."""
        return VERDICTS.index(self.verdict)

    def reason_lines(self) -> list[str]:
        """One ``"code: message"`` line per reason (for run summaries and tables)."""
        return [f"{reason.code}: {reason.message}" for reason in self.reasons]

    def report(self) -> str:
        """A short console summary: the verdict, then each reason with its advice."""
        lines = [f"Posterior health: {self.verdict.upper()} ({self.chains} chain(s), {self.draws_per_chain} draw(s) "
                 f"each, {self.draws_total} in all)"]
        for reason in self.reasons:
            lines.append(f"  [{reason.severity}] {reason.code}: {reason.message}")
            lines.append(f"      fix: {reason.advice}")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


@dataclass
class HealthThresholds:
    """Where each check draws its line (see the module docstring)."""

    rhat_warn: float = 1.01
    rhat_fail: float = 1.05
    min_ess: float = 100.0
    trend_p: float = 1e-3
    mode_sd: float = 3.0
    acceptance_band: tuple[float, float] = (0.1, 0.95)
    divergence_sd: float = 10.0
    temperature_warn: float = 0.1
    temperature_fail: float = 0.5
    temperature_z: float = 4.0

    def __post_init__(self) -> None:
        check_interval("rhat_warn", self.rhat_warn, 1.0)
        check_interval("rhat_fail", self.rhat_fail, self.rhat_warn, low_closed=True)
        check_positive("min_ess", self.min_ess)
        check_interval("trend_p", self.trend_p, 0.0, 1.0)
        check_positive("mode_sd", self.mode_sd)
        check_positive("divergence_sd", self.divergence_sd)
        check_positive("temperature_warn", self.temperature_warn)
        check_interval("temperature_fail", self.temperature_fail, self.temperature_warn, low_closed=True)
        check_positive("temperature_z", self.temperature_z)
        band = tuple(self.acceptance_band)
        if len(band) != 2:
            raise ValueError(f"acceptance_band must be (low, high), got {self.acceptance_band!r}")
        low = check_interval("acceptance_band[0]", band[0], 0.0, 1.0, low_closed=True)
        check_interval("acceptance_band[1]", band[1], low, 1.0, high_closed=True)


@dataclass
class RunRecord:
    """What :func:`assess` reads about a finished fit.

    ``traces``: per-chain traces ``(chains, draws)`` by name, as :class:`ChainDiagnostics` records
    them (``heldout_lpd``, ``point_lpd_<j>``, ``energy``); ``function_space``: the names among them
    that are function-space quantities; ``diagnostics``: their R-hat and ESS (``rhat/<name>``,
    ``ess_bulk/<name>``); ``acceptance``: rate per layer or block label; ``posterior_sampler``:
    False for an optimiser (MAP, variational inference, SWAG), whose chains are not meant to agree; ``notes``:
    what the sampler says of its target, passed on to the health notes; ``heldout_nlpd``,
    ``map_heldout_nlpd``: the validation NLPD of the posterior predictive and of the MAP baseline (None when
    either was not measured); ``stacking``: chain stacking's ``weights`` and validation NLPDs
    (``val_nlpd_equal``, ``val_nlpd_stacked``), when a :class:`~lit_bayes.callbacks.ChainStacking` ran;
    ``planned_steps``: the steps the run was set to take (``max_epochs`` / ``max_steps``; None when unknown).
    """

    steps: int
    burn_in: int
    thinning: int
    chains: int
    draws_per_chain: int
    traces: dict[str, Tensor] = field(default_factory=dict)
    function_space: tuple[str, ...] = ()
    diagnostics: dict[str, float] = field(default_factory=dict)
    acceptance: dict[str, float] = field(default_factory=dict)
    nonfinite_steps: int = 0
    uses_draws: bool = True
    independent_chains: bool = True
    posterior_sampler: bool = True
    notes: tuple[str, ...] = ()
    planned_steps: int | None = None
    heldout_nlpd: float | None = None
    map_heldout_nlpd: float | None = None
    stacking: dict | None = None


def assess(record: RunRecord, thresholds: HealthThresholds | None = None) -> Health:
    """The :class:`Health` of the run that ``record`` describes."""
    limits = thresholds or HealthThresholds()
    reasons: list[Reason] = []
    notes: list[str] = list(record.notes)
    if record.planned_steps is not None and record.steps < record.planned_steps:
        reasons.append(Reason(
            "stopped_early", "warning",
            f"the run stopped at step {record.steps} of the {record.planned_steps} it was set to take "
            f"(trainer.max_time, or an interruption): {record.draws_per_chain} draw(s) per chain were kept, fewer "
            "than planned, and the verdict judges those",
            "continue it from its checkpoint (--ckpt_path <run>/checkpoints/last.ckpt) or raise trainer.max_time",
        ))
    if record.uses_draws:
        reasons += _draw_reasons(record)
    if record.nonfinite_steps:
        reasons.append(Reason(
            "nonfinite", "failed", f"NaN or infinite energies at {record.nonfinite_steps} step(s)",
            "lower the step size (or proposal variance); check the data for extreme values",
        ))
    if not record.posterior_sampler:
        notes.append("an optimiser (MAP, variational inference, SWAG), not a sampler: its chains are not meant to "
                     "agree, convergence is not assessed")
    elif not record.independent_chains:
        notes.append("resampled particles: chain diagnostics do not apply (see diag/particle_ess_*)")
    elif record.draws_per_chain >= MIN_DRAWS:
        reasons += _chain_reasons(record, limits)
    if record.acceptance:
        reasons += _acceptance_reasons(record.acceptance, limits)
    if record.posterior_sampler and None not in (record.heldout_nlpd, record.map_heldout_nlpd):
        reasons += _map_reasons(record.heldout_nlpd, record.map_heldout_nlpd)
    verdict = "failed" if any(r.severity == "failed" for r in reasons) else "warning" if reasons else "ok"
    return Health(verdict, reasons, record.draws_per_chain, record.draws_per_chain * record.chains,
                  record.chains, notes)


def _draw_reasons(record: RunRecord) -> list[Reason]:
    if record.draws_per_chain == 0:
        return [Reason(
            "no_draws", "failed",
            f"no posterior draws kept: the run took {record.steps} steps (per process) and burn_in is "
            f"{record.burn_in}",
            "lower burn_in (burn_in: 0.5 keeps the second half of any run), run longer (max_epochs / max_steps), "
            "or give num_draws instead of thinning",
        )]
    reasons = []
    if record.draws_per_chain < MIN_DRAWS:
        reasons.append(Reason(
            "too_few_draws", "warning",
            f"{record.draws_per_chain} draw(s) per chain: R-hat and ESS need at least {MIN_DRAWS}",
            "keep more draws: lower thinning, set num_draws, or run longer",
        ))
    if record.chains == 1 and record.independent_chains and record.posterior_sampler:
        reasons.append(Reason(
            "single_chain", "warning", "one chain: convergence cannot be checked across chains",
            "run 4 or more chains (num_chains), started apart (init: prior)",
        ))
    return reasons


def _unchecked_reason(record: RunRecord) -> Reason:
    """``unchecked``: several chains kept draws, but none of their function-space traces has an R-hat."""
    if record.function_space:
        points = max(record.traces[name].shape[-1] for name in record.function_space)
        recorded = (f"the chain diagnostics recorded {points} point(s) per chain of the function-space traces "
                    f"(R-hat needs at least {MIN_DRAWS})")
    else:
        recorded = "no function-space trace was recorded"
    return Reason(
        "unchecked", "warning", f"convergence not checked: {recorded}, so whether the chains agree is unknown",
        "record the chain diagnostics more often (diagnostics: every_n_steps) or run longer; without a "
        "ChainDiagnostics callback, add lit_bayes.callbacks.ChainDiagnostics",
    )


def _chain_reasons(record: RunRecord, limits: HealthThresholds) -> list[Reason]:
    reasons = []
    rhats = {n: record.diagnostics[f"rhat/{n}"] for n in record.function_space if f"rhat/{n}" in record.diagnostics}
    if rhats:
        worst = max(rhats, key=rhats.get)
        if rhats[worst] > limits.rhat_warn:
            severity = "failed" if rhats[worst] > limits.rhat_fail else "warning"
            line = limits.rhat_fail if severity == "failed" else limits.rhat_warn
            if record.chains == 1:
                seen = (f"split R-hat {rhats[worst]:.3f} of the chain's two halves on {worst} (above {line:g}): "
                        "the one chain is not stationary, its halves disagree about the predictive")
            else:
                seen = (f"function-space R-hat {rhats[worst]:.3f} on {worst} (above {line:g}): the chains "
                        "disagree about the predictive")
            reasons.append(Reason(
                "rhat", severity, seen,
                "run longer with a longer burn-in; if chains sit in separate modes, more steps alone may not help",
            ))
        ess = {n: record.diagnostics[f"ess_bulk/{n}"] for n in rhats if f"ess_bulk/{n}" in record.diagnostics}
        if ess and min(ess.values()) < limits.min_ess:
            low = min(ess, key=ess.get)
            reasons.append(Reason(
                "low_ess", "warning", f"bulk ESS {ess[low]:.0f} on {low} (below {limits.min_ess:g})",
                "run longer, keep more draws (num_draws) or more chains",
            ))
    elif record.chains >= 2:
        reasons.append(_unchecked_reason(record))
    space = next((n for n in ("heldout_lpd", "energy") if n in record.traces), None)
    if space is not None:
        reasons += _stationarity_reasons(record.traces[space], space, limits, record.stacking)
    if "energy" in record.traces:
        reasons += _divergence_reasons(record.traces["energy"], limits)
    if CONFIG_TEMPERATURE in record.traces and record.traces[CONFIG_TEMPERATURE].shape[-1] >= MIN_DRAWS:
        reasons += _temperature_reasons(record.traces[CONFIG_TEMPERATURE], limits)
    return reasons


def _halves(trace: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per-chain means of the first and second half of the draws."""
    values = trace.detach().cpu().double().numpy()
    half = values.shape[1] // 2
    return values[:, :half].mean(1), values[:, half:2 * half].mean(1)


def _stationarity_reasons(trace: Tensor, name: str, limits: HealthThresholds,
                          stacking: dict | None = None) -> list[Reason]:
    reasons = []
    values = trace.detach().cpu().double().numpy()
    chains = values.shape[0]
    if chains >= 3:
        first, second = _halves(trace)
        difference = second - first
        spread = difference.std(ddof=1)
        if spread > 0:
            t = difference.mean() / (spread / np.sqrt(chains))
            p = 2 * stats.t.sf(abs(t), chains - 1)
            if p < limits.trend_p:
                reasons.append(Reason(
                    "trend", "warning",
                    f"{name} still {'rises' if t > 0 else 'falls'} over the kept draws (second half minus first "
                    f"{difference.mean():+.3g}, t = {t:.1f} over {chains} chains, p = {p:.1g})",
                    "the burn-in was too short: raise burn_in (e.g. burn_in: 0.5) or run longer",
                ))
    within = values.var(axis=1, ddof=1).mean()
    means = values.mean(axis=1)
    scale = np.sqrt(within) + 1e-12 * (1.0 + np.abs(means).max())
    apart = np.abs(means - np.median(means)) > limits.mode_sd * scale
    if apart.any():
        reasons.append(Reason(
            "separate_modes", "failed",
            f"{int(apart.sum())} of {chains} chains sit in separate modes: their mean {name} differs from the "
            f"median chain's by more than {limits.mode_sd:g} within-chain standard deviations "
            f"(median {np.median(means):.4g}; {_mode_groups(means, apart)})" + _stacking_line(stacking),
            "the chains do not mix between modes, so the averaged predictive reflects where they started: weigh "
            "them by how well they predict (lit_bayes.callbacks.ChainStacking in trainer.callbacks: "
            "test/stacked/* beside the equal weights), explore between modes with cyclical SG-MCMC "
            "(model.init_args.schedule: cyclical, schedule_options: {cycle_length, exploration}), let hotter replicas "
            "carry states across the barriers (model.class_path: lit_bayes.ReplicaExchangeSGMCMC, "
            "model.init_args.num_temperatures, max_temperature), run many more "
            "chains (model.init_args.num_chains), or use a smaller network (model.init_args.model) or a "
            "stronger prior (model.init_args.prior)",
        ))
    return reasons


def _divergence_reasons(energy: Tensor, limits: HealthThresholds) -> list[Reason]:
    first, second = _halves(energy)
    values = energy.detach().cpu().double().numpy()
    half = values.shape[1] // 2
    spread = np.sqrt(np.median(values[:, :half].var(axis=1, ddof=1)))  # robust to the runaway chains
    rising = second - first > limits.divergence_sd * spread
    if not rising.any():
        return []
    return [Reason(
        "divergence", "failed",
        f"the energy of {int(rising.sum())} of {len(rising)} chains rose by more than {limits.divergence_sd:g} "
        "within-chain standard deviations over the kept draws",
        "the step size is too large for this posterior: lower step_size or use a decaying schedule (chains "
        "started at a mode, init: template, rise while they thermalize: raise burn_in instead)",
    )]


def configurational_temperature(trace: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per-chain means of a ``config_temperature`` trace ``(chains, draws)`` and their Monte Carlo standard
    errors (the chain's standard deviation over the square root of its draws over the integrated
    autocorrelation time, :func:`~lit_bayes.diagnostics.integrated_autocorrelation_time`)."""
    values = trace.detach().cpu().double().numpy()
    spread = values.std(axis=1, ddof=1)
    tau = float(integrated_autocorrelation_time(values)) if (spread > 0).all() else 1.0
    return values.mean(axis=1), spread * np.sqrt(max(tau, 1.0) / values.shape[1])


def _temperature_reasons(trace: Tensor, limits: HealthThresholds) -> list[Reason]:
    means, errors = configurational_temperature(trace)
    pooled, pooled_error = means.mean(), np.sqrt((errors**2).sum()) / len(means)
    off = abs(pooled - 1.0)
    if off <= limits.temperature_warn or off <= limits.temperature_z * pooled_error:
        return []
    severity = "failed" if off > limits.temperature_fail else "warning"
    worst = np.argsort(-np.abs(means - 1.0))[:4]
    listed = ", ".join(f"chain {c}: {means[c]:.3f} ± {errors[c]:.3f}" for c in worst)
    if pooled > 1.0:
        seen, advice = "wider", (
            "the step is too large for this posterior (its discretisation error, or minibatch gradient noise "
            "larger than the injected noise): lower model.init_args.step_size, use larger batches "
            "(data.init_args.batch_size) or let the step decay (model.init_args.schedule: polynomial)")
    else:
        seen, advice = "narrower", (
            "the chains have not spread to the posterior's width yet (still leaving a narrow start, or moving too "
            "slowly): run longer with a longer burn-in (trainer.max_epochs, model.init_args.burn_in), raise the "
            "step, or start from prior draws (model.init_args.init: prior)")
    return [Reason(
        "temperature", severity,
        f"the draws' configurational temperature is {pooled:.3f} ± {pooled_error:.3f}, not 1 (the mean of "
        f"(theta - c) . grad E / P, which exact draws of the target give; {listed}): the draws are {seen} than the "
        "target, however well the chains agree",
        advice,
    )]


def _acceptance_reasons(rates: dict[str, float], limits: HealthThresholds) -> list[Reason]:
    low, high = limits.acceptance_band
    outside = {label: rate for label, rate in rates.items() if not low <= rate <= high}
    if not outside:
        return []
    listed = ", ".join(f"{label}: {rate:.2f}" for label, rate in outside.items())
    return [Reason(
        "acceptance", "warning", f"Metropolis acceptance outside [{low:g}, {high:g}] ({listed})",
        "tune the proposal: lower the step size / proposal variance where acceptance is low, raise it where "
        "it is near 1 (or turn on adaptation)",
    )]


def _map_reasons(nlpd: float, map_nlpd: float) -> list[Reason]:
    if not nlpd > map_nlpd:
        return []
    return [Reason(
        "worse_than_map", "warning",
        f"the posterior predictive's validation NLPD {nlpd:.4f} is above the MAP estimate's {map_nlpd:.4f} "
        "(the same network, likelihood and prior)",
        "the prior is the usual cause: learn its scales (model.init_args.prior: {class_path: "
        "lit_bayes.LearnedScalePrior}) or scale it by fan-in (model.init_args.prior.init_args.fan_in_scaled: "
        "true); standardise pixel-like inputs with one scale (data.init_args.standardize: global) so rarely "
        "active inputs do not get large values; a cold posterior (model.init_args.temperature below 1) is a model choice: report "
        "the T = 1 figures beside it",
    )]


#: chains named one by one in the separate_modes message
LISTED_CHAINS = 8


def _mode_groups(means: np.ndarray, apart: np.ndarray) -> str:
    """The chains apart from the median, with their mean held-out density, the furthest first."""
    order = [int(k) for k in np.argsort(-np.abs(means - np.median(means))) if apart[k]]
    listed = ", ".join(f"chain {k}: {means[k]:.4g}" for k in order[:LISTED_CHAINS])
    return listed + (f" and {len(order) - LISTED_CHAINS} more" if len(order) > LISTED_CHAINS else "")


def _stacking_line(stacking: dict | None) -> str:
    """What chain stacking made of the chains: the heaviest weights and the validation NLPD it moves."""
    if not stacking:
        return ""
    weights = np.asarray(stacking["weights"])
    top = np.argsort(-weights)[:4]
    listed = ", ".join(f"chain {int(k)}: {weights[k]:.3f}" for k in top)
    return (f"; stacking on the validation split weighs {listed} and moves the validation NLPD from "
            f"{stacking['val_nlpd_equal']:.4f} (equal weights) to {stacking['val_nlpd_stacked']:.4f}")
