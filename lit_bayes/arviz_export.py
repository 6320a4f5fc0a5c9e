"""Kept posterior draws as ArviZ's data structure (an ``xarray.DataTree`` built by arviz-base).

:func:`run_to_arviz` reads a ``lit-bayes fit`` run directory, :func:`to_arviz` takes a run reloaded by
:func:`lit_bayes.load_run` or named draws held in memory. The result has the groups ArviZ's functions
(``arviz_stats.summary``, ``ess``, ``rhat``, ``loo``, arviz-plots' rank plots) read:

- ``posterior``: one variable per sampled tensor, named as the network's parameters (``layers.0.weight``;
  the likelihood's own parameters keep their ``likelihood.`` prefix), with dimensions
  ``("chain", "draw", "<name>_dim_0", ...)``;
- ``sample_stats`` (``(chain, draw)``), what the run recorded for each kept draw:

  ================================  ===========================================  =================================
  sampler family                    ``energy``                                   ``step_size``
  ================================  ===========================================  =================================
  SGMCMC, StructuredSGMCMC          energy the step evaluated (minibatch,        ``schedule: constant`` only
                                    before its move)
  HMC, MALA, IntermediateHMC/MALA   energy of the state after the step           each chain's adapted step, when
                                    (full batch)                                 adaptation ended by the burn-in
  BlockGibbs                        energy of the state after the sweep          none (no step size)
                                    (minibatch)
  NoisyGibbs                        none (its sweep returns no energy)           none (no step size)
  ================================  ===========================================  =================================

  ``energy`` is the ``energy`` trace of :class:`~lit_bayes.callbacks.ChainDiagnostics`, the tempered
  potential energy U/T (:mod:`lit_bayes.posterior`), present when that trace lines up with the kept draws
  (``every_n_steps: 1``, all chains of the store). It is not a Hamiltonian: ArviZ's BFMI does not apply.
  No sampler records a per-draw acceptance probability or divergence flag (``acceptance_rate``,
  ``diverging``): Metropolis samplers count acceptances per chain (``accept/*`` in ``summary.json``) and
  :class:`~lit_bayes.callbacks.RunHealth` judges divergence per chain. A decaying step-size schedule is
  left out (the steps of the kept draws are not recorded);
- ``log_likelihood`` and ``observed_data`` when asked: ``log p(y_i | x_i, theta)`` of every point of a
  split (``"train"``, ``"val"``, ``"test"``) or of given ``(x, y)``, per chain and draw, as the variable
  ``y`` with dimensions ``("chain", "draw", "y_dim_0")``. PSIS-LOO (``arviz_stats.loo``) estimates
  leave-one-out predictive accuracy of the data the posterior was conditioned on: ask for ``"train"``.

arviz-base and xarray are the optional ``arviz`` extra (``pip install lit-bayes[arviz]``), imported when
a function here is called. Samplers that predict with weighted particles (OHSMC, SGSMC) or with point
estimates (MAP) have no chains of draws and are refused.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lit_bayes.predictive import default_chunk_size
from lit_bayes.run_loading import SAMPLES_STATE_KEY, RunPosterior, load_run
from lit_bayes.samplers import SamplerModule
from lit_bayes.schedules import StepSizeSchedule
from lit_bayes.validation import check_int

__all__ = ["pointwise_log_likelihood", "run_to_arviz", "to_arviz"]

INSTALL_HINT = "pip install lit-bayes[arviz]"
DIAGNOSTICS_STATE_KEY = "ChainDiagnostics"  # the callback's checkpoint key (its class name)
SPLITS = ("train", "val", "test")
OBSERVED = "y"
NET_PREFIX = "net."
STAT_NOTES = {
    "energy": "tempered potential energy U/T that the step producing the draw returned (not a Hamiltonian)",
    "step_size": "step size of the transition producing the draw (HMC/MALA: the chain's adapted, unjittered step)",
}


def _from_dict():
    """arviz-base's ``from_dict``, or an ImportError naming the extra to install."""
    try:
        from arviz_base import from_dict
    except ImportError as err:
        raise ImportError(f"exporting to ArviZ needs arviz-base and xarray, the optional 'arviz' extra: "
                          f"{INSTALL_HINT}") from err
    return from_dict


