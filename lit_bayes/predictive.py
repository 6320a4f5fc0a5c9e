"""Posterior-predictive marginalisation over weighted parameter samples (FNBG spec §3).

For samples theta_1..theta_S with normalised weights w_s (w_s = 1/S for MCMC, particle
weights for SMC), the posterior predictive is

    p_bar(y | x) = sum_s w_s p(y | x, theta_s)                        (FNBG Eq. 3.5, 1/v average)

computed in log space, ``log p_bar = logsumexp_s(log w_s + log p(y | x, theta_s))``, one
chunk of samples at a time so memory stays bounded, every chunk in one vectorised call; on CPU
also one tile of points at a time, so that a chunk's activations stay in the processor's caches.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from lit_bayes import logspace
from lit_bayes.posterior import TargetLogits
from lit_bayes.predictive_kernel import FusedPredictive
from lit_bayes.validation import check_int

__all__ = ["Predictive", "default_chunk_size", "default_tile_points", "marginal_predictive", "posterior_samples",
           "uniform_log_weights"]


@dataclass
class Predictive:
    """The predictive of one batch of points (B of them).

    Classification: ``log_probs`` (B, C) of p_bar, ``entropy`` H[p_bar] and
    ``mutual_information`` H[p_bar] - E_s H[p_s] (the epistemic part), all in nats.
    Regression: ``mean`` and ``variance`` (B,) of the Gaussian mixture.
    Both: ``log_prob_target`` (B,), log p_bar(y_i | x_i) when targets were given.
    With ``keep_per_sample=True``: ``sample_log_probs`` (S, B, C) or ``sample_means`` (S, B).
    """

    log_prob_target: Tensor | None = None
    log_probs: Tensor | None = None
    entropy: Tensor | None = None
    mutual_information: Tensor | None = None
    mean: Tensor | None = None
    variance: Tensor | None = None
    sample_log_probs: Tensor | None = None
    sample_means: Tensor | None = None

    @property
    def probs(self) -> Tensor:
        return self.log_probs.exp()


def uniform_log_weights(num_samples: int, device=None) -> Tensor:
    """log(1/S) for S equally weighted samples."""
    return torch.full((num_samples,), -math.log(num_samples), device=device)


def posterior_samples(trainer, pl_module) -> tuple[dict[str, Tensor], Tensor]:
    """The samples to marginalise over and their normalised log-weights.

    - A sampler that predicts with its current state (``predict_with_current_state``: the
      Feynman-Kac particles with their weights) or keeps no draws by design (``keeps_draws``
      False: MAP, a deep ensemble): ``pl_module.current_samples()``.
    - Otherwise the draws of the first callback with a ``samples(pl_module)`` method that
      returns some (:class:`PosteriorSamples`, or the draws ``lit-bayes predict`` reads back
      from a run).
    - No draw kept: during validation and test, the chains' current states (a run still in
      its burn-in, or one whose burn-in outlasted it, which its health verdict reports; with
      no sample-keeping callback at all, a warning says so). In predict, or without a
      trainer, a ``ValueError``: a posterior predictive is never silently the last states.

    With several processes, every process gets the samples of all of them (collective
    call), equally weighted by process."""
    keeps_draws = getattr(pl_module, "keeps_draws", True) and not pl_module.predict_with_current_state
    callbacks = getattr(trainer, "callbacks", []) if trainer is not None else []
    stores = [c for c in callbacks if hasattr(c, "samples")] if keeps_draws else []
    kept = next((draws for draws in (c.samples(pl_module) for c in stores) if draws is not None), None)
    if kept is None and keeps_draws:
        if trainer is None or getattr(trainer, "predicting", False):
            raise ValueError(
                f"no kept posterior draws to predict with: {type(pl_module).__name__} keeps its post-burn-in states "
                "in a sample-keeping callback and none holds any (predicting with the chains' current states would "
                "not be the posterior predictive). Fit with lit_bayes.callbacks.PosteriorSamples and a burn-in "
                "below the run's steps, or reload a finished run with its draws: lit_bayes.load_run(run_dir), "
                "or `lit-bayes predict -c <run_dir>/config.yaml`."
            )
        if not stores:
            rank_zero_warn(
                f"no sample-keeping callback (lit_bayes.callbacks.PosteriorSamples): {type(pl_module).__name__} is "
                "evaluated at the chains' current states, not over posterior draws"
            )
        elif getattr(trainer, "testing", False):
            rank_zero_warn(
                "no posterior draw was kept (the burn-in outlasted the run?): the test metrics are those of the "
                "chains' current states, not of the posterior predictive; see the run's health verdict"
            )
    samples, log_weights = kept if kept is not None else pl_module.current_samples()
    world = trainer.world_size if trainer is not None else 1
    if world == 1:
        return samples, log_weights
    gathered = {name: pl_module.gather_across_processes(p) for name, p in samples.items()}
    return gathered, pl_module.gather_across_processes(log_weights) - math.log(world)


# samples x points per chunk on CPU: each (chunk, B, width) activation (8 MB at width 10 in float32)
# stays in malloc's reused heap; fresh ~40 MB activations page-fault at every chunk. 1,000 samples x
# 10,000 points (benchmarks/predictive_marginal.py, 2-core Xeon): chunks of 20 took 2.6 s, of 10 3.1 s,
# of 40 2.7 s, of 5 3.3 s (best of three, interleaved)
CPU_CHUNK_POINTS = 200_000
ACCELERATOR_CHUNK = 256
# points per tile on CPU: a tile's activations stay in the caches between the first layer's product and
# the small layers above it. The same 1,000 x 10,000 case on a 2-core AMD EPYC, 2 threads: tiles of 2,000
# points (chunks of 100 samples) 1.20 s, 0.78 of the sgemm peak, against 1.53 s untiled (chunks of 20) in
# the same run of benchmarks/predictive_marginal.py; tiles of 1,000 1.19-1.21 s, of 500 1.26 s, of 4,000
# 1.33 s (in other runs, each beside an untiled 1.42-1.73 s)
CPU_TILE_POINTS = 2_000


def default_chunk_size(points: int, device: torch.device) -> int:
    """Samples per chunk when none is given: about ``CPU_CHUNK_POINTS / points`` on CPU,
    ``ACCELERATOR_CHUNK`` elsewhere."""
    if torch.device(device).type == "cpu":
        return max(1, CPU_CHUNK_POINTS // max(points, 1))
    return ACCELERATOR_CHUNK


def default_tile_points(points: int, device: torch.device) -> int:
    """Points per tile when none is given: ``CPU_TILE_POINTS`` on CPU, all of them elsewhere."""
    return CPU_TILE_POINTS if torch.device(device).type == "cpu" else max(points, 1)


def _chunks(num: int, size: int):
    for start in range(0, num, size):
        yield slice(start, min(start + size, num))


TARGET_ENTRIES = TargetLogits()  # x[..., i, y_i] of (..., B, C) tensors, class-major ones by flat index


def _logsumexp_over_samples(x: Tensor) -> Tensor:
    """``logsumexp`` of ``x`` ``(s, B, C)`` over the samples, overwriting ``x``, reduced in its memory order: a
    class-major ``x`` (the transposed view of a contiguous ``(s, C, B)``, as ``MLP.stacked_forward`` gives)
    as ``(s, C, B)``. Reducing the transposed view directly was ~15x slower (1,000,000 values on CPU)."""
    if not x.is_contiguous() and x.transpose(1, 2).is_contiguous():
        return logspace.logsumexp(x.transpose(1, 2), 0, overwrite=True).T
    return logspace.logsumexp(x, 0, overwrite=True)


@torch.no_grad()
def marginal_predictive(
    sampler,
    samples: dict[str, Tensor],
    log_weights: Tensor,
    x: Tensor,
    y: Tensor | None = None,
    chunk_size: int | None = None,
    keep_per_sample: bool = False,
    tile_points: int | None = None,
    fused: bool = True,
) -> Predictive:
    """Marginalise the predictive of ``sampler`` (a :class:`SamplerModule`) over ``samples``.

    ``samples`` are stacked parameters ``(S, ...)``; ``log_weights`` (S,) must be
    normalised (``logsumexp == 0``). Points are processed ``tile_points`` at a time
    (``None``: :func:`default_tile_points`), the samples of each tile ``chunk_size`` at a time
    (``None``: :func:`default_chunk_size` of the tile). A point's predictive depends on that point
    alone: tiles and chunks change the result only by rounding. With ``fused`` (and not ``keep_per_sample``), an
    MLP classifier's float32 samples on CPU go through :class:`lit_bayes.predictive_kernel.FusedPredictive` where
    it applies and its kernel builds: the same values to float32 rounding (tested against this function's eager
    path), the 1,000-sample x 10,000-point MLP(784, 10, 10, 10, 10) of ``benchmarks/predictive_marginal.py`` in
    ~0.8x the time (0.95 of the sgemm peak against 0.75, one thread); ``fused=False`` keeps the eager path.
    """
    dtype = next(iter(samples.values())).dtype  # float inputs in the draws' dtype (float64 under 64-true)
    x = x.to(dtype) if x.is_floating_point() else x
    y = y.to(dtype) if y is not None and y.is_floating_point() else y
    if tile_points is None:
        tile_points = default_tile_points(x.shape[0], x.device)
    check_int("tile_points", tile_points, 1)
    if chunk_size is None:
        chunk_size = default_chunk_size(min(x.shape[0], tile_points), x.device)
    check_int("chunk_size", chunk_size, 1)
    log_norm = torch.logsumexp(log_weights.double(), 0)
    total = float(log_norm)
    if abs(total) > 1e-4:
        raise ValueError(f"log_weights must be normalised (logsumexp 0), got logsumexp {total:.3g}")
    kernel = FusedPredictive.of(sampler, samples, x) if fused and not keep_per_sample else None
    tiles = [_marginal_tile(sampler, samples, log_weights, log_norm, x[sl], None if y is None else y[sl], chunk_size,
                            keep_per_sample, kernel) for sl in _chunks(x.shape[0], tile_points)]
    if len(tiles) == 1:
        return tiles[0]
    per_sample = ("sample_log_probs", "sample_means")  # (S, B, ...): points on the second dimension
    return Predictive(**{field: None if getattr(tiles[0], field) is None else
                         torch.cat([getattr(t, field) for t in tiles], dim=1 if field in per_sample else 0)
                         for field in Predictive.__dataclass_fields__})


def _marginal_tile(sampler, samples: dict[str, Tensor], log_weights: Tensor, log_norm: Tensor, x: Tensor,
                   y: Tensor | None, chunk_size: int, keep_per_sample: bool,
                   kernel: FusedPredictive | None) -> Predictive:
    """:func:`marginal_predictive` of the points ``x`` (one tile), the samples ``chunk_size`` at a time, through
    ``kernel`` where given."""
    num = log_weights.shape[0]
    classification = sampler.likelihood.task == "classification"
    acc_log = None  # running log sum_s w_s p_s  (B, C) or log-lik of targets (B,)
    acc_target = None
    acc_mean = acc_second = acc_sample_entropy = None
    per_sample = []
    underflow = None
    if kernel is not None:  # the same sums in one pass; log p_bar(y_i | x_i) is entry y_i of log sum_s w_s p_s
        acc_log, acc_sample_entropy, underflow = kernel.tile(x, log_weights, chunk_size)
        acc_target = None if y is None else TARGET_ENTRIES(acc_log, y)
    eager_chunks = _chunks(num, chunk_size) if kernel is None else ()
    for sl in eager_chunks:
        chunk = {n: p[sl] for n, p in samples.items()}
        lw = log_weights[sl].to(x.device)
        out = sampler.outputs(chunk, x)
        if classification:
            lp, h = sampler.likelihood.class_log_probs_and_entropy(out)  # (s, B, C), (s, B)
            if keep_per_sample:
                per_sample.append(lp)
            weighted = lp + lw[:, None, None] if keep_per_sample else lp.add_(lw[:, None, None])
            if y is not None:  # a classifier's log p(y | x, theta) is its class log-probability of y
                lt = logspace.logsumexp(TARGET_ENTRIES(weighted, y), 0, overwrite=True)
                acc_target = lt if acc_target is None else torch.logaddexp(acc_target, lt)
            chunk_log = _logsumexp_over_samples(weighted)
            acc_log = chunk_log if acc_log is None else torch.logaddexp(acc_log, chunk_log)
            ent = (lw.exp()[:, None] * h).sum(0)
            acc_sample_entropy = ent if acc_sample_entropy is None else acc_sample_entropy + ent
        else:
            if y is not None:
                lt = logspace.logsumexp(lw[:, None] + sampler.log_likelihood(chunk, out, y), 0, overwrite=True)
                acc_target = lt if acc_target is None else torch.logaddexp(acc_target, lt)
            _, lik = sampler.split_parameters(chunk)
            mean, var = sampler.likelihood.mean_and_variance(out, **lik)
            if keep_per_sample:
                per_sample.append(mean)
            # float64 moments with exactly normalised weights: E[var + m^2] - E[m]^2 cancels
            # badly for large means (a 1e-7 weight error times m^2 = 1e6 is 0.1)
            dtype = mean.dtype
            w = (lw.double() - log_norm.to(lw.device)).exp()[:, None]
            mean, var = mean.double(), var.double()
            m1, m2 = (w * mean).sum(0), (w * (var + mean**2)).sum(0)
            acc_mean = m1 if acc_mean is None else acc_mean + m1
            acc_second = m2 if acc_second is None else acc_second + m2
    result = Predictive(log_prob_target=acc_target)
    if classification:
        acc_log = acc_log - acc_log.logsumexp(-1, keepdim=True)  # exact sum to 1 despite rounding
        entropy = -(acc_log.exp() * acc_log).sum(-1)
        result.log_probs = acc_log
        result.entropy = entropy
        result.mutual_information = (entropy - acc_sample_entropy).clamp_min(0.0)
        result.sample_log_probs = torch.cat(per_sample) if keep_per_sample else None
        if underflow is not None and underflow.any():  # the kernel's float32 sums lose such points: log space
            exact = _marginal_tile(sampler, samples, log_weights, log_norm, x[underflow],
                                   None if y is None else y[underflow], chunk_size, False, None)
            for field in ("log_prob_target", "log_probs", "entropy", "mutual_information"):
                if getattr(result, field) is not None:
                    getattr(result, field)[underflow] = getattr(exact, field)
    else:
        result.mean = acc_mean.to(dtype)
        result.variance = (acc_second - acc_mean**2).clamp_min(0.0).to(dtype)
        result.sample_means = torch.cat(per_sample) if keep_per_sample else None
    return result

