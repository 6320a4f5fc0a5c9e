"""Shared by the FNBG grid scripts: the paper's run proportions, per-chain accuracies, tables."""
from __future__ import annotations

import math
from pathlib import Path

import torch

from lit_bayes.callbacks import PosteriorSamples
from lit_bayes.cli import LitBayesCLI
from lit_bayes.predictive import marginal_predictive, uniform_log_weights

HERE = Path(__file__).resolve().parent
RECIPES = HERE.parent


def scaled(sweeps: int, batches_per_epoch: int) -> list[str]:
    """Overrides for a run of ``sweeps`` sweeps with the paper's proportions (1/11 burn-in,
    the last 10,000 draws or fewer) and a checkpoint about every 5,000 sweeps."""
    burn_in, epochs = sweeps // 11, math.ceil(sweeps / batches_per_epoch)
    every = min(epochs, math.ceil(5_000 / batches_per_epoch))
    return ["--trainer.max_epochs", str(epochs), "--checkpoint.every_n_epochs", str(every),
            "--model.init_args.burn_in", str(burn_in), "--samples.max_draws", str(min(10_000, sweeps - burn_in))]


@torch.no_grad()
def chain_accuracies(cli: LitBayesCLI, last: int) -> list[float]:
    """Test accuracy of every chain's own predictive: the mean of the probabilities of its
    last ``last`` kept draws (FNBG Eq. 3.6 with the 1/v factor), argmax (Eq. 3.7)."""
    (store,) = [c for c in cli.trainer.callbacks if isinstance(c, PosteriorSamples)]
    sampler, trace = cli.model, store.trace()[:, -last:]
    x, y = cli.datamodule.test_data.tensors
    out = []
    for chain in trace:
        samples = sampler.chains.unflatten(chain.to(sampler.device))
        predictive = marginal_predictive(sampler, samples, uniform_log_weights(len(chain), sampler.device),
                                         x.to(sampler.device), chunk_size=64)
        out.append(float((predictive.log_probs.argmax(-1).cpu() == y).float().mean()))
    return out


def show(title: str, header: list[str], rows: list[list]) -> None:
    print(f"\n{title}")
    print(" | ".join(f"{h:>14}" for h in header))
    for row in rows:
        print(" | ".join(f"{v:>14.4g}" if isinstance(v, float) else f"{str(v):>14}" for v in row))
