"""Diagnostic figures (reliability, traces, acceptance, most uncertain points) and ``DiagnosticPlots``.

Figures are built as plain ``matplotlib.figure.Figure`` objects, never through ``pyplot``:
they use no interactive backend, are never shown, are not registered in pyplot's global
figure list (so nothing leaks when many are made) and render to PNG with the Agg canvas.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger, TensorBoardLogger, WandbLogger
from matplotlib.figure import Figure
from torch import Tensor

from lit_bayes.callbacks.acceptance_monitor import AcceptanceMonitor
from lit_bayes.callbacks.chain_diagnostics import ChainDiagnostics
from lit_bayes.validation import check_int

__all__ = [
    "DiagnosticPlots",
    "acceptance_plot",
    "log_figure",
    "plottable",
    "reliability_diagram",
    "trace_axes_labels",
    "trace_plot",
    "uncertain_points_plot",
]

Array = Tensor | np.ndarray
PROB_TOLERANCE = 1e-5  # probabilities computed as exp(log p) may overshoot [0, 1] by rounding


def _numpy(value: Array) -> np.ndarray:
    return value.detach().cpu().numpy() if isinstance(value, Tensor) else np.asarray(value)


def _check_classification(probs: Array, target: Array) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``probs`` (N, C) and integer ``target`` (N,) with labels in [0, C)."""
    p, t = _numpy(probs).astype(np.float64), _numpy(target)
    if p.ndim != 2 or p.shape[0] == 0 or p.shape[1] < 2:
        raise ValueError(f"probs must have shape (N, C) with N >= 1 and C >= 2, got {p.shape}")
    if not np.isfinite(p).all() or (p < -PROB_TOLERANCE).any() or (p > 1 + PROB_TOLERANCE).any():
        raise ValueError("probs must hold probabilities: finite values in [0, 1]")
    if t.shape != (p.shape[0],) or not np.issubdtype(t.dtype, np.integer):
        raise ValueError(f"target must be an integer array of shape ({p.shape[0]},), got {t.dtype} {t.shape}")
    if (t < 0).any() or (t >= p.shape[1]).any():
        raise ValueError(f"target holds labels in [{t.min()}, {t.max()}], allowed are 0..{p.shape[1] - 1}")
    return np.clip(p, 0.0, 1.0), t