def _as_numpy(tensor: Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def _chain_draw(samples: Mapping[str, Tensor], num_chains: int) -> dict[str, np.ndarray]:
    """Chain-major ``(S, ...)`` draws as ``(chains, draws, ...)`` arrays named as the network's parameters."""
    check_int("num_chains", num_chains, 1)
    sizes = {tensor.shape[0] for tensor in samples.values()}
    if len(sizes) != 1:
        raise ValueError(f"draws must all hold the same number of draws (first dimension), got {sorted(sizes)}")
    (size,) = sizes
    if size % num_chains:
        raise ValueError(f"num_chains={num_chains} does not divide the {size} draws (chain-major, as many per chain)")
    shape = (num_chains, size // num_chains)
    return {name.removeprefix(NET_PREFIX): _as_numpy(tensor.reshape(*shape, *tensor.shape[1:]))
            for name, tensor in samples.items()}


@torch.no_grad()
def pointwise_log_likelihood(module: SamplerModule, samples: Mapping[str, Tensor], x: Tensor, y: Tensor,
                             chunk_size: int | None = None) -> Tensor:
    """``log p(y_i | x_i, theta_s)`` of every draw and point, ``(S, N)``: the module's batched network and
    likelihood calls (as the predictive's), ``chunk_size`` draws at a time (``None``: sized to the points)."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"log_likelihood inputs have {x.shape[0]} rows but targets have {y.shape[0]}")
    dtype = next(iter(samples.values())).dtype
    x = x.to(module.device, dtype if torch.is_floating_point(x) else None)
    y = y.to(module.device, dtype if torch.is_floating_point(y) else None)
    module.likelihood.check_target(y, "log_likelihood targets")
    total = next(iter(samples.values())).shape[0]
    step = default_chunk_size(x.shape[0], x.device) if chunk_size is None else check_int("chunk_size", chunk_size, 1)
    parts = []
    for start in range(0, total, step):
        chunk = {name: p[start:start + step].to(module.device) for name, p in samples.items()}
        parts.append(module.log_likelihood(chunk, module.outputs(chunk, x), y))
    return torch.cat(parts)


def _split_data(run: RunPosterior, split: str) -> tuple[Tensor, Tensor]:
    """All ``(x, y)`` of one split of the run's DataModule, in the DataModule's order."""
    datamodule = run.datamodule()
    datamodule.setup("fit" if split == "train" else split)
    tensors = getattr(getattr(datamodule, f"{split}_data", None), "tensors", None)
    if tensors is None or len(tensors) != 2 or len(tensors[0]) == 0:
        raise ValueError(f"log_likelihood={split!r}: {type(datamodule).__name__} has no {split} split of (x, y) "
                         f"tensors ({split}_data); pass the points as log_likelihood=(x, y)")
    return tensors[0], tensors[1]


def _resolve_points(log_likelihood: Any, run: RunPosterior | None) -> tuple[tuple[Tensor, Tensor], str] | None:
    """The points of the ``log_likelihood`` argument and a label for them (a split name or ``"given"``)."""
    if log_likelihood is None:
        return None
    if isinstance(log_likelihood, str):
        if log_likelihood not in SPLITS:
            raise ValueError(f"log_likelihood must be one of {SPLITS}, a pair (x, y) of tensors or None, "
                             f"got {log_likelihood!r}")
        if run is None:
            raise ValueError(f"log_likelihood={log_likelihood!r} names a split of a run's DataModule: pass a run "
                             "(lit_bayes.load_run) or the points as log_likelihood=(x, y)")
        return _split_data(run, log_likelihood), log_likelihood
    if (isinstance(log_likelihood, (tuple, list)) and len(log_likelihood) == 2
            and all(isinstance(t, Tensor) for t in log_likelihood)):
        return (log_likelihood[0], log_likelihood[1]), "given"
    raise ValueError(f"log_likelihood must be one of {SPLITS}, a pair (x, y) of tensors or None, "
                     f"got {type(log_likelihood).__name__}")


def _kept_chains(run: RunPosterior, samples_state: dict | None) -> int:
    """The number of chains in ``run.samples``: the memory store's, or every process's chains of a disk store
    (one ``rank_<r>`` folder per process)."""
    if samples_state is not None and samples_state["mode"] == "memory" and samples_state["store"]["buffer"] is not None:
        return int(samples_state["store"]["buffer"].shape[1])
    directory = Path((run.config.get("samples") or {}).get("directory") or run.run_dir / "samples")
    return run.module.num_chains * max(1, len(list(directory.glob("rank_*"))))


def _recorded_energy(state: dict, config: dict, chains: int, draws: int) -> np.ndarray | None:
    """The ``energy`` trace of ChainDiagnostics at the kept draws, when it lines up with them: recorded at
    every sample step (``every_n_steps: 1``) for the same chains, and either as long as the kept draws or
    longer with a memory store that keeps the last draws."""
    diagnostics = state.get("callbacks", {}).get(DIAGNOSTICS_STATE_KEY)
    trace = None if diagnostics is None else diagnostics["traces"].get("energy")
    if trace is None or trace.shape[0] != chains or trace.shape[1] < draws:
        return None
    if (config.get("diagnostics") or {}).get("every_n_steps", 1) != 1:
        return None
    samples = config.get("samples") or {}
    keeps_last = samples.get("mode", "memory") == "memory" and samples.get("policy", "last") == "last"
    if trace.shape[1] > draws and not keeps_last:
        return None
    return _as_numpy(trace[:, trace.shape[1] - draws:])


def _step_sizes(module: SamplerModule, state: dict, config: dict, chains: int, draws: int) -> np.ndarray | None:
    """The step size of every kept draw where it is known: a constant SG-MCMC schedule, or the per-chain
    step sizes of HMC/MALA whose dual-averaging adaptation ended before the first kept draw (adapting
    during the burn-in, the default, or for fewer steps than a burn-in given in steps)."""
    schedule = getattr(module, "schedule", None)
    if isinstance(schedule, StepSizeSchedule):
        return np.full((chains, draws), schedule.step_size) if schedule.kind == "constant" else None
    optimizers = state.get("optimizer_states") or []
    stepper = next(iter(optimizers[0]["state"].values()), {}) if optimizers else {}
    if "log_step" not in stepper or stepper["log_step"].shape != (chains,):
        return None
    adapt_setting = getattr(module, "stepper_options", {}).get("adapt_steps")
    adapt = optimizers[0]["param_groups"][0].get("adapt_steps", adapt_setting)
    burn_in = (config.get("model") or {}).get("init_args", {}).get("burn_in", 0)
    frozen = adapt_setting is None or adapt == 0 or (isinstance(burn_in, int) and adapt <= burn_in)
    return np.repeat(_as_numpy(stepper["log_step"].exp())[:, None], draws, axis=1) if frozen else None


def _run_sample_stats(run: RunPosterior, state: dict, chains: int) -> dict[str, np.ndarray]:
    draws = run.num_draws // chains
    stats = {"energy": _recorded_energy(state, run.config, chains, draws),
             "step_size": _step_sizes(run.module, state, run.config, chains, draws)}
    return {name: value for name, value in stats.items() if value is not None}


def _check_exportable(module: SamplerModule) -> None:
    if module.predict_with_current_state or not module.keeps_draws:
        what = "weighted particles" if module.predict_with_current_state else "its current parameters"
        raise ValueError(f"{type(module).__name__} predicts with {what}, not chains of posterior draws: "
                         "there is nothing for ArviZ's chain diagnostics to read")


def to_arviz(draws: RunPosterior | Mapping[str, Tensor], *, num_chains: int | None = None,
             module: SamplerModule | None = None, log_likelihood: str | tuple[Tensor, Tensor] | None = None,
             sample_stats: Mapping[str, Any] | None = None, chunk_size: int | None = None):
    """Kept posterior draws as ArviZ's ``xarray.DataTree`` (module docstring: the groups).

    Args:
        draws: a run reloaded by :func:`lit_bayes.load_run` (its chains, sampler and, from its checkpoint,
            the per-draw sample statistics), or named draws ``(S, ...)`` in chain-major order (the order of
            :meth:`~lit_bayes.callbacks.PosteriorSamples.samples`).
        num_chains: the number of chains of named ``draws`` (a run knows its own).
        module: the sampler of named ``draws``, needed for ``log_likelihood`` (a run has its own).
        log_likelihood: ``"train"``, ``"val"`` or ``"test"`` (a split of a run's DataModule) or a pair
            ``(x, y)`` of tensors: adds ``log_likelihood`` and ``observed_data``. ``None``: neither.
        sample_stats: ``(chains, draws)`` arrays to add to (or replace in) ``sample_stats``.
        chunk_size: draws per batched log-likelihood call (``None``: sized to the points).

    Raises ``ImportError`` without arviz-base (``pip install lit-bayes[arviz]``) and ``ValueError`` for a
    run without chains of draws or a bad argument, naming it.
    """
    from_dict = _from_dict()
    run = draws if isinstance(draws, RunPosterior) else None
    stats: dict[str, Any] = {}
    if run is not None:
        _check_exportable(run.module)
        module, samples = run.module, run.samples
        checkpoint = run.checkpoint or run.run_dir / "checkpoints" / "last.ckpt"
        if not Path(checkpoint).exists():
            raise ValueError(f"checkpoint {checkpoint} of the run does not exist: its chains and sample statistics "
                             "are read from the checkpoint load_run read")
        state = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
        num_chains = _kept_chains(run, state.get("callbacks", {}).get(SAMPLES_STATE_KEY))
        stats = _run_sample_stats(run, state, num_chains)
    elif isinstance(draws, Mapping) and draws and all(isinstance(t, Tensor) for t in draws.values()):
        if num_chains is None:
            raise ValueError("num_chains is needed with named draws (a RunPosterior knows its chains)")
        samples = draws
    else:
        raise ValueError(f"draws must be a RunPosterior (lit_bayes.load_run) or a non-empty mapping of tensors, "
                         f"got {type(draws).__name__}")
    groups = {"posterior": _chain_draw(samples, num_chains)}
    chains_draws = next(iter(groups["posterior"].values())).shape[:2]
    for name, value in (sample_stats or {}).items():
        stats[name] = np.asarray(value)
        if stats[name].shape[:2] != chains_draws:
            raise ValueError(f"sample_stats[{name!r}] must have shape (chains, draws) = {chains_draws}, "
                             f"got {stats[name].shape}")
    if stats:
        groups["sample_stats"] = stats
    points = _resolve_points(log_likelihood, run)
    attrs = {"/": {"inference_library": "lit_bayes"}}
    if run is not None:
        attrs["/"]["sampler"] = type(module).__name__
    if stats:
        attrs["sample_stats"] = {name: note for name, note in STAT_NOTES.items() if name in stats}
    if points is not None:
        if module is None:
            raise ValueError("module (the sampler of the draws) is needed to compute log_likelihood")
        (x, y), label = points
        log_lik = pointwise_log_likelihood(module, samples, x, y, chunk_size)
        groups["log_likelihood"] = {OBSERVED: _as_numpy(log_lik.reshape(num_chains, -1, log_lik.shape[-1]))}
        groups["observed_data"] = {OBSERVED: _as_numpy(y)}
        attrs["log_likelihood"] = {"points": label}
    return from_dict(groups, attrs=attrs)


def run_to_arviz(run_dir: str | os.PathLike, *, log_likelihood: str | tuple[Tensor, Tensor] | None = None,
                 checkpoint: str | os.PathLike | None = None, map_location: str | torch.device = "cpu",
                 chunk_size: int | None = None):
    """A ``lit-bayes fit`` run directory as ArviZ's ``xarray.DataTree``: :func:`lit_bayes.load_run`
    (``checkpoint``, ``map_location``) then :func:`to_arviz` (``log_likelihood``, ``chunk_size``).

    Raises ``ValueError`` when ``run_dir`` is not a run directory (no ``config.yaml``) or kept no draws."""
    _from_dict()  # the missing extra is reported before the run is read
    path = Path(run_dir)
    if not path.is_dir():
        raise ValueError(f"run_dir {path} is not a directory (a lit-bayes fit run directory, "
                         "runs/<name>/version_<n>, holding config.yaml and checkpoints/)")
    run = load_run(path, checkpoint, map_location)
    return to_arviz(run, log_likelihood=log_likelihood, chunk_size=chunk_size)
