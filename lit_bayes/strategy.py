"""``ChainParallel``: Lightning's DDP for independent chains on several processes.

Plain data-parallel training would make every process identical: DDP broadcasts rank 0's
parameters when it wraps the module and averages gradients in every backward pass. For
MCMC each process must instead run its own chains: ``ChainParallel`` skips the initial
broadcast (``init_sync=False``), does not broadcast buffers, and registers a
communication hook that keeps each process's gradients local. Seeds differ per process
(:func:`lit_bayes.samplers.base.rank_seed`), and the callbacks gather samples, metrics
and traces across processes (:meth:`SamplerModule.gather_across_processes`).

Launch as any Lightning DDP job, e.g. on one machine
``Trainer(accelerator="cpu", devices=2, strategy=ChainParallel())``; on several nodes
``Trainer(accelerator="gpu", devices=8, num_nodes=4, strategy=ChainParallel())`` started
by ``torchrun`` or SLURM's ``srun`` on every node (Lightning reads the cluster
environment). Importing this module registers the name ``"chain_parallel"`` with Lightning's
strategy registry (``lit_bayes.samplers`` imports it), so the CLI takes ``--trainer.strategy chain_parallel --trainer.devices 8 --trainer.num_nodes 4``.
"""
from __future__ import annotations

import atexit
from typing import Any

import torch
from lightning.pytorch.strategies import DDPStrategy, StrategyRegistry

__all__ = ["ChainParallel", "release_process_group", "release_process_group_at_exit"]


def release_process_group() -> None:
    """Destroy the default process group, if one is up, while the interpreter still runs.

    A gloo group left to interpreter shutdown can abort a finished run's process ("terminate
    called without an active exception", exit code -6); Lightning releases the group at exit
    for NCCL only. :func:`release_process_group_at_exit` registers it."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


_release_registered = False


def release_process_group_at_exit() -> None:
    """Register :func:`release_process_group` at exit, once per process. Every sampler calls
    this when it is set up inside a process group (``SamplerModule.setup``), for
    ``ChainParallel`` and Lightning's own ``"ddp"`` alike; importing ``lit_bayes`` does not."""
    global _release_registered
    if not _release_registered:
        atexit.register(release_process_group)
        _release_registered = True


def keep_local_gradients(state, bucket):  # no annotations: DDP checks them against the real class
    """DDP communication hook that leaves every process's gradients as they are."""
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


class ChainParallel(DDPStrategy):
    """DDP strategy whose processes run independent chains (see the module docstring)."""

    strategy_name = "chain_parallel"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("init_sync", False)
        kwargs.setdefault("broadcast_buffers", False)
        super().__init__(**kwargs)

    def _register_ddp_hooks(self) -> None:
        self.model.register_comm_hook(state=None, hook=keep_local_gradients)


StrategyRegistry.register(
    ChainParallel.strategy_name, ChainParallel, description="DDP with independent chains per process"
)