def reliability_diagram(probs: Array, target: Array, n_bins: int = 15) -> Figure:
    """Top-label reliability diagram: accuracy against confidence in ``n_bins`` equal-width bins.

    The upper axes has one bar per bin (its accuracy; 0 for an empty bin) beside the diagonal of
    perfect calibration; the lower axes the number of points per bin. The title gives the L1
    expected calibration error, sum_b (n_b / N) |acc_b - conf_b|, binned as torchmetrics'
    ``MulticlassCalibrationError`` (bin b holds confidences in [b/n_bins, (b+1)/n_bins), 1 in the last).
    """
    p, t = _check_classification(probs, target)
    check_int("n_bins", n_bins, 1)
    confidence, correct = p.max(axis=1), (p.argmax(axis=1) == t).astype(np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    bins = np.clip(np.searchsorted(edges, confidence, side="right") - 1, 0, n_bins - 1)
    counts = np.bincount(bins, minlength=n_bins)
    correct_sum = np.bincount(bins, weights=correct, minlength=n_bins)
    confidence_sum = np.bincount(bins, weights=confidence, minlength=n_bins)
    ece = np.abs(correct_sum - confidence_sum).sum() / len(t)
    accuracy = correct_sum / np.maximum(counts, 1)
    centers, width = (edges[:-1] + edges[1:]) / 2, 1.0 / n_bins

    fig = Figure(figsize=(5, 6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    top.bar(centers, accuracy, width=width, edgecolor="black", label="accuracy")
    top.plot([0, 1], [0, 1], linestyle="--", color="gray", label="perfect calibration")
    top.set(ylim=(0, 1), ylabel="accuracy", title=f"Reliability diagram (ECE = {ece:.4f})")
    top.legend(loc="upper left")
    bottom.bar(centers, counts, width=width, edgecolor="black", color="tab:gray")
    bottom.set(xlim=(0, 1), xlabel="confidence (top-label probability)", ylabel="points in bin")
    return fig


SAMPLE_STEPS = "recorded sample step (after burn-in)"
TRAINING_STEPS = "training step"
LOG_DENSITY = r"$\log p(y \mid x, \theta)$ (nats)"
# the traces of ChainDiagnostics: name, or prefix of numbered names, -> (title, y label, x label);
# "<k>" stands for the number
TRACE_AXES = {
    "energy": (r"Training energy $U(\theta)$ of each chain", r"energy $U(\theta)$", SAMPLE_STEPS),
    "projection_": (r"Random projection <k> of the weights: $\theta \cdot u_{<k>}$, "
                    r"$u_{<k>}$ a fixed random unit vector", r"$\theta \cdot u_{<k>}$", SAMPLE_STEPS),
    "heldout_lpd": (r"Held-out log predictive density: mean of $\log p(y \mid x, \theta)$ over the held-out batch",
                    LOG_DENSITY, SAMPLE_STEPS),
    "point_lpd_": (r"Log predictive density $\log p(y \mid x, \theta)$ of fixed held-out point <k>",
                   LOG_DENSITY, SAMPLE_STEPS),
    "val_nlpd": (r"Validation NLPD: mean $-\log p(y \mid x, \theta)$ of the validation points under each chain",
                 "NLPD (nats)", "validation run (after burn-in)"),
    "particle_ess": ("Particle effective sample size before reweighting, as a fraction of the particles",
                     "ESS / particles", TRAINING_STEPS),
    "resampled": ("Whether the step resampled the particles", "resampled (1: yes)", TRAINING_STEPS),
    "log_evidence": ("Running estimate of the log normalising constant", "log evidence (nats)", TRAINING_STEPS),
}


def trace_axes_labels(name: str) -> tuple[str, str, str]:
    """(title, y label, x label) of the trace ``name`` (:data:`TRACE_AXES`; other names label themselves)."""
    if name in TRACE_AXES:
        return TRACE_AXES[name]
    for prefix, labels in TRACE_AXES.items():
        number = name.removeprefix(prefix)
        if prefix.endswith("_") and number != name and number.isdigit():
            return tuple(label.replace("<k>", number) for label in labels)
    return name, name, "recorded draw"


def plottable(trace: Array) -> bool:
    """Whether a ``(chains, draws)`` trace draws a line: at least 2 draws and a finite value."""
    array = _numpy(trace)
    return array.ndim == 2 and array.shape[1] >= 2 and bool(np.isfinite(array).any())


def trace_plot(traces: Mapping[str, Array]) -> Figure:
    """One axes per named ``(chains, draws)`` trace, one line per chain, titled and labelled by
    :func:`trace_axes_labels`. Traces that draw no line (fewer than 2 draws, no finite value: see
    :func:`plottable`) get no axes; the figure's title names them."""
    if not traces:
        raise ValueError("traces is empty: pass at least one named (chains, draws) trace")
    arrays = {name: _numpy(trace) for name, trace in traces.items()}
    for name, array in arrays.items():
        if array.ndim != 2 or 0 in array.shape:
            raise ValueError(f"traces[{name!r}] must have shape (chains, draws) with both >= 1, got {array.shape}")
    shown = {name: array for name, array in arrays.items() if plottable(array)}
    if not shown:
        raise ValueError(f"traces: none has 2 or more draws with a finite value ({', '.join(arrays)})")
    fig = Figure(figsize=(8, 2.2 * len(shown) + 0.8), layout="constrained")
    axes = fig.subplots(len(shown), 1, squeeze=False)[:, 0]
    for ax, (name, array) in zip(axes, shown.items()):
        for values in array:
            ax.plot(values, linewidth=0.8)
        title, ylabel, xlabel = trace_axes_labels(name)
        ax.set(title=title, ylabel=ylabel, xlabel=xlabel)
        ax.title.set_fontsize("medium")
    left_out = [name for name in arrays if name not in shown]
    note = f"\nnot shown (fewer than 2 draws or no finite value): {', '.join(left_out)}" if left_out else ""
    fig.suptitle(f"Per-chain traces (one line per chain){note}")
    return fig


def acceptance_plot(rates_by_layer: Mapping[str, float]) -> Figure:
    """Bar chart of the Metropolis-Hastings acceptance rate of each layer (or block)."""
    if not rates_by_layer:
        raise ValueError("rates_by_layer is empty: pass at least one layer's acceptance rate")
    for layer, rate in rates_by_layer.items():
        if not 0.0 <= float(rate) <= 1.0:
            raise ValueError(f"rates_by_layer[{layer!r}] must be an acceptance rate in [0, 1], got {rate!r}")
    names, rates = list(rates_by_layer), [float(r) for r in rates_by_layer.values()]
    fig = Figure(figsize=(max(4.0, 0.6 * len(names) + 2), 3.5), layout="constrained")
    ax = fig.subplots()
    ax.bar(range(len(names)), rates, edgecolor="black")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set(ylim=(0, 1), xlabel="layer (block of parameters)", ylabel="acceptance rate (accepted / proposed)",
           title="Metropolis-Hastings acceptance rate by layer")
    return fig


def uncertain_points_plot(probs: Array, target: Array, k: int = 16) -> Figure:
    """Predictive class probabilities of the ``k`` points with the highest predictive entropy.

    One small bar chart per point (most uncertain first), one bar per class, the true class in
    orange; each title gives the point's index and its predictive entropy
    H = -sum_c p(c) log p(c) in nats (at most log C, all classes equally likely).
    """
    p, t = _check_classification(probs, target)
    check_int("k", k, 1)
    entropy = -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=1)
    chosen = np.argsort(-entropy, kind="stable")[: min(k, len(t))]
    cols = min(4, len(chosen))
    rows = math.ceil(len(chosen) / cols)
    fig = Figure(figsize=(max(2.6 * cols, 6.5), 2.3 * rows + 0.8), layout="constrained")
    axes = fig.subplots(rows, cols, sharey=True, squeeze=False).ravel()
    classes = np.arange(p.shape[1])
    for ax, i in zip(axes, chosen):
        colors = np.where(classes == t[i], "tab:orange", "tab:blue")
        ax.bar(classes, p[i], color=colors)
        ax.set(ylim=(0, 1), xticks=classes, xlabel="class", ylabel="predictive probability",
               title=f"point {i}: H = {entropy[i]:.2f} nats")
        ax.title.set_fontsize("medium")
    for ax in axes[len(chosen):]:
        fig.delaxes(ax)
    fig.suptitle(r"Points with the highest predictive entropy $H = -\sum_c p(c) \log p(c)$" "\n"
                 f"(at most log {p.shape[1]} = {math.log(p.shape[1]):.2f} nats); true class in orange")
    return fig


def log_figure(loggers: Sequence[Logger], key: str, fig: Figure, step: int) -> None:
    """Send ``fig`` to every logger that takes images: W&B (``log_image``) and TensorBoard
    (``add_figure``); other loggers are skipped."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            logger.log_image(key=key, images=[fig], step=step)
        elif isinstance(logger, TensorBoardLogger):
            logger.experiment.add_figure(key, fig, global_step=step, close=False)


class DiagnosticPlots(Callback):
    """Saves diagnostic figures as PNG next to ``summary.json`` (``trainer.log_dir`` or
    ``default_root_dir``) and logs them as ``plots/<name>`` images (see :func:`log_figure`).

    - At test end (classification): ``reliability_diagram.png`` and ``uncertain_points.png`` from
      the test predictive that :class:`PredictiveMarginal` hands over (gathered on CPU).
    - At fit end: ``traces.png`` from the traces of a :class:`ChainDiagnostics` in ``trainer.callbacks``,
      and ``acceptance.png`` (post-burn-in rate per layer) from an :class:`AcceptanceMonitor`.

    Only the global-zero process writes; under DDP it plots the test points of its own shard.

    Args:
        n_bins: bins of the reliability diagram.
        k: number of most uncertain test points shown.
    """

    def __init__(self, n_bins: int = 15, k: int = 16) -> None:
        self.n_bins = check_int("n_bins", n_bins, 1)
        self.k = check_int("k", k, 1)
        self._probs: list[Tensor] = []
        self._targets: list[Tensor] = []
        self._directory: Path | None = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        # on every process: trainer.log_dir is a collective call under DDP
        self._directory = Path(trainer.log_dir or trainer.default_root_dir)

    def _save(self, trainer, name: str, fig: Figure) -> None:
        self._directory.mkdir(parents=True, exist_ok=True)
        fig.savefig(self._directory / f"{name}.png", dpi=100)
        log_figure(trainer.loggers, f"plots/{name}", fig, trainer.global_step)

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._probs, self._targets = [], []

    def on_predictive(self, trainer, pl_module, stage, predictive, target, inputs=None) -> None:
        if stage == "test" and predictive.log_probs is not None:
            self._probs.append(predictive.probs.detach().cpu())
            self._targets.append(target.detach().cpu())

    def on_test_end(self, trainer, pl_module) -> None:
        if not self._probs or not trainer.is_global_zero:
            return
        probs, target = torch.cat(self._probs), torch.cat(self._targets)
        self._save(trainer, "reliability_diagram", reliability_diagram(probs, target, self.n_bins))
        self._save(trainer, "uncertain_points", uncertain_points_plot(probs, target, self.k))
        self._probs, self._targets = [], []

    def on_fit_end(self, trainer, pl_module) -> None:
        diagnostics = next((c for c in trainer.callbacks if isinstance(c, ChainDiagnostics)), None)
        traces = diagnostics.traces() if diagnostics is not None else {}
        if any(plottable(trace) for trace in traces.values()) and trainer.is_global_zero:
            self._save(trainer, "traces", trace_plot(traces))
        monitor = next((c for c in trainer.callbacks if isinstance(c, AcceptanceMonitor)), None)
        rates = monitor.rates()["layer"] if monitor is not None else {}
        if rates and trainer.is_global_zero:
            self._save(trainer, "acceptance", acceptance_plot(rates))
