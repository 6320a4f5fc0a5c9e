"""Where kept posterior samples live: a bounded memory buffer or safetensors shards on disk.

A store holds draws of every chain as flat float vectors, shape ``(draws, chains, P)``.
The disk store writes each full shard atomically (temporary file, then rename) and then
rewrites ``index.json`` atomically, so a reader, or a run killed at any moment, only ever
sees complete shards listed in the index.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from lit_bayes.validation import check_int

__all__ = ["DiskStore", "MemoryStore", "read_disk_store"]

INDEX = "index.json"


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class MemoryStore:
    """Keeps at most ``max_draws`` draws: the last ones (``policy="last"``) or a uniform
    reservoir sample of all draws so far (``policy="reservoir"``, Vitter's algorithm R).

    The draws live in one preallocated ``(max_draws, ...)`` buffer written in place (a ring for
    ``"last"``), so an append costs one draw's copy whatever ``max_draws`` is."""

    def __init__(self, max_draws: int, policy: str = "last", seed: int = 0) -> None:
        check_int("max_draws", max_draws, 1)
        if policy not in ("last", "reservoir"):
            raise ValueError(f"policy must be 'last' or 'reservoir', got {policy!r}")
        self.max_draws = max_draws
        self.policy = policy
        self.generator = torch.Generator().manual_seed(seed)
        self.buffer: Tensor | None = None  # (max_draws, ...) once the first draw arrived
        self.size = 0  # slots filled
        self.next = 0  # the slot the next draw of a full "last" ring overwrites (its oldest)
        self.seen = 0

    def _store(self, slot: int, draw: Tensor) -> None:
        if self.buffer is None:
            self.buffer = draw.new_empty((self.max_draws, *draw.shape))
        self.buffer[slot] = draw

    def append(self, draw: Tensor) -> None:
        draw = draw.detach().to("cpu")
        self.seen += 1
        if self.size < self.max_draws:
            self._store(self.size, draw)
            self.size += 1
        elif self.policy == "last":
            self._store(self.next, draw)
            self.next = (self.next + 1) % self.max_draws
        else:
            slot = int(torch.randint(self.seen, (1,), generator=self.generator))
            if slot < self.max_draws:
                self._store(slot, draw)

    def draws(self) -> Tensor | None:
        """The kept draws, oldest first for ``"last"``, ``(draws, ...)``; ``None`` before the first."""
        if self.buffer is None:
            return None
        if self.next == 0:
            return self.buffer[: self.size]
        return torch.cat([self.buffer[self.next :], self.buffer[: self.next]])

    def state_dict(self) -> dict:
        return {"buffer": self.draws(), "seen": self.seen, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Restore a checkpointed store, which may have been written with another ``max_draws``. More draws
        than fit: ``"last"`` keeps the newest of them, ``"reservoir"`` a uniform subset (a uniform sample of
        a uniform sample is one), with a warning. A larger ``"last"`` buffer keeps them all and fills on; a
        full reservoir cannot grow, since its draws were each kept with probability (its size) / (draws
        seen), which later draws could not match: a ``ValueError`` names ``max_draws``."""
        draws, self.seen = state["buffer"], int(state["seen"])
        self.generator.set_state(state["generator"])
        saved = 0 if draws is None else draws.shape[0]
        if saved > self.max_draws:
            if self.policy == "last":
                draws = draws[saved - self.max_draws :]
            else:
                draws = draws[torch.randperm(saved, generator=self.generator)[: self.max_draws].sort().values]
            warnings.warn(f"the checkpoint holds {saved} kept draws, more than max_draws={self.max_draws}: "
                          f"keeping {'the newest' if self.policy == 'last' else 'a uniform subset of'} "
                          f"{self.max_draws} of them", stacklevel=2)
        elif self.policy == "reservoir" and saved < min(self.max_draws, self.seen):
            raise ValueError(f"max_draws={self.max_draws} is larger than the full reservoir of {saved} draws (of "
                             f"{self.seen} seen) in the checkpoint, which a uniform reservoir cannot grow from: "
                             f"resume with max_draws={saved}, or start a new run")
        self.buffer, self.size, self.next = None, 0, 0
        for draw in [] if draws is None else draws:
            self._store(self.size, draw)
            self.size += 1


class DiskStore:
    """Safetensors shards of ``shard_size`` draws under ``directory``, listed in ``index.json``.

    Draws of an unfinished shard are kept in memory and travel in the checkpoint; on
    resume, shards written after that checkpoint are dropped, so the store continues
    without gaps or duplicates.
    """

    def __init__(self, directory: str | os.PathLike, shard_size: int = 100) -> None:
        check_int("shard_size", shard_size, 1)
        self.directory = Path(directory)
        self.shard_size = shard_size
        self.shards: list[dict] = []
        self.pending: list[Tensor] = []

    @property
    def seen(self) -> int:
        return sum(s["draws"] for s in self.shards) + len(self.pending)

    def append(self, draw: Tensor) -> None:
        self.pending.append(draw.detach().to("cpu").clone())
        if len(self.pending) >= self.shard_size:
            self.flush()

    def flush(self) -> None:
        """Write the pending draws as one shard and list it in the index."""
        if not self.pending:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"shard_{len(self.shards):06d}.safetensors"
        tmp = self.directory / (name + ".tmp")
        save_file({"draws": torch.stack(self.pending).contiguous()}, str(tmp))
        os.replace(tmp, self.directory / name)
        self.shards.append({"file": name, "draws": len(self.pending)})
        self.pending = []
        self._write_index()

    def _write_index(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)  # also on resume before the first shard
        _atomic_write_text(self.directory / INDEX, json.dumps({"shards": self.shards}, indent=1))

    def draws(self) -> Tensor | None:
        parts = [load_file(str(self.directory / s["file"]))["draws"] for s in self.shards]
        if self.pending:
            parts.append(torch.stack(self.pending))
        return torch.cat(parts) if parts else None

    def state_dict(self) -> dict:
        pending = torch.stack(self.pending) if self.pending else None
        return {"shards": json.dumps(self.shards), "pending": pending}

    def load_state_dict(self, state: dict) -> None:
        self.shards = json.loads(state["shards"])
        self.pending = list(state["pending"]) if state["pending"] is not None else []
        kept = {s["file"] for s in self.shards}
        if self.directory.exists():
            for path in self.directory.glob("shard_*.safetensors*"):
                if path.name not in kept:
                    path.unlink()
        self._write_index()


def read_disk_store(directory: str | os.PathLike) -> Tensor:
    """All complete shards of a disk store as ``(chains, draws, P)`` flat parameter
    vectors (the layout of :meth:`PosteriorSamples.trace`); safe while a run writes."""
    directory = Path(directory)
    index_path = directory / INDEX
    if not index_path.exists():
        raise FileNotFoundError(f"no sample store at {directory}: {INDEX} is missing")
    shards = json.loads(index_path.read_text())["shards"]
    if not shards:
        raise ValueError(f"the sample store at {directory} holds no complete shard yet")
    return torch.cat([load_file(str(directory / s["file"]))["draws"] for s in shards]).transpose(0, 1)
