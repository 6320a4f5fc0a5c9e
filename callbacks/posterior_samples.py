"""``PosteriorSamples``: keeps the post-burn-in, thinned states of every chain."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import lightning as L
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from lit_bayes.callbacks.sample_store import DiskStore, MemoryStore
from lit_bayes.predictive import uniform_log_weights
from lit_bayes.validation import check_writable_directory

__all__ = ["PosteriorSamples"]


class PosteriorSamples(Callback):
    """Collects the sampler's state after every step its ``is_sample_step()`` accepts
    (burn-in and thinning are the sampler's settings).

    Args:
        mode: ``"memory"`` (bounded buffer) or ``"disk"`` (safetensors shards).
        max_draws: memory mode: draws kept per chain.
        policy: memory mode: ``"last"`` keeps the newest, ``"reservoir"`` a uniform sample.
        directory: disk mode: where shards go; default ``<log_dir>/samples`` (with several
            processes, one ``rank_<r>`` folder each).
        shard_size: disk mode: draws per shard.
        max_bytes: memory mode refuses, up front, a buffer that would need more.
        seed: seed of the reservoir's generator.

    The store (with its index) is part of Lightning checkpoints: a resumed run appends.
    """

    def __init__(
        self,
        mode: Literal["memory", "disk"] = "memory",
        max_draws: int = 1000,
        policy: Literal["last", "reservoir"] = "last",
        directory: str | None = None,
        shard_size: int = 100,
        max_bytes: int = 8 * 2**30,
        seed: int = 0,
    ) -> None:
        if mode not in ("memory", "disk"):
            raise ValueError(f"mode must be 'memory' or 'disk', got {mode!r}")
        self.mode = mode
        self.max_bytes = max_bytes
        self.directory = directory
        if mode == "memory":
            self.store: MemoryStore | DiskStore = MemoryStore(max_draws, policy, seed)
        else:
            self.store = DiskStore(directory or "samples", shard_size)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.mode == "disk":
            root = Path(self.directory) if self.directory else Path(trainer.log_dir or trainer.default_root_dir) / "samples"
            self.store.directory = root / f"rank_{trainer.global_rank}" if trainer.world_size > 1 else root
            if stage == "fit":  # the shards are written during and at the end of fit: refuse a read-only place now
                check_writable_directory("PosteriorSamples directory (samples.directory)", self.store.directory)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Refuse, before the first step, a memory store that would outgrow ``max_bytes``
        (the chains exist only once the module's own ``setup`` has run), or that would keep fewer draws per
        chain than the sampler's ``num_draws`` asks for."""
        if self.mode == "memory":
            asked = getattr(pl_module, "num_draws", None)
            if asked is not None and asked > self.store.max_draws:
                raise ValueError(
                    f"PosteriorSamples keeps at most max_draws={self.store.max_draws} draws per chain, but the sampler "
                    f"asks for num_draws={asked}: raise max_draws (samples.max_draws in a config) or lower num_draws"
                )
            chains, params = pl_module.chains.flat().shape
            need = self.store.max_draws * chains * params * 4
            if need > self.max_bytes:
                raise ValueError(
                    f"PosteriorSamples would need {need / 2**30:.2f} GiB for max_draws={self.store.max_draws} of "
                    f"{chains} chains x {params} parameters, over max_bytes={self.max_bytes / 2**30:.2f} GiB; "
                    "lower max_draws, thin more, or use mode='disk'"
                )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if pl_module.is_sample_step():
            self.store.append(pl_module.chains.flat())

    def on_train_end(self, trainer, pl_module) -> None:
        if self.mode == "disk":
            self.store.flush()

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "store": self.store.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("mode") != self.mode:
            raise ValueError(f"checkpoint holds a {state_dict.get('mode')!r} sample store, this callback is {self.mode!r}")
        # Lightning restores callbacks after ``setup``, so the disk directory is final here.
        self.store.load_state_dict(state_dict["store"])

    @property
    def num_draws(self) -> int:
        draws = self.store.draws()
        return 0 if draws is None else draws.shape[0]

    def trace(self) -> Tensor | None:
        """Kept draws as ``(chains, draws, P)`` flat parameter vectors, or ``None`` if empty."""
        draws = self.store.draws()
        return None if draws is None else draws.transpose(0, 1)

    def samples(self, pl_module) -> tuple[dict[str, Tensor], Tensor] | None:
        """Kept draws of every chain stacked as ``(chains * draws, ...)`` named tensors,
        with their (uniform) normalised log-weights; ``None`` before the first draw."""
        trace = self.trace()
        if trace is None:
            return None
        flat = trace.reshape(-1, trace.shape[-1]).to(pl_module.device)
        return pl_module.chains.unflatten(flat), uniform_log_weights(flat.shape[0], flat.device)

    def as_state_dicts(self, pl_module) -> list[dict[str, Tensor]]:
        """Each kept draw as a ``state_dict`` of the wrapped network (chain-major order)."""
        named = self.samples(pl_module)
        if named is None:
            return []
        net, _ = pl_module.split_parameters(named[0])
        return [{n: p[i] for n, p in net.items()} for i in range(named[1].shape[0])]

