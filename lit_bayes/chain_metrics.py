"""Per-chain figures of a finished run, read from its kept draws and checkpoint (FNBG spec §4,
E1 / E6: the papers quote the median over chains of each chain's own test accuracy).

    run = lit_bayes.load_run("runs/xor_nbg_deep/version_0")
    chain_accuracies(run, last=10_000)     # [acc of chain 0, acc of chain 1, ...]
    chain_acceptance("runs/xor_nbg_deep/version_0/checkpoints/last.ckpt")
    chain_node_acceptance("runs/xor_nbg_deep/version_0/checkpoints/last.ckpt")   # {"net.layers.0.0": [...], ...}
"""
from __future__ import annotations

import os

import torch
from lightning.pytorch import LightningDataModule
from torchmetrics.classification import MulticlassAccuracy

from lit_bayes.callbacks.acceptance_monitor import AcceptanceMonitor
from lit_bayes.run_loading import RunPosterior
from lit_bayes.validation import check_int

__all__ = ["chain_acceptance", "chain_accuracies", "chain_node_acceptance"]


@torch.no_grad()
def chain_accuracies(run: RunPosterior, last: int | None = None, datamodule: LightningDataModule | None = None,
                     chunk_size: int | None = None) -> list[float]:
    """The test accuracy (a fraction) of every chain's own posterior predictive: the class
    probabilities averaged over the chain's last ``last`` kept draws (default: all of them; FNBG
    Eq. 3.6 with the 1/v factor), argmax (Eq. 3.7), scored by torchmetrics' ``MulticlassAccuracy``
    as :class:`~lit_bayes.callbacks.UncertaintyMetrics` scores the pooled predictive. The test split
    is the DataModule's (default: the run's own, rebuilt from its config)."""
    module = run.module
    if module.likelihood.task != "classification":
        raise ValueError(f"chain_accuracies needs a classification likelihood, the run at {run.run_dir} has "
                         f"{type(module.likelihood).__name__}")
    if module.predict_with_current_state or not module.keeps_draws:
        raise ValueError(f"chain_accuracies needs a run that kept per-chain draws; {type(module).__name__} predicts "
                         "with its current state")
    chains = module.num_chains
    if run.num_draws % chains:
        raise ValueError(f"the run at {run.run_dir} kept {run.num_draws} draws, not a multiple of its {chains} chains")
    per_chain = run.num_draws // chains
    last = per_chain if last is None else check_int("last", last, 1)
    if last > per_chain:
        raise ValueError(f"last={last} exceeds the {per_chain} draws each chain of the run at {run.run_dir} kept")
    data = run.datamodule() if datamodule is None else datamodule
    data.setup("test")
    batches = list(data.test_dataloader())
    accuracies = []
    for chain in range(chains):
        rows = slice((chain + 1) * per_chain - last, (chain + 1) * per_chain)  # draws are chain-major
        own = run.equally_weighted(rows)
        metric = MulticlassAccuracy(module.likelihood.num_classes, average="micro")
        for x, y in batches:
            metric.update(own.predict(x, chunk_size=chunk_size, transformed=True).probs.cpu(), y.cpu())
        accuracies.append(float(metric.compute()))
    return accuracies


def _acceptance_counts(checkpoint: str | os.PathLike) -> dict:
    """The :class:`~lit_bayes.callbacks.AcceptanceMonitor`'s last counts in ``checkpoint``: ``accepted``
    ``(C, blocks)``, ``proposed`` (per block), a ``nodes`` and a ``layers`` label per block."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    monitor = state.get("callbacks", {}).get(AcceptanceMonitor().state_key) or {}
    counts = monitor.get("last")
    if counts is None:
        raise ValueError(f"checkpoint {checkpoint} holds no acceptance counts: fit with the AcceptanceMonitor "
                         "callback and a Metropolis-type sampler")
    return counts


def _block_rates(counts: dict) -> torch.Tensor:
    """Every chain's acceptance rate of every block, ``(C, blocks)``, float64."""
    return counts["accepted"].double() / max(int(counts["proposed"]), 1)


def chain_acceptance(checkpoint: str | os.PathLike) -> list[float]:
    """Every chain's Metropolis acceptance rate over all of a run's steps (burn-in included): its
    accepted proposals averaged over the blocks, over the proposals per block, as the run's
    :class:`~lit_bayes.callbacks.AcceptanceMonitor` last saw them (its state in ``checkpoint``)."""
    return _block_rates(_acceptance_counts(checkpoint)).mean(1).tolist()


def chain_node_acceptance(checkpoint: str | os.PathLike) -> dict[str, list[float]]:
    """Every chain's acceptance rate at every node (FNBG Fig. 3a's boxplots are of these, over chains), over
    all of a run's steps as :func:`chain_acceptance`: node label (``"<layer>.<node>"``, in the network's
    order) to the per-chain rates, a node's rate being the mean over its blocks (one block per node for NBG)."""
    counts = _acceptance_counts(checkpoint)
    rates = _block_rates(counts)
    nodes = list(dict.fromkeys(counts["nodes"]))
    return {node: rates[:, [b for b, label in enumerate(counts["nodes"]) if label == node]].mean(1).tolist()
            for node in nodes}
