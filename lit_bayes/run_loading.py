"""Reload a finished ``lit-bayes fit`` run and predict from its kept posterior draws.

A run directory ``runs/<name>/version_<n>/`` holds the ``config.yaml`` that LightningCLI
saved and ``checkpoints/last.ckpt``. :func:`load_run` rebuilds the sampler module (network,
likelihood, prior) from the config's ``model`` section, loads the checkpoint's chains with
``weights_only=True``, and reads back the draws the :class:`PosteriorSamples` callback kept
(from the checkpoint for a memory store, from the safetensors shards for a disk store):

    run = lit_bayes.load_run("runs/xor_sgld/version_0")
    predictive = run.predict(x)          # lit_bayes.predictive.Predictive over the kept draws of raw inputs x
    test = run.predict_test()            # the DataModule's test split, with log p(y | x)

``lit-bayes predict`` uses the same reading (:class:`KeptDraws`) and writes its predictions
with :func:`save_predictions`.
"""
from __future__ import annotations

import dataclasses
import math
import os
import pickle
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch import Callback, LightningDataModule
from lightning.pytorch.cli import LightningArgumentParser
from safetensors.torch import save_file
from torch import Tensor

from lit_bayes.callbacks.sample_store import read_disk_store
from lit_bayes.data.base import transform_raw_inputs
from lit_bayes.predictive import Predictive, marginal_predictive, uniform_log_weights
from lit_bayes.samplers import SamplerModule

__all__ = ["KeptDraws", "RunPosterior", "concat_predictives", "load_run", "newest_checkpoint", "read_kept_draws",
           "run_directory", "save_predictions"]

SAMPLES_STATE_KEY = "PosteriorSamples"  # the callback's checkpoint key (its class name)
PREDICTION_FIELDS = ("probs", "entropy", "mutual_information", "mean", "variance")


def newest_checkpoint(paths: Iterable[Path]) -> Path | None:
    """The checkpoint among ``paths`` that holds the most steps (its ``global_step``, read through a memory map
    without loading the tensors), ``None`` for none: ``last.ckpt`` on equal steps, then the newer file. Any other
    rule can pick a stale file: a resume that named its directory another way once wrote ``last-v1.ckpt`` beside
    the old ``last.ckpt``, and a kill between Lightning's two writes of a step leaves ``last.ckpt`` behind the
    numbered checkpoint."""
    def key(path: Path) -> tuple[int, bool, float]:
        try:
            step = int(torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("global_step", -1))
        except (OSError, RuntimeError, pickle.UnpicklingError, EOFError):  # unreadable: any readable one first
            step = -2
        return step, path.name == "last.ckpt", path.stat().st_mtime

    return max(paths, key=key, default=None)


def run_directory(checkpoint_path: str | os.PathLike) -> Path:
    """The run directory a checkpoint belongs to: the parent of its ``checkpoints`` folder."""
    path = Path(checkpoint_path).resolve()
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


# Lightning's "-true" precisions, under which the run's parameters and inputs had this dtype
TRUE_PRECISION_DTYPES = {"64-true": torch.float64, "64": torch.float64, "double": torch.float64,
                         "16-true": torch.float16, "bf16-true": torch.bfloat16}


def _instantiate(section: str, base: type, value: dict) -> Any:
    """Build one ``class_path``/``init_args`` section of a saved LightningCLI config."""
    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_lightning_class_args(base, section, subclass_mode=True)
    config = parser.parse_object({section: value})
    return parser.instantiate_classes(config)[section]


def read_kept_draws(state: dict, run_dir: str | os.PathLike, samples_config: dict | None = None
                    ) -> tuple[Tensor, Tensor] | None:
    """The draws a run's :class:`PosteriorSamples` kept, as flat ``(draws, P)`` parameter vectors
    (chain-major, the order of :meth:`PosteriorSamples.samples`) with normalised log-weights;
    ``None`` when the run kept none. ``state`` is the callback's state in the run's checkpoint.

    A memory store is read from that state. A disk store is read from its shards'
    ``index.json`` (``samples_config["directory"]``, default ``<run_dir>/samples``), which also
    lists the shard written after the last checkpoint; with several processes, from each
    ``rank_<r>`` folder, every process weighted equally as in the run. A multi-process run with a
    memory store checkpoints the draws of process 0 only."""
    if state["mode"] == "memory":
        draws = state["store"]["buffer"]
        if draws is None:
            return None
        flat = draws.transpose(0, 1).reshape(-1, draws.shape[-1])
        return flat, uniform_log_weights(flat.shape[0], flat.device)
    directory = Path((samples_config or {}).get("directory") or Path(run_dir) / "samples")
    ranks = sorted(directory.glob("rank_*"), key=lambda p: int(p.name.split("_")[1])) or [directory]
    if not any((d / "index.json").exists() for d in ranks):
        return None
    parts = [trace.reshape(-1, trace.shape[-1]) for trace in map(read_disk_store, ranks)]
    log_weights = [uniform_log_weights(p.shape[0]) - math.log(len(parts)) for p in parts]
    return torch.cat(parts), torch.cat(log_weights)


