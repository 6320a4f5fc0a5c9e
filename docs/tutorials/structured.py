"""Tutorial: structured SG-MCMC (S_d-SGLD) against SGLD on a linear-regression toy.

Structured SG-MCMC (Alexos et al.) splits the parameters into groups and, at each step, takes
the gradient at composites that mix the current value of some groups with past states of the
others. The chains then sample a posterior in which the groups are independent: correlations
inside a group are kept, correlations across groups vanish, and the chains mix faster.

The toy: y = x . (1.5, -0.8, 1.3) + 0.5 + N(0, 1), 100 points whose covariates share a factor
(so the exact posterior correlates w1 with w2 and w1 with w3), a linear model (w1, w2, w3, b)
with a N(0, 1) prior. Plain SGLD, S-SGLD and S_d-SGLD with the groups (w1, w2) and (w3, b) run
16 chains each; the script prints the sampled correlations beside the exact posterior's.

    python docs/tutorials/structured.py            # full size
    python docs/tutorials/structured.py --quick    # reduced size, for CI
"""
from __future__ import annotations

import argparse
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from lit_bayes import SGMCMC, Gaussian, GaussianPrior, StructuredSGMCMC
from lit_bayes.callbacks import PosteriorSamples
from lit_bayes.data import CorrelatedLinearRegression

GROUPS = [0, 0, 1, 1]  # flat parameter order of nn.Linear(3, 1): w1, w2, w3, b


def exact_correlation(data: CorrelatedLinearRegression) -> torch.Tensor:
    """Correlation matrix of the conjugate posterior of (w1, w2, w3, b): prior N(0, I), noise variance 1."""
    x, y = data.train_data.tensors
    design = torch.cat([x, torch.ones(len(x), 1)], dim=1).double()
    cov = torch.linalg.inv(design.T @ design + torch.eye(4, dtype=torch.float64))
    return cov / torch.outer(cov.diag().sqrt(), cov.diag().sqrt())


def sampled_correlation(trace: torch.Tensor) -> torch.Tensor:
    """Correlation matrix of the kept draws ``(chains, draws, 4)``, within chains (chain means removed)."""
    centred = (trace - trace.mean(dim=1, keepdim=True)).reshape(-1, trace.shape[-1]).double()
    return torch.corrcoef(centred.T)


def model() -> tuple[nn.Module, Gaussian, GaussianPrior]:
    """The linear model, its likelihood (noise variance 1, known) and its N(0, 1) prior, fresh for each sampler."""
    return nn.Linear(3, 1), Gaussian(noise_std=1.0), GaussianPrior(variance=1.0)


def run(sampler: SGMCMC, name: str, steps: int, data: CorrelatedLinearRegression, out: Path) -> torch.Tensor:
    """Fit ``sampler`` for ``steps`` full-batch steps and return its kept draws ``(chains, draws, 4)``."""
    samples = PosteriorSamples(max_draws=steps)
    trainer = L.Trainer(max_epochs=steps, callbacks=[samples], logger=CSVLogger(out, name=name),
                        limit_val_batches=0, log_every_n_steps=100, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(sampler, datamodule=data)
    return samples.trace()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced size (a few seconds)")
    parser.add_argument("--out", type=Path, default=Path("runs/tutorials/structured"), help="log directory")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    steps = 400 if args.quick else 4000  # full batch: one step per epoch
    burn_in = steps // 8

    data = CorrelatedLinearRegression(covariate_corr=0.8, num_train=100, num_val=10, num_test=10, seed=2)
    data.setup()
    common = dict(stepper="sgld", step_size=5e-4, num_chains=16, burn_in=burn_in, seed=2)
    structure = dict(partition="user", group_ids=GROUPS,  # groups (w1, w2) and (w3, b)
                     buffer_size=1000, buffer_start=burn_in, buffer_init="warm_start")  # plain SGLD during burn-in
    samplers = {
        "SGLD": SGMCMC(*model(), **common),
        "S-SGLD": StructuredSGMCMC(*model(), **common, **structure, mode="structured"),  # M = 2 composites
        "S_d-SGLD": StructuredSGMCMC(*model(), **common, **structure,  # K = 4 random Bernoulli masks
                                     mode="dropout", mask="bernoulli", keep_prob=0.5, num_masks=4),
    }
    rows = {"exact": exact_correlation(data)}
    for name, sampler in samplers.items():
        rows[name] = sampled_correlation(run(sampler, name, steps, data, args.out))
    print(f"\n{'':<9} {'corr(w1, w2)':>12} {'corr(w1, w3)':>12}")
    for name, corr in rows.items():
        print(f"{name:<9} {corr[0, 1]:12.2f} {corr[0, 2]:12.2f}")


if __name__ == "__main__":
    main()