class KeptDraws(Callback):
    """The draws of a finished run in ``run_dir``, read back (:func:`read_kept_draws`) when its
    checkpoint restores the state of the run's :class:`PosteriorSamples` (whose place this callback
    takes), and handed to :func:`lit_bayes.predictive.posterior_samples` as that callback did.
    ``samples_config``: the run's ``samples`` config section (where a disk store wrote)."""

    def __init__(self, run_dir: str | os.PathLike, samples_config: dict | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.samples_config = samples_config
        self.kept: tuple[Tensor, Tensor] | None = None

    @property
    def state_key(self) -> str:
        return SAMPLES_STATE_KEY

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.kept = read_kept_draws(state_dict, self.run_dir, self.samples_config)

    def samples(self, pl_module) -> tuple[dict[str, Tensor], Tensor] | None:
        """The draws as named ``(S, ...)`` tensors with their log-weights; ``None`` when the run kept none."""
        if self.kept is None:
            return None
        flat = self.kept[0].to(pl_module.device)
        return pl_module.chains.unflatten(flat), self.kept[1].to(flat.device)


def concat_predictives(parts: list[Predictive]) -> Predictive:
    """One :class:`Predictive` from the per-batch ones (points concatenated)."""
    joined = {}
    for field in dataclasses.fields(Predictive):
        values = [getattr(p, field.name) for p in parts]
        dim = 1 if field.name.startswith("sample_") else 0  # per-sample fields are (S, B, ...)
        joined[field.name] = None if values[0] is None else torch.cat(values, dim)
    return Predictive(**joined)


def save_predictions(path: str | os.PathLike, predictive: Predictive, metadata: dict[str, str] | None = None) -> Path:
    """Write the predictive as safetensors: ``probs``, ``entropy``, ``mutual_information``
    (classification) or ``mean``, ``variance`` (regression), float tensors over the points."""
    tensors = {}
    for name in PREDICTION_FIELDS:
        if name == "probs":
            value = None if predictive.log_probs is None else predictive.probs
        else:
            value = getattr(predictive, name)
        if value is not None:
            tensors[name] = value.detach().cpu().contiguous()
    path = Path(path)
    save_file(tensors, str(path), metadata=metadata)
    return path


@dataclass
class RunPosterior:
    """A finished run's sampler module and the posterior draws to predict with.

    ``samples`` (named, ``(S, ...)``) and ``log_weights`` (S,) are the kept draws, or, for a
    sampler that predicts with its current state (Feynman-Kac) or keeps none by design (MAP),
    its current particles or parameters with their weights. ``config`` is the saved
    ``config.yaml`` as a dict, ``checkpoint`` the checkpoint they were read from, ``input_transform`` what
    the run's DataModule did to raw inputs (:meth:`~lit_bayes.data.base.BayesDataModule.input_transform`,
    saved in the checkpoint; empty when it used them as given or saved none), ``input_shape`` the shape of one
    model input (None when the DataModule saved none)."""

    module: SamplerModule
    samples: dict[str, Tensor]
    log_weights: Tensor
    config: dict
    run_dir: Path
    checkpoint: Path | None = None
    input_transform: dict = dataclasses.field(default_factory=dict)
    input_shape: tuple[int, ...] | None = None

    @property
    def num_draws(self) -> int:
        return int(self.log_weights.shape[0])

    def equally_weighted(self, rows: slice) -> RunPosterior:
        """The run restricted to its kept draws ``rows`` (draws are chain-major, oldest first), each weighted
        equally."""
        samples = {name: value[rows] for name, value in self.samples.items()}
        weights = uniform_log_weights(next(iter(samples.values())).shape[0], self.log_weights.device)
        return dataclasses.replace(self, samples=samples, log_weights=weights)

    def predict(self, x: Tensor, y: Tensor | None = None, chunk_size: int | None = None,
                keep_per_sample: bool = False, transformed: bool = False) -> Predictive:
        """The posterior predictive of raw inputs ``x`` (a batch), which go through the run's
        :attr:`input_transform` first, as its DataModule's did in training (standardisation, image scaling),
        unless ``transformed=True`` says they already have (batches of the DataModule's own loaders); with
        ``y``, also ``log p(y | x)`` (``y`` as the DataModule gives it)."""
        x = torch.as_tensor(x)
        if x.dim() < 2 or x.shape[0] == 0:
            hint = ": x[None] for one point" if x.dim() == 1 else ""
            raise ValueError(f"x must be a batch of points, shape (n, ...) with n >= 1, got shape "
                             f"{tuple(x.shape)}{hint}")
        if torch.is_floating_point(x) and not torch.isfinite(x).all():
            rows = (~torch.isfinite(x.flatten(1))).any(1).nonzero().flatten().tolist()
            raise ValueError(f"x holds NaN or infinite values in rows {rows[:10]}{' ...' if len(rows) > 10 else ''}")
        if not transformed:
            try:
                x = transform_raw_inputs(self.input_transform, x)
            except RuntimeError as error:  # a shape the saved statistics do not fit
                raise ValueError(f"x has points of shape {tuple(x.shape[1:])}, which the run's input standardisation "
                                 f"does not fit (model points of shape {self.input_shape}): {error}") from error
        if self.input_shape is not None and tuple(x.shape[1:]) != tuple(self.input_shape):
            raise ValueError(f"x has points of shape {tuple(x.shape[1:])} (batch shape {tuple(x.shape)}), the run's "
                             f"model takes points of shape {tuple(self.input_shape)}")
        dtype = next(iter(self.samples.values())).dtype
        x = x.to(self.module.device, dtype if torch.is_floating_point(x) else None)
        y = None if y is None else y.to(self.module.device)
        return marginal_predictive(self.module, self.samples, self.log_weights, x, y, chunk_size, keep_per_sample)

    def datamodule(self) -> LightningDataModule:
        """The run's DataModule, rebuilt from the config's ``data`` section."""
        if not self.config.get("data"):
            raise ValueError(f"the config of {self.run_dir} has no data section")
        return _instantiate("data", LightningDataModule, self.config["data"])

    def predict_test(self, datamodule: LightningDataModule | None = None, chunk_size: int | None = None) -> Predictive:
        """The predictive of a DataModule's test split (default: the run's own), batch by batch
        as ``Trainer.predict`` does, with ``log_prob_target``."""
        data = self.datamodule() if datamodule is None else datamodule
        data.setup("test")
        parts = [self.predict(x, y, chunk_size, transformed=True) for x, y in data.test_dataloader()]
        return concat_predictives(parts)


def load_run(run_dir: str | os.PathLike, checkpoint: str | os.PathLike | None = None,
             map_location: str | torch.device = "cpu") -> RunPosterior:
    """Reload a finished ``lit-bayes fit`` run for prediction.

    Args:
        run_dir: the run's log directory (``runs/<name>/version_<n>``, holding ``config.yaml``).
        checkpoint: the checkpoint to read; default: the one of ``<run_dir>/checkpoints`` that holds the most
            steps (:func:`newest_checkpoint`), normally ``last.ckpt``.
        map_location: device of the module and draws.

    Raises ``ValueError`` for a missing config or checkpoint, and when the run kept no posterior
    draws (for a sampler that keeps them).
    """
    run_dir = Path(run_dir)
    config_path = run_dir / "config.yaml"
    if not config_path.exists():
        raise ValueError(f"run_dir {run_dir} holds no config.yaml (the config LightningCLI saves in a run)")
    if checkpoint is None:
        checkpoint = newest_checkpoint((run_dir / "checkpoints").glob("*.ckpt"))
        if checkpoint is None:
            raise ValueError(f"run_dir {run_dir} holds no checkpoint under {run_dir / 'checkpoints'}: pass "
                             "checkpoint= (a .ckpt the run wrote)")
    checkpoint = Path(checkpoint)
    if not checkpoint.exists():
        raise ValueError(f"checkpoint {checkpoint} does not exist: pass checkpoint= (a .ckpt under "
                         f"{run_dir / 'checkpoints'})")
    config = yaml.safe_load(config_path.read_text())
    module = _instantiate("model", SamplerModule, config["model"])
    precision = str((config.get("trainer") or {}).get("precision"))
    module.to(TRUE_PRECISION_DTYPES.get(precision, torch.float32))  # before loading: no rounding of the weights
    state = torch.load(checkpoint, map_location=map_location, weights_only=True)
    module.on_load_checkpoint(state)  # builds the chains from the checkpoint
    module.load_state_dict(state["state_dict"])
    module.to(map_location).eval()
    if module.predict_with_current_state or not module.keeps_draws:
        samples, log_weights = module.current_samples()
    else:
        draws = KeptDraws(run_dir, config.get("samples"))
        callback_state = state.get("callbacks", {}).get(SAMPLES_STATE_KEY)
        if callback_state is not None:
            draws.load_state_dict(callback_state)
        kept = draws.samples(module)
        if kept is None:
            burn_in = config["model"].get("init_args", {}).get("burn_in")
            raise ValueError(
                f"the run at {run_dir} kept no posterior draws (checkpoint {checkpoint} at step "
                f"{state.get('global_step')}, burn_in {burn_in}): fit with a burn-in below the run's steps and the "
                "PosteriorSamples callback (the `samples` config section)"
            )
        samples, log_weights = kept
    data_class = str((config.get("data") or {}).get("class_path", "")).rsplit(".", 1)[-1]
    data_state = state.get(data_class) if data_class else None  # Lightning saves it under the class's name
    data_state = data_state if isinstance(data_state, dict) else {}
    shape = data_state.get("input_shape")
    return RunPosterior(module, samples, log_weights, config, run_dir, checkpoint,
                        data_state.get("input_transform", {}), None if shape is None else tuple(shape))
